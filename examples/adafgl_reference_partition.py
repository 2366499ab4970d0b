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

    # 2. in an environment with python-louvain and networkx, from the repository root (imports nothing from
    #    torch; PYTHONPATH=. finds securefgl.experiments.adafgl_reference_partition, numpy and stdlib only)
    python3.11 -m venv /tmp/refenv && /tmp/refenv/bin/pip install "numpy<2" networkx python-louvain
    PYTHONPATH=. /tmp/refenv/bin/python examples/adafgl_reference_partition.py partition \\
        --graph ref/CiteSeer_graph.npz --out ref/CiteSeer_louvain.npz

    #    Chameleon with Geom-GCN's ten split files (global masks) instead of the per-client shuffle:
    python examples/adafgl_reference_partition.py geom-split --partition ref/chameleon_louvain.npz \\
        --split-file chameleon_split_0.6_0.2_0.npz --out ref/geom0/chameleon_louvain.npz

    # 3. back in securefgl's environment: per-client statistics of the replay next to ours, and a run
    python examples/adafgl_reference_partition.py compare --dataset CiteSeer --file ref/CiteSeer_louvain.npz
    securefgl run --algorithm adafgl --dataset CiteSeer --clients 10 --partition file \\
        --set partition.params.path=ref/CiteSeer_louvain.npz ...   # the file's split replaces partition.split

Without ``--edge-file`` the Chameleon export uses securefgl's edges (Platonov et al.'s ``chameleon.npz``: Geom-GCN's
node ids, 31,371 undirected edges, sorted, no self-loops). The raw Geom-GCN list has its own row order and
self-loops, and Louvain depends on both (neighbour order feeds its shuffles; loops change degrees), so that replay
is the reference's recipe on a reordered input: another draw, not the paper's partition.

The replay is :mod:`securefgl.experiments.adafgl_reference_partition`; this script is its command line.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from securefgl.errors import ConfigError
from securefgl.experiments.adafgl_reference_partition import (
    SEED,
    SPLIT,
    TRIANGLES,
    client_rows,
    export_graph,
    reference_partition,
)


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
    from securefgl.experiments.adafgl import SPLITS  # the splits examples/reproduce_adafgl.py uses (Table I)

    data = load_dataset(dataset, root)
    total = int(data.edge_index.shape[1]) // 2
    ref = partition_graph(data, "file", clients, path=str(file))
    print_table(f"{data.name}: reference replay ({file})", ref, total)
    split = SPLITS.get(str(data.name).lower(), (0.2, 0.4, 0.4))
    ours = partition_graph(data, "louvain", clients, seed=0, split=split, assign="greedy")
    print_table(f"{data.name}: ours (louvain, assign=greedy, seed 0, split {split})", ours, total)


def geom_split(partition: Path, split_file: Path, out: Path) -> None:
    """Write ``partition``'s node owners with the train/val/test masks of a Geom-GCN split file.

    Geom-GCN's ``<name>_split_0.6_0.2_<i>.npz`` files are global masks (Chameleon: 1,092 / 729 / 456 nodes, i.e.
    48/32/20 of all nodes despite the name); each client keeps the roles its nodes have there.
    """
    with np.load(partition) as z:
        arrays = {k: z[k] for k in z.files}
    with np.load(split_file) as g:
        masks = {k: g[k].astype(bool) for k in ("train_mask", "val_mask", "test_mask")}
    n = arrays["node_owner"].shape[0]
    if any(m.shape != (n,) for m in masks.values()):
        raise SystemExit(f"{split_file}: masks are not of length {n}")
    arrays.update(masks)
    out.parent.mkdir(parents=True, exist_ok=True)
    np.savez(out, **arrays)
    print(f"wrote {out}: train/val/test {' / '.join(str(int(m.sum())) for m in masks.values())} of {n} nodes")


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
    pa.add_argument("--triangle", choices=TRIANGLES, default="upper", help="to_networkx's kept half")
    pa.add_argument("--out", type=Path, required=True, help="the partition file to write (.npz)")
    gs = sub.add_parser(
        "geom-split", help="a replay's partition with the split of one Geom-GCN split file (global masks)"
    )
    gs.add_argument("--partition", type=Path, required=True, help="a partition file written by `partition`")
    gs.add_argument("--split-file", type=Path, required=True, help="e.g. chameleon_split_0.6_0.2_3.npz")
    gs.add_argument("--out", type=Path, required=True)
    co = sub.add_parser("compare", help="per-client statistics of a replay and of securefgl's louvain")
    co.add_argument("--dataset", required=True)
    co.add_argument("--file", type=Path, required=True)
    co.add_argument("--clients", type=int, default=10)
    co.add_argument("--data-root", default=None)
    args = ap.parse_args()
    if args.command == "export":
        try:
            print(export_graph(args.dataset, args.out, args.data_root, args.edge_file))
        except ConfigError as exc:
            raise SystemExit(str(exc)) from None
        return
    if args.command == "geom-split":
        geom_split(args.partition, args.split_file, args.out)
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
    # exact_input: whether the graph file kept the reference's edge order (reproduce_adafgl.py records it).
    np.savez(
        args.out,
        **arrays,
        reference_local_nodes=np.asarray(report["sizes_with_duplicates"], dtype=np.int64),
        exact_input=np.asarray(bool(report["exact_input"])),
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
