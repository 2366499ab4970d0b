"""Rebuild the exact louvain+ / metis+ partitions behind O-pFGL's published tables.

O-pFGL's tables come from one partition per (dataset, scheme), made once and cached. ``louvain+`` and
``metis+`` in :mod:`securefgl.data.partition` follow the same recipe (spec ``opfgl.md`` §1.2; the packing is
checked to be identical given the same Louvain communities), but the result depends on the random streams of
the tools the reference ran with. Those are the global ``numpy``/``random`` generators seeded with 42, python-louvain's
``best_partition`` drawing from global numpy, scikit-learn 1.2's ``KMeans(n_clusters=m)`` (``n_init=10``,
k-means++, ``random_state=None``) drawing next, and Python's ``random.shuffle`` for each client's per-class
split. This script replays that order with those libraries and writes a partition file that
``securefgl`` reads with ``--partition file`` and ``partition.params.path``.

The check that this recovers the paper's own partition: the CiteSeer louvain+ client of the paper's Table 24 and
Fig. 1 (339 nodes; class 1 has 50 nodes, class 2 has 14, classes 3 and 5 have 180 together) appears exactly:
client 1 of the seed-42 replay, label histogram [36, 50, 14, 46, 59, 134].

Two steps, because the replay needs the old scikit-learn (k-means++ draws changed in 1.3) and python-louvain,
which securefgl does not depend on::

    # 1. in securefgl's environment: the graph, its edges in the order torch_geometric.to_networkx adds them
    python examples/opfgl_reference_partition.py export --dataset Cora --out ref/

    # 2. in a separate environment with the reference's libraries
    python3.11 -m venv /tmp/opfgl-ref
    /tmp/opfgl-ref/bin/pip install "numpy==1.26.4" "scikit-learn==1.2.2" "scipy<1.14" networkx python-louvain pymetis
    /tmp/opfgl-ref/bin/python examples/opfgl_reference_partition.py partition --graph ref/Cora_graph.npz \\
        --method louvain+ --out ref/Cora_louvain+.npz

    # 3. back in securefgl's environment
    securefgl run --preset opfgl-paper --dataset Cora --partition louvain+ --protocol secagg \\
        --set partition.method=file --set partition.params.path=ref/Cora_louvain+.npz
    python examples/reproduce_opfgl.py --partition-dir ref/

Step 2 imports nothing from securefgl or torch.
"""

from __future__ import annotations

import argparse
import random
import warnings
from pathlib import Path

import numpy as np

#: O-pFGL's partition constants (spec §1.2 and §4.2): 100 groups, size slack 20, split 20/40/40, seed 42.
NUM_GROUPS = 100
DELTA = 20
SPLIT = (0.2, 0.4)
SEED = 42


def partition_file(
    directory: Path, dataset: str, method: str, *, maker: str = "opfgl_reference_partition"
) -> Path:
    """``<directory>/<dataset>_<method>.npz`` (the dataset's case does not matter); exits with the command if missing.

    ``maker`` names the script that writes such files, for the message.
    """
    name = f"{dataset}_{method}.npz".lower()
    found = [f for f in sorted(Path(directory).glob("*.npz")) if f.name.lower() == name]
    if not found:
        raise SystemExit(
            f"no {name} in {directory}; make it with examples/{maker}.py (export, then partition)"
        )
    return found[0]


def add_partition_dir_option(parser: argparse.ArgumentParser, what: str = "") -> None:
    """``--partition-dir`` of the reproduction scripts: read the partitions this script writes."""
    parser.add_argument(
        "--partition-dir",
        type=Path,
        default=None,
        help=f"{what}read each cell's partition and split from <dir>/<dataset>_<partition>.npz, O-pFGL's own "
        "partitions rebuilt by examples/opfgl_reference_partition.py, instead of partitioning here",
    )


def export_graph(dataset: str, out_dir: Path, root: str | None) -> Path:
    """Write ``<dataset>_graph.npz``: undirected edges (u < v) in ``to_networkx`` insertion order, labels."""
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
    """Replay the reference pipeline; returns ``node_owner`` and the three split masks."""
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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="command", required=True)
    ex = sub.add_parser("export", help="write the graph file (run in securefgl's environment)")
    ex.add_argument("--dataset", required=True, help="Cora, CiteSeer, PubMed, ...")
    ex.add_argument("--out", type=Path, required=True, help="folder for <dataset>_graph.npz")
    ex.add_argument("--data-root", default=None)
    pa = sub.add_parser("partition", help="replay the reference partition (run in the reference environment)")
    pa.add_argument("--graph", type=Path, required=True, help="a <dataset>_graph.npz from `export`")
    pa.add_argument("--method", choices=("louvain+", "metis+"), required=True)
    pa.add_argument("--clients", type=int, default=10)
    pa.add_argument("--seed", type=int, default=SEED, help="the reference seeds every generator with 42")
    pa.add_argument("--out", type=Path, required=True, help="the partition file to write (.npz)")
    args = ap.parse_args()
    if args.command == "export":
        print(export_graph(args.dataset, args.out, args.data_root))
        return
    arrays = reference_partition(args.graph, args.method, args.clients, args.seed)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    np.savez(args.out, **arrays)
    owner, y = arrays["node_owner"], np.load(args.graph)["y"]
    for k in range(args.clients):
        hist = np.bincount(y[owner == k], minlength=int(y.max()) + 1)
        print(f"client {k}: {int((owner == k).sum())} nodes, label histogram {hist.tolist()}")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
