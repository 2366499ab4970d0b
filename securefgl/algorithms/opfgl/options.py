"""O-pFGL options: the algorithm's frozen :class:`OPFGLOptions`, and the settings it derives for each part.

:class:`PseudoGraphConfig` configures the pseudo-graph generator (server side, or every client under variant
A.5) and :class:`StageConfig` one client training stage; both are built from :class:`OPFGLOptions`
(:meth:`OPFGLOptions.pseudo_graph_config`, :meth:`OPFGLOptions.stage_config`). Per-dataset paper settings
are in :mod:`securefgl.algorithms.opfgl.presets`.

Paper: Yan et al., *Towards Federated Graph Learning in One-shot Communication* (O-pFGL),
https://arxiv.org/abs/2411.11304
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal

from securefgl.errors import ConfigError

__all__ = ["OPFGLOptions", "PseudoGraphConfig", "StageConfig", "parse_model_entry"]


@dataclass(frozen=True)
class OPFGLOptions:
    """Options of O-pFGL (``[algorithm.options]``); defaults follow spec §4.2/§7 recommendations.

    Per-dataset paper settings (spec §4.3) are in :mod:`securefgl.algorithms.opfgl.presets`.

    Args:
        hops: Propagation depth ``h`` of the uploaded statistics. (default: ``1``)
        lp_iters: Label-propagation steps ``T``. (default: ``2``)
        lp_alpha: Label-propagation ``α_LP``. (default: ``0.9``)
        top_k: HRE ``K`` (classes with the largest accumulated homophily); ``0`` turns HRE off. (default: ``1``)
        client_top_k: Per-client ``K`` overrides, one per client id (cycled); empty: ``top_k`` for all.
            (default: ``()``)
        confidence_threshold: HRE ``f_th`` on the normalised LP score. (default: ``0.95``)
        degree_threshold: HRE ``d_th``; ``0`` turns criterion C1 off. (default: ``0``)
        min_count: A client uploads a class only if ``N_k^c >= min_count`` (after HRE). (default: ``2``)
        feature_bound: Public clip bound ``B`` of the propagated features; the clip rate is reported.
            (default: ``8.0``)
        min_class_contributors: Release rule: a class row is withheld unless at least this many clients
            contributed it (``1`` releases single-client statistics, which are then flagged). (default: ``2``)
        min_class_count: Server-side threshold: a released class with fewer than this many nodes in total
            (``A^c``) is skipped like a withheld one (spec §3 "small classes"); 0 keeps all. (default: ``0``)
        precision: Fixed-point step of the real blocks (secure protocols). (default: ``2**-24``)
        grid_upload: Round the uploaded real sums to that public grid on the client (deterministic, error
            at most half a step per entry), so that every protocol releases bit-identical sums and runs under
            plaintext and secure aggregation give identical results; ``False`` leaves the quantisation to
            the protocol (unbiased stochastic rounding). (default: ``True``)
        variance_denominator: ``"contributors"`` (``A - M``, paper/code) or ``"unbiased"`` (``A - 1``).
        nodes_per_class: Pseudo nodes per class ``n'_c`` (``ipc``). (default: ``1``)
        rate: If set, ``n'_c = ceil(rate * O^c)`` instead (``p``). (default: ``None``)
        condense_loops: Pseudo-graph optimisation iterations. (default: ``3000``)
        lr_feat, lr_adj: Adam learning rates of ``X'`` and ``g_θ``. (default: ``5e-3``, ``1e-3``)
        edge_threshold: ``δ``. (default: ``0.01``)
        align_weight, smooth_weight: Loss weights. (default: ``10.0``, ``0.1``)
        link_hidden: Width of ``g_θ``. (default: ``128``)
        adj_steps, schedule_period: Step ``θ`` when ``i mod period < adj_steps``. (default: ``10``, ``50``)
        align_moment: ``"std"`` (code) or ``"var"`` (paper). (default: ``"std"``)
        smoothness: ``"kernel"`` (code, minimised), ``"kernel_neg"`` or ``"laplacian"``. (default: ``"kernel"``)
        binary_edges: Paper's binary ``A'`` instead of the code's weights. (default: ``False``)
        absent_classes: ``"skip"`` unreleased classes, or ``"random"`` unaligned nodes (code). (default: ``"skip"``)
        generation: ``"server"`` (the server builds ``G'``) or ``"client"`` (variant A.5). (default: ``"server"``)
        stage1_lr, stage2_lr: Adam learning rates of the two client stages. (default: ``1e-4``, ``1e-4``)
        max_iters, eval_every, patience: Per-stage iteration cap, validation interval and patience (in
            evaluations). (default: ``3000``, ``100``, ``5``)
        beta: ``β`` of ``γ``. (default: ``0.2``)
        gamma_min, gamma_max: Clamp of ``γ`` (``None``: unbounded). (default: ``None``, ``None``)
        model_dropout: Dropout of the clients' models in both stages (spec: 0); ``None`` keeps the run's
            ``model.dropout``. (default: ``0.0``)
        client_models: Heterogeneous models, one entry per client (cycled if shorter), each
            ``"name[:key=value,...]"`` with ``hidden``, ``layers``, ``dropout`` and family options, e.g.
            ``"gcn:hidden=128"``, ``"sgc:K=4"``; each client initialises its own. Empty: the run's model for
            everyone, initialised from the broadcast seed. (default: ``()``)
        on_empty: A pseudo-graph of size zero (every class withheld or absent): ``"raise"`` a
            :class:`TrainingError`, or train ``"local"`` models only (Stage 2 without teacher). (default: ``"raise"``)
    """

    hops: int = 1
    lp_iters: int = 2
    lp_alpha: float = 0.9
    top_k: int = 1
    client_top_k: tuple[int, ...] = ()
    confidence_threshold: float = 0.95
    degree_threshold: float = 0.0
    min_count: int = 2
    feature_bound: float = 8.0
    min_class_contributors: int = 2
    min_class_count: int = 0
    precision: float = 2.0**-24
    grid_upload: bool = True
    variance_denominator: Literal["contributors", "unbiased"] = "contributors"
    nodes_per_class: int = 1
    rate: float | None = None
    condense_loops: int = 3000
    lr_feat: float = 5e-3
    lr_adj: float = 1e-3
    edge_threshold: float = 0.01
    align_weight: float = 10.0
    smooth_weight: float = 0.1
    link_hidden: int = 128
    adj_steps: int = 10
    schedule_period: int = 50
    align_moment: Literal["std", "var"] = "std"
    smoothness: Literal["kernel", "kernel_neg", "laplacian"] = "kernel"
    binary_edges: bool = False
    absent_classes: Literal["skip", "random"] = "skip"
    generation: Literal["server", "client"] = "server"
    stage1_lr: float = 1e-4
    stage2_lr: float = 1e-4
    max_iters: int = 3000
    eval_every: int = 100
    patience: int = 5
    beta: float = 0.2
    gamma_min: float | None = None
    gamma_max: float | None = None
    model_dropout: float | None = 0.0
    client_models: tuple[str, ...] = ()
    on_empty: Literal["raise", "local"] = "raise"

    def __post_init__(self) -> None:
        if self.hops < 0:
            raise ConfigError(f"hops must be >= 0, got {self.hops}")
        if self.lp_iters < 0 or not 0.0 <= self.lp_alpha <= 1.0:
            raise ConfigError(
                f"need lp_iters >= 0 and lp_alpha in [0, 1]; got {self.lp_iters}, {self.lp_alpha}"
            )
        if self.top_k < 0:
            raise ConfigError(f"top_k must be >= 0 (0 turns HRE off), got {self.top_k}")
        if not 0.0 <= self.confidence_threshold <= 1.0:
            raise ConfigError(f"confidence_threshold must be in [0, 1], got {self.confidence_threshold}")
        if self.degree_threshold < 0:
            raise ConfigError(f"degree_threshold must be >= 0, got {self.degree_threshold}")
        if self.min_count < 1:
            raise ConfigError(f"min_count must be >= 1, got {self.min_count}")
        if not (self.feature_bound > 0 and math.isfinite(self.feature_bound)):
            raise ConfigError(f"feature_bound must be positive and finite, got {self.feature_bound}")
        if self.min_class_contributors < 1:
            raise ConfigError(f"min_class_contributors must be >= 1, got {self.min_class_contributors}")
        if self.min_class_count < 0:
            raise ConfigError(f"min_class_count must be >= 0, got {self.min_class_count}")
        if any(k < 0 for k in self.client_top_k):
            raise ConfigError(f"client_top_k entries must be >= 0, got {list(self.client_top_k)}")
        if not self.precision > 0:
            raise ConfigError(f"precision must be > 0, got {self.precision}")
        if self.beta < 0:
            raise ConfigError(f"beta must be >= 0, got {self.beta}")
        if self.gamma_min is not None and self.gamma_max is not None and self.gamma_min > self.gamma_max:
            raise ConfigError(f"gamma_min ({self.gamma_min}) must not exceed gamma_max ({self.gamma_max})")
        if self.model_dropout is not None and not 0.0 <= self.model_dropout < 1.0:
            raise ConfigError(f"model_dropout must be in [0, 1) or None, got {self.model_dropout}")
        if self.client_models:
            from securefgl.nn.registry import ModelSpec

            for entry in self.client_models:
                ModelSpec(**parse_model_entry(entry))  # unknown names list the valid models
        # Validates the generator settings (ranges, choices).
        self.pseudo_graph_config()
        self.stage_config(1)
        self.stage_config(2)

    def pseudo_graph_config(self) -> PseudoGraphConfig:
        """The server-side generator settings."""
        return PseudoGraphConfig(
            nodes_per_class=self.nodes_per_class,
            rate=self.rate,
            loops=self.condense_loops,
            lr_feat=self.lr_feat,
            lr_adj=self.lr_adj,
            threshold=self.edge_threshold,
            align_weight=self.align_weight,
            smooth_weight=self.smooth_weight,
            hidden=self.link_hidden,
            adj_steps=self.adj_steps,
            period=self.schedule_period,
            align_moment=self.align_moment,
            smoothness=self.smoothness,
            binary_edges=self.binary_edges,
            absent_classes=self.absent_classes,
            hops=self.hops,
        )

    def stage_config(self, stage: int) -> StageConfig:
        """Optimisation settings of client Stage 1 or 2."""
        lr = self.stage1_lr if stage == 1 else self.stage2_lr
        return StageConfig(
            lr=lr, max_iters=self.max_iters, eval_every=self.eval_every, patience=self.patience
        )


def _parse_scalar(text: str) -> Any:
    low = text.strip().lower()
    if low in ("true", "false"):
        return low == "true"
    for conv in (int, float):
        try:
            return conv(text)
        except ValueError:
            pass
    return text.strip()


def parse_model_entry(entry: str) -> dict[str, Any]:
    """Parse a heterogeneous-model entry ``"name[:key=value,...]"`` into ``ModelSpec`` keyword arguments.

    ``hidden``, ``layers`` and ``dropout`` are ``ModelSpec`` fields; other keys go to ``options`` (e.g.
    ``K`` of SGC). Example: ``"gcn:hidden=128,layers=3"`` -> ``{"name": "gcn", "hidden": 128, "layers": 3}``.
    """
    if not isinstance(entry, str) or not entry.strip():
        raise ConfigError(
            f"client_models entries must be non-empty strings like 'gcn:hidden=64', got {entry!r}"
        )
    name, _, rest = entry.partition(":")
    out: dict[str, Any] = {"name": name.strip()}
    options: dict[str, Any] = {}
    for item in filter(None, (s.strip() for s in rest.split(","))):
        key, eq, value = item.partition("=")
        if not eq or not key.strip():
            raise ConfigError(f"client_models entry {entry!r}: expected key=value, got {item!r}")
        key = key.strip()
        if key in ("hidden", "layers", "dropout"):
            out[key] = _parse_scalar(value)
        else:
            options[key] = _parse_scalar(value)
    if options:
        out["options"] = options
    return out


@dataclass(frozen=True)
class PseudoGraphConfig:
    """Settings of the server's pseudo-graph generation (spec §2.7; every §7 choice is named here).

    Args:
        nodes_per_class: ``n'_c`` for every class (``ipc``; default 1, small datasets).
        rate: if set, ``n'_c = ceil(rate * O^c)`` instead (``p``, e.g. 0.0025 for arxiv).
        loops: optimisation iterations (default 3000).
        lr_feat, lr_adj: Adam learning rates of ``X'`` and of ``g_θ`` (5e-3, 1e-3).
        threshold: edge threshold ``δ`` (0.01).
        align_weight, smooth_weight: loss weights (10, 0.1).
        hidden: link-predictor width (128).
        adj_steps, period: alternating schedule: step ``θ`` when ``i mod period < adj_steps`` (10, 50).
        align_moment: ``"std"`` (code, default) or ``"var"`` (paper) as the second-moment target.
        smoothness: ``"kernel"`` (code: per-dimension Gaussian kernel, minimised), ``"kernel_neg"``
            (the same, maximised) or ``"laplacian"`` (``Σ A_ij ||x_i - x_j||² / Σ A_ij``).
        binary_edges: paper form ``A'_ij = 1[P_ij >= δ]`` instead of the code's weights (``False``).
        absent_classes: ``"skip"`` (default) or ``"random"`` (the code: unaligned random nodes for
            unreleased classes when ``nodes_per_class`` is used).
        hops: propagation depth ``h`` (must equal the clients').
    """

    nodes_per_class: int = 1
    rate: float | None = None
    loops: int = 3000
    lr_feat: float = 5e-3
    lr_adj: float = 1e-3
    threshold: float = 0.01
    align_weight: float = 10.0
    smooth_weight: float = 0.1
    hidden: int = 128
    adj_steps: int = 10
    period: int = 50
    align_moment: Literal["std", "var"] = "std"
    smoothness: Literal["kernel", "kernel_neg", "laplacian"] = "kernel"
    binary_edges: bool = False
    absent_classes: Literal["skip", "random"] = "skip"
    hops: int = 1

    def __post_init__(self) -> None:
        if self.nodes_per_class < 1:
            raise ConfigError(f"nodes_per_class must be >= 1, got {self.nodes_per_class!r}")
        if self.rate is not None and not (0.0 < self.rate <= 1.0):
            raise ConfigError(f"rate must be in (0, 1] or None, got {self.rate!r}")
        if self.loops < 0:
            raise ConfigError(f"loops must be >= 0, got {self.loops!r}")
        if not 0.0 <= self.threshold <= 1.0:
            raise ConfigError(f"edge threshold δ must be in [0, 1], got {self.threshold!r}")
        if self.hidden < 1 or self.period < 1 or not 0 <= self.adj_steps <= self.period:
            raise ConfigError(
                f"need hidden >= 1, period >= 1 and 0 <= adj_steps <= period; got "
                f"hidden={self.hidden}, period={self.period}, adj_steps={self.adj_steps}"
            )
        if self.align_moment not in ("std", "var"):
            raise ConfigError(f"align_moment must be 'std' or 'var', got {self.align_moment!r}")
        if self.smoothness not in ("kernel", "kernel_neg", "laplacian"):
            raise ConfigError(
                f"smoothness must be one of 'kernel', 'kernel_neg', 'laplacian', got {self.smoothness!r}"
            )
        if self.absent_classes not in ("skip", "random"):
            raise ConfigError(f"absent_classes must be 'skip' or 'random', got {self.absent_classes!r}")
        if self.hops < 0:
            raise ConfigError(f"hops must be >= 0, got {self.hops!r}")


@dataclass(frozen=True)
class StageConfig:
    """Optimisation settings of one client stage (full-batch Adam, no weight decay, spec §2.9-2.10).

    Args:
        lr: learning rate.
        max_iters: at most this many steps (3000).
        eval_every: evaluate local validation accuracy every this many steps (100).
        patience: stop after this many evaluations without a strict improvement (10 Cora/CiteSeer).
        weight_decay: Adam weight decay (0).
    """

    lr: float = 1e-4
    max_iters: int = 3000
    eval_every: int = 100
    patience: int = 10
    weight_decay: float = 0.0

    def __post_init__(self) -> None:
        if not (self.lr > 0 and math.isfinite(self.lr)):
            raise ConfigError(f"stage lr must be positive, got {self.lr!r}")
        if self.max_iters < 0 or self.eval_every < 1 or self.patience < 1:
            raise ConfigError(
                f"need max_iters >= 0, eval_every >= 1, patience >= 1; got {self.max_iters}, "
                f"{self.eval_every}, {self.patience}"
            )
        if self.weight_decay < 0:
            raise ConfigError(f"weight_decay must be >= 0, got {self.weight_decay!r}")
