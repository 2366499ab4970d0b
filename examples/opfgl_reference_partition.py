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

    # 2. in a separate environment with the reference's libraries, from the repository root
    python3.11 -m venv /tmp/opfgl-ref
    /tmp/opfgl-ref/bin/pip install "numpy==1.26.4" "scikit-learn==1.2.2" "scipy<1.14" networkx python-louvain pymetis
    PYTHONPATH=. /tmp/opfgl-ref/bin/python examples/opfgl_reference_partition.py partition \\
        --graph ref/Cora_graph.npz --method louvain+ --out ref/Cora_louvain+.npz

    # 3. back in securefgl's environment
    securefgl run --preset opfgl-paper --dataset Cora --partition louvain+ --protocol secagg \\
        --set partition.method=file --set partition.params.path=ref/Cora_louvain+.npz
    python examples/reproduce_opfgl.py --partition-dir ref/

Step 2 imports nothing from torch; ``PYTHONPATH=.`` lets it find the replay,
:mod:`securefgl.experiments.opfgl_reference_partition`, which needs only numpy and the standard library at import
(securefgl itself need not be installed there). This script is its command line.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from securefgl.experiments.opfgl_reference_partition import (
    METHODS,
    SEED,
    export_graph,
    pack_reference,
    reference_partition,
)

# pack_reference: tests/data/test_partition_file.py loads this script to check the replay's packing.
__all__ = ["main", "pack_reference"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="command", required=True)
    ex = sub.add_parser("export", help="write the graph file (run in securefgl's environment)")
    ex.add_argument("--dataset", required=True, help="Cora, CiteSeer, PubMed, ...")
    ex.add_argument("--out", type=Path, required=True, help="folder for <dataset>_graph.npz")
    ex.add_argument("--data-root", default=None)
    pa = sub.add_parser("partition", help="replay the reference partition (run in the reference environment)")
    pa.add_argument("--graph", type=Path, required=True, help="a <dataset>_graph.npz from `export`")
    pa.add_argument("--method", choices=METHODS, required=True)
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
