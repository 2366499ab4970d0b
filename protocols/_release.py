"""The release rules shared by every protocol (schema, block and row level), applied to decoded sums.

Used by :meth:`securefgl.protocols.encoding.SumSchema.release`, which documents the rules.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import torch

from securefgl.errors import EncodingError, ReleaseRefusedError
from securefgl.protocols._blocks import BlockSpec
from securefgl.protocols.sums import Sums

__all__ = ["release_sums"]


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
