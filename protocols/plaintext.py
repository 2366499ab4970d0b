"""The plaintext baseline: every client sends its vector in the clear. INSECURE by design.

``PlaintextAggregation`` exists for two reasons: as the baseline every secure protocol is measured
against (same messages, same router, same transcript, no cryptography), and as the *unprotected*
setting of the attack harness (the server's view holds every individual contribution). Never use it
where the server must not see individual inputs.

Protocol (stages ``input`` then, in designated-recipient mode, ``deliver``):

.. math::

    \\text{client } c:\\; x_c = \\mathrm{clip}(\\mathrm{pack}(\\text{contribution}_c)) \\in \\mathbb{R}^D
    \\;\\to\\; \\text{server};\\qquad
    \\text{server}:\\; S = \\sum_{c \\in \\mathcal{A}} x_c \\;(\\text{float64}),

where :math:`\\mathcal{A}` is the set of clients whose input arrived and passed validation. Messages
are versioned binary frames of :mod:`securefgl.protocols.messages` (types ``0x40``-``0x42``), validated
on receipt; float64 values travel as their IEEE-754 bit patterns.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import ClassVar, TypedDict

import numpy as np

from securefgl.errors import (
    ConfigError,
    EncodingError,
    InconsistentViewError,
    MalformedMessageError,
    ProtocolError,
    ReleaseRefusedError,
    StageOrderError,
    ThresholdError,
)
from securefgl.protocols._parties import check_clients, client_contexts
from securefgl.protocols._release import check_min_contributors, refuse_small_sum
from securefgl.protocols.base import SERVER, Contribution, DropoutPlan, Protocol, Sums, Transcript
from securefgl.protocols.encoding import SumSchema, default_rng
from securefgl.protocols.messages import (
    U64,
    Blob,
    Field,
    Fixed,
    IdList,
    Int,
    Message,
    OptionalId,
    RingVector,
    Text,
    decode,
)
from securefgl.protocols.router import Outgoing, Router

__all__ = ["PlainDeliver", "PlainInput", "PlainInputRequest", "PlaintextAggregation", "STAGES"]

#: The stages of the plaintext protocol, in order (``deliver`` only runs in designated-recipient mode).
STAGES: tuple[str, ...] = ("input", "deliver")
_DOMAIN = b"securefgl/plaintext/v1"


class _Where(TypedDict):
    """Where an error happened: the ``party`` and ``phase`` keywords of a protocol error."""

    party: int
    phase: str


# ----------------------------------------------------------------------------------------------------
# messages
# ----------------------------------------------------------------------------------------------------


class _Counts(IdList):
    """Per-block clip counts (u32 each), in schema order."""


_BYTES32: Field = Fixed(32)


@dataclass(frozen=True, eq=False)
class PlainInputRequest(Message):
    """Server -> client, stage ``input``: the public parameters of the round."""

    TYPE: ClassVar[int] = 0x40
    STAGE: ClassVar[str] = "input"
    protocol: str
    round_index: int
    invited: tuple[int, ...]
    recipient: int | None
    length: int
    schema_fingerprint: bytes
    FIELDS: ClassVar[dict[str, Field]] = {
        "protocol": Text(64),
        "round_index": Int(U64, 2**64 - 1),
        "invited": IdList(),
        "recipient": OptionalId(),
        "length": Int(U64, 2**64 - 1),
        "schema_fingerprint": Blob(1024),
    }


@dataclass(frozen=True, eq=False)
class PlainInput(Message):
    """Client -> server, stage ``input``: the clipped float64 vector (as IEEE-754 bits, ``ring_bits=64``),
    the client's clip counts per block, the session id it computed and a digest of its round context."""

    TYPE: ClassVar[int] = 0x41
    STAGE: ClassVar[str] = "input"
    session_id: bytes
    context_digest: bytes
    clip_counts: tuple[int, ...]
    ring_bits: int
    vector: np.ndarray
    FIELDS: ClassVar[dict[str, Field]] = {
        "session_id": _BYTES32,
        "context_digest": _BYTES32,
        "clip_counts": _Counts(),
        "ring_bits": Int(struct.Struct(">B"), 64),
        "vector": RingVector(),
    }


@dataclass(frozen=True, eq=False)
class PlainDeliver(Message):
    """Server -> designated recipient, stage ``deliver``: the float64 sum and who is in it."""

    TYPE: ClassVar[int] = 0x42
    STAGE: ClassVar[str] = "deliver"
    session_id: bytes
    survivors: tuple[int, ...]
    clip_counts: tuple[int, ...]
    ring_bits: int
    vector: np.ndarray
    FIELDS: ClassVar[dict[str, Field]] = {
        "session_id": _BYTES32,
        "survivors": IdList(),
        "clip_counts": _Counts(),
        "ring_bits": Int(struct.Struct(">B"), 64),
        "vector": RingVector(),
    }


def _bits_of(x: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(x, dtype=np.float64).view(np.uint64)


def _floats_of(v: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(v, dtype=np.uint64).view(np.float64)


def session_id(request: PlainInputRequest) -> bytes:
    """SHA-256 binding the round's public parameters (what the client was asked) into one id."""
    h = hashlib.sha256(_DOMAIN)
    h.update(request.to_bytes())
    return h.digest()


def _check_packed(schema: SumSchema, x: np.ndarray) -> str | None:
    """Why a received vector is not a valid clipped contribution (``None`` if it is)."""
    if x.shape != (schema.length,):
        return f"vector of length {x.shape[0]}, expected {schema.length}"
    if not np.isfinite(x).all():
        return "non-finite values"
    for spec in schema.blocks:
        v = x[schema.slices[spec.name]]
        if spec.kind == "real":
            if v.size and float(np.abs(v).max()) > spec.bound:
                return f"block {spec.name!r} exceeds its bound {spec.bound:g}"
        elif v.size and (float(v.min()) < 0 or float(v.max()) > spec.bound or (v != np.floor(v)).any()):
            return f"block {spec.name!r} is not a count in [0, {int(spec.bound)}]"
    return None


# ----------------------------------------------------------------------------------------------------
# parties
# ----------------------------------------------------------------------------------------------------


class PlainClient:
    """A plaintext client: answers one input request with its clipped vector; may receive the sum.

    Args:
        party_id: the client's id.
        schema: the schema it was configured with (the request must carry its fingerprint).
        contribution: its named tensors.
        round_index: the round it expects.
        context: the public round context it was shown (only its SHA-256 is sent).
    """

    def __init__(
        self, party_id: int, schema: SumSchema, contribution: Contribution, round_index: int, context: bytes
    ) -> None:
        self.party_id = int(party_id)
        self.schema = schema
        self._contribution = contribution
        self.round_index = int(round_index)
        self.context_digest = hashlib.sha256(bytes(context)).digest()
        self.stage = "start"
        self.session_id = b""
        self.received: PlainDeliver | None = None

    def handle(self, payload: bytes) -> bytes | None:
        if self.stage == "start":
            return self._input(payload)
        if self.stage == "sent":
            self._deliver(payload)
            return None
        raise StageOrderError(
            f"request after the protocol finished (stage {self.stage})", party=self.party_id
        )

    def _input(self, payload: bytes) -> bytes:
        where: _Where = {"party": self.party_id, "phase": "input"}
        try:
            req = decode(payload, PlainInputRequest)
        except MalformedMessageError as exc:
            raise MalformedMessageError(str(exc), **where) from exc
        if req.schema_fingerprint != self.schema.fingerprint():
            raise InconsistentViewError(
                "the server's schema differs from the one this client was given", **where
            )
        if req.round_index != self.round_index or self.party_id not in req.invited:
            raise InconsistentViewError(
                f"request for round {req.round_index} inviting {len(req.invited)} clients does not match this "
                f"client (round {self.round_index}, id {self.party_id})",
                **where,
            )
        if req.length != self.schema.length or req.protocol != PlaintextAggregation.name:
            raise InconsistentViewError(
                f"request for protocol {req.protocol!r} of length {req.length} does not match", **where
            )
        try:
            flat, clips = self.schema.pack(self._contribution)
        except EncodingError as exc:
            raise EncodingError(str(exc), **where) from exc
        self._contribution = {}  # sent: keep nothing
        self.session_id = session_id(req)
        self.stage = "sent"
        msg = PlainInput(
            session_id=self.session_id,
            context_digest=self.context_digest,
            clip_counts=tuple(clips[n] for n in self.schema.names),
            ring_bits=64,
            vector=_bits_of(flat),
        )
        return msg.to_bytes()

    def _deliver(self, payload: bytes) -> None:
        where: _Where = {"party": self.party_id, "phase": "deliver"}
        try:
            msg = decode(payload, (PlainDeliver, PlainInputRequest))
        except MalformedMessageError as exc:
            raise MalformedMessageError(str(exc), **where) from exc
        if isinstance(msg, PlainInputRequest):
            raise StageOrderError("input request replayed: this client already sent its input", **where)
        if msg.session_id != self.session_id:
            raise InconsistentViewError("delivered sum belongs to another session", **where)
        if msg.vector.shape != (self.schema.length,) or len(msg.clip_counts) != len(self.schema):
            raise MalformedMessageError("delivered sum has the wrong length", **where)
        self.received = msg
        self.stage = "done"
        return None

    @property
    def result(self) -> Sums | None:
        """The delivered sum after the release rules (designated recipient), or ``None`` before delivery."""
        got = self.received
        if got is None:
            return None
        clips = dict(zip(self.schema.names, (int(k) for k in got.clip_counts), strict=True))
        n = len(got.survivors)
        return self.schema.release(
            self.schema.unpack(_floats_of(got.vector)), n, clips, self.schema.float_error_bound(n)
        )


class PlainServer:
    """The plaintext server: requests inputs, validates and sums them in float64, optionally delivers."""

    stages = STAGES

    def __init__(
        self,
        schema: SumSchema,
        invited: Sequence[int],
        round_index: int,
        recipient: int | None,
        transcript: Transcript,
    ) -> None:
        self.schema = schema
        self.invited = tuple(invited)
        self.recipient = recipient
        self.transcript = transcript
        self.request = PlainInputRequest(
            protocol=PlaintextAggregation.name,
            round_index=int(round_index),
            invited=self.invited,
            recipient=recipient,
            length=schema.length,
            schema_fingerprint=schema.fingerprint(),
        )
        self.session_id = session_id(self.request)
        self.total = np.zeros(schema.length, dtype=np.float64)
        self.survivors: tuple[int, ...] = ()
        self.clip_counts: dict[str, int] = dict.fromkeys(schema.names, 0)
        self.finished = False

    def start(self) -> Outgoing:
        payload = self.request.to_bytes()
        return Outgoing("input", dict.fromkeys(self.invited, payload))

    def _exclude(self, client: int, error: ProtocolError) -> None:
        self.transcript.excluded.setdefault(client, f"{type(error).__name__}: {error}")

    def handle(self, stage: str, replies: Sequence[tuple[int, bytes]]) -> Outgoing | None:
        if stage == "input":
            return self._collect(replies)
        if stage == "deliver":
            self.finished = True
            return None
        raise StageOrderError(f"unexpected stage {stage!r}; valid: {list(STAGES)}", party=SERVER)

    def _collect(self, replies: Sequence[tuple[int, bytes]]) -> Outgoing | None:
        seen: dict[int, int] = {}
        for client, _ in replies:
            seen[client] = seen.get(client, 0) + 1
        accepted: dict[int, tuple[np.ndarray, tuple[int, ...], bytes]] = {}
        for client, payload in replies:
            where: _Where = {"party": client, "phase": "input"}
            if client not in self.invited:
                continue
            if seen[client] > 1:
                self._exclude(client, StageOrderError(f"sent {seen[client]} inputs; all discarded", **where))
                continue
            try:
                msg = decode(payload, PlainInput)
            except MalformedMessageError as exc:
                self._exclude(client, MalformedMessageError(str(exc), **where))
                continue
            if msg.session_id != self.session_id:
                self._exclude(client, InconsistentViewError("input for another session", **where))
                continue
            x = _floats_of(msg.vector)
            why = _check_packed(self.schema, x) or (
                None if len(msg.clip_counts) == len(self.schema) else "wrong number of clip counts"
            )
            if why is not None:
                self._exclude(client, EncodingError(f"invalid input: {why}", **where))
                continue
            accepted[client] = (x, msg.clip_counts, msg.context_digest)
        # Clients shown a different round context cannot be summed with the others: keep the majority
        # context (ties: the smallest digest), exclude the rest.
        if accepted:
            digests: dict[bytes, int] = {}
            for _, _, dg in accepted.values():
                digests[dg] = digests.get(dg, 0) + 1
            common = min(digests, key=lambda d: (-digests[d], d))
            for client in [c for c, (_, _, dg) in accepted.items() if dg != common]:
                self._exclude(
                    client,
                    InconsistentViewError("was shown a different round context", party=client, phase="input"),
                )
                del accepted[client]
        for client in sorted(accepted):
            x, clips, _ = accepted[client]
            np.add(self.total, x, out=self.total)
            for name, k in zip(self.schema.names, clips, strict=True):
                self.clip_counts[name] += int(k)
        self.survivors = tuple(sorted(accepted))
        n = len(self.survivors)
        if n < self.schema.min_contributors:
            raise ReleaseRefusedError(
                f"sum of {n} contributor(s) refused: the schema requires at least "
                f"min_contributors={self.schema.min_contributors}",
                party=SERVER,
                phase="input",
            )
        if self.recipient is None:
            self.finished = True
            return None
        deliver = PlainDeliver(
            session_id=self.session_id,
            survivors=self.survivors,
            clip_counts=tuple(self.clip_counts[n] for n in self.schema.names),
            ring_bits=64,
            vector=_bits_of(self.total),
        )
        return Outgoing("deliver", {self.recipient: deliver.to_bytes()})

    def release(self, min_contributors: int) -> Sums:
        """The released sum of the accepted inputs (server-bound mode), after the release rules.

        Raises:
            ReleaseRefusedError: fewer accepted inputs than ``min_contributors`` or the schema's minimum.
        """
        n = len(self.survivors)
        refuse_small_sum(n, min_contributors, self.schema.min_contributors, "release", SERVER)
        return self.schema.release(
            self.schema.unpack(self.total), n, self.clip_counts, self.schema.float_error_bound(n)
        )


# ----------------------------------------------------------------------------------------------------
# the protocol
# ----------------------------------------------------------------------------------------------------


class PlaintextAggregation(Protocol):
    """INSECURE baseline: clients send their clipped vectors in the clear and the server adds them.

    Each client validates and clips its contribution with the schema (``SumSchema.pack``), sends the
    float64 vector in a versioned message through the router, and the server checks every received
    vector (length, finiteness, bounds) before adding it in float64. Dropped clients are simply not
    summed; a client whose message is malformed, duplicated, out of bound, for another session or
    computed under another round context is excluded and the others are still summed exactly. The
    release rules of the schema apply as for every protocol.

    .. math::

        S = \\sum_{c \\in \\mathcal{A}} \\mathrm{clip}(x_c), \\qquad
        |\\hat S - S| \\le (|\\mathcal{A}| - 1)\\, 2^{-53}\\, |\\mathcal{A}|\\, B
        \\;(+\\text{ output-dtype rounding}).

    Args:
        record_views: keep every message in the transcript's views (the attack harness reads
            ``views[SERVER]``). (default: ``True``)
        rng: generator used only to resolve ``"any"`` entries of a dropout plan (default: OS-seeded).
        min_contributors: the fewest inputs a released sum may hold (with the schema's rule). Unlike the
            secure protocols (default 2) the default is 1: the server sees every input anyway, so a
            minimum protects nothing, and single-client runs (Local, Centralized) are legitimate.
            (default: ``1``)

    Shapes:
        Contributions: as declared by the schema; the wire vector is ``(schema.length,)`` float64.

    Security:
        None. The server (and anyone on the network path) sees every client's clipped vector in its
        view, which is why ``reveals_individual_inputs`` is ``True``. Designated-recipient mode
        (``recipient=c``) delivers the sum to client ``c`` as the protocol requires, but the server
        still computes the sum itself and still sees every input: it only exercises the message
        flow. Tolerates any number of dropouts (there is no threshold); the schema's
        ``min_contributors`` still refuses small sums.
    """

    name: ClassVar[str] = "plaintext"
    reveals_individual_inputs: ClassVar[bool] = True
    stages: ClassVar[tuple[str, ...]] = STAGES
    input_phase: ClassVar[str] = "input"

    def __init__(
        self, *, record_views: bool = True, rng: np.random.Generator | None = None, min_contributors: int = 1
    ) -> None:
        self.record_views = bool(record_views)
        self._rng = rng
        self.min_contributors = check_min_contributors(min_contributors)

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
        """Sum ``contributions`` in the clear. See :meth:`Protocol.aggregate`.

        Raises:
            ConfigError: bad arguments (unknown recipient, bad client ids, bad dropout plan).
            OverflowRiskError: more contributions than ``schema.max_clients``.
            ReleaseRefusedError: fewer accepted inputs than ``schema.min_contributors``.
            ThresholdError: the designated recipient dropped out before the sum reached it.
        """
        if not isinstance(schema, SumSchema):
            raise ConfigError(f"schema must be a SumSchema, got {type(schema).__name__}")
        clients = check_clients(contributions)
        schema.check_num_clients(len(clients))
        if recipient is not None and recipient not in contributions:
            raise ConfigError(f"recipient {recipient!r} is not an invited client; invited: {list(clients)}")
        contexts = client_contexts(context, clients)
        plan = (dropouts or DropoutPlan.none()).resolve(STAGES, self._rng or default_rng())
        transcript = Transcript(
            protocol=self.name,
            round_index=int(round_index),
            invited=clients,
            recipient=SERVER if recipient is None else recipient,
        )
        server = PlainServer(schema, clients, round_index, recipient, transcript)
        transcript.session_id = server.session_id
        parties = {c: PlainClient(c, schema, contributions[c], round_index, contexts[c]) for c in clients}
        Router(transcript, dropouts=plan, record_views=self.record_views).run(server, parties)

        transcript.survivors = server.survivors
        refuse_small_sum(
            len(server.survivors), self.min_contributors, schema.min_contributors, "release", SERVER
        )
        transcript.clip_counts = dict(server.clip_counts)
        transcript.extra["server_sees_individual_inputs"] = True
        if recipient is None:
            sums = server.release(self.min_contributors)
        else:
            delivered = parties[recipient].result
            if delivered is None:
                raise ThresholdError(
                    f"the designated recipient {recipient} dropped out before the sum was delivered; "
                    "nothing was released to it",
                    party=recipient,
                    phase="deliver",
                )
            sums = delivered
            transcript.extra["delivered_to"] = recipient
        transcript.withheld = dict(sums.withheld)
        return sums, transcript

    def __repr__(self) -> str:
        return f"PlaintextAggregation(record_views={self.record_views})"
