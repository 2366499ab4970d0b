"""GAP's options (:class:`GAPOptions`, ``GAP.Options``)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from securefgl.errors import ConfigError

__all__ = ["CLASSIFIERS", "EMBEDDINGS", "GAPOptions", "PRIVACY_UNITS"]

#: The privacy units GAP can protect (``"none"``: the same architecture without noise or clipping).
PRIVACY_UNITS = ("node", "edge", "none")

#: What the aggregation module aggregates: the encoder's hidden output, its head's class probabilities, its
#: one-hot predicted class, the raw features, or the one-hot training labels.
EMBEDDINGS = ("hidden", "prediction", "vote", "features", "labels")

#: The classification modules: GAP's per-hop layers, the encoder plus per-hop linear terms (trained on), or
#: the frozen encoder plus per-hop linear terms on exact aggregates (a node-DP head).
CLASSIFIERS = ("gap", "residual", "head", "noisy-head")


@dataclass(frozen=True)
class GAPOptions:
    """Options of :class:`~securefgl.algorithms.gap.GAP` (see its docstring for the method).

    Args:
        privacy: The protected unit: ``"node"`` (a node with its features, label and edges), ``"edge"`` or
            ``"none"``. (default: ``"node"``)
        epsilon: Target epsilon of the whole run; ``inf`` trains without noise or clipping (the non-private
            reference of the same architecture). (default: ``8.0``)
        delta: Target delta; ``None`` means ``1 / (10 N)`` for ``N`` nodes of the federation. (default: ``None``)
        hops: Aggregation hops ``K``; ``None`` means the model's ``layers`` (0 for ``mlp``: DP-MLP).
            (default: ``None``)
        degree_bound: ``D``, the most neighbours a node keeps (node level). (default: ``10``)
        sample_rate: Poisson sampling rate ``q`` of the training nodes in every DP-SGD step (node level); a
            local epoch is ``ceil(1 / q)`` steps. (default: ``0.25``)
        clip: Per-node gradient clipping norm ``C`` of DP-SGD (node level). (default: ``1.0``)
        encoder_rounds: Rounds of the encoder phase; ``None`` means ``train.rounds``. (default: ``None``)
        classifier_rounds: Rounds of the classifier phase; ``None`` means ``train.rounds``. (default: ``None``)
        encoder_layers: Layers of the encoder MLP (each ``Linear`` + ReLU, width ``model.hidden``, the last
            ``encoder_dim``); with ``hops=0`` the encoder and its head are the whole DP-MLP. (default: ``1``)
        encoder_dim: Width of the encoder output: the aggregation noise's norm grows with its square root, so
            it is small. (default: ``16``)
        embedding: What :math:`X^{(0)}` is: ``"hidden"``, the encoder output (GAP's paper); ``"prediction"``,
            the encoder head's class probabilities; or ``"vote"``, its one-hot predicted class, so that every
            aggregate is a noisy count of the neighbours' predicted classes, each neighbour's whole unit norm
            in one coordinate against the per-coordinate noise; or ``"features"``, the node's own input
            features (no encoder before the hops: for a few features that describe a node's neighbourhood
            rather than the node, as Minesweeper's counts of neighbouring mines, which an encoder trained on
            the node's own label would discard); or ``"labels"``, the one-hot label of each node the client
            trains on (zero rows for the others): every aggregate is a noisy count of the neighbours' known
            classes (the label trick; a label is node data, so it is protected at node level with the same
            sensitivity; with two or more hops a training node's own label comes back through its neighbours).
            (default: ``"hidden"``)
        classifier: The classification module: ``"gap"`` (GAP's: one layer per hop on :math:`X^{(0..K)}`,
            concatenated, then a linear output, trained from scratch) or ``"residual"`` (the encoder's own
            logits plus a zero-initialised linear term per hop :math:`X^{(1..K)}`, the encoder trained on: the
            classifier starts as the encoder's prediction and its DP-SGD steps also improve the encoder).
            ``"head"``: the frozen encoder's logits plus one linear term per hop on the **exact** aggregates,
            trained with full-batch DP gradient descent at node sensitivity ``(2D + 1) C`` for one hop
            (``(1 + 2 (D + ... + D^K)) C`` for ``K``; no aggregation noise): the released model is node-DP, but
            predictions computed on the client's own graph read its neighbours' exact votes and are not
            covered if published (GAP's guarantee covers them; this one, as Daigavane et al. 2021, covers the
            model). ``"noisy-head"``: the same head on GAP's noised aggregates (the hops' noise as for the other
            classifiers), trained with full-batch DP gradient descent at sensitivity ``C`` (the aggregates are
            released once, so a node's example reads only its own logits, label and rows of them): GAP's
            guarantee, predictions included, with the few weights of a head. (default: ``"gap"``)
        link_prior: Start of every per-hop link as ``link_prior * I`` when the aggregates are class-wide
            (``prediction``, ``vote`` or ``labels``): a public prior that a neighbour's vote backs its class.
            (default: ``0.0``)
        aggregation_noise_scale: The aggregation hops' noise multiplier over the DP-SGD parts' one: above 1
            spends less of the budget on the hops and more on the gradients, below 1 more on the hops. A hop is
            one Gaussian mechanism while DP-SGD composes hundreds of steps, so with many steps the DP-SGD
            multiplier is large (above 10 for 300 full-batch steps at epsilon 8) and a hop that is to carry
            signal needs a small fraction of it (0.05-0.1: multiplier about 1), at a modest cost to the
            gradients. With ``classifier="head"`` it scales the head's steps instead. (default: ``1.0``)
        head_noise_scale: With ``classifier="noisy-head"``, the head's DP gradient descent noise multiplier over
            the encoder DP-SGD's: a head of a few weights summed over every training node of the federation
            tolerates a large multiplier, which leaves the budget to the encoder and the hops. (default: ``1.0``)
        param_bound: Public clip range of every uploaded parameter. (default: ``16.0``)
        noise: Randomness of the DP noise: ``"os"`` (a generator seeded from ``os.urandom``) or
            ``"insecure-seeded"`` (from the client's seeded generator: reproducible runs, for tests and
            experiments only). (default: ``"os"``)
    """

    privacy: Literal["node", "edge", "none"] = "node"
    epsilon: float = 8.0
    delta: float | None = None
    hops: int | None = None
    degree_bound: int = 10
    sample_rate: float = 0.25
    clip: float = 1.0
    encoder_rounds: int | None = None
    classifier_rounds: int | None = None
    encoder_layers: int = 1
    encoder_dim: int = 16
    embedding: Literal["hidden", "prediction", "vote", "features", "labels"] = "hidden"
    classifier: Literal["gap", "residual", "head", "noisy-head"] = "gap"
    link_prior: float = 0.0
    aggregation_noise_scale: float = 1.0
    head_noise_scale: float = 1.0
    param_bound: float = 16.0
    noise: Literal["os", "insecure-seeded"] = "os"

    def __post_init__(self) -> None:
        where = "algorithm.options"
        if self.privacy not in PRIVACY_UNITS:
            raise ConfigError(
                f"{where}.privacy: invalid value {self.privacy!r}; valid: {', '.join(PRIVACY_UNITS)}"
            )
        object.__setattr__(self, "epsilon", float(self.epsilon))
        if not self.epsilon > 0 or math.isnan(self.epsilon):
            raise ConfigError(f"{where}.epsilon must be > 0 (inf: no noise), got {self.epsilon}")
        if self.delta is not None and not 0.0 < self.delta < 1.0:
            raise ConfigError(f"{where}.delta must be in (0, 1) or none, got {self.delta}")
        if self.hops is not None and self.hops < 0:
            raise ConfigError(f"{where}.hops must be >= 0 or none, got {self.hops}")
        if self.degree_bound < 1:
            raise ConfigError(f"{where}.degree_bound must be >= 1, got {self.degree_bound}")
        if not 0.0 < self.sample_rate <= 1.0:
            raise ConfigError(f"{where}.sample_rate must be in (0, 1], got {self.sample_rate}")
        if not self.clip > 0:
            raise ConfigError(f"{where}.clip must be > 0, got {self.clip}")
        if self.encoder_rounds is not None and self.encoder_rounds < 1:
            raise ConfigError(f"{where}.encoder_rounds must be >= 1 or none, got {self.encoder_rounds}")
        if self.classifier_rounds is not None and self.classifier_rounds < 1:
            raise ConfigError(f"{where}.classifier_rounds must be >= 1 or none, got {self.classifier_rounds}")
        if self.embedding not in EMBEDDINGS:
            raise ConfigError(
                f"{where}.embedding: invalid value {self.embedding!r}; valid: {', '.join(EMBEDDINGS)}"
            )
        if self.classifier not in CLASSIFIERS:
            raise ConfigError(
                f"{where}.classifier: invalid value {self.classifier!r}; valid: {', '.join(CLASSIFIERS)}"
            )
        if not math.isfinite(self.link_prior):
            raise ConfigError(f"{where}.link_prior must be a finite number, got {self.link_prior}")
        if not (self.aggregation_noise_scale > 0 and math.isfinite(self.aggregation_noise_scale)):
            raise ConfigError(
                f"{where}.aggregation_noise_scale must be a finite number > 0, got {self.aggregation_noise_scale}"
            )
        if not (self.head_noise_scale > 0 and math.isfinite(self.head_noise_scale)):
            raise ConfigError(
                f"{where}.head_noise_scale must be a finite number > 0, got {self.head_noise_scale}"
            )
        if self.encoder_layers < 1:
            raise ConfigError(f"{where}.encoder_layers must be >= 1, got {self.encoder_layers}")
        if self.encoder_dim < 1:
            raise ConfigError(f"{where}.encoder_dim must be >= 1, got {self.encoder_dim}")
        if not self.param_bound > 0:
            raise ConfigError(f"{where}.param_bound must be > 0, got {self.param_bound}")
        if self.noise not in ("os", "insecure-seeded"):
            raise ConfigError(f"{where}.noise: invalid value {self.noise!r}; valid: 'os', 'insecure-seeded'")

    @property
    def private(self) -> bool:
        """Whether noise and clipping are applied (a unit other than ``none`` and a finite epsilon)."""
        return self.privacy != "none" and math.isfinite(self.epsilon)
