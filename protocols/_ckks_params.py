"""CKKS parameters and slot layout: the public context parameters chosen from a schema, and the digits.

Re-exported by :mod:`securefgl.protocols.ckks`, whose docstring states the error bound :math:`E(n)`,
the parameter choice and the digit encoding of the slot vector.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from securefgl.errors import ConfigError, InconsistentViewError, ProtocolError
from securefgl.protocols.encoding import SumSchema, ring_mask

__all__ = [
    "ERROR_BUDGET",
    "GRID_TOLERANCE",
    "MAX_COEFF_BITS",
    "PHASES",
    "PROTOCOL_NAME",
    "CKKSParameters",
    "SlotField",
    "SlotLayout",
    "Stage",
    "check_coeff",
    "from_digits",
    "select_parameters",
    "slot_layout",
    "to_digits",
]


#: Largest total coefficient-modulus size for 128-bit classical security (HE standard; SEAL MaxBitCount).
MAX_COEFF_BITS: dict[int, int] = {8192: 218, 16384: 438}
#: Decrypted slots must be within this of the integer digit sum for the rounding to be exact.
ERROR_BUDGET = 2.0**-4
#: The decryptor refuses a sum with any slot farther than this from an integer.
GRID_TOLERANCE = 0.25
_FLOAT_REL = 2.0**-48
_NOISE_SIGMAS = 10.0
_SECRET_EMBED_FACTOR = 36.0  # |s(zeta_j)|^2 <= 36 h for all slots w.p. >= 1 - 2^-40
_PRIME_BITS = 60
#: The protocol's registry name, bound into every advertise request.
PROTOCOL_NAME = "ckks"


class Stage(enum.StrEnum):
    """The CKKS protocol's stages, in order (also the dropout phase names)."""

    ADVERTISE = "advertise"
    KEYS = "keys"
    UPLOAD = "upload"
    RELEASE = "release"


PHASES: tuple[str, ...] = tuple(s.value for s in Stage)


# ----------------------------------------------------------------------------------------------------
# Parameters and slot layout
# ----------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CKKSParameters:
    """The public CKKS parameters of a session (derived from the schema; every party recomputes them).

    Attributes:
        poly_modulus_degree: :math:`N`.
        coeff_mod_bit_sizes: prime sizes; the last is the special (key-switching) prime.
        scale_bits: :math:`s`, the scale is :math:`\\Delta = 2^s`.
        digit_bits: :math:`w`, the digit width of the integer encoding.
        max_clients: the most ciphertexts ever added (``schema.max_clients``).
    """

    poly_modulus_degree: int
    coeff_mod_bit_sizes: tuple[int, ...]
    scale_bits: int
    digit_bits: int
    max_clients: int

    @property
    def slots(self) -> int:
        """Slots per ciphertext, :math:`N/2`."""
        return self.poly_modulus_degree // 2

    @property
    def data_bits_lower(self) -> int:
        """A lower bound on :math:`\\log_2` of the data modulus (each prime exceeds :math:`2^{b-1}`)."""
        return sum(b - 1 for b in self.coeff_mod_bit_sizes[:-1])

    def noise_bound(self, n: int) -> float:
        """Bound on the CKKS noise of a sum of ``n`` fresh ciphertexts, per slot, in value units."""
        big_n = float(self.poly_modulus_degree)
        # r1(zeta) s(zeta) with |s(zeta)|^2 <= 36 h <= 36 N, plus the mod-switch and encoding roundings
        per = math.sqrt(_SECRET_EMBED_FACTOR * big_n * big_n / 24.0) + math.sqrt(big_n / 12.0)
        return _NOISE_SIGMAS * math.sqrt(max(n, 1)) * per / 2.0**self.scale_bits

    def float_bound(self, n: int) -> float:
        """Bound on the float64 encode/decode error of a sum of ``n`` digit vectors, per slot."""
        return max(n, 1) * 2.0**self.digit_bits * _FLOAT_REL

    def error_bound(self, n: int) -> float:
        """:math:`E(n)`: bound on :math:`|\\mathrm{Dec}(\\sum \\mathrm{Enc}(u)) - \\sum u|` per slot."""
        return self.noise_bound(n) + self.float_bound(n)

    def ciphertext_bytes(self) -> int:
        """Approximate serialised size of one ciphertext (two polynomials over the data primes)."""
        return 2 * self.poly_modulus_degree * (len(self.coeff_mod_bit_sizes) - 1) * 8

    def canonical(self) -> dict[str, Any]:
        """JSON-ready parameters (bound into the session id)."""
        return {
            "N": self.poly_modulus_degree,
            "coeff": list(self.coeff_mod_bit_sizes),
            "scale_bits": self.scale_bits,
            "digit_bits": self.digit_bits,
            "max_clients": self.max_clients,
        }


@dataclass(frozen=True)
class SlotField:
    """One integer field of the slot vector: a block's elements, or a scalar (contributor, clip count)."""

    name: str
    kind: Literal["block", "contributors", "clip"]
    size: int
    low: int  # the lowest value; digits encode value - low >= 0
    digits: int
    offset: int  # first slot of digit plane 0; plane j starts at offset + j * size


@dataclass(frozen=True)
class SlotLayout:
    fields: tuple[SlotField, ...]
    total: int
    chunks: int
    slots: int
    digit_bits: int


def _field_specs(
    schema: SumSchema,
) -> list[tuple[str, Literal["block", "contributors", "clip"], int, int, int]]:
    """(name, kind, size, low, span) of every field: blocks, the contributor slot, per-block clip counts."""
    out: list[tuple[str, Literal["block", "contributors", "clip"], int, int, int]] = []
    for b in schema.blocks:
        m = int(schema.max_encoded[b.name])
        if b.kind == "real":
            out.append((b.name, "block", b.size, -m, 2 * m))
        else:
            out.append((b.name, "block", b.size, 0, m))
    out.append(("__contributors__", "contributors", 1, 0, 1))
    for b in schema.blocks:
        out.append((b.name, "clip", 1, 0, max(b.size, 1)))
    return out


def slot_layout(schema: SumSchema, digit_bits: int, slots: int) -> SlotLayout:
    fields: list[SlotField] = []
    offset = 0
    for name, kind, size, low, span in _field_specs(schema):
        digits = max(1, -(-max(span, 1).bit_length() // digit_bits))
        fields.append(SlotField(name, kind, size, low, digits, offset))
        offset += digits * size
    chunks = max(1, -(-offset // slots))
    return SlotLayout(tuple(fields), offset, chunks, slots, digit_bits)


def check_coeff(n_poly: int, coeff: Sequence[int]) -> tuple[int, ...]:
    c = tuple(int(b) for b in coeff)
    if len(c) < 2 or any(not 20 <= b <= 60 for b in c):
        raise ConfigError(
            f"coeff_mod_bit_sizes must list at least 2 prime sizes in [20, 60] (data primes, then the special "
            f"prime), got {list(coeff)}"
        )
    if sum(c) > MAX_COEFF_BITS[n_poly]:
        raise ConfigError(
            f"coeff_mod_bit_sizes {list(c)} total {sum(c)} bits, above the {MAX_COEFF_BITS[n_poly]} bits "
            f"allowed for 128-bit security at poly_modulus_degree={n_poly}"
        )
    return c


def _fit_scale(data_bits: int, n: int, digit_bits: int) -> int:
    """Largest scale exponent with ``n * 2^w * 2^s`` two bits below the data modulus (no wrap-around)."""
    return data_bits - 3 - math.ceil(math.log2(n) + digit_bits)


def select_parameters(
    schema: SumSchema,
    *,
    poly_modulus_degree: int = 8192,
    coeff_mod_bit_sizes: Sequence[int] | None = None,
    scale_bits: int | None = None,
    digit_bits: int | None = None,
) -> CKKSParameters:
    """Choose CKKS parameters for ``schema`` (see the module docstring), or refuse with the numbers.

    Among the admissible (coefficient moduli, digit width) pairs, the one with the fewest ciphertext
    bytes per client wins (ties: fewer ciphertexts). Explicit arguments restrict the search.

    Raises:
        ConfigError: invalid explicit parameters, or no admissible choice (too little precision: the
            message gives the error bound, the budget, the scale and ``max_clients``).
    """
    if poly_modulus_degree not in MAX_COEFF_BITS:
        raise ConfigError(
            f"poly_modulus_degree must be one of {sorted(MAX_COEFF_BITS)}, got {poly_modulus_degree!r}"
        )
    n = schema.max_clients
    slots = poly_modulus_degree // 2
    if coeff_mod_bit_sizes is not None:
        candidates = [check_coeff(poly_modulus_degree, coeff_mod_bit_sizes)]
    else:
        candidates = []
        data = 1
        while (data + 1) * _PRIME_BITS <= MAX_COEFF_BITS[poly_modulus_degree] and data <= 2:
            candidates.append((_PRIME_BITS,) * (data + 1))
            data += 1
    widest = max(max(span, 1).bit_length() for *_, span in _field_specs(schema))
    if digit_bits is not None and (
        isinstance(digit_bits, bool) or not isinstance(digit_bits, int) or not 1 <= digit_bits <= 52
    ):
        raise ConfigError(f"digit_bits must be an integer in [1, 52], got {digit_bits!r}")
    widths = [digit_bits] if digit_bits is not None else list(range(min(52, widest), 0, -1))
    best: tuple[tuple[int, int], CKKSParameters] | None = None
    closest: CKKSParameters | None = None
    for coeff in candidates:
        data_bits = sum(b - 1 for b in coeff[:-1])
        for w in widths:
            s = _fit_scale(data_bits, n, w) if scale_bits is None else int(scale_bits)
            if s < 1:
                continue
            p = CKKSParameters(poly_modulus_degree, coeff, s, w, n)
            if scale_bits is not None and s > _fit_scale(data_bits, n, w):
                closest = closest or p
                continue
            if p.error_bound(n) > ERROR_BUDGET:
                closest = closest or p
                continue
            lay = slot_layout(schema, w, slots)
            cost = (lay.chunks * p.ciphertext_bytes(), lay.chunks)
            if best is None or cost < best[0]:
                best = (cost, p)
            break  # the widest admissible digit width is the cheapest for this modulus
    if best is None:
        if closest is None:
            raise ConfigError(
                f"no CKKS scale fits: max_clients={n} sums of {widths[-1]}-bit digits exceed the data modulus of "
                f"coeff_mod_bit_sizes={[list(c) for c in candidates]}"
            )
        cap = _fit_scale(closest.data_bits_lower, n, closest.digit_bits)
        raise ConfigError(
            f"CKKS context too imprecise for the schema: N={closest.poly_modulus_degree}, "
            f"coeff_mod_bit_sizes={list(closest.coeff_mod_bit_sizes)}, scale 2^{closest.scale_bits} "
            f"(largest without wrap-around: 2^{cap}), {closest.digit_bits}-bit digits, max_clients={n}: "
            f"decryption error bound {closest.error_bound(n):.3g} (noise {closest.noise_bound(n):.3g} + float "
            f"{closest.float_bound(n):.3g}) exceeds the exact-rounding budget {ERROR_BUDGET} (grid step 1 of the "
            f"{schema.ring_bits}-bit encoding); use more or larger data primes, a larger scale, fewer "
            "max_clients or narrower digits"
        )
    return best[1]


def to_digits(lay: SlotLayout, ints: np.ndarray, clip_counts: Mapping[str, int]) -> np.ndarray:
    """The client's slot vector: non-negative digits of every field, zero-padded to whole ciphertexts."""
    vec = np.zeros(lay.chunks * lay.slots, dtype=np.float64)
    w = lay.digit_bits
    mask = np.uint64((1 << w) - 1)
    pos = 0
    for f in lay.fields:
        if f.kind == "block":
            u = (ints[pos : pos + f.size] - np.int64(f.low)).view(np.uint64)
            pos += f.size
        elif f.kind == "contributors":
            u = np.ones(1, dtype=np.uint64)
        else:
            u = np.array([clip_counts.get(f.name, 0)], dtype=np.uint64)
        for j in range(f.digits):
            plane = (u >> np.uint64(w * j)) & mask if f.digits > 1 else u
            vec[f.offset + j * f.size : f.offset + (j + 1) * f.size] = plane
    return vec


def from_digits(
    lay: SlotLayout,
    schema: SumSchema,
    dec: np.ndarray,
    n: int,
    params: CKKSParameters,
    where: Mapping[str, Any],
) -> tuple[np.ndarray, dict[str, int], float]:
    """Round the decrypted digit sums, check them, and rebuild the ring sum and the clip counts."""
    vals = dec[: lay.total]
    rounded = np.rint(vals)
    dev = float(np.max(np.abs(vals - rounded))) if vals.size else 0.0
    if not dev <= GRID_TOLERANCE:
        raise ProtocolError(
            f"decrypted sum is off the integer grid by {dev:.3g} > {GRID_TOLERANCE} (bound "
            f"{params.error_bound(n):.3g}): a ciphertext under another key, or corrupted; nothing released",
            **where,
        )
    ints = rounded.astype(np.int64)
    count = next(f for f in lay.fields if f.kind == "contributors")
    if int(ints[count.offset]) != n:
        raise InconsistentViewError(
            f"the sum holds {int(ints[count.offset])} contributions but the server claims {n}; nothing released",
            **where,
        )
    top = n * ((1 << lay.digit_bits) - 1)
    if vals.size and (int(ints.min()) < 0 or int(ints.max()) > top):
        raise ProtocolError(
            f"decrypted digit sums outside [0, {top}]: a ciphertext under another key, or corrupted; nothing "
            "released",
            **where,
        )
    schema.check_num_clients(n)
    ring = np.zeros(schema.length, dtype=np.uint64)
    clip: dict[str, int] = {}
    w = lay.digit_bits
    pos = 0
    for f in lay.fields:
        if f.kind == "contributors":
            continue
        acc = np.zeros(f.size, dtype=np.uint64)
        for j in range(f.digits):
            plane = ints[f.offset + j * f.size : f.offset + (j + 1) * f.size].view(np.uint64)
            acc += plane << np.uint64(w * j)  # wraps mod 2^64; only the value mod 2^ring_bits matters
        if f.kind == "clip":
            clip[f.name] = int(acc[0])
            continue
        acc += np.uint64((n * f.low) % (1 << 64))
        ring[pos : pos + f.size] = acc & ring_mask(schema.ring_bits)
        pos += f.size
    return ring, clip, dev
