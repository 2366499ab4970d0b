"""The server's half of a run: its state, its steps and its decisions, fed with sums only.

:class:`FederationServer` is everything the server does in a run: it builds the algorithm's server state from
public facts, turns each round's released :class:`~securefgl.protocols.base.Sums` into the next broadcast,
reads each evaluation sum into overall metrics, picks the best round and stops a phase early. It never
receives a client, a contribution or a per-client metric, so a replay that feeds it the same sums takes the
same decisions (the contract test ``tests/engine/test_server_contract.py`` does exactly that for every
registered algorithm). The simulation (:mod:`securefgl.engine.runner`) and a deployment drive the same object.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from securefgl.algorithms.base import MAIN, Algorithm, Broadcast, Phase, RoundState, SumRequest
from securefgl.engine.evaluation import (
    RoundSelector,
    metrics_from_sums,
    selection_metric,
    selection_tolerance,
)
from securefgl.errors import TrainingError
from securefgl.protocols.base import Sums
from securefgl.protocols.encoding import SumSchema

__all__ = ["FederationServer"]


class FederationServer:
    """The server of one seed's run.

    Args:
        algorithm: The (sealed) algorithm; only its server-side methods are called.
        state: The server state, from ``algorithm.init_server`` (public information only).
        broadcast: What clients receive before the first round (``algorithm.initial_broadcast(state)``).
        eval_schema: The schema of the evaluation sums (:func:`~securefgl.engine.evaluation.evaluation_schema`).
        patience: Evaluations without a better round before a phase stops (``train.patience``).
    """

    def __init__(
        self,
        algorithm: Algorithm,
        state: Any,
        broadcast: Broadcast,
        eval_schema: SumSchema,
        patience: int | None = None,
    ) -> None:
        self.algorithm = algorithm
        self.state = state
        self.eval_schema = eval_schema
        self.patience = patience
        self.broadcast: Broadcast = broadcast
        self.selector = RoundSelector(patience=patience)

    def start_phase(self, phase: Phase) -> Broadcast:
        """Begin a phase: a fresh best-round selection, and the broadcast the phase starts from."""
        self.selector = RoundSelector(patience=self.patience)
        self.broadcast = self.algorithm.start_phase(self.state, phase, self.broadcast)
        return self.broadcast

    def step(self, sums: Mapping[str, Sums], requests: Sequence[SumRequest], rs: RoundState) -> Broadcast:
        """The algorithm's server step on the round's released server-bound sums (by request key).

        An algorithm that declared one sum receives it as :class:`Sums`; one that declared several receives
        ``{request key: Sums}``. Returns (and keeps) the new broadcast; without server-bound sums the broadcast
        stays as it was.
        """
        if not sums:
            return self.broadcast
        for key, s in sums.items():
            if not isinstance(s, Sums):
                raise TrainingError(f"the server step takes Sums only, got {type(s).__name__} for {key!r}")
        single = len(sums) == 1 and (len(requests) == 1 or MAIN in sums)
        arg: Sums | Mapping[str, Sums] = next(iter(sums.values())) if single else dict(sums)
        self.broadcast = self.algorithm.server_step(self.state, arg, rs)
        return self.broadcast

    def evaluated(self, sums: Sums, rs: RoundState, *, select: bool = True) -> tuple[dict[str, float], bool]:
        """Read an evaluation sum: the overall metrics and whether this round is the phase's new best (by
        validation accuracy, or validation ROC AUC on binary tasks).

        Args:
            sums: The released evaluation sum.
            rs: The evaluated round (its ``broadcast`` is the evaluated model).
            select: Feed the best-round rule (``False`` for the one evaluation after a local phase).
        """
        overall = metrics_from_sums(sums)
        self.algorithm.server_evaluated(self.state, overall, rs)
        improved = True
        if select:
            metric = selection_metric(overall)
            value = overall.get(metric, float("nan"))
            improved = self.selector.observe(
                value, selection_tolerance(sums, self.eval_schema, metric=metric)
            )
        return overall, improved

    @property
    def should_stop(self) -> bool:
        """Whether the current phase has run ``patience`` evaluations without a better round."""
        return self.selector.should_stop

    def report(self) -> dict[str, Any]:
        """Public facts the server reports at the end (``algorithm.run_report``)."""
        return self.algorithm.run_report(self.state)
