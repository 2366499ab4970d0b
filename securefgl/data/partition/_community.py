"""``louvain``: Louvain communities as clients, and the community building blocks ``louvain+`` reuses.

The building blocks: seeded Louvain (networkx or vectorised), cutting communities into chunks, and the
FedSage+-style greedy packing of chunks into owners.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
from torch_geometric.data import Data

from securefgl.data.partition._base import _Result
from securefgl.errors import ConfigError, PartitionError


@dataclass(frozen=True)
class LouvainParams:
    """``louvain`` parameters.

    Args:
        resolution: Louvain resolution. (default: 1.0)
        assign: ``"largest"`` (FedSpray: the K largest capped communities are the clients, other nodes belong to
            no client) or ``"greedy"`` (FedSage+/AdaFGL: every node assigned). (default: ``"largest"``)
        max_size: Size cap of a group for ``"largest"``; ``None`` means ``ceil(N / K)``. (default: ``None``)
        delta: Slack of the ``"greedy"`` packing (cap ``N // K - delta``, tolerance ``+ delta``). (default: 20)
        backend: ``"networkx"`` (seeded ``louvain_communities``), ``"vectorized"`` (synchronous sparse-matrix
            Louvain for large graphs) or ``"auto"`` (networkx up to 20,000 nodes). (default: ``"auto"``)
    """

    resolution: float = 1.0
    assign: Literal["largest", "greedy"] = "largest"
    max_size: int | None = None
    delta: int = 20
    backend: Literal["auto", "networkx", "vectorized"] = "auto"

    def __post_init__(self) -> None:
        if self.resolution <= 0:
            raise ConfigError(f"resolution must be > 0, got {self.resolution}")
        if self.max_size is not None and self.max_size < 1:
            raise ConfigError(f"max_size must be >= 1 or none, got {self.max_size}")
        if self.delta < 0:
            raise ConfigError(f"delta must be >= 0, got {self.delta}")


def _undirected_pairs(data: Data) -> tuple[np.ndarray, np.ndarray]:
    ei = data.edge_index.numpy()
    keep = ei[0] < ei[1]
    return ei[0][keep], ei[1][keep]


#: ``backend="auto"`` uses networkx up to this many nodes and the vectorised Louvain above it.
AUTO_LOUVAIN_MAX_NODES = 20_000


def _louvain(data: Data, seed: int, resolution: float, backend: str) -> tuple[list[np.ndarray], str]:
    """Louvain communities (seeded), each an ascending array of node ids, ordered by smallest member.

    ``networkx``: ``networkx.community.louvain_communities`` (sequential, pure Python). ``vectorized``:
    :func:`securefgl.data._louvain.vectorized_louvain` (synchronous local moving in sparse-matrix form, for
    graphs where the sequential one takes too long). ``auto`` picks networkx up to
    :data:`AUTO_LOUVAIN_MAX_NODES` nodes.
    """
    n = int(data.num_nodes)
    if backend == "auto":
        backend = "networkx" if n <= AUTO_LOUVAIN_MAX_NODES else "vectorized"
    if backend == "vectorized":
        from securefgl.data._louvain import vectorized_louvain

        ei = data.edge_index.numpy()
        labels = vectorized_louvain(n, ei[0], ei[1], seed=seed, resolution=resolution)
        order = np.argsort(labels, kind="stable")
        out = np.split(order, np.cumsum(np.bincount(labels))[:-1])
    else:
        import networkx as nx

        lo, hi = _undirected_pairs(data)
        g = nx.Graph()
        g.add_nodes_from(range(n))
        g.add_edges_from(zip(lo.tolist(), hi.tolist(), strict=True))
        comms = nx.community.louvain_communities(g, resolution=resolution, seed=int(seed))
        out = [np.sort(np.fromiter(c, dtype=np.int64, count=len(c))) for c in comms]
    out = [a for a in out if a.size]
    out.sort(key=lambda a: int(a[0]))  # canonical order: by smallest member
    return out, backend


def _chunks(
    groups: list[np.ndarray], cap: int, order: Literal["community", "breadth"] = "community"
) -> list[np.ndarray]:
    """Cut every group into consecutive chunks of at most ``cap`` nodes (list order, not random).

    ``order="community"`` keeps each group's chunks together; ``"breadth"`` lists the first chunk of every
    group, then every second chunk, and so on: what O-pFGL's reference packing produces by appending each
    group's remainder to the end of the list it is iterating over. The order matters because the packing
    below hands consecutive (equal-size) chunks to the same owner.
    """
    per = [[g[i : i + cap] for i in range(0, g.size, cap)] for g in groups]
    if order == "community":
        return [c for chunks in per for c in chunks]
    out: list[np.ndarray] = []
    level = 0
    while True:
        row = [chunks[level] for chunks in per if len(chunks) > level]
        if not row:
            return out
        out.extend(row)
        level += 1


def _greedy_pack(
    groups: list[np.ndarray],
    n: int,
    n_owners: int,
    delta: int,
    chunk_order: Literal["community", "breadth"] = "community",
) -> np.ndarray:
    """FedSage+-style packing of groups into ``n_owners`` owners of target size ``n // n_owners``.

    Groups are capped at ``target - delta`` (at least 1), sorted by size (descending, stable), and assigned in
    rotation: full owners (size >= target) leave the rotation; the pointer moves on while
    ``size + |group| >= target + delta``; when every remaining owner was tried (the reference code gives up after
    1000 rotations, which ends the same way), the smallest owner takes the group. Every node is assigned once.
    """
    target = n // n_owners
    cap = max(1, target - delta)
    pieces = _chunks(groups, cap, chunk_order)
    pieces.sort(key=lambda a: a.size, reverse=True)
    owner = np.full(n, -1, dtype=np.int64)
    sizes = np.zeros(n_owners, dtype=np.int64)
    active = list(range(n_owners))
    ptr = 0
    for g in pieces:
        while active and sizes[active[ptr]] >= target:
            active.pop(ptr)
            ptr = ptr % len(active) if active else 0
        if not active:
            o = int(np.argmin(sizes))
        else:
            tries = 0
            while sizes[active[ptr]] + g.size >= target + delta:
                tries += 1
                ptr = (ptr + 1) % len(active)
                if tries >= len(active):
                    ptr = int(np.argmin(sizes[active]))
                    break
            o = active[ptr]
        owner[g] = o
        sizes[o] += g.size
    return owner


def _louvain_method(data: Data, k: int, seed: int, p: LouvainParams) -> _Result:
    n = int(data.num_nodes)
    comms, backend = _louvain(data, seed, p.resolution, p.backend)
    info: dict[str, Any] = {"num_communities": len(comms), "backend": backend}
    if p.assign == "greedy":
        return _Result(_greedy_pack(comms, n, k, p.delta), info=info)
    cap = p.max_size if p.max_size is not None else math.ceil(n / k)
    pieces = _chunks(comms, cap)
    if len(pieces) < k:
        raise PartitionError(
            f"louvain: the graph has {len(pieces)} communities (after the size cap {cap}) but {k} clients were "
            f"requested; use at most {len(pieces)} clients or assign='greedy'"
        )
    order = sorted(range(len(pieces)), key=lambda i: (-pieces[i].size, int(pieces[i][0])))
    owner = np.full(n, -1, dtype=np.int64)
    for client, i in enumerate(order[:k]):
        owner[pieces[i]] = client
    info.update(max_size=int(cap), kept_nodes=int((owner >= 0).sum()))
    return _Result(owner, info=info)
