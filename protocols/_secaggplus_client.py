"""The SecAgg/SecAgg+ client party: a stage machine, bytes in and bytes out.

Re-exported by :mod:`securefgl.protocols.secaggplus` (see its docstring for the stages and the
checks). The client never imports the server half.
"""

from __future__ import annotations

import logging
import time
from typing import ClassVar

import numpy as np
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey

from securefgl.errors import (
    ConfigError,
    EncodingError,
    InconsistentViewError,
    InvalidMessage,
    MalformedMessageError,
    ProtocolError,
    RequestRefusedError,
    StageOrderError,
    ThresholdError,
)
from securefgl.protocols import _shamir
from securefgl.protocols._abort import abort_message
from securefgl.protocols._buffers import recycled
from securefgl.protocols._channel import PeerChannel
from securefgl.protocols._consistency import (
    CertifiedUnmaskRequest,
    ConsistencyRequest,
    ConsistencySignature,
    SignedAdvertiseKeys,
    SignedShareKeysRequest,
    certified_signers,
    quorum,
)
from securefgl.protocols._identity import IdentityDirectory, advertise_statement, survivors_statement
from securefgl.protocols._prg import KEY_BYTES, RandomSource, expander_for, system_random
from securefgl.protocols._release import refuse_small_sum
from securefgl.protocols._rounding import RoundingBits
from securefgl.protocols._secaggplus_client_use import SecAggPlusClientState, UseLifecycle
from securefgl.protocols._secaggplus_params import SecAggPlusConfig, Stage, resolve_graph
from securefgl.protocols._secaggplus_precompute import MaskPrecompute, WorkerMaskPrecompute
from securefgl.protocols._secaggplus_resume import SEED_SHARE_BYTES, ClientSession, ResumedUnmaskRequest
from securefgl.protocols._secaggplus_session import (
    SHARE_BYTES,
    SHARE_PLAINTEXT,
    ClipLayout,
    commitment,
    hkdf_extract,
    pad_key,
    pair_key,
    private_key,
    release_ring,
    self_key,
    session_graph,
    session_id_for,
    wipe,
)
from securefgl.protocols._validation import rounding_source
from securefgl.protocols.base import Contribution, Sums
from securefgl.protocols.encoding import SumSchema
from securefgl.protocols.messages import (
    AdvertiseKeys,
    AdvertiseRequest,
    DeliverRequest,
    MaskedInput,
    MaskedInputRequest,
    Message,
    ResumeRequest,
    ShareKeys,
    ShareKeysRequest,
    Unmask,
    UnmaskRequest,
    decode,
)

__all__ = ["SecAggPlusClient", "SecAggPlusClientState"]

#: The client's local log: full error details stay here; the server only receives a reason code.
log = logging.getLogger("securefgl.protocols.secagg.client")


class SecAggPlusClient(UseLifecycle):
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
        encode_rng: the rounding bits of the encoding's stochastic rounding (default: an AES-CTR
            keystream under a key from the OS CSPRNG; see :func:`~securefgl.protocols.encoding`).
        identity: this client's long-term Ed25519 key (signs its advertised keys and, with the
            consistency round, the survivor set). Required when ``directory`` is given.
        directory: every client's identity public key, from configuration: with it the client accepts
            only signed key tables. Required by the consistency round.
        session: what this client kept from the previous use of a session (its :attr:`session` after that
            use): the client then expects a ``resume`` request instead of a key agreement
            (:mod:`~securefgl.protocols._secaggplus_resume`). (default: ``None``)
        workers: threads expanding this client's masks, the vector split between them
            (:meth:`~securefgl.protocols._prg.MaskExpander.combine`). (default: ``1``)

    Attributes:
        session: after a use that allows another one (``config.session_uses``, every neighbour alive),
            what the next use needs; ``None`` otherwise (the secrets are wiped).

    Raises:
        ConfigError: the consistency round without identities, a key without a directory, or a session
            of another client or configuration.
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
        encode_rng: RoundingBits | np.random.Generator | None = None,
        identity: Ed25519PrivateKey | None = None,
        directory: IdentityDirectory | None = None,
        session: ClientSession | None = None,
        workers: int = 1,
    ) -> None:
        if session is not None and (session.party_id != party_id or config.session_uses < 2):
            raise ConfigError(
                f"client {party_id} cannot resume the session of client {session.party_id} with "
                f"session_uses={config.session_uses}"
            )
        if (identity is None) != (directory is None) or (config.consistency and directory is None):
            raise ConfigError(
                "identity and directory go together, and the consistency round needs both "
                f"(consistency={config.consistency}, identity given={identity is not None}, "
                f"directory given={directory is not None})"
            )
        if directory is not None and party_id not in directory:
            raise ConfigError(f"client {party_id} has no key in the identity directory")
        self._identity = identity
        self.directory = directory
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
        self._resumed = session
        self.workers = max(1, int(workers))
        #: pairwise masks expanded ahead for an announced resumed use (set by the simulating protocol), or None
        self.precomputed: MaskPrecompute | WorkerMaskPrecompute | None = None
        self.session: ClientSession | None = None
        self._continues = False
        #: Wall time of the steps of ``masked_input`` (decrypt shares, encode, mask, serialise), seconds.
        self.step_seconds: dict[str, float] = {}

    # -- dispatch ------------------------------------------------------------------------------------

    _SERVER_MESSAGES: ClassVar[tuple[type[Message], ...]] = (
        AdvertiseRequest,
        ShareKeysRequest,
        SignedShareKeysRequest,
        ResumeRequest,
        MaskedInputRequest,
        ConsistencyRequest,
        UnmaskRequest,
        CertifiedUnmaskRequest,
        ResumedUnmaskRequest,
        DeliverRequest,
    )

    def _order(self) -> dict[str, tuple[type[Message], str]]:
        """Last completed stage -> (the request expected next, its stage), for this configuration."""
        signed = self.directory is not None
        order: dict[str, tuple[type[Message], str]] = {
            "start": (AdvertiseRequest, Stage.ADVERTISE_KEYS.value),
            Stage.ADVERTISE_KEYS.value: (
                SignedShareKeysRequest if signed else ShareKeysRequest,
                Stage.SHARE_KEYS.value,
            ),
            Stage.SHARE_KEYS.value: (MaskedInputRequest, Stage.MASKED_INPUT.value),
            Stage.MASKED_INPUT.value: (UnmaskRequest, Stage.UNMASKING.value),
            Stage.UNMASKING.value: (DeliverRequest, Stage.DELIVER.value),
        }
        if self._resumed is not None and self.config.optimistic_uses:  # resume (the input), [deliver]
            return {
                "start": (ResumeRequest, Stage.RESUME.value),
                Stage.RESUME.value: (DeliverRequest, Stage.DELIVER.value),
            }
        if self._resumed is not None:  # resume (the input goes with it), [consistency], unmask, [deliver]
            unmask = (ResumedUnmaskRequest, Stage.UNMASKING.value)
            order = {
                "start": (ResumeRequest, Stage.RESUME.value),
                Stage.UNMASKING.value: order[Stage.UNMASKING.value],
            }
            if self.config.consistency:
                order[Stage.RESUME.value] = (ConsistencyRequest, Stage.CONSISTENCY_CHECK.value)
                order[Stage.CONSISTENCY_CHECK.value] = unmask
            else:
                order[Stage.RESUME.value] = unmask
            return order
        if self.config.consistency:
            order[Stage.MASKED_INPUT.value] = (ConsistencyRequest, Stage.CONSISTENCY_CHECK.value)
            order[Stage.CONSISTENCY_CHECK.value] = (CertifiedUnmaskRequest, Stage.UNMASKING.value)
        return order

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
            log.info("client %s: %s", self.party_id, err)
            return abort_message(err)
        expected, stage = self._order().get(self.state.stage, (None, "?"))
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
            log.warning("client %s aborted: %s: %s", self.party_id, type(exc).__name__, exc)
            return abort_message(exc)
        return None if reply is None else reply.to_bytes()

    def _advertise_keys(self, req: AdvertiseRequest) -> AdvertiseKeys | SignedAdvertiseKeys:
        ph = Stage.ADVERTISE_KEYS.value
        invited = req.invited
        if list(invited) != sorted(set(invited)):
            raise self._fail(MalformedMessageError, "invited list is not sorted and unique", ph)
        if self.party_id not in invited:
            raise self._fail(InconsistentViewError, "this client is not in the invited list", ph)
        mism = self._mismatches(req)
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
        s.request, s.params, s.round_index = req, params, req.round_index
        s.channel_sk = private_key(self._random)
        s.mask_sk_raw = bytearray(self._random(KEY_BYTES))
        s.mask_sk = X25519PrivateKey.from_private_bytes(bytes(s.mask_sk_raw))
        s.stage = ph
        cpk = s.channel_sk.public_key().public_bytes_raw()
        spk = s.mask_sk.public_key().public_bytes_raw()
        if self._identity is not None:
            stmt = advertise_statement(req.to_bytes(), self.party_id, cpk, spk)
            return SignedAdvertiseKeys(channel_pk=cpk, mask_pk=spk, signature=self._identity.sign(stmt))
        return AdvertiseKeys(channel_pk=cpk, mask_pk=spk)

    def _check_key_signatures(self, req: SignedShareKeysRequest, used: set[int], phase: str) -> None:
        """The key pairs this client uses (``used``: its neighbours and the recipient; every row on the
        complete graph) must carry their owners' identity signatures, so the server cannot substitute
        them. Other rows only enter the session id, which every client must agree on anyway."""
        assert self.state.request is not None and self.directory is not None
        sigs = dict(req.signatures)
        if len(sigs) != len(req.signatures) or set(sigs) != {row[0] for row in req.keys}:
            raise self._fail(InconsistentViewError, "the key table's signatures do not match its rows", phase)
        request = self.state.request.to_bytes()
        forged = [
            cid
            for cid, cpk, spk in req.keys
            if cid in used
            and not self.directory.verify(cid, advertise_statement(request, cid, cpk, spk), sigs[cid])
        ]
        if forged:
            raise self._fail(
                InconsistentViewError,
                f"keys of clients {forged[:5]} are not signed by their identity keys (substituted or replayed)",
                phase,
            )

    def _share_keys(self, req: ShareKeysRequest | SignedShareKeysRequest) -> ShareKeys:
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
        sid = session_id_for(s.request, req.keys, self.context, optimistic=self.config.optimistic_uses)
        graph = session_graph(sid, ids, s.params.degree)
        nbrs = graph.neighbours(self.party_id)
        if len(nbrs) < t:
            raise self._fail(
                ThresholdError, f"{len(nbrs)} neighbours (incl. self), fewer than the threshold {t}", ph
            )
        if isinstance(req, SignedShareKeysRequest):
            used = set(nbrs) | ({self.recipient} if self.recipient is not None else set())
            self._check_key_signatures(req, used, ph)
        s.session_id, s.keys, s.neighbours = sid, table, nbrs
        r = s.round_index
        keep = self.config.session_uses > 1  # the raw secrets a resumed use derives its keys from
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
                s.mask_keys[v] = pair_key(mshared, sid, r, self.party_id, v)
                if keep:
                    s.mask_prk[v] = hkdf_extract(mshared)
        except ValueError:
            raise self._fail(
                InconsistentViewError, "a neighbour advertised a degenerate (low-order) public key", ph
            ) from None
        s.seed = bytearray(self._random(KEY_BYTES))
        s.self_mask_key = self_key(s.seed, sid, r, self.party_id)  # derived with the pairwise keys
        position = {c: i + 1 for i, c in enumerate(s.request.invited)}
        xs = [position[v] for v in nbrs]
        shares = _shamir.split([bytes(s.seed), bytes(s.mask_sk_raw)], xs, t, self._random)  # (m, 2, LIMBS)
        envelopes = []
        for i, v in enumerate(nbrs):
            if v == self.party_id:
                s.own_shares = shares[i].copy()
                continue
            plain = SHARE_PLAINTEXT.pack(self.party_id, v) + shares[i].astype("<u4").tobytes()
            envelopes.append((v, s.channels[v].seal(plain)))
        wipe(shares)
        s.stage = ph
        return ShareKeys(
            session_id=sid,
            seed_commitment=commitment(sid, self.party_id, s.seed),
            envelopes=tuple(envelopes),
        )

    def _open_share(self, sender: int, blob: bytes) -> np.ndarray:
        """The shares in ``sender``'s envelope: ``(2, LIMBS)`` (seed, mask key) in use 0, ``(1, LIMBS)``
        (the fresh seed) in a resumed use."""
        rows = 1 if self._resumed is not None else 2
        bind = self.state.session_id if rows == 1 else b""  # a resumed use binds its shares to its use id
        plain = self.state.channels[sender].open(blob, bind=bind)  # InvalidMessage on any failure
        if len(plain) != (SEED_SHARE_BYTES if rows == 1 else SHARE_BYTES):
            raise InvalidMessage()
        src, dst = SHARE_PLAINTEXT.unpack_from(plain)
        if (src, dst) != (sender, self.party_id):
            raise InvalidMessage()
        sh = (
            np.frombuffer(plain, dtype="<u4", offset=SHARE_PLAINTEXT.size)
            .astype(np.uint32)
            .reshape(rows, _shamir.LIMBS)
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
            s.seed_shares[v] = sh[0]
            if self._resumed is None:
                s.key_shares[v] = sh[1]
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
        t1 = time.perf_counter()
        y = self._masked_vector(
            sorted(s.seed_shares), ph, True
        )  # the (U2) neighbours whose shares authenticated
        t3 = time.perf_counter()
        s.senders = tuple(sorted(senders))
        s.complaints = tuple(sorted(complaints))
        s.stage = ph
        reply = MaskedInput(
            session_id=s.session_id, complaints=s.complaints, ring_bits=self.schema.ring_bits, vector=y
        )
        self.step_seconds.update(decrypt=t1 - t0, message=time.perf_counter() - t3)
        return reply

    def _masked_vector(self, masked_with: list[int], ph: str, self_mask: bool) -> np.ndarray:
        """This client's input, encoded and masked in place: self mask (unless an optimistic use has none),
        pairwise masks with ``masked_with`` (recorded as ``state.masked_with``) and, with a designated
        recipient, its pad."""
        s = self.state
        if self._contribution is None:  # pragma: no cover - guarded by the stage machine
            raise self._fail(StageOrderError, "input already sent", ph)
        t1 = time.perf_counter()
        expander = expander_for(self.layout.length, self.schema.ring_bits, algorithm=self.config.prg)
        y = recycled(self.layout.length, expander.dtype)  # the message's vector, encoded in place
        try:
            clips = self.schema.encode_into(
                self._contribution, y[: self.layout.offset], rounding_source(self._encode_rng)
            )
        except EncodingError as exc:
            raise EncodingError(str(exc), party=self.party_id, phase=ph) from None
        self._contribution = None
        y[self.layout.offset :] = self.layout.encode(clips)
        t2 = time.perf_counter()
        pairs = [s.mask_keys[v] for v in masked_with if v > self.party_id]
        minus = [s.mask_keys[v] for v in masked_with if v < self.party_id]
        plus = ([s.self_mask_key] if self_mask else []) + pairs
        if self.recipient is not None:
            assert s.channel_sk is not None
            cpk = s.keys[self.recipient][0]
            try:
                shared = s.channel_sk.exchange(X25519PublicKey.from_public_bytes(cpk))
            except ValueError:
                raise self._fail(InconsistentViewError, "the recipient's key is degenerate", ph) from None
            plus.append(pad_key(shared, s.session_id, s.round_index, self.party_id, self.recipient))
        pre = None
        if self.precomputed is not None and self.recipient is None:
            pre = self.precomputed.take(self.party_id, s.session_id, pairs, minus)
        if pre is not None:
            # the pairwise masks, expanded ahead for exactly these keys (._secaggplus_precompute)
            np.add(y, pre, out=y)
            pre.fill(0)
            expander.combine(y, plus[: len(plus) - len(pairs)], (), workers=self.workers)  # the self mask
        else:
            expander.combine(y, plus, minus, workers=self.workers)
        expander.reduce(y)
        s.masked_with = tuple(masked_with)
        self.step_seconds.update(encode=t2 - t1, mask=time.perf_counter() - t2)
        self.step_seconds["expansions"] = float(len(plus) + len(minus))
        return y

    def _consistency_check(self, req: ConsistencyRequest) -> ConsistencySignature:
        """Sign the survivor set once, after checking it (see :mod:`~securefgl.protocols._consistency`)."""
        ph = Stage.CONSISTENCY_CHECK.value
        s = self.state
        assert s.params is not None and s.request is not None and self._identity is not None
        if req.session_id != s.session_id:
            raise self._fail(InconsistentViewError, "consistency request for another session", ph)
        survivors = list(req.survivors)
        if survivors != sorted(set(survivors)) or not set(survivors) <= set(s.keys):
            raise self._fail(
                RequestRefusedError, "survivor set is not sorted and unique among the advertised clients", ph
            )
        if self.party_id not in survivors:
            raise self._fail(
                RequestRefusedError, "this client sent its input but is not in the survivor set", ph
            )
        t = s.params.threshold
        if len(survivors) < t:
            raise self._fail(
                ThresholdError, f"survivor set of {len(survivors)} clients is below the threshold {t}", ph
            )
        s.survivors = tuple(survivors)
        s.stage = ph
        stmt = survivors_statement(s.session_id, s.round_index, s.survivors)
        return ConsistencySignature(session_id=s.session_id, signature=self._identity.sign(stmt))

    def _check_certificate(self, req: CertifiedUnmaskRequest | ResumedUnmaskRequest, phase: str) -> None:
        """The unmask request must carry the set this client signed, a quorum of signatures on it, and
        this client's masking peers split by it."""
        s = self.state
        assert s.params is not None and s.request is not None and self.directory is not None
        if req.survivors != s.survivors:
            raise self._fail(
                RequestRefusedError, "the survivor set differs from the one this client signed", phase
            )
        q = quorum(len(s.keys), s.params.threshold, self.config.corrupt_rate)
        signers = certified_signers(
            self.directory, s.session_id, s.round_index, s.survivors, req.signatures, enough=q
        )
        if len(signers) < q:
            raise self._fail(
                RequestRefusedError,
                f"{len(signers)} valid signatures on the survivor set, fewer than the quorum {q} "
                f"of {len(s.keys)} advertised clients",
                phase,
            )
        peers = set(s.masked_with) | {self.party_id}
        alive = tuple(sorted(peers & set(s.survivors)))
        dead = tuple(sorted(peers - set(s.survivors)))
        if (req.alive, req.dead) != (alive, dead):
            raise self._fail(
                RequestRefusedError, "the alive/dead lists contradict the signed survivor set", phase
            )

    def _unmasking(self, req: UnmaskRequest | CertifiedUnmaskRequest | ResumedUnmaskRequest) -> Unmask:
        ph = Stage.UNMASKING.value
        s = self.state
        assert s.params is not None
        if req.session_id != s.session_id:
            raise self._fail(InconsistentViewError, "unmask request for another session", ph)
        if isinstance(req, CertifiedUnmaskRequest) or (
            isinstance(req, ResumedUnmaskRequest) and self.config.consistency
        ):
            self._check_certificate(req, ph)
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
        if isinstance(req, ResumedUnmaskRequest):
            self._open_forwarded(req.envelopes, set(alive) - {self.party_id}, ph)
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
        wipe(seed_rows, key_rows)
        s.stage = ph
        # Another use only if this one revealed no mask key around this client: every neighbour alive.
        self._continues = (
            s.use + 1 < self.config.session_uses
            and not dead
            and tuple(alive_sorted) == tuple(sorted(s.neighbours))
        )
        if self.recipient != self.party_id:
            self._finish_use()
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
        refuse_small_sum(
            len(survivors), self.config.min_contributors, self.schema.min_contributors, ph, self.party_id
        )
        if req.ring_bits != self.schema.ring_bits or req.vector.shape != (self.layout.length,):
            raise self._fail(MalformedMessageError, "delivered vector has the wrong ring or length", ph)
        expander = expander_for(self.layout.length, self.schema.ring_bits, algorithm=self.config.prg)
        acc = req.vector.astype(expander.dtype, copy=True)
        r = s.round_index
        pads = []
        for u in survivors:
            try:
                shared = s.channel_sk.exchange(X25519PublicKey.from_public_bytes(s.keys[u][0]))
            except ValueError:
                raise self._fail(InconsistentViewError, f"survivor {u} has a degenerate key", ph) from None
            pads.append(pad_key(shared, s.session_id, r, u, self.party_id))
        expander.combine(acc, subtract=pads, workers=self.workers)
        expander.reduce(acc)
        self.result = release_ring(
            self.schema, self.layout, acc, len(survivors), ph, self.config.min_contributors
        )
        self._finish_use()
        return None
