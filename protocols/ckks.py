"""CKKS additive aggregation via TenSEAL: the server adds ciphertexts and never holds the secret key.

Cheon, Kim, Kim and Song, "Homomorphic Encryption for Arithmetic of Approximate Numbers", ASIACRYPT
2017 (https://eprint.iacr.org/2016/421), through TenSEAL (Benaissa et al. 2021,
https://arxiv.org/abs/2104.03152) over Microsoft SEAL. Additions only: no relinearisation or Galois
keys are generated for or sent to anyone who does not already hold the secret key.

Each client encodes its contribution exactly as the masking protocols do (``SumSchema.encode``: clip,
unbiased stochastic rounding onto the fixed-point grid), writes the signed integers :math:`k_{c,i}` as
non-negative digits :math:`u = k - \\ell_b = \\sum_j u_j 2^{wj}` (:math:`\\ell_b` the block's lowest
value), appends a contributor slot (1) and its per-block clip counts, and encrypts the slot vector in
full ciphertexts of :math:`N/2` slots (explicit chunks, so TenSEAL never splits or warns). The server
adds the ciphertexts of the clients that uploaded, slot-wise:

.. math::

    \\mathrm{Dec}\\Big(\\sum_{c \\in S} \\mathrm{Enc}(u_{c,j})\\Big) = \\sum_{c \\in S} u_{c,j} + e_j,
    \\qquad |e_j| \\le E(|S|) \\le 2^{-4},

so rounding to the nearest integer recovers every digit sum *exactly*; the ring sum
:math:`\\sum_c k_{c,i} = \\sum_j 2^{wj} \\mathrm{round}(\\cdot) + |S|\\,\\ell_b \\pmod{2^k}` is then decoded by
``SumSchema.decode``, so the released sums are bit-for-bit those of the masking protocols for the same
encodings, with the same error bound (``SumSchema.error_bound``). The error bound :math:`E` combines
the CKKS noise (fresh public-key encryption, mod-switched from the key level: coefficient error
:math:`r_0 + r_1 s`; in slot :math:`j`, :math:`|r_1(\\zeta_j) s(\\zeta_j)|`, with
:math:`|s(\\zeta_j)|^2 \\le 36 h` for every slot with probability :math:`1 - 2^{-40}`; a 10-sigma tail over
the independent encryptions) and float64 decoding (relative :math:`2^{-48}`, measured :math:`\\le
2^{-51}`):

.. math::

    E(n) = \\frac{10\\sqrt{n}\\,\\big(\\sqrt{1.5}\\,N + \\sqrt{N/12}\\big)}{\\Delta} + n\\,2^{w}\\,2^{-48}.

Parameters are chosen from the schema: poly modulus degree :math:`N` (8192 by default, 16384 on
request), 60-bit primes (one or two data primes plus the special prime; at most 218 / 438 bits, the
128-bit-security limits of the HE standard), the digit width :math:`w` and the scale
:math:`\\Delta = 2^{s}` as large as the data modulus allows for :math:`n \\le` ``max_clients`` sums of
:math:`w`-bit digits, choosing the combination with the fewest ciphertext bytes. A context that cannot
meet :math:`E \\le 2^{-4}` is refused with the numbers.

Stages (``Stage``; parties are :class:`CKKSServer` and :class:`CKKSClient`, bytes in and bytes out,
run by :class:`~securefgl.protocols.router.Router`; messages are frames of
:mod:`securefgl.protocols.messages`, codes ``0x50``-``0x57``):

- **advertise**: the server sends the public parameters (round, schema fingerprint, CKKS parameters,
  which every client recomputes and checks); each client answers with a fresh X25519 key.
- **keys**: the server sends everyone the roster, the key generator (the lowest live id unless
  configured; the next one if it drops) and the key holders; each client derives the session id from
  the request, the roster and its round context. The generator creates the TenSEAL context, returns the
  *public* context for the server and one sealed message per peer: the secret context (key holders) or
  the public context (others), ChaCha20-Poly1305 on the peer channel of
  :mod:`securefgl.protocols._channel`, bound to the session, the pair and the direction.
- **upload**: the server forwards each client its sealed key with the upload request; the client opens
  it, checks every parameter of the context, encrypts its digits and uploads the serialised ciphertexts.
  The server checks each client's ciphertexts (count, parameters, scale, level) and adds them.
- **release**: the server sends the sum (never an individual ciphertext, unless the sum has a single
  contributor and the schema allows that) to one key holder, the *decryptor*: the designated recipient
  if any, else the first live holder (generator first). It decrypts, checks that every slot is within
  1/4 of an integer and that the contributor slot equals the number of ciphertexts the server claims to
  have added, rounds, decodes, applies the release rules and returns only the released sums (or keeps
  them, in designated-recipient mode). Keys are fresh for every call: each secret key decrypts one sum.

Security:
    Honest-but-curious server: it sees the roster, the public context, every client's ciphertexts, the
    sealed key messages it relays, and the released sum; it never receives a context with a secret key
    (it refuses one) and cannot open the sealed messages. Li and Micciancio (EUROCRYPT 2021) show that
    releasing raw CKKS decryptions can reveal the secret key (CPA-D); here the release is the exact
    integer sum, a deterministic function of the inputs whenever :math:`|e| < 1/2` (probability at
    least :math:`1 - 2^{-40}`), so it carries no information about the decryption noise, and the key is
    discarded after one decryption. **Every key holder can decrypt every ciphertext it sees**: a key
    holder colluding with the server learns every client's input (single-key CKKS does not protect
    clients from each other; ``key_holders`` limits who holds the key, at the cost of dropout
    tolerance of the decryptor). A *malicious* server can isolate one client (forward its ciphertext
    with forged contributor slots) or replace the roster keys (no PKI); use SecAgg against it.
    Dropouts: a client that drops before upload is left out; if the decryptor drops, the next live key
    holder decrypts; with no live key holder the run aborts with nothing revealed. The released sum
    itself is not protected (see the attack harness and the DP wrapper).

Args:
    poly_modulus_degree: 8192 or 16384. (default: 8192)
    coeff_mod_bit_sizes: explicit prime sizes (last one is the special prime), or ``None`` to choose.
        (default: ``None``)
    scale_bits: explicit :math:`\\log_2 \\Delta`, or ``None`` to choose. (default: ``None``)
    digit_bits: explicit digit width :math:`w`, or ``None`` to choose. (default: ``None``)
    max_length: the longest flat vector (``schema.length``) accepted. (default: :math:`2^{24}`)
    key_holders: ``"all"`` (every client receives the secret context) or the number of clients that do
        (the generator, the recipient, then the lowest ids). (default: ``"all"``)
    key_generator: client id that generates the keys, or ``None`` for the lowest live id.
        (default: ``None``)
    save_secret_key: if given, the key generator writes its secret context to this new file with mode
        0600 (never otherwise). (default: ``None``)
    record_views: keep every delivered message in ``Transcript.views``. (default: ``True``)
    interceptor: fault-injection hook of the router (tests). (default: ``None``)
    rng: generator used only to resolve ``"any"`` entries of a dropout plan. (default: OS-seeded)

Shapes:
    A flat vector of ``schema.length`` elements becomes ``ceil((sum_b D_b d_b + 1 + sum_b D'_b) / (N/2))``
    ciphertexts per client (:math:`D_b` digits of block :math:`b`, :math:`D'_b` of its clip count).
"""

from __future__ import annotations

import enum
import hashlib
import json
import math
import os
import struct
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Literal, TypeVar

import numpy as np
import tenseal as ts
import torch

from securefgl.errors import (
    ConfigError,
    InconsistentViewError,
    InvalidMessage,
    MalformedMessageError,
    ProtocolError,
    ReleaseRefusedError,
    StageOrderError,
    ThresholdError,
)
from securefgl.protocols._channel import PUBLIC_KEY_BYTES, ChannelKeys
from securefgl.protocols._parties import check_clients, client_contexts
from securefgl.protocols.base import SERVER, Contribution, DropoutPlan, Protocol, Sums, Transcript
from securefgl.protocols.encoding import SumSchema, centred_lift, default_rng, ring_mask
from securefgl.protocols.messages import (
    Blob,
    Envelopes,
    Field,
    Fixed,
    IdList,
    Int,
    Message,
    OptionalId,
    Text,
    decode,
)
from securefgl.protocols.router import Interceptor, Outgoing, Router

__all__ = [
    "CKKSAdvertise",
    "CKKSAdvertiseRequest",
    "CKKSAggregation",
    "CKKSClient",
    "CKKSKeys",
    "CKKSKeysRequest",
    "CKKSParameters",
    "CKKSRelease",
    "CKKSServer",
    "CKKSSumRequest",
    "CKKSUpload",
    "CKKSUploadRequest",
    "MAX_COEFF_BITS",
    "PHASES",
    "Stage",
    "select_parameters",
]

M = TypeVar("M", bound=Message)

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
_PROTOCOL_INFO = b"securefgl/ckks/v1"


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
class _SlotField:
    """One integer field of the slot vector: a block's elements, or a scalar (contributor, clip count)."""

    name: str
    kind: Literal["block", "contributors", "clip"]
    size: int
    low: int  # the lowest value; digits encode value - low >= 0
    digits: int
    offset: int  # first slot of digit plane 0; plane j starts at offset + j * size


@dataclass(frozen=True)
class _Layout:
    fields: tuple[_SlotField, ...]
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


def _layout(schema: SumSchema, digit_bits: int, slots: int) -> _Layout:
    fields: list[_SlotField] = []
    offset = 0
    for name, kind, size, low, span in _field_specs(schema):
        digits = max(1, -(-max(span, 1).bit_length() // digit_bits))
        fields.append(_SlotField(name, kind, size, low, digits, offset))
        offset += digits * size
    chunks = max(1, -(-offset // slots))
    return _Layout(tuple(fields), offset, chunks, slots, digit_bits)


def _check_coeff(n_poly: int, coeff: Sequence[int]) -> tuple[int, ...]:
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
        candidates = [_check_coeff(poly_modulus_degree, coeff_mod_bit_sizes)]
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
            lay = _layout(schema, w, slots)
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


def _session_id(request: bytes, roster: Sequence[tuple[int, bytes]], context_digest: bytes) -> bytes:
    """SHA-256 of what a client saw: the advertise request, the roster and its round context's digest."""
    h = hashlib.sha256(_PROTOCOL_INFO)
    h.update(struct.pack(">Q", len(request)) + request)
    h.update(struct.pack(">I", len(roster)))
    for cid, pk in sorted(roster):
        h.update(struct.pack(">Q", cid) + pk)
    h.update(context_digest)
    return h.digest()


def _check_ciphertext(
    vec: ts.CKKSVector, params: CKKSParameters, ctx: ts.Context, *, full: bool = True
) -> None:
    """Refuse a ciphertext that does not have exactly this session's parameters.

    ``full=False`` checks only the slot count (cheap); the level, scale and size of such a ciphertext
    are then checked by SEAL when it is added to a fully checked one (a mismatch raises).
    """
    if vec.size() != params.slots:
        raise ValueError(f"expected a ciphertext of {params.slots} slots, got {vec.size()}")
    if not full:
        return
    cts = vec.ciphertext()  # a copy of the polynomials: only for the checks that need it
    if len(cts) != 1:
        raise ValueError(f"expected one ciphertext, got {len(cts)}")
    ct = cts[0]
    first = ctx.seal_context().data.first_parms_id()
    if (
        ct.size() != 2
        or ct.poly_modulus_degree() != params.poly_modulus_degree
        or ct.coeff_modulus_size() != len(params.coeff_mod_bit_sizes) - 1
        or list(ct.parms_id()) != list(first)
        or ct.scale != 2.0**params.scale_bits
    ):
        raise ValueError(
            f"ciphertext parameters differ from the session's (size {ct.size()}, N {ct.poly_modulus_degree()}, "
            f"{ct.coeff_modulus_size()} primes, scale 2^{math.log2(ct.scale):.1f})"
        )


def _check_context(ctx: ts.Context, params: CKKSParameters, *, private: bool) -> None:
    sc = ctx.seal_context().data
    key_bits = sc.key_context_data().total_coeff_modulus_bit_count()
    data_bits = sc.first_context_data().total_coeff_modulus_bit_count()
    want_key = sum(params.coeff_mod_bit_sizes)
    want_data = sum(params.coeff_mod_bit_sizes[:-1])
    if (
        sc.first_context_data().parms().poly_modulus_degree() != params.poly_modulus_degree
        or key_bits != want_key
        or data_bits != want_data
        or ctx.global_scale != 2.0**params.scale_bits
        or ctx.is_private() != private
        or not ctx.has_public_key()
    ):
        raise InconsistentViewError(
            "received CKKS context does not match the session parameters "
            f"(expected N={params.poly_modulus_degree}, {want_key}/{want_data} bits, scale 2^{params.scale_bits}, "
            f"secret key {'present' if private else 'absent'})"
        )


# ----------------------------------------------------------------------------------------------------
# Released sums on the wire
# ----------------------------------------------------------------------------------------------------


def _sums_to_fields(sums: Sums) -> list[bytes]:
    header: dict[str, Any] = {
        "n": sums.num_contributors,
        "withheld": sums.withheld,
        "clip": sums.clip_counts,
        "err": sums.max_abs_error,
        "blocks": [],
        "rows": [],
    }
    fields: list[bytes] = []
    for name in sums:
        t = sums[name].detach().cpu()
        wire = t.float() if t.dtype == torch.bfloat16 else t
        arr = wire.numpy()
        header["blocks"].append([name, str(t.dtype).removeprefix("torch."), arr.dtype.str, list(t.shape)])
        fields.append(np.ascontiguousarray(arr).tobytes())
    for name in sums:
        mask = sums.withheld_rows(name)
        if mask is not None:
            header["rows"].append(name)
            fields.append(mask.numpy().astype(np.bool_).tobytes())
    return [json.dumps(header, sort_keys=True).encode(), *fields]


def _sums_from_fields(fields: list[bytes], schema: SumSchema) -> Sums:
    header = json.loads(fields[0])
    values: dict[str, torch.Tensor] = {}
    pos = 1
    for name, tdtype, npdtype, shape in header["blocks"]:
        if name not in schema:
            raise ValueError(f"unknown block {name!r}")
        arr = np.frombuffer(fields[pos], dtype=np.dtype(npdtype)).reshape(shape)
        values[name] = torch.from_numpy(arr.copy()).to(getattr(torch, tdtype))
        pos += 1
    rows: dict[str, torch.Tensor] = {}
    for name in header["rows"]:
        rows[name] = torch.from_numpy(np.frombuffer(fields[pos], dtype=np.bool_).copy())
        pos += 1
    return Sums(
        values,
        num_contributors=int(header["n"]),
        withheld=header["withheld"],
        withheld_rows=rows,
        clip_counts={k: int(v) for k, v in header["clip"].items()},
        max_abs_error={k: float(v) for k, v in header["err"].items()},
    )


# ----------------------------------------------------------------------------------------------------
# Parties
# ----------------------------------------------------------------------------------------------------


# ----------------------------------------------------------------------------------------------------
# Messages (wire codes 0x50-0x57 of securefgl.protocols.messages)
# ----------------------------------------------------------------------------------------------------

_BIG = 1 << 30  # largest single blob (a context or a ciphertext) accepted
U8 = struct.Struct(">B")
_U32S = struct.Struct(">I")
_U64S = struct.Struct(">Q")
_ID: Field = Int(_U32S, 2**32 - 2)
_SID: Field = Fixed(32)


@dataclass(frozen=True, eq=False)
class CKKSAdvertiseRequest(Message):
    """Server -> client, stage ``advertise``: the public parameters of the session."""

    TYPE: ClassVar[int] = 0x50
    STAGE: ClassVar[str] = "advertise"
    protocol: str
    round_index: int
    invited: tuple[int, ...]
    recipient: int | None
    length: int
    schema_fingerprint: bytes
    params: str
    FIELDS: ClassVar[dict[str, Field]] = {
        "protocol": Text(64),
        "round_index": Int(_U64S, 2**64 - 1),
        "invited": IdList(),
        "recipient": OptionalId(),
        "length": Int(_U64S, 2**64 - 1),
        "schema_fingerprint": Blob(1024),
        "params": Text(1024),
    }


@dataclass(frozen=True, eq=False)
class CKKSAdvertise(Message):
    """Client -> server, stage ``advertise``: the client's X25519 channel key."""

    TYPE: ClassVar[int] = 0x51
    STAGE: ClassVar[str] = "advertise"
    public_key: bytes
    FIELDS: ClassVar[dict[str, Field]] = {"public_key": Fixed(PUBLIC_KEY_BYTES)}


@dataclass(frozen=True, eq=False)
class CKKSKeysRequest(Message):
    """Server -> client, stage ``keys``: the roster of channel keys, the key generator and the key holders."""

    TYPE: ClassVar[int] = 0x52
    STAGE: ClassVar[str] = "keys"
    roster: tuple[tuple[int, bytes], ...]
    generator: int
    holders: tuple[int, ...]
    FIELDS: ClassVar[dict[str, Field]] = {
        "roster": Envelopes(PUBLIC_KEY_BYTES),
        "generator": _ID,
        "holders": IdList(),
    }


@dataclass(frozen=True, eq=False)
class CKKSKeys(Message):
    """Generator -> server, stage ``keys``: the public context, and one sealed key message per peer."""

    TYPE: ClassVar[int] = 0x53
    STAGE: ClassVar[str] = "keys"
    session_id: bytes
    public_context: bytes
    sealed: tuple[tuple[int, bytes], ...]
    FIELDS: ClassVar[dict[str, Field]] = {
        "session_id": _SID,
        "public_context": Blob(_BIG),
        "sealed": Envelopes(_BIG),
    }


@dataclass(frozen=True, eq=False)
class CKKSUploadRequest(Message):
    """Server -> client, stage ``upload``: the generator's session id and the sealed key for this client."""

    TYPE: ClassVar[int] = 0x54
    STAGE: ClassVar[str] = "upload"
    session_id: bytes
    sealed: bytes
    FIELDS: ClassVar[dict[str, Field]] = {"session_id": _SID, "sealed": Blob(_BIG)}


@dataclass(frozen=True, eq=False)
class CKKSUpload(Message):
    """Client -> server, stage ``upload``: the serialised ciphertexts, ``(chunk index, bytes)``."""

    TYPE: ClassVar[int] = 0x55
    STAGE: ClassVar[str] = "upload"
    session_id: bytes
    ciphertexts: tuple[tuple[int, bytes], ...]
    FIELDS: ClassVar[dict[str, Field]] = {"session_id": _SID, "ciphertexts": Envelopes(_BIG)}


@dataclass(frozen=True, eq=False)
class CKKSSumRequest(Message):
    """Server -> decryptor, stage ``release``: the summed ciphertexts and who is in the sum."""

    TYPE: ClassVar[int] = 0x56
    STAGE: ClassVar[str] = "release"
    session_id: bytes
    contributors: tuple[int, ...]
    ciphertexts: tuple[tuple[int, bytes], ...]
    FIELDS: ClassVar[dict[str, Field]] = {
        "session_id": _SID,
        "contributors": IdList(),
        "ciphertexts": Envelopes(_BIG),
    }


@dataclass(frozen=True, eq=False)
class CKKSRelease(Message):
    """Decryptor -> server, stage ``release``: the released (rounded, rule-checked) sums only."""

    TYPE: ClassVar[int] = 0x57
    STAGE: ClassVar[str] = "release"
    session_id: bytes
    header: bytes
    arrays: tuple[tuple[int, bytes], ...]
    FIELDS: ClassVar[dict[str, Field]] = {
        "session_id": _SID,
        "header": Blob(1 << 24),
        "arrays": Envelopes(_BIG),
    }


def _decode(payload: bytes, expected: type[M], party: str | int, phase: str) -> M:
    try:
        return decode(payload, expected)
    except MalformedMessageError as exc:
        raise MalformedMessageError(str(exc), party=party, phase=phase) from exc


# ----------------------------------------------------------------------------------------------------
# Parties
# ----------------------------------------------------------------------------------------------------


class CKKSClient:
    """A CKKS client's state machine for one session (bytes in, bytes out; see the module docstring).

    Args:
        party_id: the client id.
        schema: the schema it was configured with.
        params: the CKKS parameters it derived from the schema and its configuration.
        contribution: its named tensors.
        round_index: the round it expects.
        context: the public round context it was shown.
        save_secret_key: where a key generator writes its secret context (mode 0600), if anywhere.
    """

    def __init__(
        self,
        party_id: int,
        schema: SumSchema,
        params: CKKSParameters,
        contribution: Contribution,
        round_index: int,
        context: bytes,
        save_secret_key: Path | None = None,
    ) -> None:
        self.party_id = int(party_id)
        self.schema = schema
        self.params = params
        self.layout = _layout(schema, params.digit_bits, params.slots)
        self._contribution: Contribution | None = contribution
        self.round_index = int(round_index)
        self.context_digest = hashlib.sha256(bytes(context)).digest()
        self._save_to = save_secret_key
        self.stage = "start"
        self._keys: ChannelKeys | None = None
        self._request = b""
        self.roster: dict[int, bytes] = {}
        self.session_id = b""
        self.generator: int | None = None
        self._ctx: ts.Context | None = None
        self._secret: bytes | None = None  # serialised secret context (key holders only)
        self._sealed: dict[int, bytes] = {}
        self.recipient: int | None = None
        self.released: Sums | None = None
        self.release_info: dict[str, float] = {}
        #: Wall seconds of this client's steps (benchmarks): keygen, open_key, encrypt, load_secret_key, decrypt.
        self.timing: dict[str, float] = {}

    @property
    def holds_secret_key(self) -> bool:
        """Whether this client holds the secret key (a key holder after the keys stage)."""
        return self._secret is not None

    def handle(self, payload: bytes) -> bytes | None:
        if self.stage == "start":
            return self._advertise(payload)
        if self.stage in ("advertised", "keyed"):
            if len(payload) > 3 and payload[3] == CKKSKeysRequest.TYPE:
                return self._keys_stage(payload)
            return self._upload(payload)
        if self.stage == "uploaded":
            return self._release(payload)
        raise StageOrderError(
            f"request after the protocol finished (stage {self.stage})", party=self.party_id
        )

    # -- advertise ----------------------------------------------------------------------------------------

    def _advertise(self, payload: bytes) -> bytes:
        where: dict[str, Any] = {"party": self.party_id, "phase": "advertise"}
        req = _decode(payload, CKKSAdvertiseRequest, **where)
        if req.schema_fingerprint != self.schema.fingerprint() or req.length != self.schema.length:
            raise InconsistentViewError(
                "the server's schema differs from the one this client was given", **where
            )
        if req.round_index != self.round_index or self.party_id not in req.invited:
            raise InconsistentViewError(
                f"request for round {req.round_index} does not invite this client (round {self.round_index})",
                **where,
            )
        if req.protocol != CKKSAggregation.name or req.params != json.dumps(
            self.params.canonical(), sort_keys=True
        ):
            raise InconsistentViewError(
                f"the server's CKKS parameters {req.params} differ from this client's "
                f"{self.params.canonical()}",
                **where,
            )
        self._request = payload
        self.recipient = req.recipient
        self._keys = ChannelKeys()
        self.stage = "advertised"
        return CKKSAdvertise(public_key=self._keys.public_bytes).to_bytes()

    # -- keys ---------------------------------------------------------------------------------------------

    def _channel(self, peer: int) -> Any:
        if self._keys is None:  # pragma: no cover - guarded by the stage
            raise StageOrderError("no channel key yet", party=self.party_id)
        return self._keys.channel(
            self.party_id,
            peer,
            self.roster[peer],
            session_id=self.session_id,
            round_index=self.round_index,
            purpose="ckks-key",
        )

    def _keys_stage(self, payload: bytes) -> bytes | None:
        where: dict[str, Any] = {"party": self.party_id, "phase": "keys"}
        req = _decode(payload, CKKSKeysRequest, **where)
        roster = dict(req.roster)
        if len(roster) != len(req.roster):
            raise InconsistentViewError("the roster lists a client twice", **where)
        if self._keys is None or roster.get(self.party_id) != self._keys.public_bytes:
            raise InconsistentViewError("the roster does not carry this client's own key", **where)
        if len(set(roster.values())) != len(roster):
            raise InconsistentViewError("the roster repeats a public key", **where)
        if (
            req.generator not in roster
            or not set(req.holders) <= set(roster)
            or req.generator not in req.holders
        ):
            raise InconsistentViewError("the key generator or a key holder is not in the roster", **where)
        if self.stage == "keyed" and roster != self.roster:
            raise InconsistentViewError("a second keys request changed the roster", **where)
        self.roster = roster
        self.session_id = _session_id(self._request, tuple(req.roster), self.context_digest)
        self.generator = req.generator
        self.stage = "keyed"
        if req.generator != self.party_id:
            return None
        return self._generate(set(req.holders))

    def _generate(self, holders: set[int]) -> bytes:
        t0 = time.perf_counter()
        p = self.params
        ctx = ts.context(
            ts.SCHEME_TYPE.CKKS,
            poly_modulus_degree=p.poly_modulus_degree,
            coeff_mod_bit_sizes=list(p.coeff_mod_bit_sizes),
        )
        ctx.global_scale = 2.0**p.scale_bits
        secret = ctx.serialize(
            save_public_key=True, save_secret_key=True, save_galois_keys=False, save_relin_keys=False
        )
        public = ctx.serialize(
            save_public_key=True, save_secret_key=False, save_galois_keys=False, save_relin_keys=False
        )
        del ctx
        if self._save_to is not None:
            fd = os.open(self._save_to, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "wb") as fh:
                fh.write(secret)
        self._secret = secret
        self._ctx = ts.context_from(public)
        sealed = []
        for peer in sorted(self.roster):
            if peer == self.party_id:
                continue
            kind, blob = (b"S", secret) if peer in holders else (b"P", public)
            sealed.append((peer, self._channel(peer).seal(kind + blob)))
        out = CKKSKeys(session_id=self.session_id, public_context=public, sealed=tuple(sealed)).to_bytes()
        self.timing["keygen"] = time.perf_counter() - t0
        return out

    # -- upload -------------------------------------------------------------------------------------------

    def _upload(self, payload: bytes) -> bytes:
        where: dict[str, Any] = {"party": self.party_id, "phase": "upload"}
        if self.stage != "keyed" or self.generator is None:
            raise StageOrderError("upload request before the keys stage", **where)
        req = _decode(payload, CKKSUploadRequest, **where)
        if req.session_id != self.session_id:
            raise InconsistentViewError(
                "the key generator's session differs from this client's view", **where
            )
        t0 = time.perf_counter()
        if self.generator != self.party_id:
            plain = self._channel(self.generator).open(req.sealed)  # InvalidMessage on any failure
            private = plain[:1] == b"S"
            if plain[:1] not in (b"S", b"P"):
                raise InvalidMessage()
            try:
                ctx = ts.context_from(plain[1:])
            except Exception as exc:  # noqa: BLE001 - TenSEAL raises assorted types on bad input
                raise MalformedMessageError(
                    f"key context does not deserialise ({type(exc).__name__})", **where
                ) from None
            _check_context(ctx, self.params, private=private)
            if private:
                self._secret = plain[1:]
                ctx.make_context_public()  # encrypt with the public key; keep the secret only as bytes
            self._ctx = ctx
        elif req.sealed:
            raise MalformedMessageError("the key generator was sent a key", **where)
        if self._contribution is None or self._ctx is None:  # pragma: no cover - guarded by the stage
            raise StageOrderError("nothing to upload", **where)
        t1 = time.perf_counter()
        enc = self.schema.encode(self._contribution, default_rng())
        self._contribution = None  # sent: keep nothing
        vec = _digits(self.layout, centred_lift(enc.data, self.schema.ring_bits), enc.clip_counts)
        rows = vec.reshape(self.layout.chunks, self.layout.slots)
        cts = tuple((i, ts.ckks_vector(self._ctx, row.tolist()).serialize()) for i, row in enumerate(rows))
        self._ctx = None  # decryption (key holders) uses the secret context bytes
        self.stage = "uploaded"
        out = CKKSUpload(session_id=self.session_id, ciphertexts=cts).to_bytes()
        self.timing["open_key"] = t1 - t0
        self.timing["encrypt"] = time.perf_counter() - t1
        return out

    # -- release ------------------------------------------------------------------------------------------

    def _release(self, payload: bytes) -> bytes | None:
        where: dict[str, Any] = {"party": self.party_id, "phase": "release"}
        req = _decode(payload, CKKSSumRequest, **where)
        self.stage = "done"
        if self._secret is None:
            raise ProtocolError("asked to decrypt without holding the secret key", **where)
        if self.recipient is not None and self.recipient != self.party_id:
            raise ProtocolError(f"asked to decrypt a sum designated for client {self.recipient}", **where)
        if req.session_id != self.session_id:
            raise InconsistentViewError("the sum belongs to another session", **where)
        lay, params, schema = self.layout, self.params, self.schema
        n = len(req.contributors)
        if len(set(req.contributors)) != n or not set(req.contributors) <= set(self.roster) or n == 0:
            raise InconsistentViewError("the claimed contributors are not distinct roster members", **where)
        if [i for i, _ in req.ciphertexts] != list(range(lay.chunks)):
            raise MalformedMessageError(f"expected ciphertexts 0..{lay.chunks - 1}", **where)
        t0 = time.perf_counter()
        ctx = ts.context_from(self._secret)
        self._secret = None  # one decryption per key
        self.timing["load_secret_key"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        dec = np.empty(lay.chunks * lay.slots, dtype=np.float64)
        for i, blob in req.ciphertexts:
            try:
                v = ts.ckks_vector_from(ctx, blob)
                _check_ciphertext(v, params, ctx, full=i == 0)  # a mismatch elsewhere fails the grid check
            except Exception as exc:  # noqa: BLE001
                raise MalformedMessageError(f"sum ciphertext {i} rejected ({exc})", **where) from None
            dec[i * lay.slots : (i + 1) * lay.slots] = v.decrypt()
        del ctx
        ring, clip, dev = _undigits(lay, schema, dec, n, params, where)
        values = schema.decode(ring, n)
        sums = schema.release(values, n, clip, schema.error_bound(n))
        self.release_info = {"max_grid_deviation": dev, "error_bound": params.error_bound(n)}
        if self.recipient is not None:
            self.released = sums
            self.timing["decrypt"] = time.perf_counter() - t0
            return None
        header, arrays = _sums_to_wire(sums)
        out = CKKSRelease(session_id=self.session_id, header=header, arrays=arrays).to_bytes()
        self.timing["decrypt"] = time.perf_counter() - t0
        return out

    def forget(self) -> None:
        """Drop key material and inputs at the end of the session (TenSEAL offers no secure wipe)."""
        self._ctx = None
        self._secret = None
        self._contribution = None


def _digits(lay: _Layout, ints: np.ndarray, clip_counts: Mapping[str, int]) -> np.ndarray:
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


def _undigits(
    lay: _Layout, schema: SumSchema, dec: np.ndarray, n: int, params: CKKSParameters, where: Mapping[str, Any]
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


def _add_all_or_nothing(
    acc: list[ts.CKKSVector], vecs: list[ts.CKKSVector], where: Mapping[str, Any]
) -> None:
    """``acc += vecs`` chunk by chunk; if SEAL refuses a chunk (level, scale, size), undo the others."""
    done = 0
    try:
        for a, v in zip(acc, vecs, strict=True):
            a += v
            done += 1
    except Exception as exc:  # noqa: BLE001 - SEAL raises ValueError/RuntimeError on mismatched operands
        for a, v in zip(acc[:done], vecs[:done], strict=True):
            a -= v
        raise MalformedMessageError(
            f"ciphertext {done} does not match the session's parameters ({exc})", **where
        ) from None


def _sums_to_wire(sums: Sums) -> tuple[bytes, tuple[tuple[int, bytes], ...]]:
    fields = _sums_to_fields(sums)
    return fields[0], tuple(enumerate(fields[1:]))


class CKKSServer:
    """The CKKS server: relays, adds ciphertexts, asks one key holder to decrypt; never holds a secret key.

    Args:
        schema: the schema of the sum.
        params: the CKKS parameters.
        invited: the invited client ids.
        round_index: the round.
        recipient: the designated recipient, or ``None`` (the sum is released to the server).
        key_holders: ``"all"`` or how many clients receive the secret key.
        key_generator: the configured key generator, or ``None``.
        transcript: where exclusions are recorded.
    """

    stages: tuple[str, ...] = PHASES

    def __init__(
        self,
        schema: SumSchema,
        params: CKKSParameters,
        invited: Sequence[int],
        round_index: int,
        recipient: int | None,
        key_holders: Literal["all"] | int,
        key_generator: int | None,
        transcript: Transcript,
    ) -> None:
        self.schema = schema
        self.params = params
        self.layout = _layout(schema, params.digit_bits, params.slots)
        self.invited = tuple(invited)
        self.recipient = recipient
        self.key_holders = key_holders
        self.key_generator = key_generator
        self.transcript = transcript
        self.request = CKKSAdvertiseRequest(
            protocol=CKKSAggregation.name,
            round_index=int(round_index),
            invited=self.invited,
            recipient=recipient,
            length=schema.length,
            schema_fingerprint=schema.fingerprint(),
            params=json.dumps(params.canonical(), sort_keys=True),
        )
        self.roster: dict[int, bytes] = {}
        self.tried: list[int] = []
        self.generator: int | None = None
        self.holders: tuple[int, ...] = ()
        self.session_id = b""
        self.public_context: ts.Context | None = None
        self.contributors: tuple[int, ...] = ()
        self.decryptor: int | None = None
        self._asked: list[int] = []
        self._sum = b""
        self.sums: Sums | None = None
        self.finished = False
        #: Wall seconds of the server's steps: add (validate, deserialise, add), sum (serialise).
        self.timing: dict[str, float] = {}

    def _exclude(self, client: int, error: Exception) -> None:
        self.transcript.excluded.setdefault(client, f"{type(error).__name__}: {error}")

    def start(self) -> Outgoing:
        return Outgoing("advertise", dict.fromkeys(self.invited, self.request.to_bytes()))

    def handle(self, stage: str, replies: Sequence[tuple[int, bytes]]) -> Outgoing | None:
        if stage == "advertise":
            return self._roster(replies)
        if stage == "keys":
            return self._keys(replies)
        if stage == "upload":
            return self._add(replies)
        if stage == "release":
            return self._released(replies)
        raise StageOrderError(f"unexpected stage {stage!r}; valid: {list(PHASES)}", party=SERVER)

    @staticmethod
    def _once(replies: Sequence[tuple[int, bytes]]) -> tuple[dict[int, bytes], set[int]]:
        seen: dict[int, list[bytes]] = {}
        for c, p in replies:
            seen.setdefault(c, []).append(p)
        return {c: ps[0] for c, ps in seen.items() if len(ps) == 1}, {
            c for c, ps in seen.items() if len(ps) > 1
        }

    def _roster(self, replies: Sequence[tuple[int, bytes]]) -> Outgoing:
        ok, dup = self._once(replies)
        for c in dup:
            self._exclude(c, StageOrderError("sent more than one advertisement", party=c, phase="advertise"))
        keys: dict[int, bytes] = {}
        for c, payload in ok.items():
            if c not in self.invited:
                continue
            try:
                keys[c] = _decode(payload, CKKSAdvertise, c, "advertise").public_key
            except MalformedMessageError as exc:
                self._exclude(c, exc)
        seen: dict[bytes, int] = {}
        for c in sorted(keys):
            if keys[c] in seen:
                self._exclude(
                    c, InconsistentViewError("advertised another client's key", party=c, phase="advertise")
                )
            else:
                seen[keys[c]] = c
        self.roster = {c: k for k, c in seen.items()}
        if not self.roster:
            raise ThresholdError(
                "no client advertised a key; nothing revealed", party=SERVER, phase="advertise"
            )
        return self._next_generator()

    def _next_generator(self) -> Outgoing:
        members = [c for c in sorted(self.roster) if c not in self.transcript.excluded]
        if self.key_generator is not None:
            candidates = [self.key_generator] if self.key_generator in self.roster else []
        else:
            candidates = members
        candidates = [c for c in candidates if c not in self.tried]
        if not candidates:
            raise ThresholdError(
                "no key generator is available; nothing revealed", party=SERVER, phase="keys"
            )
        g = candidates[0]
        self.tried.append(g)
        ranked = [g] + ([self.recipient] if self.recipient is not None and self.recipient not in (g,) else [])
        ranked += [c for c in members if c not in ranked]
        ranked = [c for c in ranked if c in members]
        holders = ranked if self.key_holders == "all" else ranked[: int(self.key_holders)]
        if self.recipient is not None and self.recipient in members and self.recipient not in holders:
            holders.append(self.recipient)
        self.generator, self.holders = g, tuple(holders)
        req = CKKSKeysRequest(roster=tuple(sorted(self.roster.items())), generator=g, holders=self.holders)
        return Outgoing("keys", dict.fromkeys(members, req.to_bytes()))

    def _keys(self, replies: Sequence[tuple[int, bytes]]) -> Outgoing:
        ok, dup = self._once(replies)
        for c in dup | (set(ok) - {self.generator}):
            self._exclude(c, StageOrderError("sent an unrequested keys message", party=c, phase="keys"))
            ok.pop(c, None)
        g = self.generator
        if g not in ok:
            return self._next_generator()  # the generator dropped out or aborted: ask the next client
        try:
            msg = _decode(ok[g], CKKSKeys, g, "keys")
            ctx = ts.context_from(msg.public_context)
        except MalformedMessageError as exc:
            self._exclude(g, exc)
            return self._next_generator()
        except Exception as exc:  # noqa: BLE001 - TenSEAL raises assorted types on bad input
            self._exclude(g, MalformedMessageError(f"public context does not deserialise ({exc})", party=g))
            return self._next_generator()
        if ctx.is_private() or ctx.has_secret_key():
            del ctx
            self._exclude(
                g, ProtocolError("sent the server a context holding the secret key", party=g, phase="keys")
            )
            return self._next_generator()
        try:
            _check_context(ctx, self.params, private=False)
        except InconsistentViewError as exc:
            self._exclude(g, exc)
            return self._next_generator()
        sealed = dict(msg.sealed)
        self.public_context = ctx
        self.session_id = msg.session_id
        out = {}
        for c in sorted(self.roster):
            if c in self.transcript.excluded:
                continue
            if c == g:
                out[c] = CKKSUploadRequest(session_id=msg.session_id, sealed=b"").to_bytes()
            elif c in sealed:
                out[c] = CKKSUploadRequest(session_id=msg.session_id, sealed=sealed[c]).to_bytes()
        return Outgoing("upload", out)

    def _add(self, replies: Sequence[tuple[int, bytes]]) -> Outgoing:
        ok, dup = self._once(replies)
        for c in dup:
            self._exclude(
                c, StageOrderError("sent more than one input; all discarded", party=c, phase="upload")
            )
        t0 = time.perf_counter()
        ctx = self.public_context
        if ctx is None:  # pragma: no cover - guarded by the stage order
            raise StageOrderError("upload before the keys stage", party=SERVER, phase="upload")
        acc: list[ts.CKKSVector] | None = None
        contributors = []
        for c in sorted(ok):
            if c in self.transcript.excluded or c not in self.roster:
                continue
            where: dict[str, Any] = {"party": c, "phase": "upload"}
            try:
                msg = _decode(ok[c], CKKSUpload, c, "upload")
                if msg.session_id != self.session_id:
                    raise InconsistentViewError("input for another session", **where)
                if [i for i, _ in msg.ciphertexts] != list(range(self.layout.chunks)):
                    raise MalformedMessageError(
                        f"sent {len(msg.ciphertexts)} ciphertexts, expected {self.layout.chunks} in order (a vector "
                        "longer or shorter than the schema)",
                        **where,
                    )
                vecs = []
                for i, blob in msg.ciphertexts:
                    try:
                        v = ts.ckks_vector_from(ctx, blob)
                        _check_ciphertext(v, self.params, ctx, full=acc is None or i == 0)
                    except Exception as exc:  # noqa: BLE001 - TenSEAL/SEAL raise assorted types on bad input
                        raise MalformedMessageError(f"ciphertext {i} rejected: {exc}", **where) from None
                    vecs.append(v)
                if acc is not None:
                    _add_all_or_nothing(acc, vecs, where)
            except ProtocolError as exc:
                self._exclude(c, exc)
                continue
            if acc is None:
                acc = vecs
            contributors.append(c)
        self.contributors = tuple(contributors)
        self.timing["add"] = time.perf_counter() - t0
        n = len(contributors)
        if n == 0:
            raise ThresholdError(
                "no client uploaded a valid ciphertext; nothing revealed", party=SERVER, phase="upload"
            )
        if n < self.schema.min_contributors:
            raise ReleaseRefusedError(
                f"sum of {n} contributor(s) refused: the schema requires at least min_contributors="
                f"{self.schema.min_contributors}; the sum was not decrypted",
                party=SERVER,
                phase="upload",
            )
        if acc is None:  # pragma: no cover - n > 0 above
            raise ThresholdError("no ciphertext to add", party=SERVER, phase="upload")
        t0 = time.perf_counter()
        self._sum = CKKSSumRequest(
            session_id=self.session_id,
            contributors=self.contributors,
            ciphertexts=tuple((i, v.serialize()) for i, v in enumerate(acc)),
        ).to_bytes()
        self.timing["sum"] = time.perf_counter() - t0
        return self._ask_decryptor()

    def _ask_decryptor(self) -> Outgoing:
        order = [c for c in self.holders if c in self.contributors and c not in self._asked]
        if self.recipient is not None:
            order = [c for c in order if c == self.recipient]
        for c in order:
            if c in self.transcript.excluded:
                continue
            self._asked.append(c)
            self.decryptor = c
            return Outgoing("release", {c: self._sum})
        raise ThresholdError(
            "no key holder is alive to decrypt the sum; nothing revealed", party=SERVER, phase="release"
        )

    def _released(self, replies: Sequence[tuple[int, bytes]]) -> Outgoing | None:
        d = self.decryptor
        ok, _ = self._once(replies)
        if d is not None and d in self.transcript.excluded:
            raise ProtocolError(
                f"the decryptor aborted ({self.transcript.excluded[d]}); nothing released",
                party=SERVER,
                phase="release",
            )
        if self.recipient is not None:
            self.finished = True  # the recipient keeps the sum; the server learns nothing
            return None
        if d not in ok:
            return self._ask_decryptor()  # the decryptor dropped out: ask the next key holder
        try:
            msg = _decode(ok[d], CKKSRelease, d, "release")
            if msg.session_id != self.session_id:
                raise InconsistentViewError("release for another session", party=d, phase="release")
            self.sums = _sums_from_fields([msg.header, *[b for _, b in msg.arrays]], self.schema)
        except ProtocolError:
            raise
        except Exception as exc:  # noqa: BLE001 - a garbled release
            raise MalformedMessageError(f"undecodable release ({exc})", party=d, phase="release") from None
        self.finished = True
        return None


# ----------------------------------------------------------------------------------------------------
# The protocol
# ----------------------------------------------------------------------------------------------------


class CKKSAggregation(Protocol):
    __doc__ = __doc__  # the class shares the module docstring (stages, security, args)

    name: ClassVar[str] = "ckks"
    reveals_individual_inputs: ClassVar[bool] = False
    stages: ClassVar[tuple[str, ...]] = PHASES
    input_phase: ClassVar[str] = "upload"

    def __init__(
        self,
        *,
        poly_modulus_degree: int = 8192,
        coeff_mod_bit_sizes: Sequence[int] | None = None,
        scale_bits: int | None = None,
        digit_bits: int | None = None,
        max_length: int = 2**24,
        key_holders: Literal["all"] | int = "all",
        key_generator: int | None = None,
        save_secret_key: str | os.PathLike[str] | None = None,
        record_views: bool = True,
        interceptor: Interceptor | None = None,
        rng: np.random.Generator | None = None,
    ) -> None:
        if poly_modulus_degree not in MAX_COEFF_BITS:
            raise ConfigError(
                f"poly_modulus_degree must be one of {sorted(MAX_COEFF_BITS)}, got {poly_modulus_degree!r}"
            )
        if coeff_mod_bit_sizes is not None:
            coeff_mod_bit_sizes = _check_coeff(poly_modulus_degree, coeff_mod_bit_sizes)
        if isinstance(max_length, bool) or not isinstance(max_length, int) or max_length < 1:
            raise ConfigError(f"max_length must be a positive integer, got {max_length!r}")
        if key_holders != "all" and (
            isinstance(key_holders, bool) or not isinstance(key_holders, int) or key_holders < 1
        ):
            raise ConfigError(f"key_holders must be 'all' or an integer >= 1, got {key_holders!r}")
        if scale_bits is not None and (
            isinstance(scale_bits, bool) or not isinstance(scale_bits, int) or scale_bits < 1
        ):
            raise ConfigError(f"scale_bits must be a positive integer, got {scale_bits!r}")
        self.poly_modulus_degree = poly_modulus_degree
        self.coeff_mod_bit_sizes = coeff_mod_bit_sizes
        self.scale_bits = scale_bits
        self.digit_bits = digit_bits
        self.max_length = max_length
        self.key_holders = key_holders
        self.key_generator = key_generator
        self.save_secret_key = None if save_secret_key is None else Path(save_secret_key)
        self.record_views = bool(record_views)
        self._interceptor = interceptor
        self._rng = rng
        self._cache: dict[bytes, CKKSParameters] = {}

    def __repr__(self) -> str:
        return (
            f"CKKSAggregation(poly_modulus_degree={self.poly_modulus_degree}, "
            f"coeff_mod_bit_sizes={self.coeff_mod_bit_sizes}, key_holders={self.key_holders!r})"
        )

    def parameters(self, schema: SumSchema) -> CKKSParameters:
        """The CKKS parameters used for ``schema``.

        Raises:
            ConfigError: the vector is longer than ``max_length``, or the (explicit) context is too
                imprecise for the schema (the message gives the numbers).
        """
        if schema.length > self.max_length:
            raise ConfigError(
                f"schema vector length {schema.length} exceeds the configured max_length={self.max_length} "
                "for CKKS aggregation"
            )
        key = schema.fingerprint()
        if key not in self._cache:
            self._cache[key] = select_parameters(
                schema,
                poly_modulus_degree=self.poly_modulus_degree,
                coeff_mod_bit_sizes=self.coeff_mod_bit_sizes,
                scale_bits=self.scale_bits,
                digit_bits=self.digit_bits,
            )
        return self._cache[key]

    def aggregate(
        self,
        schema: SumSchema,
        contributions: Mapping[int, Contribution],
        *,
        dropouts: DropoutPlan | None = None,
        round_index: int = 0,
        recipient: int | None = None,
        context: bytes | Mapping[int, bytes] = b"",
    ) -> tuple[Sums, Transcript]:
        """Sum ``contributions`` under CKKS. See :meth:`Protocol.aggregate` and the class docstring.

        Raises:
            ConfigError: bad arguments, a vector longer than ``max_length``, a too-imprecise context.
            OverflowRiskError: more contributions than ``schema.max_clients``.
            ThresholdError: nobody generated keys, nobody uploaded, or no key holder is alive to decrypt
                (nothing revealed).
            ReleaseRefusedError: fewer contributors than ``schema.min_contributors`` (not decrypted).
            ProtocolError: the decryptor aborted, e.g. a decrypted sum failed its integrity checks
                (nothing released).
        """
        if not isinstance(schema, SumSchema):
            raise ConfigError(f"schema must be a SumSchema, got {type(schema).__name__}")
        params = self.parameters(schema)
        clients = check_clients(contributions)
        schema.check_num_clients(len(clients))
        if recipient is not None and recipient not in contributions:
            raise ConfigError(f"recipient {recipient!r} is not an invited client; invited: {list(clients)}")
        if self.key_generator is not None and self.key_generator not in contributions:
            raise ConfigError(
                f"key_generator {self.key_generator!r} is not an invited client; invited: {list(clients)}"
            )
        contexts = client_contexts(context, clients)
        plan = (dropouts or DropoutPlan.none()).resolve(PHASES, self._rng or default_rng())
        t = Transcript(
            protocol=self.name,
            round_index=int(round_index),
            invited=clients,
            recipient=SERVER if recipient is None else recipient,
        )
        server = CKKSServer(
            schema, params, clients, round_index, recipient, self.key_holders, self.key_generator, t
        )
        parties = {
            c: CKKSClient(c, schema, params, contributions[c], round_index, contexts[c], self.save_secret_key)
            for c in clients
        }
        try:
            Router(t, dropouts=plan, record_views=self.record_views, interceptor=self._interceptor).run(
                server, parties
            )
        finally:
            for p in parties.values():
                p.forget()
        t.session_id = server.session_id
        t.survivors = server.contributors
        if recipient is None:
            sums = server.sums
            info = parties[server.decryptor].release_info if server.decryptor is not None else {}
        else:
            sums = parties[recipient].released
            info = parties[recipient].release_info
            t.extra["delivered_to"] = recipient
        if sums is None:
            raise ThresholdError(
                "no key holder decrypted the sum; nothing revealed", party=SERVER, phase="release"
            )
        t.clip_counts = dict(sums.clip_counts)
        t.withheld = dict(sums.withheld)
        n = len(server.contributors)
        t.extra["ckks"] = {
            **params.canonical(),
            "chunks": server.layout.chunks,
            "slots_used": server.layout.total,
            "generator": server.generator,
            "decryptor": server.decryptor,
            "key_holders": list(server.holders),
            "ckks_error_bound": params.error_bound(n),
            "max_grid_deviation": info.get("max_grid_deviation", float("nan")),
            "error_budget": ERROR_BUDGET,
            "seconds": _timing_summary(server, parties),
        }
        return sums, t


def _timing_summary(server: CKKSServer, parties: Mapping[int, CKKSClient]) -> dict[str, float]:
    """Mean client step times, the key generation, the server's add and the decryption (seconds)."""
    out: dict[str, float] = {f"server_{k}": v for k, v in server.timing.items()}
    for step in ("keygen", "open_key", "encrypt", "load_secret_key", "decrypt"):
        vals = [p.timing[step] for p in parties.values() if step in p.timing]
        if vals:
            out[f"client_{step}" + ("_mean" if step in ("open_key", "encrypt") else "")] = float(
                np.mean(vals)
            )
    return out
