"""One protocol case of the side-by-side benchmarks (:mod:`securefgl.benchmarking`, which re-exports
:func:`run_protocol_case`): the aggregation run, its PRG floors timed right after each repeat, and the row read
from its transcript."""

from __future__ import annotations

import gc
import time
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from securefgl._bench_floors import plaintext_sum_seconds, prg_floor_samples
from securefgl.errors import ConfigError

__all__ = ["run_protocol_case"]


def _make_case(n: int, d: int, seed: int) -> tuple[Any, dict[int, dict[str, np.ndarray]]]:
    from securefgl.protocols.encoding import BlockSpec, SumSchema

    schema = SumSchema([BlockSpec("x", (d,), bound=1.0)], max_clients=n, precision=2.0**-20)
    rng = np.random.default_rng(seed)
    contributions = {c: {"x": rng.uniform(-1.0, 1.0, size=d).astype(np.float32)} for c in range(n)}
    return schema, contributions


def _input_phase(transcript: Any, clients: Sequence[int]) -> str | None:
    """The phase in which clients sent the most bytes: their upload of the (masked) vector."""
    per_phase: dict[str, int] = {}
    cset = set(clients)
    for (party, phase), nbytes in transcript.bytes_sent.items():
        if party in cset:
            per_phase[phase] = per_phase.get(phase, 0) + nbytes
    return max(per_phase, key=per_phase.__getitem__) if per_phase else None


def _phases_of(proto: Any) -> list[str]:
    """The protocol's stage names: a ``stages``/``STAGES``/``Stage`` attribute of the object, its class
    or the module of any class in its MRO (``SecAgg`` inherits ``SecAggPlus``'s stages)."""
    import sys

    owners: list[Any] = [proto]
    owners += [sys.modules.get(cls.__module__) for cls in type(proto).__mro__]
    for owner in owners:
        for attr in ("stages", "STAGES", "Stage"):
            v = getattr(owner, attr, None)
            if not v or isinstance(v, (str, bytes)):
                continue
            try:
                return [str(getattr(p, "value", p)) for p in v]
            except TypeError:
                continue
    return []


def _dropout_plan(proto: Any, clients: list[int], fraction: float, rng: np.random.Generator) -> Any:
    """Drop ``fraction`` of the clients at the phase where they would upload their input.

    For masking protocols this is the expensive case for the server: the dropped clients have shared
    their keys, so their pairwise masks must be reconstructed and removed.
    """
    from securefgl.protocols.base import DropoutPlan

    if fraction <= 0:
        return None
    phase = getattr(proto, "input_phase", None)
    if phase is None:
        phases = _phases_of(proto)
        hints = ("masked_input", "input", "upload", "encrypt")
        phase = next(
            (p for p in phases if any(h in p.lower() for h in hints)), phases[0] if phases else "any"
        )
    return DropoutPlan.random(clients, fraction, rng, phase=str(getattr(phase, "value", phase)))


def _neighbours(transcript: Any, n: int) -> int:
    """Pairwise-mask neighbours per client, excluding itself (the protocol's graph degree)."""
    for key in ("degree", "num_neighbors", "num_neighbours"):
        v = transcript.extra.get(key)
        if isinstance(v, (int, np.integer)):
            return min(int(v), n - 1)
    return n - 1


def run_protocol_case(
    protocol: str,
    n: int,
    d: int,
    dropout: float,
    *,
    seed: int = 0,
    repeats: int = 1,
    prg: str = "aes256-ctr",
    options: Mapping[str, Any] | None = None,
    baselines: bool = True,
    warmup: int = 1,
) -> dict[str, Any]:
    """Run one aggregation ``warmup`` times untimed, then ``repeats`` times, each followed at once by its PRG
    floors; one row.

    The warm-up run (no dropouts) is what the floors get too: the first run in a process pays for the buffers,
    expanders and thread pools that every later round reuses.

    Timings are medians over the repeats (``*_range``: min and max); the ratios to the floors are the
    medians of the per-repeat ratios (each pairs a run with the floor timed right after it, so a noisy
    stretch of the machine hits both). ``max_abs_error`` is measured against the float64 sum of the
    survivors' contributions; ``stated_error_bound`` is what the protocol promises.
    """
    from securefgl.protocols.base import SERVER

    if repeats < 1:
        raise ConfigError(f"repeats must be >= 1, got {repeats}")
    if warmup < 0:
        raise ConfigError(f"warmup must be >= 0, got {warmup}")
    schema, contributions = _make_case(n, d, seed)
    clients = list(contributions)
    opts = dict(options or {})
    runs: list[dict[str, Any]] = []
    for _ in range(warmup):  # untimed, as the floors' first expansion is: buffers, expanders, first calls
        _build(protocol, opts).aggregate(schema, contributions, round_index=repeats)
    for rep in range(repeats):
        proto = _build(protocol, opts)
        plan = _dropout_plan(proto, clients, dropout, np.random.default_rng(seed + 1 + rep))
        gc.collect()
        t0 = time.perf_counter()
        sums, tr = proto.aggregate(schema, contributions, dropouts=plan, round_index=rep)
        wall = time.perf_counter() - t0
        row = _row_from_transcript(protocol, proto, tr, sums, schema, n, d, dropout, wall, SERVER)
        row["max_abs_error"] = _measured_error(schema, contributions, tr.survivors, sums)
        if baselines and row["masks"]:
            _time_floors(row, d, schema.ring_bits, prg, int(getattr(proto, "workers", 1)))
        runs.append(row)
        del sums, tr
    best = _median_row(runs)
    if baselines:
        vecs = [schema.pack(contributions[c])[0] for c in clients[: best["survivors"]]]
        best["plain_sum_ms"] = 1e3 * plaintext_sum_seconds(vecs, repeats=repeats)
        del vecs
        best["server_vs_plain_sum"] = _ratio(best["server_ms"], best["plain_sum_ms"])
    return best


#: Per-run timings summarised as median and [min, max] over the repeats.
_TIMED = (
    "wall_s",
    "client_ms",
    "client_input_ms",
    "client_encode_ms",
    "client_mask_ms",
    "server_ms",
    "server_sum_unmask_ms",
    "server_other_ms",
    "prg_floor_client_ms",
    "prg_floor_server_ms",
    "client_vs_prg",
    "mask_vs_prg",
    "sum_unmask_vs_prg",
)


def _time_floors(row: dict[str, Any], d: int, ring_bits: int, prg: str, threads: int = 1) -> None:
    """The client and server PRG floors of this run, timed right after it (median of 3 each): the faster of
    one thread and as many threads as the protocol expands its masks with (``workers``;
    :func:`prg_floor_samples`), since on a short vector the hand-off to a second thread costs more than it
    saves."""
    row["server_prg_streams"] = row["survivors"] + row["dropped_after_keys"] * min(
        row["neighbours"], row["survivors"]
    )
    row["prg_threads"] = threads

    def floor(streams: int) -> list[float]:
        samples = [
            prg_floor_samples(streams, d, ring_bits, algorithm=prg, repeats=3, threads=t)
            for t in {1, threads}
        ]
        return [min(ts) for ts in zip(*samples, strict=True)]

    fc, fs = floor(row["neighbours"] + 1), floor(row["server_prg_streams"])
    row["prg_floor_client_ms"] = 1e3 * float(np.median(fc))
    row["prg_floor_server_ms"] = 1e3 * float(np.median(fs))
    row["client_vs_prg"] = _ratio(row["client_input_ms"], row["prg_floor_client_ms"])
    if row["client_mask_ms"] is not None:
        row["mask_vs_prg"] = _ratio(row["client_mask_ms"], row["prg_floor_client_ms"])
    row["sum_unmask_vs_prg"] = _ratio(row["server_sum_unmask_ms"], row["prg_floor_server_ms"])


def _median_row(runs: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The first run's row with every timing replaced by its median over ``runs`` (plus its range)."""
    out = dict(runs[0])
    for key in _TIMED:
        vals = [r[key] for r in runs if r.get(key) is not None]
        if not vals:
            out.setdefault(key, None)
            continue
        out[key] = float(np.median(vals))
        out[f"{key}_range"] = [float(min(vals)), float(max(vals))]
    errs = [r["max_abs_error"] for r in runs if r.get("max_abs_error") is not None]
    out["max_abs_error"] = max(errs) if errs else None
    out["repeats"] = len(runs)
    return out


def _measured_error(
    schema: Any, contributions: Mapping[int, Any], survivors: Sequence[int], sums: Any
) -> float:
    """Largest absolute difference between the released sums and the float64 sum of the survivors."""
    if not survivors:
        return 0.0
    ref = np.zeros(schema.length, dtype=np.float64)
    for c in survivors:
        np.add(ref, schema.pack(contributions[c])[0], out=ref)
    err = 0.0
    for name in schema.names:
        got = np.asarray(sums[name], dtype=np.float64).reshape(-1)
        if got.size:
            err = max(err, float(np.max(np.abs(got - ref[schema.slices[name]]))))
    return err


def _build(protocol: str, options: dict[str, Any]) -> Any:
    """The protocol with ``record_views=False`` when it has that option (byte counts are still kept)."""
    import inspect

    from securefgl.protocols.registry import _resolve, get_protocol, parse_protocol

    opts = dict(options)
    try:
        params = inspect.signature(_resolve(parse_protocol(protocol).base)).parameters
    except (ConfigError, TypeError, ValueError):
        params = {}
    if "record_views" in params and "record_views" not in opts:
        opts["record_views"] = False
    return get_protocol(protocol, **opts)


def _ratio(a: float, b: float) -> float | None:
    return round(a / b, 2) if b > 0 else None


def _row_from_transcript(
    name: str,
    proto: Any,
    tr: Any,
    sums: Any,
    schema: Any,
    n: int,
    d: int,
    dropout: float,
    wall: float,
    server: str,
) -> dict[str, Any]:
    clients = list(tr.invited) or list(range(n))
    phases_c: dict[str, list[float]] = {}
    per_client_total: dict[int, float] = {}
    server_ms = 0.0
    server_phase_ms: dict[str, float] = {}
    for (party, phase), sec in tr.party_seconds.items():
        if party == server:
            server_ms += 1e3 * sec
            server_phase_ms[phase] = server_phase_ms.get(phase, 0.0) + 1e3 * sec
        else:
            phases_c.setdefault(phase, []).append(1e3 * sec)
            per_client_total[party] = per_client_total.get(party, 0.0) + 1e3 * sec
    input_phase = _input_phase(tr, clients)
    # the server's "sum + unmask" time: its phases from the input upload on (chronological order)
    order = list(server_phase_ms)
    tail = order[order.index(input_phase) :] if input_phase in order else order
    server_sum_unmask_ms = sum(server_phase_ms[p] for p in tail)
    client_phase_ms = {p: float(np.mean(v)) for p, v in phases_c.items()}
    # bytes per participating client (clients that dropped before sending anything are left out)
    active = [c for c in clients if tr.total_bytes_sent(c) or tr.total_bytes_received(c)]
    up = [tr.total_bytes_sent(c) for c in active]
    down = [tr.total_bytes_received(c) for c in active]
    masks = "degree" in tr.extra or "dead_after_sharing" in tr.extra
    neighbours = _neighbours(tr, n) if masks else 0
    dropped_phase = {int(c): str(p) for c, p in tr.dropped.items()}
    dropped_after_keys = sum(
        1 for p in dropped_phase.values() if input_phase is not None and p == input_phase
    )
    steps = tr.extra.get("client_masked_input_seconds", {})  # masking protocols: per-step medians

    def step_ms(key: str) -> float | None:
        return 1e3 * float(steps[key]["median"]) if key in steps else None

    return {
        "protocol": name,
        "n": n,
        "d": d,
        "dropout": dropout,
        "client_encode_ms": step_ms("encode"),
        "client_mask_ms": step_ms("mask"),
        "ring_bits": schema.ring_bits,
        "survivors": len(tr.survivors),
        "dropped": len(tr.dropped),
        "dropped_after_keys": dropped_after_keys,
        "masks": bool(masks),
        "neighbours": int(neighbours),
        "input_phase": input_phase,
        "client_phase_ms": {k: round(v, 3) for k, v in client_phase_ms.items()},
        "client_ms": float(np.mean(list(per_client_total.values()))) if per_client_total else 0.0,
        "client_input_ms": client_phase_ms.get(input_phase, 0.0) if input_phase else 0.0,
        "server_ms": server_ms,
        "server_phase_ms": {k: round(v, 3) for k, v in server_phase_ms.items()},
        "server_sum_unmask_ms": server_sum_unmask_ms,
        "server_other_ms": server_ms - server_sum_unmask_ms,
        "wall_s": wall,
        "bytes_up_per_client": float(np.mean(up)) if up else 0.0,
        "bytes_down_per_client": float(np.mean(down)) if down else 0.0,
        "server_bytes_received": tr.total_bytes_received(server),
        "expansion_vs_float32": (float(np.mean(up)) / (4.0 * d)) if up else None,
        "stated_error_bound": max(sums.max_abs_error.values()) if sums.max_abs_error else None,
    }
