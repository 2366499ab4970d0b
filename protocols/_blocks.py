"""The blocks of a sum: :class:`BlockSpec` (one named tensor and its rules) and :class:`EncodedVector`.

Both are re-exported by :mod:`securefgl.protocols.encoding`, whose docstring states the encoding.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
import torch

from securefgl.errors import ConfigError

__all__ = ["BlockSpec", "EncodedVector", "dtype_name"]

_KINDS = ("real", "count")
_OOB_MODES = ("clip", "reject")
_MAX_COUNT_BOUND = 2**53  # counts must round-trip exactly through float64
_REAL_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
_COUNT_DTYPES = (torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8, *_REAL_DTYPES)


def dtype_name(dtype: torch.dtype) -> str:
    """``torch.float32`` -> ``"float32"``."""
    return str(dtype).removeprefix("torch.")


@dataclass(frozen=True)
class BlockSpec:
    """One named block of a sum: its shape, kind, public bound and release rules.

    Args:
        name: the block's name (a key of every contribution).
        shape: the tensor shape of the block (default: required).
        kind: ``"real"`` (a float in :math:`[-B, B]`) or ``"count"`` (an integer in :math:`[0, B]`,
            encoded exactly). (default: ``"real"``)
        bound: the public clip range :math:`B` per element; for counts a whole number
            :math:`\\le 2^{53}`. (default: ``1.0``)
        on_out_of_bound: ``"clip"`` values outside the range (and count them), or ``"reject"`` the
            contribution with :class:`~securefgl.errors.EncodingError`. (default: ``"clip"``)
        min_contributors: release rule: withhold the block unless at least this many clients
            contributed; with ``counted_by``, the rule applies per row. (default: ``None``)
        counted_by: name of a ``"count"`` block of shape ``(shape[0],)`` whose *sum* is the number of
            contributors of each row of this block; rows with fewer than ``min_contributors`` are
            released as NaN and listed in :meth:`Sums.withheld_rows`. Needs ``min_contributors`` and a
            floating output dtype. (default: ``None``)
        dp: whether the distributed-DP wrapper noises (and L2-clips) this block. (default: ``False``)
        dtype: the dtype of the block in :class:`~securefgl.protocols.sums.Sums` (default:
            ``torch.float32`` for real blocks, ``torch.int64`` for counts).
    """

    name: str
    shape: tuple[int, ...]
    kind: Literal["real", "count"] = "real"
    bound: float = 1.0
    on_out_of_bound: Literal["clip", "reject"] = "clip"
    min_contributors: int | None = None
    counted_by: str | None = None
    dp: bool = False
    dtype: torch.dtype | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise ConfigError(f"block name must be a non-empty string, got {self.name!r}")
        try:
            shape = tuple(int(d) for d in self.shape)
        except (TypeError, ValueError):
            raise ConfigError(
                f"block {self.name!r}: shape must be a sequence of integers, got {self.shape!r}"
            ) from None
        if any(d < 0 for d in shape) or any(isinstance(d, bool) for d in self.shape):
            raise ConfigError(f"block {self.name!r}: shape must have non-negative sizes, got {self.shape!r}")
        object.__setattr__(self, "shape", shape)
        if self.kind not in _KINDS:
            raise ConfigError(f"block {self.name!r}: kind must be one of {list(_KINDS)}, got {self.kind!r}")
        if self.on_out_of_bound not in _OOB_MODES:
            raise ConfigError(
                f"block {self.name!r}: on_out_of_bound must be one of {list(_OOB_MODES)}, "
                f"got {self.on_out_of_bound!r}"
            )
        if isinstance(self.bound, bool) or not isinstance(self.bound, (int, float, np.integer, np.floating)):
            raise ConfigError(f"block {self.name!r}: bound must be a positive number, got {self.bound!r}")
        bound = float(self.bound)
        if not math.isfinite(bound) or bound <= 0:
            raise ConfigError(f"block {self.name!r}: bound must be positive and finite, got {self.bound!r}")
        if self.kind == "count" and (not bound.is_integer() or bound > _MAX_COUNT_BOUND):
            raise ConfigError(
                f"block {self.name!r}: a count bound must be a whole number in [1, 2**53], got {self.bound!r}"
            )
        object.__setattr__(self, "bound", bound)
        if self.min_contributors is not None and (
            isinstance(self.min_contributors, bool)
            or not isinstance(self.min_contributors, (int, np.integer))
            or self.min_contributors < 1
        ):
            raise ConfigError(
                f"block {self.name!r}: min_contributors must be None or an integer >= 1, "
                f"got {self.min_contributors!r}"
            )
        if self.counted_by is not None:
            if not isinstance(self.counted_by, str) or self.counted_by == self.name:
                raise ConfigError(
                    f"block {self.name!r}: counted_by must name another (count) block, got {self.counted_by!r}"
                )
            if self.min_contributors is None:
                raise ConfigError(
                    f"block {self.name!r}: counted_by={self.counted_by!r} needs min_contributors "
                    "(the per-row minimum)"
                )
            if len(shape) == 0:
                raise ConfigError(
                    f"block {self.name!r}: counted_by needs a block with at least one dimension"
                )
        if not isinstance(self.dp, bool):
            raise ConfigError(f"block {self.name!r}: dp must be a bool, got {self.dp!r}")
        allowed = _REAL_DTYPES if self.kind == "real" else _COUNT_DTYPES
        if self.dtype is not None and self.dtype not in allowed:
            raise ConfigError(
                f"block {self.name!r}: dtype {self.dtype!r} is not valid for a {self.kind} block; "
                f"valid: {[dtype_name(d) for d in allowed]}"
            )
        if self.counted_by is not None and not self.out_dtype.is_floating_point:
            raise ConfigError(
                f"block {self.name!r}: row-wise release (counted_by) marks withheld rows with NaN, so the "
                f"output dtype must be floating, got {dtype_name(self.out_dtype)}; set dtype=torch.float32"
            )

    @property
    def size(self) -> int:
        """Number of elements of the block."""
        return math.prod(self.shape)

    @property
    def out_dtype(self) -> torch.dtype:
        """The dtype the block has in ``Sums`` (the declared one, or the kind's default)."""
        if self.dtype is not None:
            return self.dtype
        return torch.float32 if self.kind == "real" else torch.int64

    def _canonical(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "shape": list(self.shape),
            "kind": self.kind,
            "bound": float(self.bound).hex(),
            "on_out_of_bound": self.on_out_of_bound,
            "min_contributors": self.min_contributors,
            "counted_by": self.counted_by,
            "dp": self.dp,
            "dtype": dtype_name(self.out_dtype),
        }


@dataclass
class EncodedVector:
    """A client's contribution encoded as ring elements, and what clipping did to it.

    Attributes:
        data: ``uint64`` array of length ``schema.length``, every value ``< schema.modulus``.
        clip_counts: block name -> number of elements clipped to the bound (0 when none; public,
            reported in the transcript).
    """

    data: np.ndarray
    clip_counts: dict[str, int] = field(default_factory=dict)
