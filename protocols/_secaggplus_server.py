"""The SecAgg/SecAgg+ server party: relays keys and shares, sums masked inputs, unmasks, releases.

Re-exported by :mod:`securefgl.protocols.secaggplus` (see its docstring for the stages and the
checks). The server sees bytes only and never imports the client half.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from securefgl.errors import (
    ConfigError,
    InconsistentViewError,
    MalformedMessageError,
    StageOrderError,
    ThresholdError,
)
from securefgl.protocols import _shamir
from securefgl.protocols._consistency import (
    CertifiedUnmaskRequest,
    ConsistencyRequest,
    ConsistencySignature,
    SignedAdvertiseKeys,
    SignedShareKeysRequest,
    certified_signers,
    quorum,
)
from securefgl.protocols._identity import IdentityDirectory, advertise_statement
from securefgl.protocols._prg import expander_for
from securefgl.protocols._release import refuse_small_sum
from securefgl.protocols._secaggplus_params import SecAggPlusConfig, Stage, resolve_graph
from securefgl.protocols._secaggplus_resume import ResumedInput, ServerSession
from securefgl.protocols._secaggplus_server_use import ResumedUses
from securefgl.protocols._secaggplus_session import (
    ClipLayout,
    key_is_usable,
    session_graph,
    wipe,
)
from securefgl.protocols._secaggplus_unmask import (
    MAX_HOLDER_SUBSETS,
    RunningSum,
    SecAggPlusServerState,
)
from securefgl.protocols.base import SERVER
from securefgl.protocols.encoding import SumSchema
from securefgl.protocols.messages import (
    Abort,
    AdvertiseKeys,
    AdvertiseRequest,
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
from securefgl.protocols.router import Outgoing

__all__ = ["MAX_HOLDER_SUBSETS", "SecAggPlusServer", "SecAggPlusServerState"]


class SecAggPlusServer(ResumedUses):
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
        directory: the clients' identity public keys (from configuration): with it the server expects
            signed key advertisements, and the consistency round (``config.consistency``) needs it.
        session: the previous use of a session over the same clients (its :meth:`next_session`): this
            server then resumes it instead of running a key agreement. (default: ``None``)

    Raises:
        ConfigError: a session over other clients, or one this configuration does not allow.
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
        directory: IdentityDirectory | None = None,
        session: ServerSession | None = None,
    ) -> None:
        self.directory = directory
        self.schema = schema
        self.layout = ClipLayout(schema)
        self.invited = tuple(sorted(int(c) for c in invited))
        self.config = config
        self.params = resolve_graph(config, len(self.invited))
        self.recipient = recipient
        self.round_index = int(round_index)
        self.workers = max(1, int(workers))
        #: Whether this sum is an optimistic resumed use (one round trip, all members or nothing).
        self.optimistic = session is not None and config.optimistic_uses
        self.stages = Stage.ordered(
            recipient=recipient is not None,
            consistency=config.consistency,
            resumed=session is not None,
            optimistic=self.optimistic,
        )
        self.session = session
        if session is not None and (
            session.members != self.invited or not session.use + 1 < config.session_uses
        ):
            raise ConfigError(
                f"cannot resume use {session.use + 1} of a session over {len(session.members)} clients for "
                f"{len(self.invited)} invited clients with session_uses={config.session_uses}"
            )
        self.resume_request = (
            None
            if session is None
            else ResumeRequest(
                session_id=session.session_id,
                use=session.use + 1,
                protocol=protocol_name,
                round_index=self.round_index,
                ring_bits=schema.ring_bits,
                length=self.layout.length,
                prg=config.prg,
                recipient=recipient,
                schema_fingerprint=schema.fingerprint(),
            )
        )
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
        #: the split of each set of peers (and owner) masked with, once U3 and the dead are final (:meth:`_split`)
        self._splits: dict[frozenset[int], tuple[tuple[int, ...], tuple[int, ...]]] = {}

    # -- helpers -------------------------------------------------------------------------------------

    def _collect(
        self,
        stage: str,
        replies: Sequence[tuple[int, bytes]],
        expected: type[Message],
        allowed: set[int],
        running: RunningSum | None = None,
    ) -> dict[int, Any]:
        """Decode one stage's replies: one valid message per allowed client; exclude the rest.

        With ``running``, the masked vectors of the decoded messages are range-checked and summed into it in
        one batch split over the protocol's worker threads (:meth:`RunningSum.add_all`); a message with an
        element out of the ring is excluded as malformed, as :func:`decode` would have."""
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
                msg = decode(payload, (expected, Abort), ring_check=running is None)
            except MalformedMessageError as exc:
                self._exclude(c, MalformedMessageError(str(exc), party=c, phase=stage))
                continue
            if isinstance(msg, Abort):
                self._exclude(c, f"{msg.reason} (client abort): {msg.detail}")
                continue
            out[c] = msg
        if running is not None:
            for c in running.add_all(out, self.workers):
                del out[c]
                self._exclude(
                    c,
                    MalformedMessageError(
                        f"field 'vector' has elements >= 2^{running.ring_bits}", party=c, phase=stage
                    ),
                )
        return out

    # -- endpoint ------------------------------------------------------------------------------------

    def start(self) -> Outgoing:
        """The ``advertise_keys`` requests. A server object runs one session: a second start raises."""
        if self._awaiting is not None:
            raise StageOrderError("this server already started its session; build a new one", party=SERVER)
        if self.resume_request is not None:
            self._awaiting = Stage.RESUME.value
            return Outgoing(Stage.RESUME.value, dict.fromkeys(self.invited, self.resume_request.to_bytes()))
        self._awaiting = Stage.ADVERTISE_KEYS.value
        payload = self.request.to_bytes()
        return Outgoing(Stage.ADVERTISE_KEYS.value, dict.fromkeys(self.invited, payload))

    def handle(self, stage: str, replies: Sequence[tuple[int, bytes]]) -> Outgoing | None:
        """Consume the replies of ``stage`` (the stage whose requests were sent last) and move on."""
        handler = {
            Stage.ADVERTISE_KEYS.value: self._after_advertise,
            Stage.SHARE_KEYS.value: self._after_share_keys,
            Stage.RESUME.value: self._after_resume,
            Stage.MASKED_INPUT.value: self._after_masked_input,
            Stage.CONSISTENCY_CHECK.value: self._after_consistency_check,
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
        expected: type[Message] = AdvertiseKeys if self.directory is None else SignedAdvertiseKeys
        got = self._collect(ph, replies, expected, set(self.invited))
        if self.directory is not None:
            request = self.request.to_bytes()
            for c in sorted(got):
                m = got[c]
                stmt = advertise_statement(request, c, m.channel_pk, m.mask_pk)
                if self.directory.verify(c, stmt, m.signature):
                    self.state.key_signatures[c] = m.signature
                else:
                    self._exclude(c, "InvalidMessage: advertised keys without a valid identity signature")
                    del got[c]
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
            elif not (key_is_usable(msg.channel_pk) and key_is_usable(msg.mask_pk)):
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
        if self.directory is None:
            payload = ShareKeysRequest(keys=table).to_bytes()
        else:
            sigs = tuple((c, self.state.key_signatures[c]) for c in self.state.u1)
            payload = SignedShareKeysRequest(keys=table, signatures=sigs).to_bytes()
        return Outgoing(Stage.SHARE_KEYS.value, dict.fromkeys(self.state.u1, payload))

    def _consistent(self, client: int, msg: ShareKeys) -> bool:
        """Whether ``client`` computed the session id of the session (an honest server's check; the
        clients' own defence does not depend on it: shares bound to another session fail to open)."""
        return msg.session_id == self.state.session_id

    def _vote(self, got: Mapping[int, ShareKeys], ph: str) -> bytes:
        """The session (or use) id most clients computed (ties: the group with the smallest client id); the
        others were shown different parameters or contexts."""
        votes: dict[bytes, list[int]] = {}
        for c, msg in got.items():
            votes.setdefault(msg.session_id, []).append(c)
        if not votes:
            self._need(False, f"no client completed {ph}", ph)
        return min(votes, key=lambda sid: (-len(votes[sid]), min(votes[sid])))

    def _after_share_keys(self, replies: Sequence[tuple[int, bytes]]) -> Outgoing:
        ph = Stage.SHARE_KEYS.value
        got = self._collect(ph, replies, ShareKeys, set(self.state.u1))
        self.state.session_id = self._vote(got, ph)
        self.state.graph = session_graph(self.state.session_id, self.state.u1, self.params.degree)
        return self._accept_shares(got, ph)

    def _accept_shares(self, got: Mapping[int, ShareKeys], ph: str) -> Outgoing:
        """Check each client's share ciphertexts go to exactly its neighbours; relay them (stage 3)."""
        assert self.state.graph is not None
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
        running = RunningSum(self.layout.length, self.schema.ring_bits)
        got = self._collect(ph, replies, MaskedInput, set(self.state.u2), running=running)
        accepted: dict[int, MaskedInput] = {}
        for c in sorted(got):
            msg = got[c]
            if not self._vector_ok(c, msg, ph):
                continue
            complaints = msg.complaints
            if complaints and (
                len(set(complaints)) != len(complaints) or not set(complaints) <= set(self.state.senders[c])
            ):
                self._exclude(
                    c,
                    MalformedMessageError(
                        "complaints about clients whose shares it was not sent", party=c, phase=ph
                    ),
                )
            else:
                accepted[c] = msg
        accused: dict[int, set[int]] = {}
        for c, msg in accepted.items():
            self.state.complaints[c] = msg.complaints
            self.state.masked_with[c] = frozenset(self.state.senders[c]).difference(msg.complaints)
            for v in msg.complaints:
                accused.setdefault(v, set()).add(c)
        removed = self._judge_complaints(accused, set(accepted))
        self.state.u3 = tuple(c for c in sorted(accepted) if c not in removed)
        survivors = set(self.state.u3)
        self.state.dead = tuple(c for c in self.state.u2 if c not in survivors)
        return self._after_inputs(running, ph)

    def _vector_ok(self, c: int, msg: MaskedInput | ResumedInput, ph: str) -> bool:
        """Whether ``c``'s masked input is for this session and of the sum's ring and length (else excluded)."""
        if msg.session_id != self.state.session_id:
            self._exclude(c, InconsistentViewError("masked input for another session", party=c, phase=ph))
            return False
        if msg.ring_bits != self.schema.ring_bits or msg.vector.shape != (self.layout.length,):
            self._exclude(
                c,
                MalformedMessageError(
                    f"masked input of {msg.vector.shape[0]} elements over {msg.ring_bits} bits, expected "
                    f"{self.layout.length} over {self.schema.ring_bits}",
                    party=c,
                    phase=ph,
                ),
            )
            return False
        return True

    def _after_inputs(self, running: RunningSum, ph: str) -> Outgoing:
        """With U3 and the dropped chosen: check every secret keeps ``t`` holders (else abort before any share
        is asked for), take the survivors' sum, and send the consistency or unmask requests."""
        assert self.state.graph is not None
        u3 = set(self.state.u3)
        t = self.params.threshold
        self._need(
            len(self.state.u3) >= t,
            f"{len(self.state.u3)} masked inputs survive, fewer than the threshold {t}",
            ph,
        )
        if self.recipient is not None:
            self._need(self.recipient in u3, f"the designated recipient {self.recipient} dropped", ph)
        refuse_small_sum(
            len(self.state.u3), self.config.min_contributors, self.schema.min_contributors, ph, SERVER
        )
        for u in self.state.u3 if self.state.dead else ():  # none dropped: share_keys checked U2 already
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
        self.state.total = running.total_of(self.state.u3)
        if self.config.consistency:
            req = ConsistencyRequest(session_id=self.state.session_id, survivors=self.state.u3).to_bytes()
            return Outgoing(Stage.CONSISTENCY_CHECK.value, dict.fromkeys(self.state.u3, req))
        return self._unmask_requests(self.state.u3)

    def _split(
        self, u: int, u3: frozenset[int], dead: frozenset[int]
    ) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """The peers ``u`` masked with (and itself), split into survivors ``u3`` and dropped ``dead`` (U3 and
        the dead are final once chosen: remembered as what ``u``'s unmask request names)."""
        got = self.state.requested.get(u)
        if got is None:
            masked_with = self.state.masked_with[u] | {u}
            got = self._splits.get(masked_with)  # SecAgg's complete graph: one split for every survivor
            if got is None:
                if dead:
                    got = (tuple(sorted(masked_with & u3)), tuple(sorted(masked_with & dead)))
                else:  # nobody dropped: everyone u masked with (a subset of U2) survived
                    got = (tuple(sorted(masked_with)), ())
                self._splits[masked_with] = got
            self.state.requested[u] = got
        return got

    def _unmask_requests(self, to: Iterable[int]) -> Outgoing:
        out = {}
        u3, gone = frozenset(self.state.u3), frozenset(self.state.dead)
        # Clients with the same split get the same request (SecAgg on the complete graph: all of them when
        # nobody dropped): encode each distinct one once.
        encoded: dict[tuple[tuple[int, ...], tuple[int, ...]], bytes] = {}
        for u in to:
            alive, dead = self._split(u, u3, gone)
            if self.session is not None:
                out[u] = self._resumed_unmask(u, alive, dead, (), ()).to_bytes()
                continue
            request = encoded.get((alive, dead))
            if request is None:
                request = UnmaskRequest(session_id=self.state.session_id, alive=alive, dead=dead).to_bytes()
                encoded[alive, dead] = request
            out[u] = request
        return Outgoing(Stage.UNMASKING.value, out)

    def _after_consistency_check(self, replies: Sequence[tuple[int, bytes]]) -> Outgoing:
        """Collect the survivors' signatures on U3; forward a quorum of them with the unmask requests."""
        ph = Stage.CONSISTENCY_CHECK.value
        assert self.directory is not None
        t0 = time.perf_counter()
        got = self._collect(ph, replies, ConsistencySignature, set(self.state.u3))
        sigs = tuple(
            sorted((c, m.signature) for c, m in got.items() if m.session_id == self.state.session_id)
        )
        signers = certified_signers(
            self.directory, self.state.session_id, self.round_index, self.state.u3, sigs
        )
        for c in sorted(set(got) - signers):
            self._exclude(c, "InvalidMessage: signature on the survivor set does not verify")
        q = quorum(len(self.state.u1), self.params.threshold, self.config.corrupt_rate)
        self._need(
            len(signers) >= q,
            f"{len(signers)} survivors signed the survivor set, fewer than the quorum {q}",
            ph,
        )
        self.state.u4 = tuple(sorted(signers))
        self.state.survivor_signatures = {c: s for c, s in sigs if c in signers}
        # A quorum of signatures is the certificate (more would only cost bandwidth and client checks).
        certificate = tuple(sorted(self.state.survivor_signatures.items()))[:q]
        out = {}
        u3, gone = frozenset(self.state.u3), frozenset(self.state.dead)
        for u in self.state.u4:
            alive, dead = self._split(u, u3, gone)
            if self.session is not None:
                out[u] = self._resumed_unmask(u, alive, dead, self.state.u3, certificate).to_bytes()
                continue
            out[u] = CertifiedUnmaskRequest(
                session_id=self.state.session_id,
                survivors=self.state.u3,
                signatures=certificate,
                alive=alive,
                dead=dead,
            ).to_bytes()
        self.state.consistency_seconds = time.perf_counter() - t0
        return Outgoing(Stage.UNMASKING.value, out)

    def _after_unmasking(self, replies: Sequence[tuple[int, bytes]]) -> Outgoing | None:
        ph = Stage.UNMASKING.value
        assert self.state.graph is not None and self.state.total is not None
        t0 = time.perf_counter()
        c0 = time.process_time()
        u3, dead = set(self.state.u3), set(self.state.dead)
        answering = set(self.state.u4) if self.config.consistency else u3
        counts: dict[int, int] = {}
        for c, _ in replies:
            counts[c] = counts.get(c, 0) + 1
        good: dict[int, Unmask] = {}
        u3f, deadf = frozenset(u3), frozenset(dead)
        for c, payload in replies:
            if c not in answering or c in self.state.unmask_rejected:
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
            alive, asked_dead = self._split(c, u3f, deadf)
            ok = (
                msg.session_id == self.state.session_id
                and msg.alive == alive
                and (
                    not msg.dead or (set(msg.dead) <= set(asked_dead) and len(set(msg.dead)) == len(msg.dead))
                )
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
            wipe(s)
        for k in keys.values():
            wipe(k)
        expander_for(self.layout.length, self.schema.ring_bits, algorithm=self.config.prg).reduce(total)
        self.state.unmask_seconds = {
            "decode": t1 - t0,
            "reconstruct": t2 - t1,
            "remove_masks": t3 - t2,
            "remove_masks_cpu": c3 - c2,
            "total_cpu": c3 - c0,
            "expansions": float(len(self.state.u3) + sum(len(self._masked_with_dead(v)) for v in keys)),
        }
        return self._release(total, ph)

    def _after_deliver(self, replies: Sequence[tuple[int, bytes]]) -> None:
        self.state.delivered = True
        return None
