"""O-pFGL client-side statistics: propagation, homophily, label propagation, HRE and the class sums.

Internal module of the client half of :mod:`securefgl.algorithms.opfgl` (spec ``shared/specs/opfgl.md``
§2.1-2.5). Every function here is pure tensor math on one client's local graph; nothing leaves the client
except the output of :func:`class_sums`, which is a contribution to a secure sum.

Paper: Yan et al., *Towards Federated Graph Learning in One-shot Communication* (O-pFGL),
https://arxiv.org/abs/2411.11304
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from securefgl.errors import ConfigError, NonFiniteError

__all__ = [
    "ClientStatistics",
    "accumulated_class_homophily",
    "class_sums",
    "client_statistics",
    "clip_features",
    "degree",
    "distillation_factors",
    "gcn_operator",
    "label_propagation",
    "node_homophily",
    "propagate_features",
    "reliable_nodes",
]


def _check_edge_index(edge_index: Tensor, num_nodes: int) -> None:
    if edge_index.dim() != 2 or edge_index.size(0) != 2:
        raise ConfigError(f"edge_index must have shape (2, E), got {tuple(edge_index.shape)}")
    if edge_index.numel() and (int(edge_index.min()) < 0 or int(edge_index.max()) >= num_nodes):
        raise ConfigError(
            f"edge_index refers to nodes outside [0, {num_nodes}): "
            f"min {int(edge_index.min())}, max {int(edge_index.max())}"
        )


def gcn_operator(
    edge_index: Tensor,
    num_nodes: int,
    *,
    edge_weight: Tensor | None = None,
    self_loops: bool = True,
) -> Tensor:
    r"""The symmetric-normalised adjacency as a sparse ``(N, N)`` COO tensor.

    .. math::
        \tilde A = \tilde D^{-1/2}(A + I)\tilde D^{-1/2} \quad (\texttt{self\_loops=True}),\qquad
        \hat A = D^{-1/2} A D^{-1/2} \quad (\texttt{self\_loops=False}).

    Existing self loops are dropped before the identity is added; a node of degree zero gets a zero
    row (no ``inf``). As in PyG's ``gcn_norm``, edge ``(s, t)`` is the entry ``[t, s]`` and degrees are
    weighted in-degrees (the same thing for an undirected graph with symmetric weights).

    Args:
        edge_index: ``(2, E)`` edges (both directions for an undirected graph).
        num_nodes: ``N``.
        edge_weight: optional ``(E,)`` weights (default: ones).
        self_loops: add ``I`` before normalising (default: ``True``).

    Shapes:
        edge_index ``(2, E)`` -> sparse ``(N, N)``.
    """
    _check_edge_index(edge_index, num_nodes)
    # PyG convention (flow source -> target): edge (s, t) is entry [t, s]; degrees are in-degrees.
    row, col = edge_index[1], edge_index[0]
    weight = (
        torch.ones(row.numel(), dtype=torch.float32, device=edge_index.device)
        if edge_weight is None
        else edge_weight.to(torch.float32)
    )
    keep = row != col
    row, col, weight = row[keep], col[keep], weight[keep]
    if self_loops:
        loop = torch.arange(num_nodes, device=edge_index.device)
        row = torch.cat([row, loop])
        col = torch.cat([col, loop])
        weight = torch.cat([weight, torch.ones(num_nodes, dtype=weight.dtype, device=weight.device)])
    deg = torch.zeros(num_nodes, dtype=weight.dtype, device=weight.device).index_add_(0, row, weight)
    inv_sqrt = deg.pow(-0.5)
    inv_sqrt[~torch.isfinite(inv_sqrt)] = 0.0
    values = inv_sqrt[row] * weight * inv_sqrt[col]
    return torch.sparse_coo_tensor(
        torch.stack([row, col]),
        values,
        (num_nodes, num_nodes),
        device=edge_index.device,
        check_invariants=False,
    ).coalesce()


def propagate_features(x: Tensor, edge_index: Tensor, *, hops: int = 1) -> Tensor:
    r"""Concatenated multi-hop propagated features (Eq. 5).

    .. math:: X^{prop} = [X \,\|\, \tilde A X \,\|\, \dots \,\|\, \tilde A^h X]

    Args:
        x: ``(N, F)`` node features.
        edge_index: ``(2, E)`` local edges.
        hops: ``h >= 0`` (default: 1).

    Shapes:
        x ``(N, F)`` -> ``(N, (h+1) F)``.
    """
    if hops < 0:
        raise ConfigError(f"hops must be >= 0, got {hops!r}")
    op = gcn_operator(edge_index, x.size(0))
    out = [x]
    cur = x
    for _ in range(hops):
        cur = torch.sparse.mm(op, cur)
        out.append(cur)
    return torch.cat(out, dim=1)


def degree(edge_index: Tensor, num_nodes: int) -> Tensor:
    """Number of incident edges of each node, ``bincount(edge_index[0])`` (spec §2.1)."""
    return torch.bincount(edge_index[0], minlength=num_nodes)


def node_homophily(edge_index: Tensor, y: Tensor, labeled: Tensor) -> Tensor:
    r"""Node homophily over labelled neighbours (Eq. 1), for every node.

    .. math:: h(v) = \frac{|\{u \in N_v \cap V_L : y_u = y_v\}|}{|N_v \cap V_L|}

    A node with no labelled neighbour gets 0. Values for unlabelled ``v`` are returned but unused.

    Shapes:
        edge_index ``(2, E)``, y ``(N,)``, labeled ``(N,)`` bool -> ``(N,)`` float.
    """
    n = y.size(0)
    src, dst = edge_index[0], edge_index[1]
    keep = labeled[src] & (src != dst)
    src, dst = src[keep], dst[keep]
    total = torch.zeros(n, dtype=torch.float32, device=y.device).index_add_(
        0, dst, torch.ones(dst.numel(), dtype=torch.float32, device=y.device)
    )
    same = torch.zeros(n, dtype=torch.float32, device=y.device).index_add_(
        0, dst, (y[src] == y[dst]).to(torch.float32)
    )
    return torch.where(total > 0, same / total.clamp_min(1.0), torch.zeros_like(total))


def accumulated_class_homophily(h_node: Tensor, y: Tensor, labeled: Tensor, num_classes: int) -> Tensor:
    r"""Accumulated class homophily (Eq. 2): :math:`H(c) = \sum_{u \in V_L, y_u = c} h(u)`.

    Shapes:
        h_node ``(N,)``, y ``(N,)``, labeled ``(N,)`` -> ``(C,)``.
    """
    out = torch.zeros(num_classes, dtype=torch.float32, device=y.device)
    return out.index_add_(0, y[labeled], h_node[labeled].to(torch.float32))


def distillation_factors(class_homophily: Tensor) -> Tensor:
    r"""Class-aware distillation factors (Eq. 3): :math:`w(c) = 1 / (1 + \ln(H(c) + 1))`, so ``H = 0 -> 1``.

    Shapes:
        ``(C,)`` -> ``(C,)``.
    """
    return 1.0 / (1.0 + torch.log1p(class_homophily.clamp_min(0.0)))


def label_propagation(
    edge_index: Tensor,
    y: Tensor,
    labeled: Tensor,
    num_classes: int,
    *,
    num_iters: int = 2,
    alpha: float = 0.9,
) -> Tensor:
    r"""Label propagation (Zhou et al.; the PyG ``LabelPropagation`` form, spec §2.2).

    .. math::
        Y^{t+1} = \mathrm{clamp}_{[0,1]}\big(\alpha \hat A Y^t + (1-\alpha) Y^0\big),\qquad
        \hat A = D^{-1/2} A D^{-1/2}

    with :math:`Y^0` the one-hot labels on labelled nodes and zero elsewhere. Rows whose mass is zero
    after ``T`` steps are set to ``1/C``. The returned rows are *not* normalised.

    Shapes:
        -> ``(N, C)``.
    """
    if num_iters < 0:
        raise ConfigError(f"label-propagation iterations must be >= 0, got {num_iters!r}")
    if not 0.0 <= alpha <= 1.0:
        raise ConfigError(f"label-propagation alpha must be in [0, 1], got {alpha!r}")
    n = y.size(0)
    y0 = torch.zeros(n, num_classes, dtype=torch.float32, device=y.device)
    y0[labeled] = torch.nn.functional.one_hot(y[labeled], num_classes).to(torch.float32)
    op = gcn_operator(edge_index, n, self_loops=False)
    out = y0.clone()
    residual = (1.0 - alpha) * y0
    for _ in range(num_iters):
        out = (alpha * torch.sparse.mm(op, out) + residual).clamp_(0.0, 1.0)
    empty = out.sum(dim=1) <= 0
    out[empty] = 1.0 / num_classes
    return out


def reliable_nodes(
    soft_labels: Tensor,
    deg: Tensor,
    labeled: Tensor,
    class_homophily: Tensor,
    *,
    top_k: int,
    degree_threshold: float,
    confidence_threshold: float,
) -> tuple[Tensor, Tensor]:
    r"""Homophily-guided reliable node expansion, HRE (Eq. 7).

    .. math::
        V_r = \{v \notin V_L : d(v) \ge d_{th} \wedge \bar y_v(c') \ge f_{th}
              \wedge c' \in \mathrm{topK}(H)\},\quad c' = \arg\max_c \tilde y_v(c)

    with :math:`\bar y = \tilde y / \sum_c \tilde y(c)` the normalised LP output. ``top_k = 0`` turns
    HRE off; ``degree_threshold = 0`` turns criterion C1 off.

    Returns:
        ``(mask, pseudo_label)``: boolean ``(N,)`` reliable set and ``(N,)`` argmax classes.
    """
    num_classes = soft_labels.size(1)
    if top_k < 0 or top_k > num_classes:
        raise ConfigError(f"HRE top_k must be in [0, {num_classes}], got {top_k!r}")
    pseudo = soft_labels.argmax(dim=1)
    if top_k == 0:
        return torch.zeros_like(labeled), pseudo
    conf = soft_labels.max(dim=1).values / soft_labels.sum(dim=1).clamp_min(torch.finfo(torch.float32).tiny)
    top = torch.zeros(num_classes, dtype=torch.bool, device=soft_labels.device)
    top[torch.topk(class_homophily, top_k).indices] = True
    mask = (~labeled) & (deg >= degree_threshold) & (conf >= confidence_threshold) & top[pseudo]
    return mask, pseudo


@dataclass
class ClientStatistics:
    """Everything O-pFGL's client step computes before uploading (all local).

    Attributes:
        xprop: ``(N, (h+1)F)`` propagated features, after clipping to the public bound.
        soft_labels: ``(N, C)`` unnormalised LP output ``ỹ`` (used for γ).
        class_homophily: ``(C,)`` accumulated class homophily ``H``.
        w_dist: ``(C,)`` class-aware distillation factors.
        reliable: ``(N,)`` HRE mask; ``pseudo_labels`` its labels.
        sums: the upload (see :func:`class_sums`) plus ``clip``: ``[clipped entries, entries]`` of the
            rows that entered it.
        clip_rate: fraction of all propagated-feature entries clipped to the bound.
    """

    xprop: Tensor
    soft_labels: Tensor
    class_homophily: Tensor
    w_dist: Tensor
    reliable: Tensor
    pseudo_labels: Tensor
    sums: dict[str, Tensor]
    clip_rate: float
    clipped: int


def class_sums(
    xprop: Tensor,
    y: Tensor,
    labeled: Tensor,
    reliable: Tensor,
    pseudo_labels: Tensor,
    num_classes: int,
    *,
    min_count: int = 2,
) -> dict[str, Tensor]:
    r"""The O-pFGL upload as pure per-class sums (spec §2.5).

    With :math:`S^c = V^c_L \cup V^c_r` and :math:`N^c = |S^c|`, a class with :math:`N^c \ge`
    ``min_count`` contributes

    .. math::
        a^c = N^c,\; b^c = \sum_{i \in S^c} x_i,\; q^c = \sum_{i \in S^c} x_i \odot x_i,\;
        e^c = 1,\; o^c = |V^c_L|

    and every other class contributes zeros. Sums are accumulated in float64.

    Returns:
        ``{"count": (C,), "sum": (C, D), "sumsq": (C, D), "contrib": (C,), "orig": (C,)}``.
    """
    if min_count < 1:
        raise ConfigError(f"min_count must be >= 1, got {min_count!r}")
    if not torch.isfinite(xprop).all():
        raise NonFiniteError("propagated features contain NaN/Inf")
    label = torch.where(labeled, y, pseudo_labels)
    member = labeled | reliable
    idx = label[member]
    x = xprop[member].to(torch.float64)
    d = xprop.size(1)
    count = torch.bincount(idx, minlength=num_classes).to(torch.float64)
    s = torch.zeros(num_classes, d, dtype=torch.float64, device=xprop.device).index_add_(0, idx, x)
    sq = torch.zeros(num_classes, d, dtype=torch.float64, device=xprop.device).index_add_(0, idx, x * x)
    orig = torch.bincount(y[labeled], minlength=num_classes).to(torch.float64)
    ok = count >= min_count
    okf = ok.to(torch.float64)
    return {
        "count": count * okf,
        "sum": s * okf[:, None],
        "sumsq": sq * okf[:, None],
        "contrib": okf,
        "orig": orig * okf,
    }


def clip_features(xprop: Tensor, bound: float) -> tuple[Tensor, int]:
    """Clip propagated features to ``[-bound, bound]``; return the clipped tensor and the clip count."""
    if not (bound > 0 and math.isfinite(bound)):
        raise ConfigError(f"feature_bound must be a positive finite number, got {bound!r}")
    clipped = int((xprop.abs() > bound).sum())
    return xprop.clamp(-bound, bound), clipped


def client_statistics(
    x: Tensor,
    edge_index: Tensor,
    y: Tensor,
    train_mask: Tensor,
    num_classes: int,
    *,
    hops: int = 1,
    lp_iters: int = 2,
    lp_alpha: float = 0.9,
    top_k: int = 1,
    degree_threshold: float = 0.0,
    confidence_threshold: float = 0.95,
    min_count: int = 2,
    feature_bound: float = 8.0,
) -> ClientStatistics:
    """Run the whole O-pFGL client step 1 (spec §2.1-2.5) on one local graph.

    Args:
        x: ``(N, F)`` features; edge_index ``(2, E)`` local edges; y ``(N,)`` labels (only the
            ``train_mask`` entries are read as labels); train_mask ``(N,)`` bool.
        num_classes: global ``C``.
        hops: propagation depth ``h``.
        lp_iters, lp_alpha: label propagation ``T`` and ``α_LP``.
        top_k, degree_threshold, confidence_threshold: HRE ``K``, ``d_th``, ``f_th``.
        min_count: a class is uploaded only if ``N^c >= min_count`` (after HRE).
        feature_bound: public clip bound ``B`` of the propagated features.
    """
    n = x.size(0)
    if y.size(0) != n or train_mask.size(0) != n:
        raise ConfigError(
            f"x, y and train_mask disagree on the node count: {n}, {y.size(0)}, {train_mask.size(0)}"
        )
    labeled = train_mask.bool()
    if labeled.any() and (int(y[labeled].min()) < 0 or int(y[labeled].max()) >= num_classes):
        raise ConfigError(
            f"labels must lie in [0, {num_classes}), got range [{int(y[labeled].min())}, {int(y[labeled].max())}]"
        )
    raw = propagate_features(x.to(torch.float32), edge_index, hops=hops)
    if not torch.isfinite(raw).all():
        raise NonFiniteError("propagated features contain NaN/Inf (check the input features)")
    xprop, clipped = clip_features(raw, feature_bound)
    h = node_homophily(edge_index, y, labeled)
    hc = accumulated_class_homophily(h, y, labeled, num_classes)
    w = distillation_factors(hc)
    soft = label_propagation(edge_index, y, labeled, num_classes, num_iters=lp_iters, alpha=lp_alpha)
    rel, pseudo = reliable_nodes(
        soft,
        degree(edge_index, n),
        labeled,
        hc,
        top_k=top_k,
        degree_threshold=degree_threshold,
        confidence_threshold=confidence_threshold,
    )
    sums = class_sums(xprop, y, labeled, rel, pseudo, num_classes, min_count=min_count)
    # Clipping of the rows that entered the upload: [clipped entries, entries], summed like the rest.
    label = torch.where(labeled, y, pseudo)
    used = (labeled | rel) & sums["contrib"].bool()[label]
    used_clipped = int((raw[used].abs() > feature_bound).sum())
    sums["clip"] = torch.tensor(
        [float(used_clipped), float(int(used.sum()) * raw.size(1))], dtype=torch.float64
    )
    return ClientStatistics(
        xprop=xprop,
        soft_labels=soft,
        class_homophily=hc,
        w_dist=w,
        reliable=rel,
        pseudo_labels=pseudo,
        sums=sums,
        clip_rate=clipped / max(1, xprop.numel()),
        clipped=clipped,
    )
