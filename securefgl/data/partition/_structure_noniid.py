"""``structure-noniid``: AdaFGL's METIS split with homophilous / heterophilous edge injection.

Spec ``adafgl.md`` §1.3: METIS into K parts, then per client a coin (``p_homo``) chooses homophilous or
heterophilous random injection of ``floor(rho |E_i|)`` new intra-client edges (the paper's text: "increasing
edges based on half of the original edges"), or, with ``pair_rate``, the injection of AdaFGL's official code:
every eligible non-edge pair independently with probability ``pair_rate`` (the code's 0.001), and a node left
without edges joined to one eligible partner (``isolated_rate``, the code's 0.5).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import numpy as np
from torch_geometric.data import Data

from securefgl.data.homophily import class_homophily, edge_homophily, node_homophily
from securefgl.data.partition._base import _Result, _rng
from securefgl.data.partition._metis import _metis
from securefgl.errors import ConfigError, PartitionError


@dataclass(frozen=True)
class StructureNonIIDParams:
    """``structure-noniid`` parameters (AdaFGL random injection).

    Args:
        p_homo: Probability that a client gets homophilous injection (else heterophilous). (default: 0.5)
        rho: Injected undirected edges per client as a fraction of its intra-client edges. (default: 0.5)
        anchor: ``"uniform"`` draws new pairs uniformly among the eligible non-edges; ``"edge"`` anchors each
            new edge at an endpoint of a sampled existing edge. (default: ``"uniform"``)
        modes: Explicit ``"homo"``/``"hete"`` per client instead of the coin. (default: ``None``)
        pair_rate: The official code's injection instead of ``rho``: each non-edge pair of equal (homo) or
            different (hete) labels is added with this probability (the code: 0.001). On dense graphs this adds
            far fewer edges than ``rho = 0.5`` (Squirrel: about 0.01 |E_i| against 0.5 |E_i|). Enumerates the
            client's node pairs, so clients above about 10,000 nodes are refused. (default: ``None``: ``rho``)
        isolated_rate: With ``pair_rate``: a node still without edges is joined to the first eligible partner
            (in node order) whose coin of this probability lands, as the code's loop does. (default: 0.5)
    """

    p_homo: float = 0.5
    rho: float = 0.5
    anchor: Literal["uniform", "edge"] = "uniform"
    modes: tuple[Literal["homo", "hete"], ...] | None = None
    pair_rate: float | None = None
    isolated_rate: float = 0.5

    def __post_init__(self) -> None:
        if self.pair_rate is not None and not 0.0 <= self.pair_rate <= 1.0:
            raise ConfigError(f"pair_rate must be in [0, 1] or None, got {self.pair_rate}")
        if not 0.0 <= self.isolated_rate <= 1.0:
            raise ConfigError(f"isolated_rate must be in [0, 1], got {self.isolated_rate}")
        if not 0.0 <= self.p_homo <= 1.0:
            raise ConfigError(f"p_homo must be in [0, 1], got {self.p_homo}")
        if not 0.0 <= self.rho <= 10.0:
            raise ConfigError(f"rho must be in [0, 10], got {self.rho}")


def _pairs_present(keys: np.ndarray, sorted_existing: np.ndarray) -> np.ndarray:
    if sorted_existing.size == 0:
        return np.zeros(keys.shape, dtype=bool)
    pos = np.searchsorted(sorted_existing, keys)
    pos = np.minimum(pos, sorted_existing.size - 1)
    return sorted_existing[pos] == keys


def _inject(
    rng: np.random.Generator,
    yl: np.ndarray,
    lsrc: np.ndarray,
    ldst: np.ndarray,
    homo: bool,
    k: int,
    anchor: str,
) -> tuple[np.ndarray, int]:
    """Sample ``k`` new undirected pairs (local ids) among non-edges with equal (homo) / different labels."""
    m = yl.shape[0]
    if k <= 0 or m < 2:
        return np.empty((2, 0), dtype=np.int64), max(k, 0)
    und = lsrc < ldst
    existing = np.sort(lsrc[und] * m + ldst[und])
    classes, cls_idx, cls_counts = np.unique(yl, return_inverse=True, return_counts=True)
    same_pairs = int((cls_counts * (cls_counts - 1) // 2).sum())
    all_pairs = m * (m - 1) // 2
    same_edges = int((yl[lsrc[und]] == yl[ldst[und]]).sum())
    eligible = (same_pairs - same_edges) if homo else (all_pairs - same_pairs - (int(und.sum()) - same_edges))
    if eligible <= k:  # few candidates: take them all (small by construction, since k <= rho |E_i|)
        if eligible <= 0:
            return np.empty((2, 0), dtype=np.int64), k
        if all_pairs > 5e7:
            raise PartitionError("structure-noniid: too many node pairs to enumerate the eligible ones")
        iu, iv = np.triu_indices(m, 1)
        ok = (yl[iu] == yl[iv]) if homo else (yl[iu] != yl[iv])
        keys = iu[ok] * m + iv[ok]
        keys = keys[~_pairs_present(keys, existing)]
        return np.stack(np.divmod(keys, m)), k - int(keys.size)
    order = np.argsort(cls_idx, kind="stable")
    starts = np.concatenate([[0], np.cumsum(cls_counts)[:-1]])
    pair_w = cls_counts * (cls_counts - 1) / 2.0
    chosen = np.empty(0, dtype=np.int64)
    anchors_src = np.concatenate([lsrc, ldst])  # edge endpoints (each undirected edge twice)
    first = True
    for _ in range(200):
        need = k - chosen.size
        if need <= 0:
            break
        draw = 2 * need + 64
        if anchor == "edge":
            if first:
                pick = rng.choice(lsrc.size, size=min(k, lsrc.size), replace=False)
                u = np.where(rng.random(pick.size) < 0.5, lsrc[pick], ldst[pick])
                first = False
            else:
                u = anchors_src[rng.integers(0, anchors_src.size, size=draw)]
        elif homo:
            c = rng.choice(classes.size, size=draw, p=pair_w / pair_w.sum())
            u = order[starts[c] + (rng.random(draw) * cls_counts[c]).astype(np.int64)]
        else:
            u = rng.integers(0, m, size=draw)
        cu = cls_idx[u]
        if homo:
            v = order[starts[cu] + (rng.random(u.size) * cls_counts[cu]).astype(np.int64)]
        else:
            r = (rng.random(u.size) * (m - cls_counts[cu])).astype(np.int64)
            v = order[np.where(r >= starts[cu], r + cls_counts[cu], r)]
        ok = u != v
        lo, hi = np.minimum(u[ok], v[ok]), np.maximum(u[ok], v[ok])
        keys = lo * m + hi
        keys = keys[~_pairs_present(keys, existing)]
        _, first_idx = np.unique(keys, return_index=True)
        keys = keys[np.sort(first_idx)]
        if chosen.size:
            keys = keys[~np.isin(keys, chosen)]
        chosen = np.concatenate([chosen, keys[:need]])
    return np.stack(np.divmod(chosen, m)), k - int(chosen.size)


def _inject_pairwise(
    rng: np.random.Generator,
    yl: np.ndarray,
    lsrc: np.ndarray,
    ldst: np.ndarray,
    homo: bool,
    rate: float,
    isolated_rate: float,
) -> np.ndarray:
    """The official code's injection (local ids): every eligible non-edge pair with probability ``rate``, then
    each node without any edge joined to its first eligible partner whose ``isolated_rate`` coin lands."""
    m = yl.shape[0]
    if m < 2:
        return np.empty((2, 0), dtype=np.int64)
    if m * (m - 1) // 2 > 5e7:
        raise PartitionError(
            f"structure-noniid pair_rate: a client of {m} nodes has too many node pairs to visit; use rho instead"
        )
    existing = np.sort(lsrc * m + ldst)
    iu, iv = np.triu_indices(m, 1)
    ok = (yl[iu] == yl[iv]) if homo else (yl[iu] != yl[iv])
    keys = iu[ok] * m + iv[ok]
    keys = keys[~_pairs_present(keys, existing)]  # eligible non-edges, in (u, v) order
    take = rng.random(keys.size) < rate
    chosen = keys[take]
    degree = np.bincount(np.concatenate([lsrc, chosen // m, chosen % m]), minlength=m)
    if isolated_rate > 0:
        rest = keys[~take]
        us, vs = np.divmod(rest, m)
        for u in np.flatnonzero(degree == 0):
            partners = vs[us == u]
            if partners.size == 0:
                continue
            first = int(rng.geometric(isolated_rate)) - 1  # index of the first landed coin
            if first < partners.size:
                v = int(partners[first])
                chosen = np.append(chosen, u * m + v)
                degree[u] += 1
                degree[v] += 1
    return np.stack(np.divmod(np.sort(chosen), m))


def _structure_noniid(data: Data, k: int, seed: int, p: StructureNonIIDParams) -> _Result:
    n = int(data.num_nodes)
    ei = data.edge_index.numpy()
    owner = _metis(n, ei[0], ei[1], k, seed)
    rng = _rng(seed, 3)
    coins = rng.random(k)
    modes = list(p.modes) if p.modes is not None else ["homo" if c < p.p_homo else "hete" for c in coins]
    y = data.y.numpy()
    c_total = int(data.num_classes)
    injected = []
    clients_info = []
    local_index = np.full(n, -1, dtype=np.int64)
    for client in range(k):
        nodes = np.flatnonzero(owner == client)
        local_index[nodes] = np.arange(nodes.size)
        m_src, m_dst = ei[0], ei[1]
        mask = (owner[m_src] == client) & (owner[m_dst] == client)
        lsrc, ldst = local_index[m_src[mask]], local_index[m_dst[mask]]
        yl = y[nodes]
        n_und = int(lsrc.size // 2)
        homo = modes[client] == "homo"
        if p.pair_rate is None:
            want = int(math.floor(p.rho * n_und))
            new, shortfall = _inject(rng, yl, lsrc, ldst, homo, want, p.anchor)
        else:
            new = _inject_pairwise(rng, yl, lsrc, ldst, homo, p.pair_rate, p.isolated_rate)
            want, shortfall = int(new.shape[1]), 0
        gsrc, gdst = nodes[new[0]], nodes[new[1]]
        injected.append(np.stack([np.concatenate([gsrc, gdst]), np.concatenate([gdst, gsrc])]))
        before = np.stack([lsrc, ldst])
        after = np.concatenate(
            [before, np.stack([np.concatenate([new[0], new[1]]), np.concatenate([new[1], new[0]])])], 1
        )
        clients_info.append(
            {
                "mode": modes[client],
                "requested": want,
                "added": int(new.shape[1]),
                "shortfall": int(shortfall),
                "edges_before": n_und,
                "edge_homophily_before": edge_homophily(before, yl),
                "edge_homophily_after": edge_homophily(after, yl),
                "node_homophily_before": node_homophily(before, yl),
                "node_homophily_after": node_homophily(after, yl),
                "class_homophily_before": class_homophily(before, yl, c_total),
                "class_homophily_after": class_homophily(after, yl, c_total),
            }
        )
    inj = np.concatenate(injected, 1) if injected else np.empty((2, 0), dtype=np.int64)
    return _Result(owner, injected=inj, info={"clients": clients_info, "modes": modes})
