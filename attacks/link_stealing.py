r"""Link stealing from a released GNN's posteriors (He, Jia, Backes, Gong, Zhang, USENIX Security 2021).

Stealing Links from Graph Neural Networks, https://arxiv.org/abs/2005.02131. *Attack-0* (unsupervised,
black-box): an adversary that can query the released model's posteriors for nodes of a graph scores a node
pair by how similar their posteriors are, because a GNN mixes the features of linked nodes:

.. math::
    s(u, v) = -\,d\big(f(u), f(v)\big), \qquad d \in \{\text{correlation}, \text{cosine},
    \text{euclidean}, \text{chebyshev}, \text{braycurtis}, \text{canberra}, \text{cityblock},
    \text{sqeuclidean}\}.

The paper reports the AUC on balanced edge/non-edge pairs (flipped when below 0.5, since an unsupervised
attacker does not know the direction). Here the released model is applied to each client's own graph, as it
would be deployed, and the pairs are the clients' edges against as many sampled non-edges of the same
clients. Secure aggregation does not change the released model, so it does not change this attack; only
noise in the model (DP) or in the structure can.

Metrics: ROC-AUC (chance 0.5), precision at k (the fraction of true edges among the ``k`` most similar
pairs; chance: the edge fraction of the pairs, 0.5 on balanced pairs).

Shapes:
    posteriors ``(N, C)``; pairs ``(2, M)``; labels ``(M,)``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from torch import Tensor

from securefgl.attacks._common import roc_summary
from securefgl.errors import AttackNotApplicableError, ConfigError

__all__ = [
    "DISTANCES",
    "balanced_pairs",
    "link_stealing",
    "posterior_distance",
    "precision_at_k",
]

#: Attack-0's distance metrics (scipy.spatial.distance names).
DISTANCES = (
    "correlation",
    "cosine",
    "euclidean",
    "chebyshev",
    "braycurtis",
    "canberra",
    "cityblock",
    "sqeuclidean",
)


def posterior_distance(a: Tensor, b: Tensor, metric: str = "correlation") -> Tensor:
    """Row-wise distance between posteriors ``a`` and ``b`` (both ``(M, C)``), vectorised.

    Raises:
        ConfigError: unknown metric (the valid ones are listed).
    """
    a = a.to(torch.float64)
    b = b.to(torch.float64)
    if metric == "correlation":
        ac, bc = a - a.mean(1, keepdim=True), b - b.mean(1, keepdim=True)
        num = (ac * bc).sum(1)
        den = ac.norm(dim=1) * bc.norm(dim=1)
        return 1 - num / den.clamp(min=1e-30)
    if metric == "cosine":
        return 1 - (a * b).sum(1) / (a.norm(dim=1) * b.norm(dim=1)).clamp(min=1e-30)
    if metric == "euclidean":
        return (a - b).norm(dim=1)
    if metric == "sqeuclidean":
        return ((a - b) ** 2).sum(1)
    if metric == "chebyshev":
        return (a - b).abs().amax(1)
    if metric == "cityblock":
        return (a - b).abs().sum(1)
    if metric == "braycurtis":
        return (a - b).abs().sum(1) / (a + b).abs().sum(1).clamp(min=1e-30)
    if metric == "canberra":
        return ((a - b).abs() / (a.abs() + b.abs()).clamp(min=1e-30)).sum(1)
    raise ConfigError(f"unknown distance {metric!r}; valid: {', '.join(DISTANCES)}")


def balanced_pairs(
    edge_index: Tensor,
    num_nodes: int,
    *,
    generator: torch.Generator,
    max_pairs: int | None = None,
    groups: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """Every undirected edge (at most ``max_pairs``) and as many uniformly sampled non-edges.

    Args:
        edge_index: ``(2, E)`` edges (both directions or one).
        num_nodes: ``N``.
        generator: Seeds the sampling.
        max_pairs: Subsample the edges to at most this many (default: all).
        groups: ``(N,)`` group of every node (a client); non-edges are then drawn within groups, as edges
            are (so a pair's group says nothing).

    Returns:
        ``(pairs (2, 2M), labels (2M,))``, edges first.
    """
    ei = edge_index.to(torch.long).cpu()
    u, v = torch.minimum(ei[0], ei[1]), torch.maximum(ei[0], ei[1])
    keep = u != v
    key = torch.unique(u[keep] * num_nodes + v[keep])
    if key.numel() == 0:
        raise AttackNotApplicableError("the graph has no edge to steal")
    if max_pairs is not None and key.numel() > max_pairs:
        key = key[torch.randperm(key.numel(), generator=generator)[:max_pairs]]
    pos = torch.stack([key // num_nodes, key % num_nodes])
    m = pos.shape[1]
    existing = set(torch.unique(u * num_nodes + v).tolist())
    neg: list[tuple[int, int]] = []
    if groups is not None:
        g = groups.to(torch.long).cpu()
        members = {int(c): torch.nonzero(g == c).flatten() for c in torch.unique(g).tolist()}
        src_groups = g[pos[0]]
    attempts = 0
    while len(neg) < m and attempts < 50 * m + 1000:
        attempts += 1
        if groups is not None:
            grp = int(src_groups[len(neg) % m])
            pool = members[grp]
            if pool.numel() < 2:
                continue
            i, j = pool[torch.randint(pool.numel(), (2,), generator=generator)].tolist()
        else:
            i, j = torch.randint(num_nodes, (2,), generator=generator).tolist()
        if i == j:
            continue
        a, b = min(i, j), max(i, j)
        k = a * num_nodes + b
        if k in existing:
            continue
        existing.add(k)
        neg.append((a, b))
    if len(neg) < m:
        pos = pos[:, : len(neg)]
        m = len(neg)
    negt = torch.tensor(neg, dtype=torch.long).T.reshape(2, -1)
    pairs = torch.cat([pos, negt], 1)
    labels = torch.cat([torch.ones(m, dtype=torch.long), torch.zeros(m, dtype=torch.long)])
    return pairs, labels


def precision_at_k(labels: Any, scores: Any, k: int) -> float:
    """Fraction of positives among the ``k`` highest scores."""
    y = np.asarray(labels).ravel()
    s = np.asarray(scores, dtype=np.float64).ravel()
    k = max(1, min(int(k), y.size))
    top = np.argsort(-s, kind="stable")[:k]
    return float(y[top].mean())


def link_stealing(
    posteriors: Tensor,
    pairs: Tensor,
    labels: Tensor,
    *,
    metrics: Sequence[str] = ("correlation",),
    k: int | None = None,
) -> dict[str, Any]:
    """Attack-0 on given pairs: AUC (flipped below 0.5, as the paper) and precision at k per distance.

    Args:
        posteriors: ``(N, C)`` softmax outputs the adversary obtained.
        pairs: ``(2, M)`` node pairs.
        labels: ``(M,)`` 1 for an edge, 0 for a non-edge (ground truth, for scoring).
        metrics: Distances to try.
        k: Precision at ``k`` (default: a tenth of the edges).

    Returns:
        ``{metric: {"auc", "precision@k", "flipped", "fpr", "tpr"}}`` plus ``"best"`` (the metric with the
        highest AUC) and ``"k"``.
    """
    p = posteriors.detach().to(torch.float64).cpu()
    if not torch.isfinite(p).all():
        raise AttackNotApplicableError("the posteriors hold non-finite values")
    y = labels.cpu().numpy()
    kk = k if k is not None else max(1, int(y.sum()) // 10)
    out: dict[str, Any] = {"k": kk}
    best, best_auc = None, -1.0
    for metric in metrics:
        d = posterior_distance(p[pairs[0]], p[pairs[1]], metric).numpy()
        d = np.nan_to_num(d, nan=np.nanmax(d[np.isfinite(d)]) if np.isfinite(d).any() else 0.0)
        s = -d
        roc = roc_summary(y, s)
        flipped = roc["auc"] < 0.5
        if flipped:
            s = -s
            roc = roc_summary(y, s)
        out[metric] = {**roc, "precision@k": precision_at_k(y, s, kk), "flipped": flipped}
        if roc["auc"] > best_auc:
            best, best_auc = metric, roc["auc"]
    out["best"] = best
    return out
