"""Hazmat: fused stochastic rounding, fixed-point encoding and writing into ring words, in one pass.

The rounding bits are an AES-256-CTR keystream under a 256-bit key from the OS CSPRNG (one key per
encoding source, drawn in bulk, never a numpy or torch generator). A real block is processed in chunks
that stay in cache: scale by :math:`s = 2^f` (exact), floor, and round up iff a uniform word
:math:`U \\in [0, 2^w)` is below :math:`\\lfloor 2^w (y - \\lfloor y \\rfloor) \\rfloor`, with
:math:`w = 32` bits per element for ``float32`` input (computed in ``float32``, never through
``float64``) and :math:`w = 64` for ``float64``. Rounding works on :math:`|y|` and restores the sign,
:math:`\\mathrm{SR}(y) = \\operatorname{sign}(y)\\,\\mathrm{SR}(|y|)` (the same distribution), so the
fraction :math:`|y| - \\lfloor |y| \\rfloor` is exact in the input's float type. The rounding is unbiased
whenever that fraction has at most :math:`w` bits below the point (every :math:`|y| \\ge 2^{-9}` for
``float32``, :math:`2^{-12}` for ``float64``); otherwise it is biased towards zero by less than
:math:`2^{-w}` of a step. The error of one element stays in :math:`(-\\Delta, \\Delta)`.
"""

from __future__ import annotations

import hashlib
import os
from typing import Any

import numpy as np
from cryptography.hazmat.primitives.ciphers import Cipher, CipherContext, algorithms, modes

from securefgl.errors import ConfigError
from securefgl.protocols._buffers import recycled
from securefgl.protocols._prg import KEY_BYTES, MAX_BLOCKS_PER_KEY, derive_key, zero_bytes

__all__ = ["CHUNK", "RoundingBits", "encode_real_into"]

#: Elements per chunk of the fused pass (a few 64-128 KiB buffers: they stay in L2).
CHUNK = 32768
_WORD: dict[np.dtype[Any], np.dtype[Any]] = {
    np.dtype(np.float32): np.dtype(np.uint32),
    np.dtype(np.float64): np.dtype(np.uint64),
}


class RoundingBits:
    """Uniform rounding words from an AES-256-CTR keystream, continued across calls.

    Args:
        key: 32-byte key; ``None`` (default) draws one from the OS CSPRNG (``os.urandom``).

    Raises:
        ConfigError: a key of the wrong length, or more than :data:`MAX_BLOCKS_PER_KEY` blocks drawn.
    """

    def __init__(self, key: bytes | None = None) -> None:
        if key is None:
            key = os.urandom(KEY_BYTES)
        if not isinstance(key, (bytes, bytearray)) or len(key) != KEY_BYTES:
            raise ConfigError(f"rounding key must be {KEY_BYTES} bytes")
        self._enc: CipherContext = Cipher(algorithms.AES(bytes(key)), modes.CTR(bytes(16))).encryptor()
        self._blocks = 0
        self.insecure = False

    @classmethod
    def insecure_seeded(cls, seed: bytes | int, label: str = "") -> RoundingBits:
        """INSECURE, tests only: a reproducible stream from ``seed`` (anyone knowing it knows the bits)."""
        if isinstance(seed, int) and not isinstance(seed, bool) and seed >= 0:
            seed = seed.to_bytes(32, "big")
        if not isinstance(seed, (bytes, bytearray)) or not seed:
            raise ConfigError(f"insecure seed must be non-empty bytes or a non-negative int, got {seed!r}")
        material = hashlib.sha256(bytes(seed)).digest()
        out = cls(derive_key(material, "insecure-rounding", label=label))
        out.insecure = True
        return out

    def fill(self, out: np.ndarray) -> np.ndarray:
        """Overwrite the C-contiguous ``out`` with the next keystream bytes."""
        n = out.nbytes
        self._blocks += -(-n // 16)
        if self._blocks > MAX_BLOCKS_PER_KEY:
            raise ConfigError("rounding key exhausted: draw a new RoundingBits")
        self._enc.update_into(zero_bytes(n), out.view(np.uint8).data)
        return out

    def __repr__(self) -> str:
        return f"RoundingBits(insecure={self.insecure})"


def encode_real_into(
    x: np.ndarray, scale: float, dst: np.ndarray, bits: RoundingBits, bound: float | None
) -> bool:
    """Stochastically round ``scale * x`` to integers written into ``dst`` (two's complement words).

    A chunk whose values all lie on the grid (``scale * x`` integral, as grid-rounded uploads are) is copied
    without drawing rounding bits: stochastic rounding of an integer is that integer.

    Args:
        x: flat ``float32`` or ``float64`` values (contiguous).
        scale: :math:`2^f` with :math:`f \\ge 0` (multiplication is exact).
        dst: flat ``int32``/``int64`` view of ring words, as long as ``x`` (not reduced: the caller
            reduces mod :math:`2^k` once).
        bits: the rounding keystream.
        bound: when given, stop and return ``False`` at the first chunk with a value outside
            ``[-bound, bound]`` or not finite (the caller then validates and clips the block itself).

    Returns:
        ``True`` if the whole block was encoded.
    """
    wt = x.dtype
    word = _WORD[wt]
    # chunk buffers that stay in cache, recycled from call to call (fresh ones cost page faults each time)
    y, fl = recycled(CHUNK, wt), recycled(CHUNK, wt)
    thr, u = recycled(CHUNK, word), recycled(CHUNK, word)
    up = recycled(CHUNK, np.bool_)
    two_w = float(2 ** (8 * word.itemsize))
    # float32 values within the bound fit int32: casting to int64 words through it is exact and 1.4x faster
    via32 = wt == np.float32 and dst.dtype == np.int64 and bound is not None and bound * scale < 2**31
    for i in range(0, x.shape[0], CHUNK):
        xc = x[i : i + CHUNK]
        k = xc.shape[0]
        if bound is not None and not _in_bound(xc, bound):
            return False
        yc, flc, tc, uc, upc = y[:k], fl[:k], thr[:k], u[:k], up[:k]
        dc = dst[i : i + k]
        np.multiply(xc, scale, out=yc)
        # Already on the grid (grid-rounded uploads): floor(y) == y (exact, in the input's float type), so the
        # words are y itself, nothing to round and no bits drawn.
        np.floor(yc, out=flc)
        np.equal(flc, yc, out=upc)
        if upc.all():
            if via32:
                small = tc.view(np.int32)
                np.copyto(small, yc, casting="unsafe")
                np.copyto(dc, small)
            else:
                np.copyto(dc, yc, casting="unsafe")
            continue
        # SR(y) = sign(y) SR(|y|) in distribution; on |y| the fraction |y| - floor(|y|) is exact
        np.abs(yc, out=yc)
        np.floor(yc, out=flc)
        np.subtract(yc, flc, out=yc)
        np.multiply(yc, two_w, out=tc, casting="unsafe")  # floor(2^w * frac)
        bits.fill(uc)
        np.less(uc, tc, out=upc)
        np.add(flc, upc, out=flc)  # exact: a fraction exists only below 2^24 (float32) / 2^53
        np.copysign(flc, xc, out=flc)
        np.copyto(dc, flc, casting="unsafe")
    return True


def _in_bound(xc: Any, bound: float) -> bool:
    lo, hi = float(xc.min()), float(xc.max())  # NaN propagates and fails both comparisons
    return -bound <= lo and hi <= bound
