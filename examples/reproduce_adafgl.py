"""Reproduce AdaFGL's Table II cells (spec adafgl.md §5.4) under secure aggregation.

For every dataset x split it builds one fixed partition (10 clients, partition seed 0, spec §7.5), prints
the per-client homophily statistics of spec §6 (and the injection log of the structure non-iid split),
then runs AdaFGL for every training seed and protocol through the engine (step 1 = FedAvg of a 2-layer GCN
through the protocol, step 2 = local personalisation). It reports mean +- std (ddof = 1) of the global test
accuracy next to the paper's numbers, the secagg-vs-plaintext gap, and the FedAvg GCN (the step-1
extractor, same model and rounds) for comparison.

Usage (the full issue table; hours on a 2-core CPU, minutes on a GPU)::

    python examples/reproduce_adafgl.py --datasets cora citeseer chameleon \\
        --splits louvain structure-noniid --seeds 0 1 2 3 4 --protocols secagg plaintext \\
        --out adafgl_repro.json

One cell, quickly::

    python examples/reproduce_adafgl.py --datasets cora --splits louvain --seeds 0 --protocols secagg

A centralised GCN column (the same GCN on the whole graph, cross-client edges included, same nodes and split)
beside saved runs, without re-running AdaFGL (``reproductions_report.py collect`` files it into their runs)::

    python examples/reproduce_adafgl.py --datasets squirrel --splits louvain --seeds 0 1 2 --protocols secagg \
        --baselines-only --centralized --no-local --out central.json

AdaFGL without federation (the whole graph as one client; plaintext, since a secure sum of one input is
refused)::

    python examples/reproduce_adafgl.py --datasets squirrel --splits louvain --clients 1 --protocols plaintext \
        --no-local --centralized

The same run from the command line (one cell, one protocol)::

    securefgl run --algorithm adafgl --protocol secagg --dataset cora --partition louvain --clients 10 \\
        --set partition.params.assign=greedy --set model.hidden=64 --rounds 100 --local-epochs 5 ...

Step 2 starts from the best-validation step-1 round (``extractor="best_val"``, as the official code). Secagg,
seeds 0-2 (plaintext gives the same numbers to the bit: the clients round their uploads onto the grid,
``protocol.grid_upload``), paper in brackets:

- Cora: Louvain 81.7 ± 0.4 (82.9), structure non-iid 82.4 ± 0.3 (80.4).
- CiteSeer: Louvain 69.3 ± 1.3 (72.5); on the replay of AdaFGL's own partition
  (``examples/adafgl_reference_partition.py``, ``--partition-dir``) 70.5 ± 1.2; structure non-iid 70.5 ± 1.0 (69.3).
- Chameleon, Table I's 60/20/20 split: Louvain 61.1 ± 0.9 (68.9), structure non-iid 74.8 ± 0.8 (70.8). With
  ``--split 0.2 0.4 0.4``, what the official code runs for every dataset: structure non-iid 68.8 ± 0.9, Louvain
  52.1 ± 0.7. The official evaluation weights clients by node counts that include the nodes its packing
  duplicates (weights sum to 1.094 on the Chameleon replay): on the replay with 60/20/20 that turns our
  61.1 ± 1.0 into 66.3 ± 1.1, printed beside the true figure.

Ten seeds (0-9, the paper's 10 runs) on the cells that decide the bar: CiteSeer Louvain replay 70.46 ± 0.82
(72.5); Chameleon Louvain replay, 60/20/20, 61.63 ± 0.88, reference weighting 66.91 ± 1.04 (68.9); Chameleon
structure non-iid, 60/20/20, 74.94 ± 0.83 (70.8), with FedAvg-GCN 72.41 ± 0.88 (the paper's GCN row: 63.8).

On the exact replay (issue 25: Geom-GCN's raw ``out1_graph_edges.txt``, the row order the reference's Louvain
consumes; ``adafgl_reference_partition.py export --edge-file``; 137 duplicated node copies instead of the approximate
replay's 214), seeds 0-9, secagg, CPU runs on the GPU host (one core per seed, 120-145 s per seed), reference
weighting in brackets: 60/20/20 58.4 ± 1.3 [62.5 ± 1.4]; 20/40/40 57.2 ± 0.9 [61.5 ± 1.0]; Geom-GCN's ten split
files (global masks, 48/32/20; ``geom-split``) 59.7 ± 1.6 [64.2 ± 1.6]: the Louvain cell is not within 2.5 of 68.9
on any split, with or without the duplicate weighting (the approximate replay above gave 61.6 / 66.9). Plaintext
equals secagg to the bit (seeds 0-2). Structure non-iid, 60/20/20, same host: 74.1 ± 1.1 (earlier CPU figure above:
74.94 ± 0.83), FedAvg-GCN 72.3 ± 1.1. ``REPRODUCTIONS.md`` has the tables (``examples/reproductions_report.py``).

Issue 27, the heterophilous columns (our draws, secagg, CPU; AdaFGL eq. 17 / AdaFGL + blend / FedAvg-GCN / Local,
paper in brackets). Table I's 60/20/20, seeds 0-9: Squirrel Louvain 41.1 / 43.7 / 42.8 / 43.1 (56.1), structure
non-iid 68.2 / 68.2 / 64.4 / 68.4 (60.4); Actor Louvain 32.1 / 32.5 / 29.3 / 27.6 (35.9), structure non-iid 46.1 /
48.0 / 48.0 / 47.4 (42.7); Chameleon Louvain 62.2 / 62.8 / 62.8 / 61.5 (68.9), structure non-iid 74.9 / 74.9 / 72.4
/ 74.4 (70.8). The code's 20/40/40 (Louvain, then structure non-iid; seeds 0-9): Squirrel 36.0 / 38.0 / 37.6 /
36.9 and 62.5 / 62.1 / 58.2 / 62.6; Actor 28.1 / 29.6 / 26.1 / 25.9 and 41.0 / 43.2 / 43.8 / 42.1; Chameleon 52.5 / 53.6 / 53.7 / 52.3 and 68.8 / 68.7 / 67.9 / 70.3. The blend (``--blend
select``, the default here; option ``blend``) picks one weight of the extractor in every client's prediction from
a secure sum of validation counts; the paper's prediction stays in the ``personalize`` evaluation. A centralised
GCN on the whole graph (``--centralized``; 60/20/20, seeds 0-9): Squirrel 53.5, Actor 30.3, Chameleon 69.8. AdaFGL
on the whole graph as one client (``--clients 1``, plaintext, seeds 0-2): Squirrel 49.1 (blend 51.0), Chameleon
65.1 (blend 68.6). ``--injection code`` (the official code's edge injection) gives 53.2 / 31.5 / 65.5 (blend) on the
three structure non-iid cells. Plaintext equals secagg to the bit (seed 0, three cells). ``REPRODUCTIONS.md`` has
the tables and the paired comparison with FedAvg-GCN.

With ``--option 'extractor="last"'`` (step 2 from FedAvg's final model, so that the blend's weight 1 is
FedAvg-GCN's last round), seeds 0-9 unless stated, secagg, AdaFGL + blend / FedAvg-GCN and the paired difference
with its 95 % t interval, 11 cells: Table I's 60/20/20: Squirrel Louvain 44.3 / 42.7 (+1.7 [+0.9, +2.5]), Squirrel
structure non-iid 68.1 / 64.3 (+3.8 [+3.3, +4.2]), Actor Louvain 31.8 / 29.3 (+2.5 [+2.0, +3.0]), Actor structure
non-iid 47.7 / 48.0 (-0.3 [-0.6, -0.0]), Chameleon Louvain 63.5 / 62.4 (+1.1 [+0.3, +1.9]), Chameleon structure
non-iid 74.5 / 72.3 (+2.2 [+1.0, +3.3]); the code's 20/40/40: Squirrel Louvain 37.7 / 37.5 (+0.1 [-0.4, +0.7]),
Squirrel structure non-iid 62.6 / 58.1 (+4.5 [+3.9, +5.0]), Actor structure non-iid 44.0 / 43.8 (+0.3 [-0.3,
+0.8]), Chameleon Louvain 53.7 / 53.6 (+0.1 [-0.8, +1.0]), Chameleon structure non-iid 68.6 / 67.9 (+0.7 [+0.2,
+1.2]).

With ``--option 'blend_alpha=0.05' --option 'blend_holdout=0.5'`` as well (half of each client's validation nodes
held out of step 2's epoch choice count the weights, and the extractor stays unless a weight beats it in a one-
sided McNemar test), same seeds and protocol, AdaFGL + blend / FedAvg-GCN, all twelve cells, each above FedAvg-GCN
or level with it: Table I's 60/20/20: Squirrel Louvain 43.8 / 42.8 (+1.0 [+0.1, +1.9]; the extractor on 6 of 10
seeds), Squirrel structure non-iid 66.7 / 64.4 (+2.3 [+0.7, +3.8]; the extractor on 4 of 10 seeds), Actor Louvain
29.9 / 29.3 (+0.6 [-0.1, +1.3]; the extractor on 7 of 10 seeds), Actor structure non-iid 48.1 / 48.0 (+0.1 [-0.1,
+0.3]; the extractor on 9 of 10 seeds), Chameleon Louvain 62.4 / 62.4 (+0.0 [+0.0, +0.0]; the extractor on 10 of
10 seeds), Chameleon structure non-iid 73.1 / 72.3 (+0.8 [+0.0, +1.6]; the extractor on 4 of 10 seeds); the code's
20/40/40: Squirrel Louvain 38.0 / 37.6 (+0.4 [-0.0, +0.9]; the extractor on 5 of 10 seeds), Squirrel structure
non-iid 60.3 / 58.2 (+2.1 [+0.5, +3.7]; the extractor on 5 of 10 seeds), Actor Louvain 26.5 / 26.1 (+0.4 [-0.1,
+1.0]; the extractor on 6 of 10 seeds), Actor structure non-iid 43.6 / 43.7 (-0.1 [-0.3, +0.1]; the extractor on 9
of 10 seeds), Chameleon Louvain 53.7 / 53.6 (+0.1 [-0.1, +0.3]; the extractor on 9 of 10 seeds), Chameleon
structure non-iid 67.9 / 67.9 (+0.0 [+0.0, +0.0]; the extractor on 10 of 10 seeds).

Progress (rounds done, time left in the run and the script) goes to stderr through the engine's hooks
(:class:`securefgl.experiments.progress.Progress`).

Datasets are read from ``--root`` (or ``$SECUREFGL_DATA``); with no network, point it at a writable copy of
``shared/datasets``.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from securefgl.algorithms.adafgl import STEP2, adjacency, client_homophily_report, homophily_confidence_score
from securefgl.data import load_dataset, partition_graph
from securefgl.engine import run_seed
from securefgl.errors import PartitionError
from securefgl.experiments import partition_file
from securefgl.experiments.adafgl import INJECTIONS, PARTITIONS, SPLITS, partition_params, run_config
from securefgl.experiments.progress import Progress
from securefgl.provenance import library_versions

#: Spec §5.4 Table II (AdaFGL, 10 clients): (mean, std).
PAPER = {
    ("cora", "louvain"): (82.9, 0.5),
    ("cora", "structure-noniid"): (80.4, 0.8),
    ("citeseer", "louvain"): (72.5, 0.6),
    ("citeseer", "structure-noniid"): (69.3, 0.8),
    ("chameleon", "louvain"): (68.9, 2.1),
    ("chameleon", "structure-noniid"): (70.8, 2.2),
    ("squirrel", "louvain"): (56.1, 1.5),
    ("squirrel", "structure-noniid"): (60.4, 1.7),
    ("actor", "louvain"): (35.9, 1.5),
    ("actor", "structure-noniid"): (42.7, 1.3),
}
#: Table II GCN rows (with the paper's "local corrections"), for context.
PAPER_GCN = {
    ("cora", "structure-noniid"): 70.6,
    ("citeseer", "structure-noniid"): 63.4,
    ("chameleon", "structure-noniid"): 63.8,
    ("squirrel", "louvain"): 46.9,
    ("squirrel", "structure-noniid"): 51.2,
    ("actor", "louvain"): 28.8,
    ("actor", "structure-noniid"): 35.4,
}
#: Allowed distance of the mean from the paper (issue 9; issue 27: 4 points on every heterophilous column).
TOLERANCE = {"cora": 2.5, "citeseer": 2.5, "chameleon": 4.0, "squirrel": 4.0, "actor": 4.0}


def client_table(fg: Any, seed: int = 0) -> list[dict[str, Any]]:
    """Spec §6 per-client statistics, plus the label-light HCS estimate (eqs. 15-16) of each client."""
    info = (fg.meta.get("info") or {}).get("clients") if isinstance(fg.meta.get("info"), dict) else None
    rows = []
    for i, c in enumerate(fg.clients):
        rep = client_homophily_report(c.edge_index, c.y, fg.num_classes)
        rep["client"] = i
        rep["hcs_estimate"] = homophily_confidence_score(
            adjacency(c.edge_index, c.num_nodes),
            c.y,
            c.train_mask,
            fg.num_classes,
            generator=torch.Generator().manual_seed(seed + i),
        )
        if info is not None:
            rep["injection"] = {
                k: info[i][k] for k in ("mode", "requested", "added", "shortfall", "edges_before")
            }
            rep["edge_homophily_before_injection"] = info[i]["edge_homophily_before"]
        rows.append(rep)
    return rows


def fmt(v: float | None, d: int = 3) -> str:
    return "-" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:.{d}f}"


def print_clients(rows: list[dict[str, Any]]) -> None:
    print("  client  n    |E|   iso  H_node H_edge H_class  HCS   injection")
    for r in rows:
        inj = r.get("injection")
        inj_s = (
            f"{inj['mode']} +{inj['added']} (H_edge before {fmt(r['edge_homophily_before_injection'])})"
            if inj
            else ""
        )
        print(
            f"  {r['client']:>6} {r['num_nodes']:>4} {r['num_edges']:>5} {r['isolated_nodes']:>4}  "
            f"{fmt(r['node_homophily'])}  {fmt(r['edge_homophily'])}  {fmt(r['class_homophily'])}  "
            f"{fmt(r['hcs_estimate'], 2)}  {inj_s}"
        )


def mean_std(values: list[float]) -> tuple[float, float]:
    if not values:
        return math.nan, math.nan
    return statistics.fmean(values), (statistics.stdev(values) if len(values) > 1 else 0.0)


def phase_seconds(res: Any) -> dict[str, float]:
    out: dict[str, float] = {}
    for r in res.rounds:
        for kind in ("train", "crypto", "server", "eval"):
            key = f"{r.phase}.{kind}"
            out[key] = out.get(key, 0.0) + getattr(r, f"{kind}_seconds")
    return out


def print_table(cells: list[dict[str, Any]]) -> None:
    """The reproduction table: mean +- std (ddof = 1) per cell and protocol, paper value, tolerance check."""
    print(
        "\n| dataset | split | protocol | AdaFGL (ours, eq. 17) | AdaFGL + blend (weights) | paper | within (eq. 17 / blend) "
        "| FedAvg-GCN (ours) | Local (ours) | seeds |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for cell in cells:
        key = (cell["dataset"], cell["split"])
        paper = PAPER.get(key)
        central = [100 * r["centralized_test_acc"] for r in cell["runs"] if "centralized_test_acc" in r]
        if central:
            cm, cs = mean_std(central)
            print(
                f"| {key[0]} | {key[1]} | centralised GCN (whole graph) | {cm:.1f}±{cs:.1f} | | | | | | {len(central)} |"
            )
        by_proto: dict[str, list[dict[str, Any]]] = {}
        for run in cell["runs"]:
            if "adafgl_test_acc" in run:
                by_proto.setdefault(run["protocol"], []).append(run)
        for protocol, runs in sorted(by_proto.items(), reverse=True):
            m, s = mean_std([100 * r["adafgl_test_acc"] for r in runs])
            fm, fs = mean_std([100 * r["fedavg_test_acc_last"] for r in runs])
            blend = [r for r in runs if "adafgl_blend_test_acc" in r]
            bm, bs = mean_std([100 * r["adafgl_blend_test_acc"] for r in blend])
            weights = "/".join(f"{r['blend_weight']:g}" for r in blend)
            blend_s = f"{bm:.1f}±{bs:.1f} ({weights})" if blend else "-"
            lm, ls = mean_std([100 * r["local_test_acc"] for r in runs if "local_test_acc" in r])
            local_s = "-" if math.isnan(lm) else f"{lm:.1f}±{ls:.1f}"
            ok = "-"
            if paper is not None:
                ok = "yes" if abs(m - paper[0]) <= TOLERANCE[key[0]] else "NO"
                if blend:
                    ok += " / " + ("yes" if abs(bm - paper[0]) <= TOLERANCE[key[0]] else "NO")
            ps = "-" if paper is None else f"{paper[0]:.1f}±{paper[1]:.1f}"
            seeds = ",".join(str(r["seed"]) for r in sorted(runs, key=lambda r: r["seed"]))
            print(
                f"| {key[0]} | {key[1]} | {protocol} | {m:.1f}±{s:.1f} | {blend_s} | {ps} | {ok} | {fm:.1f}±{fs:.1f} "
                f"| {local_s} | {seeds} |"
            )
        for protocol, runs in sorted(by_proto.items(), reverse=True):
            if all("reference_weighted_test_acc" in r for r in runs):
                m, s = mean_std([100 * r["reference_weighted_test_acc"] for r in runs])
                ok = "-" if paper is None else ("yes" if abs(m - paper[0]) <= TOLERANCE[key[0]] else "NO")
                ps = "-" if paper is None else f"{paper[0]:.1f}±{paper[1]:.1f}"
                print(
                    f"| {key[0]} | {key[1]} | {protocol}, the reference's weighting (duplicates counted) | "
                    f"{m:.1f}±{s:.1f} | {ps} | {ok} | | |"
                )
        if {"secagg", "plaintext"} <= set(by_proto):
            common = {r["seed"] for r in by_proto["secagg"]} & {r["seed"] for r in by_proto["plaintext"]}
            sec = [100 * r["adafgl_test_acc"] for r in by_proto["secagg"] if r["seed"] in common]
            pla = [100 * r["adafgl_test_acc"] for r in by_proto["plaintext"] if r["seed"] in common]
            gap = abs(mean_std(sec)[0] - mean_std(pla)[0])
            print(
                f"| {key[0]} | {key[1]} | secagg - plaintext (same seeds) | {gap:.2f} points | | "
                f"{'yes' if gap <= 0.2 else 'NO'} (<= 0.2) | | {len(common)} |"
            )


def baselines(
    args: argparse.Namespace,
    dataset: str,
    split: str,
    protocol: str,
    fg: Any,
    seed: int,
    settings: dict[str, Any],
) -> dict[str, float]:
    """The seed's Local and centralised GCN test accuracies (each on the engine's best-validation round)."""
    out = {}
    for algorithm, wanted in (("local", not args.no_local), ("centralized", args.centralized)):
        if wanted:
            cfg = run_config(dataset, split, protocol, None, algorithm=algorithm, **settings)
            out[f"{algorithm}_test_acc"] = run_seed(cfg, fg, seed, torch.device(args.device)).final.overall[
                "test_acc"
            ]
    return out


def baseline_text(run: dict[str, Any]) -> str:
    local, central = run.get("local_test_acc"), run.get("centralized_test_acc")
    return ("" if local is None else f"Local {100 * local:.1f}  ") + (
        "" if central is None else f"centralised GCN {100 * central:.1f}  "
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--datasets", nargs="+", default=["cora", "citeseer", "chameleon"])
    ap.add_argument("--splits", nargs="+", choices=PARTITIONS, default=list(PARTITIONS))
    ap.add_argument("--protocols", nargs="+", default=["secagg", "plaintext"])
    ap.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    ap.add_argument("--clients", type=int, default=10)
    ap.add_argument(
        "--split",
        nargs=3,
        type=float,
        default=None,
        metavar=("TRAIN", "VAL", "TEST"),
        help="per-client train/val/test ratios for every dataset (default: Table I, 60/20/20 for Chameleon and "
        "20/40/40 otherwise; the official code runs 20/40/40 everywhere)",
    )
    ap.add_argument("--rounds", type=int, default=100)
    ap.add_argument("--local-epochs", type=int, default=5)
    ap.add_argument(
        "--weight-decay",
        type=float,
        default=0.0,
        help="step-1 L2 weight decay ([C1] 5e-4 costs the FedAvg extractor ~4 points here; see the docstring)",
    )
    ap.add_argument("--optimizer-state", choices=["reset", "persistent"], default="reset")
    ap.add_argument(
        "--eval-every",
        type=int,
        default=1,
        help="evaluate step 1 every N rounds; step 2 starts from the best-validation evaluated round (default 1, "
        "as the official code)",
    )
    ap.add_argument(
        "--option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="AdaFGL option override (JSON value), e.g. --option alpha=0.3",
    )
    ap.add_argument(
        "--blend",
        choices=["select", "none"],
        default="select",
        help="AdaFGL's blend phase (option blend): 'select' (default) reports both the paper's prediction (eq. 17) "
        "and the blend with the extractor whose weight the server picks from a secure sum of validation counts; "
        "'none' runs the paper's phases only",
    )
    ap.add_argument(
        "--injection",
        choices=INJECTIONS,
        default="text",
        help="structure non-iid edge injection: 'text' (default; the paper's 'half of the original edges', "
        "floor(0.5 |E_i|) new edges per client) or 'code' (the official code: each eligible non-edge pair with "
        "probability 0.001, isolated nodes joined to one partner)",
    )
    ap.add_argument(
        "--no-local",
        action="store_true",
        help="skip the Local column (each client trains the same GCN alone, once per seed)",
    )
    ap.add_argument(
        "--centralized",
        action="store_true",
        help="add a centralised GCN column: the same GCN trained on the whole graph (every edge, the cross-client "
        "ones included) with the same nodes, split, rounds and epochs, once per seed; the non-private reference "
        "a federation that loses the cross-client edges is not expected to beat",
    )
    ap.add_argument(
        "--baselines-only",
        action="store_true",
        help="run only the Local and centralised columns (no AdaFGL); `reproductions_report.py collect` files "
        "them into the saved runs of the same seeds",
    )
    ap.add_argument("--root", default=None, help="data root (default: $SECUREFGL_DATA)")
    ap.add_argument("--device", default="cpu")
    ap.add_argument(
        "--threads", type=int, default=1, help="torch intra-op threads (1 is fastest on busy CPUs)"
    )
    ap.add_argument("--out", default=None, help="write every number to this JSON file")
    ap.add_argument(
        "--row-normalize",
        action="store_true",
        help="divide each node's features by their sum before partitioning (the paper's preprocessing of the "
        "heterophilous datasets; issue 27's feature hypothesis)",
    )
    ap.add_argument(
        "--partition-dir",
        type=Path,
        default=None,
        help="read <dir>/<dataset>_<split>.npz (partition and split), e.g. the replay of AdaFGL's own Louvain "
        "partition by examples/adafgl_reference_partition.py, instead of partitioning here",
    )
    ap.add_argument(
        "--merge",
        nargs="+",
        default=None,
        metavar="JSON",
        help="do not run: print the table of earlier --out files together",
    )
    args = ap.parse_args()
    if args.baselines_only and args.no_local and not args.centralized:
        ap.error(
            "--baselines-only with --no-local and without --centralized runs nothing; drop --no-local or add --centralized"
        )
    if args.merge:
        cells: dict[tuple[str, str], dict[str, Any]] = {}
        for path in args.merge:
            for cell in json.loads(Path(path).read_text())["cells"]:
                key = (cell["dataset"], cell["split"])
                cells.setdefault(
                    key, {"dataset": key[0], "split": key[1], "clients": cell["clients"], "runs": []}
                )
                cells[key]["runs"].extend(cell["runs"])
        print_table(list(cells.values()))
        return
    torch.set_num_threads(args.threads)
    options = {}
    for item in args.option:
        key, _, value = item.partition("=")
        options[key] = json.loads(value)
    options.setdefault("blend", args.blend)
    # the options that change AdaFGL's figures, saved with each cell so that variants are not merged
    cell_options = {k: v for k, v in options.items() if k != "blend"}

    report: dict[str, Any] = {
        "args": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
        "libraries": library_versions(),
        "cells": [],
    }
    progress = Progress(len(args.datasets) * len(args.splits) * len(args.protocols) * len(args.seeds))
    for dataset in args.datasets:
        data = load_dataset(dataset, args.root)
        if args.row_normalize:
            data.x = data.x / data.x.sum(dim=1, keepdim=True).clamp_min(1e-12)
        for split in args.splits:
            t0 = time.perf_counter()
            ref_sizes = None
            exact = False
            if args.partition_dir is not None:
                try:
                    ref = partition_file(
                        args.partition_dir, dataset, split, maker="adafgl_reference_partition"
                    )
                except PartitionError as exc:
                    raise SystemExit(str(exc)) from None
                fg = partition_graph(data, "file", args.clients, path=str(ref))
                with np.load(ref) as z:
                    exact = bool(z["exact_input"]) if "exact_input" in z.files else False
                    if "reference_local_nodes" in z.files:
                        ref_sizes = z["reference_local_nodes"].astype(np.float64)
            else:
                fg = partition_graph(
                    data,
                    split,
                    args.clients,
                    seed=0,
                    split=tuple(args.split or SPLITS[dataset]),
                    root=args.root,
                    **partition_params(split, injection=args.injection),
                )
            print(
                f"\n== {dataset} / {split}: {fg.num_clients} clients (partition {time.perf_counter() - t0:.1f}s)"
            )
            rows = client_table(fg)
            print_clients(rows)
            cell: dict[str, Any] = {
                "dataset": dataset,
                "split": split,
                "ratios": list(args.split or SPLITS[dataset]),
                "partition": "ours" if args.partition_dir is None else f"file {ref.name}",
                "num_clients": fg.num_clients,
                "exact_replay": exact,
                "row_normalize": bool(args.row_normalize),
                **({"injection": args.injection} if split == "structure-noniid" else {}),
                **({"options": cell_options} if cell_options else {}),
                "clients": rows,
                "runs": [],
            }
            settings: dict[str, Any] = {
                "clients": args.clients,
                "ratios": args.split,
                "root": args.root,
                "rounds": args.rounds,
                "local_epochs": args.local_epochs,
                "weight_decay": args.weight_decay,
                "optimizer_state": args.optimizer_state,
                "eval_every": args.eval_every,
                "device": args.device,
                "injection": args.injection,
            }
            for protocol in args.protocols:
                for seed in args.seeds:
                    if args.baselines_only:
                        run = {"protocol": protocol, "seed": seed, "baselines_only": True}
                        run.update(baselines(args, dataset, split, protocol, fg, seed, settings))
                        cell["runs"].append(run)
                        print(f"  {protocol:>9} seed {seed}: " + baseline_text(run), flush=True)
                        continue
                    cfg = run_config(dataset, split, protocol, options, **settings)
                    res = run_seed(
                        cfg,
                        fg,
                        seed,
                        torch.device(args.device),
                        hooks=progress.hooks(f"{dataset}/{split} {protocol} seed {seed}"),
                    )
                    fed = [e for e in res.evals if e.phase == "federated"]
                    paper_eval = next(e for e in res.evals if e.phase == STEP2)
                    run = {
                        "protocol": protocol,
                        "seed": seed,
                        "adafgl_test_acc": paper_eval.overall["test_acc"],
                        "adafgl_val_acc": paper_eval.overall["val_acc"],
                        "fedavg_test_acc_last": fed[-1].overall["test_acc"] if fed else math.nan,
                        "fedavg_test_acc_bestval": max(fed, key=lambda e: e.overall["val_acc"]).overall[
                            "test_acc"
                        ]
                        if fed
                        else math.nan,
                        "seconds": res.seconds,
                        "phase_seconds": phase_seconds(res),
                        "bytes_up": res.bytes_up,
                        "per_client": [c.row() for c in paper_eval.per_client],
                    }
                    if "adafgl_blend" in res.report:
                        run["adafgl_blend_test_acc"] = res.final.overall["test_acc"]
                        run["blend_weight"] = res.report["adafgl_blend"]["weight"]
                        for key in ("val_correct", "val_discordant"):
                            if key in res.report["adafgl_blend"]:
                                run[f"blend_{key}"] = {
                                    f"{w:g}": n for w, n in res.report["adafgl_blend"][key].items()
                                }
                    if protocol == args.protocols[0]:
                        run.update(baselines(args, dataset, split, protocol, fg, seed, settings))
                    if ref_sizes is not None:
                        accs = np.array(
                            [c.row()["test_acc"] for c in paper_eval.per_client], dtype=np.float64
                        )
                        run["reference_weighted_test_acc"] = float(ref_sizes @ accs / data.num_nodes)
                    cell["runs"].append(run)
                    if args.out:
                        Path(args.out).write_text(
                            json.dumps({**report, "partial": cell}, indent=1, default=float)
                        )
                    refw = run.get("reference_weighted_test_acc")
                    blend = run.get("adafgl_blend_test_acc")
                    print(
                        f"  {protocol:>9} seed {seed}: AdaFGL {100 * run['adafgl_test_acc']:.1f}  "
                        + (
                            ""
                            if blend is None
                            else f"blend {100 * blend:.1f} (weight {run['blend_weight']})  "
                        )
                        + f"FedAvg-GCN {100 * run['fedavg_test_acc_last']:.1f}  "
                        + baseline_text(run)
                        + f"({res.seconds:.0f}s)"
                        + ("" if refw is None else f"  [reference-weighted AdaFGL {100 * refw:.1f}]"),
                        flush=True,
                    )
            report["cells"].append(cell)
            if args.out:
                Path(args.out).write_text(json.dumps(report, indent=1, default=float))

    print_table(report["cells"])
    if args.out:
        Path(args.out).write_text(json.dumps(report, indent=1, default=float))


if __name__ == "__main__":
    main()
