"""FedStruct cost: the private setup (bytes and seconds per client, dense and pruned) against the centrally
computed matrix, and the per-round training time under a secure protocol against plaintext.

Setup: :func:`securefgl.algorithms.fedstruct._setup.private_abar` with the receiver-blinded sums of
``--protocol`` (one receiver at a time), K clients on a random partition; reported per client are the bytes
it sent and received (from the protocol transcripts), the wall time per client (total / K, the simulation is
sequential), and the error against :math:`\\hat A^{L_s}` computed centrally. Pruning is applied after
aggregation, so it changes storage (non-zeros kept), not traffic (spec §3.4).

Training: FedStruct through the engine for ``--rounds`` rounds under plaintext and ``--protocol``, in the same
process; per-round client, protocol ("crypto") and server seconds of the ``train`` phase.

Usage (``OMP_NUM_THREADS=1`` on a shared machine)::

    python benchmarks/fedstruct.py --dataset Cora --num-hops-s 3          # setup + training, Cora
    python benchmarks/fedstruct.py --dataset CiteSeer --num-hops-s 2 --skip-training
    python benchmarks/fedstruct.py --synthetic 600 --num-hops-s 3        # quick look on a CSBM graph
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np
import torch

from securefgl.algorithms.fedstruct import attach_cross_edges
from securefgl.algorithms.fedstruct._setup import StructureView, central_abar, private_abar
from securefgl.config import RunConfig
from securefgl.data import load_dataset, make_csbm, partition_graph
from securefgl.engine.runner import run_seed
from securefgl.protocols.registry import get_protocol


def setup_cost(fg, protocol: str, hops: int, prune_p: int | None) -> dict:
    views = [StructureView.from_data(i, c) for i, c in enumerate(fg.clients)]
    g = fg.global_data()
    t0 = time.perf_counter()
    ref = central_abar(g.edge_index, g.num_nodes, hops)
    central_s = time.perf_counter() - t0
    abar, cost = private_abar(views, get_protocol(protocol), hops, prune_p=prune_p)
    err = max(float((a - ref[c.global_id]).abs().max()) for a, c in zip(abar, fg.clients, strict=True))
    k = len(views)
    return {
        "protocol": protocol,
        "num_hops_s": hops,
        "prune_p": prune_p,
        "clients": k,
        "nodes": fg.num_nodes,
        "bytes_up_per_client_mean": float(np.mean(list(cost.bytes_up.values()))),
        "bytes_down_per_client_mean": float(np.mean(list(cost.bytes_down.values()))),
        "seconds_total": cost.seconds,
        "seconds_per_client": cost.seconds / k,
        "central_seconds": central_s,
        "private_vs_central_time": cost.seconds / max(central_s, 1e-9),
        "nonzeros_kept": int(sum(int((a != 0).sum()) for a in abar)),
        "max_abs_error_vs_central": err if prune_p is None else None,
    }


def training_time(fg, protocol: str, hops: int, rounds: int) -> dict:
    cfg = RunConfig.from_mapping(
        {
            "protocol": {"name": protocol},
            "algorithm": {"name": "fedstruct", "options": {"num_hops_s": hops}},
            "train": {"rounds": rounds, "lr": 0.002, "weight_decay": 5e-4, "eval_every": rounds},
            "output": {"save": False},
        }
    )
    res = run_seed(cfg, fg, 0, torch.device("cpu"))
    tr = [r for r in res.rounds if r.phase == "train"]
    return {
        "protocol": protocol,
        "rounds": len(tr),
        "client_seconds_per_round": float(np.mean([r.train_seconds for r in tr])),
        "crypto_seconds_per_round": float(np.mean([r.crypto_seconds for r in tr])),
        "server_seconds_per_round": float(np.mean([r.server_seconds for r in tr])),
        "bytes_up_per_round": float(np.mean([sum(r.bytes_up.values()) for r in tr])),
        "test_acc": res.final.overall["test_acc"],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dataset", default="Cora")
    ap.add_argument("--synthetic", type=int, default=None, help="use a CSBM graph with this many nodes")
    ap.add_argument("--clients", type=int, default=10)
    ap.add_argument("--protocol", default="secagg")
    ap.add_argument("--num-hops-s", type=int, default=3)
    ap.add_argument("--prune-p", type=int, default=30)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--skip-training", action="store_true")
    args = ap.parse_args()
    if args.synthetic:
        data = make_csbm(num_nodes=args.synthetic, num_classes=4, num_features=32, avg_degree=6.0, seed=0)
    else:
        data = load_dataset(args.dataset)
    fg = attach_cross_edges(
        partition_graph(
            data, "random", args.clients, seed=0, split=(0.1, 0.1, 0.8), split_scope="global", cache=False
        )
    )
    setups = []
    for prune in (None, args.prune_p):
        setups.append(setup_cost(fg, args.protocol, args.num_hops_s, prune))
        print(json.dumps({"setup": setups[-1]}), flush=True)
    name = f"synthetic {args.synthetic}" if args.synthetic else args.dataset
    print(f"\n{name}, K = {args.clients}, L_s = {args.num_hops_s}, setup under {args.protocol}")
    print(
        "| setup | MB up / client | MB down / client | s / client | s total | central s | total / central |"
    )
    print("|---|---|---|---|---|---|---|")
    for r in setups:
        kind = "dense" if r["prune_p"] is None else f"pruned p={r['prune_p']}"
        print(
            f"| {kind} | {r['bytes_up_per_client_mean'] / 1e6:.1f} | {r['bytes_down_per_client_mean'] / 1e6:.1f} | "
            f"{r['seconds_per_client']:.2f} | {r['seconds_total']:.1f} | {r['central_seconds']:.3f} | "
            f"{r['private_vs_central_time']:.0f}x |"
        )
    if not args.skip_training:
        rows = []
        for proto in ("plaintext", args.protocol):
            rows.append(training_time(fg, proto, args.num_hops_s, args.rounds))
            print(json.dumps({"training": rows[-1]}), flush=True)
        print(f"\ntraining, per round (mean of {args.rounds})")
        print("| protocol | client s | crypto s | server s | total s | vs plaintext | MB up / round |")
        print("|---|---|---|---|---|---|---|")
        base = None
        for r in rows:
            tot = (
                r["client_seconds_per_round"] + r["crypto_seconds_per_round"] + r["server_seconds_per_round"]
            )
            base = base or tot
            print(
                f"| {r['protocol']} | {r['client_seconds_per_round']:.3f} | {r['crypto_seconds_per_round']:.3f} | "
                f"{r['server_seconds_per_round']:.3f} | {tot:.3f} | {tot / base:.2f}x | "
                f"{r['bytes_up_per_round'] / 1e6:.1f} |"
            )


if __name__ == "__main__":
    main()
