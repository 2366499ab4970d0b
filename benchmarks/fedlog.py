"""FedLoG communication and secure-aggregation cost, side by side with FedAvg (issue 10 benchmark).

For a dataset's shapes (default Cora: F = 1433, C = 7, m = 20) and K clients (default 3, the setting of the
paper's A.3 figures), builds the exact per-round schemas that :class:`securefgl.algorithms.fedlog.FedLoG` and
:class:`securefgl.algorithms.baselines.fedavg.FedAvg` (GCN, hidden 64) declare, fills them with contributions of
the right shape and range, and runs ``plaintext`` and ``secagg`` on them. Reported per protocol: bytes each client
sends and receives in the sum (from the transcript) plus the broadcast it downloads, and the aggregation wall
time; FedLoG's one-off prompt-generator sum (round 0) is reported separately. No training runs here, so the
numbers isolate what FedLoG's uploads cost under each protocol.

Usage::

    python benchmarks/fedlog.py                       # Cora shapes, K = 3, one repetition
    python benchmarks/fedlog.py --features 3703 --classes 6 --clients 3 --repeat 3   # CiteSeer shapes
    python benchmarks/fedlog.py --no-psi              # skip the (large) one-off prompt-generator sum
"""

from __future__ import annotations

import argparse
import json
import time

import torch

from securefgl.algorithms.base import RoundState, Setting
from securefgl.algorithms.baselines.fedavg import FedAvg
from securefgl.algorithms.fedlog import FedLoG
from securefgl.config import TrainConfig
from securefgl.engine.broadcast import broadcast_nbytes
from securefgl.nn.registry import ModelSpec
from securefgl.protocols.registry import get_protocol


def _contribs(schema, k: int, gen: torch.Generator) -> dict[int, dict[str, torch.Tensor]]:
    out = {}
    for cid in range(k):
        c = {}
        for b in schema.blocks:
            if b.kind == "count":
                c[b.name] = torch.randint(0, int(min(b.bound, 1)) + 1, b.shape, generator=gen)
            else:
                c[b.name] = (torch.rand(b.shape, generator=gen) * 2 - 1) * min(b.bound, 1.0) * 0.5
        out[cid] = c
    return out


def _measure(schema, contribs, protocol: str, repeat: int) -> dict[str, float]:
    prot = get_protocol(protocol)
    times = []
    for r in range(repeat):
        t0 = time.perf_counter()
        _, tr = prot.aggregate(schema, contribs, round_index=r)
        times.append(time.perf_counter() - t0)
    k = len(contribs)
    return {
        "seconds": min(times),
        "up_bytes_per_client": sum(tr.total_bytes_sent(c) for c in contribs) / k,
        "down_bytes_per_client": sum(tr.total_bytes_received(c) for c in contribs) / k,
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--features", type=int, default=1433)
    p.add_argument("--classes", type=int, default=7)
    p.add_argument("--clients", type=int, default=3)
    p.add_argument("--num-proto", type=int, default=20)
    p.add_argument("--repeat", type=int, default=1)
    p.add_argument("--no-psi", action="store_true")
    p.add_argument("--protocols", nargs="+", default=["plaintext", "secagg"])
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    k = args.clients
    setting = Setting(
        num_features=args.features,
        num_classes=args.classes,
        num_clients=k,
        num_nodes=2708,
        count_bound=2708,
        model=ModelSpec(name="gcn", hidden=64),
        train=TrainConfig(),
        max_clients_per_round=k,
    )
    gen = torch.Generator().manual_seed(0)
    fedlog = FedLoG(setting, {"num_proto": args.num_proto, "prompt_mode": "none" if args.no_psi else "paper"})
    fl_server = fedlog.init_server(gen)
    fl_bc = fedlog.initial_broadcast(fl_server)
    fedavg = FedAvg(setting)
    fa_server = fedavg.init_server(gen)
    fa_bc = fedavg.initial_broadcast(fa_server)
    fl_reqs = {
        r.key: r.schema for r in fedlog.requests(RoundState("train", 0, 0, tuple(range(k)), fl_bc, 100))
    }
    fa_schema = fedavg.schema(RoundState("train", 0, 0, tuple(range(k)), fa_bc, 100))
    # FedLoG's per-round broadcast: the model plus the global synthetic data (C m x F) and its labels
    syn_bytes = args.classes * args.num_proto * (args.features * 4 + 8)
    rows = []
    for protocol in args.protocols:
        for label, schema, down in (
            ("fedavg", fa_schema, broadcast_nbytes(fa_bc)),
            ("fedlog", fl_reqs["main"], broadcast_nbytes(fl_bc) + syn_bytes),
            *((("fedlog-psi-once", fl_reqs["psi"], 0),) if "psi" in fl_reqs else ()),
        ):
            m = _measure(schema, _contribs(schema, k, gen), protocol, args.repeat)
            row = {
                "protocol": protocol,
                "sum": label,
                "elements": schema.length,
                "up_MB": m["up_bytes_per_client"] / 1e6,
                "down_MB": (m["down_bytes_per_client"] + down) / 1e6,
                "seconds": m["seconds"],
            }
            rows.append(row)
            print(json.dumps(row), flush=True)
    print(f"\n{'protocol':10} {'sum':16} {'elements':>10} {'up MB':>9} {'down MB':>9} {'seconds':>8}")
    for r in rows:
        print(
            f"{r['protocol']:10} {r['sum']:16} {r['elements']:>10} {r['up_MB']:>9.2f} {r['down_MB']:>9.2f} "
            f"{r['seconds']:>8.3f}"
        )
    by = {(r["protocol"], r["sum"]): r for r in rows}
    for s in ("fedavg", "fedlog"):
        if ("secagg", s) in by and ("plaintext", s) in by:
            a, b = by[("secagg", s)], by[("plaintext", s)]
            print(
                f"{s}: secagg / plaintext wall time {a['seconds'] / b['seconds']:.1f}x, "
                f"upload {a['up_MB'] / b['up_MB']:.2f}x"
            )
    if ("plaintext", "fedlog") in by:
        print(
            f"fedlog / fedavg upload per round (plaintext): "
            f"{by[('plaintext', 'fedlog')]['up_MB'] / by[('plaintext', 'fedavg')]['up_MB']:.1f}x"
        )


if __name__ == "__main__":
    main()
