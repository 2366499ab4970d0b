"""Hazmat: the small blocks of a schema encoded in one pass instead of one fused pass each.

.. warning::
    Low-level building block of :meth:`~securefgl.protocols.encoding.SumSchema.encode_into`; not a
    general-purpose API.

A contribution has a few large blocks (weight matrices) and many small ones: biases, counts, the dozen scalars
of an evaluation sum. The per-block path (:func:`~securefgl.protocols._rounding.encode_real_into` for reals,
:func:`~securefgl.protocols._validation.validate_block` for counts) costs 9-20 us a block whatever its size, which
made the small blocks of a FedAvg upload and its evaluation rider cost as much as the 92,231-element weight matrix
(measured inside a 100-client ``securefgl run``: 95 us for the rider's 14 scalars, 57 us for the four small blocks
of the training sum, 115 us for the matrix). :class:`SmallBlocks` gathers every small block into one float64
vector and checks and encodes it with a handful of numpy calls.

The batch takes the common case only and says so: every value finite, within its bound (counts in
:math:`[0, B]`), of an accepted dtype and on the grid (``scale * x`` integral: grid-rounded uploads, and every
count). Then the words are exactly what the per-block path writes (on-grid values draw no rounding bits
there either), with no clipping. Otherwise :meth:`SmallBlocks.encode_into` writes nothing and returns
``False``, and the caller runs the per-block path, which clips, rounds, or raises the error naming the block:
the result never depends on which path ran.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch

from securefgl.protocols._blocks import BlockSpec

__all__ = ["MAX_SMALL_BLOCK", "SmallBlocks"]

#: Blocks of at most this many elements are encoded in the batch.
MAX_SMALL_BLOCK = 4096

# dtype kinds the batch takes, as the per-block path (which accepts or rejects anything else by name)
_KINDS = {"real": "fiu", "count": "fiub"}


class SmallBlocks:
    """The blocks of at most :data:`MAX_SMALL_BLOCK` elements whose every encoding is exact in the batch.

    A block joins when its scale is at least 1 and :math:`B \\cdot s` fits both a float64 integer and a
    signed word of the ring (so the float value, its scaled value and the word are each exact).

    Args:
        blocks: the schema's blocks, in order.
        slices: where each block lies in the flat vector.
        scales: each block's scale :math:`s_b` (1 for counts).
        word_bits: 32 or 64, the ring's machine word.
    """

    def __init__(
        self,
        blocks: Sequence[BlockSpec],
        slices: Mapping[str, slice],
        scales: Mapping[str, float],
        word_bits: int,
    ) -> None:
        limit = float(2 ** min(53, word_bits - 1))
        self.specs: tuple[BlockSpec, ...] = tuple(
            b
            for b in blocks
            if b.size <= MAX_SMALL_BLOCK and scales[b.name] >= 1.0 and b.bound * scales[b.name] < limit
        )
        self.names: frozenset[str] = frozenset(b.name for b in self.specs)
        self._kinds = tuple(_KINDS[b.kind] for b in self.specs)
        sizes = [b.size for b in self.specs]
        self.index = np.concatenate(
            [np.arange(slices[b.name].start, slices[b.name].stop) for b in self.specs] or [np.zeros(0, int)]
        )
        self.scale = np.repeat([scales[b.name] for b in self.specs], sizes).astype(np.float64)
        self.low = np.repeat([0.0 if b.kind == "count" else -b.bound for b in self.specs], sizes)
        self.high = np.repeat(
            [float(int(b.bound)) if b.kind == "count" else b.bound for b in self.specs], sizes
        ).astype(np.float64)

    def _values(self, contribution: Mapping[str, Any]) -> list[np.ndarray] | None:
        """Each block's flat values, or ``None`` when one is not of a shape and dtype the batch takes."""
        parts: list[np.ndarray] = []
        for spec, kinds in zip(self.specs, self._kinds, strict=True):
            value = contribution[spec.name]
            if isinstance(value, torch.Tensor):
                try:  # refuses a tensor that requires grad, lives off the CPU or has no numpy dtype
                    arr = value.numpy()
                except (RuntimeError, TypeError):
                    return None
            elif isinstance(value, np.ndarray):
                arr = value
            else:
                return None
            if arr.dtype.kind not in kinds or arr.shape != spec.shape:
                return None
            parts.append(arr.reshape(-1))
        return parts

    def encode_into(self, contribution: Mapping[str, Any], words: np.ndarray) -> bool:
        """Write every small block's words into ``words`` (the flat ``int32``/``int64`` view) and return
        ``True``, or write nothing and return ``False`` (some value needs the per-block path: see the module
        docstring). ``contribution`` must hold every block (checked by the caller)."""
        if not self.specs:
            return False
        parts = self._values(contribution)
        if parts is None:
            return False
        x = np.concatenate(parts, dtype=np.float64, casting="unsafe")
        y = x * self.scale  # exact: a power of two, and |x| <= B once checked below
        # NaN fails every comparison; an integer dtype above 2^53 rounds to a float above the bound
        if not (np.all(x >= self.low) and np.all(x <= self.high) and np.array_equal(np.floor(y), y)):
            return False
        words[self.index] = y.astype(words.dtype)
        return True
