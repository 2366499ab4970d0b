"""Batched client training vs. its floors and vs. a one-client-at-a-time loop, side by side in one run.

On one graph (Cora, GCN hidden 64, Metis partitions into K clients), for E local epochs:

(a) one FedAvg round in steady state (clients keep their optimiser state, the default): the K clients'
    local training, batched; the same plus building the numerator/denominator uploads
    (``FedAvg.client_steps``); and that plus the plaintext sum and the server step;
(b) E epochs of centralised training on the whole graph with PyG's own model
    (``torch_geometric.nn.models.GCN``, the same widths and dropout), the floor nobody can call slow;
(c) the optimiser step alone over all K clients' parameters, E times (the state-update floor: every client
    owns a model copy, so this part grows with K);
(d) a one-client-at-a-time loop written as FGL code bases write it (one ``torch.nn`` model called as
    ``model(x, edge_index)``, a fresh ``torch.optim.Adam`` per client, clients in turn). It is a minimal
    loop of that style, not OpenFGL's own loop (which adds evaluation and bookkeeping per client, so it is
    slower still);
(e) securefgl's own client-at-a-time path (``train_each_client``: the same code as (a), a batch of one per
    call, as a deployment's client runs it).

Targets: (a) <= 1.5 x ((b) + (c)) for K = 10 and 100; (a) at least 3x faster than (d) at K = 100.

Timing hygiene (a loaded machine only ever adds time, and unevenly): every measured function and its
floors run interleaved, round after round (``--repeats`` rounds after one warm-up round), so a burst of
other load hits all columns alike; the table shows medians, and ratios are of medians; ``--spread``
prints min-max per column. Torch threads are pinned (``--threads``, default 1: on a shared 2-core machine
more threads mostly add contention).

Usage::

    python benchmarks/engine.py [--epochs 3] [--clients 10,100] [--repeats 7] [--device auto] [--threads 1]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch_geometric.nn.models import GCN as PyGGCN

from securefgl.algorithms.base import Client, RoundState, Setting
from securefgl.algorithms.registry import create_algorithm
from securefgl.config import TrainConfig
from securefgl.data import load_dataset, partition_graph
from securefgl.nn import ModelSpec
from securefgl.protocols.registry import get_protocol
from securefgl.training.device import resolve_device, tune_cpu_allocator
from securefgl.training.local_training import make_optimizer, train_clients, train_each_client
from securefgl.training.optim import StackedOptimizer

COLUMNS = ("a", "a_up", "a_full", "b", "c", "d", "e")


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def interleaved(
    fns: dict[str, Callable[[], object]], repeats: int, device: torch.device
) -> dict[str, list[float]]:
    """Seconds of every function, ``repeats`` rounds of all of them in turn, after one warm-up round."""
    times: dict[str, list[float]] = {name: [] for name in fns}
    for r in range(repeats + 1):
        for name, fn in fns.items():
            _sync(device)
            t0 = time.perf_counter()
            fn()
            _sync(device)
            if r:
                times[name].append(time.perf_counter() - t0)
    return times


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--clients", default="10,100")
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--device", default="auto")
    ap.add_argument(
        "--threads", type=int, default=1, help="torch intra-op threads (0: leave torch's default)"
    )
    ap.add_argument("--spread", action="store_true", help="also print min-max of every column")
    ap.add_argument("--root", default=None, help="data root holding Cora (default: $SECUREFGL_DATA)")
    ap.add_argument(
        "--no-tune-allocator",
        action="store_true",
        help="leave glibc's mmap threshold alone (securefgl run tunes it; see training.device.tune_cpu_allocator)",
    )
    args = ap.parse_args()
    tuned = False if args.no_tune_allocator else tune_cpu_allocator()
    if args.threads:
        torch.set_num_threads(args.threads)
    device = resolve_device(args.device)
    data = load_dataset("Cora", args.root)
    spec = ModelSpec(name="gcn", hidden=64)
    train = TrainConfig(local_epochs=args.epochs, lr=0.01)
    print(
        f"device {device} ({torch.cuda.get_device_name(device) if device.type == 'cuda' else 'CPU'}), "
        f"torch threads {torch.get_num_threads()}, Cora GCN hidden {spec.hidden}, dropout {spec.dropout}, "
        f"E = {args.epochs} local epochs, Adam, median of {args.repeats} interleaved rounds, "
        f"CPU allocator {'tuned' if tuned else 'default'} (applies to every column)"
    )
    rows = [measure(k, data, spec, train, device, args) for k in [int(v) for v in args.clients.split(",")]]
    report(rows, args.spread)


def _centralized(data, spec: ModelSpec, device: torch.device, epochs: int) -> Callable[[], None]:
    """(b): E epochs of PyG's GCN on the whole graph."""
    g = data.clone().to(device)  # PyG moves a Data in place: keep the CPU copy for partitioning
    torch.manual_seed(0)
    model = PyGGCN(g.num_features, spec.hidden, num_layers=2, out_channels=7, dropout=spec.dropout).to(device)
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    mask = g.train_mask

    def run() -> None:
        model.train()
        for _ in range(epochs):
            opt.zero_grad(set_to_none=True)
            F.cross_entropy(model(g.x, g.edge_index)[mask], g.y[mask]).backward()
            opt.step()

    return run


def _client_loop(model: torch.nn.Module, clients, broadcast, epochs: int) -> Callable[[], None]:
    """(d): one client at a time, plain torch."""
    params = dict(model.named_parameters())

    def run() -> None:
        model.train()
        for c in clients:
            with torch.no_grad():
                for n, v in params.items():
                    v.copy_(broadcast[n])
            opt = make_optimizer(list(params.values()), "adam", 0.01, 0.0)
            mask = c.data.train_mask
            for _ in range(epochs):
                opt.zero_grad(set_to_none=True)
                F.cross_entropy(model(c.data.x, c.data.edge_index)[mask], c.data.y[mask]).backward()
                opt.step()

    return run


def measure(k: int, data, spec: ModelSpec, train: TrainConfig, device: torch.device, args) -> tuple:
    """``(K, {column: seconds per round})`` for K clients, every column timed in the same interleaving."""
    epochs = args.epochs
    fg = partition_graph(data, "metis", k, seed=0, root=args.root)
    setting = Setting(
        fg.num_features, fg.num_classes, k, fg.num_nodes, fg.num_nodes, spec, train, device=device,
        max_clients_per_round=k,
    )  # fmt: skip
    ws: dict = {"generator": torch.Generator(device=device).manual_seed(2)}
    clients = [
        Client(i, d.to(device), torch.Generator(device=device).manual_seed(10 + i), workspace=ws)
        for i, d in enumerate(fg.clients)
    ]
    fedavg = create_algorithm("fedavg", setting)
    server = fedavg.init_server(torch.Generator().manual_seed(0))
    broadcast = {n: v.to(device) for n, v in fedavg.initial_broadcast(server).items()}
    rs = RoundState("train", 0, 0, tuple(range(k)), broadcast)
    model = setting.make_model(generator=torch.Generator().manual_seed(0))
    plaintext = get_protocol("plaintext")
    schema = fedavg.schema(rs)

    def batched_training() -> None:
        train_clients(
            model, clients, broadcast, epochs=epochs, lr=0.01, generator=ws["generator"], batch_order=True,
            state_key="bench",  # steady state: clients keep their optimiser state, as FedAvg does by default
        )  # fmt: skip

    def full_round() -> None:
        out = fedavg.client_steps(clients, rs)
        sums, _ = plaintext.aggregate(schema, out, round_index=0)
        fedavg.server_step(server, sums, rs)

    leaves = {n: v.unsqueeze(0).repeat(k, *[1] * v.dim()).requires_grad_(True) for n, v in broadcast.items()}
    for v in leaves.values():
        v.grad = torch.randn_like(v)
    sopt = StackedOptimizer(leaves, "adam", 0.01)

    def optimizer_only() -> None:
        for _ in range(epochs):
            sopt.step()

    fns = {
        "a": batched_training,
        "a_up": lambda: fedavg.client_steps(clients, rs),
        "a_full": full_round,
        "b": _centralized(data, spec, device, epochs),
        "c": optimizer_only,
        "d": _client_loop(
            setting.make_model(generator=torch.Generator().manual_seed(0)), clients, broadcast, epochs
        ),
        "e": lambda: train_each_client(
            model, clients, broadcast, epochs=epochs, lr=0.01, generator=ws["generator"]
        ),
    }
    return k, interleaved(fns, args.repeats, device)


def report(rows: list, spread: bool) -> None:
    """Print the table (medians) and the two targets."""
    print()
    header = (
        f"{'K':>4} {'(a) train':>10} {'(a)+upload':>11} {'(a)+sum+srv':>12} {'(b) central':>12} {'(c) optim':>10} "
        f"{'(b)+(c)':>9} {'(a)/((b)+(c))':>14} {'(d) loop':>10} {'(d)/(a)':>8} {'(e) each':>10} {'(e)/(a)':>8}"
    )
    print(header)
    print("-" * len(header))
    ok1, ok2 = True, None
    for k, times in rows:
        m = {c: statistics.median(times[c]) for c in COLUMNS}
        floor = m["b"] + m["c"]
        print(
            f"{k:>4} {1e3 * m['a']:>8.1f}ms {1e3 * m['a_up']:>9.1f}ms {1e3 * m['a_full']:>10.1f}ms "
            f"{1e3 * m['b']:>10.1f}ms {1e3 * m['c']:>8.1f}ms {1e3 * floor:>7.1f}ms {m['a'] / floor:>13.2f}x "
            f"{1e3 * m['d']:>8.1f}ms {m['d'] / m['a']:>7.1f}x {1e3 * m['e']:>8.1f}ms {m['e'] / m['a']:>7.1f}x"
        )
        if spread:
            print(
                "     min-max ms: "
                + ", ".join(f"{c} {1e3 * min(times[c]):.1f}-{1e3 * max(times[c]):.1f}" for c in COLUMNS)
            )
        ok1 = ok1 and m["a"] <= 1.5 * floor
        if k >= 100:
            ok2 = (ok2 is None or ok2) and m["d"] >= 3 * m["a"]
    print()
    print(f"target (a) <= 1.5 x ((b)+(c)) for every K: {'met' if ok1 else 'NOT met'}")
    if ok2 is not None:
        print(f"target (a) >= 3x faster than (d) at K >= 100: {'met' if ok2 else 'NOT met'}")


if __name__ == "__main__":
    main()
