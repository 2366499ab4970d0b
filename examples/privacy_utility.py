"""Privacy-utility of node- and edge-level DP in the federation (issue 24): GAP against DP-MLP and non-private.

For each dataset (10 Louvain clients, split 50/25/25, protocol secagg), every method is one ``securefgl.run``
over the seeds (mean ± std of test accuracy, node-weighted over clients; on binary tasks such as Minesweeper
and Tolokers, of the pooled test ROC AUC, their standard metric, read from the secure sums):

==========================  ==========================================================================
row                         run
==========================  ==========================================================================
GAP edge-level              ``--algorithm gap --privacy edge --epsilon E`` (gcn: 2 hops)
GAP node-level              ``--algorithm gap --privacy node --epsilon E`` (GAP's modules: 2 hops, D=10)
GAP node residual-vote      the same with one hop of neighbour votes (``embedding=vote``, D=5) and the
                            residual classifier (``classifier=residual``; 30 + 20 rounds)
GAP node vote-head          the 50-round encoder frozen, plus a node-DP head on exact neighbour votes
                            (``classifier=head``, 20 full-batch rounds; the model is node-DP, predictions
                            on a client's own graph are not covered when published)
DP-MLP node-level           the same with ``--model mlp`` (0 hops: DP-SGD on features only)
GAP / MLP non-private       epsilon inf (same architectures, no noise, no clipping)
FedAvg GCN                  the non-private GNN (``--algorithm fedavg --model gcn``)
DP-FedAvg client-level      ``--algorithm fedavg --protocol secagg+dp --epsilon E`` (the unit is a client)
GAP / DP-MLP node tuned     GAP's node-level model and DP-MLP with hyperparameters searched on validation
                            at the same budget (``examples/privacy_tuning.py``, which writes these rows)
GAP node head tuned         the node-DP head (``classifier=head``, one hop of exact aggregates) searched
                            the same way (its guarantee covers the released model, not predictions)
GAP node noisy head tuned   the same head on one hop of GAP's noised aggregates (``classifier=noisy-head``:
                            GAP's guarantee, predictions included), searched the same way
==========================  ==========================================================================

Usage::

    python examples/privacy_utility.py run --dataset Cora --seeds 0,1,2,3,4 --out results/privacy_utility
    python examples/privacy_utility.py report results/privacy_utility   # table (markdown) and plot (PNG)
    python examples/privacy_utility.py run --dataset csbm-dense --methods "GAP node,DP-MLP node"  # GAP's regime

``run`` writes one JSON file per (dataset, method, epsilon) as soon as it finishes, and skips those already
there, so an interrupted sweep resumes; ``report`` pools the seeds of every JSON file under the folder
(e.g. seeds 0-2 in one ``--out`` subfolder and 3-4 in another, run in parallel), each seed counted once. Training: 50 rounds per phase, eval every 10 rounds, lr 0.02, 3 local
epochs for the runs without node-level DP (node-level DP makes each round one DP-SGD step).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path
from typing import Any

from securefgl.experiments.privacy_sweep import (
    FIXED_RECIPE,
    METHODS,
    record_slug,
    run_config,
)


def run(dataset: str, seeds: list[int], out: Path, methods: list[str]) -> None:
    """Run every (method, epsilon) of ``dataset`` not yet in ``out``."""
    import securefgl

    out.mkdir(parents=True, exist_ok=True)
    for method in methods:
        for eps in METHODS[method][3]:
            path = out / f"{record_slug(dataset, method, eps)}.json"
            if path.exists():
                continue
            t0 = time.perf_counter()
            res = securefgl.run(run_config(dataset, method, eps, seeds))
            acc = [s.summary()["test_acc"] for s in res.seeds]
            auc = [s.summary().get("test_auc") for s in res.seeds]
            record = {
                "dataset": dataset,
                "method": method,
                "epsilon": None if math.isinf(eps) else eps,
                "seeds": seeds,
                "test_acc": acc,
                "test_auc": auc if all(a is not None for a in auc) else None,
                "privacy": res.privacy,
                "seconds": time.perf_counter() - t0,
            }
            path.write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
            metric = _metric([record])
            mean = 100 * sum(record[metric]) / len(record[metric])
            print(
                f"{dataset:10s} {method:26s} eps={eps:<5g} test {_LABEL[metric]} {mean:5.1f}  "
                f"({record['seconds']:.0f} s)",
                flush=True,
            )


#: How the table and plot name each metric.
_LABEL = {"test_acc": "accuracy %", "test_auc": "ROC AUC %"}


def _metric(records: list[dict[str, Any]]) -> str:
    """``test_auc`` when every record has it (a binary task: its standard metric), else ``test_acc``."""
    return "test_auc" if records and all(r.get("test_auc") for r in records) else "test_acc"


def _mean_std(xs: list[float]) -> tuple[float, float]:
    m = sum(xs) / len(xs)
    return m, math.sqrt(sum((x - m) ** 2 for x in xs) / len(xs))


def _merge(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One record per (dataset, method, epsilon): the seeds of several runs (``--out`` subfolders) pooled,
    each seed counted once."""
    merged: dict[tuple[Any, ...], dict[str, Any]] = {}
    for r in records:
        key = (r["dataset"], r["method"], r["epsilon"])
        m = merged.setdefault(key, {**r, "seeds": [], "test_acc": [], "test_auc": []})
        aucs = r.get("test_auc") or [None] * len(r["seeds"])
        for seed, acc, auc in zip(r["seeds"], r["test_acc"], aucs, strict=True):
            if seed not in m["seeds"]:
                m["seeds"].append(seed)
                m["test_acc"].append(acc)
                m["test_auc"].append(auc)
    for m in merged.values():  # an AUC column only when every pooled seed has one
        if any(a is None for a in m["test_auc"]):
            m["test_auc"] = None
    return list(merged.values())


#: The keys every record written by :func:`run` has.
_RECORD_KEYS = frozenset({"dataset", "method", "epsilon", "seeds", "test_acc"})


def _records(folder: Path) -> list[dict[str, Any]]:
    """The sweep's records under ``folder``; other JSON files there (a run's ``metrics.json``, notes) are
    skipped with one line each on stderr.

    Raises:
        SystemExit: no folder, or no record in it.
    """
    if not folder.is_dir():
        raise SystemExit(f"error: {folder} is not a folder; give the --out folder of a 'run'")
    records, skipped = [], []
    for path in sorted(folder.rglob("*.json")):
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            skipped.append(f"{path} ({type(exc).__name__})")
            continue
        if isinstance(data, dict) and data.keys() >= _RECORD_KEYS and data["method"] in METHODS:
            records.append(data)
        else:
            skipped.append(f"{path} (not a record of this sweep)")
    for line in skipped:
        print(f"skipped {line}", file=sys.stderr)
    if not records:
        raise SystemExit(f"error: no record of this sweep under {folder}; 'run --out {folder}' writes them")
    return records


def report(folder: Path, plot: Path | None) -> str:
    """A markdown table (rows: dataset x method; columns: epsilon) and an optional plot."""
    records = _merge(_records(folder))
    datasets = list(dict.fromkeys(r["dataset"] for r in records))
    cols = ["1", "2", "4", "8", "inf"]
    lines = [
        "| dataset | metric | method | " + " | ".join(f"eps={c}" for c in cols) + " | seeds |",
        "|---|---|---|" + "---:|" * len(cols) + "---:|",
    ]
    for d in datasets:
        metric = _metric([r for r in records if r["dataset"] == d])
        for method in METHODS:
            rows = {
                ("inf" if r["epsilon"] is None else f"{r['epsilon']:g}"): r
                for r in records
                if r["dataset"] == d and r["method"] == method
            }
            if not rows:
                continue
            cells = []
            for c in cols:
                if c in rows:
                    m, s = _mean_std(rows[c][metric])
                    cells.append(f"{100 * m:.1f} ± {100 * s:.1f}")
                else:
                    cells.append("")
            counts = sorted({len(r["seeds"]) for r in rows.values()})
            n = str(counts[0]) if len(counts) == 1 else f"{counts[0]}-{counts[-1]}"
            lines.append(f"| {d} | {_LABEL[metric]} | {method} | " + " | ".join(cells) + f" | {n} |")
    if plot is not None and records:
        _plot(records, datasets, plot)
    return "\n".join(lines)


def _plot(records: list[dict[str, Any]], datasets: list[str], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(datasets), figsize=(5 * len(datasets), 4), squeeze=False)
    xs = {1.0: 1, 2.0: 2, 4.0: 4, 8.0: 8, None: 16}
    for ax, d in zip(axes[0], datasets, strict=True):
        metric = _metric([r for r in records if r["dataset"] == d])
        for method in METHODS:
            rs = sorted(
                (r for r in records if r["dataset"] == d and r["method"] == method),
                key=lambda r: xs[r["epsilon"]],
            )
            if not rs:
                continue
            ms = [_mean_std(r[metric]) for r in rs]
            ax.errorbar(
                [xs[r["epsilon"]] for r in rs],
                [100 * m for m, _ in ms],
                yerr=[100 * s for _, s in ms],
                marker="o",
                capsize=3,
                label=method,
            )
        ax.set_xscale("log", base=2)
        ax.set_xticks([1, 2, 4, 8, 16], ["1", "2", "4", "8", "inf"])
        ax.set_xlabel("epsilon")
        ax.set_ylabel(f"test {_LABEL[metric]}")
        ax.set_title(f"{d}: 10 clients, secagg")
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="verb", required=True)
    r = sub.add_parser("run", help="run the sweep of one dataset")
    r.add_argument("--dataset", required=True)
    r.add_argument("--seeds", default="0,1,2,3,4")
    r.add_argument("--out", type=Path, default=Path("results/privacy_utility"))
    r.add_argument("--methods", default=",".join(FIXED_RECIPE), help="comma-separated subset of the methods")
    rep = sub.add_parser("report", help="print the table and write the plot")
    rep.add_argument("folder", type=Path)
    rep.add_argument("--plot", type=Path, default=None)
    a = p.parse_args(argv)
    if a.verb == "run":
        methods = [m.strip() for m in a.methods.split(",") if m.strip()]
        unknown = [m for m in methods if m not in FIXED_RECIPE]
        if unknown:
            p.error(
                f"unknown method(s) {unknown}; valid: {', '.join(FIXED_RECIPE)} (the tuned rows: "
                "examples/privacy_tuning.py)"
            )
        run(a.dataset, [int(s) for s in a.seeds.split(",")], a.out, methods)
    else:
        print(report(a.folder, a.plot))


if __name__ == "__main__":
    main()
