"""O-pFGL vs FedAvg communication per client, and O-pFGL wall time under secagg vs plaintext, in one run.

On Cora (10 clients, louvain+ by default, the ``opfgl-paper`` preset) this measures, side by side:

* **bytes per client**, up and down, of O-pFGL (one upload of ``C(2D+3)+2`` class sums, one download of
  the pseudo-graph and a model seed) and of FedAvg for 100 rounds (a GCN-64 model each way per round),
  both under ``secagg`` (protocol messages from the transcripts, as the engine counts them) and under
  ``plaintext``. The download includes the pseudo-graph, which the engine charges to the local phase that
  consumes it (its size is also shown separately);
* **wall time** of the whole O-pFGL run under ``secagg`` and under ``plaintext`` (same seed, same process),
  split into client statistics, protocol ("crypto"), server step (pseudo-graph) and local stages.

Usage::

    python benchmarks/opfgl.py                         # Cora louvain+, FedAvg 100 rounds
    python benchmarks/opfgl.py --fedavg-rounds 10      # quicker; FedAvg bytes scale linearly in rounds
    python benchmarks/opfgl.py --quick                 # short O-pFGL stages (timing of the protocol only)

Timings on a shared CPU are noisy; compare the ratios measured in one process.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from typing import Any

import torch

from securefgl.algorithms.opfgl.presets import preset_config
from securefgl.config import RunConfig, merge
from securefgl.data import load_dataset, partition_graph
from securefgl.engine.runner import run_seed


def _per_client(res: Any) -> dict[str, float]:
    cb = res.client_bytes()
    ups = [u for u, _ in cb.values()]
    downs = [d for _, d in cb.values()]
    return {"up_mean": statistics.mean(ups), "up_max": max(ups), "down_mean": statistics.mean(downs)}


def _phase_seconds(res: Any) -> dict[str, float]:
    out = {"client_stats": 0.0, "crypto": 0.0, "server": 0.0, "local_stages": 0.0}
    for r in res.rounds:
        if r.phase == "upload":
            out["client_stats"] += r.train_seconds
            out["crypto"] += r.crypto_seconds
            out["server"] += r.server_seconds
        else:
            out["local_stages"] += r.train_seconds
    out["total"] = res.seconds
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dataset", default="Cora")
    ap.add_argument("--partition", default="louvain+")
    ap.add_argument("--fedavg-rounds", type=int, default=100)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--quick", action="store_true", help="short local stages and condensation")
    ap.add_argument("--root", default=None, help="data root (default: $SECUREFGL_DATA)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--json", action="store_true", help="print the measurements as JSON")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)

    preset = preset_config("opfgl-paper", dataset=args.dataset, partition=args.partition)
    p = preset["partition"]
    fg = partition_graph(
        load_dataset(preset["dataset"]["name"], args.root),
        p["method"],
        p["clients"],
        seed=p["seed"],
        split=tuple(p["split"]),
        root=args.root,
    )
    if args.quick:
        preset = merge(preset, {"algorithm": {"options": {"condense_loops": 300, "max_iters": 300}}})
    out: dict[str, Any] = {
        "dataset": preset["dataset"]["name"],
        "partition": p["method"],
        "clients": p["clients"],
    }

    for proto in ("plaintext", "secagg"):
        cfg = RunConfig.from_mapping(merge(preset, {"protocol": {"name": proto}, "output": {"save": False}}))
        t0 = time.perf_counter()
        res = run_seed(cfg, fg, args.seed, torch.device("cpu"))
        wall = time.perf_counter() - t0
        pg = int(res.report.get("broadcast_bytes", 0))
        out[f"opfgl_{proto}"] = {
            "bytes": _per_client(res),
            "pseudo_graph_bytes": pg,
            "seconds": _phase_seconds(res),
            "wall": wall,
            "test_acc": res.final.overall["test_acc"],
            "test_f1": res.final.overall["test_f1"],
        }
        print(f"O-pFGL {proto}: {wall:.1f} s, acc {100 * res.final.overall['test_acc']:.2f}", flush=True)

    for proto in ("plaintext", "secagg"):
        cfg = RunConfig.from_mapping(
            {
                "dataset": {"name": preset["dataset"]["name"]},
                "partition": p,
                "protocol": {"name": proto},
                "algorithm": {"name": "fedavg"},
                "model": {"name": "gcn", "hidden": 64, "layers": 2, "dropout": 0.0},
                "train": {"rounds": args.fedavg_rounds, "local_epochs": 3, "lr": 0.01, "weight_decay": 5e-4},
                "output": {"save": False},
            }
        )
        t0 = time.perf_counter()
        res = run_seed(cfg, fg, args.seed, torch.device("cpu"))
        wall = time.perf_counter() - t0
        out[f"fedavg_{proto}"] = {"bytes": _per_client(res), "wall": wall, "rounds": args.fedavg_rounds}
        print(f"FedAvg {proto}: {wall:.1f} s", flush=True)

    if args.json:
        print(json.dumps(out, indent=1))
        return
    kib = 1024.0
    print(f"\n{out['dataset']} / {out['partition']}, {out['clients']} clients, bytes per client (mean):")
    print("| method | protocol | up (KiB) | down (KiB) | total (KiB) |")
    print("|---|---|---|---|---|")
    for key, name in [
        ("opfgl_plaintext", "O-pFGL (1 round)"),
        ("opfgl_secagg", "O-pFGL (1 round)"),
        ("fedavg_plaintext", f"FedAvg ({args.fedavg_rounds} rounds)"),
        ("fedavg_secagg", f"FedAvg ({args.fedavg_rounds} rounds)"),
    ]:
        b = out[key]["bytes"]
        proto = key.split("_")[1]
        total = b["up_mean"] + b["down_mean"]
        print(
            f"| {name} | {proto} | {b['up_mean'] / kib:,.1f} | {b['down_mean'] / kib:,.1f} | {total / kib:,.1f} |"
        )
    o, f = out["opfgl_secagg"]["bytes"], out["fedavg_secagg"]["bytes"]
    ratio = (f["up_mean"] + f["down_mean"]) / (o["up_mean"] + o["down_mean"])
    print(
        f"\nFedAvg/O-pFGL total bytes per client under secagg: {ratio:.1f}x "
        f"(pseudo-graph download {out['opfgl_secagg']['pseudo_graph_bytes'] / kib:.1f} KiB included)"
    )
    print("\nO-pFGL wall time (s):")
    print("| protocol | client stats | protocol (crypto) | server step | local stages | total |")
    print("|---|---|---|---|---|---|")
    for proto in ("plaintext", "secagg"):
        s = out[f"opfgl_{proto}"]["seconds"]
        print(
            f"| {proto} | {s['client_stats']:.2f} | {s['crypto']:.2f} | {s['server']:.2f} | "
            f"{s['local_stages']:.2f} | {s['total']:.2f} |"
        )
    sp, ss = out["opfgl_plaintext"]["seconds"], out["opfgl_secagg"]["seconds"]
    print(
        f"\nsecagg / plaintext: whole run {ss['total'] / sp['total']:.3f}x; "
        f"protocol {ss['crypto']:.3f} s vs {sp['crypto']:.3f} s "
        f"({ss['crypto'] - sp['crypto']:+.3f} s, {100 * (ss['crypto'] - sp['crypto']) / ss['total']:.2f}% of the secagg run)"
    )


if __name__ == "__main__":
    main()
