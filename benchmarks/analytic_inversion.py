"""Analytic first-layer inversion of honest FedAvg uploads on Cora: where it works and where it stops.

Every cell runs the engine's clients and FedAvg's own client step (the honest first broadcast, optimiser SGD
unless stated, lr 0.1, dropout 0) and inverts each client's upload (plaintext: the server sees it) with
:func:`securefgl.attacks.analytic_inversion.analytic_study`; the ``secagg`` rows invert the secure sum of all
clients (real keys) and score it against every client's nodes. Figures are means over the clients:

* ``exact``: fraction of the client's training nodes recovered with cosine > 0.99;
* ``cos``: mean best cosine of its training nodes over the candidates;
* ``chance``: the same mean best cosine for as many random public rows as there are candidates.

GCN rows are scored against the propagated inputs ``(A_hat X)`` of the client's graph (graph known);
``gcn graph-unknown`` scores the same candidates against the raw features. Sections: (1) training nodes per
client (each client's train mask subsampled, 10 clients); (2) clients K with every training node kept;
(3) local SGD steps; (4) Adam's first step.

    python benchmarks/analytic_inversion.py [--root DATA] [--dataset Cora] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import time
from typing import Any

import torch


def _cfg(dataset: str, root: str | None, model: str, clients: int, epochs: int, optimizer: str) -> Any:
    from securefgl.config import RunConfig

    return RunConfig.from_mapping(
        {
            "dataset": {"name": dataset, **({"root": root} if root else {})},
            "partition": {"clients": clients},
            "algorithm": {"name": "fedavg"},
            "model": {"name": model, "dropout": 0.0},
            "train": {"optimizer": optimizer, "local_epochs": epochs, "lr": 0.1},
            "protocol": {"name": "secagg"},
            "output": {"save": False},
        }
    )


def run_cell(
    dataset: str,
    root: str | None,
    model: str,
    *,
    clients: int = 10,
    per_client: int | None = None,
    epochs: int = 1,
    optimizer: str = "sgd",
    seed: int = 0,
) -> dict[str, dict[str, float]]:
    """One cell: the :func:`analytic_study` summary per view."""
    from securefgl.api import load_federated_graph
    from securefgl.attacks.analytic_inversion import analytic_study, subsample_train

    cfg = _cfg(dataset, root, model, clients, epochs, optimizer)
    fg = subsample_train(load_federated_graph(cfg), per_client, seed)
    return analytic_study(cfg, fg, seed=seed, protocols=("secagg",)).summary


def _line(section: str, setting: str, model: str, view: str, s: dict[str, float]) -> str:
    return (
        f"{section:<8} {setting:<14} {model:<4} {view:<14} {s['nodes']:>6.1f} {s['candidates']:>6.1f} "
        f"{s['exact']:>6.3f} {s['mean_best_cosine']:>6.3f} {s.get('chance_mean_best_cosine', float('nan')):>6.3f}"
    )


def main() -> None:
    p = argparse.ArgumentParser(description="analytic first-layer inversion on real data")
    p.add_argument("--root", default=os.environ.get("SECUREFGL_DATA"))
    p.add_argument("--dataset", default="Cora")
    p.add_argument("--models", default="mlp,gcn")
    p.add_argument("--per-client", default="1,2,4,8,16,32,all")
    p.add_argument("--clients", default="10,20,50,100")
    p.add_argument("--steps", default="1,2,5")
    p.add_argument("--steps-per-client", type=int, default=4)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", default=None)
    a = p.parse_args()
    torch.set_num_threads(1)
    models = [m for m in a.models.split(",") if m]
    out: list[dict[str, Any]] = []
    t0 = time.perf_counter()
    print(
        f"{'section':<8} {'setting':<14} {'mdl':<4} {'view':<14} {'nodes':>6} {'cands':>6} "
        f"{'exact':>6} {'cos':>6} {'chance':>6}"
    )

    def emit(section: str, setting: str, model: str, summary: dict[str, dict[str, float]]) -> None:
        for view, s in summary.items():
            print(_line(section, setting, model, view, s), flush=True)
            out.append({"section": section, "setting": setting, "model": model, "view": view, **s})

    for m in models:
        for pc in a.per_client.split(","):
            per = None if pc == "all" else int(pc)
            emit("nodes", f"K=10 n<={pc}", m, run_cell(a.dataset, a.root, m, per_client=per, seed=a.seed))
    for m in models:
        for k in a.clients.split(","):
            emit("clients", f"K={k}", m, run_cell(a.dataset, a.root, m, clients=int(k), seed=a.seed))
    for m in models:
        for e in a.steps.split(","):
            s = run_cell(a.dataset, a.root, m, per_client=a.steps_per_client, epochs=int(e), seed=a.seed)
            emit("steps", f"E={e} n<={a.steps_per_client}", m, s)
    for m in models:
        for pc in (1, 2, 4):
            s = run_cell(a.dataset, a.root, m, per_client=pc, optimizer="adam", seed=a.seed)
            emit("adam", f"E=1 n<={pc}", m, s)
    print(f"total {time.perf_counter() - t0:.1f} s")
    if a.json:
        with open(a.json, "w") as fh:
            json.dump(out, fh, indent=1)


if __name__ == "__main__":
    main()
