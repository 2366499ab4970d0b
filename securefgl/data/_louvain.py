r"""A vectorised (synchronous) Louvain for large graphs; internal to the partitioners.

Blondel et al. 2008, "Fast unfolding of communities in large networks" (https://arxiv.org/abs/0803.0476),
with the local-moving phase done for all nodes at once in sparse-matrix form, as in the parallel Louvain
variants (Lu, Halappanavar, Kalyanaraman 2015, https://arxiv.org/abs/1410.1237): every node computes its best
neighbouring community from the current assignment, and an independent set of the nodes that gain (random
priorities, Luby-style: no two neighbours move in one sweep) moves. A level ends when a sweep no longer raises
the modularity by ``tol``. Then communities are aggregated into super-nodes (:math:`A' = C^\top A C`) and the
process repeats until a level merges nothing.

Moving node :math:`i` (degree :math:`k_i`) into community :math:`c` changes the modularity in proportion to

.. math::
    \Delta_{i \to c} = k_{i,c} - \gamma \frac{k_i \Sigma_c}{2m}
      - \Big(k_{i,c_i \setminus i} - \gamma \frac{k_i (\Sigma_{c_i} - k_i)}{2m}\Big)

with :math:`k_{i,c}` the weight from :math:`i` to :math:`c`, :math:`\Sigma_c` the total degree of :math:`c` and
:math:`\gamma` the resolution. Deterministic given the seed; no Python loop over nodes or edges.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

__all__ = ["vectorized_louvain", "modularity"]


def modularity(adj: sp.csr_matrix, comm: np.ndarray, resolution: float = 1.0) -> float:
    """Modularity of ``comm`` on the symmetric weighted adjacency ``adj`` (self-loops as stored)."""
    two_m = float(adj.sum())
    if two_m == 0:
        return 0.0
    coo = adj.tocoo()
    inside = float(coo.data[comm[coo.row] == comm[coo.col]].sum())
    deg = np.asarray(adj.sum(1)).ravel()
    tot = np.bincount(comm, weights=deg)
    return inside / two_m - resolution * float((tot**2).sum()) / two_m**2


def _one_level(
    adj: sp.csr_matrix, rng: np.random.Generator, resolution: float, max_sweeps: int, tol: float, slow: float
) -> np.ndarray:
    n = adj.shape[0]
    deg = np.asarray(adj.sum(1)).ravel()
    two_m = float(deg.sum())
    coo = adj.tocoo()
    keep = coo.row != coo.col
    row, col, w = coo.row[keep].astype(np.int64), coo.col[keep].astype(np.int64), coo.data[keep]
    self_w = float(coo.data[~keep].sum())

    def quality(comm: np.ndarray) -> float:
        inside = float(w[comm[row] == comm[col]].sum()) + self_w
        tot = np.bincount(comm, weights=deg, minlength=n)
        return inside / two_m - resolution * float((tot**2).sum()) / two_m**2

    comm = np.arange(n, dtype=np.int64)
    q = quality(comm)
    q_start = q_prev = q
    active = np.ones(n, dtype=bool)  # nodes whose best move may have changed since the last sweep
    for _ in range(max_sweeps):
        tot = np.bincount(comm, weights=deg, minlength=n)
        sel = active[row]
        kic = sp.csr_matrix((w[sel], (row[sel], comm[col[sel]])), shape=(n, n))
        kic.sum_duplicates()
        kic.sort_indices()
        if kic.nnz == 0:
            break
        r = np.repeat(np.arange(n), np.diff(kic.indptr))
        c = kic.indices.astype(np.int64)
        k_own = np.zeros(n)
        own = c == comm[r]
        k_own[r[own]] = kic.data[own]
        stay = k_own - resolution * deg * (tot[comm] - deg) / two_m
        gain = kic.data - resolution * deg[r] * tot[c] / two_m - stay[r]
        gain[own] = -np.inf
        nonempty = np.diff(kic.indptr) > 0
        rowmax = np.full(n, -np.inf)
        rowmax[nonempty] = np.maximum.reduceat(gain, kic.indptr[:-1][nonempty])
        cand = np.flatnonzero((gain == rowmax[r]) & (gain > 1e-12 * max(two_m, 1.0)))
        if cand.size == 0:
            break
        movers, first = np.unique(r[cand], return_index=True)
        target = c[cand[first]]
        # Move an independent set of the movers (Luby): a mover moves only if its random priority beats every
        # neighbouring mover, so no two adjacent nodes move in the same sweep and the gains stay exact up to
        # the shared community totals.
        prio = rng.random(n)
        wants = np.zeros(n, dtype=bool)
        wants[movers] = True
        both = wants[row] & wants[col]
        best_nb = np.zeros(n)
        np.maximum.at(best_nb, row[both], prio[col[both]])
        free = np.flatnonzero(prio[movers] > best_nb[movers])
        accepted = False
        for _ in range(8):  # many movers joining one community at once can overshoot: retry with half of them
            trial = comm.copy()
            trial[movers[free]] = target[free]
            q_new = quality(trial)
            if q_new > q + tol:
                comm, q, accepted = trial, q_new, True
                break
            free = free[rng.random(free.size) < 0.5]
            if free.size == 0:
                break
        if not accepted:
            break
        # next sweep: the movers that did not move yet, and every neighbour of a node that moved (the
        # community totals of the others changed too, but only by the moved degrees; they are re-examined when
        # a neighbour moves, as in the pruning of parallel Louvain)
        moved = np.zeros(n, dtype=bool)
        moved[movers[free]] = True
        active = wants.copy()
        active[col[moved[row]]] = True
        # level ends once a sweep adds less than `slow` of what the level has gained so far (the long tail of
        # single-node shuffles is left to the next, aggregated level, which is much cheaper)
        if slow > 0 and q_new - q_prev < slow * (q_new - q_start):
            break
        q_prev = q_new
    _, comm = np.unique(comm, return_inverse=True)
    return comm.astype(np.int64)


def vectorized_louvain(
    num_nodes: int,
    src: np.ndarray,
    dst: np.ndarray,
    *,
    seed: int = 0,
    resolution: float = 1.0,
    max_levels: int = 20,
    max_sweeps: int = 50,
    tol: float = 1e-7,
    slow: float = 0.0,
) -> np.ndarray:
    """Louvain communities of an undirected graph given both directions of every edge.

    Args:
        num_nodes: N.
        src, dst: Directed edge lists containing both directions of each undirected edge (no self-loops).
        seed: Seed of the move sampling. (default: 0)
        resolution: Modularity resolution. (default: 1.0)
        max_levels: Aggregation levels at most. (default: 20)
        max_sweeps: Local-moving sweeps per level at most. (default: 50)
        tol: Minimum modularity gain for a sweep to count. (default: 1e-7)
        slow: A level ends when a sweep gains less than this fraction of the level's gain so far. (default: 0.0, off)

    Returns:
        ``(N,)`` int64 community id of every node (ids ``0..C-1``).
    """
    rng = np.random.default_rng(np.random.SeedSequence([int(seed), 0x10AF]))
    adj = sp.csr_matrix((np.ones(src.size), (src, dst)), shape=(num_nodes, num_nodes))
    adj.sum_duplicates()
    membership = np.arange(num_nodes, dtype=np.int64)
    for _ in range(max_levels):
        comm = _one_level(adj, rng, resolution, max_sweeps, tol, slow)
        n_new = int(comm.max()) + 1 if comm.size else 0
        if n_new == adj.shape[0]:
            break
        membership = comm[membership]
        coo = adj.tocoo()
        adj = sp.csr_matrix((coo.data, (comm[coo.row], comm[coo.col])), shape=(n_new, n_new))
        adj.sum_duplicates()
    return membership
