"""Ring arithmetic over :math:`\\mathbb{Z}_{2^{bits}}` on ``uint64`` numpy arrays (hazmat).

.. admonition:: Hazmat

    Building blocks for protocol implementers, re-exported by :mod:`securefgl.protocols.encoding`.
    Algorithms never call them: they hand a contribution to a protocol and receive
    :class:`~securefgl.protocols.sums.Sums`.

Arrays hold elements of :math:`\\mathbb{Z}_{2^{bits}}`, :math:`1 \\le bits \\le 64`. numpy's uint64 array
arithmetic wraps mod :math:`2^{64}`, and :math:`2^{bits}` divides :math:`2^{64}`, so every operation is one
wrapping numpy operation followed by a mask: no Python loop over elements.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import numpy as np

from securefgl.errors import ConfigError, EncodingError

__all__ = [
    "centred_lift",
    "default_rng",
    "ring_add",
    "ring_from_bytes",
    "ring_from_signed",
    "ring_mask",
    "ring_neg",
    "ring_reduce",
    "ring_sub",
    "ring_sum",
]


def _check_bits(bits: int) -> int:
    if isinstance(bits, bool) or not isinstance(bits, (int, np.integer)) or not 1 <= int(bits) <= 64:
        raise ConfigError(f"ring bit width must be an integer in [1, 64], got {bits!r}")
    return int(bits)


def ring_mask(bits: int) -> np.uint64:
    """The mask :math:`2^{bits} - 1` as a ``np.uint64`` (all ones for 64 bits)."""
    bits = _check_bits(bits)
    return np.uint64((1 << bits) - 1)


def _as_ring_array(x: np.ndarray, what: str) -> np.ndarray:
    if not isinstance(x, np.ndarray) or x.dtype != np.uint64:
        got = x.dtype if isinstance(x, np.ndarray) else type(x).__name__
        raise EncodingError(f"{what} must be a numpy uint64 array of ring elements, got {got}")
    return x


def ring_reduce(x: np.ndarray, bits: int, out: np.ndarray | None = None) -> np.ndarray:
    """Reduce uint64 values mod :math:`2^{bits}` (a bitwise AND; in place when ``out is x``)."""
    _as_ring_array(x, "x")
    reduced: np.ndarray = np.bitwise_and(x, ring_mask(bits), out=out)
    return reduced


def ring_add(a: np.ndarray, b: np.ndarray, bits: int, out: np.ndarray | None = None) -> np.ndarray:
    """:math:`(a + b) \\bmod 2^{bits}`, elementwise; ``out`` may be ``a`` for an in-place add.

    Shapes:
        ``a``, ``b``, ``out``: the same shape (or broadcastable), dtype ``uint64``.
    """
    _as_ring_array(a, "a")
    _as_ring_array(b, "b")
    res: np.ndarray = np.add(a, b, out=out)
    np.bitwise_and(res, ring_mask(bits), out=res)
    return res


def ring_sub(a: np.ndarray, b: np.ndarray, bits: int, out: np.ndarray | None = None) -> np.ndarray:
    """:math:`(a - b) \\bmod 2^{bits}`, elementwise; ``out`` may be ``a``."""
    _as_ring_array(a, "a")
    _as_ring_array(b, "b")
    res: np.ndarray = np.subtract(a, b, out=out)
    np.bitwise_and(res, ring_mask(bits), out=res)
    return res


def ring_neg(a: np.ndarray, bits: int, out: np.ndarray | None = None) -> np.ndarray:
    """:math:`-a \\bmod 2^{bits}`, elementwise; ``out`` may be ``a``."""
    _as_ring_array(a, "a")
    res: np.ndarray = np.subtract(np.uint64(0), a, out=out)
    np.bitwise_and(res, ring_mask(bits), out=res)
    return res


def ring_sum(arrays: Sequence[np.ndarray], bits: int, length: int | None = None) -> np.ndarray:
    """:math:`\\sum_i a_i \\bmod 2^{bits}` of equally long uint64 vectors (zeros if ``arrays`` is empty).

    Args:
        arrays: the vectors to add.
        bits: ring bit width.
        length: the vector length, needed only when ``arrays`` may be empty.
    """
    if not arrays:
        if length is None:
            raise ConfigError("ring_sum of no arrays needs an explicit length")
        return np.zeros(int(length), dtype=np.uint64)
    acc = np.array(_as_ring_array(arrays[0], "arrays[0]"), dtype=np.uint64, copy=True)
    for i, a in enumerate(arrays[1:], start=1):
        _as_ring_array(a, f"arrays[{i}]")
        if a.shape != acc.shape:
            raise EncodingError(f"ring_sum: arrays[{i}] has shape {a.shape}, expected {acc.shape}")
        np.add(acc, a, out=acc)  # wraps mod 2^64; reduced once at the end
    np.bitwise_and(acc, ring_mask(bits), out=acc)
    return acc


def centred_lift(x: np.ndarray, bits: int, out: np.ndarray | None = None) -> np.ndarray:
    """Signed representatives in :math:`[-2^{bits-1}, 2^{bits-1})` of ring elements, as ``int64``.

    Args:
        x: ring elements, ``uint64`` (reduced or not); ``uint32`` words for rings of at most 32 bits.
        bits: ring bit width.
        out: optional ``int64`` array of ``x``'s shape to write into (no temporary is allocated).

    Shapes:
        ``x``: any shape. Output: same shape, ``int64``.
    """
    bits = _check_bits(bits)
    if not (isinstance(x, np.ndarray) and x.dtype == np.uint32 and bits <= 32):
        _as_ring_array(x, "x")
    if out is None:
        out = np.empty(x.shape, dtype=np.int64)
    # Move the ring's sign bit to bit 63, reinterpret as signed, shift back arithmetically.
    np.left_shift(x, np.uint64(64 - bits), out=out.view(np.uint64))
    np.right_shift(out, np.int64(64 - bits), out=out)
    return out


def ring_from_signed(x: np.ndarray, bits: int, out: np.ndarray | None = None) -> np.ndarray:
    """Ring elements (``uint64``) of signed integers (``int64``): :math:`x \\bmod 2^{bits}`."""
    if not isinstance(x, np.ndarray) or x.dtype != np.int64:
        got = x.dtype if isinstance(x, np.ndarray) else type(x).__name__
        raise EncodingError(f"ring_from_signed expects an int64 numpy array, got {got}")
    u = np.ascontiguousarray(x).view(np.uint64)  # two's complement: the value mod 2^64
    return np.bitwise_and(u, ring_mask(bits), out=out)


def ring_from_bytes(buf: bytes | bytearray | memoryview | np.ndarray, bits: int) -> np.ndarray:
    """Uniform ring elements from uniform bytes (e.g. a PRG keystream): 8 little-endian bytes each.

    Because :math:`2^{bits}` divides :math:`2^{64}`, masking a uniform 64-bit word gives a uniform
    element of :math:`\\mathbb{Z}_{2^{bits}}`; no rejection sampling is needed. The result is a new
    array (the input is not modified).

    Args:
        buf: ``8 * m`` bytes.
        bits: ring bit width.
    """
    raw = np.frombuffer(buf, dtype=np.uint8) if not isinstance(buf, np.ndarray) else buf.view(np.uint8)
    if raw.size % 8:
        raise EncodingError(f"ring_from_bytes needs a multiple of 8 bytes, got {raw.size}")
    words = raw.view("<u8").astype(np.uint64, copy=True)
    return np.bitwise_and(words, ring_mask(bits), out=words)


def default_rng() -> np.random.Generator:
    """A fresh ``np.random.Generator`` seeded with 256 bits from the OS CSPRNG (``os.urandom``)."""
    return np.random.default_rng(int.from_bytes(os.urandom(32), "little"))
