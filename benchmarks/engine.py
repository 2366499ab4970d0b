"""Batched client training vs. its floors and vs. a one-client-at-a-time loop, side by side in one run.

On one graph (Cora, GCN hidden 64, Metis partitions into K clients), for E local epochs:

(a) one FedAvg round in steady state (clients keep their optimiser state, the default): the K clients'
    local training, batched; the same plus building the numerator/denominator uploads
    (``FedAvg.client_steps``); and that plus the plaintext sum and the server step;
(b) E epochs of Centralized training on the whole graph (one model, PyG GCNConv layers);
(c) the optimiser step alone over all K clients' parameters, E times (the state-update floor: every client
    owns a model copy, so this part grows with K);
(d) a one-client-at-a-time loop for the same round, written as FGL code bases write it (one ``torch.nn``
    model, ``model(x, edge_index)``, a ``torch.optim.Adam`` per client, clients in turn);
(e) securefgl's own client-at-a-time path (``train_each_client``: the same code as (a), a batch of one per
    call, as a deployment's client runs it).

Targets: (a) <= 1.5 x ((b) + (c)) for K = 10 and 100; (a) at least 3x faster than (d) at K = 100.
Every time is the best of ``--repeats`` runs after one warm-up (as :mod:`timeit` recommends: other
processes only ever add time).

Usage::

    python benchmarks/engine.py [--epochs 3] [--clients 10,100] [--repeats 5] [--device auto] [--threads N]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F

from securefgl.algorithms.base import Client, RoundState, Setting
from securefgl.algorithms.registry import create_algorithm
from securefgl.config import TrainConfig
from securefgl.data import load_dataset, partition_graph
from securefgl.nn import ModelSpec
from securefgl.protocols.registry import get_protocol
from securefgl.training.device import resolve_device, tune_cpu_allocator
from securefgl.training.local_training import make_optimizer, train_clients, train_each_client
from securefgl.training.optim import StackedOptimizer


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timeit(fn: Callable[[], object], repeats: int, device: torch.device) -> float:
    fn()
    _sync(device)
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        _sync(device)
        times.append(time.perf_counter() - t0)
    return min(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--clients", default="10,100")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--device", default="auto")
    ap.add_argument("--threads", type=int, default=0, help="torch intra-op threads (0: leave as is)")
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
    epochs = args.epochs
    spec = ModelSpec(name="gcn", hidden=64)
    train = TrainConfig(local_epochs=epochs, lr=0.01)
    print(
        f"device {device} ({torch.cuda.get_device_name(device) if device.type == 'cuda' else 'CPU'}), "
        f"torch threads {torch.get_num_threads()}, Cora GCN hidden {spec.hidden}, dropout {spec.dropout}, "
        f"E = {epochs} local epochs, Adam, best of {args.repeats}, "
        f"CPU allocator {'tuned' if tuned else 'default'} (applies to every column)"
    )

    # (b) centralized: E epochs on the whole graph
    g = data.clone().to(device)  # PyG moves a Data in place: keep the CPU copy for partitioning
    setting1 = Setting(g.num_features, 7, 1, g.num_nodes, g.num_nodes, spec, train, device=device)
    central = setting1.make_model(generator=torch.Generator().manual_seed(0))
    central.generator = torch.Generator(device=device).manual_seed(1)
    opt = torch.optim.Adam(central.parameters(), lr=0.01)
    mask = g.train_mask

    def centralized() -> None:
        central.train()
        for _ in range(epochs):
            opt.zero_grad(set_to_none=True)
            loss = F.cross_entropy(central(g.x, g.edge_index)[mask], g.y[mask])
            loss.backward()
            opt.step()

    t_b = timeit(centralized, args.repeats, device)

    rows = [
        measure(k, data, spec, train, device, epochs, args) for k in [int(v) for v in args.clients.split(",")]
    ]
    report(rows, t_b)


def measure(k: int, data, spec, train, device, epochs: int, args) -> tuple:
    """(K, (a) train, (a)+upload, (a)+sum+server, (c), (d)) for K clients."""
    fg = partition_graph(data, "metis", k, seed=0, root=args.root)
    setting = Setting(
        fg.num_features,
        fg.num_classes,
        k,
        fg.num_nodes,
        fg.num_nodes,
        spec,
        train,
        device=device,
        max_clients_per_round=k,
    )
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
            model,
            clients,
            broadcast,
            epochs=epochs,
            lr=0.01,
            generator=ws["generator"],
            batch_order=True,
            state_key="bench",  # steady state: clients keep their optimiser state, as FedAvg does by default
        )

    def batched_round_with_uploads() -> None:
        fedavg.client_steps(clients, rs)

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

    seq_model = setting.make_model(generator=torch.Generator().manual_seed(0))

    def sequential() -> None:
        params = dict(seq_model.named_parameters())
        seq_model.train()
        for c in clients:
            with torch.no_grad():
                for n, v in params.items():
                    v.copy_(broadcast[n])
            opt = make_optimizer(list(params.values()), "adam", 0.01, 0.0)
            mask = c.data.train_mask
            for _ in range(epochs):
                opt.zero_grad(set_to_none=True)
                F.cross_entropy(seq_model(c.data.x, c.data.edge_index)[mask], c.data.y[mask]).backward()
                opt.step()

    def each_alone() -> None:
        train_each_client(model, clients, broadcast, epochs=epochs, lr=0.01, generator=ws["generator"])

    t_a = timeit(batched_training, args.repeats, device)
    t_a_up = timeit(batched_round_with_uploads, args.repeats, device)
    t_full = timeit(full_round, args.repeats, device)
    t_c = timeit(optimizer_only, args.repeats, device)
    t_d = timeit(sequential, max(1, args.repeats // 2), device)
    t_e = timeit(each_alone, max(1, args.repeats // 2), device)
    return (k, t_a, t_a_up, t_full, t_c, t_d, t_e)


def report(rows: list, t_b: float) -> None:
    """Print the table and the two targets."""
    print()
    header = (
        f"{'K':>4} {'(a) train':>10} {'(a)+upload':>11} {'(a)+sum+srv':>12} {'(b) central':>12} {'(c) optim':>10} "
        f"{'(b)+(c)':>9} {'(a)/((b)+(c))':>14} {'(d) loop':>10} {'(d)/(a)':>8} {'(e) each':>10} {'(e)/(a)':>8}"
    )
    print(header)
    print("-" * len(header))
    for k, t_a, t_a_up, t_full, t_c, t_d, t_e in rows:
        floor = t_b + t_c
        print(
            f"{k:>4} {1e3 * t_a:>8.1f}ms {1e3 * t_a_up:>9.1f}ms {1e3 * t_full:>10.1f}ms {1e3 * t_b:>10.1f}ms "
            f"{1e3 * t_c:>8.1f}ms {1e3 * floor:>7.1f}ms {t_a / floor:>13.2f}x {1e3 * t_d:>8.1f}ms "
            f"{t_d / t_a:>7.1f}x {1e3 * t_e:>8.1f}ms {t_e / t_a:>7.1f}x"
        )
    print()
    ok1 = all(t_a <= 1.5 * (t_b + t_c) for _, t_a, *_ in rows)
    big = [r for r in rows if r[0] >= 100]
    ok2 = all(r[5] >= 3 * r[1] for r in big) if big else None
    print(f"target (a) <= 1.5 x ((b)+(c)) for every K: {'met' if ok1 else 'NOT met'}")
    if ok2 is not None:
        print(f"target (a) >= 3x faster than (d) at K >= 100: {'met' if ok2 else 'NOT met'}")


if __name__ == "__main__":
    main()
