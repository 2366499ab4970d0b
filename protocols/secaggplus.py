"""SecAgg+ (Bell et al., CCS 2020) and, on the complete graph, SecAgg (Bonawitz et al., CCS 2017).

One implementation of masking-based secure aggregation with dropout recovery. Each client masks its
ring-encoded input with a self mask and with pairwise masks shared with its neighbours in a secret-sharing
graph, and Shamir-shares the two secrets that let the survivors remove the masks of whoever drops out.
:class:`SecAggPlus` uses a random Harary graph of degree about :math:`\\log n` (parameters from
:func:`~securefgl.protocols._harary.find_graph_parameters`); :class:`~securefgl.protocols.secagg.SecAgg`
is this class configured with the complete graph.

Stages (:class:`Stage`, in this order; messages in :mod:`securefgl.protocols.messages`):

1. ``advertise_keys``: the server sends the public parameters; each client draws two X25519 key pairs
   (channel :math:`c_u`, mask :math:`s_u`) and returns the public keys.
2. ``share_keys``: the server relays all keys. Each client computes the session id

   .. math::
       \\mathrm{sid} = \\mathrm{SHA256}(\\text{protocol}, \\text{round}, \\text{invited}, k, t, b, d,
       \\text{prg}, \\text{recipient}, \\text{schema fingerprint}, \\mathrm{SHA256}(\\text{context}),
       \\{(v, c^{pk}_v, s^{pk}_v)\\}_{v \\in U_1}),

   derives the graph from it (so nobody chooses the neighbourhoods), draws a self-mask seed
   :math:`b_u`, Shamir-shares :math:`b_u` and :math:`s^{sk}_u` :math:`t`-out-of-:math:`|N(u)|` among
   its neighbours :math:`N(u)` (itself included), and encrypts each neighbour's shares with
   ChaCha20-Poly1305 under :math:`\\mathrm{HKDF}(\\mathrm{X25519}(c^{sk}_u, c^{pk}_v))` with
   ``(session, src, dst)`` in the associated data. It also sends
   :math:`\\mathrm{SHA256}(\\mathrm{sid}, u, b_u)`, a commitment the server checks reconstructions
   against.
3. ``masked_input``: the server forwards the ciphertexts. Client :math:`u` decrypts its shares,
   reports the senders whose ciphertext fails authentication (*complaints*; it does not mask against
   them, and the server excludes them), encodes its contribution with ``schema.encode`` and sends

   .. math::
       y_u = x_u + \\mathrm{PRG}(b_u) + \\sum_{v \\in M_u,\\, v > u} \\mathrm{PRG}(k_{uv})
             - \\sum_{v \\in M_u,\\, v < u} \\mathrm{PRG}(k_{uv}) \\bmod 2^{b},
       \\qquad k_{uv} = \\mathrm{HKDF}(\\mathrm{X25519}(s^{sk}_u, s^{pk}_v), \\text{sid}, (u, v)),

   with :math:`M_u \\subseteq N(u) \\cap U_2` the neighbours whose shares authenticated.
   :math:`x_u` also carries the client's per-block clip counts, split into limbs that cannot overflow,
   so only their sum is revealed.
4. ``unmasking``: for each survivor :math:`u \\in U_3` the server asks its neighbours for shares of
   :math:`b_u`; for each neighbour that dropped (or was excluded) after sharing, for shares of
   :math:`s^{sk}_v`. It reconstructs, checks each secret against its commitment (or public key), and
   removes the masks: :math:`\\sum_{u \\in U_3} y_u - \\mathrm{PRG}(b_u) \\mp \\sum_{v \\in D}
   \\mathrm{PRG}(k_{uv}) = \\sum_{u \\in U_3} x_u`.
5. ``deliver`` (designated-recipient mode only): see below.

Designated-recipient mode (``recipient=r``; FedStruct's receiver-blinded sums): every contributor
:math:`u` also adds a *recipient pad* :math:`\\mathrm{PRG}(p_{ur})`, :math:`p_{ur} =
\\mathrm{HKDF}(\\mathrm{X25519}(c^{sk}_u, c^{pk}_r), \\text{"recipient-pad"}, \\text{sid}, (u, r))`. The
pad key comes from the *channel* key pair, which is never secret-shared, so no set of clients below the
threshold and no server can remove it; only :math:`u` and :math:`r` know it. After unmasking, the server
holds :math:`\\sum_{u \\in U_3} x_u + \\mathrm{PRG}(p_{ur})`, uniformly random to it, and relays it with
the list :math:`U_3` to :math:`r`, who subtracts its :math:`|U_3|` pads, decodes and applies the release
rules. The server learns the sizes and :math:`U_3`, nothing about the sum. If :math:`r` drops, nobody
learns the sum.

Security:
    Honest-but-curious server, plus fewer than :math:`t` colluding clients per neighbourhood (SecAgg: in
    total), learn nothing about the inputs beyond their sum over :math:`U_3`, which has at least
    :math:`t` clients (and ``schema.min_contributors``). Every survivor refuses to reveal both share
    kinds of one peer (alive/dead overlap), duplicates, non-neighbours, requests with fewer than
    :math:`t` survivors, and repeated or out-of-order requests (:class:`~securefgl.errors.RequestRefusedError`,
    :class:`~securefgl.errors.ThresholdError`, :class:`~securefgl.errors.StageOrderError`). Everything is
    bound to the session id, so a server that shows different contexts (e.g. models) or parameters to
    different clients is caught: the clients' shares fail to authenticate, and a client left with fewer
    than :math:`t` valid shares aborts with :class:`~securefgl.errors.InconsistentViewError` before
    sending its input. Dropouts at any stage are tolerated as long as every needed secret keeps
    :math:`t` live holders; otherwise the server aborts with ThresholdError *before* asking for any
    share. A client that sends garbled, replayed, duplicated or misauthenticated messages is excluded
    like a dropped one and the sum over the others stays exact. Not protected: the released sum itself
    (see the attack harness), a server that lies about dropouts to a semi-malicious degree (no
    consistency round or signatures: use the semi-malicious graph parameters and a PKI for that).
"""

from __future__ import annotations

import enum
import hashlib
import math
import os
import struct
import time
import warnings
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

import numpy as np
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey

from securefgl.errors import (
    ConfigError,
    EncodingError,
    InconsistentViewError,
    InvalidMessage,
    MalformedMessageError,
    ProtocolError,
    ReleaseRefusedError,
    RequestRefusedError,
    StageOrderError,
    ThresholdError,
)
from securefgl.protocols import _shamir
from securefgl.protocols._channel import PeerChannel
from securefgl.protocols._harary import (
    ADVERSARIES,
    GraphParameters,
    SecretSharingGraph,
    complete_graph_threshold,
    find_graph_parameters,
)
from securefgl.protocols._parties import check_clients, client_contexts
from securefgl.protocols._prg import (
    KEY_BYTES,
    PRG_ALGORITHMS,
    InsecureDeterministicRandom,
    MaskExpander,
    RandomSource,
    derive_key,
    ring_dtype,
    system_random,
)
from securefgl.protocols.base import SERVER, Contribution, DropoutPlan, Protocol, Sums, Transcript
from securefgl.protocols.encoding import SumSchema, default_rng
from securefgl.protocols.messages import (
    Abort,
    AdvertiseKeys,
    AdvertiseRequest,
    DeliverRequest,
    MaskedInput,
    MaskedInputRequest,
    Message,
    ShareKeys,
    ShareKeysRequest,
    Unmask,
    UnmaskRequest,
    decode,
)
from securefgl.protocols.router import Interceptor, Outgoing, Router

__all__ = [
    "ClipLayout",
    "SecAggPlus",
    "SecAggPlusClient",
    "SecAggPlusConfig",
    "SecAggPlusServer",
    "SecAggPlusServerState",
    "SecAggPlusClientState",
    "Stage",
    "resolve_graph",
    "session_graph",
    "session_id_for",
]

_DOMAIN = b"securefgl/secagg/v1"
_SHARE_PLAINTEXT = struct.Struct(">II")
_SHARE_BYTES = _SHARE_PLAINTEXT.size + 2 * _shamir.LIMBS * 4


class Stage(enum.StrEnum):
    """The stages of SecAgg/SecAgg+, in protocol order (values are the transcript phase names)."""

    ADVERTISE_KEYS = "advertise_keys"
    SHARE_KEYS = "share_keys"
    MASKED_INPUT = "masked_input"
    UNMASKING = "unmasking"
    DELIVER = "deliver"

    @classmethod
    def ordered(cls, *, recipient: bool) -> tuple[str, ...]:
        """Stage names in order; ``deliver`` only in designated-recipient mode."""
        names = tuple(s.value for s in cls)
        return names if recipient else names[:-1]


# ----------------------------------------------------------------------------------------------------
# configuration
# ----------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SecAggPlusConfig:
    """Validated, immutable configuration of SecAgg/SecAgg+ (public: bound into the session id).

    Args:
        graph: ``"harary"`` (SecAgg+) or ``"complete"`` (SecAgg). (default: ``"harary"``)
        degree: Harary degree :math:`k` (neighbours excluding self, even), or ``None`` to take it from
            the parameter finder. (default: ``None``)
        threshold: :math:`t`: an int, a fraction in (0, 1] of the neighbourhood size :math:`k+1`, or
            ``None`` (finder's value for Harary; a majority, at least above the corrupted clients, for
            the complete graph). (default: ``None``)
        dropout_rate: tolerated fraction of dropouts :math:`\\delta` for the finder. (default: ``0.1``)
        corrupt_rate: fraction :math:`\\gamma` of clients assumed to collude with the server.
            (default: ``0.05``)
        adversary: ``"curious"``, ``"semi-malicious"`` or ``"none"`` (finder's threat model).
            (default: ``"curious"``)
        prg: ``"aes256-ctr"`` or ``"chacha20"``. (default: ``"aes256-ctr"``)
        security_bits: :math:`\\sigma` of the finder. (default: ``40``)
        correctness_bits: :math:`\\eta` of the finder. (default: ``20``)
        complete_below: with ``graph="harary"``, use the complete graph when fewer than this many
            clients are invited. Below about 30 clients the finder assumes
            :math:`\\lfloor \\gamma n \\rfloor \\le 1` corrupted clients and returns thresholds of 2-3 in
            neighbourhoods of 3-7, while the complete graph is still cheap. ``0`` always uses the finder.
            (default: ``32``)
    """

    graph: Literal["harary", "complete"] = "harary"
    degree: int | None = None
    threshold: int | float | None = None
    dropout_rate: float = 0.1
    corrupt_rate: float = 0.05
    adversary: Literal["curious", "semi-malicious", "none"] = "curious"
    prg: Literal["aes256-ctr", "chacha20"] = "aes256-ctr"
    security_bits: float = 40.0
    correctness_bits: float = 20.0
    complete_below: int = 32

    def __post_init__(self) -> None:
        if self.graph not in ("harary", "complete"):
            raise ConfigError(f"graph must be 'harary' or 'complete', got {self.graph!r}")
        if self.adversary not in ADVERSARIES:
            raise ConfigError(f"adversary must be one of {list(ADVERSARIES)}, got {self.adversary!r}")
        if self.prg not in PRG_ALGORITHMS:
            raise ConfigError(f"prg must be one of {list(PRG_ALGORITHMS)}, got {self.prg!r}")
        for name in ("dropout_rate", "corrupt_rate"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0.0 <= v < 1.0:
                raise ConfigError(f"{name} must be in [0, 1), got {v!r}")
        if self.degree is not None:
            if self.graph == "complete":
                raise ConfigError("degree is only meaningful with graph='harary'")
            if (
                isinstance(self.degree, bool)
                or not isinstance(self.degree, int)
                or self.degree < 2
                or self.degree % 2
            ):
                raise ConfigError(
                    f"degree must be an even integer >= 2 (neighbours excluding self), got {self.degree!r}"
                )
        t = self.threshold
        if t is not None:
            if isinstance(t, bool) or not isinstance(t, (int, float)):
                raise ConfigError(f"threshold must be an int, a fraction in (0, 1] or None, got {t!r}")
            if isinstance(t, float) and not 0.0 < t <= 1.0:
                raise ConfigError(f"a fractional threshold must be in (0, 1], got {t!r}")
            if isinstance(t, int) and t < 1:
                raise ConfigError(f"threshold must be >= 1, got {t!r}")
        if (
            isinstance(self.complete_below, bool)
            or not isinstance(self.complete_below, int)
            or self.complete_below < 0
        ):
            raise ConfigError(f"complete_below must be a non-negative integer, got {self.complete_below!r}")
        for name in ("security_bits", "correctness_bits"):
            v = getattr(self, name)
            if not isinstance(v, (int, float)) or v <= 0:
                raise ConfigError(f"{name} must be positive, got {v!r}")


def resolve_graph(config: SecAggPlusConfig, num_clients: int) -> GraphParameters:
    """The degree and threshold for ``num_clients`` invited clients under ``config`` (deterministic).

    Raises:
        ConfigError: a threshold outside ``[1, k+1]``, or below 2 with more than one client.
    """
    n = int(num_clients)
    if n < 1:
        raise ConfigError("need at least one client")
    if config.graph == "complete" or n < config.complete_below:
        base = GraphParameters(
            num_clients=n,
            degree=n - 1,
            threshold=complete_graph_threshold(
                n, corrupt_rate=config.corrupt_rate, adversary=config.adversary
            ),
            complete=True,
        )
    elif config.degree is not None:
        k = config.degree
        if k >= n - 1:
            base = GraphParameters(
                n, n - 1, complete_graph_threshold(n, corrupt_rate=config.corrupt_rate), True
            )
        else:
            base = GraphParameters(n, k, max(2, (k + 1) // 2 + 1), False)
    else:
        base = find_graph_parameters(
            n,
            dropout_rate=config.dropout_rate,
            corrupt_rate=config.corrupt_rate,
            adversary=config.adversary,
            security_bits=config.security_bits,
            correctness_bits=config.correctness_bits,
        )
    size = base.neighbourhood_size
    t = config.threshold
    if t is None:
        threshold = base.threshold
    elif isinstance(t, float):
        threshold = max(1, math.ceil(t * size))
    else:
        threshold = int(t)
    if not 1 <= threshold <= size:
        raise ConfigError(
            f"threshold {threshold} must be in [1, {size}] (neighbourhood size incl. self) for n={n}"
        )
    if threshold < 2 and n > 1:
        raise ConfigError(
            f"threshold {threshold} would put every secret in the clear in each share; use >= 2 with {n} clients"
        )
    return GraphParameters(n, base.degree, threshold, base.complete)


# ----------------------------------------------------------------------------------------------------
# clip counts inside the masked vector
# ----------------------------------------------------------------------------------------------------


class ClipLayout:
    """Per-block clip counts appended to the masked vector as limbs that cannot wrap the ring.

    A count :math:`c \\le` block size is split into limbs of :math:`L = b - \\operatorname{bitlen}(N)`
    bits (:math:`N` = ``max_clients``), so a sum of :math:`N` limbs stays below :math:`2^b` and the
    total clip count of each block is recovered exactly while each client's own count stays masked.
    """

    def __init__(self, schema: SumSchema) -> None:
        self.ring_bits = schema.ring_bits
        self.limb_bits = max(1, schema.ring_bits - int(schema.max_clients).bit_length())
        self.names = schema.names
        self.limbs = {b.name: max(1, -(-int(b.size).bit_length() // self.limb_bits)) for b in schema.blocks}
        self.offset = schema.length
        self.extra = sum(self.limbs.values())
        self.length = schema.length + self.extra

    def encode(self, counts: Mapping[str, int]) -> np.ndarray:
        out = np.zeros(self.extra, dtype=np.uint64)
        i, mask = 0, (1 << self.limb_bits) - 1
        for name in self.names:
            c = int(counts.get(name, 0))
            for j in range(self.limbs[name]):
                out[i] = (c >> (j * self.limb_bits)) & mask
                i += 1
        return out

    def decode(self, limbs: np.ndarray) -> dict[str, int]:
        out: dict[str, int] = {}
        i = 0
        for name in self.names:
            total = 0
            for j in range(self.limbs[name]):
                total += int(limbs[i]) << (j * self.limb_bits)
                i += 1
            out[name] = total
        return out


# ----------------------------------------------------------------------------------------------------
# session id, graph and keys
# ----------------------------------------------------------------------------------------------------


def _lp(b: bytes) -> bytes:
    return struct.pack(">I", len(b)) + b


def session_id_for(
    request: AdvertiseRequest, keys: Sequence[tuple[int, bytes, bytes]], context: bytes
) -> bytes:
    """The session id: SHA-256 of the public parameters, the context digest and every advertised key."""
    h = hashlib.sha256(_DOMAIN + b"/session")
    h.update(_lp(request.to_bytes()))
    h.update(hashlib.sha256(bytes(context)).digest())
    h.update(struct.pack(">I", len(keys)))
    for cid, cpk, spk in keys:
        h.update(struct.pack(">I", cid) + cpk + spk)
    return h.digest()


def session_graph(session_id: bytes, clients: Sequence[int], degree: int) -> SecretSharingGraph:
    """The secret-sharing graph of a session (its label permutation is derived from the session id)."""
    return SecretSharingGraph(clients, degree, derive_key(session_id, "graph-seed", session_id=session_id))


def _pair_key(shared: bytes, sid: bytes, round_index: int, u: int, v: int) -> bytes:
    a, b = (u, v) if u < v else (v, u)
    return derive_key(
        shared, "pairwise-mask", session_id=sid, round_index=round_index, pair=(a, b), label=b"vector"
    )


def _self_key(seed: bytes | bytearray, sid: bytes, round_index: int, u: int) -> bytes:
    return derive_key(
        seed, "self-mask", session_id=sid, round_index=round_index, pair=(u, u), label=b"vector"
    )


def _pad_key(shared: bytes, sid: bytes, round_index: int, u: int, r: int) -> bytes:
    return derive_key(
        shared, "recipient-pad", session_id=sid, round_index=round_index, pair=(u, r), label=b"vector"
    )


def _commitment(sid: bytes, u: int, seed: bytes | bytearray) -> bytes:
    return hashlib.sha256(_DOMAIN + b"/seed-commitment" + sid + struct.pack(">Q", u) + bytes(seed)).digest()


def _private_key(random: RandomSource) -> X25519PrivateKey:
    return X25519PrivateKey.from_private_bytes(random(KEY_BYTES))


def _key_is_usable(pk: bytes) -> bool:
    """Whether a public key gives a non-degenerate X25519 exchange (not a low-order point)."""
    try:
        X25519PrivateKey.generate().exchange(X25519PublicKey.from_public_bytes(pk))
    except ValueError:
        return False
    return True


def _wipe(*arrays: Any) -> None:
    for a in arrays:
        if isinstance(a, np.ndarray) and a.flags.writeable:
            a.fill(0)
        elif isinstance(a, bytearray):
            a[:] = bytes(len(a))


# ----------------------------------------------------------------------------------------------------
# client
# ----------------------------------------------------------------------------------------------------


@dataclass
class SecAggPlusClientState:
    """What a client holds during one session (secrets are wiped after unmasking or an abort)."""

    stage: str = "start"
    request: AdvertiseRequest | None = None
    params: GraphParameters | None = None
    channel_sk: X25519PrivateKey | None = None
    mask_sk: X25519PrivateKey | None = None
    mask_sk_raw: bytearray = field(default_factory=bytearray)
    seed: bytearray = field(default_factory=bytearray)
    session_id: bytes = b""
    keys: dict[int, tuple[bytes, bytes]] = field(default_factory=dict)
    neighbours: tuple[int, ...] = ()
    channels: dict[int, PeerChannel] = field(default_factory=dict)
    mask_keys: dict[int, bytes] = field(default_factory=dict)
    self_mask_key: bytes = b""
    own_shares: np.ndarray | None = None
    seed_shares: dict[int, np.ndarray] = field(default_factory=dict)
    key_shares: dict[int, np.ndarray] = field(default_factory=dict)
    senders: tuple[int, ...] = ()
    complaints: tuple[int, ...] = ()
    masked_with: tuple[int, ...] = ()


class SecAggPlusClient:
    """A SecAgg/SecAgg+ client: a state machine that turns one request (bytes) into one reply (bytes).

    It checks every request against its own configuration (schema, round, context, protocol
    parameters) and aborts, replying with an :class:`~securefgl.protocols.messages.Abort` message, on
    anything inconsistent or unsafe; after an abort or once finished it ignores further requests.

    Args:
        party_id: the client id.
        schema: the schema it was configured with.
        contribution: its named tensors (encoded in ``masked_input``).
        config: the protocol configuration it expects.
        protocol_name: ``"secagg"`` or ``"secagg+"``.
        round_index: the round it expects.
        recipient: the designated recipient it expects (``None``: the server).
        context: the public round context it was shown (e.g. a model hash).
        random: source of keys, seeds and share randomness (OS CSPRNG unless testing).
        encode_rng: generator for the encoding's stochastic rounding (OS-seeded by default).
    """

    def __init__(
        self,
        party_id: int,
        schema: SumSchema,
        contribution: Contribution,
        *,
        config: SecAggPlusConfig,
        protocol_name: str,
        round_index: int,
        recipient: int | None,
        context: bytes,
        random: RandomSource = system_random,
        encode_rng: np.random.Generator | None = None,
    ) -> None:
        self.party_id = int(party_id)
        self.schema = schema
        self.layout = ClipLayout(schema)
        self._contribution: Contribution | None = contribution
        self.config = config
        self.protocol_name = protocol_name
        self.round_index = int(round_index)
        self.recipient = recipient
        self.context = bytes(context)
        self._random = random
        self._encode_rng = encode_rng
        self.state = SecAggPlusClientState()
        self.error: ProtocolError | None = None
        self.refusals: list[ProtocolError] = []
        self.result: Sums | None = None
        #: Wall time of the steps of ``masked_input`` (decrypt shares, encode, mask, serialise), seconds.
        self.step_seconds: dict[str, float] = {}

    # -- dispatch ------------------------------------------------------------------------------------

    _ORDER: ClassVar[dict[str, tuple[type[Message], str]]] = {
        "start": (AdvertiseRequest, Stage.ADVERTISE_KEYS.value),
        Stage.ADVERTISE_KEYS.value: (ShareKeysRequest, Stage.SHARE_KEYS.value),
        Stage.SHARE_KEYS.value: (MaskedInputRequest, Stage.MASKED_INPUT.value),
        Stage.MASKED_INPUT.value: (UnmaskRequest, Stage.UNMASKING.value),
        Stage.UNMASKING.value: (DeliverRequest, Stage.DELIVER.value),
    }
    _SERVER_MESSAGES: ClassVar[tuple[type[Message], ...]] = (
        AdvertiseRequest,
        ShareKeysRequest,
        MaskedInputRequest,
        UnmaskRequest,
        DeliverRequest,
    )

    @property
    def stage(self) -> str:
        """The last stage this client completed (``"start"``, a stage name, ``"done"`` or ``"aborted"``)."""
        return self.state.stage

    def handle(self, payload: bytes) -> bytes | None:
        """Process one request; return the reply, an Abort message, or ``None`` (finished/aborted)."""
        if self.state.stage == "aborted":
            return None
        if self.state.stage == "done":
            # A finished client has wiped its secrets; a further request (e.g. a second unmask request
            # asking for the other share kind) is refused and nothing is revealed.
            err: ProtocolError = StageOrderError(
                "request after this client finished; refused", party=self.party_id
            )
            self.refusals.append(err)
            return Abort(reason=type(err).__name__, detail=str(err)).to_bytes()
        expected, stage = self._ORDER.get(self.state.stage, (None, "?"))
        try:
            try:
                msg = decode(payload, self._SERVER_MESSAGES)
            except MalformedMessageError as exc:
                raise MalformedMessageError(str(exc), party=self.party_id, phase=stage) from None
            if type(msg) is not expected:
                raise StageOrderError(
                    f"received {type(msg).__name__} (stage {msg.STAGE}) after stage {self.state.stage}; "
                    f"expected {expected.__name__ if expected else 'nothing'}",
                    party=self.party_id,
                    phase=msg.STAGE,
                )
            reply = getattr(self, "_" + stage)(msg)
        except (ProtocolError, InvalidMessage) as exc:
            err = (
                exc
                if isinstance(exc, ProtocolError)
                else ProtocolError(str(exc), party=self.party_id, phase=stage)
            )
            self.error = err
            self.state.stage = "aborted"
            self._wipe()
            return Abort(reason=type(exc).__name__, detail=str(exc)[:4000]).to_bytes()
        return None if reply is None else reply.to_bytes()

    def _fail(self, cls: type[ProtocolError], message: str, phase: str) -> ProtocolError:
        return cls(message, party=self.party_id, phase=phase)

    # -- stages --------------------------------------------------------------------------------------

    def _advertise_keys(self, req: AdvertiseRequest) -> AdvertiseKeys:
        ph = Stage.ADVERTISE_KEYS.value
        invited = req.invited
        if list(invited) != sorted(set(invited)):
            raise self._fail(MalformedMessageError, "invited list is not sorted and unique", ph)
        if self.party_id not in invited:
            raise self._fail(InconsistentViewError, "this client is not in the invited list", ph)
        mism = []
        if req.protocol != self.protocol_name:
            mism.append(f"protocol {req.protocol!r} != {self.protocol_name!r}")
        if req.round_index != self.round_index:
            mism.append(f"round {req.round_index} != {self.round_index}")
        if req.schema_fingerprint != self.schema.fingerprint():
            mism.append("schema fingerprint differs")
        if req.ring_bits != self.schema.ring_bits or req.length != self.layout.length:
            mism.append(
                f"ring/length ({req.ring_bits}, {req.length}) != ({self.schema.ring_bits}, {self.layout.length})"
            )
        if req.prg != self.config.prg:
            mism.append(f"prg {req.prg!r} != {self.config.prg!r}")
        if req.recipient != self.recipient:
            mism.append(f"recipient {req.recipient} != {self.recipient}")
        if not mism:
            params = resolve_graph(self.config, len(invited))
            if (req.degree, req.threshold) != (params.degree, params.threshold):
                mism.append(
                    f"(degree, threshold) ({req.degree}, {req.threshold}) != ({params.degree}, {params.threshold})"
                )
        if mism:
            raise self._fail(
                InconsistentViewError, "session parameters differ from this client's: " + "; ".join(mism), ph
            )
        s = self.state
        s.request, s.params = req, params
        s.channel_sk = _private_key(self._random)
        s.mask_sk_raw = bytearray(self._random(KEY_BYTES))
        s.mask_sk = X25519PrivateKey.from_private_bytes(bytes(s.mask_sk_raw))
        s.stage = ph
        return AdvertiseKeys(
            channel_pk=s.channel_sk.public_key().public_bytes_raw(),
            mask_pk=s.mask_sk.public_key().public_bytes_raw(),
        )

    def _share_keys(self, req: ShareKeysRequest) -> ShareKeys:
        ph = Stage.SHARE_KEYS.value
        s = self.state
        assert (
            s.request is not None
            and s.params is not None
            and s.channel_sk is not None
            and s.mask_sk is not None
        )
        ids = [row[0] for row in req.keys]
        if ids != sorted(set(ids)):
            raise self._fail(MalformedMessageError, "key table is not sorted by unique client id", ph)
        table = {cid: (cpk, spk) for cid, cpk, spk in req.keys}
        mine = (s.channel_sk.public_key().public_bytes_raw(), s.mask_sk.public_key().public_bytes_raw())
        if table.get(self.party_id) != mine:
            raise self._fail(
                InconsistentViewError, "the server relayed this client's keys altered or not at all", ph
            )
        outsiders = sorted(set(ids) - set(s.request.invited))
        if outsiders:
            raise self._fail(
                InconsistentViewError, f"keys of clients {outsiders[:5]} that were not invited", ph
            )
        all_pks = [pk for pair in table.values() for pk in pair]
        if len(set(all_pks)) != len(all_pks):
            raise self._fail(InconsistentViewError, "duplicate public keys in the key table", ph)
        t = s.params.threshold
        if len(ids) < t:
            raise self._fail(
                ThresholdError, f"{len(ids)} clients advertised keys, fewer than the threshold {t}", ph
            )
        if self.recipient is not None and self.recipient not in table:
            raise self._fail(
                ThresholdError, f"the designated recipient {self.recipient} is not in the session", ph
            )
        sid = session_id_for(s.request, req.keys, self.context)
        graph = session_graph(sid, ids, s.params.degree)
        nbrs = graph.neighbours(self.party_id)
        if len(nbrs) < t:
            raise self._fail(
                ThresholdError, f"{len(nbrs)} neighbours (incl. self), fewer than the threshold {t}", ph
            )
        s.session_id, s.keys, s.neighbours = sid, table, nbrs
        r = s.request.round_index
        try:
            for v in nbrs:
                if v == self.party_id:
                    continue
                cpk, spk = table[v]
                shared = s.channel_sk.exchange(X25519PublicKey.from_public_bytes(cpk))
                s.channels[v] = PeerChannel(
                    shared, self.party_id, v, session_id=sid, round_index=r, purpose="secagg-shares"
                )
                mshared = s.mask_sk.exchange(X25519PublicKey.from_public_bytes(spk))
                s.mask_keys[v] = _pair_key(mshared, sid, r, self.party_id, v)
        except ValueError:
            raise self._fail(
                InconsistentViewError, "a neighbour advertised a degenerate (low-order) public key", ph
            ) from None
        s.seed = bytearray(self._random(KEY_BYTES))
        s.self_mask_key = _self_key(s.seed, sid, r, self.party_id)  # derived with the pairwise keys
        position = {c: i + 1 for i, c in enumerate(s.request.invited)}
        xs = [position[v] for v in nbrs]
        shares = _shamir.split([bytes(s.seed), bytes(s.mask_sk_raw)], xs, t, self._random)  # (m, 2, LIMBS)
        envelopes = []
        for i, v in enumerate(nbrs):
            if v == self.party_id:
                s.own_shares = shares[i].copy()
                continue
            plain = _SHARE_PLAINTEXT.pack(self.party_id, v) + shares[i].astype("<u4").tobytes()
            envelopes.append((v, s.channels[v].seal(plain)))
        _wipe(shares)
        s.stage = ph
        return ShareKeys(
            session_id=sid,
            seed_commitment=_commitment(sid, self.party_id, s.seed),
            envelopes=tuple(envelopes),
        )

    def _open_share(self, sender: int, blob: bytes) -> np.ndarray:
        plain = self.state.channels[sender].open(blob)  # InvalidMessage on any authentication failure
        if len(plain) != _SHARE_BYTES:
            raise InvalidMessage()
        src, dst = _SHARE_PLAINTEXT.unpack_from(plain)
        if (src, dst) != (sender, self.party_id):
            raise InvalidMessage()
        sh = (
            np.frombuffer(plain, dtype="<u4", offset=_SHARE_PLAINTEXT.size)
            .astype(np.uint32)
            .reshape(2, _shamir.LIMBS)
        )
        if int(sh.max()) >= _shamir.PRIME:
            raise InvalidMessage()
        return sh

    def _masked_input(self, req: MaskedInputRequest) -> MaskedInput:
        ph = Stage.MASKED_INPUT.value
        s = self.state
        assert s.params is not None and s.request is not None
        if req.session_id != s.session_id:
            raise self._fail(
                InconsistentViewError, "request for another session (different parameters or context)", ph
            )
        senders = [v for v, _ in req.envelopes]
        if len(set(senders)) != len(senders):
            raise self._fail(MalformedMessageError, "duplicate senders among the forwarded shares", ph)
        strangers = sorted(set(senders) - set(s.neighbours) | ({self.party_id} & set(senders)))
        if strangers:
            raise self._fail(
                InconsistentViewError, f"shares forwarded from non-neighbours {strangers[:5]}", ph
            )
        t0 = time.perf_counter()
        complaints = []
        for v, blob in req.envelopes:
            try:
                sh = self._open_share(v, blob)
            except InvalidMessage:
                complaints.append(v)
                continue
            s.seed_shares[v], s.key_shares[v] = sh[0], sh[1]
        valid = 1 + len(s.seed_shares)
        t = s.params.threshold
        if valid < t:
            cls = InconsistentViewError if complaints else ThresholdError
            raise self._fail(
                cls,
                f"only {valid} valid shares (incl. own) from {len(senders)} forwarded, fewer than the threshold {t}; "
                f"{len(complaints)} failed authentication",
                ph,
            )
        if self._contribution is None:  # pragma: no cover - guarded by the stage machine
            raise self._fail(StageOrderError, "input already sent", ph)
        t1 = time.perf_counter()
        try:
            enc = self.schema.encode(self._contribution, self._encode_rng)
        except EncodingError as exc:
            raise EncodingError(str(exc), party=self.party_id, phase=ph) from None
        self._contribution = None
        expander = MaskExpander(self.layout.length, self.schema.ring_bits, algorithm=self.config.prg)
        y = np.empty(self.layout.length, dtype=expander.dtype)
        y[: self.layout.offset] = enc.data
        y[self.layout.offset :] = self.layout.encode(enc.clip_counts)
        _wipe(enc.data)
        t2 = time.perf_counter()
        r = s.request.round_index
        expander.add(y, s.self_mask_key)
        masked_with = sorted(s.seed_shares)  # forwarded (U2) neighbours whose shares authenticated
        for v in masked_with:
            if v > self.party_id:
                expander.add(y, s.mask_keys[v])
            else:
                expander.subtract(y, s.mask_keys[v])
        if self.recipient is not None:
            assert s.channel_sk is not None
            cpk = s.keys[self.recipient][0]
            try:
                shared = s.channel_sk.exchange(X25519PublicKey.from_public_bytes(cpk))
            except ValueError:
                raise self._fail(InconsistentViewError, "the recipient's key is degenerate", ph) from None
            expander.add(y, _pad_key(shared, s.session_id, r, self.party_id, self.recipient))
        expander.reduce(y)
        t3 = time.perf_counter()
        s.senders = tuple(sorted(senders))
        s.complaints = tuple(sorted(complaints))
        s.masked_with = tuple(masked_with)
        s.stage = ph
        reply = MaskedInput(
            session_id=s.session_id, complaints=s.complaints, ring_bits=self.schema.ring_bits, vector=y
        )
        self.step_seconds.update(
            decrypt=t1 - t0, encode=t2 - t1, mask=t3 - t2, message=time.perf_counter() - t3
        )
        self.step_seconds["expansions"] = float(len(masked_with) + 1 + (self.recipient is not None))
        return reply

    def _unmasking(self, req: UnmaskRequest) -> Unmask:
        ph = Stage.UNMASKING.value
        s = self.state
        assert s.params is not None
        if req.session_id != s.session_id:
            raise self._fail(InconsistentViewError, "unmask request for another session", ph)
        alive, dead = list(req.alive), list(req.dead)
        if len(set(alive)) != len(alive) or len(set(dead)) != len(dead):
            raise self._fail(RequestRefusedError, "duplicate ids in the unmask request", ph)
        both = sorted(set(alive) & set(dead))
        if both:
            raise self._fail(
                RequestRefusedError,
                f"clients {both[:5]} listed as both alive and dead: revealing both share kinds would unmask them",
                ph,
            )
        expected = set(s.masked_with) | {self.party_id}
        listed = set(alive) | set(dead)
        if listed != expected:
            extra, missing = sorted(listed - expected), sorted(expected - listed)
            raise self._fail(
                RequestRefusedError,
                f"request does not match the peers this client masked with: non-neighbours/unknown {extra[:5]}, "
                f"unaccounted {missing[:5]}",
                ph,
            )
        if self.party_id not in alive:
            raise self._fail(RequestRefusedError, "this client sent its input but is listed as dropped", ph)
        t = s.params.threshold
        if len(alive) < t:
            raise self._fail(
                ThresholdError, f"only {len(alive)} surviving neighbours, fewer than the threshold {t}", ph
            )
        assert s.own_shares is not None
        alive_sorted = sorted(alive)
        seed_rows = np.stack(
            [s.own_shares[0] if v == self.party_id else s.seed_shares[v] for v in alive_sorted]
        )
        dead_sorted = sorted(v for v in dead if v in s.key_shares)
        key_rows = (
            np.stack([s.key_shares[v] for v in dead_sorted])
            if dead_sorted
            else np.zeros((0, _shamir.LIMBS), dtype=np.uint32)
        )
        reply = Unmask(
            session_id=s.session_id,
            alive=tuple(alive_sorted),
            seed_shares=seed_rows,
            dead=tuple(dead_sorted),
            key_shares=key_rows,
        )
        _wipe(seed_rows, key_rows)
        s.stage = ph
        if self.recipient != self.party_id:
            self._wipe()
            s.stage = "done"
        return reply

    def _deliver(self, req: DeliverRequest) -> None:
        ph = Stage.DELIVER.value
        s = self.state
        assert s.params is not None and s.request is not None and s.channel_sk is not None
        if req.session_id != s.session_id:
            raise self._fail(InconsistentViewError, "delivered sum belongs to another session", ph)
        survivors = list(req.survivors)
        if len(set(survivors)) != len(survivors) or not set(survivors) <= set(s.keys):
            raise self._fail(MalformedMessageError, "survivor list has duplicates or unknown clients", ph)
        if self.party_id not in survivors:
            raise self._fail(
                InconsistentViewError, "the recipient's own input is not in the delivered sum", ph
            )
        if len(survivors) < s.params.threshold:
            raise self._fail(
                ThresholdError,
                f"sum of {len(survivors)} inputs is below the threshold {s.params.threshold}",
                ph,
            )
        if req.ring_bits != self.schema.ring_bits or req.vector.shape != (self.layout.length,):
            raise self._fail(MalformedMessageError, "delivered vector has the wrong ring or length", ph)
        expander = MaskExpander(self.layout.length, self.schema.ring_bits, algorithm=self.config.prg)
        acc = req.vector.astype(expander.dtype, copy=True)
        r = s.request.round_index
        for u in survivors:
            try:
                shared = s.channel_sk.exchange(X25519PublicKey.from_public_bytes(s.keys[u][0]))
            except ValueError:
                raise self._fail(InconsistentViewError, f"survivor {u} has a degenerate key", ph) from None
            expander.subtract(acc, _pad_key(shared, s.session_id, r, u, self.party_id))
        expander.reduce(acc)
        self.result = _release(self.schema, self.layout, acc, len(survivors), ph)
        self._wipe()
        s.stage = "done"
        return None

    def _wipe(self) -> None:
        """Best-effort erasure of secrets (Python cannot erase immutable copies or key objects' memory)."""
        s = self.state
        _wipe(s.seed, s.mask_sk_raw, s.own_shares, *s.seed_shares.values(), *s.key_shares.values())
        s.seed_shares.clear()
        s.key_shares.clear()
        s.mask_keys.clear()
        s.self_mask_key = b""
        s.channels.clear()
        s.mask_sk = None
        s.channel_sk = None
        s.own_shares = None
        self._contribution = None


def _release(schema: SumSchema, layout: ClipLayout, ring: np.ndarray, n: int, phase: str) -> Sums:
    data = ring[: layout.offset].astype(np.uint64)
    clips = layout.decode(ring[layout.offset :])
    if n < schema.min_contributors:
        raise ReleaseRefusedError(
            f"sum of {n} contributor(s) refused: the schema requires at least min_contributors={schema.min_contributors}",
            phase=phase,
        )
    values = schema.decode(data, n)
    return schema.release(values, n, clips, schema.error_bound(n))


# ----------------------------------------------------------------------------------------------------
# server
# ----------------------------------------------------------------------------------------------------


@dataclass
class SecAggPlusServerState:
    """What the server holds during one session (public values and the masked sum only).

    Attributes:
        excluded: client -> reason, for clients excluded as misbehaving (``"ErrorClass: message"``).
        keys: client -> (channel public key, mask public key), for the clients that advertised (U1).
        session_id: the session id (the one most clients computed).
        graph: the secret-sharing graph over U1.
        u1, u2, u3: clients that advertised keys, shared them, and whose masked input was accepted.
        dead: U2 minus U3 (dropped or excluded after sharing).
        commitments: client -> commitment to its self-mask seed.
        envelopes: recipient -> {sender: share ciphertext} (relayed, then cleared).
        senders: client -> the neighbours whose ciphertexts were forwarded to it.
        complaints: client -> the senders whose ciphertexts it could not authenticate.
        masked_with: survivor -> the peers it masked against.
        total: the running sum of accepted masked inputs (then the unmasked sum).
        result: the released sums (server mode).
        delivered: whether the sum was relayed to the designated recipient.
        bad_shares: client -> note, where a reconstruction had to route around corrupted shares.
        unmask_seconds: wall time of the unmasking steps, and process CPU time (all threads) of mask
            removal and of the whole step.
        unmask_rejected: responder -> reason, for unmask replies that were ignored.
    """

    excluded: dict[int, str] = field(default_factory=dict)
    keys: dict[int, tuple[bytes, bytes]] = field(default_factory=dict)
    session_id: bytes = b""
    graph: SecretSharingGraph | None = None
    u1: tuple[int, ...] = ()
    u2: tuple[int, ...] = ()
    u3: tuple[int, ...] = ()
    dead: tuple[int, ...] = ()
    commitments: dict[int, bytes] = field(default_factory=dict)
    envelopes: dict[int, dict[int, bytes]] = field(default_factory=dict)
    senders: dict[int, tuple[int, ...]] = field(default_factory=dict)
    complaints: dict[int, tuple[int, ...]] = field(default_factory=dict)
    masked_with: dict[int, frozenset[int]] = field(default_factory=dict)
    total: np.ndarray | None = None
    result: Sums | None = None
    delivered: bool = False
    bad_shares: dict[int, str] = field(default_factory=dict)
    unmask_seconds: dict[str, float] = field(default_factory=dict)
    unmask_rejected: dict[int, str] = field(default_factory=dict)


class SecAggPlusServer:
    """The SecAgg/SecAgg+ server: relays keys and shares, sums masked inputs, unmasks, releases.

    It never sees a client object, only bytes; every reply is decoded and checked, and a client that
    sends anything malformed, duplicated, for another session or inconsistent is excluded (recorded in
    :attr:`excluded`) like a dropped client.

    Args:
        schema: the schema of the sum.
        invited: the invited client ids.
        config: the protocol configuration.
        protocol_name: ``"secagg"`` or ``"secagg+"``.
        round_index: the round.
        recipient: designated recipient or ``None``.
        workers: threads used to regenerate masks when unmasking.
    """

    def __init__(
        self,
        schema: SumSchema,
        invited: Sequence[int],
        *,
        config: SecAggPlusConfig,
        protocol_name: str,
        round_index: int,
        recipient: int | None,
        workers: int = 1,
    ) -> None:
        self.schema = schema
        self.layout = ClipLayout(schema)
        self.invited = tuple(sorted(int(c) for c in invited))
        self.config = config
        self.params = resolve_graph(config, len(self.invited))
        self.recipient = recipient
        self.round_index = int(round_index)
        self.workers = max(1, int(workers))
        self.stages = Stage.ordered(recipient=recipient is not None)
        self.request = AdvertiseRequest(
            protocol=protocol_name,
            round_index=self.round_index,
            invited=self.invited,
            degree=self.params.degree,
            threshold=self.params.threshold,
            ring_bits=schema.ring_bits,
            length=self.layout.length,
            prg=config.prg,
            recipient=recipient,
            schema_fingerprint=schema.fingerprint(),
        )
        self.x = {c: i + 1 for i, c in enumerate(self.invited)}
        self.state = SecAggPlusServerState()
        self._awaiting: str | None = None

    # -- helpers -------------------------------------------------------------------------------------

    def _exclude(self, client: int, err: ProtocolError | InvalidMessage | str) -> None:
        text = err if isinstance(err, str) else f"{type(err).__name__}: {err}"
        self.state.excluded.setdefault(client, text)

    def _collect(
        self, stage: str, replies: Sequence[tuple[int, bytes]], expected: type[Message], allowed: set[int]
    ) -> dict[int, Any]:
        """Decode one stage's replies: one valid message per allowed client; exclude the rest."""
        counts: dict[int, int] = {}
        for c, _ in replies:
            counts[c] = counts.get(c, 0) + 1
        out: dict[int, Any] = {}
        for c, payload in replies:
            if c not in allowed or c in self.state.excluded:
                continue
            if counts[c] > 1:
                self._exclude(
                    c,
                    StageOrderError(
                        f"sent {counts[c]} messages in stage {stage}; all discarded", party=c, phase=stage
                    ),
                )
                out.pop(c, None)
                continue
            try:
                msg = decode(payload, (expected, Abort))
            except MalformedMessageError as exc:
                self._exclude(c, MalformedMessageError(str(exc), party=c, phase=stage))
                continue
            if isinstance(msg, Abort):
                self._exclude(c, f"{msg.reason} (client abort): {msg.detail}")
                continue
            out[c] = msg
        return out

    # -- endpoint ------------------------------------------------------------------------------------

    def start(self) -> Outgoing:
        """The ``advertise_keys`` requests. A server object runs one session: a second start raises."""
        if self._awaiting is not None:
            raise StageOrderError("this server already started its session; build a new one", party=SERVER)
        self._awaiting = Stage.ADVERTISE_KEYS.value
        payload = self.request.to_bytes()
        return Outgoing(Stage.ADVERTISE_KEYS.value, dict.fromkeys(self.invited, payload))

    def handle(self, stage: str, replies: Sequence[tuple[int, bytes]]) -> Outgoing | None:
        """Consume the replies of ``stage`` (the stage whose requests were sent last) and move on."""
        handler = {
            Stage.ADVERTISE_KEYS.value: self._after_advertise,
            Stage.SHARE_KEYS.value: self._after_share_keys,
            Stage.MASKED_INPUT.value: self._after_masked_input,
            Stage.UNMASKING.value: self._after_unmasking,
            Stage.DELIVER.value: self._after_deliver,
        }.get(stage)
        if handler is None or stage != self._awaiting:
            raise StageOrderError(
                f"replies for stage {stage!r} while awaiting {self._awaiting!r}; valid order: {list(self.stages)}",
                party=SERVER,
            )
        self._awaiting = "finished"
        out = handler(replies)
        self._awaiting = out.stage if out is not None else "finished"
        return out

    def _need(self, ok: bool, message: str, phase: str) -> None:
        if not ok:
            raise ThresholdError(
                message + "; aborting before any share is requested, nothing is revealed",
                party=SERVER,
                phase=phase,
            )

    def _after_advertise(self, replies: Sequence[tuple[int, bytes]]) -> Outgoing:
        ph = Stage.ADVERTISE_KEYS.value
        got = self._collect(ph, replies, AdvertiseKeys, set(self.invited))
        seen: dict[bytes, list[int]] = {}
        for c, msg in got.items():
            seen.setdefault(msg.channel_pk, []).append(c)
            seen.setdefault(msg.mask_pk, []).append(c)
        dup = {c for owners in seen.values() if len(owners) > 1 for c in owners}
        for c in sorted(got):
            msg = got[c]
            if c in dup:
                self._exclude(
                    c,
                    InconsistentViewError(
                        "advertised a public key that is also advertised elsewhere (copied or reused)",
                        party=c,
                        phase=ph,
                    ),
                )
            elif not (_key_is_usable(msg.channel_pk) and _key_is_usable(msg.mask_pk)):
                self._exclude(c, "InvalidMessage: advertised a degenerate (low-order) X25519 public key")
            else:
                self.state.keys[c] = (msg.channel_pk, msg.mask_pk)
        self.state.u1 = tuple(sorted(self.state.keys))
        t = self.params.threshold
        self._need(
            len(self.state.u1) >= t,
            f"{len(self.state.u1)} clients advertised keys, fewer than the threshold {t}",
            ph,
        )
        if self.recipient is not None:
            self._need(
                self.recipient in self.state.keys, f"the designated recipient {self.recipient} dropped", ph
            )
        table = tuple((c, *self.state.keys[c]) for c in self.state.u1)
        payload = ShareKeysRequest(keys=table).to_bytes()
        return Outgoing(Stage.SHARE_KEYS.value, dict.fromkeys(self.state.u1, payload))

    def _consistent(self, client: int, msg: ShareKeys) -> bool:
        """Whether ``client`` computed the session id of the session (an honest server's check; the
        clients' own defence does not depend on it: shares bound to another session fail to open)."""
        return msg.session_id == self.state.session_id

    def _after_share_keys(self, replies: Sequence[tuple[int, bytes]]) -> Outgoing:
        ph = Stage.SHARE_KEYS.value
        got = self._collect(ph, replies, ShareKeys, set(self.state.u1))
        votes: dict[bytes, list[int]] = {}
        for c, msg in got.items():
            votes.setdefault(msg.session_id, []).append(c)
        if not votes:
            self._need(False, "no client completed share_keys", ph)
        # The session id most clients computed (ties: the group with the smallest client id) is the
        # session; the others were shown different parameters or contexts.
        self.state.session_id = min(votes, key=lambda sid: (-len(votes[sid]), min(votes[sid])))
        self.state.graph = session_graph(self.state.session_id, self.state.u1, self.params.degree)
        accepted: dict[int, ShareKeys] = {}
        for c in sorted(got):
            msg = got[c]
            if not self._consistent(c, msg):
                self._exclude(
                    c,
                    InconsistentViewError(
                        "computed a different session id (was shown different parameters or context)",
                        party=c,
                        phase=ph,
                    ),
                )
                continue
            want = set(self.state.graph.neighbours(c)) - {c}
            dsts = [d for d, _ in msg.envelopes]
            if len(dsts) != len(set(dsts)) or set(dsts) != want:
                self._exclude(
                    c,
                    MalformedMessageError(
                        "share ciphertexts are not addressed to exactly its neighbours", party=c, phase=ph
                    ),
                )
                continue
            accepted[c] = msg
        self.state.u2 = tuple(sorted(accepted))
        u2 = set(self.state.u2)
        t = self.params.threshold
        for c in self.state.u2:
            live = len(set(self.state.graph.neighbours(c)) & u2)
            self._need(
                live >= t,
                f"client {c} has {live} neighbours left after share_keys, fewer than the threshold {t}",
                ph,
            )
        if self.recipient is not None:
            self._need(self.recipient in u2, f"the designated recipient {self.recipient} dropped", ph)
        for c, msg in accepted.items():
            self.state.commitments[c] = msg.seed_commitment
            for d, blob in msg.envelopes:
                if d in u2:
                    self.state.envelopes.setdefault(d, {})[c] = blob
        out = {}
        for d in self.state.u2:
            env = tuple(sorted(self.state.envelopes.get(d, {}).items()))
            self.state.senders[d] = tuple(v for v, _ in env)
            out[d] = MaskedInputRequest(session_id=self.state.session_id, envelopes=env).to_bytes()
        self.state.envelopes.clear()
        return Outgoing(Stage.MASKED_INPUT.value, out)

    def _after_masked_input(self, replies: Sequence[tuple[int, bytes]]) -> Outgoing:
        ph = Stage.MASKED_INPUT.value
        assert self.state.graph is not None
        got = self._collect(ph, replies, MaskedInput, set(self.state.u2))
        accepted: dict[int, MaskedInput] = {}
        for c in sorted(got):
            msg = got[c]
            if msg.session_id != self.state.session_id:
                self._exclude(c, InconsistentViewError("masked input for another session", party=c, phase=ph))
            elif msg.ring_bits != self.schema.ring_bits or msg.vector.shape != (self.layout.length,):
                self._exclude(
                    c,
                    MalformedMessageError(
                        f"masked input of {msg.vector.shape[0]} elements over {msg.ring_bits} bits, expected {self.layout.length} over {self.schema.ring_bits}",
                        party=c,
                        phase=ph,
                    ),
                )
            elif len(set(msg.complaints)) != len(msg.complaints) or not set(msg.complaints) <= set(
                self.state.senders[c]
            ):
                self._exclude(
                    c,
                    MalformedMessageError(
                        "complaints about clients whose shares it was not sent", party=c, phase=ph
                    ),
                )
            else:
                accepted[c] = msg
        accused: dict[int, list[int]] = {}
        for c, msg in accepted.items():
            self.state.complaints[c] = msg.complaints
            self.state.masked_with[c] = frozenset(self.state.senders[c]) - frozenset(msg.complaints)
            for v in msg.complaints:
                accused.setdefault(v, []).append(c)
        for v, by in sorted(accused.items()):
            if v in accepted:
                self._exclude(
                    v,
                    f"InvalidMessage: its share ciphertexts failed authentication at clients {sorted(by)[:10]}",
                )
        self.state.u3 = tuple(c for c in sorted(accepted) if c not in accused)
        u3 = set(self.state.u3)
        self.state.dead = tuple(c for c in self.state.u2 if c not in u3)
        t = self.params.threshold
        self._need(
            len(self.state.u3) >= t,
            f"{len(self.state.u3)} masked inputs survive, fewer than the threshold {t}",
            ph,
        )
        if self.recipient is not None:
            self._need(self.recipient in u3, f"the designated recipient {self.recipient} dropped", ph)
        if len(self.state.u3) < self.schema.min_contributors:
            raise ReleaseRefusedError(
                f"{len(self.state.u3)} surviving input(s) < min_contributors={self.schema.min_contributors}; "
                "aborting before unmasking, nothing is revealed",
                party=SERVER,
                phase=ph,
            )
        for u in self.state.u3:
            live = len(set(self.state.graph.neighbours(u)) & u3)
            self._need(
                live >= t, f"survivor {u} has {live} live neighbours, fewer than the threshold {t}", ph
            )
        for v in self.state.dead:
            if not self._masked_with_dead(v):
                continue
            holders = self._masked_with_dead(v)  # survivors holding an authenticated share of v
            self._need(
                len(holders) >= t,
                f"dropped client {v} has {len(holders)} live share holders, fewer than the threshold {t}",
                ph,
            )
        dtype = ring_dtype(self.schema.ring_bits)
        total = np.zeros(self.layout.length, dtype=dtype)
        for u in self.state.u3:
            np.add(total, accepted[u].vector.astype(dtype, copy=False), out=total)
        self.state.total = total
        out = {}
        dead = set(self.state.dead)
        for u in self.state.u3:
            masked_with = set(self.state.masked_with[u]) | {u}
            out[u] = UnmaskRequest(
                session_id=self.state.session_id,
                alive=tuple(sorted(masked_with & u3)),
                dead=tuple(sorted(masked_with & dead)),
            ).to_bytes()
        return Outgoing(Stage.UNMASKING.value, out)

    def _after_unmasking(self, replies: Sequence[tuple[int, bytes]]) -> Outgoing | None:
        ph = Stage.UNMASKING.value
        assert self.state.graph is not None and self.state.total is not None
        t0 = time.perf_counter()
        c0 = time.process_time()
        u3, dead = set(self.state.u3), set(self.state.dead)
        counts: dict[int, int] = {}
        for c, _ in replies:
            counts[c] = counts.get(c, 0) + 1
        good: dict[int, Unmask] = {}
        for c, payload in replies:
            if c not in u3 or c in self.state.unmask_rejected:
                continue
            if counts[c] > 1:
                self.state.unmask_rejected[c] = f"sent {counts[c]} unmask replies; all ignored"
                continue
            try:
                msg = decode(payload, (Unmask, Abort))
            except MalformedMessageError as exc:
                self.state.unmask_rejected[c] = f"MalformedMessageError: {exc}"
                continue
            if isinstance(msg, Abort):
                self.state.unmask_rejected[c] = f"{msg.reason} (client abort): {msg.detail}"
                continue
            masked_with = set(self.state.masked_with[c]) | {c}
            ok = (
                msg.session_id == self.state.session_id
                and msg.alive == tuple(sorted(masked_with & u3))
                and set(msg.dead) <= (masked_with & dead)
                and len(set(msg.dead)) == len(msg.dead)
                and msg.seed_shares.shape == (len(msg.alive), _shamir.LIMBS)
                and msg.key_shares.shape == (len(msg.dead), _shamir.LIMBS)
            )
            if not ok:
                self.state.unmask_rejected[c] = "reply does not match the request"
                continue
            good[c] = msg
        t1 = time.perf_counter()
        seeds = self._reconstruct_kind(good, "seed", list(self.state.u3), ph)
        needed = [v for v in self.state.dead if self._masked_with_dead(v)]
        keys = self._reconstruct_kind(good, "key", needed, ph)
        total = self.state.total
        t2 = time.perf_counter()
        c2 = time.process_time()
        self._remove_masks(total, seeds, keys)
        t3 = time.perf_counter()
        c3 = time.process_time()
        for s in seeds.values():
            _wipe(s)
        for k in keys.values():
            _wipe(k)
        MaskExpander(self.layout.length, self.schema.ring_bits, algorithm=self.config.prg).reduce(total)
        self.state.unmask_seconds = {
            "decode": t1 - t0,
            "reconstruct": t2 - t1,
            "remove_masks": t3 - t2,
            "remove_masks_cpu": c3 - c2,
            "total_cpu": c3 - c0,
            "expansions": float(len(self.state.u3) + sum(len(self._masked_with_dead(v)) for v in keys)),
        }
        if self.recipient is None:
            self.state.result = _release(self.schema, self.layout, total, len(self.state.u3), ph)
            return None
        deliver = DeliverRequest(
            session_id=self.state.session_id,
            survivors=self.state.u3,
            ring_bits=self.schema.ring_bits,
            vector=total,
        )
        return Outgoing(Stage.DELIVER.value, {self.recipient: deliver.to_bytes()})

    def _after_deliver(self, replies: Sequence[tuple[int, bytes]]) -> None:
        self.state.delivered = True
        return None

    # -- reconstruction and unmasking ----------------------------------------------------------------

    def _verify(self, kind: str, owner: int, secret: np.ndarray) -> bool:
        if kind == "seed":
            return _commitment(self.state.session_id, owner, secret.tobytes()) == self.state.commitments.get(
                owner
            )
        try:
            pk = X25519PrivateKey.from_private_bytes(secret.tobytes()).public_key().public_bytes_raw()
        except ValueError:
            return False
        return pk == self.state.keys[owner][1]

    def _reconstruct_kind(
        self, good: Mapping[int, Unmask], kind: str, owners: Sequence[int], phase: str
    ) -> dict[int, np.ndarray]:
        """Reconstruct the seeds (``kind="seed"``) or mask keys (``"key"``) of ``owners`` from the
        accepted unmask replies.

        Fast path: at least ``t`` responders that returned the same owner list (the complete graph)
        give a ``(t, owners, limbs)`` array straight from their share matrices, reconstructed with one
        cached Lagrange computation. Everything else (SecAgg+ neighbourhoods, verification failures)
        goes through :meth:`_reconstruct_all`.
        """
        t = self.params.threshold
        out: dict[int, np.ndarray] = {}
        remaining = set(owners)
        if not remaining:
            return out
        groups: dict[tuple[int, ...], list[int]] = {}
        for c, msg in good.items():
            groups.setdefault(msg.alive if kind == "seed" else msg.dead, []).append(c)
        for ids, responders in groups.items():
            todo = [i for i, o in enumerate(ids) if o in remaining]
            if len(responders) < t or len(todo) < 2:
                continue
            chosen = sorted(responders, key=lambda w: self.x[w])[:t]
            shares = np.stack(
                [(good[w].seed_shares if kind == "seed" else good[w].key_shares)[todo] for w in chosen]
            )
            secrets, valid = _shamir.reconstruct([self.x[w] for w in chosen], shares)
            for j, i in enumerate(todo):
                o = ids[i]
                if valid[j] and self._verify(kind, o, secrets[j]):
                    out[o] = secrets[j].copy()
                    remaining.discard(o)
            _wipe(secrets, shares)
        if remaining:
            holders: dict[int, dict[int, np.ndarray]] = {o: {} for o in remaining}
            for c, msg in good.items():
                ids, rows = (msg.alive, msg.seed_shares) if kind == "seed" else (msg.dead, msg.key_shares)
                for i, o in enumerate(ids):
                    if o in holders:
                        holders[o][c] = rows[i]
            out.update(self._reconstruct_all(holders, kind, phase))
        return out

    def _reconstruct_all(
        self, holders: Mapping[int, Mapping[int, np.ndarray]], kind: str, phase: str
    ) -> dict[int, np.ndarray]:
        """Reconstruct every owner's secret from ``threshold`` holders; verify each against its
        commitment (seeds) or advertised public key (mask keys), retrying other holder subsets on a
        mismatch. Owners that share a holder set (complete graph) are reconstructed together with one
        cached Lagrange computation; owners with their own holder sets (SecAgg+) in one vectorised
        batch."""
        t = self.params.threshold
        groups: dict[tuple[int, ...], list[int]] = {}
        for owner, hs in holders.items():
            if len(hs) < t:
                raise ThresholdError(
                    f"only {len(hs)} share holders answered for the {kind} of client {owner}, fewer than the threshold {t}",
                    party=SERVER,
                    phase=phase,
                )
            chosen = tuple(sorted(hs, key=lambda w: self.x[w])[:t])
            groups.setdefault(chosen, []).append(owner)
        out: dict[int, np.ndarray] = {}
        retry: list[int] = []

        def accept(owners: Sequence[int], secrets: np.ndarray, valid: np.ndarray) -> None:
            for i, o in enumerate(owners):
                if valid[i] and self._verify(kind, o, secrets[i]):
                    out[o] = secrets[i].copy()
                else:
                    retry.append(o)
            _wipe(secrets)

        singles: list[tuple[tuple[int, ...], int]] = []
        for chosen, owners in groups.items():
            if len(owners) == 1:  # its own holder set (SecAgg+): batched below, a cache would not hit
                singles.append((chosen, owners[0]))
                continue
            shares = np.stack([np.stack([holders[o][w] for o in owners]) for w in chosen])  # (t, S, LIMBS)
            accept(owners, *_shamir.reconstruct([self.x[w] for w in chosen], shares))
        if singles:
            xs = np.array([[self.x[w] for w in chosen] for chosen, _ in singles], dtype=np.int64)
            shares = np.stack(
                [np.stack([holders[o][w] for w in chosen]) for chosen, o in singles]
            )  # (G, t, L)
            accept([o for _, o in singles], *_shamir.reconstruct_many(xs, shares))
        for o in retry:
            ranked = sorted(holders[o], key=lambda w: self.x[w])
            for start in range(1, len(ranked) - t + 1):
                sub = ranked[start : start + t]
                sec, valid = _shamir.reconstruct(
                    [self.x[w] for w in sub], np.stack([holders[o][w] for w in sub])[:, None, :]
                )
                if valid[0] and self._verify(kind, o, sec[0]):
                    out[o] = sec[0].copy()
                    break
            else:
                raise ThresholdError(
                    f"no {t} consistent shares of the {kind} of client {o} among {len(hs)} holders (bad shares)",
                    party=SERVER,
                    phase=phase,
                )
            self.state.bad_shares[o] = f"{kind} reconstruction needed a second holder subset"
        return out

    def _masked_with_dead(self, v: int) -> list[int]:
        """Survivors whose masked input carries a pairwise mask with the dropped client ``v``."""
        return [u for u in self.state.u3 if v in self.state.masked_with.get(u, ())]

    def _remove_masks(
        self, total: np.ndarray, seeds: Mapping[int, np.ndarray], keys: Mapping[int, np.ndarray]
    ) -> None:
        """total -= sum of self masks of survivors, and -/+ the pairwise masks between survivors and the
        dropped (one PRG expansion each), split over ``workers`` threads (the PRG releases the GIL)."""
        sid, r = self.state.session_id, self.round_index
        public = {u: X25519PublicKey.from_public_bytes(self.state.keys[u][1]) for u in self.state.u3}
        jobs: list[tuple[str, Any]] = [("self", (u, seeds[u].tobytes())) for u in self.state.u3]
        for v, sk in keys.items():
            jobs.append(("pair", (v, sk.tobytes())))

        def work(chunk: list[tuple[str, Any]]) -> np.ndarray:
            ex = MaskExpander(self.layout.length, self.schema.ring_bits, algorithm=self.config.prg)
            acc = ex.zeros()
            for kind, (owner, secret) in chunk:
                if kind == "self":
                    ex.add(acc, _self_key(secret, sid, r, owner))
                    continue
                sk = X25519PrivateKey.from_private_bytes(secret)
                for u in self._masked_with_dead(owner):
                    shared = sk.exchange(public[u])
                    key = _pair_key(shared, sid, r, u, owner)
                    if owner > u:  # y_u holds +PRG(k_uv): remove it
                        ex.add(acc, key)
                    else:
                        ex.subtract(acc, key)
            return acc

        n_jobs = sum(1 if k == "self" else len(self._masked_with_dead(o)) for k, (o, _) in jobs)
        workers = min(self.workers, max(1, len(jobs)))
        if workers == 1 or n_jobs < 8:
            np.subtract(total, work(jobs), out=total)
            return
        # Interleave so each thread gets a similar number of expansions.
        order = sorted(range(len(jobs)), key=lambda i: jobs[i][0] != "pair")
        chunks: list[list[tuple[str, Any]]] = [[] for _ in range(workers)]
        for j, i in enumerate(order):
            chunks[j % workers].append(jobs[i])
        with ThreadPoolExecutor(max_workers=workers) as pool:
            for acc in pool.map(work, chunks):
                np.subtract(total, acc, out=total)


# ----------------------------------------------------------------------------------------------------
# the protocol
# ----------------------------------------------------------------------------------------------------


class SecAggPlus(Protocol):
    """SecAgg+ (Bell et al., CCS 2020, https://eprint.iacr.org/2020/704): masking secure aggregation
    over a random Harary graph of degree :math:`O(\\log n)`, tolerant to dropouts at every stage.

    See the module docstring for the stages and the designated-recipient construction.

    .. math::
        S = \\sum_{u \\in U_3} y_u - \\mathrm{PRG}(b_u)
            - \\sum_{v \\in D} \\sum_{u \\in N(v) \\cap U_3} \\pm \\mathrm{PRG}(k_{uv})
          = \\sum_{u \\in U_3} x_u \\pmod{2^b}

    Args:
        graph: ``"harary"`` or ``"complete"``. (default: ``"harary"``)
        degree, threshold, dropout_rate, corrupt_rate, adversary, prg, security_bits, correctness_bits,
            complete_below: see :class:`SecAggPlusConfig`.
        record_views: keep every message in the transcript (off for benchmarks). (default: ``True``)
        workers: threads regenerating masks at the server (default: the CPU count, at most 8).
        rng: generator used only to resolve ``"any"`` entries of a dropout plan (default: OS-seeded).
        interceptor: fault-injection hook of the router (tests: garble, drop, replay, duplicate).
        insecure_seed: INSECURE, tests and known-answer vectors only: derive every key, seed, share
            and rounding decision from this seed instead of the OS CSPRNG.

    Shapes:
        Contributions as declared by the schema; each masked vector is ``(schema.length + c,)`` ring
        elements of ``schema.ring_bits`` bits, ``c`` the clip-count limbs (:class:`ClipLayout`).

    Security:
        See the module docstring. Threshold :math:`t` per neighbourhood of :math:`k+1` clients; with
        the finder's parameters, tolerated dropouts :math:`\\delta n` and colluding clients
        :math:`\\gamma n` except with probability :math:`2^{-20}` (correctness) and :math:`2^{-40}`
        (security). The sum itself is released (to the server, or to the designated recipient only).
    """

    name: ClassVar[str] = "secagg+"
    _graph: ClassVar[Literal["harary", "complete"]] = "harary"
    #: The server party class (a subclass can model a deviating server in attack simulations).
    server_class: ClassVar[type[SecAggPlusServer]] = SecAggPlusServer
    #: The client party class.
    client_class: ClassVar[type[SecAggPlusClient]] = SecAggPlusClient

    def __init__(
        self,
        *,
        graph: Literal["harary", "complete"] | None = None,
        degree: int | None = None,
        threshold: int | float | None = None,
        dropout_rate: float = 0.1,
        corrupt_rate: float = 0.05,
        adversary: Literal["curious", "semi-malicious", "none"] = "curious",
        prg: Literal["aes256-ctr", "chacha20"] = "aes256-ctr",
        security_bits: float = 40.0,
        correctness_bits: float = 20.0,
        complete_below: int = 32,
        record_views: bool = True,
        workers: int | None = None,
        rng: np.random.Generator | None = None,
        interceptor: Interceptor | None = None,
        insecure_seed: bytes | int | None = None,
    ) -> None:
        self.config = SecAggPlusConfig(
            graph=graph or self._graph,
            degree=degree,
            threshold=threshold,
            dropout_rate=dropout_rate,
            corrupt_rate=corrupt_rate,
            adversary=adversary,
            prg=prg,
            security_bits=security_bits,
            correctness_bits=correctness_bits,
            complete_below=complete_below,
        )
        self.record_views = bool(record_views)
        if workers is not None and (isinstance(workers, bool) or not isinstance(workers, int) or workers < 1):
            raise ConfigError(f"workers must be a positive integer, got {workers!r}")
        self.workers = workers or min(8, os.cpu_count() or 1)
        self._rng = rng
        self.interceptor = interceptor
        if insecure_seed is not None:
            warnings.warn(
                f"{type(self).__name__}(insecure_seed=...) derives every key and mask from a fixed seed: "
                "INSECURE, for tests and known-answer vectors only",
                UserWarning,
                stacklevel=2,
            )
        self._insecure_seed = insecure_seed

    def parameters(self, num_clients: int) -> GraphParameters:
        """The graph degree and threshold this protocol uses with ``num_clients`` invited clients."""
        return resolve_graph(self.config, num_clients)

    def _random_for(self, client: int, round_index: int) -> tuple[RandomSource, np.random.Generator | None]:
        if self._insecure_seed is None:
            return system_random, None
        src = InsecureDeterministicRandom(
            self._insecure_seed, label=f"{self.name}/client/{client}/round/{round_index}"
        )
        gen = np.random.default_rng(int.from_bytes(src(16), "big"))
        return src, gen

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
        """Securely sum ``contributions``. See :meth:`Protocol.aggregate`.

        Raises:
            ConfigError: bad arguments (client ids, recipient, dropout plan, threshold).
            OverflowRiskError: more contributions than ``schema.max_clients``.
            ThresholdError: too few survivors (or the designated recipient dropped); nothing revealed.
            ReleaseRefusedError: fewer surviving inputs than ``schema.min_contributors``.
        """
        if not isinstance(schema, SumSchema):
            raise ConfigError(f"schema must be a SumSchema, got {type(schema).__name__}")
        clients = check_clients(contributions)
        schema.check_num_clients(len(clients))
        if recipient is not None and recipient not in contributions:
            raise ConfigError(
                f"recipient {recipient!r} is not an invited client; invited: {list(clients)[:10]}"
            )
        contexts = client_contexts(context, clients)
        stages = Stage.ordered(recipient=recipient is not None)
        if self._rng is not None:
            drng = self._rng
        elif self._insecure_seed is not None:
            drng = np.random.default_rng(
                int.from_bytes(InsecureDeterministicRandom(self._insecure_seed, "dropouts")(16), "big")
            )
        else:
            drng = default_rng()
        plan = (dropouts or DropoutPlan.none()).resolve(stages, drng)
        transcript = Transcript(
            protocol=self.name,
            round_index=int(round_index),
            invited=clients,
            recipient=SERVER if recipient is None else recipient,
        )
        server = self.server_class(
            schema,
            clients,
            config=self.config,
            protocol_name=self.name,
            round_index=round_index,
            recipient=recipient,
            workers=self.workers,
        )
        parties = {}
        for c in clients:
            src, gen = self._random_for(c, round_index)
            parties[c] = self.client_class(
                c,
                schema,
                contributions[c],
                config=self.config,
                protocol_name=self.name,
                round_index=round_index,
                recipient=recipient,
                context=contexts[c],
                random=src,
                encode_rng=gen,
            )
        transcript.extra.update(
            graph="complete" if server.params.complete else "harary",
            degree=server.params.degree,
            threshold=server.params.threshold,
        )
        try:
            Router(
                transcript, dropouts=plan, record_views=self.record_views, interceptor=self.interceptor
            ).run(server, parties)
            if recipient is not None:
                sums = parties[recipient].result
                if sums is None:
                    raise ThresholdError(
                        f"the designated recipient {recipient} dropped out before the sum was delivered; "
                        "nobody learned the sum",
                        party=recipient,
                        phase=Stage.DELIVER.value,
                    )
                transcript.extra["delivered_to"] = recipient
            else:
                assert server.state.result is not None
                sums = server.state.result
        except ProtocolError as exc:
            _finish(transcript, server, parties)
            exc.transcript = transcript  # type: ignore[attr-defined]
            raise
        _finish(transcript, server, parties)
        transcript.clip_counts = dict(sums.clip_counts)
        transcript.withheld = dict(sums.withheld)
        return sums, transcript

    def __repr__(self) -> str:
        c = self.config
        return (
            f"{type(self).__name__}(graph={c.graph!r}, degree={c.degree}, threshold={c.threshold}, "
            f"dropout_rate={c.dropout_rate}, corrupt_rate={c.corrupt_rate}, adversary={c.adversary!r}, prg={c.prg!r})"
        )


def _finish(
    transcript: Transcript, server: SecAggPlusServer, parties: Mapping[int, SecAggPlusClient]
) -> None:
    transcript.session_id = server.state.session_id
    transcript.survivors = server.state.u3
    for c, why in server.state.excluded.items():
        transcript.excluded.setdefault(c, why)
    for c, p in parties.items():
        if p.error is not None:
            transcript.excluded.setdefault(c, f"{type(p.error).__name__}: {p.error}")
    transcript.extra.update(
        advertised=list(server.state.u1),
        shared=list(server.state.u2),
        dead_after_sharing=list(server.state.dead),
    )
    steps: dict[str, list[float]] = {}
    for p in parties.values():
        for k, v in p.step_seconds.items():
            steps.setdefault(k, []).append(v)
    if steps:
        transcript.extra["client_masked_input_seconds"] = {
            k: {"min": min(v), "median": float(np.median(v)), "max": max(v)} for k, v in steps.items()
        }
    if server.state.unmask_seconds:
        transcript.extra["server_unmask_seconds"] = dict(server.state.unmask_seconds)
    if server.state.bad_shares:
        transcript.extra["bad_shares"] = {str(k): v for k, v in server.state.bad_shares.items()}
    if server.state.unmask_rejected:
        transcript.extra["unmask_rejected"] = {str(k): v for k, v in server.state.unmask_rejected.items()}
