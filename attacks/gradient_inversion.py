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
client's real structure. The next hop is simulated too, as rows of zeros: its features never reach a
training node, but its edges set the degrees, hence the GCN/SGC normalisation, of the outermost unknown
nodes (without it the simulated update of the *true* features is not the client's: cosine about 0.995 on
Cora, enough to make the search fail). A GCN's update depends on the features only through the first
layer's inputs :math:`Z = \hat A X` of the nodes within :math:`L-1` hops of a training node, whose rows
span the row space of :math:`\Delta W_1` (SGD); the search runs in that row space when it is large enough
(raw rows in it reach every such :math:`Z`), and with a ``nonneg``/``binary`` prior each training node's raw
row is read back from the fitted :math:`Z` of its neighbours
(:func:`~securefgl.attacks._inversion_analytic.deconvolve_rows`). Without the graph, each training node is
treated as isolated, so SGC/GCN reconstruct the *propagated* features :math:`(S^K X)_i` the model actually
saw (score them against those; ``Reconstruction.extra["propagated"]`` holds the graph-known search's
:math:`Z` rows of the training nodes).

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
    deconvolve_rows,
    recover_label_counts,
)
from securefgl.attacks._inversion_config import InversionConfig, ModelUpdate, Reconstruction, TrainingRecipe
from securefgl.attacks._inversion_model import (
    _first_layer_weights,
    _hops,
    _propagates,
    first_layer_operator,
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
    n, rows, pad, edge_index, train_rows, graph_used = _unknown_rows(model, graph, cfg, n, dev)

    observed = _observed_rows(model, edge_index, train_rows, rows + pad) if graph_used else rows
    support, basis, mask, anchors, pool = _search_space(
        update, model, recipe, cfg, firsts, num_features, rows, observed, graph_used, dev
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
        pad,
    )
    value, x_full, labels, counts, anchors = _search(problem, update, counts, anchors, progress)
    x_train, propagated = _training_rows(model, cfg, x_full, edge_index, train_rows, graph_used)
    return Reconstruction(
        x=x_train.detach().cpu().clone(),
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
            "deconvolved": propagated is not None and cfg.deconvolve and cfg.prior != "none",
            "propagated": None if propagated is None else propagated.detach().cpu().clone(),
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
) -> tuple[int, int, int, Tensor | None, Tensor, bool]:
    """Unknown rows: the training nodes alone, or (graph known) their receptive field.

    With the graph known, the ``K``-hop receptive field is unknown and the next hop is appended as ``pad``
    rows of zeros: their features cannot reach a training node's output, but their edges set the degrees
    of the outermost unknown nodes, so the normalisation (GCN, SGC) is the client's own. Without them the
    simulated update differs from the real one even for the true features.

    Returns:
        ``(n, rows, pad, edge_index, train_rows, graph_used)``: ``edge_index`` spans ``rows + pad`` nodes,
        the unknown rows first.
    """
    edge_index = None
    train_rows = torch.arange(n)
    rows, pad = n, 0
    graph_used = False
    if graph is not None and cfg.graph_known and _propagates(model):
        from torch_geometric.utils import k_hop_subgraph

        tidx = graph.train_index
        if tidx.numel() != n:
            n = int(tidx.numel())
        hops = _hops(model)
        inner = k_hop_subgraph(tidx, hops, graph.edge_index, num_nodes=graph.num_nodes)[0]
        if inner.numel() > cfg.max_unknown_nodes:
            raise AttackNotApplicableError(
                f"the receptive field holds {inner.numel()} nodes > max_unknown_nodes={cfg.max_unknown_nodes}"
            )
        outer = k_hop_subgraph(tidx, hops + 1, graph.edge_index, num_nodes=graph.num_nodes)[0]
        outer = outer[~torch.isin(outer, inner)]
        order = torch.cat([inner, outer])
        pos = torch.full((graph.num_nodes,), -1, dtype=torch.long)
        pos[order] = torch.arange(order.numel())
        src, dst = pos[graph.edge_index[0]], pos[graph.edge_index[1]]
        inside = int(inner.numel())
        keep = (src >= 0) & (dst >= 0) & ((src < inside) | (dst < inside))  # edges that set a needed degree
        edge_index = torch.stack([src[keep], dst[keep]]).to(dev)
        train_rows, rows, pad, graph_used = pos[tidx], inside, int(outer.numel()), True
    train_rows = train_rows.to(dev)
    return n, rows, pad, edge_index, train_rows, graph_used


def _observed_rows(
    model: torch.nn.Module, edge_index: Tensor | None, train_rows: Tensor, total: int
) -> int | None:
    """Rows whose first-layer input :math:`P X` the update constrains: a GCN's nodes within ``L - 1`` hops of a
    training node. ``None`` for other models (SAGE: no single propagation; SGC: no deconvolution of its
    propagated rows yet), whose graph-known search stays in the raw feature space."""
    if type(model).__name__.lower() != "gcn" or edge_index is None:
        return None
    from torch_geometric.utils import k_hop_subgraph

    return int(k_hop_subgraph(train_rows, _hops(model) - 1, edge_index, num_nodes=total)[0].numel())


def _training_rows(
    model: torch.nn.Module,
    cfg: InversionConfig,
    x_full: Tensor,
    edge_index: Tensor | None,
    train_rows: Tensor,
    graph_used: bool,
) -> tuple[Tensor, Tensor | None]:
    r"""The training rows of the reconstruction, deconvolved (graph-known GCN, non-negative priors).

    The update of a graph-known GCN constrains the first layer's inputs :math:`(\hat A X)_j` of the nodes
    near the training nodes, not the raw rows, which the search leaves wherever its start put them within
    the many raw matrices with the same propagation. :func:`deconvolve_rows` reads each training node's
    raw row back from the fitted propagated rows of its neighbours.

    Returns:
        ``(x, propagated)``: ``(n, F)`` training rows and their propagated rows (``None`` when the first
        layer is not one propagation of the features).
    """
    x = x_full[train_rows]
    if not graph_used or edge_index is None:
        return x, None
    op = first_layer_operator(model, edge_index, x_full.shape[0])
    if op is None:
        return x, None
    with torch.no_grad():
        z = op @ x_full
        if cfg.deconvolve and cfg.prior != "none":
            from torch_geometric.utils import k_hop_subgraph

            near = k_hop_subgraph(train_rows, _hops(model) - 1, edge_index, num_nodes=x_full.shape[0])[0]
            observed = torch.zeros(x_full.shape[0], dtype=torch.bool, device=x_full.device)
            observed[near] = True
            cap = 1.0 if cfg.prior == "binary" else None
            x = deconvolve_rows(z, op, train_rows, observed, cap=cap)
    return x, z[train_rows]


def _search_space(
    update: ModelUpdate,
    model: torch.nn.Module,
    recipe: TrainingRecipe,
    cfg: InversionConfig,
    firsts: list[str],
    num_features: int,
    rows: int,
    observed: int | None,
    graph_used: bool,
    dev: torch.device,
) -> tuple[Tensor | None, Tensor | None, Tensor | None, Tensor, Tensor]:
    """Where the features are searched: support, row-space basis, exact rows to fix and candidate starts.

    Returns:
        ``(support, basis, mask, anchors, pool)``: the ``(F,)`` boolean support and its 0/1 ``mask`` on
        ``dev``, the basis on ``dev``, the rows :func:`bias_candidates` proves exact and the other candidates.
    """
    # Graph known: the row space holds the first-layer inputs P X of the ``observed`` rows, not the raw rows;
    # raw rows in it still reach every such P X (the least-norm solution of P X = Z lies in Z's row space).
    need = rows if not graph_used else observed
    support, basis = _support_and_basis(update, firsts, num_features, need or rows, cfg, recipe)
    if graph_used and observed is None:
        basis = None  # the row space bounds the propagated rows, which only GCN's search deconvolves
    mask = support.to(dev, torch.float32) if support is not None else None
    basis = basis.to(dev) if basis is not None else None
    anchors = torch.empty(0, num_features, device=dev)
    pool = torch.empty(0, num_features, device=dev)
    if cfg.anchors and not graph_used and recipe.optimizer == "sgd":
        cand, reps = bias_candidates(update, model, num_features)
        anchors = cand[reps >= 2][:rows].to(dev)
        pool = cand[reps < 2].to(dev)
    return support, basis, mask, anchors, pool
