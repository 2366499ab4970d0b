"""Optimisation-based update inversion of honest FedAvg uploads: where it works in plaintext, where it stops.

Every cell runs the engine's clients and FedAvg's own client step from the honest first broadcast (SGD, lr
0.1, dropout 0, 10 clients, each client's training nodes subsampled with ``subsample_train``) and inverts
each client's real upload with :func:`securefgl.attacks.gradient_inversion.invert_update`: cosine objective,
random restarts, iDLG labels, the binary prior, and **no analytic rows** (``anchors=False``: every start is
random, the optimisation does the work). Views:

* ``known``: GCN with the client's graph known (the receptive field's rows are unknowns; the training rows
  are deconvolved from the fitted propagated rows), scored against the raw features ``X``;
* ``unknown``: GCN with the graph unknown (training nodes treated as isolated), scored against the
  propagated inputs ``(A_hat X)`` of the training nodes, the rows the first layer actually saw;
* ``plain``: MLP (no graph), scored against ``X``;
* ``secagg``: the real secure sum of all clients (real keys) inverted as if it were the target's update
  (the target's ``n`` and, for GCN, its graph: what the audit's "public" figure does), scored like
  ``known`` / ``plain``.

Per cell, means over the clients with training nodes: ``cos`` (feature cosine after optimal matching of
reconstructed to true nodes), ``chance`` (the same score of ``n`` copies of the population's mean feature
row, propagated for the ``unknown`` view: the audit's chance baseline), ``lab`` (label accuracy after
matching) and ``s`` (seconds per inversion). Sections: (1) training nodes per client, 1 local step;
(2) local steps, few nodes per client.

    python benchmarks/optimisation_inversion.py [--root DATA] [--dataset Cora] [--quick] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import time
from typing import Any

import torch


def _cfg(dataset: str, root: str | None, model: str, epochs: int) -> Any:
    from securefgl.config import RunConfig

    return RunConfig.from_mapping(
        {
            "dataset": {"name": dataset, **({"root": root} if root else {})},
            "partition": {"clients": 10},
            "algorithm": {"name": "fedavg"},
            "model": {"name": model, "dropout": 0.0},
            "train": {"optimizer": "sgd", "local_epochs": epochs, "lr": 0.1},
            "protocol": {"name": "secagg"},
            "output": {"save": False},
        }
    )


def attack_config(restarts: int, iterations: int, *, graph_known: bool = True) -> Any:
    """The inversion settings of every cell: random starts only, the existing priors, iDLG labels."""
    from securefgl.attacks.gradient_inversion import InversionConfig

    return InversionConfig(
        restarts=restarts,
        iterations=iterations,
        prior="binary",
        labels="idlg",
        anchors=False,
        graph_known=graph_known,
    )


def run_cell(
    dataset: str,
    root: str | None,
    model: str,
    *,
    per_client: int | None,
    epochs: int = 1,
    seed: int = 0,
    restarts: int = 2,
    iterations: int = 150,
    secagg: bool = True,
    max_clients: int | None = None,
) -> dict[str, dict[str, float]]:
    """One cell: per view, the mean over clients of ``cos``, ``chance``, ``lab``, ``s`` and ``nodes``."""
    from securefgl.api import load_federated_graph
    from securefgl.attacks._imprint_run import malicious_setup
    from securefgl.attacks.analytic_inversion import subsample_train
    from securefgl.attacks.gradient_inversion import (
        TrainingRecipe,
        invert_update,
        score_reconstruction,
        update_from_upload,
    )
    from securefgl.attacks.imprint import propagated_inputs
    from securefgl.attacks.views import GraphKnowledge
    from securefgl.engine.broadcast import round_context
    from securefgl.protocols.registry import get_protocol

    cfg = _cfg(dataset, root, model, epochs)
    fg = subsample_train(load_federated_graph(cfg), per_client, seed)
    setup = malicious_setup(cfg, fg, seed, "cpu")
    bc = setup.broadcast
    ids = [i for i in setup.clients if int(fg.clients[i].train_mask.sum()) > 0]
    contrib = setup.train(setup.clients, bc)
    recipe = TrainingRecipe.from_train_config(cfg.train)
    gcn = model != "mlp"
    raw_all = torch.cat([d.x.detach().cpu().double() for d in fg.clients])
    prop_all = torch.cat(
        [propagated_inputs(d.x.cpu().float(), d.edge_index.cpu()).double() for d in fg.clients]
    )
    total = None
    if secagg:
        proto = get_protocol("secagg")
        sums, _ = proto.aggregate(setup.schema_for(bc), contrib, round_index=0, context=round_context(bc))
        total = update_from_upload(dict(sums), bc, source="sum", contributors=len(contrib))
    views = ["known", "unknown"] if gcn else ["plain"]
    rows: dict[str, list[dict[str, float]]] = {v: [] for v in [*views, *(["secagg"] if secagg else [])]}
    for i in ids[:max_clients]:
        d = fg.clients[i]
        tidx = torch.nonzero(d.train_mask.cpu()).flatten()
        x_true, y_true = d.x.cpu().float()[tidx], d.y.cpu()[tidx]
        prop = propagated_inputs(d.x.cpu().float(), d.edge_index.cpu())[tidx]
        graph = GraphKnowledge(i, d.num_nodes, d.edge_index.cpu(), tidx)
        indiv = update_from_upload(contrib[i], bc, source="individual")
        jobs = [(v, indiv) for v in views] + ([("secagg", total)] if total is not None else [])
        for view, up in jobs:
            graph_known = view != "unknown"
            rec = invert_update(
                up,
                setup.model,
                recipe,
                num_features=fg.num_features,
                num_classes=fg.num_classes,
                num_nodes=int(tidx.numel()),
                graph=graph if gcn else None,
                config=attack_config(restarts, iterations, graph_known=graph_known),
                generator=torch.Generator().manual_seed(seed + i),
            )
            target = x_true if graph_known else prop
            pool = raw_all if graph_known else prop_all
            sc = score_reconstruction(rec.x, rec.y, target, y_true, num_classes=fg.num_classes)
            guess = pool.mean(0, keepdim=True).repeat(int(tidx.numel()), 1)
            ch = score_reconstruction(guess, y_true, target, y_true, num_classes=fg.num_classes)
            rows[view].append(
                {
                    "nodes": float(tidx.numel()),
                    "cos": sc["feature_cosine"],
                    "chance": ch["feature_cosine"],
                    "lab": sc["label_accuracy"],
                    "s": rec.seconds,
                }
            )
    return {
        v: {k: sum(r[k] for r in rs) / len(rs) for k in rs[0]} | {"clients": float(len(rs))}
        for v, rs in rows.items()
        if rs
    }


def _line(section: str, setting: str, model: str, view: str, s: dict[str, float]) -> str:
    return (
        f"{section:<6} {setting:<10} {model:<4} {view:<8} {s['clients']:>4.0f} {s['nodes']:>6.1f} "
        f"{s['cos']:>6.3f} {s['chance']:>6.3f} {s['lab']:>6.3f} {s['s']:>6.1f}"
    )


def main() -> None:
    p = argparse.ArgumentParser(description="optimisation-based update inversion on real data")
    p.add_argument("--root", default=os.environ.get("SECUREFGL_DATA"))
    p.add_argument("--dataset", default="Cora")
    p.add_argument("--models", default="gcn,mlp")
    p.add_argument("--per-client", default="1,2,4,8,16,all")
    p.add_argument("--steps", default="1,2,5")
    p.add_argument("--steps-per-client", type=int, default=2)
    p.add_argument("--secagg-max", type=int, default=4, help="secagg rows up to this many nodes per client")
    p.add_argument("--restarts", type=int, default=2)
    p.add_argument("--iterations", type=int, default=150)
    p.add_argument("--max-clients", type=int, default=None, help="invert only the first clients")
    p.add_argument("--quick", action="store_true", help="nodes 1,2,4 and steps 1,2, GCN, 4 clients")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", default=None)
    a = p.parse_args()
    if a.quick:
        a.models, a.per_client, a.steps, a.max_clients = "gcn", "1,2,4", "1,2", a.max_clients or 4
    torch.set_num_threads(1)
    models = [m for m in a.models.split(",") if m]
    out: list[dict[str, Any]] = []
    t0 = time.perf_counter()
    print(
        f"{'sect':<6} {'setting':<10} {'mdl':<4} {'view':<8} {'cl':>4} {'nodes':>6} "
        f"{'cos':>6} {'chance':>6} {'lab':>6} {'s':>6}",
        flush=True,
    )

    def emit(section: str, setting: str, model: str, summary: dict[str, dict[str, float]]) -> None:
        for view, s in summary.items():
            print(_line(section, setting, model, view, s), flush=True)
            out.append(
                {
                    "dataset": a.dataset,
                    "section": section,
                    "setting": setting,
                    "model": model,
                    "view": view,
                    **s,
                }
            )

    common = {
        "seed": a.seed,
        "restarts": a.restarts,
        "iterations": a.iterations,
        "max_clients": a.max_clients,
    }
    for m in models:
        for pc in a.per_client.split(","):
            per = None if pc == "all" else int(pc)
            sec = per is not None and per <= a.secagg_max
            emit(
                "nodes",
                f"E=1 n<={pc}",
                m,
                run_cell(a.dataset, a.root, m, per_client=per, secagg=sec, **common),
            )
    for m in models:
        for e in a.steps.split(","):
            s = run_cell(
                a.dataset, a.root, m, per_client=a.steps_per_client, epochs=int(e), secagg=False, **common
            )
            emit("steps", f"E={e} n<={a.steps_per_client}", m, s)
    print(f"total {time.perf_counter() - t0:.1f} s", flush=True)
    if a.json:
        with open(a.json, "w") as fh:
            json.dump(out, fh, indent=1)


if __name__ == "__main__":
    main()
