"""Replay of the partition pipeline behind O-pFGL's published tables (louvain+ / metis+; spec ``opfgl.md`` §1.2).

O-pFGL's tables come from one partition per (dataset, scheme), made once and cached. ``louvain+`` and
``metis+`` in :mod:`securefgl.data.partition` follow the same recipe, but the result depends on the random
streams of the tools the reference ran with: the global ``numpy``/``random`` generators seeded with 42,
python-louvain's ``best_partition`` drawing from global numpy, scikit-learn 1.2's ``KMeans(n_clusters=m)``
(``n_init=10``, k-means++, ``random_state=None``) drawing next, and Python's ``random.shuffle`` for each client's
per-class split. :func:`reference_partition` replays that order with those libraries.

Two halves, run in two environments (``examples/opfgl_reference_partition.py`` is the command line):

* :func:`export_graph` runs in securefgl's environment and writes the graph file;
* :func:`reference_partition` runs in an environment with the reference's libraries (numpy 1.26,
  scikit-learn 1.2, networkx, python-louvain, pymetis). This module imports only numpy and the standard library
  at import time (each third-party tool inside the function that needs it), and nothing from torch.
"""

from __future__ import annotations

import random
import warnings
from pathlib import Path

import numpy as np

from securefgl.errors import ConfigError

__all__ = [
    "DELTA",
    "METHODS",
    "NUM_GROUPS",
    "SEED",
    "SPLIT",
    "export_graph",
    "pack_reference",
    "reference_partition",
]

#: O-pFGL's partition constants (spec §1.2 and §4.2): 100 groups, size slack 20, split 20/40/40, seed 42.
NUM_GROUPS = 100
DELTA = 20
SPLIT = (0.2, 0.4)
SEED = 42
#: The partition schemes the replay knows.
METHODS = ("louvain+", "metis+")


def export_graph(dataset: str, out_dir: Path, root: str | None) -> Path:
    """Write ``<dataset>_graph.npz``: undirected edges (u < v) in ``to_networkx`` insertion order, labels.

    Args:
        dataset: A dataset name :func:`securefgl.data.load_dataset` knows.
        out_dir: The folder to write to (created if missing).
        root: The data root (``None``: ``$SECUREFGL_DATA``).

    Returns:
        The path written, with arrays ``u``, ``v``, ``y`` and ``num_nodes``.
    """
    from securefgl.data import load_dataset

    data = load_dataset(dataset, root)
    ei = data.edge_index.numpy()
    keep = ei[0] < ei[1]  # to_networkx(to_undirected=True) adds each edge once, from the upper triangle
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{dataset}_graph.npz"
    np.savez(path, u=ei[0][keep], v=ei[1][keep], y=data.y.numpy(), num_nodes=int(data.num_nodes))
    return path


def pack_reference(part: dict[int, int], num_nodes: int) -> list[list[int]]:
    """Cut communities into chunks of at most ``N // 100 - 20`` nodes and pack them into 100 groups (spec §1.2).

    ``part`` maps node -> community in the reference's key order (node id order). Returns the 100 groups, some
    possibly empty, in owner order; ``securefgl.data.partition`` packs the same way (checked by the tests).
    """
    first_seen: dict[int, list[int]] = {}
    for node, com in part.items():
        first_seen.setdefault(com, []).append(node)
    pieces = list(first_seen.values())
    cap = num_nodes // NUM_GROUPS - DELTA
    i = 0
    while i < len(pieces):  # a piece over the cap keeps its head; the rest goes to the end of the list
        if len(pieces[i]) > cap:
            pieces.append(pieces[i][cap:])
            pieces[i] = pieces[i][:cap]
        i += 1
    pieces.sort(key=len, reverse=True)  # stable
    target = num_nodes // NUM_GROUPS
    groups: list[list[int]] = [[] for _ in range(NUM_GROUPS)]
    active, ptr = list(range(NUM_GROUPS)), 0
    for piece in pieces:
        while len(active) >= 2 and len(groups[active[ptr]]) >= target:
            active.pop(ptr)
            ptr %= len(active)
        tries = 0
        while len(groups[active[ptr]]) + len(piece) >= target + DELTA and tries <= 1000:
            ptr = (ptr + 1) % len(active)
            tries += 1
        groups[active[ptr]] += piece
    return groups


def _louvain_groups(graph: object, num_nodes: int) -> list[list[int]]:
    from community import community_louvain

    part = community_louvain.best_partition(graph)  # random_state=None: the global numpy generator
    return [g for g in pack_reference(part, num_nodes) if g]


def _metis_groups(graph: object, num_nodes: int) -> list[list[int]]:
    import pymetis

    _, membership = pymetis.part_graph(NUM_GROUPS, graph)
    member = np.asarray(membership)
    return [np.flatnonzero(member == c).tolist() for c in range(NUM_GROUPS) if (member == c).any()]


def reference_partition(graph_file: Path, method: str, clients: int, seed: int) -> dict[str, np.ndarray]:
    """Replay the reference pipeline on a graph file written by :func:`export_graph`.

    Seeds ``random`` and ``numpy``'s global generators with ``seed`` (as the reference does), so the result
    depends on the installed python-louvain, pymetis and scikit-learn versions.

    Args:
        graph_file: A ``<dataset>_graph.npz`` from :func:`export_graph`.
        method: One of :data:`METHODS`, ``"louvain+"`` or ``"metis+"``.
        clients: Number of clients (KMeans clusters of the groups' label histograms).
        seed: The reference's seed (:data:`SEED`).

    Returns:
        ``node_owner`` ``(N,)`` (int64) and the three split masks ``train_mask``, ``val_mask``, ``test_mask``
        ``(N,)`` (bool), ready for ``np.savez`` and ``partition_graph(..., "file", ...)``.

    Raises:
        ConfigError: ``method`` is not one of :data:`METHODS`.
    """
    if method not in METHODS:
        raise ConfigError(f"unknown reference partition method {method!r}; valid: {', '.join(METHODS)}")
    import networkx as nx
    from sklearn.cluster import KMeans

    z = np.load(graph_file)
    n, y = int(z["num_nodes"]), z["y"]
    num_classes = int(y.max()) + 1
    random.seed(seed)
    np.random.seed(seed)
    graph = nx.Graph()
    graph.add_nodes_from(range(n))
    graph.add_edges_from(zip(z["u"].tolist(), z["v"].tolist(), strict=True))
    groups = _louvain_groups(graph, n) if method == "louvain+" else _metis_groups(graph, n)
    hist = np.zeros((len(groups), num_classes))
    for j, g in enumerate(groups):
        np.add.at(hist[j], y[g], 1.0)
    hist /= hist.sum(1, keepdims=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # scikit-learn 1.2's FutureWarning about the n_init default
        cluster = KMeans(n_clusters=clients).fit(hist).labels_
    members: list[list[int]] = [[] for _ in range(clients)]
    for j, g in enumerate(groups):
        members[int(cluster[j])] += g
    owner = np.full(n, -1, dtype=np.int64)
    masks = {k: np.zeros(n, dtype=bool) for k in ("train_mask", "val_mask", "test_mask")}
    for k, nodes in enumerate(members):
        owner[nodes] = k
        by_class: dict[int, list[int]] = {}
        for local, v in enumerate(nodes):
            by_class.setdefault(int(y[v]), []).append(local)
        for c in range(num_classes):
            if c not in by_class:
                continue
            local_ids = by_class[c]
            random.shuffle(local_ids)
            a, b = int(len(local_ids) * SPLIT[0]), int(len(local_ids) * SPLIT[1])
            for key, part in zip(
                masks, (local_ids[:a], local_ids[a : a + b], local_ids[a + b :]), strict=True
            ):
                masks[key][[nodes[i] for i in part]] = True
    return {"node_owner": owner, **masks}
