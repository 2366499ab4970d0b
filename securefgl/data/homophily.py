"""Homophily metrics of a labelled graph: edge, node, class (LINKX) and adjusted homophily.

All functions take a ``(2, E)`` ``edge_index`` (both directions of an undirected edge stored, as PyG does;
directed edge lists are measured as given) and integer labels ``y``. Nodes with a negative label are treated
as unlabelled: edges touching them are ignored. Self-loops are ignored. A graph with no (labelled) edge has
undefined homophily, returned as ``nan``.

Shapes:
    edge_index: ``(2, E)`` long; y: ``(N,)`` long.
"""

from __future__ import annotations

import math

import numpy as np
import torch

__all__ = [
    "edge_homophily",
    "node_homophily",
    "class_homophily",
    "adjusted_homophily",
    "homophily_report",
]


def _prepare(edge_index: torch.Tensor | np.ndarray, y: torch.Tensor | np.ndarray) -> tuple[np.ndarray, ...]:
    ei = edge_index.detach().cpu().numpy() if isinstance(edge_index, torch.Tensor) else np.asarray(edge_index)
    yy = y.detach().cpu().numpy() if isinstance(y, torch.Tensor) else np.asarray(y)
    yy = yy.reshape(-1).astype(np.int64, copy=False)
    if ei.size == 0:
        return np.empty(0, np.int64), np.empty(0, np.int64), yy
    src, dst = ei[0].astype(np.int64, copy=False), ei[1].astype(np.int64, copy=False)
    keep = (src != dst) & (yy[src] >= 0) & (yy[dst] >= 0)
    return src[keep], dst[keep], yy


def edge_homophily(edge_index: torch.Tensor | np.ndarray, y: torch.Tensor | np.ndarray) -> float:
    r"""Edge homophily: the fraction of edges joining two nodes of the same class (Zhu et al. 2020).

    .. math::
        H_{edge} = \frac{|\{(u,v) \in E : y_u = y_v\}|}{|E|}

    The value is the same whether each undirected edge is stored once or twice.
    """
    src, dst, yy = _prepare(edge_index, y)
    if src.size == 0:
        return math.nan
    return float(np.mean(yy[src] == yy[dst]))


def node_homophily(
    edge_index: torch.Tensor | np.ndarray,
    y: torch.Tensor | np.ndarray,
    *,
    isolated: str = "zero",
) -> float:
    r"""Node homophily (Pei et al. 2020): the mean over nodes of the same-class share of their neighbours.

    .. math::
        H_{node} = \frac{1}{|V|} \sum_{v \in V} \frac{|\{u \in N(v) : y_u = y_v\}|}{|N(v)|}

    Args:
        edge_index: Edges; ``N(v)`` is the set of targets of the edges whose source is ``v``.
        y: Labels.
        isolated: ``"zero"`` counts nodes without neighbours as 0 and keeps them in the mean (as PyG);
            ``"exclude"`` leaves them out. (default: ``"zero"``)
    """
    if isolated not in ("zero", "exclude"):
        raise ValueError(f"isolated={isolated!r} is not valid; valid choices: 'zero', 'exclude'")
    src, dst, yy = _prepare(edge_index, y)
    labelled = yy >= 0
    n = yy.shape[0]
    deg = np.bincount(src, minlength=n).astype(np.float64)
    same = np.bincount(src, weights=(yy[src] == yy[dst]).astype(np.float64), minlength=n)
    ratio = np.divide(same, deg, out=np.zeros(n), where=deg > 0)
    mask = labelled & (deg > 0) if isolated == "exclude" else labelled
    if not mask.any():
        return math.nan
    return float(ratio[mask].mean())


def _class_terms(
    src: np.ndarray, dst: np.ndarray, yy: np.ndarray, num_classes: int
) -> tuple[np.ndarray, ...]:
    same = yy[src] == yy[dst]
    cls = yy[src]
    deg_sum = np.bincount(cls, minlength=num_classes).astype(np.float64)[:num_classes]
    same_sum = np.bincount(cls[same], minlength=num_classes).astype(np.float64)[:num_classes]
    return deg_sum, same_sum


def class_homophily(
    edge_index: torch.Tensor | np.ndarray, y: torch.Tensor | np.ndarray, num_classes: int | None = None
) -> float:
    r"""Class-insensitive homophily of Lim et al. 2021 (LINKX; PyG ``method="edge_insensitive"``).

    .. math::
        h_k = \frac{\sum_{v: y_v = k} |\{u \in N(v) : y_u = k\}|}{\sum_{v: y_v = k} |N(v)|}, \qquad
        H_{class} = \frac{1}{C - 1} \sum_{k=1}^{C} \max\Big(0, h_k - \frac{|\{v : y_v = k\}|}{|V|}\Big)

    A class without nodes or without edges has :math:`h_k = 0`.

    Args:
        edge_index: Edges.
        y: Labels.
        num_classes: C; pass the global number of classes for per-client values, so that they are comparable
            across clients. (default: ``int(y.max()) + 1``)
    """
    src, dst, yy = _prepare(edge_index, y)
    labelled = yy[yy >= 0]
    if labelled.size == 0:
        return math.nan
    c = int(num_classes) if num_classes is not None else int(labelled.max()) + 1
    if c < 2:
        return math.nan
    deg_sum, same_sum = _class_terms(src, dst, yy, c)
    h = np.divide(same_sum, deg_sum, out=np.zeros(c), where=deg_sum > 0)
    prop = np.bincount(labelled, minlength=c)[:c] / labelled.size
    return float(np.clip(h - prop, 0.0, None).sum() / (c - 1))


def adjusted_homophily(
    edge_index: torch.Tensor | np.ndarray, y: torch.Tensor | np.ndarray, num_classes: int | None = None
) -> float:
    r"""Adjusted homophily of Platonov et al. 2023: edge homophily corrected for the class-degree balance.

    .. math::
        H_{adj} = \frac{H_{edge} - \sum_k \bar p_k^2}{1 - \sum_k \bar p_k^2}, \qquad
        \bar p_k = \frac{\sum_{v : y_v = k} d(v)}{2|E|}

    0 means "as homophilous as a random graph with the same degrees"; negative values are heterophilous.
    """
    src, dst, yy = _prepare(edge_index, y)
    if src.size == 0:
        return math.nan
    c = int(num_classes) if num_classes is not None else int(yy.max()) + 1
    deg_sum, _ = _class_terms(src, dst, yy, c)
    p = deg_sum / deg_sum.sum()
    expected = float((p**2).sum())
    h = float(np.mean(yy[src] == yy[dst]))
    if expected >= 1.0:
        return math.nan
    return (h - expected) / (1.0 - expected)


def homophily_report(
    edge_index: torch.Tensor | np.ndarray, y: torch.Tensor | np.ndarray, num_classes: int | None = None
) -> dict[str, float]:
    """All four metrics as a dict with keys ``edge``, ``node``, ``class``, ``adjusted``."""
    return {
        "edge": edge_homophily(edge_index, y),
        "node": node_homophily(edge_index, y),
        "class": class_homophily(edge_index, y, num_classes),
        "adjusted": adjusted_homophily(edge_index, y, num_classes),
    }
