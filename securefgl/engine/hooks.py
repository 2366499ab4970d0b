"""Observers of a run: progress displays, the privacy audit and reproduction scripts attach here.

The engine calls each hook at a fixed point of the loop and never changes what it does because of one: a hook
observes, it does not steer (a hook that raises ends the run with that error). Events carry what the
*experimenter* of a simulation can see, which is more than any party sees (an audit needs the contributions
as ground truth); the server step itself still receives :class:`~securefgl.protocols.base.Sums` only.

=================  ====================================================================================
hook               called
=================  ====================================================================================
``on_start``       once, after the algorithm is built (:class:`StartEvent`)
``on_round_start`` before every round and every local phase (:class:`RoundStartEvent`): long setup
                   rounds (condensation, multi-hop products) can be named while they run
``on_aggregate``   after every sum the protocol computed or aborted, training and evaluation alike
                   (:class:`AggregateEvent`)
``on_evaluate``    after every evaluation (:class:`EvaluateEvent`)
``on_round``       after every round and every local phase, with its record and the new broadcast
                   (:class:`RoundEvent`)
=================  ====================================================================================
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from securefgl.algorithms.base import Algorithm, Phase, RoundState, Setting
    from securefgl.engine.metrics import ClientMetrics
    from securefgl.engine.records import RoundRecord
    from securefgl.protocols.base import Sums, Transcript
    from securefgl.protocols.encoding import SumSchema

__all__ = ["AggregateEvent", "EvaluateEvent", "RoundEvent", "RoundStartEvent", "RunHooks", "StartEvent"]


@dataclass(frozen=True, eq=False)
class StartEvent:
    """The run is about to start.

    Args:
        algorithm: The (sealed) algorithm object.
        phases: Its phases, in order.
        setting: The public facts of the run.
        seed: The training seed.
    """

    algorithm: Algorithm
    phases: Sequence[Phase]
    setting: Setting
    seed: int


@dataclass(frozen=True, eq=False)
class RoundStartEvent:
    """A round (or a local phase) is about to run.

    Args:
        phase: The phase's name (e.g. ``"setup"``, ``"upload"``, ``"train"``).
        round: Round index within the phase.
        num_rounds: Rounds of the phase (1 for a local phase).
        done: Rounds and local phases finished so far in this seed.
        total: Rounds and local phases this seed will run at most.
    """

    phase: str
    round: int
    num_rounds: int
    done: int
    total: int


@dataclass(frozen=True, eq=False)
class AggregateEvent:
    """One sum, as the experimenter saw it.

    Args:
        rs: The round's public state (its ``broadcast`` is what the round started from).
        key: The request key (``"eval"`` for evaluation sums).
        schema: The public schema.
        recipient: Designated recipient, or ``None`` for a server-bound sum.
        contributions: Every participant's upload as handed to the protocol (ground truth; never a
            party's view).
        sums: The released sums, or ``None`` when the protocol aborted.
        transcript: The protocol's transcript (also on an abort, when the protocol attached one).
        error: The protocol error of an abort, else ``None``.
        carried: An evaluation sum carried in the round's training sum (:mod:`securefgl.engine.eval_rider`):
            one protocol run served both, so its ``transcript`` is the training sum's (count it once). Each of
            the two is reported with its own schema, uploads and sums, as if it had run alone; the transcript's
            vectors hold the training blocks first, then the evaluation's limbs.
    """

    rs: RoundState
    key: str
    schema: SumSchema
    recipient: int | None
    contributions: Mapping[int, Mapping[str, Any]]
    sums: Sums | None
    transcript: Transcript | None
    error: BaseException | None = None
    carried: bool = False

    @property
    def is_evaluation(self) -> bool:
        """Whether this is an evaluation sum (engine-made) rather than one of the algorithm's sums."""
        from securefgl.engine.evaluation import EVAL_KEY

        return self.key == EVAL_KEY


@dataclass(frozen=True, eq=False)
class EvaluateEvent:
    """One evaluation.

    Args:
        rs: The round's public state.
        overall: The metrics the server computed from the evaluation sum.
        per_client: Each client's own metrics, computed on the client side (a deployment shows each
            organisation its own row only).
        improved: Whether the server's selection rule took this round as the new best.
    """

    rs: RoundState
    overall: Mapping[str, float]
    per_client: Sequence[ClientMetrics]
    improved: bool


@dataclass(frozen=True, eq=False)
class RoundEvent:
    """A round (or a local phase) has ended.

    Args:
        record: Its record (losses, bytes, times, metrics).
        broadcast: What the server broadcasts next (after this round's server step).
        done: Rounds and local phases finished so far in this seed.
        total: Rounds and local phases this seed will run at most (early stopping may end it sooner).
    """

    record: RoundRecord
    broadcast: Mapping[str, torch.Tensor]
    done: int
    total: int


@dataclass
class RunHooks:
    """The observers of one run; each hook is optional.

    Args:
        on_start: ``(StartEvent) -> None``.
        on_round_start: ``(RoundStartEvent) -> None``.
        on_aggregate: ``(AggregateEvent) -> None``.
        on_evaluate: ``(EvaluateEvent) -> None``.
        on_round: ``(RoundEvent) -> None``.
    """

    on_start: Callable[[StartEvent], None] | None = None
    on_round_start: Callable[[RoundStartEvent], None] | None = None
    on_aggregate: Callable[[AggregateEvent], None] | None = None
    on_evaluate: Callable[[EvaluateEvent], None] | None = None
    on_round: Callable[[RoundEvent], None] | None = None
    extra: list[RunHooks] = field(default_factory=list)

    def combine(self, other: RunHooks | None) -> RunHooks:
        """These hooks and ``other``'s, each called in turn (self first)."""
        if other is None:
            return self
        return RunHooks(extra=[self, other])

    def _all(self) -> list[RunHooks]:
        out = [self]
        for h in self.extra:
            out += h._all()
        return out

    def start(self, event: StartEvent) -> None:
        for h in self._all():
            if h.on_start:
                h.on_start(event)

    def round_start(self, event: RoundStartEvent) -> None:
        for h in self._all():
            if h.on_round_start:
                h.on_round_start(event)

    def aggregate(self, event: AggregateEvent) -> None:
        for h in self._all():
            if h.on_aggregate:
                h.on_aggregate(event)

    def evaluate(self, event: EvaluateEvent) -> None:
        for h in self._all():
            if h.on_evaluate:
                h.on_evaluate(event)

    def round(self, event: RoundEvent) -> None:
        for h in self._all():
            if h.on_round:
                h.on_round(event)
