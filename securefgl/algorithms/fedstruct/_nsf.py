r"""Task-agnostic node structure features computed from the global edge set (FedStruct-A only).

Aliakbari et al., *FedStruct*, https://arxiv.org/abs/2402.19163, §5 and App. A; spec
``shared/specs/fedstruct.md`` §2.2 and §7 item 14. Node2Vec and graphlet degree vectors (GDV) need random
walks or graphlet counts over the *whole* graph, so they exist only where the server knows the edges
(FedStruct-A): the server computes :math:`S = Q_{NSF}(E)` once, before training, and broadcasts it. In
FedStruct-B (the default) the features are Hop2Vec or one-hot degree, which need no global view. Internal
module of the server half of :mod:`securefgl.algorithms.fedstruct` (:mod:`~securefgl.algorithms.fedstruct.server`).

* :func:`node2vec_features`: skip-gram with negative sampling over random walks (Grover & Leskovec 2016),
  the authors' settings: dimension 256, walk length 20, context 10, 10 walks per node, ``p = q = 1``, one
  negative per positive, 50 epochs, ``SparseAdam`` lr 0.01, batch 128. The loss is PyG's ``Node2Vec.loss``
  (in its numerically stable log-sigmoid form);
  the walks are drawn here because PyG's walker needs ``pyg-lib``, which is not on PyPI. With
  ``p = q = 1`` the node2vec walk is the uniform first-order walk, drawn vectorised from the CSR arrays;
  other ``p, q`` use ``pyg-lib`` when it is installed.
* :func:`graphlet_degree_vectors`: per-node orbit counts of the 2- to 5-node graphlets (Pržulj 2007; 73
  orbits, or 15 for 4-node graphlets) by ORCA (Hočevar & Demšar 2014, ``orca-graphlets``), standardised per
  orbit as the authors do (``StandardScaler``: zero mean, unit variance; a constant orbit becomes 0).

Shapes:
    ``edge_index``: ``(2, E)`` global ids, either direction; output ``(n, d_s)`` float32.
"""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from securefgl.errors import ConfigError

__all__ = ["graphlet_degree_vectors", "node2vec_features", "orbit_counts", "uniform_random_walks"]


def _csr(edge_index: torch.Tensor, num_nodes: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Row pointer and column arrays of the undirected, self-loop-free graph."""
    ei = edge_index.long()
    ei = ei[:, ei[0] != ei[1]]
    both = torch.cat([ei, ei.flip(0)], dim=1)
    key = torch.unique(both[0] * num_nodes + both[1])
    row, col = key // num_nodes, key % num_nodes
    rowptr = torch.zeros(num_nodes + 1, dtype=torch.long)
    rowptr[1:] = torch.cumsum(torch.bincount(row, minlength=num_nodes), 0)
    return rowptr, col


def uniform_random_walks(
    rowptr: torch.Tensor, col: torch.Tensor, start: torch.Tensor, length: int, generator: torch.Generator
) -> torch.Tensor:
    """``(len(start), length + 1)`` uniform random walks; a walk at an isolated node stays there."""
    deg = rowptr[1:] - rowptr[:-1]
    walks = torch.empty(start.numel(), length + 1, dtype=torch.long)
    cur = start.long().clone()
    walks[:] = cur[:, None]
    if col.numel() == 0:  # no edge anywhere: every walk stays where it starts
        return walks
    for t in range(1, length + 1):
        d = deg[cur]
        pick = (torch.rand(cur.numel(), generator=generator, dtype=torch.float64) * d).long()
        nxt = col[(rowptr[cur] + pick).clamp(max=col.numel() - 1)]
        cur = torch.where(d > 0, nxt, cur)
        walks[:, t] = cur
    return walks


def _windows(walks: torch.Tensor, context_size: int) -> torch.Tensor:
    """Every length-``context_size`` window of every walk (PyG's ``Node2Vec.pos_sample`` layout)."""
    steps = walks.shape[1] - context_size + 1
    return torch.cat([walks[:, j : j + context_size] for j in range(steps)], dim=0)


class _SkipGram(nn.Module):
    """The embedding table and PyG's ``Node2Vec.loss`` (positive windows against uniform negative windows).

    A window ``(w_0, ..., w_{c-1})`` scores the pairs ``(w_0, w_j)``. Two evaluations of the same loss:

    * ``dense`` (``n <= dense_max_nodes``): every score at once as ``E E^T`` (one matrix product, gradients
      by another), then the pairs are read from it. A batch draws far more pairs than there are nodes, so
      this is an order of magnitude faster than gathering rows, and since every row is then touched in
      every batch, dense Adam takes the same steps as ``SparseAdam``.
    * sparse (large graphs): rows are gathered per pair with sparse gradients (``SparseAdam``), repeated
      positive pairs scored once and weighted by their count.
    """

    def __init__(self, num_nodes: int, dim: int, generator: torch.Generator, *, dense: bool) -> None:
        super().__init__()
        self.num_nodes = num_nodes
        self.dense = dense
        self.embedding = nn.Embedding(num_nodes, dim, sparse=not dense)
        with torch.no_grad():
            self.embedding.weight.copy_(torch.randn(num_nodes, dim, generator=generator))

    def _pair_scores(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return (self.embedding(a) * self.embedding(b)).sum(-1)

    def loss(self, pos_rw: torch.Tensor, neg_rw: torch.Tensor) -> torch.Tensor:
        n = self.num_nodes
        pos_key = (pos_rw[:, :1] * n + pos_rw[:, 1:]).reshape(-1)
        neg_key = (neg_rw[:, :1] * n + neg_rw[:, 1:]).reshape(-1)
        if self.dense:
            w = self.embedding.weight
            scores = (w @ w.T).reshape(-1)
            return -F.logsigmoid(scores[pos_key]).mean() - F.logsigmoid(-scores[neg_key]).mean()
        uniq, counts = torch.unique(pos_key, return_counts=True)
        pos = -(counts * F.logsigmoid(self._pair_scores(uniq // n, uniq % n))).sum() / pos_key.numel()
        neg = -F.logsigmoid(-self._pair_scores(neg_key // n, neg_key % n)).mean()
        return pos + neg


def node2vec_features(
    edge_index: torch.Tensor,
    num_nodes: int,
    *,
    dim: int = 256,
    walk_length: int = 20,
    context_size: int = 10,
    walks_per_node: int = 10,
    p: float = 1.0,
    q: float = 1.0,
    num_negative_samples: int = 1,
    epochs: int = 50,
    lr: float = 0.01,
    batch_size: int = 128,
    dense_max_nodes: int = 8192,
    generator: torch.Generator,
) -> torch.Tensor:
    """Node2Vec embeddings ``(n, dim)`` of the graph, trained with the authors' settings (see module doc).

    Graphs of at most ``dense_max_nodes`` nodes score all pairs with one matrix product per batch (see
    :class:`_SkipGram`); larger ones gather rows with sparse gradients.

    Raises:
        ConfigError: ``context_size > walk_length``, or ``p, q != 1`` without ``pyg-lib``.
    """
    if not 1 <= context_size <= walk_length:
        raise ConfigError(
            f"node2vec: need 1 <= context_size <= walk_length, got {context_size}, {walk_length}"
        )
    if min(dim, walks_per_node, num_negative_samples, epochs, batch_size) < 1 or not lr > 0:
        raise ConfigError(
            "node2vec: dim, walks_per_node, num_negative_samples, epochs and batch_size must be >= 1 and lr > 0"
        )
    rowptr, col = _csr(edge_index, num_nodes)
    if (p, q) != (1.0, 1.0):
        try:
            import pyg_lib  # noqa: F401
        except ImportError as exc:
            raise ConfigError(
                f"node2vec with p={p}, q={q} needs the biased walks of pyg-lib (not installed); p = q = 1 (the "
                "FedStruct authors' setting) needs nothing extra"
            ) from exc

    def walk(start: torch.Tensor) -> torch.Tensor:
        if (p, q) == (1.0, 1.0):
            return uniform_random_walks(rowptr, col, start, walk_length - 1, generator)
        seed = int(torch.randint(0, 2**62, (1,), generator=generator))
        torch.manual_seed(seed)
        return torch.ops.pyg.random_walk(rowptr, col, start, walk_length - 1, p, q)[0]

    model = _SkipGram(num_nodes, dim, generator, dense=num_nodes <= dense_max_nodes)
    opt = (torch.optim.Adam if model.dense else torch.optim.SparseAdam)(list(model.parameters()), lr=lr)
    for _ in range(epochs):
        order = torch.randperm(num_nodes, generator=generator)
        for b in range(math.ceil(num_nodes / batch_size)):
            batch = order[b * batch_size : (b + 1) * batch_size]
            pos = _windows(walk(batch.repeat(walks_per_node)), context_size)
            neg_start = batch.repeat(walks_per_node * num_negative_samples)
            neg = torch.randint(num_nodes, (neg_start.numel(), walk_length - 1), generator=generator)
            neg = _windows(torch.cat([neg_start[:, None], neg], dim=1), context_size)
            opt.zero_grad()
            model.loss(pos, neg).backward()
            opt.step()
    return model.embedding.weight.detach().to(torch.float32).clone()


def orbit_counts(edge_index: torch.Tensor, num_nodes: int, *, graphlet_size: int = 5) -> np.ndarray:
    """Raw per-node orbit counts ``(n, 73)`` or ``(n, 15)`` (ORCA's orbit numbering; orbit 0 is the degree).

    Raises:
        ConfigError: ``graphlet_size`` is not 4 or 5.
    """
    if graphlet_size not in (4, 5):
        raise ConfigError(f"gdv: graphlet_size must be 4 or 5, got {graphlet_size}")
    from orca import orca_nodes

    rowptr, col = _csr(edge_index, num_nodes)
    row = torch.repeat_interleave(torch.arange(num_nodes), rowptr[1:] - rowptr[:-1])
    keep = row < col
    edges = torch.stack([row[keep], col[keep]], dim=1).numpy()
    if edges.shape[0] == 0:
        return np.zeros((num_nodes, 73 if graphlet_size == 5 else 15), dtype=np.int64)
    return np.asarray(orca_nodes(edges, num_nodes=num_nodes, graphlet_size=graphlet_size), dtype=np.int64)


def graphlet_degree_vectors(
    edge_index: torch.Tensor, num_nodes: int, *, graphlet_size: int = 5
) -> torch.Tensor:
    """Standardised orbit counts ``(n, 73)`` (``graphlet_size=5``) or ``(n, 15)`` (``4``), float32."""
    counts = orbit_counts(edge_index, num_nodes, graphlet_size=graphlet_size).astype(np.float64)
    std = counts.std(axis=0)
    feats = (counts - counts.mean(axis=0)) / np.where(std > 0, std, 1.0)
    return torch.from_numpy(feats).to(torch.float32)
