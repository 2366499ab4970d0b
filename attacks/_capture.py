"""Observe a federated run through the engine's hooks, keeping each aggregation's record (the auditor's side).

The audit needs more than a :class:`~securefgl.engine.records.SeedResult`: views are built from the protocol
transcripts, and the server knows every broadcast it sent. :func:`capture_run` runs the engine's public
:func:`~securefgl.engine.runner.run_seed` with :class:`~securefgl.engine.hooks.RunHooks` attached and turns
each :class:`~securefgl.engine.hooks.AggregateEvent` of the algorithm's sums into an
:class:`~securefgl.attacks.views.AggregationRecord`; it never re-implements the loop, so what is audited is
the run the engine performs. Contributions and the partition stay on the auditor's side (ground truth for
scoring); adversaries only ever get views built from the records.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

from securefgl.attacks.views import AggregationRecord
from securefgl.errors import SecureFGLError

__all__ = ["CapturedRun", "capture_run"]


@dataclass
class CapturedRun:
    """A run with its records.

    Args:
        config: The run configuration.
        fg: The federated graph (ground truth).
        seed: The training seed.
        records: Every aggregation of the algorithm's sums, in order (the engine's evaluation-count sums
            are not among them: they are not algorithm uploads).
        final_broadcast: The last broadcast (the released model).
        setting: The public :class:`~securefgl.algorithms.base.Setting`.
        metrics: The run's final overall metrics, as the engine reports them (``SeedResult.final.overall``):
            the evaluation of the round the server selected (the best round when ``train.select_best``,
            else the last evaluation), computed from the evaluation sums. Empty when the run evaluated
            nothing.
        seconds: Wall time.
        algorithm: The algorithm object of the run.
        result: The engine's :class:`~securefgl.engine.records.SeedResult` of the run.
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
    result: Any = None


def _cpu(tensors: Mapping[str, Any]) -> dict[str, torch.Tensor]:
    return {k: torch.as_tensor(v).detach().cpu().clone() for k, v in tensors.items()}


def capture_run(
    config: Any,
    fg: Any,
    seed: int = 0,
    device: torch.device | str = "cpu",
    *,
    max_rounds: int | None = None,
    on_round: Callable[[int, int], None] | None = None,
    hooks: Any = None,
) -> CapturedRun:
    """Run ``config``'s algorithm on ``fg`` with :func:`~securefgl.engine.runner.run_seed`, keeping records.

    The run is the engine's own (same seeding, clients, phases, rounds, evaluation and selection); the
    capture only observes it through hooks.

    Args:
        config: The validated run config.
        fg: The federated graph.
        seed: Training seed.
        device: Where the run's tensors live (records are copied to the CPU).
        max_rounds: Cap on the rounds of each ``rounds`` phase (audits of long runs); passed to the engine.
        on_round: Progress callback ``(done, total)``, called after every round and local phase.
        hooks: Further :class:`~securefgl.engine.hooks.RunHooks` to attach to the same run.

    Raises:
        SecureFGLError: As :func:`~securefgl.engine.runner.run_seed` (a protocol abort is a
            :class:`~securefgl.errors.ProtocolError`); ``exc.captured`` holds the :class:`CapturedRun` so far,
            whose last record is the aborted aggregation (``released=None``, ``error`` set) when the protocol
            attached a transcript.
    """
    from securefgl.engine.hooks import AggregateEvent, RoundEvent, RunHooks, StartEvent
    from securefgl.engine.runner import run_seed

    records: list[AggregationRecord] = []
    state: dict[str, Any] = {"algorithm": None, "setting": None, "broadcast": None}
    # The broadcast a round started from, copied once per round (every sum of the round shares the copy).
    copied: list[Any] = [None, None]

    def start(ev: StartEvent) -> None:
        state["algorithm"], state["setting"] = ev.algorithm, ev.setting

    def aggregate(ev: AggregateEvent) -> None:
        if ev.is_evaluation or ev.transcript is None:  # engine-made counts; an abort with no transcript
            return
        if copied[0] is not ev.rs.broadcast:
            copied[0], copied[1] = ev.rs.broadcast, _cpu(ev.rs.broadcast)
        records.append(
            AggregationRecord(
                key=ev.key,
                phase=ev.rs.phase,
                round_index=ev.rs.global_round,
                schema=ev.schema,
                broadcast=copied[1],
                transcript=ev.transcript,
                released=ev.sums,
                recipient=ev.recipient,
                contributions={int(c): _cpu(x) for c, x in ev.contributions.items()},
                error=None if ev.error is None else f"{type(ev.error).__name__}: {ev.error}",
            )
        )

    def round_end(ev: RoundEvent) -> None:
        state["broadcast"] = ev.broadcast
        copied[0] = copied[1] = None  # a new round copies its broadcast afresh
        if on_round is not None:
            on_round(ev.done, ev.total)

    def captured(result: Any, seconds: float) -> CapturedRun:
        broadcast = state["broadcast"]
        final = getattr(result, "final", None)
        return CapturedRun(
            config=config,
            fg=fg,
            seed=seed,
            records=records,
            final_broadcast=_cpu(broadcast) if broadcast is not None else {},
            setting=state["setting"],
            metrics=dict(final.overall) if final is not None else {},
            seconds=seconds,
            algorithm=state["algorithm"],
            result=result,
        )

    ours = RunHooks(on_start=start, on_aggregate=aggregate, on_round=round_end)
    t0 = time.perf_counter()
    try:
        result = run_seed(
            config, fg, seed, torch.device(device), hooks=ours.combine(hooks), max_rounds=max_rounds
        )
    except SecureFGLError as exc:
        partial = captured(getattr(exc, "partial", None), time.perf_counter() - t0)
        exc.captured = partial  # type: ignore[attr-defined]
        raise
    return captured(result, time.perf_counter() - t0)
