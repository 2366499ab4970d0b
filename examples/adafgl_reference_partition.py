"""Replay the Louvain "community split" behind AdaFGL's Table II-a (Cora, CiteSeer, Chameleon; spec adafgl.md §1.2).

AdaFGL's published numbers come from one partition per dataset, made once by the authors' pipeline and cached.
``louvain`` with ``assign="greedy"`` in :mod:`securefgl.data.partition` follows the same idea, but with a different
Louvain implementation (networkx), a different random stream and OpenFGL's packing (slack 20), so it is another
draw. This script replays the reference pipeline step by step, with its own code:

1. ``set_seed(2023)`` (config default ``--seed 2023``): ``random``, ``numpy`` and ``torch`` seeded; nothing draws
   from ``random`` or ``numpy`` before the partition.
2. The graph: ``to_networkx(G, to_undirected=True)``: nodes ``0..N-1``, then the edges of ``G.edge_index`` in their
   order, keeping ``u <= v`` (PyG 2.0.4-2.4; ``--triangle lower`` is PyG <= 2.0.3's ``u >= v``); self-loops kept.
   Planetoid: ``edge_index`` is symmetric, without self-loops, sorted; both triangles give the same networkx
   graph (every adjacency list ascending), whatever the PyG version. Chameleon: the rows of
   ``datasets/Chameleon/raw/chameleon.edge`` in file order, then the same rows reversed (``load_geom_data``).
3. ``community_louvain.best_partition(graph)`` (vendored python-louvain, ``random_state=None``: global numpy).
4. ``structure_iid_louvain``: communities in order of first appearance (node order), each cut into chunks of at
   most ``N // K`` nodes (a remainder goes to the end of the list and is cut again), sorted by size (descending,
   stable), then dealt to owners: an owner with more than ``N // K`` nodes leaves the rotation; the pointer moves
   on while ``size + |chunk| > N // K + 1``; after a full turn the chunk is forced onto the current owner and
   appended TWICE (the reference's bug), which duplicates its nodes inside that client.
5. The split, per client 0..K-1: ``random.shuffle`` of ``range(n_k)``, train = first ``int(0.2 n_k)``, val = next
   ``int(0.4 n_k)``, test = the rest. Not stratified. ``GraphFLDataset``'s defaults 0.2/0.4/0.4 hold for every
   dataset (main.py passes no ratios), although the paper says 60/20/20 for Chameleon (``--split 0.6 0.2 0.2``:
   same shuffles, other cut points).

A duplicated node has two local copies in the reference; the later copy carries the edges (the local index
map keeps the last occurrence), the earlier one is an isolated copy with its own split role. The file written
here keeps one copy, the later one, and its role; ``partition`` prints how many nodes were duplicated and stores
the reference's per-client node counts with duplicates (``reference_local_nodes``). The reference's global
accuracy weights each client's accuracy by that count over the true number of nodes, so the weights sum to more
than 1 when nodes are duplicated (Chameleon: 2491 / 2277 = 1.094) and the published figure is inflated by that
factor; ``reproduce_adafgl.py --partition-dir`` prints that figure beside the true accuracy.

Three steps, because the replay needs python-louvain, which securefgl does not depend on::

    # 1. in securefgl's environment: the reference's edge_index and the labels
    python examples/adafgl_reference_partition.py export --dataset CiteSeer --out ref/
    #    Chameleon: the order of the edge file matters; pass the reference's file when you have it
    #    (AdaFGL's datasets/Chameleon.zip: Chameleon/raw/chameleon.edge; or Geom-GCN's out1_graph_edges.txt)
    python examples/adafgl_reference_partition.py export --dataset chameleon --out ref/ --edge-file chameleon.edge

    # 2. in an environment with python-louvain and networkx (imports nothing from securefgl or torch)
    python3.11 -m venv /tmp/refenv && /tmp/refenv/bin/pip install "numpy<2" networkx python-louvain
    /tmp/refenv/bin/python examples/adafgl_reference_partition.py partition --graph ref/CiteSeer_graph.npz \\
        --out ref/CiteSeer_louvain.npz

    # 3. back in securefgl's environment: per-client statistics of the replay next to ours, and a run
    python examples/adafgl_reference_partition.py compare --dataset CiteSeer --file ref/CiteSeer_louvain.npz
    securefgl run --algorithm adafgl --dataset CiteSeer --clients 10 --partition file \\
        --set partition.params.path=ref/CiteSeer_louvain.npz ...   # the file's split replaces partition.split

Without ``--edge-file`` the Chameleon export uses securefgl's edges (Platonov et al.'s ``chameleon.npz``: Geom-GCN's
node ids, 31,371 undirected edges, sorted, no self-loops). The raw Geom-GCN list has its own row order and
self-loops, and Louvain depends on both (neighbour order feeds its shuffles; loops change degrees), so that replay
is the reference's recipe on a reordered input: another draw, not the paper's partition.
"""

from __future__ import annotations

import argparse
import random
from pathlib import Path

import numpy as np

#: config.py ``--seed`` default, used by ``set_seed`` before the partition.
SEED = 2023
#: ``GraphFLDataset`` defaults (main.py passes none): ratio_train, ratio_val; test is the rest.
SPLIT = (0.2, 0.4, 0.4)
#: Datasets the reference reads with torch_geometric's Planetoid, and with its own ``load_geom_data``.
PLANETOID = ("cora", "citeseer", "pubmed")
GEOM = ("chameleon", "squirrel")
#: The splits examples/reproduce_adafgl.py uses for our own partition (Table I ratios).
OUR_SPLITS = {"cora": (0.2, 0.4, 0.4), "citeseer": (0.2, 0.4, 0.4), "chameleon": (0.6, 0.2, 0.2)}


# ----------------------------------------------------------------------------------------------------------
# export (securefgl's environment)
# ----------------------------------------------------------------------------------------------------------


def read_edge_file(path: Path) -> np.ndarray:
    """Integer pairs of an edge list in file order; lines that are not two integers (a header) are skipped."""
    rows = []
    for line in Path(path).read_text().splitlines():
        parts = line.split()
        if len(parts) >= 2 and parts[0].lstrip("-").isdigit() and parts[1].lstrip("-").isdigit():
            rows.append((int(parts[0]), int(parts[1])))
    return np.asarray(rows, dtype=np.int64).reshape(-1, 2)


def export_graph(dataset: str, out_dir: Path, root: str | None, edge_file: Path | None) -> Path:
    """Write ``<dataset>_graph.npz``: the reference's directed ``edge_index`` (``src``, ``dst``) in its order, labels."""
    from securefgl.data import load_dataset

    data = load_dataset(dataset, root)
    name = str(data.name).lower()
    n = int(data.num_nodes)
    ei = data.edge_index.numpy()
    ours = {(int(a), int(b)) for a, b in ei.T if a < b}
    if name in PLANETOID:
        if edge_file is not None:
            raise SystemExit("--edge-file is for the Geom-GCN datasets; Planetoid's order is fixed by PyG")
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
                raise SystemExit(f"{edge_file} has node ids up to {pairs.max()} but {dataset} has {n} nodes")
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
        raise SystemExit(f"the reference loads {', '.join(PLANETOID + GEOM)}; got {dataset!r}")
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{data.name}_graph.npz"
    np.savez(path, src=src, dst=dst, y=data.y.numpy(), num_nodes=n, exact=exact)
    return path


# ----------------------------------------------------------------------------------------------------------
# partition (the reference's environment: numpy, networkx, python-louvain)
# ----------------------------------------------------------------------------------------------------------


def reference_graph(src: np.ndarray, dst: np.ndarray, num_nodes: int, triangle: str) -> object:
    """``to_networkx(G, to_undirected=True)``: nodes in id order, one triangle of ``edge_index`` in order."""
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
    """Replay the reference pipeline; returns the four arrays and a report (sizes with duplicates, ...)."""
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
# compare (securefgl's environment)
# ----------------------------------------------------------------------------------------------------------


def client_rows(fg: object) -> list[dict[str, object]]:
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


def print_table(title: str, fg: object, total_edges: int) -> None:
    rows = client_rows(fg)
    kept = sum(r["edges"] for r in rows)
    print(
        f"\n{title}: {len(rows)} clients, edges kept {kept}/{total_edges} ({100 * kept / total_edges:.1f}%)"
    )
    print("  client     n  edges  H_edge  train/val/test    label histogram")
    for i, r in enumerate(rows):
        tvt = "/".join(str(s) for s in r["split"])
        print(f"  {i:>6} {r['n']:>5} {r['edges']:>6}  {r['h_edge']:.3f}  {tvt:>14}    {r['hist']}")
    sizes = np.array([r["n"] for r in rows])
    print(f"  sizes: min {sizes.min()}, max {sizes.max()}, std {sizes.std():.1f}")


def compare(dataset: str, file: Path, clients: int, root: str | None) -> None:
    from securefgl.data import load_dataset, partition_graph

    data = load_dataset(dataset, root)
    total = int(data.edge_index.shape[1]) // 2
    ref = partition_graph(data, "file", clients, path=str(file))
    print_table(f"{data.name}: reference replay ({file})", ref, total)
    split = OUR_SPLITS.get(str(data.name).lower(), (0.2, 0.4, 0.4))
    ours = partition_graph(data, "louvain", clients, seed=0, split=split, assign="greedy")
    print_table(f"{data.name}: ours (louvain, assign=greedy, seed 0, split {split})", ours, total)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="command", required=True)
    ex = sub.add_parser("export", help="write the graph file (run in securefgl's environment)")
    ex.add_argument("--dataset", required=True, help="Cora, CiteSeer, PubMed, chameleon, squirrel")
    ex.add_argument("--out", type=Path, required=True, help="folder for <dataset>_graph.npz")
    ex.add_argument("--data-root", default=None)
    ex.add_argument("--edge-file", type=Path, default=None, help="chameleon.edge (or out1_graph_edges.txt)")
    pa = sub.add_parser("partition", help="replay the reference partition (run in the reference environment)")
    pa.add_argument("--graph", type=Path, required=True, help="a <dataset>_graph.npz from `export`")
    pa.add_argument("--clients", type=int, default=10)
    pa.add_argument("--seed", type=int, default=SEED, help="config.py's --seed (default 2023)")
    pa.add_argument("--split", type=float, nargs=3, default=SPLIT, metavar=("TRAIN", "VAL", "TEST"))
    pa.add_argument("--triangle", choices=("upper", "lower"), default="upper", help="to_networkx's kept half")
    pa.add_argument("--out", type=Path, required=True, help="the partition file to write (.npz)")
    co = sub.add_parser("compare", help="per-client statistics of a replay and of securefgl's louvain")
    co.add_argument("--dataset", required=True)
    co.add_argument("--file", type=Path, required=True)
    co.add_argument("--clients", type=int, default=10)
    co.add_argument("--data-root", default=None)
    args = ap.parse_args()
    if args.command == "export":
        print(export_graph(args.dataset, args.out, args.data_root, args.edge_file))
        return
    if args.command == "compare":
        compare(args.dataset, args.file, args.clients, args.data_root)
        return
    arrays, report = reference_partition(
        args.graph, args.clients, args.seed, tuple(args.split[:2]), args.triangle
    )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    # The reference's per-client node counts (duplicates counted): its evaluation weights clients by them
    # over the true node count; reproduce_adafgl.py --partition-dir reports that figure next to ours.
    np.savez(
        args.out, **arrays, reference_local_nodes=np.asarray(report["sizes_with_duplicates"], dtype=np.int64)
    )
    owner, y = arrays["node_owner"], np.load(args.graph)["y"]
    print(
        f"{report['communities']} Louvain communities; {report['forced']} forced (duplicated) chunks, "
        f"{report['duplicated']} duplicated node copies ({report['role_conflicts']} with two split roles); "
        f"exact input order: {report['exact_input']}"
    )
    for k in range(args.clients):
        hist = np.bincount(y[owner == k], minlength=int(y.max()) + 1)
        print(
            f"client {k}: {int((owner == k).sum())} nodes ({report['sizes_with_duplicates'][k]} with duplicates), "
            f"label histogram {hist.tolist()}"
        )
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
