"""The ``[train]`` section: optimisation and round settings of a run.

:class:`TrainConfig` is read by the engine (rounds, client sampling, evaluation, early stopping) and handed
to every algorithm and to the client-training stack (:mod:`securefgl.training`) inside its
:class:`~securefgl.algorithms.base.Setting`; it imports nothing of securefgl but :mod:`securefgl.errors`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from securefgl.errors import ConfigError

__all__ = ["TrainConfig"]


@dataclass(frozen=True)
class TrainConfig:
    """Optimisation and round settings.

    Args:
        rounds: Communication rounds of a ``rounds`` phase. (default: ``50``)
        local_epochs: Full-batch local epochs per client per round (E). (default: ``3``)
        lr: Learning rate. (default: ``0.01``)
        optimizer: ``"adam"`` or ``"sgd"``. (default: ``"adam"``)
        optimizer_state: ``"persistent"``: every client keeps its optimiser state across the rounds it takes
            part in (as common FGL code bases do); ``"reset"``: a fresh optimiser every round. With Adam and
            L2 weight decay a reset state moves every weight by about ``lr`` per round, also weights with no
            local gradient, which hurts FedAvg badly. (default: ``"persistent"``)
        momentum: SGD momentum. (default: ``0.0``)
        weight_decay: L2 penalty added to the gradient. The default is 0 because, with Adam, a client's
            weights of features absent from its subgraph receive only the penalty's gradient, which Adam
            normalises into a step of about ``lr`` towards zero per epoch: federated models then lose those
            weights (measured on Cora/Louvain/10 clients: FedAvg val accuracy 64% with ``5e-4`` vs 83% with 0).
            Centralized runs can use the usual ``5e-4``. (default: ``0.0``)
        client_fraction: Fraction of clients invited per round (at least one). (default: ``1.0``)
        clients_per_round: Exact number of clients per round; overrides ``client_fraction``.
            (default: ``None``)
        client_sampling: How a round's clients are chosen when fewer than all take part. ``"fixed"``: the
            server draws exactly ``clients_in_round`` clients without replacement (a DP accountant then
            reports no amplification by sampling); ``"poisson"``: every client joins independently with
            probability ``clients_in_round / num_clients`` using its own randomness, which is what DP
            amplification by subsampling assumes (DP-FTRL, TFF DP-FedAvg); cohort sizes vary.
            (default: ``"fixed"``)
        eval_every: Evaluate every this many rounds (and after the last). (default: ``1``)
        patience: Stop a phase after this many evaluations without a better validation accuracy;
            ``None`` disables early stopping. (default: ``None``)
        select_best: Report the test metrics of the round with the best validation accuracy (``False``:
            of the last round). (default: ``True``)
        batched: Train the clients of a round together when the algorithm supports it (``False`` runs the
            one-client-at-a-time reference path). (default: ``True``)
        epochs: Epochs of non-federated algorithms (Centralized, Local); ``None`` means
            ``rounds * local_epochs``. (default: ``None``)
        max_failed_rounds: A round whose secure sum aborts because too few clients survive (dropouts below
            the protocol's threshold or DP's minimum contributors) is skipped and recorded, as FL servers
            tolerate failed rounds; this many consecutive aborted rounds end the run. ``1`` ends it at the
            first abort. (default: ``5``)
        check_broadcast: Every client replays the algorithm's public server step on the released sums (from
            the initialisation the public run seed gives) and refuses, with
            :class:`~securefgl.errors.SuspiciousModelError`, a broadcast that differs: the defence against a
            server that sends crafted models (:mod:`securefgl.engine.broadcast_check`). (default: ``False``)
        eval_in_next_sum: Carry an evaluation's counts in the next round's training sum instead of a protocol
            run of their own (:mod:`securefgl.engine.eval_rider`): the same sums, one secure sum fewer per
            round. It applies where the next round has a server-bound sum of every client (the evaluation rides
            in the first), without early stopping (``patience``), dropouts or DP; the last round's evaluation
            always runs alone. A
            deployment then puts the evaluation in the next round's Flower steps. (default: ``True``)
    """

    rounds: int = 50
    local_epochs: int = 3
    lr: float = 0.01
    optimizer: Literal["adam", "sgd"] = "adam"
    optimizer_state: Literal["persistent", "reset"] = "persistent"
    momentum: float = 0.0
    weight_decay: float = 0.0
    client_fraction: float = 1.0
    clients_per_round: int | None = None
    client_sampling: Literal["fixed", "poisson"] = "fixed"
    eval_every: int = 1
    patience: int | None = None
    select_best: bool = True
    batched: bool = True
    epochs: int | None = None
    max_failed_rounds: int = 5
    check_broadcast: bool = False
    eval_in_next_sum: bool = True

    def __post_init__(self) -> None:
        if self.rounds < 1:
            raise ConfigError(f"train.rounds must be >= 1, got {self.rounds}")
        if self.local_epochs < 1:
            raise ConfigError(f"train.local_epochs must be >= 1, got {self.local_epochs}")
        if not self.lr > 0:
            raise ConfigError(f"train.lr must be > 0, got {self.lr}")
        if self.momentum < 0:
            raise ConfigError(f"train.momentum must be >= 0, got {self.momentum}")
        if self.weight_decay < 0:
            raise ConfigError(f"train.weight_decay must be >= 0, got {self.weight_decay}")
        if not 0.0 < self.client_fraction <= 1.0:
            raise ConfigError(f"train.client_fraction must be in (0, 1], got {self.client_fraction}")
        if self.client_sampling not in ("fixed", "poisson"):
            raise ConfigError(
                f"train.client_sampling must be 'fixed' or 'poisson', got {self.client_sampling!r}"
            )
        if self.clients_per_round is not None and self.clients_per_round < 1:
            raise ConfigError(f"train.clients_per_round must be >= 1, got {self.clients_per_round}")
        if self.eval_every < 1:
            raise ConfigError(f"train.eval_every must be >= 1, got {self.eval_every}")
        if self.patience is not None and self.patience < 1:
            raise ConfigError(f"train.patience must be >= 1 or none, got {self.patience}")
        if self.epochs is not None and self.epochs < 1:
            raise ConfigError(f"train.epochs must be >= 1 or none, got {self.epochs}")
        if not isinstance(self.check_broadcast, bool):
            raise ConfigError(f"train.check_broadcast must be true or false, got {self.check_broadcast!r}")
        if not isinstance(self.eval_in_next_sum, bool):
            raise ConfigError(f"train.eval_in_next_sum must be true or false, got {self.eval_in_next_sum!r}")
        if self.max_failed_rounds < 1:
            raise ConfigError(f"train.max_failed_rounds must be >= 1, got {self.max_failed_rounds}")

    @property
    def total_epochs(self) -> int:
        """Epochs of a non-federated run: ``epochs`` or ``rounds * local_epochs``."""
        return self.epochs if self.epochs is not None else self.rounds * self.local_epochs

    def clients_in_round(self, num_clients: int) -> int:
        """How many of ``num_clients`` clients a round invites.

        Raises:
            ConfigError: ``clients_per_round`` exceeds ``num_clients``.
        """
        if self.clients_per_round is not None:
            if self.clients_per_round > num_clients:
                raise ConfigError(
                    f"train.clients_per_round={self.clients_per_round} asks for more clients per round than "
                    f"the partition has ({num_clients}); use at most {num_clients}"
                )
            return self.clients_per_round
        return max(1, round(self.client_fraction * num_clients))
