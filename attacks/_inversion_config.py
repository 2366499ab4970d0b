"""Gradient inversion: what the attack is told (training recipe, update, settings) and what it returns."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from torch import Tensor

from securefgl.errors import ConfigError


@dataclass(frozen=True)
class TrainingRecipe:
    """The public local-training recipe a client follows (the server configures it).

    Args:
        epochs: Full-batch local epochs :math:`E`. (default: ``1``)
        lr: Learning rate :math:`\\eta`. (default: ``0.01``)
        optimizer: ``"sgd"`` or ``"adam"``. (default: ``"sgd"``)
        weight_decay: L2 penalty added to the gradient. (default: ``0.0``)
        momentum: SGD momentum. (default: ``0.0``)
        prox_mu: FedProx proximal weight. (default: ``0.0``)
    """

    epochs: int = 1
    lr: float = 0.01
    optimizer: Literal["sgd", "adam"] = "sgd"
    weight_decay: float = 0.0
    momentum: float = 0.0
    prox_mu: float = 0.0

    def __post_init__(self) -> None:
        if self.epochs < 1:
            raise ConfigError(f"recipe epochs must be >= 1, got {self.epochs}")
        if not self.lr > 0:
            raise ConfigError(f"recipe lr must be > 0, got {self.lr}")
        if self.optimizer not in ("sgd", "adam"):
            raise ConfigError(f"recipe optimizer must be 'sgd' or 'adam', got {self.optimizer!r}")

    @staticmethod
    def from_train_config(train: Any, prox_mu: float = 0.0) -> TrainingRecipe:
        """The recipe of a :class:`~securefgl.config.TrainConfig`."""
        return TrainingRecipe(
            epochs=int(train.local_epochs),
            lr=float(train.lr),
            optimizer=train.optimizer,
            weight_decay=float(train.weight_decay),
            momentum=float(train.momentum),
            prox_mu=float(prox_mu),
        )


@dataclass(frozen=True)
class ModelUpdate:
    """An update as the adversary reads it.

    Args:
        base: The broadcast parameters the training started from.
        delta: Trained parameters minus ``base``.
        num_nodes: Training nodes behind the update when the view reveals it (FedAvg's ``n`` block),
            else ``None``.
        source: ``"individual"`` (one client's exact upload), ``"masked"`` (a masked vector decoded as if it
            were an encoding) or ``"sum"`` (the released aggregate of ``contributors`` clients).
        contributors: Clients in the update.
    """

    base: dict[str, Tensor]
    delta: dict[str, Tensor]
    num_nodes: int | None
    source: Literal["individual", "masked", "sum"] = "individual"
    contributors: int = 1


@dataclass(frozen=True)
class InversionConfig:
    """Settings of the feature reconstruction.

    Args:
        objective: ``"cosine"`` (Inverting Gradients) or ``"euclidean"`` (DLG). (default: ``"cosine"``)
        optimizer: ``"lbfgs"`` or ``"adam"`` (signed gradients, step decay, as Inverting Gradients).
            (default: ``"lbfgs"``)
        iterations: Iterations per restart. (default: ``200``)
        restarts: Random restarts; the lowest objective wins. (default: ``10``)
        step: Adam step size. (default: ``0.1``)
        prior: ``"none"``, ``"nonneg"`` (features >= 0) or ``"binary"`` (features in [0, 1], sparse).
            (default: ``"none"``)
        sparsity: L1 weight :math:`\\lambda_1` (bag-of-words). (default: ``0.0``)
        support: Zero the features whose first-layer column of the update is zero. (default: ``True``)
        subspace: Search in the row space of the first-layer update (SGD recipes). (default: ``True``)
        graph_known: Use the client's graph structure if the view holds it. (default: ``True``)
        labels: ``"joint"``: per-node soft labels optimised with the features (DLG), then fixed to their
            argmax while the features are polished; ``"idlg"``: label counts fixed from the output bias
            (iDLG), refined with the reconstruction's mean prediction. (default: ``"joint"``)
        refine_labels: ``"idlg"`` only: re-estimate the counts from quick reconstructions. (default: ``True``)
        label_passes: At most this many re-estimations (until the counts are stable). (default: ``4``)
        anchors: SGD recipes: fix the rows that :func:`bias_candidates` proves exact and start the others at
            the remaining candidates. (default: ``True``)
        deconvolve: Graph-known GCN with a ``nonneg`` or ``binary`` prior: read the training rows back from
            the fitted propagated rows of their neighbours (:func:`~securefgl.attacks._inversion_analytic.
            deconvolve_rows`) instead of taking the search's raw rows, which the update does not pin down.
            (default: ``True``)
        exact_tol: An objective below this counts as an exact fit (no leave-one-out search over the fixed
            rows). (default: ``1e-3``)
        adam_eps: Epsilon of the simulated Adam (larger than Adam's own, for stable derivatives).
            (default: ``1e-4``)
        max_unknown_nodes: Refuse a graph-known inversion with more unknown nodes. (default: ``2000``)
    """

    objective: Literal["cosine", "euclidean"] = "cosine"
    optimizer: Literal["lbfgs", "adam"] = "lbfgs"
    iterations: int = 200
    restarts: int = 10
    step: float = 0.1
    prior: Literal["none", "nonneg", "binary"] = "none"
    sparsity: float = 0.0
    support: bool = True
    subspace: bool = True
    graph_known: bool = True
    labels: Literal["joint", "idlg"] = "joint"
    refine_labels: bool = True
    label_passes: int = 4
    anchors: bool = True
    deconvolve: bool = True
    exact_tol: float = 1e-3
    adam_eps: float = 1e-4
    max_unknown_nodes: int = 2000

    def __post_init__(self) -> None:
        if self.objective not in ("cosine", "euclidean"):
            raise ConfigError(f"objective must be 'cosine' or 'euclidean', got {self.objective!r}")
        if self.optimizer not in ("lbfgs", "adam"):
            raise ConfigError(f"optimizer must be 'lbfgs' or 'adam', got {self.optimizer!r}")
        if self.prior not in ("none", "nonneg", "binary"):
            raise ConfigError(f"prior must be 'none', 'nonneg' or 'binary', got {self.prior!r}")
        if self.iterations < 1 or self.restarts < 1:
            raise ConfigError(f"iterations and restarts must be >= 1, got {self.iterations}, {self.restarts}")
        if self.labels not in ("joint", "idlg"):
            raise ConfigError(f"labels must be 'joint' or 'idlg', got {self.labels!r}")
        if self.sparsity < 0:
            raise ConfigError(f"sparsity must be >= 0, got {self.sparsity}")


@dataclass
class Reconstruction:
    """The attacker's guess of the target's training nodes.

    Args:
        x: ``(n, F)`` reconstructed features of the training nodes.
        y: ``(n,)`` recovered labels (aligned with ``x``).
        label_counts: ``(C,)`` recovered label counts.
        objective: Final objective value of the best restart.
        graph_used: Whether the client's structure was used.
        seconds: Wall time.
    """

    x: Tensor
    y: Tensor
    label_counts: Tensor
    objective: float
    graph_used: bool
    seconds: float
    extra: dict[str, Any] = field(default_factory=dict)
