"""The release rules shared by every protocol (schema, block and row level), applied to decoded sums.

Used by :meth:`securefgl.protocols.encoding.SumSchema.release`, which documents the rules.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import torch

from securefgl.errors import ConfigError, EncodingError, ReleaseRefusedError
from securefgl.protocols._blocks import BlockSpec
from securefgl.protocols.sums import Sums

__all__ = [
    "DEFAULT_MIN_CONTRIBUTORS",
    "check_min_contributors",
    "check_sum_range",
    "refuse_small_sum",
    "release_sums",
]

#: The fewest inputs any secure protocol releases a sum of, unless the caller says otherwise: a "sum" of
#: one input is that client's input.
DEFAULT_MIN_CONTRIBUTORS = 2


def check_min_contributors(value: object) -> int:
    """Validate a protocol's ``min_contributors`` option (an integer >= 1).

    Raises:
        ConfigError: anything else.
    """
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or int(value) < 1:
        raise ConfigError(f"min_contributors must be an integer >= 1, got {value!r}")
    return int(value)


def refuse_small_sum(
    n: int, protocol_min: int, schema_min: int, phase: str, party: str | int | None = None
) -> None:
    """Raise :class:`ReleaseRefusedError` unless ``n >= max(protocol_min, schema_min)``."""
    need = max(int(protocol_min), int(schema_min))
    if n < need:
        raise ReleaseRefusedError(
            f"a sum of {n} input(s) is refused: at least {need} are required (protocol min_contributors="
            f"{protocol_min}, schema min_contributors={schema_min}); nothing is revealed",
            party=party,
            phase=phase,
        )


def check_sum_range(
    blocks: Sequence[BlockSpec],
    values: Mapping[str, torch.Tensor | np.ndarray],
    num_contributors: int,
    max_abs_error: Mapping[str, float],
    clip_counts: Mapping[str, int],
    phase: str,
) -> None:
    r"""Refuse a decoded sum that honest inputs cannot produce: an element beyond
    :math:`n \cdot B` (plus the stated error) or a clip count beyond :math:`n` times the block size.

    Catches a malicious client whose input left the public bounds by more than the others' slack; it
    cannot catch one that stays inside them (see SECURITY.md).

    Raises:
        ReleaseRefusedError: naming the block, how many elements are out of range and the limit.
    """
    n = int(num_contributors)
    for spec in blocks:
        limit = n * float(spec.bound) + float(max_abs_error.get(spec.name, 0.0))
        raw = values[spec.name]
        # numpy, not torch: on a loaded machine torch's intra-op threads stall this check for milliseconds.
        v = raw.detach().cpu().numpy() if isinstance(raw, torch.Tensor) else np.asarray(raw)
        cap = limit * (1 + 1e-9) + 1e-9
        # two reductions and no vector-sized temporary; the elements are counted only when one is out
        bad = 0
        if v.size and max(float(v.max()), -float(v.min())) > cap:
            bad = int(np.count_nonzero(np.abs(v, dtype=np.float64) > cap))
        if bad:
            raise ReleaseRefusedError(
                f"block {spec.name!r}: {bad} element(s) of the decoded sum exceed n * bound = {n} * "
                f"{spec.bound} (+ error): some input was outside the public bounds; nothing is released",
                phase=phase,
            )
        count = int(clip_counts.get(spec.name, 0))
        if not 0 <= count <= n * spec.size:
            raise ReleaseRefusedError(
                f"block {spec.name!r}: clip count {count} is outside [0, {n * spec.size}] (n * block size); "
                "some input carried forged counts; nothing is released",
                phase=phase,
            )


def release_sums(
    blocks: Sequence[BlockSpec],
    names: Sequence[str],
    min_contributors: int,
    values: Mapping[str, torch.Tensor | np.ndarray],
    num_contributors: int,
    clip_counts: Mapping[str, int] | None = None,
    max_abs_error: Mapping[str, float] | None = None,
) -> Sums:
    """Apply the release rules to ``values`` (every block of ``blocks``, named ``names``); see
    :meth:`~securefgl.protocols.encoding.SumSchema.release` for the rules, arguments and errors."""
    n = int(num_contributors)
    if n < min_contributors:
        raise ReleaseRefusedError(
            f"sum of {n} contributor(s) refused: the schema requires at least "
            f"min_contributors={min_contributors}",
            phase="release",
        )
    got = set(values)
    if got != set(names):
        raise EncodingError(
            f"release: values have blocks {sorted(got)}, expected {list(names)}", phase="release"
        )
    tensors: dict[str, torch.Tensor] = {}
    for spec in blocks:
        v = values[spec.name]
        t = torch.as_tensor(v).detach()
        if t.device.type != "cpu":
            t = t.cpu()
        if tuple(t.shape) != spec.shape:
            raise EncodingError(
                f"release: block {spec.name!r} has shape {tuple(t.shape)}, expected {spec.shape}",
                phase="release",
            )
        tensors[spec.name] = t.to(spec.out_dtype)

    withheld: dict[str, str] = {}
    for spec in blocks:
        if spec.min_contributors is not None and n < spec.min_contributors:
            withheld[spec.name] = (
                f"{n} contributor(s) < min_contributors={spec.min_contributors} for this block"
            )
    rows: dict[str, torch.Tensor] = {}
    for spec in blocks:
        if spec.counted_by is None or spec.name in withheld:
            continue
        if spec.counted_by in withheld:
            withheld[spec.name] = f"its counting block {spec.counted_by!r} was withheld"
            continue
        counts = tensors[spec.counted_by].to(torch.float64)
        mask = counts < float(spec.min_contributors or 0)
        if bool(mask.any()):
            t = tensors[spec.name].clone()
            t[mask] = float("nan")
            tensors[spec.name] = t
        rows[spec.name] = mask
    released = {k: v for k, v in tensors.items() if k not in withheld}
    return Sums(
        released,
        num_contributors=n,
        withheld=withheld,
        withheld_rows=rows,
        clip_counts={k: int(v) for k, v in (clip_counts or {}).items()},
        max_abs_error={k: float(v) for k, v in (max_abs_error or {}).items()},
    )
