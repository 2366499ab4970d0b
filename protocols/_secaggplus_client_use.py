"""The SecAgg/SecAgg+ client's state, and what opens and closes one use of a session (hazmat).

Split from :mod:`securefgl.protocols._secaggplus_client` (which re-exports the state): the per-use state,
the parameter check every opening request passes, the ``resume`` stage of a resumed use and the end of a
use, which keeps the session for the next use or wipes it (construction and argument in
:mod:`securefgl.protocols._secaggplus_resume`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey

from securefgl.errors import InconsistentViewError, InvalidMessage, ProtocolError, RequestRefusedError
from securefgl.protocols import _shamir
from securefgl.protocols._channel import PeerChannel
from securefgl.protocols._harary import GraphParameters
from securefgl.protocols._prg import KEY_BYTES, RandomSource
from securefgl.protocols._secaggplus_params import SecAggPlusConfig, Stage
from securefgl.protocols._secaggplus_resume import ClientSession, OptimisticInput, ResumedInput, use_id_for
from securefgl.protocols._secaggplus_session import (
    SHARE_PLAINTEXT,
    ClipLayout,
    commitment,
    pair_keys,
    self_key,
    wipe,
)
from securefgl.protocols.encoding import SumSchema
from securefgl.protocols.messages import AdvertiseRequest, ResumeRequest

__all__ = ["SecAggPlusClientState", "UseLifecycle"]


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
    survivors: tuple[int, ...] = ()
    round_index: int = 0
    use: int = 0
    mask_prk: dict[int, bytes] = field(default_factory=dict)


class UseLifecycle:
    """Mixin of :class:`~securefgl.protocols._secaggplus_client.SecAggPlusClient`: opening a use (the
    parameter check, the ``resume`` stage) and ending it (keep the session or wipe)."""

    party_id: int
    schema: SumSchema
    config: SecAggPlusConfig
    protocol_name: str
    round_index: int
    recipient: int | None
    context: bytes
    state: SecAggPlusClientState
    session: ClientSession | None
    _resumed: ClientSession | None
    _continues: bool
    _random: RandomSource
    _contribution: object | None
    layout: ClipLayout
    #: The subclass's share opener: ``(sender, ciphertext) -> share rows`` (raises InvalidMessage).
    _open_share: Callable[[int, bytes], np.ndarray]
    #: The subclass's encoder and masker: ``(masked_with, phase, self_mask) -> masked vector``.
    _masked_vector: Callable[[list[int], str, bool], np.ndarray]

    def _fail(self, cls: type[ProtocolError], message: str, phase: str) -> ProtocolError:
        return cls(message, party=self.party_id, phase=phase)

    def _mismatches(self, req: AdvertiseRequest | ResumeRequest) -> list[str]:
        """How a request's public parameters differ from this client's own (empty: they agree)."""
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
        return mism

    def _resume(self, req: ResumeRequest) -> ResumedInput | OptimisticInput:
        """Open the next use of the session: check the use counter and the parameters, derive this use's
        keys from the kept secrets, share a fresh self-mask seed and send the input masked with every
        neighbour; in an optimistic use, send the input masked with every neighbour and nothing else (see
        :mod:`._secaggplus_resume`)."""
        ph = Stage.RESUME.value
        kept = self._resumed
        assert kept is not None
        if req.session_id != kept.session_id:
            raise self._fail(InconsistentViewError, "resume request for another session", ph)
        if not kept.use < req.use < self.config.session_uses:
            raise self._fail(
                RequestRefusedError,
                f"use {req.use} is not above the last use {kept.use} and below session_uses="
                f"{self.config.session_uses} (a replayed or repeated use would reuse masks)",
                ph,
            )
        kept.use = req.use  # committed before anything is derived: this use is never answered twice
        mism = self._mismatches(req)
        if mism:
            raise self._fail(
                InconsistentViewError, "use parameters differ from this client's: " + "; ".join(mism), ph
            )
        s = self.state
        uid = use_id_for(req, self.context)
        s.request, s.params, s.round_index, s.use = kept.request, kept.params, req.round_index, req.use
        s.session_id, s.keys, s.neighbours, s.channel_sk = uid, kept.keys, kept.neighbours, kept.channel_sk
        s.channels, s.mask_prk = dict(kept.channels), dict(kept.mask_prk)
        s.key_shares = {v: a.copy() for v, a in kept.key_shares.items()}
        r = s.round_index
        s.mask_keys = pair_keys(s.mask_prk, uid, r, self.party_id)
        neighbours = [v for v in s.neighbours if v != self.party_id]
        if self.config.optimistic_uses:
            y = self._masked_vector(neighbours, ph, False)
            s.stage = ph
            self._continues = s.use + 1 < self.config.session_uses  # nothing of this use is ever revealed
            if self.recipient != self.party_id:
                self._finish_use()
            return OptimisticInput(session_id=uid, ring_bits=self.schema.ring_bits, vector=y)
        s.seed = bytearray(self._random(KEY_BYTES))
        s.self_mask_key = self_key(s.seed, uid, r, self.party_id)
        position = {c: i + 1 for i, c in enumerate(kept.request.invited)}
        shares = _shamir.split(
            [bytes(s.seed)], [position[v] for v in s.neighbours], s.params.threshold, self._random
        )
        assert kept.own_key_share is not None
        envelopes = []
        for i, v in enumerate(s.neighbours):
            if v == self.party_id:
                s.own_shares = np.stack([shares[i][0], kept.own_key_share])
                continue
            plain = SHARE_PLAINTEXT.pack(self.party_id, v) + shares[i].astype("<u4").tobytes()
            envelopes.append((v, s.channels[v].seal(plain, bind=uid)))
        wipe(shares)
        y = self._masked_vector(neighbours, ph, True)
        s.stage = ph
        return ResumedInput(
            session_id=uid,
            seed_commitment=commitment(uid, self.party_id, s.seed),
            envelopes=tuple(envelopes),
            ring_bits=self.schema.ring_bits,
            vector=y,
        )

    def _open_forwarded(self, envelopes: tuple[tuple[int, bytes], ...], alive: set[int], ph: str) -> None:
        """A resumed use's seed shares, forwarded with the unmask request: exactly one per alive neighbour, each
        authenticated (any failure: this client answers nothing, the seed keeps its other holders)."""
        senders = [v for v, _ in envelopes]
        if len(set(senders)) != len(senders) or set(senders) != alive:
            raise self._fail(
                RequestRefusedError,
                "the forwarded seed shares are not exactly those of the alive neighbours",
                ph,
            )
        for v, blob in envelopes:
            try:
                self.state.seed_shares[v] = self._open_share(v, blob)[0]
            except InvalidMessage:
                raise self._fail(
                    InconsistentViewError, f"the seed share of neighbour {v} failed authentication", ph
                ) from None

    def _finish_use(self) -> None:
        """Keep what the next use of the session needs (if it may have one), wipe the rest."""
        s = self.state
        if self._continues:
            previous = self._resumed
            # an optimistic use shares no seed, so it has no own shares: its own key share is the kept one
            kept_share = previous.own_key_share if previous is not None else None
            own = s.own_shares[1] if s.own_shares is not None else kept_share
            assert s.request is not None and s.params is not None and own is not None
            self.session = ClientSession(
                party_id=self.party_id,
                session_id=previous.session_id if previous is not None else s.session_id,
                use=s.use,
                request=s.request,
                params=s.params,
                keys=s.keys,
                neighbours=s.neighbours,
                channel_sk=s.channel_sk,
                channels=dict(s.channels),
                mask_prk=dict(s.mask_prk),
                key_shares={v: a.copy() for v, a in s.key_shares.items()},
                own_key_share=own.copy(),
            )
        self._wipe()
        s.stage = "done"

    def _wipe(self) -> None:
        """Best-effort erasure of secrets (Python cannot erase immutable copies or key objects' memory)."""
        s = self.state
        wipe(s.seed, s.mask_sk_raw, s.own_shares, *s.seed_shares.values(), *s.key_shares.values())
        s.seed_shares.clear()
        s.key_shares.clear()
        s.mask_keys.clear()
        s.self_mask_key = b""
        s.channels.clear()
        s.mask_prk.clear()
        s.mask_sk = None
        s.channel_sk = None
        s.own_shares = None
        self._contribution = None
        if self._resumed is not None:  # the kept session: ended, or carried on in self.session's copies
            self._resumed.wipe()
