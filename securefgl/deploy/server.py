"""The server's half of a deployed run: the run loop and the protocol's server party, over a transport.

:class:`DeployedRun` is :class:`securefgl.engine.runner._Run` with every client step made remote: it sends each
client its requests (:mod:`securefgl.deploy.wire`) through a :class:`Transport` (Flower messages in the ServerApp,
:class:`LoopbackTransport` in one process) and drives :class:`~securefgl.engine.server.FederationServer` (the
algorithm's server step, evaluation from sums, best round, early stopping) with the sums the protocol's server
party releases. It holds no dataset: the public facts of the federation come from the clients' hello replies,
which must all agree.

Every exchange is one ``step`` request per client (:meth:`DeployedRun._step`): the first of a round carries the
evaluation of the last broadcast (when it is due and no early stopping can cut the phase), the training and the
first stage of every sum of the round; each further one carries the next stage of every sum still in flight. A
``secagg+`` round is four Flower messages per client, a ``plaintext`` round one.

A client that does not answer a request within the transport's timeout (its SuperNode was killed, say), or that
answers with an error, is a dropout from that point of the round: the protocol recovers above its threshold; below
it the round is aborted (:class:`~securefgl.errors.ThresholdError` recorded on the round, nothing released, the
broadcast unchanged) and the run goes on to the next round.
"""

from __future__ import annotations

import secrets
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
import torch

from securefgl.algorithms.base import Algorithm, Phase, RoundState
from securefgl.algorithms.registry import create_algorithm
from securefgl.config import RunConfig, to_dict
from securefgl.deploy.client import make_setting_from_facts
from securefgl.deploy.export import Federation
from securefgl.deploy.parties import ServerParty, deployed_protocol, inner_protocol, server_party
from securefgl.deploy.wire import Reply, Request
from securefgl.engine.broadcast import broadcast_nbytes
from securefgl.engine.evaluation import EVAL_KEY, evaluation_schema
from securefgl.engine.hooks import EvaluateEvent, RoundEvent, RunHooks, StartEvent
from securefgl.engine.records import EvalRecord, RoundRecord, SeedResult
from securefgl.engine.runner import phase_rounds
from securefgl.engine.seeding import sampling_rng, server_generator
from securefgl.engine.server import FederationServer
from securefgl.errors import (
    ConfigError,
    MalformedMessageError,
    ProtocolError,
    ThresholdError,
    TrainingError,
    UnsupportedCombinationError,
)
from securefgl.protocols.base import Sums
from securefgl.protocols.dp import DistributedDP
from securefgl.protocols.encoding import SumSchema
from securefgl.protocols.router import Outgoing
from securefgl.protocols.secaggplus import ServerSession

__all__ = ["DeployedRun", "LoopbackTransport", "Transport"]


class Transport(Protocol):
    """Carries request frames to clients and brings their replies back."""

    def clients(self) -> list[int]:
        """The client ids reachable now."""
        ...

    def exchange(self, requests: Mapping[int, bytes], timeout: float | None = None) -> dict[int, bytes]:
        """Send ``{client: frame}``; return the replies that arrived in time (a missing client: no reply).

        ``timeout`` overrides the transport's own wait for this exchange.
        """
        ...


class LoopbackTransport:
    """Client halves in this process, called in turn: the same frames, without a network (tests, debugging).

    Args:
        halves: ``{client id: ClientHalf}``.
        down: Clients that no longer answer (tests' stand-in for a crashed process is a real SIGKILL; this set
            is for unit tests of the loop only).
    """

    def __init__(self, halves: Mapping[int, Any]) -> None:
        self.halves = dict(halves)
        self.down: set[int] = set()
        self.sent: list[tuple[int, bytes]] = []
        self.received: list[tuple[int, bytes]] = []

    def clients(self) -> list[int]:
        return sorted(c for c in self.halves if c not in self.down)

    def exchange(self, requests: Mapping[int, bytes], timeout: float | None = None) -> dict[int, bytes]:
        out = {}
        for c, blob in requests.items():
            if c in self.down or c not in self.halves:
                continue
            self.sent.append((c, blob))
            out[c] = self.halves[c].handle(blob)
            self.received.append((c, out[c]))
        return out


def _progress(message: str) -> None:
    print(f"[securefgl deploy] {message}", file=sys.stderr, flush=True)


class DeployedRun:
    """One seed of a deployed run, server side.

    Args:
        config: The validated run config (the same as ``securefgl run``'s).
        seed: The training seed.
        transport: How requests reach the clients.
        hooks: Progress observers (``on_start``, ``on_round``, ``on_evaluate``).
        log: Where progress lines go. (default: stderr)
    """

    def __init__(
        self,
        config: RunConfig,
        seed: int,
        transport: Transport,
        hooks: RunHooks | None = None,
        log: Callable[[str], None] | None = None,
    ) -> None:
        self.config, self.seed, self.transport = config, seed, transport
        self.log = log or _progress
        self.hooks = hooks or RunHooks()
        #: Seconds to wait for a returning client's hello and setup (``None``: the transport's own wait).
        self.rejoin_timeout: float | None = None
        self.run_id = secrets.token_hex(16)
        self.seq = 0
        self.result = SeedResult(seed=seed)
        self.wire_up: dict[int, int] = {}
        self.wire_down: dict[int, int] = {}
        #: (sum key, clients, recipient) -> the SecAgg/SecAgg+ session its next sum resumes (``session_uses``).
        self.sessions: dict[tuple[str, tuple[int, ...], int | None], ServerSession] = {}

    # ------------------------------------------------------------------ messaging ------------------------

    def _send(
        self, kind: str, bodies: Mapping[int, dict[str, Any]], timeout: float | None = None
    ) -> dict[int, dict[str, Any]]:
        """One request per client; the valid replies by client (errors and silence: no entry).

        A client that does not answer at all has left the run (its process died or its link is down): it is
        invited to nothing until it answers a hello again (:meth:`_rejoin`).
        """
        self.seq += 1
        frames = {c: Request(self.run_id, self.seq, kind, b).to_bytes() for c, b in bodies.items()}
        for c, f in frames.items():
            self.wire_down[c] = self.wire_down.get(c, 0) + len(f)
        replies = self.transport.exchange(frames, timeout)
        for c in set(frames) - set(replies):
            self.refused.setdefault(c, f"no reply to {kind}")
            if c in self.live:
                self.live.discard(c)
                self.log(f"client {c} did not answer {kind}: a dropout until it rejoins")
        out = {}
        for c, blob in replies.items():
            self.wire_up[c] = self.wire_up.get(c, 0) + len(blob)
            try:
                rep = Reply.from_bytes(blob)
                rep.check(self.run_id, self.seq, c)
            except MalformedMessageError as exc:
                self.refused.setdefault(c, str(exc))
                continue
            if rep.error is not None:
                self.refused.setdefault(c, rep.error)
                continue
            out[c] = rep.body
        return out

    # ------------------------------------------------------------------ start ----------------------------

    def _hello(self) -> Federation:
        self.refused: dict[int, str] = {}
        self.live: set[int] = set()
        ids = self.transport.clients()
        replies = self._send("hello", dict.fromkeys(ids, {}))
        facts = {c: Federation.from_json(r["federation"]) for c, r in replies.items()}
        digests = {f.digest for f in facts.values()}
        if len(digests) != 1:
            raise ConfigError(
                f"the clients hold different federations (digests {sorted(digests)}); one partition only"
            )
        fed = next(iter(facts.values()))
        missing = sorted(set(range(fed.num_clients)) - set(replies))
        if missing:
            raise ConfigError(
                f"clients {missing} of the {fed.num_clients} did not answer the hello: cannot start"
            )
        return fed

    def _setup(self, fed: Federation, ids: Sequence[int], timeout: float | None = None) -> list[int]:
        """Set the run up on ``ids``; the clients that accepted (they join ``live``)."""
        body = {"config": to_dict(self.config), "seed": self.seed, "federation": fed.digest}
        ok = sorted(self._send("setup", dict.fromkeys(ids, body), timeout))
        self.live.update(ok)
        return ok

    def _rejoin(self) -> None:
        """At a round's start: clients that left and answer again are set up afresh and invited again."""
        missing = sorted(set(range(self.k_all)) - self.live)
        if not missing:
            return
        reachable = [c for c in self.transport.clients() if c in missing]
        if not reachable:
            return
        hello = self._send("hello", dict.fromkeys(reachable, {}), self.rejoin_timeout)
        same = [
            c for c, r in hello.items() if Federation.from_json(r["federation"]).digest == self.fed.digest
        ]
        back = self._setup(self.fed, sorted(same), self.rejoin_timeout)
        if back:
            self.log(f"clients {back} rejoined at global round {self.global_round}")

    def execute(self) -> SeedResult:
        """Run every phase; return the seed's result (the same records as ``run_seed``)."""
        t0 = time.perf_counter()
        cfg = self.config
        self.fed = fed = self._hello()
        self.k_all = fed.num_clients
        self.per_round = cfg.train.clients_in_round(self.k_all)
        self.setting = make_setting_from_facts(cfg, fed, torch.device("cpu"))
        self.algorithm: Algorithm = create_algorithm(cfg.algorithm.name, self.setting, cfg.algorithm.options)
        self.protocol = deployed_protocol(cfg, fed.num_clients)
        state = self.algorithm.init_server(server_generator(self.seed))
        self.sampling = sampling_rng(self.seed)
        self.eval_schema = evaluation_schema(
            self.setting.count_bound, self.k_all, num_classes=self.setting.num_classes
        )
        self.server = FederationServer(
            self.algorithm,
            state,
            self.algorithm.initial_broadcast(state),
            self.eval_schema,
            cfg.train.patience,
        )
        self.live = set()
        bad = sorted(set(range(self.k_all)) - set(self._setup(fed, list(range(self.k_all)))))
        if bad:
            raise ConfigError(f"clients {bad} refused the run's setup: {[self.refused.get(c) for c in bad]}")
        phases = list(self.algorithm.phases(cfg.train))
        self.total = sum(phase_rounds(p, cfg.train) for p in phases)
        self.done, self.global_round = 0, 0
        self.hooks.start(StartEvent(self.algorithm, tuple(phases), self.setting, self.seed))
        for phase in phases:
            self.server.start_phase(phase)
            if phase.kind == "local":
                self._local_phase(phase)
            else:
                self._rounds_phase(phase)
        self._send("finish", dict.fromkeys(sorted(self.live), {}))
        self.result.report = self.server.report()
        self.result.seconds = time.perf_counter() - t0
        return self.result

    # ------------------------------------------------------------------ phases ---------------------------

    def _rs_body(self, rs: RoundState) -> dict[str, Any]:
        return {
            "phase": rs.phase,
            "round": rs.round,
            "global_round": rs.global_round,
            "clients": list(rs.clients),
            "broadcast": dict(rs.broadcast),
            "num_rounds": rs.num_rounds,
        }

    def _local_phase(self, phase: Phase) -> None:
        self._rejoin()
        broadcast = self.server.broadcast
        ids = sorted(self.live)
        self.refused = {}
        down = dict.fromkeys(ids, broadcast_nbytes(broadcast))
        rec = RoundRecord(phase.name, 0, self.global_round, ids, float("nan"), {}, down, 0.0, 0.0, 0.0)
        parts = {
            c: [{"kind": "local", "body": {"phase": phase.name, "broadcast": dict(broadcast)}}] for c in ids
        }
        rs = RoundState(phase.name, 0, self.global_round, tuple(ids), broadcast, 1)
        due = _EvalDue(rs, broadcast, rec, select=False, clients=ids) if phase.evaluate else None
        runs = [self._open_evaluation(due, parts, first=False)] if due is not None else []
        first, first_s, total_s = self._step(parts, runs, rec)
        rec.train_seconds = first_s if due is None else total_s
        losses = [first[c]["local"]["losses"][-1] for c in ids if c in first and first[c]["local"]["losses"]]
        rec.loss = float(np.mean(losses)) if losses else float("nan")
        if due is not None:
            ev, _ = self._evaluated(due, runs[0], first, 0.0)
            if ev is not None:
                self.hooks.evaluate(EvaluateEvent(rs, ev.overall, ev.per_client, True))
                self.result.final = ev
        self._finish(rec, broadcast)

    def _rounds_phase(self, phase: Phase) -> None:
        """The phase's rounds. Without early stopping (``train.patience`` unset; ``train.eval_in_next_sum``)
        the evaluation of a round's broadcast rides in the next round's first step (the clients evaluate, then
        train: the order of the simulation), so a round costs the protocol's stages and nothing more; the last
        one is evaluated alone. (Its sum is still a protocol run of its own, inside those steps.)"""
        train = self.config.train
        num_rounds = phase_rounds(phase, train)
        fuse = train.patience is None and train.eval_in_next_sum
        best: EvalRecord | None = None
        due: _EvalDue | None = None
        for r in range(num_rounds):
            if due is not None:
                due.clients = sorted(self.live)  # who was live after the evaluated round: they evaluate it
            self._rejoin()
            if phase.sample and self.per_round < self.k_all:
                chosen = self.sampling.choice(self.k_all, size=self.per_round, replace=False)
                invited = sorted(int(i) for i in chosen)
            else:
                invited = list(range(self.k_all))
            invited = [c for c in invited if c in self.live]
            rs = RoundState(
                phase.name, r, self.global_round, tuple(invited), self.server.broadcast, num_rounds
            )
            record, broadcast, outcome = self._round(rs, due)
            if due is not None:
                best = self._settle(due, outcome, best)
                due = None
            self.global_round += 1
            if phase.evaluate and ((r + 1) % train.eval_every == 0 or r == num_rounds - 1):
                due = _EvalDue(rs, broadcast, record, select=True, clients=sorted(self.live))
                if not fuse or r == num_rounds - 1:
                    best = self._settle(due, self._evaluate(due), best)
                    due = None
                    if self.server.should_stop:
                        self.result.stopped_early[phase.name] = r
                        break
            else:
                self._finish(record, broadcast)
        if phase.evaluate and self.result.evals:
            self.result.final = best if (train.select_best and best is not None) else self.result.evals[-1]

    def _settle(
        self, due: _EvalDue, outcome: tuple[EvalRecord | None, bool], best: EvalRecord | None
    ) -> EvalRecord | None:
        """Report an evaluated round (its evaluation, then the round itself); the phase's best so far."""
        ev, improved = outcome
        if ev is not None:
            best = ev if improved else best
            self.hooks.evaluate(EvaluateEvent(due.rs, ev.overall, ev.per_client, improved))
        self._finish(due.record, due.broadcast)
        return best

    def _finish(self, record: RoundRecord, broadcast: Mapping[str, torch.Tensor]) -> None:
        self.result.rounds.append(record)
        self.done += 1
        self.hooks.round(RoundEvent(record, broadcast, self.done, self.total))

    # ------------------------------------------------------------------ steps and sums -------------------

    def _step(
        self, parts: Mapping[int, list[dict[str, Any]]], runs: Sequence[_SumRun], record: RoundRecord
    ) -> tuple[dict[int, dict[str, Any]], float, float]:
        """Send each client its ``parts`` with the first stage of every sum in ``runs``, then drive the sums in
        lockstep (one request per client per stage, carrying that client's messages of every sum) to the end.

        Returns the replies to the parts by client, the seconds of the first step and of all steps.
        """
        t0 = time.perf_counter()
        first: dict[int, dict[str, Any]] | None = None
        first_s = 0.0
        while True:
            bodies: dict[int, dict[str, Any]] = {}
            if first is None:
                for c, ps in parts.items():
                    bodies[c] = {"parts": ps, "stages": []}
            live_runs = [run for run in runs if run.outgoing is not None]
            for run in live_runs:
                assert run.outgoing is not None
                for c, p in run.outgoing.messages.items():
                    stage = {"key": run.key, "stage": run.outgoing.stage, "payload": p, "first": run.first}
                    bodies.setdefault(c, {"parts": [], "stages": []})["stages"].append(stage)
                    run.down[c] = run.down.get(c, 0) + len(p)
            if not bodies:
                break
            replies = self._send("step", bodies)
            if first is None:
                first, first_s = replies, time.perf_counter() - t0
                kinds = {c: "+".join(str(p["kind"]) for p in ps) for c, ps in parts.items()}
                for c in set(parts) - set(replies):
                    record.dropped.setdefault(c, f"{kinds[c]}: " + self.refused.get(c, "no reply"))
            for run in live_runs:
                assert run.outgoing is not None and run.party is not None
                stage_name = run.outgoing.stage
                ordered = []
                for c in run.outgoing.messages:
                    if c not in replies:
                        record.dropped.setdefault(c, f"{stage_name}: " + self.refused.get(c, "no reply"))
                        continue
                    payload = replies[c].get("payloads", {}).get(run.key)
                    if payload is not None:
                        run.up[c] = run.up.get(c, 0) + len(payload)
                        ordered.append((c, bytes(payload)))
                run.first = False
                try:
                    run.outgoing = run.party.handle(stage_name, ordered)
                except ProtocolError as exc:
                    run.error, run.outgoing = exc, None
            if all(run.outgoing is None for run in runs):
                break
        return first or {}, first_s, time.perf_counter() - t0

    def _open(
        self,
        key: str,
        schema: SumSchema,
        participants: list[int],
        recipient: int | None,
        round_index: int,
        up: dict[int, int],
        down: dict[int, int],
    ) -> _SumRun:
        """Start the protocol's server party of one sum; a sum that cannot start carries its error."""
        run = _SumRun(key, schema, participants, up, down)
        # +dp: the wrapper's checks and accounting around the masking sum (the evaluation counts carry no noise).
        dp = self.protocol if isinstance(self.protocol, DistributedDP) and key != EVAL_KEY else None
        if dp is not None and recipient is not None:
            raise UnsupportedCombinationError(
                f"sum {key!r} goes to client {recipient} (a designated-recipient sum); a deployment does not "
                "carry those under +dp yet"
            )
        try:
            if not participants:
                raise ThresholdError(f"no client of the round is left to sum {key!r}")
            summed = schema
            if dp is not None:
                dp.before_sum(schema, len(participants), round_index)
                summed = dp.inner_schema(schema)
            run.dp, run.round_index = dp, round_index
            run.session_key = (key, tuple(sorted(participants)), recipient)
            run.party = server_party(
                inner_protocol(self.protocol),
                summed,
                participants,
                round_index,
                recipient,
                self.sessions.pop(run.session_key, None),
            )
            run.outgoing = run.party.start()
        except ProtocolError as exc:
            run.error = exc
        return run

    def _close(self, run: _SumRun, record: RoundRecord) -> Sums | None:
        """The sum a finished run released (``None``: it went to a client); its error, if it aborted."""
        if run.party is not None:
            for c, why in run.party.excluded.items():
                record.excluded.setdefault(c, why)
            following = getattr(run.party.party, "next_session", None)
            session = following() if following is not None and run.error is None else None
            if session is not None:  # every client completed the sum: its next sum resumes the session
                self.sessions[run.session_key] = session
        if run.error is not None:
            raise run.error
        assert run.party is not None
        result = run.party.result()
        if run.dp is not None and result is not None:
            result, report = run.dp.after_sum(
                run.schema, result, run.party.survivors(), len(run.participants), run.round_index
            )
            record.privacy = report.to_dict()
        return result

    # ------------------------------------------------------------------ one round ------------------------

    def _round(
        self, rs: RoundState, due: _EvalDue | None
    ) -> tuple[RoundRecord, Mapping[str, torch.Tensor], tuple[EvalRecord | None, bool]]:
        """One round's steps: (the evaluation ``due``,) training and the round's sums; then the server step."""
        requests = list(self.algorithm.requests(rs))
        for req in requests:
            if req.relay:
                raise UnsupportedCombinationError(
                    f"sum {req.key!r} relays the recipient's sum to every contributor (O-pFGL's A.5 option); a "
                    "deployment does not carry relayed sums yet: use the option's default"
                )
        ids = list(rs.clients)
        size = broadcast_nbytes(rs.broadcast) if requests else 0
        self.refused = {}
        record = RoundRecord(
            rs.phase,
            rs.round,
            rs.global_round,
            ids,
            float("nan"),
            dict.fromkeys(ids, 0),
            dict.fromkeys(ids, size),
            0.0,
            0.0,
            0.0,
        )
        runs = [
            self._open(
                req.key,
                req.schema,
                [c for c in (req.participants or ids) if c in ids],
                req.recipient,
                rs.global_round,
                record.bytes_up,
                record.bytes_down,
            )
            for req in requests
        ]
        parts: dict[int, list[dict[str, Any]]] = {
            c: [{"kind": "train", "body": self._rs_body(rs)}] for c in ids
        }
        eval_run = self._open_evaluation(due, parts) if due is not None else None
        first, first_s, total_s = self._step(parts, runs + ([eval_run] if eval_run else []), record)
        record.train_seconds, record.crypto_seconds = first_s, total_s - first_s
        losses = [
            first[c]["train"]["losses"][-1]
            for c in ids
            if c in first and first[c].get("train", {}).get("losses")
        ]
        record.loss = float(np.mean(losses)) if losses else float("nan")
        outcome: tuple[EvalRecord | None, bool] = (None, False)
        if due is not None and eval_run is not None:  # before the server step, as in the simulation
            outcome = self._evaluated(due, eval_run, first, 0.0)
        server_sums: dict[str, Sums] = {}
        for req, run in zip(requests, runs, strict=True):
            try:
                sums = self._close(run, record)
            except ProtocolError as exc:
                # Too few survivors (ThresholdError) or contributors (ReleaseRefusedError): the protocol released
                # nothing; the round ends here with the broadcast unchanged and the run goes on.
                record.excluded[-1] = f"sum {req.key!r} aborted: {type(exc).__name__}: {exc}"
                self.log(
                    f"round {rs.global_round}: sum {req.key!r} aborted cleanly ({type(exc).__name__}); nothing released"
                )
                return record, rs.broadcast, outcome
            if req.recipient is None and sums is not None:
                server_sums[req.key] = sums
        if server_sums:
            t2 = time.perf_counter()
            self.server.step(server_sums, requests, rs)
            record.server_seconds = time.perf_counter() - t2
        return record, self.server.broadcast, outcome

    # ------------------------------------------------------------------ evaluation -----------------------

    def _open_evaluation(
        self, due: _EvalDue, parts: dict[int, list[dict[str, Any]]], *, first: bool = True
    ) -> _SumRun:
        """Add the evaluation of ``due`` to each of its clients' parts (``first``: before the others, as the
        last round's evaluation precedes this round's training; else after, as a local phase's follows it)."""
        body = {**self._rs_body(due.rs), "eval_broadcast": dict(due.broadcast)}
        for c in due.clients:
            own = parts.setdefault(c, [])
            own.insert(0 if first else len(own), {"kind": "eval", "body": body})
        return self._open(
            EVAL_KEY,
            self.eval_schema,
            list(due.clients),
            None,
            due.rs.global_round,
            due.record.eval_bytes_up,
            due.record.eval_bytes_down,
        )

    def _evaluate(self, due: _EvalDue) -> tuple[EvalRecord | None, bool]:
        """Evaluate ``due`` in steps of its own (the last round of a phase, or every round under early stopping)."""
        self.refused = {}
        parts: dict[int, list[dict[str, Any]]] = {}
        run = self._open_evaluation(due, parts)
        first, _, total_s = self._step(parts, [run], due.record)
        return self._evaluated(due, run, first, total_s)

    def _evaluated(
        self, due: _EvalDue, run: _SumRun, first: Mapping[int, Any], seconds: float
    ) -> tuple[EvalRecord | None, bool]:
        t0 = time.perf_counter()
        try:
            sums = self._close(run, due.record)
        except ProtocolError as exc:
            self.log(f"round {due.rs.global_round}: evaluation sum aborted cleanly ({type(exc).__name__})")
            return None, False
        if sums is None:
            raise TrainingError("the evaluation sum was not released to the server")
        answered = tuple(c for c in due.clients if c in first)
        rs = due.rs
        eval_rs = RoundState(rs.phase, rs.round, rs.global_round, answered, due.broadcast, rs.num_rounds)
        overall, improved = self.server.evaluated(sums, eval_rs, select=due.select)
        ev = EvalRecord(rs.phase, rs.round, overall, [])
        due.record.metrics = overall
        due.record.eval_seconds = seconds + time.perf_counter() - t0
        self.result.evals.append(ev)
        return ev, improved


@dataclass
class _EvalDue:
    """A round whose broadcast awaits evaluation: its state, broadcast and record, and who evaluates it."""

    rs: RoundState
    broadcast: Mapping[str, torch.Tensor]
    record: RoundRecord
    select: bool
    clients: list[int] = field(default_factory=list)


@dataclass
class _SumRun:
    """One sum in flight on the server: its party, the stage it waits on, where its bytes are counted."""

    key: str
    schema: SumSchema
    participants: list[int]
    up: dict[int, int]
    down: dict[int, int]
    party: ServerParty | None = None
    dp: DistributedDP | None = None
    round_index: int = 0
    outgoing: Outgoing | None = None
    first: bool = True
    error: ProtocolError | None = None
    session_key: tuple[str, tuple[int, ...], int | None] = ("", (), None)
