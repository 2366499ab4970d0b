r"""O-pFGL: one-shot personalised federated graph learning whose only upload is a secure sum.

Yan, Li, Xie, Zhang, Shen, Fang, Wu, *Towards Federated Graph Learning in One-shot Communication*
(O-pFGL), https://arxiv.org/abs/2411.11304. Spec: ``shared/specs/opfgl.md``.

One upload, one download. Client :math:`k` propagates its features,
:math:`X^{prop}_k = [X_k \| \tilde A_k X_k \| \dots \| \tilde A_k^h X_k]`, enlarges its labelled set with
reliable nodes (HRE, Eq. 7) and uploads, for every class :math:`c`, **sums only**:

.. math::
    a_k^c = N_k^c,\quad b_k^c = \sum_{i \in S_k^c} x_i^{prop},\quad
    q_k^c = \sum_{i \in S_k^c} x_i^{prop} \odot x_i^{prop},\quad
    e_k^c = 1[N_k^c \ge 2],\quad o_k^c = |V^c_{k,L}|

(zeros for a class it does not contribute). The protocol releases :math:`A, B, Q, M, O = \sum_k (a, b, q,
e, o)_k`; class rows with fewer than ``min_class_contributors`` contributing clients are withheld (the
release rule is applied row-wise, counted by the ``contrib`` block). The server step sees those sums and
nothing else:

.. math::
    \mu^c = B^c / A^c,\qquad s^{2,c} = \frac{Q^c - A^c (\mu^c)^2}{A^c - M^c},\qquad
    \lambda_c = \frac{A^c}{\sum_{c'} A^{c'}}

and optimises a pseudo-graph :math:`G' = (X', A', Y')` whose propagated class means (and stds) match
:math:`\mu^c` (and :math:`s^c`). :math:`G'` and a model-initialisation seed are broadcast. Each client then
trains :math:`M_G` on :math:`G'` (Stage 1, selected on local validation accuracy) and fine-tunes a copy on
its own graph with node-adaptive distillation toward the frozen :math:`M_G` (Stage 2):

.. math::
    L_{2nd} = \mathrm{CE}(V_L) + \frac{1}{N_k} \sum_i \gamma_i\,
        \mathrm{KL}\big(M_G(x_i) \,\|\, M_k(x_i)\big),\qquad
    \gamma_i = \mathrm{clamp}(\beta\, \tilde y_i^\top w_{dist}, \gamma_{min}, \gamma_{max}).

Variant A.5 (``generation="client"``): the sums are revealed to the clients only (run it under ``ckks``,
where the server adds ciphertexts it cannot read); every client regenerates :math:`G'` from the same
public seed, and the run checks that all clients obtained the same graph (SHA-256 of its bytes).

Shapes:
    Upload per client: ``count (C,)``, ``sum (C, D)``, ``sumsq (C, D)``, ``contrib (C,)``, ``orig (C,)``
    and ``clip (2,)`` (clipped and total feature entries, so that the run reports the clip rate from a
    sum) with ``D = (h+1) F``: ``C (2D + 3) + 2`` numbers. Download: ``x (n', F)``, ``edge_index (2, E')``,
    ``edge_weight (E',)``, ``y (n',)`` and two seeds.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

import torch
from torch import Tensor

from securefgl.algorithms._opfgl_client import client_statistics
from securefgl.algorithms._opfgl_server import (
    ClassMoments,
    PseudoGraph,
    PseudoGraphConfig,
    generate_pseudo_graph,
    moments_from_sums,
)
from securefgl.algorithms._opfgl_train import (
    LocalGraph,
    StageConfig,
    StageResult,
    distillation_weights,
    train_stage1,
    train_stage1_shared,
    train_stage2,
)
from securefgl.algorithms.base import (
    Algorithm,
    Broadcast,
    Client,
    CompatibilityProblem,
    Phase,
    RoundState,
    SumRequest,
)
from securefgl.algorithms.registry import register_algorithm
from securefgl.errors import ConfigError, InconsistentViewError, TrainingError

__all__ = ["OPFGL", "OPFGLOptions", "parse_model_entry", "pseudo_graph_from_broadcast"]

#: Block names of the upload, in packing order.
BLOCKS = ("count", "sum", "sumsq", "contrib", "orig", "clip")
#: Request key of the statistics sum.
STATS = "stats"


@dataclass(frozen=True)
class OPFGLOptions:
    """Options of O-pFGL (``[algorithm.options]``); defaults follow spec §4.2/§7 recommendations.

    Per-dataset paper settings (spec §4.3) are in :mod:`securefgl.algorithms.opfgl_presets`.

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


def pseudo_graph_from_broadcast(broadcast: Broadcast, num_classes: int) -> PseudoGraph:
    """Rebuild the :class:`PseudoGraph` from the broadcast tensors."""
    return PseudoGraph(
        x=broadcast["x"].float(),
        edge_index=broadcast["edge_index"].long(),
        edge_weight=broadcast["edge_weight"].float(),
        y=broadcast["y"].long(),
        num_classes=num_classes,
        model_seed=int(broadcast["model_seed"]),
    )


def _seed_from(generator: torch.Generator) -> int:
    return int(torch.randint(0, 2**62, (1,), generator=generator))


@register_algorithm
class OPFGL(Algorithm):
    """O-pFGL (Yan et al., https://arxiv.org/abs/2411.11304): see the module docstring for the math.

    Args:
        setting: The public facts of the run.
        options: :class:`OPFGLOptions` or a mapping validated against it.
    """

    name: ClassVar[str] = "opfgl"
    Options: ClassVar[type] = OPFGLOptions

    # ------------------------------------------------------------------ structure ------------------------

    @classmethod
    def compatibility(
        cls, *, protocol: str, model: str, dataset: str, options: Any, num_clients: int | None
    ) -> list[CompatibilityProblem]:
        problems: list[CompatibilityProblem] = []
        opts = options if isinstance(options, OPFGLOptions) else None
        if opts is None and isinstance(options, Mapping):
            try:
                from securefgl.algorithms.base import parse_options

                opts = parse_options(OPFGLOptions, options, where="algorithm.options (opfgl)")
            except ConfigError:
                opts = None  # reported by the registry
        if opts is not None and opts.generation == "client" and protocol.split("+")[0] != "ckks":
            problems.append(
                CompatibilityProblem(
                    f"O-pFGL variant A.5 (generation='client') reveals the summed statistics to the clients only; "
                    f"protocol {protocol!r} does not hide the sum from the relaying server",
                    "use protocol 'ckks', or generation='server'",
                    permanent=True,
                )
            )
        if num_clients is not None and opts is not None and num_clients < opts.min_class_contributors:
            problems.append(
                CompatibilityProblem(
                    f"min_class_contributors={opts.min_class_contributors} exceeds the {num_clients} clients: "
                    "every class would be withheld",
                    "lower min_class_contributors or add clients",
                    permanent=False,
                )
            )
        return problems

    def phases(self, train: Any) -> Sequence[Phase]:
        return (
            Phase("upload", kind="rounds", rounds=1, sample=False, evaluate=False),
            Phase("train", kind="local", evaluate=True),
        )

    # ------------------------------------------------------------------ the sum -------------------------

    def build_schema(self) -> Any:
        """The public :class:`SumSchema` of the one upload (bounds from public facts only)."""
        from securefgl.protocols.encoding import BlockSpec, SumSchema

        s = self.setting
        o = self.options
        c = s.num_classes
        d = (o.hops + 1) * s.num_features
        nb = float(s.count_bound)
        rule = dict(min_contributors=o.min_class_contributors, counted_by="contrib")
        blocks = [
            BlockSpec("count", (c,), kind="count", bound=nb, dtype=torch.float64, **rule),
            BlockSpec("sum", (c, d), bound=nb * o.feature_bound, dtype=torch.float64, **rule),
            BlockSpec("sumsq", (c, d), bound=nb * o.feature_bound**2, dtype=torch.float64, **rule),
            BlockSpec("contrib", (c,), kind="count", bound=1.0),
            BlockSpec("orig", (c,), kind="count", bound=nb, dtype=torch.float64, **rule),
            BlockSpec("clip", (2,), kind="count", bound=nb * d),
        ]
        max_clients = s.max_clients_per_round or s.num_clients
        return SumSchema(blocks, max_clients=max_clients, precision=o.precision)

    def schema(self, rs: RoundState) -> Any:
        return self.build_schema() if self.options.generation == "server" else None

    def requests(self, rs: RoundState) -> Sequence[SumRequest]:
        if self.options.generation == "server":
            return (SumRequest(STATS, self.build_schema()),)
        # A.5: the sum is revealed to the clients only (under CKKS the server only adds ciphertexts): the
        # server relays the recipient's released sum to every participant, into each client's own inbox.
        return (SumRequest(STATS, self.build_schema(), recipient=min(rs.clients), relay=True),)

    # ------------------------------------------------------------------ client side ---------------------

    def init_client(self, client: Client) -> None:
        client.state.setdefault("opfgl", {})

    def client_step(self, client: Client, rs: RoundState) -> Any:
        o = self.options
        d = client.data
        stats = client_statistics(
            d.x,
            d.edge_index,
            d.y,
            d.train_mask,
            self.setting.num_classes,
            hops=o.hops,
            lp_iters=o.lp_iters,
            lp_alpha=o.lp_alpha,
            top_k=min(
                o.client_top_k[client.id % len(o.client_top_k)] if o.client_top_k else o.top_k,
                self.setting.num_classes,
            ),
            degree_threshold=o.degree_threshold,
            confidence_threshold=o.confidence_threshold,
            min_count=o.min_count,
            feature_bound=o.feature_bound,
        )
        st = client.state.setdefault("opfgl", {})
        st["soft_labels"] = stats.soft_labels
        st["w_dist"] = stats.w_dist
        st["clip_rate"] = stats.clip_rate
        st["reliable"] = int(stats.reliable.sum())
        st["uploaded_classes"] = [int(c) for c in torch.nonzero(stats.sums["contrib"]).flatten()]
        out = {k: v.cpu() for k, v in stats.sums.items()}
        if o.grid_upload:
            # Round the real blocks to the schema's public fixed-point grid (round to nearest). On-grid
            # values are encoded exactly by every protocol and their sum is exact in float64, so plaintext,
            # secagg, secagg+ and ckks release bit-identical sums and the run does not depend on the protocol.
            steps = self.build_schema().steps
            for name in ("sum", "sumsq"):
                out[name] = torch.round(out[name] / steps[name]) * steps[name]
        return out

    # ------------------------------------------------------------------ server side ---------------------

    def init_server(self, generator: torch.Generator) -> Any:
        return {
            "generation_seed": _seed_from(generator),
            "model_seed": _seed_from(generator),
            "report": {},
        }

    def initial_broadcast(self, server: Any) -> Broadcast:
        return {
            "generation_seed": torch.tensor([server["generation_seed"]], dtype=torch.int64),
            "model_seed": torch.tensor([server["model_seed"]], dtype=torch.int64),
        }

    def _small_classes(self, sums: Any) -> torch.Tensor:
        """Released classes below the server-side ``min_class_count`` (public: from the summed counts)."""
        count = torch.nan_to_num(sums["count"].to(torch.float64), nan=0.0)
        return (count > 0) & (count < self.options.min_class_count)

    def _moments(self, sums: Any) -> ClassMoments:
        withheld = self._small_classes(sums)
        for name in ("count", "sum", "sumsq", "orig"):
            rows = sums.withheld_rows(name)
            if rows is not None:
                withheld = withheld | rows.bool()
        return moments_from_sums(
            sums["count"],
            sums["sum"],
            sums["sumsq"],
            sums["contrib"],
            sums["orig"],
            withheld_rows=withheld,
            denominator=self.options.variance_denominator,
        )

    def _generate(self, sums: Any, generation_seed: int, model_seed: int) -> tuple[PseudoGraph | None, dict]:
        """Moments and pseudo-graph from released sums; ``None`` graph when nothing was released."""
        moments = self._moments(sums)
        report = {
            "released_classes": moments.released_classes,
            "withheld_classes": list(moments.withheld),
            "below_min_count_classes": [int(c) for c in torch.nonzero(self._small_classes(sums)).flatten()],
            "absent_classes": list(moments.absent),
            "single_contributor_classes": list(moments.single_contributor),
            "degenerate_variance_classes": list(moments.degenerate),
            "class_counts": [int(v) for v in moments.count],
            "class_contributors": [int(v) for v in moments.contributors],
            "clipped_values": {k: int(v) for k, v in getattr(sums, "clip_counts", {}).items()},
        }
        clip = sums["clip"].to(torch.float64)
        report["feature_clip_rate"] = float(clip[0] / clip[1]) if float(clip[1]) > 0 else 0.0
        report["feature_clipped"] = int(clip[0])
        try:
            graph = generate_pseudo_graph(
                moments,
                self.setting.num_features,
                self.options.pseudo_graph_config(),
                seed=generation_seed,
                model_seed=model_seed,
                device=self.setting.device,
            )
        except TrainingError:
            if self.options.on_empty == "raise":
                raise
            report["pseudo_graph"] = "empty: clients train local models only"
            return None, report
        report["pseudo_graph"] = dict(graph.info)
        return graph, report

    def server_step(self, server: Any, sums: Any, rs: RoundState) -> Broadcast:
        if self.options.generation == "client":
            # A.5: the server received no sum; it only relays the public seeds.
            return dict(rs.broadcast)
        if isinstance(sums, Mapping) and STATS in sums and not hasattr(sums, "withheld_rows"):
            sums = sums[STATS]
        graph, report = self._generate(sums, server["generation_seed"], server["model_seed"])
        server["report"] = report
        out: dict[str, Tensor] = {"model_seed": torch.tensor([server["model_seed"]], dtype=torch.int64)}
        released = torch.zeros(self.setting.num_classes, dtype=torch.bool)
        released[report["released_classes"]] = True
        out["released"] = released
        if graph is not None:
            out.update(
                x=graph.x,
                edge_index=graph.edge_index.to(torch.int32),
                edge_weight=graph.edge_weight,
                y=graph.y.to(torch.int16),
            )
        report["broadcast_bytes"] = int(sum(t.numel() * t.element_size() for t in out.values()))
        return out

    def run_report(self, server: Any) -> dict[str, Any]:
        """What the server learnt and decided (released/withheld/absent classes, pseudo-graph diagnostics)."""
        return dict(server.get("report", {})) if isinstance(server, Mapping) else {}

    # ------------------------------------------------------------------ local stages --------------------

    def _make_model(self, client: Client, model_seed: int) -> torch.nn.Module:
        from securefgl.nn.registry import ModelSpec, build_model

        o = self.options
        if o.client_models:
            kwargs = parse_model_entry(o.client_models[client.id % len(o.client_models)])
            kwargs.setdefault("dropout", o.model_dropout if o.model_dropout is not None else 0.0)
            spec = ModelSpec(**kwargs)
            gen = torch.Generator().manual_seed(_seed_from(client.generator))
        else:
            spec = self.setting.model
            if o.model_dropout is not None:
                spec = ModelSpec(
                    name=spec.name,
                    hidden=spec.hidden,
                    layers=spec.layers,
                    dropout=o.model_dropout,
                    options=dict(spec.options),
                )
            gen = torch.Generator().manual_seed(int(model_seed))
        return build_model(
            spec, self.setting.num_features, self.setting.num_classes, generator=gen, device=client.device
        )

    def personalize_clients(self, clients: Sequence[Client], broadcast: Broadcast, phase: Phase) -> None:
        """Stage 1 on the pseudo-graph, then Stage 2 on the local graph, for every client."""
        if self.options.generation == "client":
            graphs = self._client_generation(clients, broadcast)
        else:
            graph = (
                pseudo_graph_from_broadcast(broadcast, self.setting.num_classes) if "x" in broadcast else None
            )
            if graph is None and self.options.on_empty == "raise":
                raise TrainingError(
                    "O-pFGL: the broadcast holds no pseudo-graph (no class statistic was released)"
                )
            graphs = {c.id: graph for c in clients}
        model_seed = int(broadcast["model_seed"])
        stage1: dict[int, tuple[dict[str, Tensor], StageResult]] = {}
        first = graphs[clients[0].id] if clients else None
        if not self.options.client_models and first is not None and len(clients) > 1:
            # Homogeneous models: every client starts Stage 1 from the same seeded weights on the same
            # pseudo-graph, so the trajectory is shared; each client still selects its own checkpoint.
            dev = clients[0].device
            model = self._make_model(clients[0], model_seed)
            selected = train_stage1_shared(
                model,
                first.x.to(dev),
                first.edge_index.to(dev),
                first.edge_weight.to(dev),
                first.y.to(dev),
                [(LocalGraph(c.data.x, c.data.edge_index), c.data.y, c.data.val_mask) for c in clients],
                self.options.stage_config(1),
            )
            stage1 = {c.id: sel for c, sel in zip(clients, selected, strict=True)}
        for c in clients:
            self._personalize_one(c, graphs[c.id], model_seed, stage1.get(c.id))

    def _client_generation(
        self, clients: Sequence[Client], broadcast: Broadcast
    ) -> dict[int, PseudoGraph | None]:
        """Variant A.5: every client rebuilds ``G'`` from the sum in its own inbox and the shared seed.

        The engine relays the released sum to every participant (``SumRequest(relay=True)``); each client
        reads only ``client.inbox``. The final digest comparison is the run's consistency check over the
        clients' *digests* (what a deployment would exchange), not over their data.
        """
        graphs: dict[int, PseudoGraph | None] = {}
        digests: dict[int, str] = {}
        for c in clients:
            graph = self._client_graph(c, broadcast)
            graphs[c.id] = graph
            digests[c.id] = c.state["opfgl"]["pseudo_graph_digest"]
        if len(set(digests.values())) != 1:
            raise InconsistentViewError(
                f"O-pFGL A.5: clients built different pseudo-graphs from the same sums and seed: {digests}"
            )
        return graphs

    def _client_graph(self, client: Client, broadcast: Broadcast) -> PseudoGraph | None:
        """One client's A.5 generation: ``G'`` from the sum in its own inbox (decrypted locally) and the seeds."""
        sums = client.inbox.get(STATS)
        if sums is None:
            raise TrainingError(
                f"O-pFGL A.5: client {client.id} has no summed statistics in its inbox "
                f"(the {STATS!r} sum must be relayed to every participant: SumRequest(relay=True))"
            )
        graph, report = self._generate(sums, int(broadcast["generation_seed"]), int(broadcast["model_seed"]))
        st = client.state.setdefault("opfgl", {})
        st["report"] = report
        st["pseudo_graph_digest"] = graph.digest() if graph is not None else "empty"
        return graph

    def _personalize_one(
        self,
        client: Client,
        graph: PseudoGraph | None,
        model_seed: int,
        stage1: tuple[dict[str, Tensor], StageResult] | None = None,
    ) -> None:
        o = self.options
        d = client.data
        st = client.state.setdefault("opfgl", {})
        model = self._make_model(client, model_seed)
        local = LocalGraph(d.x, d.edge_index)
        if graph is not None:
            dev = client.device
            if stage1 is not None:
                model.load_state_dict(stage1[0])
                r1 = stage1[1]
            else:
                r1 = train_stage1(
                    model,
                    graph.x.to(dev),
                    graph.edge_index.to(dev),
                    graph.edge_weight.to(dev),
                    graph.y.to(dev),
                    local,
                    d.y,
                    d.val_mask,
                    o.stage_config(1),
                )
            st["stage1"] = {"best_val": r1.best_val, "best_iter": r1.best_iter, "iters": r1.iters}
            model.eval()
            with torch.no_grad():
                teacher_logits = local.logits(model)
            gamma = distillation_weights(
                st["soft_labels"].to(client.device),
                st["w_dist"].to(client.device),
                beta=o.beta,
                gamma_min=o.gamma_min,
                gamma_max=o.gamma_max,
            )
        else:
            teacher_logits = torch.zeros(d.num_nodes, self.setting.num_classes, device=client.device)
            gamma = torch.zeros(d.num_nodes, device=client.device)
        r2 = train_stage2(
            model, teacher_logits, gamma, local, d.y, d.train_mask, d.val_mask, o.stage_config(2)
        )
        st["stage2"] = {"best_val": r2.best_val, "best_iter": r2.best_iter, "iters": r2.iters}
        client.state["model"] = model
