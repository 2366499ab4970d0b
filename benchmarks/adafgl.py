"""AdaFGL wall time: step 1 (federated extractor) and step 2 (local personalisation), secagg vs plaintext.

Runs AdaFGL through the engine on Cora and Chameleon (10 clients, Louvain community split by default) once
per protocol, side by side in one process, and reports per phase:

* step 1: local training, protocol time (encoding, masking, key agreement, unmasking: "crypto"), server step;
* step 2: the local personalisation of all clients (no protocol is involved: its crypto time is 0 by
  construction, so any difference between protocols there is noise);
* the secagg / plaintext ratio of step 1's protocol time and of the whole run.

Usage::

    python benchmarks/adafgl.py                       # Cora + Chameleon, 100 rounds, 200 step-2 epochs
    python benchmarks/adafgl.py --rounds 20 --epochs 50 --datasets cora   # quick look

Timings on a shared CPU are noisy; compare the ratios, measured in the same process.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import torch

from securefgl.config import RunConfig, build
from securefgl.data import load_dataset, partition_graph
from securefgl.engine.runner import run_seed

SPLITS = {"cora": (0.2, 0.4, 0.4), "citeseer": (0.2, 0.4, 0.4), "chameleon": (0.6, 0.2, 0.2)}


def measure(fg: Any, dataset: str, split: str, protocol: str, args: argparse.Namespace) -> dict[str, Any]:
    cfg = build(
        RunConfig,
        {
            "dataset": {"name": dataset, "root": args.root},
            "partition": {"method": split, "clients": args.clients, "split": list(SPLITS[dataset])},
            "protocol": {"name": protocol},
            "algorithm": {"name": "adafgl", "options": {"epochs": args.epochs}},
            "model": {"name": "gcn", "hidden": 64, "layers": 2, "dropout": 0.5},
            "train": {
                "rounds": args.rounds,
                "local_epochs": 5,
                "lr": 0.01,
                "weight_decay": 5e-4,
                "optimizer_state": "reset",
                "eval_every": args.rounds,
            },
            "device": args.device,
        },
    )
    t0 = time.perf_counter()
    res = run_seed(cfg, fg, 0, torch.device(args.device))
    total = time.perf_counter() - t0
    step1 = [r for r in res.rounds if r.phase == "federated"]
    step2 = [r for r in res.rounds if r.phase == "personalize"]
    return {
        "protocol": protocol,
        "total_s": total,
        "step1_train_s": sum(r.train_seconds for r in step1),
        "step1_crypto_s": sum(r.crypto_seconds for r in step1),
        "step1_server_s": sum(r.server_seconds for r in step1),
        "step1_eval_s": sum(r.eval_seconds for r in step1),
        "step1_s": sum(r.train_seconds + r.crypto_seconds + r.server_seconds for r in step1),
        "step2_s": sum(r.train_seconds for r in step2),
        "step2_crypto_s": sum(r.crypto_seconds for r in step2),
        "step2_bytes": sum(r.total_up + r.total_down for r in step2),
        "bytes_up_per_client_per_round": res.bytes_up / max(1, len(step1)) / args.clients,
        "test_acc": res.final.overall["test_acc"],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--datasets", nargs="+", default=["cora", "chameleon"])
    ap.add_argument("--split", default="louvain")
    ap.add_argument("--protocols", nargs="+", default=["plaintext", "secagg"])
    ap.add_argument("--clients", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=100)
    ap.add_argument("--epochs", type=int, default=200, help="step-2 epochs")
    ap.add_argument("--root", default=None)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    rows = []
    for dataset in args.datasets:
        data = load_dataset(dataset, args.root)
        params = {"assign": "greedy"} if args.split == "louvain" else {}
        fg = partition_graph(
            data, args.split, args.clients, seed=0, split=SPLITS[dataset], root=args.root, **params
        )
        for protocol in args.protocols:
            row = {"dataset": dataset, **measure(fg, dataset, args.split, protocol, args)}
            rows.append(row)
            print(json.dumps(row), flush=True)
    print(
        f"\nAdaFGL wall time, {args.clients} clients, {args.rounds} rounds, {args.epochs} step-2 epochs, "
        f"{args.device}, {args.threads} thread(s)"
    )
    print(
        "| dataset | protocol | step 1 total s | step 1 train s | step 1 protocol s | step 2 s | step 2 bytes |"
        " upload/client/round | run s |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['dataset']} | {r['protocol']} | {r['step1_s']:.1f} | {r['step1_train_s']:.1f} | "
            f"{r['step1_crypto_s']:.2f} | {r['step2_s']:.1f} | {r['step2_bytes']} | "
            f"{r['bytes_up_per_client_per_round'] / 1e6:.2f} MB | {r['total_s']:.1f} |"
        )
    for dataset in args.datasets:
        by = {r["protocol"]: r for r in rows if r["dataset"] == dataset}
        if {"plaintext", "secagg"} <= set(by):
            p, s = by["plaintext"], by["secagg"]
            print(
                f"{dataset}: secagg/plaintext step-1 protocol time {s['step1_crypto_s'] / max(p['step1_crypto_s'], 1e-9):.1f}x, "
                f"step 1 {s['step1_s'] / p['step1_s']:.2f}x, whole run {s['total_s'] / p['total_s']:.2f}x; "
                f"step 2 {s['step2_s']:.1f}s vs {p['step2_s']:.1f}s (no protocol)"
            )
    if args.out:
        Path(args.out).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
