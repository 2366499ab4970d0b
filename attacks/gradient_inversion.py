r"""Gradient / update inversion against a client's model update: labels, then the training nodes' features.

Three published attacks, adapted to node classification with GNNs:

* **DLG** (Zhu, Liu, Han, "Deep Leakage from Gradients", NeurIPS 2019, https://arxiv.org/abs/1906.08935):
  optimise dummy inputs (and labels) so that their gradient matches the observed one in Euclidean
  distance.
* **iDLG** (Zhao, Mopuri, Bilen, "iDLG: Improved Deep Leakage from Gradients", 2020,
  https://arxiv.org/abs/2001.02610): the labels come analytically from the last layer. With a mean
  cross-entropy over :math:`n` nodes the bias gradient is :math:`g_b = \frac1n\sum_i (p_i - e_{y_i})`, so
  the label counts are

  .. math::
      \hat n_c = n\,(\bar p_c - g_{b,c}),\qquad \bar p = \tfrac1n \textstyle\sum_i p_i,

  with :math:`\bar p` the model's mean prediction (estimated on the reconstruction and refined once), and
  rounded to integers summing to :math:`n` (largest remainder). For one node this is iDLG's sign rule.
* **Inverting Gradients** (Geiping, Bauermeister, Dröge, Moeller, NeurIPS 2020,
  https://arxiv.org/abs/2003.14053): a cosine objective, many restarts, box/positivity priors, and the
  simulation of several local steps for FedAvg updates.

What the server observes of a FedAvg client is not a gradient but its trained model:
:math:`\Delta_k = w_k - w` after :math:`E` local epochs. The attacker simulates the client's public
training recipe (optimizer, learning rate, epochs; dropout off, since its masks are private) from the
broadcast :math:`w` on dummy nodes :math:`\hat X, \hat y` and minimises

.. math::
    \mathcal L(\hat X) = 1 - \frac{\langle \hat\Delta(\hat X, \hat y), \Delta_k \rangle}
        {\lVert \hat\Delta(\hat X, \hat y) \rVert\,\lVert \Delta_k \rVert}
        \;+\; \lambda_1 \lVert \hat X \rVert_1 \;+\; \lambda_+ \lVert \min(\hat X, 0) \rVert_1

(Euclidean :math:`\lVert \hat\Delta - \Delta_k \rVert^2` for DLG) with L-BFGS (or signed Adam) from
several random starts. Two facts about the first layer :math:`W_1` (input dimension :math:`F`) make the
search tractable and are used as priors:

* *support*: a column :math:`f` of :math:`\Delta W_1` is exactly zero when feature :math:`f` is zero at every
  node the update depends on (bag-of-words: the client's vocabulary leaks exactly);
* *subspace* (SGD recipes): every row of :math:`\Delta W_1 = -\eta \sum_t \sum_i \delta_{i,t} x_i^\top`
  lies in :math:`\mathrm{span}\{x_i\}`, so the dummy features are searched in the row space of
  :math:`\Delta W_1` (computed by SVD), which for an MLP with :math:`n <` hidden width is exactly that span.

Graph models. With the graph known (:class:`~securefgl.attacks.views.GraphKnowledge`), the unknowns are
the features of every node in the training nodes' receptive field and the attacker runs the model on the
client's real structure; without it, each training node is treated as isolated, so SGC/GCN reconstruct
the *propagated* features :math:`(S^K X)_i` the model actually saw (reported separately for SGC).

Metrics (after optimal matching of reconstructed to true training nodes by feature cosine, with
:func:`scipy.optimize.linear_sum_assignment`): label accuracy (= multiset overlap of the label counts for
the label-only attack), feature cosine, MSE, and for binary features the F1 of the recovered non-zeros
(a reconstructed entry counts as non-zero above half of its row's maximum).

Shapes:
    ``n`` training nodes of the target, ``F`` features, ``C`` classes; updates have the model's parameter
    shapes.

Layout: the inputs and the result (:mod:`~securefgl.attacks._inversion_config`), the model side and the
simulated local training (``_inversion_model``), the closed forms (``_inversion_analytic``: iDLG counts,
first-layer rows, support and row space), the optimisation loop (``_inversion_optimise``), scoring
(``_inversion_scoring``) and reading updates out of an adversary view (``_inversion_views``); this module
holds :func:`invert_update`, which puts them together.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from securefgl.attacks._inversion_analytic import (
    _round_counts as _round_counts,
)
from securefgl.attacks._inversion_analytic import (
    _support_and_basis,
    bias_candidates,
    recover_label_counts,
)
from securefgl.attacks._inversion_config import InversionConfig, ModelUpdate, Reconstruction, TrainingRecipe
from securefgl.attacks._inversion_model import (
    _first_layer_weights,
    _hops,
    _propagates,
    last_layer_bias,
    model_forward,
    simulate_update,
)
from securefgl.attacks._inversion_optimise import _Problem, _search
from securefgl.attacks._inversion_scoring import label_accuracy, score_reconstruction
from securefgl.attacks._inversion_views import (
    MODEL_AVERAGING,
    check_applicable,
    update_from_upload,
    updates_in_view,
)
from securefgl.errors import AttackNotApplicableError

__all__ = [
    "MODEL_AVERAGING",
    "InversionConfig",
    "ModelUpdate",
    "Reconstruction",
    "TrainingRecipe",
    "bias_candidates",
    "check_applicable",
    "invert_update",
    "label_accuracy",
    "last_layer_bias",
    "model_forward",
    "recover_label_counts",
    "score_reconstruction",
    "simulate_update",
    "update_from_upload",
    "updates_in_view",
]


def invert_update(
    update: ModelUpdate,
    model: torch.nn.Module,
    recipe: TrainingRecipe,
    *,
    num_features: int,
    num_classes: int,
    num_nodes: int | None = None,
    graph: Any | None = None,
    config: InversionConfig | None = None,
    generator: torch.Generator | None = None,
    progress: Callable[[int, int], None] | None = None,
    device: torch.device | str = "cpu",
) -> Reconstruction:
    """Reconstruct the training nodes (labels and features) behind ``update``.

    Args:
        update: The observed update.
        model: The public architecture (a securefgl model, e.g. from ``build_model``).
        recipe: The client's public training recipe.
        num_features: ``F``.
        num_classes: ``C``.
        num_nodes: Training nodes ``n`` (default: ``update.num_nodes``, else the rank of the first-layer
            update).
        graph: :class:`~securefgl.attacks.views.GraphKnowledge` of the target, used when
            ``config.graph_known`` and the model propagates.
        config: Reconstruction settings (default: :class:`InversionConfig`).
        generator: Seeds the random starts (default: a fixed seed 0: the attack is deterministic).
        progress: Called as ``progress(done, total)`` after every restart.
        device: Where the simulation runs (``"cuda"`` on a GPU); results come back on the CPU.

    Raises:
        AttackNotApplicableError: the update does not match the architecture, or the receptive field is
            larger than ``config.max_unknown_nodes``.
    """
    cfg = config or InversionConfig()
    gen = generator or torch.Generator().manual_seed(0)
    t0 = time.perf_counter()
    keys = [k for k, _ in model.named_parameters()]
    missing = [k for k in keys if k not in update.delta or k not in update.base]
    if missing:
        raise AttackNotApplicableError(
            f"the update does not match the {type(model).__name__} architecture: missing {missing[:4]}"
        )
    dev = torch.device(device)
    model = model.to(dev)
    obs = {k: update.delta[k].detach().to(dev, torch.float32) for k in keys}
    base = {k: update.base[k].detach().to(dev, torch.float32) for k in keys}
    if not all(torch.isfinite(v).all() for v in obs.values()):
        raise AttackNotApplicableError("the update holds non-finite values")
    firsts = _first_layer_weights(model, num_features)

    n = _num_nodes(num_nodes, update, obs, firsts, num_features)
    n, rows, edge_index, train_rows, graph_used = _unknown_rows(model, graph, cfg, n, dev)

    support, basis, mask, anchors, pool = _search_space(
        update, model, recipe, cfg, firsts, num_features, rows, graph_used, dev
    )
    counts = recover_label_counts(update, model, recipe, num_classes, num_nodes=n)
    problem = _Problem(
        model,
        base,
        obs,
        keys,
        recipe,
        n,
        num_classes,
        rows,
        num_features,
        edge_index,
        train_rows,
        basis,
        mask,
        pool,
        cfg,
        gen,
        dev,
    )
    value, x_full, labels, counts, anchors = _search(problem, update, counts, anchors, progress)
    return Reconstruction(
        x=x_full[train_rows].detach().cpu().clone(),
        y=labels.cpu().clone(),
        label_counts=counts.cpu(),
        objective=value,
        graph_used=graph_used,
        seconds=time.perf_counter() - t0,
        extra={
            "unknown_nodes": rows,
            "subspace_rank": 0 if basis is None else int(basis.shape[0]),
            "exact_rows": int(anchors.shape[0]),
            "candidate_rows": int(pool.shape[0]),
            "support": None if support is None else int(support.sum()),
            "labels": cfg.labels,
        },
    )


def _num_nodes(
    num_nodes: int | None,
    update: ModelUpdate,
    obs: dict[str, Tensor],
    firsts: list[str],
    num_features: int,
) -> int:
    """``n``: as given, else as the update reveals it, else the rank of the first-layer update."""
    n = num_nodes if num_nodes is not None else update.num_nodes
    if n is None:
        w = torch.cat([obs[k].reshape(-1, num_features) for k in firsts], 0) if firsts else None
        n = int(torch.linalg.matrix_rank(w.double()).item()) if w is not None else 1
    n = max(1, int(n))
    return n


def _unknown_rows(
    model: torch.nn.Module, graph: Any | None, cfg: InversionConfig, n: int, dev: torch.device
) -> tuple[int, int, Tensor | None, Tensor, bool]:
    """Unknown rows: the training nodes alone, or (graph known) their receptive field.

    Returns:
        ``(n, rows, edge_index, train_rows, graph_used)``.
    """
    edge_index = None
    train_rows = torch.arange(n)
    rows = n
    graph_used = False
    if graph is not None and cfg.graph_known and _propagates(model):
        from torch_geometric.utils import k_hop_subgraph

        tidx = graph.train_index
        if tidx.numel() != n:
            n = int(tidx.numel())
        subset, sub_ei, mapping, _ = k_hop_subgraph(
            tidx, _hops(model), graph.edge_index, relabel_nodes=True, num_nodes=graph.num_nodes
        )
        if subset.numel() > cfg.max_unknown_nodes:
            raise AttackNotApplicableError(
                f"the receptive field holds {subset.numel()} nodes > max_unknown_nodes={cfg.max_unknown_nodes}"
            )
        edge_index, train_rows, rows, graph_used = sub_ei.to(dev), mapping.to(dev), int(subset.numel()), True
    train_rows = train_rows.to(dev)
    return n, rows, edge_index, train_rows, graph_used


def _search_space(
    update: ModelUpdate,
    model: torch.nn.Module,
    recipe: TrainingRecipe,
    cfg: InversionConfig,
    firsts: list[str],
    num_features: int,
    rows: int,
    graph_used: bool,
    dev: torch.device,
) -> tuple[Tensor | None, Tensor | None, Tensor | None, Tensor, Tensor]:
    """Where the features are searched: support, row-space basis, exact rows to fix and candidate starts.

    Returns:
        ``(support, basis, mask, anchors, pool)``: the ``(F,)`` boolean support and its 0/1 ``mask`` on
        ``dev``, the basis on ``dev``, the rows :func:`bias_candidates` proves exact and the other candidates.
    """
    support, basis = _support_and_basis(update, firsts, num_features, rows, cfg, recipe)
    if graph_used:
        basis = None  # the row space bounds the aggregated rows, not every node of the receptive field
    mask = support.to(dev, torch.float32) if support is not None else None
    basis = basis.to(dev) if basis is not None else None
    anchors = torch.empty(0, num_features, device=dev)
    pool = torch.empty(0, num_features, device=dev)
    if cfg.anchors and not graph_used and recipe.optimizer == "sgd":
        cand, reps = bias_candidates(update, model, num_features)
        anchors = cand[reps >= 2][:rows].to(dev)
        pool = cand[reps < 2].to(dev)
    return support, basis, mask, anchors, pool
