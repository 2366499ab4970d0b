"""Fixed-point encoding of named tensors into one vector over the ring :math:`\\mathbb{Z}_{2^k}`.

Every protocol sums the same thing: a flat vector built from a client's *contribution* (a mapping of
block name to tensor) as declared by a :class:`SumSchema`. This module validates a contribution against
its schema (names, shapes, dtypes, NaN/Inf, bounds), clips or rejects out-of-bound values, packs the
blocks into one ``float64`` vector (plaintext, CKKS) or encodes them as ring elements (masking
protocols), decodes ring sums, states the error of the decoded sum, and applies the release rules that
every protocol shares.

.. admonition:: Hazmat

    The ring helpers (:func:`ring_add`, :func:`ring_sub`, ...) and :meth:`SumSchema.encode` are
    building blocks for protocol implementers. Algorithms never call them: they hand a contribution to a
    protocol and receive :class:`~securefgl.protocols.sums.Sums`.

Encoding (per block :math:`b` with public bound :math:`B_b`, scale :math:`s_b = 2^{f_b}`):

.. math::

    \\mathrm{enc}(x) = \\mathrm{SR}\\big(s_b \\cdot \\mathrm{clip}(x, -B_b, B_b)\\big) \\bmod 2^k,
    \\qquad \\mathrm{SR}(y) = \\lfloor y \\rfloor + \\mathbb{1}[u < y - \\lfloor y \\rfloor],\\;
    u \\sim U[0, 1),

    \\mathrm{dec}(r) = \\mathrm{lift}(r) / s_b,\\qquad
    \\mathrm{lift}(r) = r - 2^k\\,\\mathbb{1}[r \\ge 2^{k-1}].

Stochastic rounding is unbiased, :math:`\\mathbb{E}[\\mathrm{SR}(y)] = y`. Real blocks use the
largest power-of-two step :math:`\\Delta = 2^{-f} \\le` ``precision``; count blocks are integers in
:math:`[0, B_b]` with :math:`s_b = 1` (exact). With :math:`M_b = \\lceil s_b B_b \\rceil` the largest
encoded magnitude of one element, the sum over at most ``max_clients`` :math:`=N` clients lies in
:math:`[-N M_b, N M_b]`; the centred lift recovers it exactly iff :math:`N M_b \\le 2^{k-1} - 1`, so

.. math::

    k = 1 + \\max_b \\operatorname{bitlen}(N M_b) \\; (+\\,\\text{extra\\_bits}) \\le 64,

and a schema needing more than 64 bits is refused with :class:`~securefgl.errors.OverflowRiskError`.

Error model of a decoded sum of :math:`n` encodings (per element, before the release cast):
worst case :math:`|\\hat S - S| < n\\Delta`; the errors are independent and zero-mean, each with
variance :math:`\\le \\Delta^2/4`, so the standard deviation is :math:`\\le \\sqrt{n}\\,\\Delta/2`
(see ``../shared/specs/secure-aggregation-anchors.md`` §1.9). :meth:`SumSchema.error_bound` returns
the worst case plus the rounding of the cast to the block's output dtype.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, Literal

import numpy as np
import torch

from securefgl.errors import ConfigError, EncodingError, OverflowRiskError, ReleaseRefusedError
from securefgl.protocols.sums import Sums

__all__ = [
    "BlockSpec",
    "EncodedVector",
    "SumSchema",
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

#: Version tag hashed into :meth:`SumSchema.fingerprint`; bump when the encoding changes.
ENCODING_VERSION = "securefgl.encoding.v1"

_KINDS = ("real", "count")
_OOB_MODES = ("clip", "reject")
_MIN_PRECISION = 2.0**-64
_MAX_PRECISION = 2.0**64
_MAX_COUNT_BOUND = 2**53  # counts must round-trip exactly through float64
_REAL_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
_COUNT_DTYPES = (torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8, *_REAL_DTYPES)


# ----------------------------------------------------------------------------------------------------
# Ring helpers (hazmat): uint64 arrays holding elements of Z_(2^bits), 1 <= bits <= 64.
# numpy's uint64 array arithmetic wraps mod 2^64, and 2^bits divides 2^64, so every operation is one
# wrapping numpy operation followed by a mask: no Python loop over elements.
# ----------------------------------------------------------------------------------------------------


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


def centred_lift(x: np.ndarray, bits: int) -> np.ndarray:
    """Signed representatives in :math:`[-2^{bits-1}, 2^{bits-1})` of ring elements, as ``int64``.

    Shapes:
        ``x``: any shape, ``uint64`` (reduced or not). Output: same shape, ``int64``.
    """
    bits = _check_bits(bits)
    _as_ring_array(x, "x")
    shift = np.uint64(64 - bits)
    # Move the ring's sign bit to bit 63, reinterpret as signed, shift back arithmetically.
    signed: np.ndarray = np.left_shift(x, shift).view(np.int64) >> np.int64(64 - bits)
    return signed


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


# ----------------------------------------------------------------------------------------------------
# Schema
# ----------------------------------------------------------------------------------------------------


def _dtype_name(dtype: torch.dtype) -> str:
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
                f"valid: {[_dtype_name(d) for d in allowed]}"
            )
        if self.counted_by is not None and not self.out_dtype.is_floating_point:
            raise ConfigError(
                f"block {self.name!r}: row-wise release (counted_by) marks withheld rows with NaN, so the "
                f"output dtype must be floating, got {_dtype_name(self.out_dtype)}; set dtype=torch.float32"
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
            "dtype": _dtype_name(self.out_dtype),
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


def _to_numpy(name: str, value: Any) -> np.ndarray:
    """A CPU numpy view/copy of a tensor, array or Python number (bfloat16 widened to float32)."""
    if isinstance(value, torch.Tensor):
        t = value.detach()
        if t.device.type != "cpu":
            t = t.cpu()
        if t.is_complex():
            raise EncodingError(
                f"block {name!r}: expected a real tensor, received dtype {_dtype_name(t.dtype)}"
            )
        if t.dtype == torch.bfloat16:
            t = t.float()
        return t.numpy()
    if isinstance(value, np.ndarray):
        return value
    if isinstance(value, (np.generic, int, float)) and not isinstance(value, (bool, np.bool_)):
        return np.asarray(value)
    raise EncodingError(
        f"block {name!r}: expected a torch.Tensor or numpy.ndarray, received {type(value).__name__}"
    )


class SumSchema:
    """The public description of a sum: ordered named blocks, bounds, fixed point, ring and rules.

    Built by an algorithm step, shared by all parties (its :meth:`fingerprint` is bound into session
    ids), and used by every protocol to validate, pack, encode, decode and release.

    Args:
        blocks: the blocks, in packing order (names unique).
        max_clients: the most clients whose contributions may ever be summed under this schema; the
            ring is sized so that their worst-case sum cannot wrap around.
        precision: the largest allowed quantisation step of real blocks; the step used is the largest
            power of two :math:`\\le` ``precision``, in :math:`[2^{-64}, 2^{64}]`.
            (default: :math:`2^{-20}`)
        min_contributors: release rule for the whole schema: :meth:`release` raises
            :class:`~securefgl.errors.ReleaseRefusedError` for a sum of fewer clients. (default: ``1``)
        extra_bits: ring bits added above the worst case (e.g. headroom for integer DP noise added
            inside the ring). (default: ``0``)

    Raises:
        ConfigError: invalid blocks or parameters.
        OverflowRiskError: the worst-case sum needs more than 64 bits (the message gives the numbers).

    Shapes:
        A flat vector is ``(length,)``: the blocks' row-major flattenings concatenated in order;
        ``slices[name]`` locates a block in it.
    """

    def __init__(
        self,
        blocks: Sequence[BlockSpec],
        *,
        max_clients: int,
        precision: float = 2.0**-20,
        min_contributors: int = 1,
        extra_bits: int = 0,
    ) -> None:
        blocks = tuple(blocks)
        if not blocks:
            raise ConfigError("a SumSchema needs at least one block")
        for b in blocks:
            if not isinstance(b, BlockSpec):
                raise ConfigError(f"SumSchema blocks must be BlockSpec instances, got {type(b).__name__}")
        names = [b.name for b in blocks]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ConfigError(f"duplicate block names in SumSchema: {dupes}")
        if isinstance(max_clients, bool) or not isinstance(max_clients, (int, np.integer)) or max_clients < 1:
            raise ConfigError(f"max_clients must be an integer >= 1, got {max_clients!r}")
        if isinstance(precision, bool) or not isinstance(precision, (int, float, np.integer, np.floating)):
            raise ConfigError(f"precision must be a positive number, got {precision!r}")
        precision = float(precision)
        if not (_MIN_PRECISION <= precision <= _MAX_PRECISION):
            raise ConfigError(f"precision must be in [2**-64, 2**64], got {precision!r}")
        if (
            isinstance(min_contributors, bool)
            or not isinstance(min_contributors, (int, np.integer))
            or not 1 <= min_contributors <= max_clients
        ):
            raise ConfigError(
                f"min_contributors must be an integer in [1, max_clients={max_clients}], got {min_contributors!r}"
            )
        if isinstance(extra_bits, bool) or not isinstance(extra_bits, (int, np.integer)) or extra_bits < 0:
            raise ConfigError(f"extra_bits must be an integer >= 0, got {extra_bits!r}")

        by_name = {b.name: b for b in blocks}
        for b in blocks:
            if b.counted_by is None:
                continue
            c = by_name.get(b.counted_by)
            if c is None:
                raise ConfigError(
                    f"block {b.name!r}: counted_by={b.counted_by!r} is not a block of this schema; "
                    f"blocks: {names}"
                )
            if c.kind != "count" or c.shape != (b.shape[0],) or c.counted_by is not None:
                raise ConfigError(
                    f"block {b.name!r}: counted_by block {c.name!r} must be a count block of shape "
                    f"({b.shape[0]},) that is not itself counted_by; got kind={c.kind!r}, shape={c.shape}, "
                    f"counted_by={c.counted_by!r}"
                )

        self.blocks: tuple[BlockSpec, ...] = blocks
        self.names: tuple[str, ...] = tuple(names)
        self.max_clients = int(max_clients)
        self.precision = precision
        self.min_contributors = int(min_contributors)
        self.extra_bits = int(extra_bits)
        self._by_name = by_name

        offset = 0
        self.slices: dict[str, slice] = {}
        for b in blocks:
            self.slices[b.name] = slice(offset, offset + b.size)
            offset += b.size
        self.length: int = offset

        # Fixed point: the largest power-of-two step <= precision. frexp: precision = m * 2**e,
        # m in [0.5, 1), so 2**(e-1) <= precision < 2**e and the exponent is f = 1 - e.
        _, e = math.frexp(precision)
        real_f = 1 - e
        self._exponents: dict[str, int] = {b.name: (real_f if b.kind == "real" else 0) for b in blocks}
        # Largest encoded magnitude of one element, exactly: M_b = ceil(B_b * 2**f_b).
        self.max_encoded: dict[str, int] = {
            b.name: math.ceil(Fraction(b.bound) * Fraction(2) ** self._exponents[b.name]) for b in blocks
        }
        worst_name = max(self.names, key=lambda n: self.max_encoded[n])
        worst_sum = self.max_clients * self.max_encoded[worst_name]
        bits = 1 + worst_sum.bit_length() + self.extra_bits
        if bits > 64:
            wb = by_name[worst_name]
            raise OverflowRiskError(
                f"schema cannot fit a 64-bit ring: block {worst_name!r} (bound {wb.bound:g}, kind {wb.kind}, "
                f"step 2**{-self._exponents[worst_name]}) summed over max_clients={self.max_clients} "
                f"reaches {worst_sum} in absolute value, which needs {bits} bits "
                f"(1 sign + {worst_sum.bit_length()} magnitude + {self.extra_bits} extra) with "
                f"precision={precision!r}; lower max_clients, the bound or extra_bits, or raise precision"
            )
        for b in blocks:
            dt = b.out_dtype
            top = torch.finfo(dt).max if dt.is_floating_point else torch.iinfo(dt).max
            reach = self.max_clients * (b.bound if dt.is_floating_point else int(b.bound))
            if reach > top:
                raise ConfigError(
                    f"block {b.name!r}: its sum over max_clients={self.max_clients} can reach "
                    f"{reach:g}, beyond the largest {_dtype_name(dt)} ({top:g}); "
                    "declare a wider dtype"
                )

        self.ring_bits: int = max(bits, 2)
        self.modulus: int = 1 << self.ring_bits
        self.scales: dict[str, float] = {n: math.ldexp(1.0, f) for n, f in self._exponents.items()}
        self.steps: dict[str, float] = {n: math.ldexp(1.0, -f) for n, f in self._exponents.items()}
        self._fingerprint: bytes | None = None

    # -- lookups -------------------------------------------------------------------------------------

    def __getitem__(self, name: str) -> BlockSpec:
        try:
            return self._by_name[name]
        except KeyError:
            raise ConfigError(f"no block {name!r} in schema; blocks: {list(self.names)}") from None

    def __contains__(self, name: object) -> bool:
        return name in self._by_name

    def __len__(self) -> int:
        return len(self.blocks)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, SumSchema) and self.fingerprint() == other.fingerprint()

    def __hash__(self) -> int:
        return hash(self.fingerprint())

    def __repr__(self) -> str:
        blocks = ", ".join(f"{b.name}{b.shape}:{b.kind}<={b.bound:g}" for b in self.blocks)
        return (
            f"SumSchema([{blocks}], max_clients={self.max_clients}, precision={self.precision!r}, "
            f"ring_bits={self.ring_bits}, min_contributors={self.min_contributors})"
        )

    def check_num_clients(self, n: int) -> None:
        """Raise :class:`OverflowRiskError` if a sum of ``n`` contributions could wrap the ring."""
        if n > self.max_clients:
            raise OverflowRiskError(
                f"{n} contributions exceed the schema's max_clients={self.max_clients}: their sum could "
                f"wrap around the {self.ring_bits}-bit ring; build the schema with max_clients >= {n}"
            )

    # -- validation and packing ----------------------------------------------------------------------

    def _validate_block(self, spec: BlockSpec, value: Any) -> tuple[np.ndarray, int]:
        """Validate one block; return its clipped flat values (float64 real, int64 count) and clip count."""
        name = spec.name
        arr = _to_numpy(name, value)
        if tuple(arr.shape) != spec.shape:
            raise EncodingError(
                f"block {name!r}: expected shape {spec.shape}, received shape {tuple(arr.shape)}"
            )
        kind = arr.dtype.kind
        allowed = "fiu" if spec.kind == "real" else "fiub"
        if kind not in allowed:
            expected = (
                "a real (floating or integer) dtype"
                if spec.kind == "real"
                else "a count (integer, bool or integral floating) dtype"
            )
            raise EncodingError(f"block {name!r}: expected {expected}, received {arr.dtype}")
        flat = arr.reshape(-1)
        if kind == "f":
            finite = np.isfinite(flat)
            if not finite.all():
                bad = int(np.flatnonzero(~finite)[0])
                nbad = int(flat.size - np.count_nonzero(finite))
                raise EncodingError(
                    f"block {name!r}: {nbad} non-finite value(s) (NaN/Inf), first {flat[bad].item()!r} at flat "
                    f"index {bad}; nothing was sent"
                )
        if spec.kind == "real":
            return self._clip_real(spec, flat)
        return self._clip_count(spec, flat)

    def _reject(self, spec: BlockSpec, flat: np.ndarray, out: np.ndarray, n_out: int) -> None:
        bad = int(np.flatnonzero(out)[0])
        rng = f"[-{spec.bound:g}, {spec.bound:g}]" if spec.kind == "real" else f"[0, {int(spec.bound)}]"
        raise EncodingError(
            f"block {spec.name!r}: {n_out} value(s) outside the bound {rng} (on_out_of_bound='reject'), "
            f"first {flat[bad].item()!r} at flat index {bad}"
        )

    def _clip_real(self, spec: BlockSpec, flat: np.ndarray) -> tuple[np.ndarray, int]:
        x = flat.astype(np.float64, copy=True)
        out = np.abs(x) > spec.bound
        n_out = int(np.count_nonzero(out))
        if n_out:
            if spec.on_out_of_bound == "reject":
                self._reject(spec, flat, out, n_out)
            np.clip(x, -spec.bound, spec.bound, out=x)
        return x, n_out

    def _clip_count(self, spec: BlockSpec, flat: np.ndarray) -> tuple[np.ndarray, int]:
        kind = flat.dtype.kind
        if kind == "b":
            return flat.astype(np.int64), 0
        if kind == "f":
            nonint = flat != np.floor(flat)
            if nonint.any():
                bad = int(np.flatnonzero(nonint)[0])
                raise EncodingError(
                    f"block {spec.name!r}: a count block expects whole numbers, received {flat[bad].item()!r} at "
                    f"flat index {bad} (dtype {flat.dtype})"
                )
        hi = int(spec.bound)
        out = (flat < 0) | (flat > hi)
        n_out = int(np.count_nonzero(out))
        if n_out:
            if spec.on_out_of_bound == "reject":
                self._reject(spec, flat, out, n_out)
            # Clip in the native dtype (a uint64 above 2**63 must not wrap before clipping).
            flat = np.where(flat < 0, 0, np.where(flat > hi, hi, flat))
        return flat.astype(np.int64), n_out

    def _validated(self, contribution: Mapping[str, Any]) -> tuple[list[np.ndarray], dict[str, int]]:
        if not isinstance(contribution, Mapping):
            raise EncodingError(
                f"a contribution must be a mapping of block name to tensor, received {type(contribution).__name__}"
            )
        got = set(contribution)
        missing = [n for n in self.names if n not in got]
        unexpected = sorted(str(k) for k in got - set(self.names))
        if missing or unexpected:
            raise EncodingError(
                f"contribution blocks do not match the schema: missing {missing}, unexpected {unexpected}; "
                f"expected exactly {list(self.names)}"
            )
        parts: list[np.ndarray] = []
        clips: dict[str, int] = {}
        for spec in self.blocks:
            vals, n_clip = self._validate_block(spec, contribution[spec.name])
            parts.append(vals)
            clips[spec.name] = n_clip
        return parts, clips

    def round_to_grid(
        self, contribution: Mapping[str, Any], rng: np.random.Generator, *, skip_dp: bool = False
    ) -> dict[str, Any]:
        """Round the real blocks of a contribution onto this schema's fixed-point grid, on the client.

        Unbiased stochastic rounding to the step :math:`\\Delta_b` of each real block, drawn from ``rng``
        (a seeded client stream, so a run is reproducible). On-grid values are encoded exactly by every
        fixed-point protocol (the protocol's own rounding has nothing left to do) and their sum is exact
        in float64, so plaintext and secure aggregation release bit-identical sums of the rounded
        contribution, and a multi-round run does not depend on the protocol. Rounding is not a privacy
        mechanism: the released sum is at most as informative as the exact sum.

        Args:
            contribution: block name -> tensor/array (validated later by the protocol: unknown names,
                wrong shapes and non-finite values pass through untouched, to be rejected there).
            rng: the client's rounding generator.
            skip_dp: leave DP blocks to the protocol (a ``+dp`` protocol clips and noises them first).

        Returns:
            A new mapping: rounded real blocks as CPU ``float64`` tensors, every other entry as given.
            In-bound values stay in bound (clamped to the largest on-grid magnitude :math:`\\le B`);
            out-of-bound values are left as they are for the protocol to clip and count, so they are
            exact too when :math:`B` is on the grid (any integer bound is).
        """
        out = dict(contribution)
        for spec in self.blocks:
            if spec.kind != "real" or (skip_dp and spec.dp) or spec.name not in out:
                continue
            arr = _to_numpy(spec.name, out[spec.name])
            if arr.dtype.kind != "f" or not np.isfinite(arr).all():
                continue
            x = arr.reshape(-1).astype(np.float64)
            y = x * self.scales[spec.name]  # exact: power of two
            fl = np.floor(y)
            y -= fl
            fl += rng.random(y.shape[0]) < y
            top = math.floor(spec.bound * self.scales[spec.name])  # the largest on-grid magnitude <= B
            np.clip(fl, -top, top, out=fl)
            fl *= self.steps[spec.name]
            outside = np.flatnonzero(np.abs(x) > spec.bound)
            if outside.size:
                fl[outside] = x[outside]
            out[spec.name] = torch.from_numpy(fl.reshape(arr.shape))
        return out

    def validate(self, contribution: Mapping[str, Any]) -> dict[str, int]:
        """Check a contribution against the schema (names, shapes, dtypes, finiteness, bounds).

        Returns:
            block name -> number of elements that would be clipped.

        Raises:
            EncodingError: naming the block, what was expected and what was received.
        """
        return self._validated(contribution)[1]

    def pack(self, contribution: Mapping[str, Any]) -> tuple[np.ndarray, dict[str, int]]:
        """Validate, clip and flatten a contribution into one ``float64`` vector.

        Returns:
            ``(flat, clip_counts)``: the ``(length,)`` float64 vector and block name -> clipped count.

        Raises:
            EncodingError: wrong names, shapes or dtypes, NaN/Inf, or out of bound in ``"reject"`` mode.
        """
        parts, clips = self._validated(contribution)
        flat = np.empty(self.length, dtype=np.float64)
        for spec, vals in zip(self.blocks, parts, strict=True):
            flat[self.slices[spec.name]] = vals
        return flat, clips

    def _check_flat(self, flat: np.ndarray, what: str) -> np.ndarray:
        if not isinstance(flat, np.ndarray) or flat.ndim != 1 or flat.shape[0] != self.length:
            got = tuple(flat.shape) if isinstance(flat, np.ndarray) else type(flat).__name__
            raise EncodingError(f"{what}: expected a numpy vector of shape ({self.length},), received {got}")
        return flat

    def _to_tensor(self, spec: BlockSpec, values: np.ndarray) -> torch.Tensor:
        dt = spec.out_dtype
        arr = values.reshape(spec.shape)
        if not dt.is_floating_point:
            arr = np.rint(arr) if arr.dtype.kind == "f" else arr
            # np.array (not ascontiguousarray, which turns 0-d arrays into 1-d ones)
            return torch.from_numpy(np.array(arr, dtype=np.int64, order="C")).to(dt)
        return torch.from_numpy(np.array(arr, dtype=np.float64, order="C")).to(dt)

    def unpack(self, flat: np.ndarray) -> dict[str, torch.Tensor]:
        """Split a flat float vector (e.g. a plaintext sum) into named tensors with the declared dtypes.

        Count blocks with an integer dtype are rounded to the nearest integer.
        """
        if isinstance(flat, torch.Tensor):
            flat = flat.detach().cpu().to(torch.float64).numpy()
        flat = self._check_flat(flat, "unpack")
        return {s.name: self._to_tensor(s, flat[self.slices[s.name]]) for s in self.blocks}

    # -- ring encoding --------------------------------------------------------------------------------

    def encode(
        self, contribution: Mapping[str, Any], rng: np.random.Generator | None = None
    ) -> EncodedVector:
        """Validate, clip and encode a contribution as ring elements with unbiased stochastic rounding.

        Args:
            contribution: block name -> tensor/array, exactly the schema's blocks and shapes.
            rng: the generator for stochastic rounding (default: :func:`default_rng`, seeded from
                ``os.urandom``).

        Returns:
            The encoded vector (``uint64``, ``(length,)``, values ``< modulus``) and the clip counts.

        Raises:
            EncodingError: as :meth:`pack`.
        """
        parts, clips = self._validated(contribution)
        if rng is None:
            rng = default_rng()
        elif not isinstance(rng, np.random.Generator):
            raise ConfigError(f"rng must be a numpy.random.Generator, got {type(rng).__name__}")
        ints = np.empty(self.length, dtype=np.int64)
        for spec, vals in zip(self.blocks, parts, strict=True):
            sl = self.slices[spec.name]
            if spec.kind == "count":
                ints[sl] = vals
                continue
            y = vals
            y *= self.scales[spec.name]  # exact: power of two
            fl = np.floor(y)
            frac = y - fl
            up = rng.random(y.shape[0]) < frac
            fl += up
            ints[sl] = fl.astype(np.int64)
        data = ring_from_signed(ints, self.ring_bits, out=ints.view(np.uint64))
        return EncodedVector(data=data, clip_counts=clips)

    def decode(self, ring_sum: np.ndarray, num_contributors: int) -> dict[str, torch.Tensor]:
        """Decode a ring sum of ``num_contributors`` encodings into named tensors (declared dtypes).

        Args:
            ring_sum: ``uint64`` ``(length,)``: the sum mod :math:`2^k` (need not be reduced).
            num_contributors: how many encodings were summed (checked against ``max_clients``).

        Raises:
            OverflowRiskError: ``num_contributors > max_clients``.
            EncodingError: wrong shape or dtype of ``ring_sum``.
        """
        self._check_flat(ring_sum, "decode")
        if not isinstance(ring_sum, np.ndarray) or ring_sum.dtype != np.uint64:
            raise EncodingError(f"decode: expected a uint64 ring vector, received dtype {ring_sum.dtype}")
        self.check_num_clients(int(num_contributors))
        signed = centred_lift(ring_sum, self.ring_bits)
        out: dict[str, torch.Tensor] = {}
        for spec in self.blocks:
            v = signed[self.slices[spec.name]]
            if spec.kind == "count" and not spec.out_dtype.is_floating_point:
                out[spec.name] = self._to_tensor(spec, v)
            else:
                out[spec.name] = self._to_tensor(spec, v.astype(np.float64) * self.steps[spec.name])
        return out

    def error_bound(self, num_contributors: int) -> dict[str, float]:
        """Worst-case absolute error per element of a decoded sum of ``num_contributors`` encodings.

        Error model: each element of each encoding is rounded stochastically to the step
        :math:`\\Delta_b`, an unbiased error in :math:`(-\\Delta_b, \\Delta_b)` with variance
        :math:`\\le \\Delta_b^2/4`; the decoded sum of :math:`n` encodings is exact in the ring (no
        wrap-around, by construction of :math:`k`), so its error is :math:`< n\\Delta_b` in the worst
        case with standard deviation :math:`\\le \\sqrt{n}\\,\\Delta_b/2`. Counts are exact
        (:math:`\\Delta = 0`). The bound adds the rounding of the cast to the block's output dtype,
        :math:`n B_b u` with :math:`u` the dtype's unit roundoff (zero for integer dtypes and for
        float64 within its exact range). Clipping is not counted as error: the sum is of the clipped
        values.

        Returns:
            block name -> bound (float).
        """
        n = int(num_contributors)
        if n < 0:
            raise ConfigError(f"num_contributors must be >= 0, got {num_contributors!r}")
        self.check_num_clients(n)
        out: dict[str, float] = {}
        for spec in self.blocks:
            q = n * self.steps[spec.name] if spec.kind == "real" else 0.0
            out[spec.name] = q + self._cast_error(spec, n)
        return out

    def error_std(self, num_contributors: int) -> dict[str, float]:
        """Standard-deviation bound :math:`\\sqrt{n}\\,\\Delta_b/2` of the quantisation error of a sum."""
        n = int(num_contributors)
        return {
            s.name: (math.sqrt(n) * self.steps[s.name] / 2 if s.kind == "real" else 0.0) for s in self.blocks
        }

    def float_error_bound(self, num_contributors: int) -> dict[str, float]:
        """Worst-case absolute error per element of a float64 sum of ``num_contributors`` packed vectors.

        For protocols that add :meth:`pack` outputs in floating point (plaintext): recursive float64
        summation of :math:`n` terms of magnitude :math:`\\le B_b` errs by at most
        :math:`(n-1)\\,u\\,n B_b` with :math:`u = 2^{-53}` (zero for counts, whose sums are exact
        integers below :math:`2^{53}`), plus the cast to the output dtype as in :meth:`error_bound`.
        """
        n = int(num_contributors)
        if n < 0:
            raise ConfigError(f"num_contributors must be >= 0, got {num_contributors!r}")
        self.check_num_clients(n)
        out: dict[str, float] = {}
        for spec in self.blocks:
            exact = spec.kind == "count" and n * spec.bound <= 2.0**53
            summation = 0.0 if exact else max(n - 1, 0) * 2.0**-53 * n * spec.bound
            out[spec.name] = summation + self._cast_error(spec, n)
        return out

    def _cast_error(self, spec: BlockSpec, n: int) -> float:
        dt = spec.out_dtype
        if not dt.is_floating_point:
            return 0.0
        u = torch.finfo(dt).eps / 2
        magnitude = n * spec.bound
        if dt == torch.float64 and magnitude < 2.0**53 * self.steps[spec.name]:
            return 0.0  # every multiple of the step up to the magnitude is a float64
        return magnitude * u

    # -- release ---------------------------------------------------------------------------------------

    def release(
        self,
        values: Mapping[str, torch.Tensor | np.ndarray],
        num_contributors: int,
        clip_counts: Mapping[str, int] | None = None,
        max_abs_error: Mapping[str, float] | None = None,
    ) -> Sums:
        """Apply the release rules shared by every protocol and wrap the decoded sums as ``Sums``.

        Rules, in order:

        1. schema level: fewer than ``min_contributors`` contributors -> :class:`ReleaseRefusedError`
           (nothing is released);
        2. block level: a block with ``min_contributors`` above the number of contributors is
           withheld as a whole (``Sums.withheld[name]`` gives the reason; reading it raises
           :class:`~securefgl.errors.WithheldBlockError`) and its value is dropped;
        3. row level: for a block with ``counted_by``, the rows whose count (from the summed count
           block) is below ``min_contributors`` are set to NaN and flagged in
           ``Sums.withheld_rows(name)``; if the count block is itself withheld, so is the block.

        Args:
            values: block name -> decoded sum (every schema block, declared shape).
            num_contributors: how many clients' contributions are in the sums.
            clip_counts: block name -> clipped elements summed over clients.
            max_abs_error: block name -> error bound of each element, as stated by the protocol.

        Raises:
            ReleaseRefusedError: fewer contributors than the schema's ``min_contributors``.
            EncodingError: ``values`` do not match the schema's names or shapes.
        """
        n = int(num_contributors)
        if n < self.min_contributors:
            raise ReleaseRefusedError(
                f"sum of {n} contributor(s) refused: the schema requires at least "
                f"min_contributors={self.min_contributors}",
                phase="release",
            )
        got = set(values)
        if got != set(self.names):
            raise EncodingError(
                f"release: values have blocks {sorted(got)}, expected {list(self.names)}", phase="release"
            )
        tensors: dict[str, torch.Tensor] = {}
        for spec in self.blocks:
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
        for spec in self.blocks:
            if spec.min_contributors is not None and n < spec.min_contributors:
                withheld[spec.name] = (
                    f"{n} contributor(s) < min_contributors={spec.min_contributors} for this block"
                )
        rows: dict[str, torch.Tensor] = {}
        for spec in self.blocks:
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

    # -- identity --------------------------------------------------------------------------------------

    def canonical(self) -> dict[str, Any]:
        """The public parameters of the schema as a JSON-ready dict (what :meth:`fingerprint` hashes)."""
        return {
            "version": ENCODING_VERSION,
            "max_clients": self.max_clients,
            "precision": self.precision.hex(),
            "min_contributors": self.min_contributors,
            "extra_bits": self.extra_bits,
            "ring_bits": self.ring_bits,
            "exponents": [self._exponents[n] for n in self.names],
            "blocks": [b._canonical() for b in self.blocks],
        }

    def fingerprint(self) -> bytes:
        """SHA-256 (32 bytes) of the canonical public parameters; bound into protocol session ids."""
        if self._fingerprint is None:
            blob = json.dumps(self.canonical(), sort_keys=True, separators=(",", ":")).encode()
            self._fingerprint = hashlib.sha256(blob).digest()
        return self._fingerprint
