"""The federated run loop: phases, rounds, client sampling, secure sums, evaluation and early stopping.

:func:`run_seed` runs one algorithm on one :class:`~securefgl.data.FederatedGraph` for one seed. Every
upload goes through ``protocol.aggregate`` (with the round's dropout plan); the algorithm's server step gets
the released :class:`~securefgl.protocols.base.Sums` and nothing else. Per round it records the training
loss, bytes up and down per client (from the protocol transcripts plus the broadcast), the time spent in
client training, in the sums ("crypto": each upload's checks and grid rounding, then the protocol run) and in
the server step, and, every ``eval_every`` rounds, the metrics of :mod:`securefgl.engine.metrics`, read from a
sum of every client's counts (carried in the next round's training sum where it can:
:mod:`securefgl.engine.eval_rider`). A NaN/Inf loss or upload stops the run with
:class:`~securefgl.errors.NonFiniteError` naming the client and the round; the records so far stay
available on the exception (``exc.partial``) so that callers can write them to disk.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch

from securefgl.algorithms.base import Algorithm, Client, Phase, RoundState, SumRequest
from securefgl.algorithms.registry import create_algorithm
from securefgl.config.run import RunConfig
from securefgl.engine.broadcast import broadcast_nbytes, round_context
from securefgl.engine.broadcast_check import BroadcastVerifier
from securefgl.engine.eval_rider import RIDER_BLOCK, EvalRider, PendingEvaluation
from securefgl.engine.evaluation import EVAL_KEY, evaluation_schema
from securefgl.engine.hooks import (
    AggregateEvent,
    EvaluateEvent,
    RoundEvent,
    RoundStartEvent,
    RunHooks,
    StartEvent,
)
from securefgl.engine.metrics import client_metrics
from securefgl.engine.records import EvalRecord, RoundRecord, SeedResult
from securefgl.engine.run_protocol import build_run_protocol, check_round_size, plaintext_protocol
from securefgl.engine.seed_start import federation_edge_index, make_setting, start_seed
from securefgl.engine.seeding import server_generator
from securefgl.engine.server import FederationServer
from securefgl.engine.uploads import evaluation_upload, grid_rng, prepare_upload
from securefgl.errors import (
    ConfigError,
    NonFiniteError,
    ProtocolError,
    ReleaseRefusedError,
    SecureFGLError,
    ThresholdError,
    TrainingError,
)
from securefgl.protocols.base import DropoutPlan, Protocol, Sums, Transcript
from securefgl.protocols.dp import DistributedDP
from securefgl.protocols.encoding import SumSchema

__all__ = [
    "EvalRecord",
    "RoundRecord",
    "SeedResult",
    "broadcast_nbytes",
    "federation_edge_index",
    "grid_rng",
    "make_setting",
    "phase_rounds",
    "round_context",
    "run_seed",
    "start_seed",
]


def _check_finite_losses(clients: Sequence[Client], phase: str, rnd: int) -> list[float]:
    losses = []
    for c in clients:
        for v in c.losses:
            if not math.isfinite(v):
                raise NonFiniteError(
                    f"training loss of client {c.id} became {v} in round {rnd} of phase {phase!r}; "
                    "lower train.lr or check the client's features"
                )
        if c.losses:
            losses.append(c.losses[-1])
    return losses


def run_seed(
    config: RunConfig,
    fg: Any,
    seed: int,
    device: torch.device,
    *,
    hooks: RunHooks | None = None,
    max_rounds: int | None = None,
) -> SeedResult:
    """Run the configured algorithm on ``fg`` for one seed.

    Args:
        config: The validated run config.
        fg: The :class:`~securefgl.data.FederatedGraph`.
        seed: Training seed (models, dropout masks, client sampling, dropout plans).
        device: Where every tensor of the run lives.
        hooks: Observers of the run (:class:`~securefgl.engine.hooks.RunHooks`: progress, audits).
        max_rounds: Cap on the rounds of every ``rounds`` phase (short audits of long runs); ``None``: none.

    Raises:
        NonFiniteError: A NaN/Inf loss or upload; ``exc.partial`` holds the :class:`SeedResult` so far.
        SecureFGLError: Any other failure; ``exc.partial`` likewise.
    """
    if max_rounds is not None and (isinstance(max_rounds, bool) or int(max_rounds) < 1):
        raise ConfigError(f"max_rounds must be an integer >= 1 or None, got {max_rounds!r}")
    result = SeedResult(seed=seed)
    t_start = time.perf_counter()
    try:
        _Run(config, fg, seed, device, result, hooks or RunHooks(), max_rounds).execute()
    except SecureFGLError as exc:
        result.status, result.error = "failed", f"{type(exc).__name__}: {exc}"
        result.seconds = time.perf_counter() - t_start
        exc.partial = result  # type: ignore[attr-defined]
        raise
    result.seconds = time.perf_counter() - t_start
    return result


def phase_rounds(phase: Phase, train: Any, max_rounds: int | None = None) -> int:
    """Rounds a phase runs at most (a ``local`` phase counts as one)."""
    if phase.kind == "local":
        return 1
    n = phase.rounds if phase.rounds is not None else int(train.rounds)
    return min(n, max_rounds) if max_rounds is not None else n


class _Run:
    """One seed's loop: the engine's side of every party (clients' steps, the protocol, the server step)."""

    def __init__(
        self,
        config: RunConfig,
        fg: Any,
        seed: int,
        device: torch.device,
        result: SeedResult,
        hooks: RunHooks,
        max_rounds: int | None,
    ) -> None:
        self.config, self.fg, self.seed, self.result, self.hooks = config, fg, seed, result, hooks
        self.max_rounds = max_rounds
        train = config.train
        self.k_all = fg.num_clients
        self.per_round = train.clients_in_round(self.k_all)
        self.setting = make_setting(config, fg, device)
        self.algorithm: Algorithm = create_algorithm(
            config.algorithm.name, self.setting, config.algorithm.options
        )
        self.phases = list(self.algorithm.phases(train))
        self.protocol: Protocol | None = None
        if self.algorithm.uses_protocol:
            self.protocol = build_run_protocol(config, self.per_round, self.k_all)
            check_round_size(self.protocol, config.protocol.spec, self.per_round)
        self.clients, state, broadcast, self.sampling_rng = start_seed(self.algorithm, fg, seed, device)
        # Evaluation sums: the run's protocol without DP noise (no block of it is noised); an algorithm that
        # never communicates has no server, and its experimenter sums the counts in plaintext.
        inner = self.protocol.base if isinstance(self.protocol, DistributedDP) else self.protocol
        self.eval_protocol: Protocol = inner if inner is not None else plaintext_protocol()
        self.eval_schema = evaluation_schema(
            self.setting.count_bound, self.k_all, num_classes=self.setting.num_classes
        )
        self.server = FederationServer(self.algorithm, state, broadcast, self.eval_schema, train.patience)
        # The clients' replica of the public server step (train.check_broadcast), rebuilt from the seed alone.
        self.verifier: BroadcastVerifier | None = None
        if train.check_broadcast:
            own_state = self.algorithm.init_server(server_generator(seed))
            self.verifier = BroadcastVerifier(self.algorithm, own_state, self.eval_schema, train.patience)
        self.total = sum(phase_rounds(p, train, max_rounds) for p in self.phases)
        self.done = 0
        self.global_round = 0
        self.failed_in_a_row = 0  # consecutive aborted rounds (train.max_failed_rounds ends the run)
        # The broadcast the clients were last charged for (a local phase charges an undelivered one).
        self.delivered: Mapping[str, torch.Tensor] | None = None
        # Training schema -> the rider that carries an evaluation in it (None: it cannot), built once each.
        self._riders: dict[SumSchema, EvalRider | None] = {}

    def execute(self) -> None:
        self.hooks.start(StartEvent(self.algorithm, tuple(self.phases), self.setting, self.seed))
        for phase in self.phases:
            self.server.start_phase(phase)
            if self.verifier is not None:
                self.verifier.start_phase(phase)
            if phase.kind == "local":
                self._local_phase(phase)
            else:
                self._rounds_phase(phase)
        self.result.report = {**self.server.report(), **self.result.report}
        if self.verifier is not None:
            self.result.report["broadcasts_checked"] = self.verifier.checked

    # ------------------------------------------------------------------ phases ---------------------------

    def _local_phase(self, phase: Phase) -> None:
        """Local-only work from the server's latest broadcast, which every client downloads once."""
        clients, broadcast = self.clients, self.server.broadcast
        down: dict[int, int] = {}
        size = broadcast_nbytes(broadcast)
        if broadcast is not self.delivered and size:
            down = dict.fromkeys((c.id for c in clients), size)
            self.delivered = broadcast
        self.hooks.round_start(RoundStartEvent(phase.name, 0, 1, self.done, self.total))
        self._verify(broadcast, f"phase {phase.name!r}")
        t0 = time.perf_counter()
        self.algorithm.personalize_clients(clients, broadcast, phase)
        ids = [c.id for c in clients]
        rec = RoundRecord(
            phase.name, 0, self.global_round, ids, float("nan"), {}, down, time.perf_counter() - t0, 0.0, 0.0
        )
        losses = _check_finite_losses(clients, phase.name, 0)
        rec.loss = float(np.mean(losses)) if losses else float("nan")
        for c in clients:
            c.losses.clear()
        if phase.evaluate:
            rs = RoundState(phase.name, 0, self.global_round, tuple(ids), broadcast, 1)
            ev, _ = self._evaluate(PendingEvaluation(rs, broadcast, rec, select=False))
            self.hooks.evaluate(EvaluateEvent(rs, ev.overall, ev.per_client, True))
            self.result.final = ev
        self._finish(rec, broadcast)

    def _rounds_phase(self, phase: Phase) -> None:
        """The phase's rounds. Where :meth:`_fuses` allows, a round's evaluation is scored at the start of the
        next round and its counts ride in that round's training sum; the round is reported (``on_round``)
        once its evaluation is in. The last round is evaluated on its own."""
        train = self.config.train
        num_rounds = phase_rounds(phase, train, self.max_rounds)
        fuse = self._fuses(phase)
        best: EvalRecord | None = None
        due: PendingEvaluation | None = None
        for r in range(num_rounds):
            if phase.sample and self.per_round < self.k_all:
                invited = self._draw_cohort()
            else:
                invited = list(range(self.k_all))
            rs = RoundState(
                phase.name, r, self.global_round, tuple(invited), self.server.broadcast, num_rounds
            )
            self.hooks.round_start(RoundStartEvent(phase.name, r, num_rounds, self.done, self.total))
            if not invited:  # an empty Poisson cohort: nobody takes part, nothing is released
                if due is not None:
                    best = self._settle(due, best)
                    due = None
                rec = RoundRecord(phase.name, r, self.global_round, [], float("nan"), {}, {}, 0.0, 0.0, 0.0)
                self.result.report.setdefault("empty_rounds", []).append(self.global_round)
                self.global_round += 1
                self._finish(rec, self.server.broadcast)
                continue
            try:
                record, broadcast = self._round_or_skip(rs, [self.clients[i] for i in invited], due)
            except BaseException as exc:
                if due is not None:  # the evaluated round is complete: keep it in the partial records
                    self._keep(due, evaluate=isinstance(exc, SecureFGLError))
                raise
            if due is not None:
                best = self._settle(due, best)
                due = None
            if any(record.bytes_down.values()):
                self.delivered = rs.broadcast
            self.global_round += 1
            if not (phase.evaluate and ((r + 1) % train.eval_every == 0 or r == num_rounds - 1)):
                self._finish(record, broadcast)
                continue
            due = PendingEvaluation(rs, broadcast, record)
            if fuse and r < num_rounds - 1:
                continue
            best = self._settle(due, best)
            due = None
            if self.server.should_stop:
                self.result.stopped_early[phase.name] = r
                break
        if phase.evaluate and self.result.evals:
            self.result.final = best if (train.select_best and best is not None) else self.result.evals[-1]

    def _fuses(self, phase: Phase) -> bool:
        """Whether this phase's evaluations wait for the next round's training sum (``train.eval_in_next_sum``).

        Not with early stopping (the decision to stop would come a round late), dropouts (a dropped client's
        counts would be missing), DP (its noise and minimum contributors are for training), sampled rounds
        (the evaluation counts every client), or an algorithm without a protocol.
        """
        train, protocol = self.config.train, self.protocol
        return (
            train.eval_in_next_sum
            and train.patience is None
            and protocol is not None
            and not isinstance(protocol, DistributedDP)
            and self.config.protocol.dropout == 0
            and not (phase.sample and self.per_round < self.k_all)
        )

    def _keep(self, due: PendingEvaluation, *, evaluate: bool) -> None:
        """After the next round failed: finish the evaluated round, evaluated on its own sum if ``evaluate``
        and that works (an interrupted run keeps it without metrics)."""
        if evaluate and not due.read:
            try:
                self._settle(due, None)
                return
            except SecureFGLError:
                pass
        self._finish(due.record, due.broadcast)

    def _settle(self, due: PendingEvaluation, best: EvalRecord | None) -> EvalRecord | None:
        """Finish an evaluated round (on its own sum if it did not ride): report its evaluation, then the
        round itself. Returns the phase's best evaluation so far."""
        ev, improved = due.outcome if due.outcome is not None else self._evaluate(due)
        self.hooks.evaluate(EvaluateEvent(due.rs, ev.overall, ev.per_client, improved))
        self._finish(due.record, due.broadcast)
        return ev if improved else best

    def _draw_cohort(self) -> list[int]:
        """The clients of a sampled round (``train.client_sampling``).

        ``"fixed"``: the server draws ``per_round`` clients without replacement from its generator.
        ``"poisson"``: each client flips its own coin with probability ``per_round / k_all``; the coins
        come from per-client generators (spawned from the run seed, never the server's generator), the
        stand-in for each client's own randomness in a deployment. Only this sampler matches the
        amplification the DP accountant reports (``dp_sampler="poisson"``).
        """
        if self.config.train.client_sampling != "poisson":
            chosen = self.sampling_rng.choice(self.k_all, size=self.per_round, replace=False)
            return sorted(int(i) for i in chosen)
        if not hasattr(self, "_client_coins"):
            # 0x504F4953 ("POIS") keeps these coins apart from every other stream of the run seed.
            seq = np.random.SeedSequence([int(self.seed), 0x504F4953])
            self._client_coins = [np.random.default_rng(s) for s in seq.spawn(self.k_all)]
        q = self.per_round / self.k_all
        return [c for c in range(self.k_all) if self._client_coins[c].random() < q]

    def _round_or_skip(
        self, rs: RoundState, invited: list[Client], due: PendingEvaluation | None = None
    ) -> tuple[RoundRecord, Mapping[str, torch.Tensor]]:
        """:meth:`_round`, except that a round whose protocol aborts for lack of survivors is skipped.

        As FL servers tolerate failed rounds, a :class:`ThresholdError` or :class:`ReleaseRefusedError` leaves the
        server state and broadcast as they were, is listed in ``report["aborted_rounds"]`` and gives a record
        without loss or bytes; ``train.max_failed_rounds`` consecutive aborted rounds end the run with the last
        abort. Any other protocol error (a misbehaving party) still ends the run at once. An evaluation ``due``
        that rode in an aborted sum is summed on its own when it is settled.
        """
        try:
            record, broadcast = self._round(rs, invited, due)
        except (ThresholdError, ReleaseRefusedError) as exc:
            self.failed_in_a_row += 1
            limit = self.config.train.max_failed_rounds
            if self.failed_in_a_row >= limit:
                raise type(exc)(
                    f"{self.failed_in_a_row} consecutive rounds aborted (train.max_failed_rounds={limit}); "
                    f"last, round {rs.global_round + 1}: {exc}"
                ) from exc
            ids = [c.id for c in invited]
            record = RoundRecord(
                rs.phase, rs.round, rs.global_round, ids, float("nan"), {}, {}, 0.0, 0.0, 0.0
            )
            transcript = exc.__dict__.get("transcript")
            if isinstance(transcript, Transcript):
                record.dropped.update(transcript.dropped)
            self.result.report.setdefault("aborted_rounds", []).append(
                {
                    "phase": rs.phase,
                    "round": rs.round,
                    "global_round": rs.global_round,
                    "error": f"{type(exc).__name__}: {exc}",
                }
            )
            return record, self.server.broadcast
        self.failed_in_a_row = 0
        return record, broadcast

    def _verify(self, broadcast: Mapping[str, Any], where: str) -> None:
        """The clients' check of what they are about to use (``train.check_broadcast``)."""
        if self.verifier is not None:
            self.verifier.verify(broadcast, where)

    def _finish(self, record: RoundRecord, broadcast: Mapping[str, torch.Tensor]) -> None:
        self.result.rounds.append(record)
        self.done += 1
        self.hooks.round(RoundEvent(record, broadcast, self.done, self.total))

    # ------------------------------------------------------------------ one round ------------------------

    def _round(
        self, rs: RoundState, invited: list[Client], due: PendingEvaluation | None = None
    ) -> tuple[RoundRecord, Mapping[str, torch.Tensor]]:
        """(The clients score the evaluation ``due``,) client steps, one protocol run per sum request (the
        evaluation riding in the training sum where it can), the server step; returns the record and broadcast.
        """
        if due is not None:
            self._score(due)
        algorithm = self.algorithm
        requests = list(algorithm.requests(rs))
        ids = [c.id for c in invited]
        bytes_up = dict.fromkeys(ids, 0)
        bytes_down = dict.fromkeys(ids, 0)
        if requests:
            size = broadcast_nbytes(rs.broadcast)
            for cid in ids:
                bytes_down[cid] += size
        for c in invited:
            c.losses.clear()
        self._verify(rs.broadcast, f"phase {rs.phase!r}, round {rs.round + 1}")
        context = round_context(rs.broadcast) if requests else b""  # public: bound into the round's sums
        if requests:
            self._announce(rs, requests, ids, due, context)
        t0 = time.perf_counter()
        outs = algorithm.client_steps(invited, rs)
        train_seconds = time.perf_counter() - t0
        losses = _check_finite_losses(invited, rs.phase, rs.round)
        record = RoundRecord(
            rs.phase,
            rs.round,
            rs.global_round,
            ids,
            float(np.mean(losses)) if losses else float("nan"),
            bytes_up,
            bytes_down,
            train_seconds,
            0.0,
            0.0,
        )
        if not requests:
            if due is not None:
                due.outcome = self._evaluate(due)
            return record, rs.broadcast
        if self.protocol is None:
            raise TrainingError(f"algorithm {algorithm.name!r} declared a sum but uses no protocol")
        ride = self._rider(requests, ids) if due is not None else None
        server_sums = self._sums(
            rs, requests, outs, ids, record, context, due if ride is not None else None, ride
        )
        if due is not None:  # the server reads the evaluation before its step, as when it ran first
            due.outcome = self._evaluate(due)
        if server_sums:
            t2 = time.perf_counter()
            self.server.step(server_sums, requests, rs)
            record.server_seconds = time.perf_counter() - t2
            if self.verifier is not None:
                self.verifier.step(server_sums, requests, rs)
        return record, self.server.broadcast

    def _announce(
        self,
        rs: RoundState,
        requests: list[SumRequest],
        ids: list[int],
        due: PendingEvaluation | None,
        context: bytes,
    ) -> None:
        """Tell the protocol the round's first server-bound sum before the clients train
        (:meth:`Protocol.prepare`: a resumed SecAgg+ use expands its pairwise masks meanwhile). Not with simulated
        dropouts, which end a resumed session."""
        if self.protocol is None or self.config.protocol.dropout > 0:
            return
        ride = self._rider(requests, ids) if due is not None else None
        for req in requests:
            if req.recipient is None:
                schema = ride[1].combined if ride is not None and ride[0] == req.key else req.schema
                participants = list(req.participants) if req.participants is not None else ids
                self.protocol.prepare(schema, participants, round_index=rs.global_round, context=context)
                return

    def _sums(
        self,
        rs: RoundState,
        requests: list[SumRequest],
        outs: Mapping[int, Any],
        ids: list[int],
        record: RoundRecord,
        context: bytes,
        due: PendingEvaluation | None = None,
        ride: tuple[str, EvalRider] | None = None,
    ) -> dict[str, Sums]:
        """Run every sum request of the round; deliver designated sums, return the server-bound ones.

        With ``ride`` (:meth:`_rider`: a request key and its rider), every client's evaluation upload for ``due``
        rides in its contribution to that request, and ``due.sums`` receives the evaluation sums.
        """
        config = self.config
        plan = None
        if config.protocol.dropout > 0:
            plan = DropoutPlan.random(ids, config.protocol.dropout, self.sampling_rng)
        single = len(requests) == 1
        server_sums: dict[str, Sums] = {}
        for req in requests:
            participants = list(req.participants) if req.participants is not None else ids
            t1 = time.perf_counter()  # crypto: from the clients' updates (checked, on the grid) to the sums
            contribs = {}
            for cid in participants:
                contribs[cid] = prepare_upload(
                    outs.get(cid),
                    req.key,
                    req.schema,
                    single=single,
                    cid=cid,
                    seed=self.seed,
                    global_round=rs.global_round,
                    phase=rs.phase,
                    rnd=rs.round,
                    grid=config.protocol.grid_upload,
                    skip_dp=isinstance(self.protocol, DistributedDP),
                )
            sub_plan = None
            if plan is not None:
                sub_plan = DropoutPlan({c: p for c, p in plan.at.items() if c in contribs})
            sums, transcript = self._aggregate(
                self.protocol,
                rs,
                req.key,
                req.schema,
                contribs,
                sub_plan,
                req.recipient,
                context,
                due,
                ride[1] if ride is not None and ride[0] == req.key else None,
            )
            record.crypto_seconds += time.perf_counter() - t1
            for cid in contribs:
                record.bytes_up[cid] = record.bytes_up.get(cid, 0) + transcript.total_bytes_sent(cid)
                record.bytes_down[cid] = record.bytes_down.get(cid, 0) + transcript.total_bytes_received(cid)
            record.dropped.update(transcript.dropped)
            record.excluded.update(transcript.excluded)
            record.privacy = transcript.extra.get("privacy", record.privacy)
            for k, v in transcript.clip_counts.items():
                if k == RIDER_BLOCK:
                    continue
                ck = k if single else f"{req.key}.{k}"
                record.clip_counts[ck] = record.clip_counts.get(ck, 0) + int(v)
            if req.recipient is None:
                server_sums[req.key] = sums
            else:
                for cid in contribs if req.relay else (req.recipient,):
                    self.clients[cid].inbox[req.key] = sums
        return server_sums

    def _aggregate(
        self,
        protocol: Protocol | None,
        rs: RoundState,
        key: str,
        schema: SumSchema,
        contribs: Mapping[int, Mapping[str, Any]],
        plan: DropoutPlan | None,
        recipient: int | None,
        context: bytes,
        due: PendingEvaluation | None = None,
        rider: EvalRider | None = None,
    ) -> tuple[Sums, Transcript]:
        """One protocol run, reported to ``on_aggregate`` whether it released a sum or aborted.

        With a ``rider``, every client's evaluation upload for ``due`` rides in its contribution, ``due.sums``
        receives the evaluation sums, and the two sums are reported as two events (``carried`` on the second).
        """
        if protocol is None:
            raise TrainingError(f"algorithm {self.algorithm.name!r} declared a sum but uses no protocol")
        run_schema, run_contribs = schema, contribs
        if rider is not None and due is not None:
            run_schema = rider.combined
            run_contribs = {cid: rider.attach(c, due.contribs[cid]) for cid, c in contribs.items()}
        try:
            sums, transcript = protocol.aggregate(
                run_schema,
                run_contribs,
                dropouts=plan,
                round_index=rs.global_round,
                recipient=recipient,
                context=context,
            )
        except ProtocolError as exc:
            tr = exc.__dict__.get("transcript")
            self.hooks.aggregate(
                AggregateEvent(
                    rs,
                    key,
                    schema,
                    recipient,
                    contribs,
                    None,
                    tr if isinstance(tr, Transcript) else None,
                    exc,
                )
            )
            raise
        if rider is not None and due is not None:
            sums, due.sums = rider.split(sums)
        self.hooks.aggregate(AggregateEvent(rs, key, schema, recipient, contribs, sums, transcript))
        if due is not None and due.sums is not None and rider is not None:
            self.hooks.aggregate(
                AggregateEvent(
                    due.eval_rs,
                    EVAL_KEY,
                    self.eval_schema,
                    None,
                    due.contribs,
                    due.sums,
                    transcript,
                    carried=True,
                )
            )
        return sums, transcript

    # ------------------------------------------------------------------ evaluation -----------------------

    def _rider(self, requests: list[SumRequest], ids: list[int]) -> tuple[str, EvalRider] | None:
        """The request the pending evaluation rides in and its rider: the round's first server-bound sum of
        every client whose schema leaves room (:meth:`EvalRider.fit`); ``None`` when there is none (a sampled
        round, designated recipients only), and the evaluation then runs on its own."""
        if len(ids) != self.k_all:
            return None
        for req in requests:
            if req.recipient is not None or (
                req.participants is not None and len(set(req.participants)) != self.k_all
            ):
                continue
            if req.schema not in self._riders:
                self._riders[req.schema] = EvalRider.fit(req.schema, self.eval_schema)
            rider = self._riders[req.schema]
            if rider is not None:
                return req.key, rider
        return None

    def _score(self, due: PendingEvaluation) -> None:
        """Client side: every client scores its own nodes under the evaluated broadcast and builds its upload
        (counts and weighted metrics of its own nodes: :func:`evaluation_upload`)."""
        t0 = time.perf_counter()
        algorithm, clients, rs = self.algorithm, self.clients, due.rs
        self._verify(due.broadcast, f"evaluation of phase {rs.phase!r}, round {rs.round + 1}")
        scores = algorithm.evaluate(clients, due.broadcast, rs)
        for c in clients:
            if c.id not in scores:
                raise TrainingError(f"{algorithm.name}: evaluate() returned no scores for client {c.id}")
            logits = scores[c.id]
            if tuple(logits.shape) != (c.num_nodes, self.setting.num_classes):
                raise TrainingError(
                    f"{algorithm.name}: evaluate() returned shape {tuple(logits.shape)} for client {c.id}; "
                    f"expected ({c.num_nodes}, {self.setting.num_classes})"
                )
            metrics = client_metrics(c.id, logits, c.data, self.setting.num_classes)
            due.per_client.append(metrics)
            due.contribs[c.id] = evaluation_upload(
                metrics,
                self.eval_schema,
                grid=self.config.protocol.grid_upload,
                seed=self.seed,
                global_round=rs.global_round,
                cid=c.id,
            )
        due.scored = True
        due.seconds += time.perf_counter() - t0

    def _evaluate(self, due: PendingEvaluation) -> tuple[EvalRecord, bool]:
        """Evaluate ``due``: score it (unless the clients did), sum the counts on their own (unless they rode
        in a training sum), and let the server read the sums and nothing else.

        Returns the evaluation and whether the server took it as the phase's new best round.
        """
        if not due.scored:
            self._score(due)
        t0 = time.perf_counter()
        eval_rs = due.eval_rs
        if due.sums is None:
            due.sums, transcript = self._aggregate(
                self.eval_protocol,
                eval_rs,
                EVAL_KEY,
                self.eval_schema,
                due.contribs,
                None,
                None,
                round_context(due.broadcast),
            )
            for cid in due.contribs:
                due.record.eval_bytes_up[cid] = transcript.total_bytes_sent(cid)
                due.record.eval_bytes_down[cid] = transcript.total_bytes_received(cid)
        due.read = True
        overall, improved = self.server.evaluated(due.sums, eval_rs, select=due.select)  # the sums only
        if self.verifier is not None:
            self.verifier.evaluated(due.sums, eval_rs, select=due.select)
        ev = EvalRecord(due.rs.phase, due.rs.round, overall, due.per_client)
        due.record.metrics = overall
        due.record.eval_seconds = due.seconds + time.perf_counter() - t0
        self.result.evals.append(ev)
        return ev, improved
