r"""AdaFGL: a federated knowledge extractor under secure aggregation, then adaptive local personalisation.

Li, Wu, Zhang, Sun, Li, Wang, "AdaFGL: A New Paradigm for Federated Node Classification with Topology
Heterogeneity" (ICDE 2024, https://arxiv.org/abs/2401.11750). Implemented from
``shared/specs/adafgl.md``; section numbers below refer to that spec.

**Step 1** (§2.1, Alg. 1) is FedAvg of a GCN, the *federated knowledge extractor*. In round :math:`t` each
participating client :math:`i` runs :math:`E` local epochs from the broadcast :math:`\tilde W^t` and uploads
only a numerator and a denominator, which the protocol sums:

.. math::
    u_i = \big(n_i \,\mathrm{vec}(W_i^t),\ n_i\big), \qquad
    U = \sum_{i \in S_t} u_i, \qquad
    \tilde W^{t+1} = \frac{\sum_i n_i W_i^t}{\sum_i n_i} \quad \text{(eq. 4)}

with :math:`n_i = |V_i|` (spec §7.6). The server sees :math:`U` only. This is the engine's FedAvg (schema,
batched local training, server step) with the node-count weight of eq. (4).

**Step 2** (§2.2, Alg. 2) runs on every client with the extractor :math:`\tilde W` (by default the evaluated
round's global model with the best validation accuracy, as the official code keeps it; ``extractor="last"``:
the final broadcast :math:`\tilde W^{T+1}`) and sends nothing (its transcript is empty):

.. math::
    \hat P = \mathrm{softmax}(\mathrm{GCN}_{\tilde W^{T+1}}(X, A)), \quad
    \tilde P = \alpha A + (1-\alpha)\,B(\hat P) \quad \text{(eqs. 5-6)} \\
    X_s = [X \,\|\, \hat{\mathcal A}X \,\|\, \dots \,\|\, \hat{\mathcal A}^{K_p}X],\
    \hat{\mathcal A} = D^{-1/2}(\tilde P + I)D^{-1/2} \quad \text{(eq. 7)} \\
    \hat Y_{ho} = \tfrac12(\mathrm{softmax}(\mathrm{MLP}_{ho}(X_s)) + \hat P), \quad
    L_{knowledge} = \mathrm{mean}\big((\mathrm{MLP}_{ho}(X_s) - \hat P)^2\big) \quad \text{(eqs. 8-9)} \\
    \hat Y_{he} = \tfrac13\big(\mathrm{softmax}(H_f) + \mathrm{softmax}(\tilde H_{he}) + \mathrm{softmax}(H_m)\big)
    \quad \text{(eqs. 10-13)} \\
    \hat Y = \mathrm{HCS}\,\hat Y_{ho} + (1-\mathrm{HCS})\,\hat Y_{he}, \quad
    \mathrm{HCS} = \text{LP accuracy on hidden train nodes} \quad \text{(eqs. 15-17)}

where :math:`B` is the binarised cosine similarity of predicted class distributions (threshold 0.999),
:math:`H_f = \mathrm{MLP}_f(X)`, :math:`\tilde H_{he} = \mathrm{MLP}_{he}(X_s)` and :math:`H_m` is the learnable
message passing of eqs. (11)-(12) (see :class:`~securefgl.algorithms._adafgl_model.LearnableMessagePassing`).

Step 2 trains the K clients' personalised models together (batched over clients, each with its own
parameters, optimiser state, HCS and best epoch) when ``train.batched`` is on, and one client at a time
otherwise; clients above ``dense_max_nodes`` always run alone with sparse similarity and message passing.

Security:
    The server sees, per round, only :math:`\sum_i n_i \mathrm{clip}_B(W_i)` and :math:`\sum_i n_i` (released by
    the protocol) and broadcasts their ratio. Step 2 sends nothing: :math:`\hat P_i`, :math:`\tilde P_i`,
    :math:`\mathrm{HCS}_i` and the personalised models never leave client :math:`i`. Not protected: the
    broadcast extractor itself (the sum), and per-client diagnostics a simulation chooses to print.

Shapes:
    per client: ``x`` ``(N_k, F)``, ``edge_index`` ``(2, E_k)``; uploads one block ``w.<name>`` per GCN
    parameter tensor (its shape, times :math:`n_k`) and ``n`` ``(1,)``; step 2 predictions ``(N_k, C)``.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import torch

from securefgl.algorithms._adafgl_local import (
    PreparedClient,
    StepTwoResult,
    client_homophily_report,
    prepare_client,
    train_prepared,
)
from securefgl.algorithms._adafgl_topology import adjacency, homophily_confidence_score
from securefgl.algorithms.base import Broadcast, Client, Phase, RoundState
from securefgl.algorithms.fedavg import FedAvg
from securefgl.algorithms.registry import register_algorithm
from securefgl.errors import ConfigError, TrainingError
from securefgl.training.local_training import predict_shared, workspace_generator

__all__ = [
    "ABLATIONS",
    "AdaFGL",
    "AdaFGLOptions",
    "PreparedClient",
    "StepTwoResult",
    "ablation_options",
    "adjacency",
    "client_homophily_report",
    "homophily_confidence_score",
    "prepare_client",
    "train_prepared",
]

#: Phase names of an AdaFGL run.
STEP1 = "federated"
STEP2 = "personalize"


#: The ablation switches of spec §5.4 (Tables VI-VII): name -> the options that turn the part off.
ABLATIONS: dict[str, dict[str, Any]] = {
    "w/o K.P.": {"knowledge_preserving": False},
    "w/o T.F.": {"feature_embedding": False},
    "w/o L.M.": {"message_passing": False},
    "w/o L.T.": {"topology_correction": False},
    "w/o HCS": {"adaptive_combination": False},
}


def ablation_options(name: str) -> dict[str, Any]:
    """The option overrides of one ablation of spec §5.4 (``"w/o K.P."``, ``"kp"``, ``"w/o HCS"``, ...)."""
    key = name.strip().lower().replace("w/o", "").replace(".", "").replace(" ", "").replace("_", "")
    for full, opts in ABLATIONS.items():
        if key == full.lower().replace("w/o", "").replace(".", "").replace(" ", ""):
            return dict(opts)
    raise ConfigError(f"unknown AdaFGL ablation {name!r}; valid choices: {', '.join(ABLATIONS)}")


def _check_range(name: str, value: float, lo: float, hi: float, *, lo_open: bool = False) -> None:
    ok = (lo < value if lo_open else lo <= value) and value <= hi
    if not ok:
        bracket = "(" if lo_open else "["
        raise ConfigError(f"adafgl option {name}={value!r} is out of range; valid: {bracket}{lo}, {hi}]")


@dataclass(frozen=True)
class AdaFGLOptions:
    """Options of AdaFGL; defaults are the spec's recommendations ([R], §4 and §7).

    Step 1 (the extractor) uses the run's model and training settings (``model``: GCN, hidden 64;
    ``train``: rounds 100, local epochs 5, Adam 1e-2 / 5e-4, fresh optimiser per round). The options here
    are step 1's FedAvg weight and step 2.

    Args:
        weighting: FedAvg weight :math:`n_i` of eq. (4): ``"nodes"`` (:math:`|V_i|`, [C1][C2], §7.6),
            ``"train"`` (train-node count) or ``"uniform"``.
        param_bound: public clip range of every extractor parameter in the upload (default: 16.0).
        alpha: :math:`\\alpha` of eq. (5) (default: 0.5).
        eq6: normalisation of eq. (6): ``"cosine"`` ([R], cosine similarity, zero diagonal) or ``"literal"``
            (:math:`P \\oslash dd^\\top - \\mathrm{diag}(P)` with degree :math:`d`).
        sim_threshold: binarise the cosine similarity at this value ([C1]: 0.999); ``None`` keeps weighted
            cosine values. Unused with ``eq6="literal"``.
        sim_topk: keep at most this many similar nodes per row (``None``: no cap below
            ``dense_max_nodes``).
        dense_max_nodes: clients above this size never materialise an ``N x N`` matrix: the similarity is
            computed in chunks and capped to ``sim_topk or large_client_topk`` per row, and message
            passing runs on the sparse support (§7.12).
        large_client_topk: the per-row cap used above ``dense_max_nodes`` when ``sim_topk`` is ``None``.
        sim_chunk_size: rows per chunk of the similarity computation.
        num_hops: :math:`K_p` of eq. (7); ``k = 0..K_p`` are concatenated (default: 3).
        hidden: hidden width of the step-2 MLPs (default: 64).
        dropout: step-2 dropout (default: 0.5).
        beta: :math:`\\beta` of eq. (11) (default: 0.2).
        lm_init: :math:`\\tilde P^{(0)}` of eq. (11): ``"similarity"`` (the binarised :math:`B`, [C1][C2]) or
            ``"corrected"`` (the full :math:`\\tilde P`, as in the paper).
        he_input: input of the message MLP: ``"smoothed_feats"`` ([C1][C2]) or ``"H_tilde"`` (paper).
        compat_c1_scaling: [C1]'s non-monotone negative branch :math:`-R/\\mu` (§7.16).
        knowledge_target: :math:`\\hat X` of eq. (8): ``"probs"`` (:math:`\\hat P`, [C1][C2]) or
            ``"logits"`` (the extractor's logits).
        knowledge_loss: ``"mse"`` (mean over nodes and classes, [C1][C2]) or ``"frobenius"`` (eq. (8)).
        compat_double_softmax: eq. (9) with :math:`\\mathrm{softmax}(\\hat P)` as [C1][C2] compute it.
        loss: ``"branches"`` (CE on each branch + knowledge, [C2]) or ``"mixture"`` (NLL of :math:`\\hat Y`).
        lp_steps: :math:`K` of eq. (15) (paper 5, code 10).
        lp_kappa: :math:`\\kappa` of eq. (15) (default: 0.5).
        lp_reinject: add :math:`Y^0` back on visible train nodes after every LP step ([C1]).
        hcs_mask_prob: fraction of train nodes hidden for HCS (default: 0.5).
        hcs_num_masks: average HCS over this many masks (default: 1).
        combine: ``"soft"`` (eq. (17), paper and [C2]) or ``"hard"`` ([C1]: one module by HCS threshold).
        hcs_hard_threshold: the threshold of ``combine="hard"`` (default: 0.9).
        epochs: step-2 epochs (default: 200).
        lr: step-2 Adam learning rate (default: 0.01).
        weight_decay: step-2 Adam weight decay (default: 5e-4).
        selection: ``"best_val"`` (keep the best-validation epoch, [C1]) or ``"last"``.
        extractor: the step-1 model step 2 starts from: ``"best_val"`` (the global model of the evaluated
            round with the best node-weighted validation accuracy, as [C1] saves and reloads it; evaluate every
            round, ``train.eval_every = 1``, to match it) or ``"last"`` (the final broadcast). Choosing the
            round needs each evaluated round's validation accuracy, a sum of two counts per client.
        knowledge_preserving: ablation "w/o K.P." when False (drop eq. (8)).
        feature_embedding: ablation "w/o T.F." when False (drop :math:`H_f`).
        message_passing: ablation "w/o L.M." when False (drop :math:`H_m`).
        topology_correction: ablation "w/o L.T." when False (:math:`\\tilde P = A`).
        adaptive_combination: ablation "w/o HCS" when False (:math:`\\hat Y = (\\hat Y_{ho}+\\hat Y_{he})/2`).
    """

    weighting: Literal["nodes", "train", "uniform"] = "nodes"
    param_bound: float = 16.0
    alpha: float = 0.5
    eq6: Literal["cosine", "literal"] = "cosine"
    sim_threshold: float | None = 0.999
    sim_topk: int | None = None
    dense_max_nodes: int = 4096
    large_client_topk: int = 64
    sim_chunk_size: int = 1024
    num_hops: int = 3
    hidden: int = 64
    dropout: float = 0.5
    beta: float = 0.2
    lm_init: Literal["similarity", "corrected"] = "similarity"
    he_input: Literal["smoothed_feats", "H_tilde"] = "smoothed_feats"
    compat_c1_scaling: bool = False
    knowledge_target: Literal["probs", "logits"] = "probs"
    knowledge_loss: Literal["mse", "frobenius"] = "mse"
    compat_double_softmax: bool = False
    loss: Literal["branches", "mixture"] = "branches"
    lp_steps: int = 5
    lp_kappa: float = 0.5
    lp_reinject: bool = False
    hcs_mask_prob: float = 0.5
    hcs_num_masks: int = 1
    combine: Literal["soft", "hard"] = "soft"
    hcs_hard_threshold: float = 0.9
    epochs: int = 200
    lr: float = 0.01
    weight_decay: float = 5e-4
    selection: Literal["best_val", "last"] = "best_val"
    extractor: Literal["best_val", "last"] = "best_val"
    knowledge_preserving: bool = True
    feature_embedding: bool = True
    message_passing: bool = True
    topology_correction: bool = True
    adaptive_combination: bool = True

    def __post_init__(self) -> None:
        _check_range("param_bound", self.param_bound, 0.0, float("inf"), lo_open=True)
        _check_range("alpha", self.alpha, 0.0, 1.0)
        _check_range("beta", self.beta, 0.0, 1.0)
        _check_range("dropout", self.dropout, 0.0, 1.0)
        if self.dropout >= 1.0:
            raise ConfigError(f"adafgl option dropout={self.dropout!r} is out of range; valid: [0, 1)")
        if self.sim_threshold is not None:
            _check_range("sim_threshold", self.sim_threshold, -1.0, 1.0)
        for name in ("sim_topk",):
            v = getattr(self, name)
            if v is not None and v < 1:
                raise ConfigError(f"adafgl option {name}={v!r} must be a positive integer or None")
        for name in ("dense_max_nodes", "large_client_topk", "sim_chunk_size", "hidden", "hcs_num_masks"):
            if getattr(self, name) < 1:
                raise ConfigError(f"adafgl option {name}={getattr(self, name)!r} must be a positive integer")
        for name in ("num_hops", "lp_steps", "epochs"):
            if getattr(self, name) < 0:
                raise ConfigError(f"adafgl option {name}={getattr(self, name)!r} must be >= 0")
        _check_range("lp_kappa", self.lp_kappa, 0.0, 1.0)
        _check_range("hcs_mask_prob", self.hcs_mask_prob, 0.0, 1.0, lo_open=True)
        if self.hcs_mask_prob >= 1.0:
            raise ConfigError(
                f"adafgl option hcs_mask_prob={self.hcs_mask_prob!r} is out of range; valid: (0, 1)"
            )
        _check_range("hcs_hard_threshold", self.hcs_hard_threshold, 0.0, 1.0)
        _check_range("lr", self.lr, 0.0, float("inf"), lo_open=True)
        _check_range("weight_decay", self.weight_decay, 0.0, float("inf"))

    def replace(self, **changes: Any) -> AdaFGLOptions:
        """A validated copy with some options changed."""
        return dataclasses.replace(self, **changes)


@register_algorithm
class AdaFGL(FedAvg):
    r"""AdaFGL (see the module docstring): FedAvg of the knowledge extractor, then local personalisation.

    Phases: ``federated`` (``train.rounds`` rounds of FedAvg through the protocol; uploads
    :math:`n_k \mathrm{clip}_B(W_k)` per parameter tensor and the count :math:`n_k`) and ``personalize``
    (local only, no sum: the engine calls no protocol, so its transcript is empty). Evaluation in the
    federated phase scores the extractor (the FedAvg global model); the final metrics are those of the
    personalised predictions :math:`\hat Y` (returned as :math:`\log\hat Y`).

    Step 1 is the engine's FedAvg (schema, batched local training, server step); only the weight
    :math:`n_k = |V_k|` (``weighting="nodes"``, the spec's choice) is added here.

    Args:
        setting: the public facts of the run (the extractor is ``setting.model``: GCN in the paper).
        options: :class:`AdaFGLOptions` or a mapping validated against it.
    """

    name = "adafgl"
    dp_blocks = False  # step 1 uploads weighted weights; DP-FedAvg deltas are not wired into AdaFGL
    Options = AdaFGLOptions
    batched = True

    def prox_mu(self) -> float:
        return 0.0

    def phases(self, train: Any) -> Sequence[Phase]:
        return (Phase(STEP1, kind="rounds", rounds=train.rounds), Phase(STEP2, kind="local"))

    # ------------------------------------------------------------------ step 1 ----------------------------

    def _weight(self, client: Client) -> int:
        if self.options.weighting == "uniform":
            return 1
        return client.num_nodes if self.options.weighting == "nodes" else client.num_train

    def client_steps(self, clients: Sequence[Client], rs: RoundState) -> dict[int, Any]:
        """FedAvg's client step with the weight of eq. (4): ``{w.<param>: n_k clip_B(W_k), n: n_k}``."""
        glob = {n: v.to(clients[0].device) for n, v in rs.broadcast.items()}
        res = self._train(clients, glob, self.setting.train.local_epochs, None, f"{self.name}.train")
        weights = [self._weight(c) for c in clients]
        bound = self.options.param_bound
        out: dict[int, Any] = {c.id: {} for c in clients}
        for n, v in res.params.items():
            w = torch.tensor(weights, dtype=v.dtype, device=v.device).view(-1, *([1] * (v.dim() - 1)))
            for i, part in enumerate((v.clamp(-bound, bound) * w).unbind(0)):
                out[clients[i].id][f"w.{n}"] = part
        for i, c in enumerate(clients):
            c.record_loss(res.losses[i])
            out[c.id]["n"] = torch.tensor([weights[i]], dtype=torch.int64)
        return out

    # ------------------------------------------------------------------ step 2 ----------------------------

    def personalize_clients(self, clients: Sequence[Client], broadcast: Broadcast, phase: Phase) -> None:
        """Step 2 on every client with the chosen extractor (``options.extractor``); sends nothing."""
        if not clients:
            return
        model = self.setting.make_model(generator=torch.Generator().manual_seed(0))  # structure only
        glob = {n: v.to(clients[0].device) for n, v in broadcast.items()}
        logits = predict_shared(model, glob, clients)
        prepared = []
        for c in clients:
            d = c.data
            z = logits[c.id].detach().float()
            prepared.append(
                prepare_client(
                    d.x.float(),
                    d.edge_index,
                    d.y,
                    (d.train_mask, d.val_mask, d.test_mask),
                    torch.softmax(z, dim=1),
                    z,
                    self.options,
                    num_classes=self.setting.num_classes,
                    generator=c.generator,
                    client=c.id,
                )
            )
        results = train_prepared(
            prepared,
            self.options,
            num_classes=self.setting.num_classes,
            generators=[c.generator for c in clients],
            batched=self.setting.train.batched,
            batch_generator=workspace_generator(clients),
        )
        for c, res in zip(clients, results, strict=True):
            c.state["adafgl"] = {
                "probs": res.outcome.probs.detach(),
                "hcs": res.hcs,
                "best_epoch": res.outcome.best_epoch,
                "similarity_edges": res.similarity_edges,
                "dense_message_passing": res.dense_message_passing,
            }

    # ------------------------------------------------------------------ evaluation -------------------------

    def evaluate(
        self, clients: Sequence[Client], broadcast: Broadcast, rs: RoundState
    ) -> dict[int, torch.Tensor]:
        r"""Extractor scores during step 1; :math:`\log\hat Y` of the personalised model after step 2."""
        if rs.phase != STEP2:
            return super().evaluate(clients, broadcast, rs)
        out = {}
        for c in clients:
            st = c.state.get("adafgl")
            if st is None:
                raise TrainingError(
                    f"adafgl: client {c.id} has no step-2 result; the personalize phase did not run"
                )
            out[c.id] = st["probs"].clamp_min(1e-12).log()
        return out

    # ------------------------------------------------------------------ server side: the extractor --------

    def server_evaluated(self, server: Any, metrics: Mapping[str, float], rs: RoundState) -> None:
        r"""Keep the step-1 global model with the best pooled validation accuracy (server side, from sums).

        The accuracy is :math:`\sum_k c_k / \sum_k n_k` of the evaluation sum; the first round wins ties.
        """
        if rs.phase == STEP2:
            return
        acc = float(metrics.get("val_acc_pooled", float("nan")))
        if math.isnan(acc):
            return
        kept = server.get("extractor")
        if kept is None or acc > kept["acc"]:
            server["extractor"] = {
                "acc": acc,
                "params": {n: v.detach().clone() for n, v in rs.broadcast.items()},
            }

    def start_phase(self, server: Any, phase: Phase, broadcast: Broadcast) -> Broadcast:
        """Step 2 starts from the kept extractor (``extractor="best_val"``) or the last global model."""
        kept = server.get("extractor") if isinstance(server, Mapping) else None
        if phase.name == STEP2 and self.options.extractor == "best_val" and kept is not None:
            return dict(kept["params"])
        return broadcast

    def client_report(self, client: Client) -> dict[str, Any]:
        """Client-side diagnostics (spec §6): homophily of the local graph and the client's HCS.

        These are individual values: they stay on the client (or in a simulation's report); the server
        never receives them.
        """
        d = client.data
        rep = client_homophily_report(d.edge_index, d.y, self.setting.num_classes)
        st = client.state.get("adafgl")
        if st is not None:
            rep["hcs"] = st["hcs"]
            rep["step2_best_epoch"] = st["best_epoch"]
            rep["similarity_edges"] = st["similarity_edges"]
        return rep
