"""Time every partitioner on Cora, Tolokers and a 1,000,000-node synthetic graph.

Run from the repository root::

    python benchmarks/partition.py            # Cora, Tolokers, CSBM with 1,000,000 nodes
    python benchmarks/partition.py --quick    # Cora and a 20,000-node CSBM
    python benchmarks/partition.py --methods metis louvain --nodes 200000 --clients 20

For each (graph, method) the table gives the time to build the partition (including the per-client splits and
the FederatedGraph with all cross-client edges), the time to load the same partition back from the cache, and
the ratio between the two, measured side by side in one run. The data root is ``$SECUREFGL_DATA`` (a writable
copy of ``shared/datasets``); caches go to a temporary directory that is removed at the end.
"""

from __future__ import annotations

import argparse
import gc
import platform
import sys
import tempfile
import time
from pathlib import Path

import torch

from securefgl.data import load_dataset, make_csbm, partition_graph, partition_methods
from securefgl.errors import SecureFGLError


def _graphs(quick: bool, nodes: int | None) -> list[tuple[str, object]]:
    out: list[tuple[str, object]] = [("Cora", lambda: load_dataset("Cora"))]
    if not quick:
        out.append(("Tolokers", lambda: load_dataset("Tolokers")))
    n = nodes if nodes is not None else (20_000 if quick else 1_000_000)
    out.append(
        (
            f"CSBM-{n:,}",
            lambda: make_csbm(
                num_nodes=n, num_classes=10, avg_degree=10.0, homophily=0.7, num_features=32, seed=0
            ),
        )
    )
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="Cora and a 20,000-node CSBM only.")
    parser.add_argument("--methods", nargs="*", default=None, help="Subset of methods (default: all).")
    parser.add_argument("--nodes", type=int, default=None, help="Nodes of the synthetic graph.")
    parser.add_argument("--clients", type=int, default=10, help="Number of clients K (default 10).")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--graphs", nargs="*", default=None, choices=["cora", "tolokers", "csbm"], help="Subset of graphs."
    )
    args = parser.parse_args(argv)
    methods = args.methods or list(partition_methods())

    # warm-up (untimed): imports of networkx / pymetis / scikit-learn and first-call costs
    with tempfile.TemporaryDirectory(prefix="securefgl-warm-") as tmp:
        tiny = make_csbm(num_nodes=400, num_classes=4, num_features=8, seed=0)
        for method in methods:
            params = {"num_coms": 20} if method in ("louvain+", "metis+") else {}
            partition_graph(tiny, method, 3, seed=0, cache_dir=tmp, **params)

    print(
        f"# securefgl partition benchmark · python {platform.python_version()} · torch {torch.__version__} · "
        f"{torch.get_num_threads()} threads · {platform.machine()}"
    )
    rows = []
    with tempfile.TemporaryDirectory(prefix="securefgl-bench-") as tmp:
        for gname, make in _graphs(args.quick, args.nodes):
            if args.graphs and gname.split("-")[0].lower() not in args.graphs:
                continue
            t0 = time.perf_counter()
            data = make()  # type: ignore[operator]
            t_load = time.perf_counter() - t0
            n, e = int(data.num_nodes), int(data.edge_index.shape[1]) // 2
            print(f"{gname}: {n:,} nodes, {e:,} edges, loaded/generated in {t_load:.2f} s", flush=True)
            for method in methods:
                cache_dir = Path(tmp) / gname / method
                try:
                    t0 = time.perf_counter()
                    fg = partition_graph(data, method, args.clients, seed=args.seed, cache_dir=cache_dir)
                    t_build = time.perf_counter() - t0
                    t0 = time.perf_counter()
                    again = partition_graph(data, method, args.clients, seed=args.seed, cache_dir=cache_dir)
                    t_cached = time.perf_counter() - t0
                except SecureFGLError as exc:
                    rows.append((gname, method, "error", "", "", "", "", str(exc).splitlines()[0][:60]))
                    continue
                assert again.meta["cache_hit"], "second call must hit the cache"
                info = fg.meta.get("info", {})
                note = f"backend={info['backend']}" if "backend" in info else ""
                sizes = fg.client_sizes()
                rows.append(
                    (
                        gname,
                        method,
                        f"{t_build:.2f}",
                        f"{t_cached:.2f}",
                        f"{t_build / max(t_cached, 1e-9):.0f}x",
                        f"{min(sizes):,}-{max(sizes):,}",
                        f"{fg.cross_edges.shape[1] // 2:,}",
                        note,
                    )
                )
                print(f"  {method:17s} build {t_build:8.2f} s · cached {t_cached:6.2f} s {note}", flush=True)
                del fg, again
                gc.collect()
            del data
            gc.collect()

    header = ("graph", "method", "build s", "cached s", "build/cached", "client sizes", "cross edges", "note")
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    line = " | ".join(h.ljust(w) for h, w in zip(header, widths, strict=True))
    print()
    print(line)
    print("-|-".join("-" * w for w in widths))
    for r in rows:
        print(" | ".join(str(c).ljust(w) for c, w in zip(r, widths, strict=True)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
