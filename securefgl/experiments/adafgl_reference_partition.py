"""Replay of the Louvain "community split" behind AdaFGL's Table II-a (spec ``adafgl.md`` §1.2).

AdaFGL's published numbers come from one partition per dataset, made once by the authors' pipeline and cached.
``louvain`` with ``assign="greedy"`` in :mod:`securefgl.data.partition` follows the same idea with another
Louvain implementation, random stream and packing, so it is another draw. :func:`reference_partition` replays
the reference pipeline step by step (``set_seed(2023)``; ``to_networkx(G, to_undirected=True)``; python-louvain's
``best_partition`` drawing from global numpy; ``structure_iid_louvain``'s packing, including the bug that
appends a forced chunk twice; a non-stratified ``random.shuffle`` split per client).
``examples/adafgl_reference_partition.py`` is the command line and documents each step.

Three halves, run in two environments:

* :func:`export_graph` (securefgl's environment) writes the reference's directed ``edge_index`` and labels;
* :func:`reference_partition` (an environment with networkx and python-louvain) replays the partition. This
  module imports only numpy and the standard library at import time (networkx and python-louvain inside the
  functions that need them), and nothing from torch;
* :func:`client_rows` (securefgl's environment) gives per-client statistics of a partition.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import numpy as np

from securefgl.errors import ConfigError

__all__ = [
    "GEOM",
    "PLANETOID",
    "SEED",
    "SPLIT",
    "TRIANGLES",
    "client_rows",
    "export_graph",
    "pack_reference",
    "read_edge_file",
    "reference_graph",
    "reference_partition",
]

#: config.py ``--seed`` default, used by ``set_seed`` before the partition.
SEED = 2023
#: ``GraphFLDataset`` defaults (main.py passes none): ratio_train, ratio_val; test is the rest.
SPLIT = (0.2, 0.4, 0.4)
#: Datasets the reference reads with torch_geometric's Planetoid, and with its own ``load_geom_data``.
PLANETOID = ("cora", "citeseer", "pubmed")
GEOM = ("chameleon", "squirrel")
#: Which half of ``edge_index`` ``to_networkx(to_undirected=True)`` keeps: ``u <= v`` (PyG 2.0.4-2.4) or
#: ``u >= v`` (PyG <= 2.0.3).
TRIANGLES = ("upper", "lower")


# ----------------------------------------------------------------------------------------------------------
# export (securefgl's environment)
# ----------------------------------------------------------------------------------------------------------


def read_edge_file(path: Path) -> np.ndarray:
    """Integer pairs of an edge list in file order; lines that are not two integers (a header) are skipped.

    Shapes:
        returns ``(E, 2)`` int64, in file order.
    """
    rows = []
    for line in Path(path).read_text().splitlines():
        parts = line.split()
        if len(parts) >= 2 and parts[0].lstrip("-").isdigit() and parts[1].lstrip("-").isdigit():
            rows.append((int(parts[0]), int(parts[1])))
    return np.asarray(rows, dtype=np.int64).reshape(-1, 2)


def export_graph(dataset: str, out_dir: Path, root: str | None, edge_file: Path | None) -> Path:
    """Write ``<dataset>_graph.npz``: the reference's directed ``edge_index`` (``src``, ``dst``) in its order, labels.

    Prints what it knows about the input order (the edge file's statistics, or a warning that the Geom-GCN
    order is approximated by securefgl's sorted edges).

    Args:
        dataset: One of :data:`PLANETOID` or :data:`GEOM` (any case).
        out_dir: The folder to write to (created if missing).
        root: The data root (``None``: ``$SECUREFGL_DATA``).
        edge_file: For the Geom-GCN datasets, the reference's edge list (``chameleon.edge`` or Geom-GCN's
            ``out1_graph_edges.txt``), whose row order the replay needs; ``None``: securefgl's edges.

    Returns:
        The path written, with arrays ``src``, ``dst``, ``y``, ``num_nodes`` and ``exact`` (whether the input
        order is the reference's).

    Raises:
        ConfigError: The dataset is not one the reference loads, ``edge_file`` is given for a Planetoid
            dataset, or it names nodes the dataset does not have.
    """
    from securefgl.data import load_dataset

    data = load_dataset(dataset, root)
    name = str(data.name).lower()
    n = int(data.num_nodes)
    ei = data.edge_index.numpy()
    ours = {(int(a), int(b)) for a, b in ei.T if a < b}
    if name in PLANETOID:
        if edge_file is not None:
            raise ConfigError("--edge-file is for the Geom-GCN datasets; Planetoid's order is fixed by PyG")
        # PyG's Planetoid edge_index: self-loops removed, coalesced (sorted by row in 2023's PyG, by column in recent PyG;
        # both give the same networkx graph), symmetric. Ours is the same set, sorted by row.
        order = np.lexsort((ei[1], ei[0]))
        src, dst, exact = ei[0][order], ei[1][order], True
    elif name in GEOM:
        if edge_file is not None:
            pairs = read_edge_file(edge_file)
            theirs = {(min(a, b), max(a, b)) for a, b in pairs.tolist() if a != b}
            loops = int((pairs[:, 0] == pairs[:, 1]).sum())
            print(
                f"{edge_file}: {len(pairs)} rows, {loops} self-loops, {len(theirs)} undirected non-loop edges; "
                f"securefgl: {len(ours)}; only in the file: {len(theirs - ours)}, only in securefgl: "
                f"{len(ours - theirs)}"
            )
            if pairs.max() >= n:
                raise ConfigError(f"{edge_file} has node ids up to {pairs.max()} but {dataset} has {n} nodes")
            exact = theirs == ours
        else:
            pairs = np.asarray(sorted(ours), dtype=np.int64).reshape(-1, 2)
            exact = False
            print(
                f"warning: no --edge-file; {dataset}'s edges are securefgl's ({len(ours)} undirected, sorted, no "
                f"self-loops), not the order and self-loops of the reference's chameleon.edge: an approximate replay"
            )
        # load_geom_data: the file's rows, then every row reversed.
        src = np.concatenate([pairs[:, 0], pairs[:, 1]])
        dst = np.concatenate([pairs[:, 1], pairs[:, 0]])
    else:
        raise ConfigError(f"the reference loads {', '.join(PLANETOID + GEOM)}; got {dataset!r}")
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{data.name}_graph.npz"
    np.savez(path, src=src, dst=dst, y=data.y.numpy(), num_nodes=n, exact=exact)
    return path


# ----------------------------------------------------------------------------------------------------------
# partition (the reference's environment: numpy, networkx, python-louvain)
# ----------------------------------------------------------------------------------------------------------


def reference_graph(src: np.ndarray, dst: np.ndarray, num_nodes: int, triangle: str) -> object:
    """``to_networkx(G, to_undirected=True)``: nodes in id order, one triangle of ``edge_index`` in order.

    Raises:
        ConfigError: ``triangle`` is not one of :data:`TRIANGLES`.
    """
    if triangle not in TRIANGLES:
        raise ConfigError(f"unknown triangle {triangle!r}; valid: {', '.join(TRIANGLES)}")
    import networkx as nx

    graph = nx.Graph()
    graph.add_nodes_from(range(num_nodes))
    keep = src <= dst if triangle == "upper" else src >= dst
    graph.add_edges_from(zip(src[keep].tolist(), dst[keep].tolist(), strict=True))
    return graph


def pack_reference(part: dict[int, int], num_nodes: int, clients: int) -> tuple[list[list[int]], int]:
    """``structure_iid_louvain``'s packing, duplicates included; returns the owners' node lists and the forced count.

    ``part`` maps node -> community in node order (python-louvain's key order).
    """
    first_seen: dict[int, list[int]] = {}
    for node, com in part.items():
        first_seen.setdefault(com, []).append(node)
    pieces = list(first_seen.values())
    cap = num_nodes // clients
    i = 0
    while i < len(pieces):  # a piece over the cap keeps its head; the rest goes to the end and is cut in turn
        if len(pieces[i]) > cap:
            pieces.append(pieces[i][cap:])
            pieces[i] = pieces[i][:cap]
        i += 1
    pieces.sort(key=len, reverse=True)  # stable, like sorting the (group, length) items
    target = num_nodes // clients
    owners: list[list[int]] = [[] for _ in range(clients)]
    active, ptr, forced = list(range(clients)), 0, 0
    for piece in pieces:
        while (
            len(owners[active[ptr]]) > target
        ):  # full: out of the rotation (an empty rotation raises, as there)
            active.pop(ptr)
            ptr %= len(active)
        tries = 0
        while len(owners[active[ptr]]) + len(piece) > target + 1:
            tries += 1
            ptr = (ptr + 1) % len(active)
            if tries == len(active):  # a full turn: the reference appends the piece here ...
                owners[active[ptr]] += piece
                forced += 1
                break
        owners[active[ptr]] += piece  # ... and here again
    return owners, forced


def reference_partition(
    graph_file: Path, clients: int, seed: int, split: tuple[float, float], triangle: str
) -> tuple[dict[str, np.ndarray], dict[str, object]]:
    """Replay the reference pipeline on a graph file written by :func:`export_graph`.

    Seeds ``random`` and ``numpy``'s global generators with ``seed`` (as the reference's ``set_seed``).

    Args:
        graph_file: A ``<dataset>_graph.npz`` from :func:`export_graph`.
        clients: Number of clients.
        seed: The reference's seed (:data:`SEED`).
        split: The train and validation ratios (test is the rest), e.g. ``SPLIT[:2]``.
        triangle: One of :data:`TRIANGLES`.

    Returns:
        The arrays ``node_owner`` ``(N,)`` and ``train_mask``/``val_mask``/``test_mask`` ``(N,)`` (a duplicated
        node keeps its later copy and that copy's role), and a report: ``communities``, ``forced``,
        ``duplicated``, ``role_conflicts``, ``sizes_with_duplicates`` (the reference's per-client node counts)
        and ``exact_input``.

    Raises:
        RuntimeError: The packing dealt a node to two clients or left one without a client (never in the
            reference).
    """
    from community import community_louvain

    z = np.load(graph_file)
    n = int(z["num_nodes"])
    random.seed(seed)  # set_seed(args.seed)
    np.random.seed(seed)
    graph = reference_graph(z["src"], z["dst"], n, triangle)
    part = community_louvain.best_partition(graph)  # random_state=None: the global numpy generator
    owners, forced = pack_reference(part, n, clients)
    owner = np.full(n, -1, dtype=np.int64)
    masks = {key: np.zeros(n, dtype=bool) for key in ("train_mask", "val_mask", "test_mask")}
    duplicated, role_conflicts = 0, 0
    for k, nodes in enumerate(owners):
        m = len(nodes)  # the reference's num_local_nodes, duplicates counted
        local = list(range(m))
        random.shuffle(local)
        a, b = int(m * split[0]), int(m * split[1])
        role = np.empty(m, dtype=np.int64)
        role[local[:a]], role[local[a : a + b]], role[local[a + b :]] = 0, 1, 2
        last: dict[int, int] = {}
        roles_of: dict[int, set[int]] = {}
        for i, v in enumerate(nodes):
            last[v] = i  # node_idx_map: the last copy wins (and carries the edges)
            roles_of.setdefault(v, set()).add(int(role[i]))
        duplicated += m - len(last)
        role_conflicts += sum(len(r) > 1 for r in roles_of.values())
        if (owner[list(last)] >= 0).any():
            raise RuntimeError("a node was dealt to two clients; the reference never does this")
        for v, i in last.items():
            owner[v] = k
            masks[("train_mask", "val_mask", "test_mask")[role[i]]][v] = True
    if (owner < 0).any():
        raise RuntimeError(f"{int((owner < 0).sum())} nodes have no client")
    report = {
        "communities": len(set(part.values())),
        "forced": forced,
        "duplicated": duplicated,
        "role_conflicts": role_conflicts,
        "sizes_with_duplicates": [len(o) for o in owners],
        "exact_input": bool(z["exact"]) if "exact" in z.files else None,
    }
    return {"node_owner": owner, **masks}, report


# ----------------------------------------------------------------------------------------------------------
# statistics (securefgl's environment)
# ----------------------------------------------------------------------------------------------------------


def client_rows(fg: Any) -> list[dict[str, object]]:
    """Per-client statistics of a :class:`~securefgl.data.FederatedGraph`.

    Returns:
        One dict per client: ``n`` (nodes), ``edges`` (undirected), ``h_edge`` (edge homophily; NaN without
        edges), ``hist`` (label histogram over all classes) and ``split`` (train/val/test node counts).
    """
    from securefgl.data import edge_homophily

    rows = []
    for c in fg.clients:
        ei = c.edge_index
        rows.append(
            {
                "n": int(c.num_nodes),
                "edges": int(ei.shape[1]) // 2,
                "h_edge": edge_homophily(ei, c.y) if ei.shape[1] else float("nan"),
                "hist": np.bincount(c.y.numpy(), minlength=fg.num_classes).tolist(),
                "split": [int(c[key].sum()) for key in ("train_mask", "val_mask", "test_mask")],
            }
        )
    return rows
