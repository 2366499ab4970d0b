"""The SecAgg/SecAgg+ server's steps of a resumed use of a session (hazmat).

Split from :mod:`securefgl.protocols._secaggplus_server`: the ``resume`` stage of a use after the session's key
agreement (dropout-tolerant, or optimistic: one round trip, all members or nothing), the unmask requests that
forward a resumed use's seed shares, and which session, if any, the next sum over the same clients resumes
(construction and argument in :mod:`securefgl.protocols._secaggplus_resume`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from securefgl.errors import MalformedMessageError, ThresholdError
from securefgl.protocols._prg import expander_for
from securefgl.protocols._release import refuse_small_sum
from securefgl.protocols._secaggplus_params import Stage
from securefgl.protocols._secaggplus_resume import (
    OptimisticInput,
    ResumedInput,
    ResumedUnmaskRequest,
    ServerSession,
)
from securefgl.protocols._secaggplus_unmask import Reconstruction, RunningSum
from securefgl.protocols.base import SERVER
from securefgl.protocols.router import Outgoing

__all__ = ["ResumedUses"]


class ResumedUses(Reconstruction):
    """Mixin of :class:`~securefgl.protocols._secaggplus_server.SecAggPlusServer`: the server's side of the uses
    of a session after its key agreement."""

    invited: tuple[int, ...]
    session: ServerSession | None
    optimistic: bool
    _collect: Callable[..., dict[int, Any]]
    _vote: Callable[[Any, str], bytes]
    _vector_ok: Callable[[int, Any, str], bool]
    _after_inputs: Callable[[RunningSum, str], Outgoing]

    def _after_resume(self, replies: Sequence[tuple[int, bytes]]) -> Outgoing | None:
        """A resumed use: the session's keys and graph; this use's id, seed commitments, seed shares (relayed
        with the unmask requests) and masked inputs, each masked with all the client's neighbours, so a member
        that sent nothing is dropped *after* sharing: its neighbours' pairwise masks with it are removed with
        the mask-key shares they hold since use 0."""
        ph = Stage.RESUME.value
        st, session = self.state, self.session
        assert session is not None
        st.keys, st.key_signatures = dict(session.keys), dict(session.key_signatures)
        st.u1, st.graph = session.members, session.graph
        running = RunningSum(self.layout.length, self.schema.ring_bits)
        if self.optimistic:
            return self._after_optimistic_input(replies, running)
        got = self._collect(ph, replies, ResumedInput, set(st.u1), running=running)
        st.session_id = self._vote(got, ph)
        accepted: dict[int, ResumedInput] = {}
        for c in sorted(got):
            msg = got[c]
            if not self._vector_ok(c, msg, ph):
                continue
            want = set(st.graph.neighbours(c)) - {c}
            dsts = [d for d, _ in msg.envelopes]
            if len(dsts) != len(set(dsts)) or set(dsts) != want:
                self._exclude(
                    c,
                    MalformedMessageError(
                        "seed-share ciphertexts are not addressed to exactly its neighbours",
                        party=c,
                        phase=ph,
                    ),
                )
                continue
            accepted[c] = msg
        st.u2 = st.u3 = tuple(sorted(accepted))
        st.dead = tuple(c for c in st.u1 if c not in accepted)
        for c, msg in accepted.items():
            st.commitments[c] = msg.seed_commitment
            st.masked_with[c] = frozenset(st.graph.neighbours(c)) - {c}
            st.senders[c] = tuple(sorted(st.masked_with[c]))
            for d, blob in msg.envelopes:
                if d in accepted:
                    st.envelopes.setdefault(d, {})[c] = blob
        return self._after_inputs(running, ph)

    def _after_optimistic_input(
        self, replies: Sequence[tuple[int, bytes]], running: RunningSum
    ) -> Outgoing | None:
        """An optimistic use: every member's input, masked with all its neighbours and nothing else, so the
        sum of all of them is the sum of the inputs; any member missing (or rejected) aborts the use, as its
        neighbours' masks with it cannot be removed without revealing its keys. Nothing is asked of anyone."""
        ph = Stage.RESUME.value
        st = self.state
        assert st.graph is not None
        got = self._collect(ph, replies, OptimisticInput, set(st.u1), running=running)
        st.session_id = self._vote(got, ph)
        accepted = tuple(c for c in sorted(got) if self._vector_ok(c, got[c], ph))
        st.u2 = st.u3 = accepted
        st.dead = tuple(c for c in st.u1 if c not in got)
        missing = [c for c in st.u1 if c not in accepted]
        if missing:
            raise ThresholdError(
                f"optimistic use: no valid input from client(s) {missing[:10]}; a use without self masks "
                "releases the sum of every member or nothing, so it is aborted and nothing is revealed (the next "
                "sum agrees on fresh keys)",
                party=SERVER,
                phase=ph,
            )
        for c in accepted:
            st.masked_with[c] = frozenset(st.graph.neighbours(c)) - {c}
        refuse_small_sum(
            len(accepted), self.config.min_contributors, self.schema.min_contributors, ph, SERVER
        )
        total = running.total_of(accepted)
        expander_for(self.layout.length, self.schema.ring_bits, algorithm=self.config.prg).reduce(total)
        st.total = total
        return self._release(total, ph)

    def next_session(self) -> ServerSession | None:
        """The session to resume for the next sum over the same clients, or ``None`` when it must end: the
        last use allowed, or anything short of every member completing this use (a dropout, exclusion,
        complaint or rejected reply, after which a mask key may be known or a member may have stopped)."""
        st = self.state
        use = self.session.use + 1 if self.session is not None else 0
        complete = (
            st.result is not None or (self.recipient is not None and st.total is not None)
        ) and st.u3 == st.u1 == self.invited
        if not complete or st.dead or st.excluded or st.unmask_rejected or st.bad_shares:
            return None
        if not use + 1 < self.config.session_uses or st.graph is None:
            return None
        answered = set(st.u4) if self.config.consistency and not self.optimistic else set(st.u3)
        if answered != set(self.invited):
            return None
        return ServerSession(
            session_id=self.session.session_id if self.session is not None else st.session_id,
            use=use,
            members=self.invited,
            keys=dict(st.keys),
            graph=st.graph,
            params=self.params,
            key_signatures=dict(st.key_signatures),
        )

    def _resumed_unmask(
        self,
        u: int,
        alive: tuple[int, ...],
        dead: tuple[int, ...],
        survivors: tuple[int, ...],
        signatures: tuple[tuple[int, bytes], ...],
    ) -> ResumedUnmaskRequest:
        """A resumed use's unmask request: it also forwards the seed shares ``u``'s alive neighbours sent it."""
        sent = self.state.envelopes.get(u, {})
        env = tuple(sorted((v, sent[v]) for v in alive if v != u))
        return ResumedUnmaskRequest(
            session_id=self.state.session_id,
            alive=alive,
            dead=dead,
            envelopes=env,
            survivors=survivors,
            signatures=signatures,
        )
