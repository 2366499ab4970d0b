"""FedSpray per-round wall time: local training vs cryptography, secagg against plaintext (issue 7).

Runs FedSpray (``fedspray-code`` preset, GCN hidden 64) on Cora with 10 clients (``louvain+`` partition,
20/40/40 split) under each protocol through the securefgl engine, side by side in one process, and
reports per round (median over the measured rounds, after one warm-up round): the clients' local training
(both phases, all clients batched), the protocol's time (encoding, masking, key agreement, unmasking: the
"crypto" of the round), the server step, bytes uploaded per client, and the secagg/plaintext ratios.
Evaluation runs only after the last round and is not counted.

Usage::

    python benchmarks/fedspray.py                       # Cora, 10 clients, 6 rounds, secagg vs plaintext
    python benchmarks/fedspray.py --rounds 11 --protocols plaintext secagg secagg+ --json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys

import torch

from securefgl.algorithms.fedspray.presets import get_preset
from securefgl.config import RunConfig, build, merge
from securefgl.data import load_dataset, partition_graph
from securefgl.engine.runner import run_seed


def measure(dataset: str, partition: str, clients: int, rounds: int, protocol: str) -> dict[str, float]:
    preset = get_preset("fedspray-code")
    cfg = build(
        RunConfig,
        merge(
            preset,
            {
                "dataset": {"name": dataset},
                "partition": {"method": partition, "clients": clients, "seed": 42, "split": [0.2, 0.4, 0.4]},
                "protocol": {"name": protocol},
                "model": {"name": "gcn"},
                "train": {"rounds": rounds, "eval_every": rounds},
                "device": "cpu",
            },
        ),
    )
    fg = partition_graph(load_dataset(dataset), partition, clients, seed=42, split=(0.2, 0.4, 0.4))
    res = run_seed(cfg, fg, 0, torch.device("cpu"))
    recs = res.rounds[1:]  # the first round builds the client batch and the protocol's keys: warm-up
    up = [r.total_up / max(len(r.clients), 1) for r in recs]
    return {
        "train_s": statistics.median(r.train_seconds for r in recs),
        "crypto_s": statistics.median(r.crypto_seconds for r in recs),
        "server_s": statistics.median(r.server_seconds for r in recs),
        "round_s": statistics.median(r.train_seconds + r.crypto_seconds + r.server_seconds for r in recs),
        "bytes_up_per_client": statistics.median(up),
        "test_acc": res.final.overall["test_acc"] if res.final else float("nan"),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--dataset", default="Cora")
    p.add_argument("--partition", default="louvain+")
    p.add_argument("--clients", type=int, default=10)
    p.add_argument("--rounds", type=int, default=6)
    p.add_argument("--protocols", nargs="+", default=["plaintext", "secagg"])
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    rows = {
        proto: measure(args.dataset, args.partition, args.clients, args.rounds, proto)
        for proto in args.protocols
    }
    base = rows.get("plaintext")
    meta = {
        "dataset": args.dataset,
        "partition": args.partition,
        "clients": args.clients,
        "measured_rounds": args.rounds - 1,
        "threads": args.threads,
        "cpu": platform.processor() or platform.machine(),
        "cpus": os.cpu_count(),
        "load_avg_1m": os.getloadavg()[0] if hasattr(os, "getloadavg") else None,
    }
    if args.json:
        print(json.dumps({"meta": meta, "rows": rows}, indent=1))
        return 0
    print(
        f"FedSpray per-round wall time, {args.dataset} {args.partition}, {args.clients} clients, median of "
        f"{args.rounds - 1} rounds (load avg {meta['load_avg_1m']})"
    )
    print(
        f"{'protocol':<12}{'train s':>10}{'crypto s':>10}{'server s':>10}{'round s':>10}{'KiB up/client':>15}"
        f"{'crypto x plain':>16}{'round x plain':>15}"
    )
    for proto, r in rows.items():
        cx = r["crypto_s"] / base["crypto_s"] if base and base["crypto_s"] > 0 else float("nan")
        rx = r["round_s"] / base["round_s"] if base and base["round_s"] > 0 else float("nan")
        print(
            f"{proto:<12}{r['train_s']:>10.3f}{r['crypto_s']:>10.3f}{r['server_s']:>10.4f}{r['round_s']:>10.3f}"
            f"{r['bytes_up_per_client'] / 1024:>15.1f}{cx:>16.1f}{rx:>15.2f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
