"""Partitioners: split one graph among K clients, deterministically by seed, cached by every parameter.

Methods (``partition_graph(data, method, K, seed=..., split=..., **params)``):

``random``
    Each node goes to a client drawn uniformly at random (FedStruct; sizes are Binomial(N, 1/K)).
``metis``
    ``pymetis`` k-way partition into K parts (minimum edge cut), seeded.
``louvain``
    Louvain communities (seeded, ``resolution``; networkx ``louvain_communities`` up to 20,000 nodes, a
    vectorised synchronous Louvain above, selectable with ``backend``). ``assign="largest"``
    (default, FedSpray): communities larger than ``max_size`` (default ``ceil(N / K)``) are cut into chunks of
    at most ``max_size`` nodes, and the K largest groups become the clients; the other nodes belong to no client.
    ``assign="greedy"`` (FedSage+/AdaFGL "community split"): groups are capped at ``N // K - delta`` and
    assigned greedily so that every node has a client.
``louvain+`` / ``metis+``
    O-pFGL's label-imbalance splits (spec ``opfgl.md`` §1.2): over-partition into ``num_coms = 100`` groups
    (Louvain, size-capped at ``N // 100 - 20`` and greedily packed into 100 owners; or Metis into 100 parts),
    then ``KMeans(K)`` on the groups' normalised label histograms; a client is the union of one cluster.
``dirichlet``
    Label skew: each class is split among clients with proportions drawn from ``Dir(alpha)``.
``structure-noniid``
    AdaFGL (spec ``adafgl.md`` §1.3): Metis into K parts, then per client a coin (``p_homo``) chooses homophilous
    or heterophilous random edge injection of ``floor(rho |E_i|)`` new intra-client edges.
``fedlog``
    FedLoG (spec ``fedlog.md`` §1.2): largest connected component, Metis (k-way) into K + 1 parts, the last
    part is the held-out new client (``FederatedGraph.held_out``, owner -1), and each client loses the nodes of
    its tail classes ("missing classes", owner -1).
``file``
    A partition made elsewhere (another toolkit, a paper's reference pipeline, :func:`save_partition`): an
    ``.npz`` with the node -> client array ``node_owner`` and, optionally, the ``train_mask`` / ``val_mask`` /
    ``test_mask`` split, which then replaces ``split``. Never cached (the file is the cache).
``kmeans``
    FedStruct: KMeans on node features, clusters above ``ceil(N / K) + delta`` split in two until they fit,
    then packed into K clients (the K largest pieces first; a piece that fits nowhere is cut to fill the
    client with the most room, so no client exceeds the cap).

After the assignment, every client gets a train/val/test split: per-client stratified ratios (default), one
global split drawn before partitioning (``split_scope="global"``), or the dataset's public split
(``split="public"``). The result is a :class:`~securefgl.data.FederatedGraph` with all cross-client edges.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch
from torch_geometric.data import Data

from securefgl.config.loader import build, to_dict
from securefgl.data.cache import CACHE_VERSION, cache_key, graph_fingerprint, load_cached, store_cached
from securefgl.data.federated import FederatedGraph, build_federated_graph
from securefgl.data.homophily import class_homophily, edge_homophily, node_homophily
from securefgl.data.root import data_root
from securefgl.data.splits import check_split, split_masks
from securefgl.errors import ConfigError, PartitionError

__all__ = [
    "partition_graph",
    "partition_methods",
    "normalize_method",
    "check_method_params",
    "method_params_class",
    "RandomParams",
    "MetisParams",
    "LouvainParams",
    "LouvainPlusParams",
    "MetisPlusParams",
    "DirichletParams",
    "StructureNonIIDParams",
    "FedLoGParams",
    "KMeansParams",
    "FileParams",
    "save_partition",
]


# --------------------------------------------------------------------------------------------------------
# Parameters of each method (validated with securefgl.config.loader.build: unknown keys and bad values rejected)
# --------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RandomParams:
    """``random`` has no parameters."""


@dataclass(frozen=True)
class MetisParams:
    """``metis`` parameters.

    Args:
        contiguous: Ask METIS for contiguous parts (fails on disconnected graphs). (default: ``False``)
    """

    contiguous: bool = False


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


@dataclass(frozen=True)
class LouvainPlusParams:
    """``louvain+`` parameters (O-pFGL defaults).

    Args:
        num_coms: Number of owners the Louvain groups are packed into before KMeans. (default: 100)
        delta: Size slack: groups are cut at ``N // num_coms - delta`` nodes, owners accept up to
            ``target + delta``. (default: 20)
        resolution: Louvain resolution. (default: 1.0)
        n_init: KMeans restarts. (default: 10)
        backend: Louvain implementation, as for ``louvain``. (default: ``"auto"``)
        chunk_order: Order of the cut community pieces before packing: ``"breadth"`` (first pieces of all
            communities, then second pieces, ...: O-pFGL's reference packing, which mixes communities within an
            owner) or ``"community"`` (each community's pieces together: purer, more label-skewed owners).
            (default: ``"breadth"``)
    """

    num_coms: int = 100
    delta: int = 20
    resolution: float = 1.0
    n_init: int = 10
    backend: Literal["auto", "networkx", "vectorized"] = "auto"
    chunk_order: Literal["breadth", "community"] = "breadth"

    def __post_init__(self) -> None:
        if self.chunk_order not in ("breadth", "community"):
            raise ConfigError(
                f"chunk_order: invalid value {self.chunk_order!r}; valid choices: 'breadth', 'community'"
            )
        if self.num_coms < 1 or self.delta < 0 or self.n_init < 1 or self.resolution <= 0:
            raise ConfigError(
                f"need num_coms >= 1, delta >= 0, n_init >= 1, resolution > 0; got num_coms={self.num_coms}, "
                f"delta={self.delta}, n_init={self.n_init}, resolution={self.resolution}"
            )


@dataclass(frozen=True)
class MetisPlusParams:
    """``metis+`` parameters (O-pFGL defaults).

    Args:
        num_coms: Metis parts before KMeans. (default: 100)
        n_init: KMeans restarts. (default: 10)
    """

    num_coms: int = 100
    n_init: int = 10

    def __post_init__(self) -> None:
        if self.num_coms < 1 or self.n_init < 1:
            raise ConfigError(f"need num_coms >= 1 and n_init >= 1, got {self.num_coms}, {self.n_init}")


@dataclass(frozen=True)
class DirichletParams:
    """``dirichlet`` parameters.

    Args:
        alpha: Concentration; small values give strong label skew. (default: 0.5)
        min_size: Redraw until every client has at least this many nodes. (default: 1)
        max_tries: Redraws before giving up with a PartitionError. (default: 100)
    """

    alpha: float = 0.5
    min_size: int = 1
    max_tries: int = 100

    def __post_init__(self) -> None:
        if not self.alpha > 0 or not math.isfinite(self.alpha):
            raise ConfigError(f"alpha must be a finite number > 0, got {self.alpha}")
        if self.min_size < 1 or self.max_tries < 1:
            raise ConfigError(f"min_size and max_tries must be >= 1, got {self.min_size}, {self.max_tries}")


@dataclass(frozen=True)
class StructureNonIIDParams:
    """``structure-noniid`` parameters (AdaFGL random injection).

    Args:
        p_homo: Probability that a client gets homophilous injection (else heterophilous). (default: 0.5)
        rho: Injected undirected edges per client as a fraction of its intra-client edges. (default: 0.5)
        anchor: ``"uniform"`` draws new pairs uniformly among the eligible non-edges; ``"edge"`` anchors each
            new edge at an endpoint of a sampled existing edge. (default: ``"uniform"``)
        modes: Explicit ``"homo"``/``"hete"`` per client instead of the coin. (default: ``None``)
    """

    p_homo: float = 0.5
    rho: float = 0.5
    anchor: Literal["uniform", "edge"] = "uniform"
    modes: tuple[Literal["homo", "hete"], ...] | None = None

    def __post_init__(self) -> None:
        if not 0.0 <= self.p_homo <= 1.0:
            raise ConfigError(f"p_homo must be in [0, 1], got {self.p_homo}")
        if not 0.0 <= self.rho <= 10.0:
            raise ConfigError(f"rho must be in [0, 10], got {self.rho}")


@dataclass(frozen=True)
class FedLoGParams:
    """``fedlog`` parameters.

    Args:
        lcc: Restrict to the largest connected component (nodes outside get no client). (default: ``True``)
        new_client: Metis into K + 1 parts and hold the last one out as the new client. (default: ``True``)
        missing_per_client: Tail classes removed from each client at first. (default: 1)
        min_missing_nodes: Add further tail classes until at least this many nodes were removed.
            (default: 20)
        keep_classes: Never leave a client with fewer present classes than this. (default: 2)
        missing_classes: Explicit missing classes per client (overrides the tail rule). (default: ``None``)
        recursive: METIS recursive bisection instead of k-way. FedLoG partitions "following Baek et al."
            (FED-PUB), whose generator calls METIS k-way; pymetis would pick recursive bisection for up to 8
            parts, which cuts Cora's LCC into exactly 621/621/621/622 nodes, while FedLoG's own A.16 statistics
            show unequal parts (Cora New Client 605 nodes, CiteSeer 514 of 530), k-way's signature.
            (default: ``False``)
    """

    lcc: bool = True
    new_client: bool = True
    missing_per_client: int = 1
    min_missing_nodes: int = 20
    keep_classes: int = 2
    missing_classes: tuple[tuple[int, ...], ...] | None = None
    recursive: bool = False

    def __post_init__(self) -> None:
        if self.missing_per_client < 0 or self.min_missing_nodes < 0 or self.keep_classes < 1:
            raise ConfigError(
                "need missing_per_client >= 0, min_missing_nodes >= 0 and keep_classes >= 1, got "
                f"{self.missing_per_client}, {self.min_missing_nodes}, {self.keep_classes}"
            )


@dataclass(frozen=True)
class KMeansParams:
    """``kmeans`` parameters (FedStruct).

    Args:
        cap: Enforce the size cap ``ceil(N / K) + delta``. (default: ``True``)
        delta: Slack of the cap. (default: 20)
        n_init: KMeans restarts. (default: 10)
    """

    cap: bool = True
    delta: int = 20
    n_init: int = 10

    def __post_init__(self) -> None:
        if self.delta < 0 or self.n_init < 1:
            raise ConfigError(f"need delta >= 0 and n_init >= 1, got {self.delta}, {self.n_init}")


#: Arrays of a partition file (:func:`save_partition`; the ``file`` method reads them).
PARTITION_FILE_KEYS = ("node_owner", "train_mask", "val_mask", "test_mask")


@dataclass(frozen=True)
class FileParams:
    """``file`` parameters.

    Args:
        path: ``.npz`` with ``node_owner`` (``(N,)`` integers: the client of each node, ``-1`` for none) and,
            optionally, all three of ``train_mask``, ``val_mask``, ``test_mask`` (``(N,)`` booleans, disjoint);
            with them the file's split is used and the ``split`` setting is ignored. (required)
    """

    path: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.path, str) or not self.path:
            raise ConfigError(
                "file: params.path must name an .npz partition file (node_owner [, train_mask, val_mask, "
                "test_mask]), e.g. --param path=partition.npz"
            )


@dataclass
class _Result:
    owner: np.ndarray
    injected: np.ndarray | None = None
    held_out: np.ndarray | None = None
    info: dict[str, Any] = dataclasses.field(default_factory=dict)
    masks: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None  # a split that comes with the partition


@dataclass(frozen=True)
class _Method:
    params: type
    fn: Callable[[Data, int, int, Any], _Result]
    summary: str


# --------------------------------------------------------------------------------------------------------
# Building blocks
# --------------------------------------------------------------------------------------------------------


def _rng(seed: int, purpose: int) -> np.random.Generator:
    return np.random.default_rng(np.random.SeedSequence([int(seed), purpose]))


def _undirected_pairs(data: Data) -> tuple[np.ndarray, np.ndarray]:
    ei = data.edge_index.numpy()
    keep = ei[0] < ei[1]
    return ei[0][keep], ei[1][keep]


def _metis(
    n: int,
    src: np.ndarray,
    dst: np.ndarray,
    nparts: int,
    seed: int,
    contiguous: bool = False,
    recursive: bool | None = None,
) -> np.ndarray:
    """pymetis partition of the graph given by directed edge lists (both directions, src-sorted).

    ``recursive=None`` keeps pymetis's choice (recursive bisection up to 8 parts, k-way above); ``False``
    forces k-way, ``True`` recursive bisection.
    """
    if nparts == 1:
        return np.zeros(n, dtype=np.int64)
    import pymetis

    order = np.argsort(src, kind="stable")
    src, dst = src[order], dst[order]
    xadj = np.concatenate([[0], np.cumsum(np.bincount(src, minlength=n))]).astype(np.int64)
    adjacency = pymetis.CSRAdjacency(xadj, dst.astype(np.int64))
    options = pymetis.Options(seed=int(seed) % (2**31 - 1))
    try:
        result = pymetis.part_graph(
            nparts, adjacency, options=options, contiguous=contiguous or None, recursive=recursive
        )
    except Exception as exc:  # METIS reports input problems as generic errors
        raise PartitionError(f"METIS could not split the graph into {nparts} parts: {exc}") from exc
    return np.asarray(result.vertex_part, dtype=np.int64)


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


def _kmeans(points: np.ndarray, k: int, seed: int, n_init: int) -> np.ndarray:
    from sklearn.cluster import KMeans
    from threadpoolctl import threadpool_limits

    # One thread: the result does not depend on the machine's thread count, and OpenMP spinning under CPU
    # contention (tests run in parallel) made multi-threaded KMeans up to 100x slower on 2-core machines.
    with warnings.catch_warnings(), threadpool_limits(limits=1):
        warnings.simplefilter("ignore")  # "distinct clusters < n_clusters" is checked by the caller
        km = KMeans(n_clusters=k, n_init=n_init, random_state=int(seed) % 2**32)
        return km.fit_predict(np.ascontiguousarray(points)).astype(np.int64)


def _cluster_groups_by_labels(
    group_of: np.ndarray, y: np.ndarray, num_classes: int, k: int, seed: int, n_init: int, what: str
) -> tuple[np.ndarray, dict[str, Any]]:
    """O-pFGL step 4-6: KMeans(k) on the normalised label histograms of the groups; node -> client."""
    n_groups = int(group_of.max()) + 1
    valid = group_of >= 0
    hist = np.zeros((n_groups, num_classes), dtype=np.float64)
    np.add.at(hist, (group_of[valid], y[valid]), 1.0)
    sizes = hist.sum(1)
    nonempty = np.flatnonzero(sizes > 0)
    if nonempty.size < k:
        raise PartitionError(
            f"{what}: only {nonempty.size} non-empty groups for {k} clients; use fewer clients or more groups"
        )
    dist = hist[nonempty] / sizes[nonempty, None]
    labels = _kmeans(dist, k, seed, n_init)
    client_of_group = np.full(n_groups, -1, dtype=np.int64)
    client_of_group[nonempty] = labels
    owner = np.where(valid, client_of_group[np.maximum(group_of, 0)], -1)
    return owner, {"num_groups": int(nonempty.size), "group_sizes": sizes[nonempty].astype(int).tolist()}


# --------------------------------------------------------------------------------------------------------
# Methods
# --------------------------------------------------------------------------------------------------------


def _random(data: Data, k: int, seed: int, p: RandomParams) -> _Result:
    owner = _rng(seed, 1).integers(0, k, size=int(data.num_nodes), dtype=np.int64)
    return _Result(owner)


def _metis_method(data: Data, k: int, seed: int, p: MetisParams) -> _Result:
    ei = data.edge_index.numpy()
    owner = _metis(int(data.num_nodes), ei[0], ei[1], k, seed, p.contiguous)
    return _Result(owner)


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


def _louvain_plus(data: Data, k: int, seed: int, p: LouvainPlusParams) -> _Result:
    n = int(data.num_nodes)
    comms, backend = _louvain(data, seed, p.resolution, p.backend)
    group_of = _greedy_pack(comms, n, p.num_coms, p.delta, p.chunk_order)
    owner, info = _cluster_groups_by_labels(
        group_of, data.y.numpy(), int(data.num_classes), k, seed, p.n_init, "louvain+"
    )
    info.update(num_communities=len(comms), backend=backend)
    return _Result(owner, info=info)


def _metis_plus(data: Data, k: int, seed: int, p: MetisPlusParams) -> _Result:
    ei = data.edge_index.numpy()
    group_of = _metis(int(data.num_nodes), ei[0], ei[1], p.num_coms, seed)
    owner, info = _cluster_groups_by_labels(
        group_of, data.y.numpy(), int(data.num_classes), k, seed, p.n_init, "metis+"
    )
    return _Result(owner, info=info)


def _dirichlet(data: Data, k: int, seed: int, p: DirichletParams) -> _Result:
    y = data.y.numpy()
    n = y.shape[0]
    rng = _rng(seed, 2)
    classes = np.unique(y[y >= 0])
    for attempt in range(p.max_tries):
        owner = np.full(n, -1, dtype=np.int64)
        for c in classes:
            idx = np.flatnonzero(y == c)
            idx = idx[rng.permutation(idx.size)]
            prop = rng.dirichlet(np.full(k, p.alpha))
            cuts = (np.cumsum(prop)[:-1] * idx.size).astype(np.int64)
            for client, part in enumerate(np.split(idx, cuts)):
                owner[part] = client
        if np.bincount(owner[owner >= 0], minlength=k).min() >= p.min_size:
            return _Result(owner, info={"attempts": attempt + 1})
    raise PartitionError(
        f"dirichlet: no draw in {p.max_tries} tries gave every one of the {k} clients at least {p.min_size} nodes; "
        f"raise alpha, lower min_size or use fewer clients"
    )


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
        want = int(math.floor(p.rho * n_und))
        homo = modes[client] == "homo"
        new, shortfall = _inject(rng, yl, lsrc, ldst, homo, want, p.anchor)
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


def _largest_component(data: Data) -> np.ndarray:
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import connected_components

    n = int(data.num_nodes)
    ei = data.edge_index.numpy()
    adj = coo_matrix((np.ones(ei.shape[1], dtype=np.int8), (ei[0], ei[1])), shape=(n, n))
    _, comp = connected_components(adj, directed=False)
    return comp == np.argmax(np.bincount(comp))


def _fedlog(data: Data, k: int, seed: int, p: FedLoGParams) -> _Result:
    n = int(data.num_nodes)
    y = data.y.numpy()
    c_total = int(data.num_classes)
    keep = _largest_component(data) if p.lcc else np.ones(n, dtype=bool)
    nodes = np.flatnonzero(keep)
    if nodes.size < k + int(p.new_client):
        raise PartitionError(f"fedlog: {nodes.size} nodes in the component for {k} clients (+ new client)")
    pos = np.full(n, -1, dtype=np.int64)
    pos[nodes] = np.arange(nodes.size)
    ei = data.edge_index.numpy()
    inside = keep[ei[0]] & keep[ei[1]]
    parts = _metis(
        nodes.size, pos[ei[0][inside]], pos[ei[1][inside]], k + int(p.new_client), seed, recursive=p.recursive
    )
    owner = np.full(n, -1, dtype=np.int64)
    owner[nodes] = parts
    held = None
    if p.new_client:
        held = np.flatnonzero(owner == k)
        owner[held] = -1
    if p.missing_classes is not None and len(p.missing_classes) != k:
        raise PartitionError(f"fedlog: missing_classes has {len(p.missing_classes)} entries for {k} clients")
    missing, absent, removed = [], [], []
    for client in range(k):
        members = owner == client
        counts = np.bincount(y[members], minlength=c_total)
        present = [c for c in np.argsort(counts, kind="stable").tolist() if counts[c] > 0]
        absent.append([c for c in range(c_total) if counts[c] == 0])
        if p.missing_classes is not None:
            chosen = [int(c) for c in p.missing_classes[client]]
            bad = [c for c in chosen if not 0 <= c < c_total]
            if bad:
                raise PartitionError(
                    f"fedlog: missing class {bad[0]} of client {client} is not in [0, {c_total})"
                )
        else:
            chosen, count = [], 0
            for c in present:
                if len(present) - len(chosen) <= p.keep_classes:
                    break
                if len(chosen) >= p.missing_per_client and count >= p.min_missing_nodes:
                    break
                chosen.append(int(c))
                count += int(counts[c])
        drop = members & np.isin(y, chosen)
        owner[drop] = -1
        missing.append(sorted(chosen))
        removed.append(int(drop.sum()))
    info = {
        "lcc_nodes": int(nodes.size),
        "missing_classes": missing,
        "absent_classes": absent,
        "removed_nodes": removed,
        "new_client_nodes": int(held.size) if held is not None else 0,
    }
    return _Result(owner, held_out=held, info=info)


def _file_method(data: Data, k: int, seed: int, p: FileParams) -> _Result:
    """Read a node -> client assignment (and optionally its split) written by :func:`save_partition` or elsewhere."""
    path = Path(p.path).expanduser()
    if not path.is_file():
        raise PartitionError(f"file: partition file {str(path)!r} does not exist")
    try:
        with np.load(path, allow_pickle=False) as z:
            arrays = {key: np.asarray(z[key]) for key in z.files}
    except (OSError, ValueError) as exc:
        raise PartitionError(f"file: {str(path)!r} is not a readable .npz archive ({exc})") from exc
    n = int(data.num_nodes)
    if "node_owner" not in arrays:
        raise PartitionError(
            f"file: {str(path)!r} has no 'node_owner' array (it has: {', '.join(sorted(arrays)) or 'nothing'})"
        )
    owner = arrays["node_owner"]
    if owner.shape != (n,) or not np.issubdtype(owner.dtype, np.integer):
        raise PartitionError(
            f"file: node_owner must be ({n},) integers for this graph, got shape {owner.shape} dtype {owner.dtype}"
        )
    owner = owner.astype(np.int64)
    if owner.min() < -1 or owner.max() >= k:
        raise PartitionError(
            f"file: node_owner holds client ids {int(owner.min())}..{int(owner.max())} but num_clients is {k} "
            f"(valid: -1 for no client, 0..{k - 1}); set partition.clients to {int(owner.max()) + 1}"
        )
    present = [key for key in PARTITION_FILE_KEYS[1:] if key in arrays]
    masks = None
    if present:
        if len(present) != 3:
            missing = sorted(set(PARTITION_FILE_KEYS[1:]) - set(present))
            raise PartitionError(f"file: {str(path)!r} has {', '.join(present)} but not {', '.join(missing)}")
        loaded = tuple(arrays[key] for key in PARTITION_FILE_KEYS[1:])
        for key, m in zip(PARTITION_FILE_KEYS[1:], loaded, strict=True):
            if m.shape != (n,) or m.dtype != np.bool_:
                raise PartitionError(
                    f"file: {key} must be ({n},) booleans, got shape {m.shape} dtype {m.dtype}"
                )
        overlap = int((loaded[0].astype(int) + loaded[1] + loaded[2] > 1).sum())
        if overlap:
            raise PartitionError(f"file: {overlap} nodes are in more than one of train/val/test")
        masks = (loaded[0], loaded[1], loaded[2])
    info = {"path": str(path), "split_from_file": masks is not None}
    return _Result(owner, info=info, masks=masks)


def save_partition(fg: FederatedGraph, path: str | Path) -> Path:
    """Write ``fg``'s node -> client assignment and split to an ``.npz`` that the ``file`` method reads back.

    FedLoG's held-out client and ``structure-noniid``'s injected edges are not part of the file format.
    """
    n = fg.num_nodes
    masks = {key: np.zeros(n, dtype=bool) for key in PARTITION_FILE_KEYS[1:]}
    for client in fg.clients:
        gid = client.global_id.numpy()
        for key, m in masks.items():
            m[gid] = client[key].numpy()
    out = Path(path)
    np.savez(out, node_owner=fg.node_owner.numpy().astype(np.int64), **masks)
    return out if out.suffix == ".npz" else out.with_name(out.name + ".npz")


def _split_to_cap(groups: list[np.ndarray], cap: int) -> list[np.ndarray]:
    out, todo = [], list(groups)
    while todo:
        g = todo.pop()
        if g.size > cap:
            half = g.size // 2
            todo.extend([g[:half], g[half:]])
        else:
            out.append(g)
    return out


def _kmeans_method(data: Data, k: int, seed: int, p: KMeansParams) -> _Result:
    n = int(data.num_nodes)
    x = data.x.numpy().astype(np.float32, copy=False)
    labels = _kmeans(x, k, seed, p.n_init)
    if not p.cap:
        return _Result(labels)
    cap = math.ceil(n / k) + p.delta
    groups = [np.flatnonzero(labels == c) for c in range(k)]
    pieces = _split_to_cap([g for g in groups if g.size], cap)
    pieces.sort(key=lambda a: (-a.size, int(a[0])))
    owner = np.full(n, -1, dtype=np.int64)
    sizes = np.zeros(k, dtype=np.int64)
    moved = 0
    for i, g in enumerate(pieces):
        if i < k:
            owner[g] = i
            sizes[i] += g.size
            continue
        while g.size:
            fits = np.flatnonzero(sizes + g.size <= cap)
            if fits.size:  # the first client (in order) that can take the whole group
                o, take = int(fits[0]), g.size
            else:  # no client can: move the excess into the client with the most room (k * cap >= n)
                o = int(np.argmax(cap - sizes))
                take = int(cap - sizes[o])
                moved += g.size - take
            owner[g[:take]] = o
            sizes[o] += take
            g = g[take:]
    return _Result(owner, info={"cap": int(cap), "pieces": len(pieces), "moved_nodes": int(moved)})


_METHODS: dict[str, _Method] = {
    "random": _Method(RandomParams, _random, "uniform random node assignment (FedStruct)"),
    "metis": _Method(MetisParams, _metis_method, "METIS k-way, minimum edge cut"),
    "louvain": _Method(LouvainParams, _louvain_method, "Louvain; K largest capped communities (FedSpray)"),
    "louvain+": _Method(
        LouvainPlusParams, _louvain_plus, "Louvain -> 100 owners -> KMeans on labels (O-pFGL)"
    ),
    "metis+": _Method(MetisPlusParams, _metis_plus, "METIS 100 parts -> KMeans on labels (O-pFGL)"),
    "dirichlet": _Method(DirichletParams, _dirichlet, "per-class Dirichlet(alpha) label skew"),
    "structure-noniid": _Method(
        StructureNonIIDParams, _structure_noniid, "METIS + homo/hete edge injection (AdaFGL)"
    ),
    "fedlog": _Method(FedLoGParams, _fedlog, "LCC, METIS K+1, held-out new client, missing classes (FedLoG)"),
    "kmeans": _Method(KMeansParams, _kmeans_method, "KMeans on features, size-capped (FedStruct)"),
    "file": _Method(FileParams, _file_method, "node -> client assignment (and split) read from an .npz"),
}

_METHOD_ALIASES = {
    "louvainplus": "louvain+",
    "metisplus": "metis+",
    "structurenoniid": "structure-noniid",
    "noniid": "structure-noniid",
    "adafgl": "structure-noniid",
    "k-means": "kmeans",
    "dir": "dirichlet",
}


def partition_methods() -> dict[str, str]:
    """Method name -> one-line description, in display order."""
    return {name: m.summary for name, m in _METHODS.items()}


def normalize_method(name: str, *, error: type[Exception] = PartitionError, key: str = "method") -> str:
    """Canonical method name (case, ``_`` vs ``-`` and ``plus`` vs ``+`` do not matter).

    Raises:
        PartitionError: (or ``error``) an unknown method; the message lists the valid ones.
    """
    if isinstance(name, str):
        low = name.strip().lower().replace("_", "-")
        if low in _METHODS:
            return low
        squashed = low.replace("-", "").replace(" ", "")
        if squashed in _METHOD_ALIASES:
            return _METHOD_ALIASES[squashed]
        if squashed in _METHODS:
            return squashed
    raise error(f"{key}: unknown partition method {name!r}; valid choices: {', '.join(_METHODS)}")


def method_params_class(method: str) -> type:
    """The parameter dataclass of a method."""
    return _METHODS[normalize_method(method)].params


def check_method_params(method: str, params: dict[str, Any] | None, *, where: str = "params") -> Any:
    """Validate method parameters; return the parameter dataclass instance.

    Raises:
        ConfigError: Unknown key (valid keys listed) or invalid value.
    """
    cls = method_params_class(method)
    name = normalize_method(method)
    try:
        return build(cls, params or {}, where=where)
    except ConfigError as exc:
        raise ConfigError(f"{exc} (method {name!r})") from exc


def _check_int(value: Any, what: str, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise PartitionError(f"{what} must be an integer, got {value!r}")
    if int(value) < minimum:
        raise PartitionError(f"{what} must be at least {minimum}, got {value!r}")
    return int(value)


def _masks_from(data: Data, owner: np.ndarray, split: Any, scope: str, stratified: bool, seed: int) -> tuple:
    if split == "public":
        return tuple(getattr(data, k).numpy().astype(bool) for k in ("train_mask", "val_mask", "test_mask"))
    rng = _rng(seed, 4)
    groups = None if scope == "global" else owner
    masks = split_masks(data.y, split, rng, stratified=stratified, groups=groups)
    return tuple(m.numpy() for m in masks)


def partition_graph(
    data: Data | str,
    method: str,
    num_clients: int,
    *,
    seed: int = 0,
    split: tuple[float, float, float] | str = (0.2, 0.4, 0.4),
    split_scope: Literal["client", "global"] = "client",
    stratified: bool = True,
    cache_dir: str | Path | None = None,
    cache: bool = True,
    root: str | Path | None = None,
    **method_params: Any,
) -> FederatedGraph:
    """Partition a graph among ``num_clients`` clients and split each client's nodes.

    Args:
        data: The graph (``Data`` from :func:`~securefgl.data.load_dataset` or
            :func:`~securefgl.data.make_csbm`), or a dataset name.
        method: One of :func:`partition_methods` (see the module docstring).
        num_clients: K >= 1.
        seed: Integer seed of the partition and of the splits. (default: 0)
        split: ``(train, val, test)`` ratios summing to at most 1, or ``"public"``. (default: ``(0.2, 0.4, 0.4)``)
        split_scope: ``"client"`` (per-client split) or ``"global"`` (one split of the whole graph drawn before
            partitioning). (default: ``"client"``)
        stratified: Split per class. (default: ``True``)
        cache_dir: Cache directory; ``None`` means ``<data root>/_partitions``. (default: ``None``)
        cache: Read and write the cache. (default: ``True``)
        root: Data root, for a dataset name and the default cache directory. (default: ``None``)
        **method_params: Method parameters (see the ``*Params`` dataclasses); unknown ones are rejected.

    Returns:
        A :class:`~securefgl.data.FederatedGraph`; ``meta`` holds the method, the resolved parameters, the seed,
        the split, the dataset fingerprint, the cache ``key``, ``cache_hit`` and method-specific information.

    Raises:
        PartitionError: Unknown method, a seed or K that is not an integer, more clients than nodes or
            communities, a ``"public"`` split on a dataset without one, or an empty client.
        ConfigError: Invalid split ratios or method parameters (PartitionError is a ConfigError).
    """
    # ---- validation: everything that can be checked before any work ----
    method = normalize_method(method)
    seed = _check_int(seed, "seed", 0)
    num_clients = _check_int(num_clients, "num_clients", 1)
    split = check_split(split, key="split")
    if split_scope not in ("client", "global"):
        raise ConfigError(f"split_scope: invalid value {split_scope!r}; valid choices: 'client', 'global'")
    if not isinstance(stratified, bool):
        raise ConfigError(f"stratified must be true or false, got {stratified!r}")
    params = check_method_params(method, method_params)
    if isinstance(data, str):
        from securefgl.data.datasets import load_dataset

        data = load_dataset(data, root)
    if not isinstance(data, Data) or data.edge_index is None or data.y is None:
        raise PartitionError(
            f"data must be a torch_geometric Data with edge_index and y, got {type(data).__name__}"
        )
    n = int(data.num_nodes)
    if not hasattr(data, "num_classes") or not isinstance(data.num_classes, int):
        data.num_classes = int(data.y.max()) + 1
    extra = 1 if method == "fedlog" and params.new_client else 0
    if num_clients + extra > n:
        raise PartitionError(
            f"{num_clients} clients requested for a graph of {n} nodes; use at most {n - extra}"
        )
    if method in ("louvain+", "metis+"):
        if num_clients > params.num_coms:
            raise PartitionError(
                f"{method}: {num_clients} clients but only num_coms={params.num_coms} communities; "
                f"use at most {params.num_coms} clients or raise num_coms"
            )
        if params.num_coms > n:
            raise PartitionError(f"{method}: num_coms={params.num_coms} exceeds the {n} nodes of the graph")
    if method == "structure-noniid" and params.modes is not None and len(params.modes) != num_clients:
        raise PartitionError(
            f"structure-noniid: modes has {len(params.modes)} entries for {num_clients} clients"
        )
    if (
        method == "fedlog"
        and params.missing_classes is not None
        and len(params.missing_classes) != num_clients
    ):
        raise PartitionError(
            f"fedlog: missing_classes has {len(params.missing_classes)} entries for {num_clients}"
        )
    if split == "public":
        missing = [k for k in ("train_mask", "val_mask", "test_mask") if getattr(data, k, None) is None]
        if missing:
            raise PartitionError(
                f"split='public' but dataset {getattr(data, 'name', '?')!r} has no public split "
                f"(missing {', '.join(missing)}); give [train, val, test] ratios instead"
            )

    if method == "file":
        cache = False  # the file is the stored partition; a cache entry would go stale when it changes
    # ---- cache lookup ----
    fingerprint = graph_fingerprint(data)
    request = {
        "dataset": str(getattr(data, "name", "graph")),
        "fingerprint": fingerprint,
        "num_nodes": n,
        "method": method,
        "num_clients": num_clients,
        "seed": seed,
        "split": list(split) if split != "public" else "public",
        "split_scope": split_scope,
        "stratified": stratified,
        "params": to_dict(params),
    }
    key = cache_key(request)
    cdir = Path(cache_dir) if cache_dir is not None else data_root(root) / "_partitions"
    meta = {**request, "key": key, "cache_version": CACHE_VERSION, "cache_path": str(cdir / f"{key}.pt")}

    if cache:
        hit = load_cached(cdir, key, request)
        if hit is not None:
            tensors, info = hit
            owner_t = tensors.get("node_owner")
            masks_t = [tensors.get(k) for k in ("train_mask", "val_mask", "test_mask")]
            if (
                owner_t is not None
                and owner_t.shape == (n,)
                and all(m is not None and m.shape == (n,) for m in masks_t)
            ):
                inj = tensors.get("injected")
                held = tensors.get("held_out")
                meta.update(info=info.get("info", {}), cache_hit=True, time_s=info.get("time_s"))
                return build_federated_graph(
                    data,
                    owner_t.numpy(),
                    num_clients,
                    tuple(m.numpy() for m in masks_t),  # type: ignore[union-attr]
                    injected=inj.numpy() if inj is not None else None,
                    held_out=held.numpy() if held is not None else None,
                    meta=meta,
                )

    # ---- build ----
    t0 = time.perf_counter()
    result = _METHODS[method].fn(data, num_clients, seed, params)
    owner = np.asarray(result.owner, dtype=np.int64)
    counts = np.bincount(owner[owner >= 0], minlength=num_clients)
    if counts.size > num_clients:
        raise PartitionError(f"{method} produced client ids >= {num_clients}")  # defensive: a partitioner bug
    empty = np.flatnonzero(counts == 0)
    if empty.size:
        raise PartitionError(
            f"{method}: client {int(empty[0])} is empty ({empty.size} of {num_clients} clients have no node); "
            f"use fewer clients or other parameters"
        )
    masks = (
        result.masks
        if result.masks is not None
        else _masks_from(data, owner, split, split_scope, stratified, seed)
    )
    if result.masks is not None:
        meta["split"] = "file"
    elapsed = time.perf_counter() - t0
    meta.update(info=result.info, cache_hit=False, time_s=elapsed)
    if cache:
        tensors = {"node_owner": torch.from_numpy(owner)}
        tensors.update(
            {
                k: torch.from_numpy(np.ascontiguousarray(m))
                for k, m in zip(("train_mask", "val_mask", "test_mask"), masks, strict=True)
            }
        )
        if result.injected is not None and result.injected.size:
            tensors["injected"] = torch.from_numpy(np.ascontiguousarray(result.injected, dtype=np.int64))
        if result.held_out is not None:
            tensors["held_out"] = torch.from_numpy(np.ascontiguousarray(result.held_out, dtype=np.int64))
        try:
            store_cached(cdir, key, request, tensors, {"info": result.info, "time_s": elapsed})
        except OSError as exc:
            warnings.warn(
                f"partition cache {str(cdir)!r} is not writable ({exc}); continuing without it", stacklevel=2
            )
    return build_federated_graph(
        data, owner, num_clients, masks, injected=result.injected, held_out=result.held_out, meta=meta
    )
