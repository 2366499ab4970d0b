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
        (the generator, the recipient, then the lowest ids); the others receive the public context only.
        The default is the smallest distribution that still survives the decryptor dropping out: the
        generator and one backup (every key holder can decrypt every ciphertext it sees, so fewer holders
        means fewer parties whose collusion with the server reveals inputs, and fewer bytes: at
        :math:`N = 8192` a sealed secret context is 394 KB against 262 KB for the public one, measured
        by ``securefgl bench protocols --section ckks-bytes``). (default: ``2``)
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

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import ClassVar, Literal

import numpy as np

from securefgl.errors import ConfigError, ThresholdError
from securefgl.protocols._ckks_client import CKKSClient
from securefgl.protocols._ckks_messages import U8 as U8  # not API: importable as before, outside __all__
from securefgl.protocols._ckks_messages import (
    CKKSAdvertise,
    CKKSAdvertiseRequest,
    CKKSKeys,
    CKKSKeysRequest,
    CKKSRelease,
    CKKSSumRequest,
    CKKSUpload,
    CKKSUploadRequest,
)
from securefgl.protocols._ckks_messages import M as M  # not API: importable as before, outside __all__
from securefgl.protocols._ckks_params import (
    ERROR_BUDGET,
    GRID_TOLERANCE,
    MAX_COEFF_BITS,
    PHASES,
    PROTOCOL_NAME,
    CKKSParameters,
    Stage,
    check_coeff,
    select_parameters,
)
from securefgl.protocols._ckks_server import CKKSServer
from securefgl.protocols._parties import check_clients, client_contexts
from securefgl.protocols._release import DEFAULT_MIN_CONTRIBUTORS, check_min_contributors
from securefgl.protocols.base import SERVER, Contribution, DropoutPlan, Protocol, Sums, Transcript
from securefgl.protocols.encoding import SumSchema, default_rng
from securefgl.protocols.router import Interceptor, Router

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
    "ERROR_BUDGET",
    "GRID_TOLERANCE",
    "MAX_COEFF_BITS",
    "PHASES",
    "Stage",
    "select_parameters",
]


class CKKSAggregation(Protocol):
    __doc__ = __doc__  # the class shares the module docstring (stages, security, args)

    name: ClassVar[str] = PROTOCOL_NAME
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
        key_holders: Literal["all"] | int = 2,
        key_generator: int | None = None,
        save_secret_key: str | os.PathLike[str] | None = None,
        record_views: bool = True,
        interceptor: Interceptor | None = None,
        rng: np.random.Generator | None = None,
        min_contributors: int = DEFAULT_MIN_CONTRIBUTORS,
    ) -> None:
        self.min_contributors = check_min_contributors(min_contributors)
        if poly_modulus_degree not in MAX_COEFF_BITS:
            raise ConfigError(
                f"poly_modulus_degree must be one of {sorted(MAX_COEFF_BITS)}, got {poly_modulus_degree!r}"
            )
        if coeff_mod_bit_sizes is not None:
            coeff_mod_bit_sizes = check_coeff(poly_modulus_degree, coeff_mod_bit_sizes)
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
            ReleaseRefusedError: fewer contributors than ``min_contributors`` (default 2) or the
                schema's minimum (not decrypted); a decrypted sum beyond ``n * bound`` (not released).
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
            schema,
            params,
            clients,
            round_index,
            recipient,
            self.key_holders,
            self.key_generator,
            t,
            min_contributors=self.min_contributors,
        )
        parties = {
            c: CKKSClient(
                c,
                schema,
                params,
                contributions[c],
                round_index,
                contexts[c],
                self.save_secret_key,
                min_contributors=self.min_contributors,
            )
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
