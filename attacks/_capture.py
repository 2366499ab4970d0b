"""Run a federated job through the engine and keep every aggregation's record (the auditor's side).

The engine's :func:`~securefgl.engine.runner.run_seed` keeps no transcripts or broadcasts. The audit needs
both (views are built from transcripts; the server knows every broadcast it sent), so this module drives the
same loop with the engine's own round function (:func:`securefgl.engine.runner._round`) and a protocol
wrapper that records each aggregation. Client objects, contributions and the partition stay on the auditor's
side (ground truth for scoring); adversaries only ever get views built from the records.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

from securefgl.attacks.views import AggregationRecord
from securefgl.errors import ProtocolError
from securefgl.protocols.base import DropoutPlan, Protocol, Sums, Transcript
from securefgl.protocols.encoding import SumSchema

__all__ = ["CapturedRun", "RecordingProtocol", "capture_run"]


class RecordingProtocol(Protocol):
    """Wraps a protocol; after every aggregation appends an :class:`AggregationRecord` to ``sink``.

    The round context (phase, key, broadcast) is set by the driver with :meth:`set_round` before the round.
    """

    name = "recording"

    def __init__(self, inner: Protocol, sink: list[AggregationRecord]) -> None:
        self.inner = inner
        self.sink = sink
        self._phase = ""
        self._broadcast: Mapping[str, torch.Tensor] = {}
        self._keys: list[str] = []

    @property
    def reveals_individual_inputs(self) -> bool:  # type: ignore[override]
        return bool(getattr(self.inner, "reveals_individual_inputs", False))

    def set_round(self, phase: str, broadcast: Mapping[str, torch.Tensor], keys: list[str]) -> None:
        self._phase = phase
        self._broadcast = {k: v.detach().cpu().clone() for k, v in broadcast.items()}
        self._keys = list(keys)

    def aggregate(
        self,
        schema: SumSchema,
        contributions: Mapping[int, Any],
        *,
        dropouts: DropoutPlan | None = None,
        round_index: int = 0,
        recipient: int | None = None,
        context: bytes | Mapping[int, bytes] = b"",
    ) -> tuple[Sums, Transcript]:
        key = self._keys.pop(0) if self._keys else "main"
        truth = {
            int(c): {k: torch.as_tensor(v).detach().cpu().clone() for k, v in x.items()}
            for c, x in contributions.items()
        }
        try:
            sums, transcript = self.inner.aggregate(
                schema,
                contributions,
                dropouts=dropouts,
                round_index=round_index,
                recipient=recipient,
                context=context,
            )
        except ProtocolError as exc:
            tr = getattr(exc, "transcript", None)
            if isinstance(tr, Transcript):
                self.sink.append(
                    AggregationRecord(
                        key,
                        self._phase,
                        round_index,
                        schema,
                        self._broadcast,
                        tr,
                        None,
                        recipient,
                        truth,
                        f"{type(exc).__name__}: {exc}",
                    )
                )
            raise
        self.sink.append(
            AggregationRecord(
                key, self._phase, round_index, schema, self._broadcast, transcript, sums, recipient, truth
            )
        )
        return sums, transcript


@dataclass
class CapturedRun:
    """A run with its records.

    Args:
        config: The run configuration.
        fg: The federated graph (ground truth).
        seed: The training seed.
        records: Every aggregation, in order.
        final_broadcast: The last broadcast (the released model).
        setting: The public :class:`~securefgl.algorithms.base.Setting`.
        metrics: Final evaluation (overall metrics) of the released model.
        seconds: Wall time.
    """

    config: Any
    fg: Any
    seed: int
    records: list[AggregationRecord]
    final_broadcast: dict[str, torch.Tensor]
    setting: Any
    metrics: dict[str, float] = field(default_factory=dict)
    seconds: float = 0.0
    algorithm: Any = None


def capture_run(
    config: Any,
    fg: Any,
    seed: int = 0,
    device: torch.device | str = "cpu",
    *,
    max_rounds: int | None = None,
    on_round: Callable[[int, int], None] | None = None,
) -> CapturedRun:
    """Run ``config``'s algorithm on ``fg`` like :func:`~securefgl.engine.runner.run_seed`, keeping records.

    Same seeding, client setup, phases and rounds as the engine; evaluation runs once, on the final
    broadcast. ``max_rounds`` caps the rounds of each ``rounds`` phase (audits of long runs).
    """
    from securefgl.algorithms.base import RoundState
    from securefgl.algorithms.registry import create_algorithm
    from securefgl.engine.runner import (
        EvalRecord,
        RoundRecord,
        SeedResult,
        _build_protocol,
        _evaluate,
        _round,
        make_setting,
        start_seed,
    )

    t0 = time.perf_counter()
    dev = torch.device(device)
    train = config.train
    k_all = fg.num_clients
    per_round = train.clients_in_round(k_all)
    setting = make_setting(config, fg, dev)
    algorithm = create_algorithm(config.algorithm.name, setting, config.algorithm.options)
    phases = list(algorithm.phases(train))
    records: list[AggregationRecord] = []
    protocol: RecordingProtocol | None = None
    if algorithm.uses_protocol:
        protocol = RecordingProtocol(_build_protocol(config, per_round, k_all), records)

    clients, server, broadcast, sampling_rng = start_seed(algorithm, fg, seed, dev)
    total = sum(
        (p.rounds if p.rounds is not None else train.rounds) if p.kind == "rounds" else 1 for p in phases
    )
    if max_rounds is not None:
        total = sum(
            min(max_rounds, p.rounds if p.rounds is not None else train.rounds) if p.kind == "rounds" else 1
            for p in phases
        )
    done = 0
    global_round = 0
    last_rs = None
    for phase in phases:
        if phase.kind == "local":
            algorithm.personalize_clients(clients, broadcast, phase)
            done += 1
            if on_round:
                on_round(done, total)
            continue
        num_rounds = phase.rounds if phase.rounds is not None else train.rounds
        if max_rounds is not None:
            num_rounds = min(num_rounds, max_rounds)
        for r in range(num_rounds):
            if phase.sample and per_round < k_all:
                invited = sorted(int(i) for i in sampling_rng.choice(k_all, size=per_round, replace=False))
            else:
                invited = list(range(k_all))
            rs = RoundState(phase.name, r, global_round, tuple(invited), broadcast, num_rounds)
            if protocol is not None:
                protocol.set_round(phase.name, broadcast, [q.key for q in algorithm.requests(rs)])
            rec = _round(
                algorithm,
                protocol,
                server,
                [clients[i] for i in invited],
                clients,
                rs,
                config,
                sampling_rng,
                seed,
            )
            broadcast = rec.pop("broadcast")
            last_rs = rs
            global_round += 1
            done += 1
            if on_round:
                on_round(done, total)
    metrics: dict[str, float] = {}
    rs = last_rs or RoundState("final", 0, global_round, tuple(range(k_all)), broadcast, 1)
    rs = RoundState(rs.phase, rs.round, rs.global_round, tuple(range(k_all)), broadcast, rs.num_rounds)
    record = RoundRecord("final", 0, global_round, list(range(k_all)), float("nan"), {}, {}, 0.0, 0.0, 0.0)
    ev: EvalRecord = _evaluate(algorithm, clients, broadcast, rs, record, fg.num_classes, SeedResult(seed))
    metrics = dict(ev.overall)
    return CapturedRun(
        config=config,
        fg=fg,
        seed=seed,
        records=records,
        final_broadcast={k: v.detach().cpu().clone() for k, v in broadcast.items()},
        setting=setting,
        metrics=metrics,
        seconds=time.perf_counter() - t0,
        algorithm=algorithm,
    )
