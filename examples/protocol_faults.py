"""What the aggregation protocols do with bad input and faults: one case per line, with the error it raises.

Every case runs the real protocol (real X25519 keys, real shares, a real TenSEAL context). A refused input is
a typed error naming the party and the phase; a misbehaving client is excluded like a dropped one and the sum
over the others stays exact; below the threshold the run aborts with nothing revealed.

    python examples/protocol_faults.py
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from securefgl.errors import SecureFGLError
from securefgl.protocols import BlockSpec, SumSchema, get_protocol
from securefgl.protocols.base import DropoutPlan, MessageRecord

N = 5


def _schema(**kw: object) -> SumSchema:
    return SumSchema([BlockSpec("w", (4,), bound=1.0, **kw)], max_clients=8)  # type: ignore[arg-type]


def _inputs(n: int = N) -> dict[int, dict[str, np.ndarray]]:
    rng = np.random.default_rng(0)
    return {c: {"w": rng.uniform(-0.5, 0.5, 4)} for c in range(n)}


def _exact_without(contribs: dict[int, dict[str, np.ndarray]], excluded: Sequence[int], sums: object) -> str:
    truth = sum(v["w"] for c, v in contribs.items() if c not in excluded)
    err = float(np.abs(np.asarray(sums["w"]) - truth).max())  # type: ignore[index]
    return f"sum over the {len(contribs) - len(excluded)} others exact to {err:.1e}"


def _tamper(target_phase: str, sender: int, how: Callable[[bytes], Sequence[bytes]]):  # noqa: ANN202
    def hook(rec: MessageRecord) -> Sequence[bytes]:
        if rec.phase == target_phase and rec.sender == sender:
            return how(rec.payload)
        return [rec.payload]

    return hook


def case(title: str, fn: Callable[[], str]) -> None:
    """Run one case and print its outcome (the error's type and message, or what the protocol did)."""
    try:
        out = fn()
    except SecureFGLError as exc:
        out = f"{type(exc).__name__}: {exc}"
    except (ValueError, TypeError) as exc:
        out = f"{type(exc).__name__}: {exc}"
    print(f"- {title}\n    {out}")


def main() -> None:
    contribs = _inputs()

    def excluded(bad: int, value: np.ndarray, schema: SumSchema | None = None) -> Callable[[], str]:
        def go() -> str:
            data = {**contribs, bad: {"w": value}}
            sums, t = get_protocol("secagg").aggregate(schema or _schema(), data)
            return f"excluded {dict(t.excluded)}; " + _exact_without(contribs, [bad], sums)

        return go

    case("NaN in client 2's input", excluded(2, np.array([0.1, np.nan, 0, 0])))
    case("wrong shape from client 1", excluded(1, np.zeros(5)))
    case("wrong dtype (complex) from client 1", excluded(1, np.zeros(4, dtype=complex)))
    case(
        "out of range from client 0, schema says reject",
        excluded(0, np.full(4, 3.0), _schema(on_out_of_bound="reject")),
    )

    def clipped() -> str:
        sums, t = get_protocol("secagg").aggregate(_schema(), {**contribs, 0: {"w": np.full(4, 3.0)}})
        return f"clipped and counted: clip_counts={dict(t.clip_counts)}"

    case("out of range, schema says clip (default)", clipped)
    case(
        "a schema whose worst-case sum would wrap the ring",
        lambda: str(SumSchema([BlockSpec("w", (4,), bound=1e15)], max_clients=10**6, precision=1e-9)),
    )

    def garbled() -> str:
        hook = _tamper("masked_input", 3, lambda p: [p[:10] + bytes(b ^ 0xFF for b in p[10:40]) + p[40:]])
        sums, t = get_protocol("secagg", interceptor=hook).aggregate(_schema(), contribs)
        return f"excluded {dict(t.excluded)}; " + _exact_without(contribs, [3], sums)

    case("a garbled masked input from client 3", garbled)

    def truncated() -> str:
        hook = _tamper("share_keys", 1, lambda p: [p[: len(p) // 2]])
        sums, t = get_protocol("secagg", interceptor=hook).aggregate(_schema(), contribs)
        return f"excluded {dict(t.excluded)}; " + _exact_without(contribs, [1], sums)

    case("a truncated share message from client 1", truncated)

    def duplicated() -> str:
        hook = _tamper("masked_input", 2, lambda p: [p, p])
        sums, t = get_protocol("secagg", interceptor=hook).aggregate(_schema(), contribs)
        return f"excluded {dict(t.excluded)}; " + _exact_without(contribs, [2], sums)

    case("client 2 sends its input twice", duplicated)

    def dropouts(k: int) -> Callable[[], str]:
        def go() -> str:
            plan = DropoutPlan({c: "masked_input" for c in range(k)})
            sums, t = get_protocol("secagg").aggregate(_schema(), contribs, dropouts=plan)
            return f"survivors {list(t.survivors)}; " + _exact_without(contribs, list(range(k)), sums)

        return go

    case("2 of 5 drop before their masked input (threshold 3)", dropouts(2))
    case("3 of 5 drop (below the threshold)", dropouts(3))
    case(
        "CKKS: a vector longer than the configured maximum",
        lambda: str(get_protocol("ckks", max_length=2).aggregate(_schema(), contribs)),
    )
    case(
        "DP: epsilon out of range",
        lambda: str(get_protocol("secagg+dp", dp_epsilon=-1.0, dp_min_contributors=3, dp_clip_norm=1.0)),
    )
    case("unknown protocol", lambda: str(get_protocol("sekagg")))


if __name__ == "__main__":
    main()
