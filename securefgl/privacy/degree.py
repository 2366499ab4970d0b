r"""Degree bounding: every node keeps at most ``D`` of its edges, chosen at random.

Node-level DP needs a bound on how many neighbourhood sums one node enters: with degree at most ``D``, removing
a node changes at most ``D`` rows of :math:`A^\top X`, each by one unit-norm row, so the aggregation's L2
sensitivity is :math:`\sqrt{D}` (GAP, Sajadmanesh et al. 2023). The graph is treated as undirected: each
undirected edge is kept in both directions or in neither, so in- and out-degree are both bounded. Edges are
visited in a random order and an edge is kept while both its ends have fewer than ``D`` kept edges; a node above
the bound therefore keeps ``D`` or fewer of its original edges, and a node at or below it may lose some only
when a neighbour is over the bound.

As in GAP's analysis, neighbouring graphs are defined after bounding (the guarantee is about the bounded graph).
Self-loops are dropped (a node's own embedding enters the model separately, not through a neighbourhood sum).
"""

from __future__ import annotations

import numpy as np
import torch

from securefgl.errors import ConfigError

__all__ = ["bound_degree", "max_degree", "undirected_edges"]


def _undirected_pairs(edge_index: torch.Tensor) -> np.ndarray:
    """``(E', 2)`` unique undirected pairs ``u < v`` of ``edge_index`` (self-loops dropped), sorted."""
    ei = edge_index.detach().cpu().numpy()
    lo, hi = np.minimum(ei[0], ei[1]), np.maximum(ei[0], ei[1])
    keep = lo != hi
    pairs = np.stack([lo[keep], hi[keep]], axis=1)
    return np.unique(pairs, axis=0) if pairs.size else pairs.reshape(0, 2)


def max_degree(edge_index: torch.Tensor, num_nodes: int) -> int:
    """The largest undirected degree of the graph (self-loops and repeated edges not counted)."""
    pairs = _undirected_pairs(edge_index)
    if not len(pairs):
        return 0
    return int(np.bincount(pairs.ravel(), minlength=num_nodes).max())


def undirected_edges(edge_index: torch.Tensor) -> torch.Tensor:
    """``(2, 2 E')`` every undirected edge once in each direction (self-loops and repeats dropped)."""
    sel = torch.from_numpy(_undirected_pairs(edge_index).T.copy()).long()
    return torch.cat([sel, sel.flip(0)], dim=1).to(edge_index.device)


def bound_degree(
    edge_index: torch.Tensor, num_nodes: int, degree_bound: int, *, generator: torch.Generator
) -> torch.Tensor:
    """The edges kept so that no node has more than ``degree_bound`` neighbours, both directions.

    Args:
        edge_index: ``(2, E)`` edges (either or both directions of each undirected edge).
        num_nodes: Number of nodes.
        degree_bound: ``D >= 1``.
        generator: Randomness of the visiting order (a client's own generator).

    Returns:
        ``(2, 2 E')`` the kept undirected edges in both directions, on ``edge_index``'s device.
    """
    if degree_bound < 1:
        raise ConfigError(f"degree bound must be >= 1, got {degree_bound}")
    pairs = _undirected_pairs(edge_index)
    order = torch.randperm(len(pairs), generator=generator).numpy()
    degree = np.zeros(num_nodes, dtype=np.int64)
    kept = np.zeros(len(pairs), dtype=bool)
    for i in order:  # greedy in random order: O(E), fine for the graphs a client holds
        u, v = pairs[i]
        if degree[u] < degree_bound and degree[v] < degree_bound:
            kept[i] = True
            degree[u] += 1
            degree[v] += 1
    sel = torch.from_numpy(pairs[kept].T.copy()).long()
    return torch.cat([sel, sel.flip(0)], dim=1).to(edge_index.device)
