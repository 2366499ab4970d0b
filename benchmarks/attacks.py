"""Time per attack on Cora (this machine's CPU, or a GPU with --device cuda).

One FedAvg round per protocol is captured once; then each attack is timed on the server's view:

* gradient inversion of one small client's update (SGC and MLP, graph unknown), and of the released sum;
* iDLG label counts;
* link stealing (Attack-0, 8 distances, 2 x 2000 pairs) and membership inference on the released model;
* differencing of O-pFGL's class statistics (two SecAgg releases), with and without ReleaseGuard;
* the secure-aggregation attacks (model inconsistency, minimum cohort, disaggregation) at the protocol level.

    python benchmarks/attacks.py [--device cuda] [--restarts 4] [--iterations 100]

Prints one line per attack: wall seconds (median of ``--repeat`` runs) and what it recovered.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import time
from collections.abc import Callable
from typing import Any

import torch


def _time(fn: Callable[[], Any], repeat: int) -> tuple[float, Any]:
    out, ts = None, []
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts), out


def main() -> None:
    p = argparse.ArgumentParser(description="time per attack on Cora")
    p.add_argument("--device", default="cpu")
    p.add_argument("--repeat", type=int, default=1)
    p.add_argument("--restarts", type=int, default=4)
    p.add_argument("--iterations", type=int, default=100)
    a = p.parse_args()

    from securefgl.attacks import InversionConfig, balanced_pairs, link_stealing, membership_inference
    from securefgl.attacks.gradient_inversion import model_forward
    from securefgl.attacks.link_stealing import DISTANCES

    dev = torch.device(a.device)
    name = (
        torch.cuda.get_device_name(dev) if dev.type == "cuda" else platform.processor() or platform.machine()
    )
    print(f"device: {a.device} ({name}); torch threads {torch.get_num_threads()}")
    inv = InversionConfig(restarts=a.restarts, iterations=a.iterations, prior="binary")
    released = {}
    for model_name in ("sgc", "mlp"):
        released[model_name] = _update_attacks(model_name, inv, dev, a.repeat)
    fg, model, run = released["sgc"]

    # model attacks on the released model (SGC after one round)
    logits = torch.zeros(fg.num_nodes, fg.num_classes)
    labels = torch.zeros(fg.num_nodes, dtype=torch.long)
    train = torch.zeros(fg.num_nodes, dtype=torch.bool)
    test = torch.zeros(fg.num_nodes, dtype=torch.bool)
    edges = []
    for cl in fg.clients:
        with torch.no_grad():
            logits[cl.global_id] = model_forward(model, run.final_broadcast, cl.x, cl.edge_index)
        labels[cl.global_id] = cl.y
        train[cl.global_id] = cl.train_mask
        test[cl.global_id] = cl.test_mask
        edges.append(cl.global_id[cl.edge_index])
    post = torch.softmax(logits, -1)
    ei = torch.cat(edges, 1)

    def steal():
        pairs, y = balanced_pairs(
            ei, fg.num_nodes, generator=torch.Generator().manual_seed(0), max_pairs=2000
        )
        return link_stealing(post, pairs, y, metrics=DISTANCES)

    sec, res = _time(steal, a.repeat)
    print(
        f"link stealing (8 distances, {2 * 2000} pairs): {sec:.2f} s  AUC(correlation) {res['correlation']['auc']:.3f}"
    )
    sec, res = _time(lambda: membership_inference(logits, labels, train, test), a.repeat)
    print(
        f"membership inference ({int(train.sum())} members, {int(test.sum())} non-members): {sec * 1000:.1f} ms  "
        f"loss AUC {res['loss']['auc']:.3f}"
    )

    # statistics and protocol attacks through the audit machinery (SecAgg)
    from securefgl.attacks import AuditConfig, audit

    for attacks in (("differencing",), ("model-inconsistency",), ("min-cohort", "disaggregation")):
        algo = "opfgl" if attacks == ("differencing",) else "fedavg"
        model_name = "gcn" if algo == "opfgl" else "mlp"
        t0 = time.perf_counter()
        r = audit(
            AuditConfig(
                algorithm=algo,
                model=model_name,
                dataset="Cora",
                clients=10,
                attacks=attacks,
                protocols=("secagg",),
                trials=1,
                run={"partition": {"split": "public"}},
            )
        )
        sec = time.perf_counter() - t0
        figs = "; ".join(
            f"{o.attack}: "
            + ", ".join(
                f"{k} {m.mean:.3g}" + "".join(f" ({bk} {bv:.3g})" for bk, bv in m.baselines.items())
                for k, m in o.metrics.items()
            )
            for o in r.outcomes
        )
        print(f"{'+'.join(attacks)} (SecAgg, 1 target): {sec:.2f} s  {figs}")


def _update_attacks(model_name: str, inv: Any, dev: torch.device, repeat: int) -> tuple[Any, Any, Any]:
    """Capture one FedAvg round on Cora and time the update attacks on the smallest client."""
    from securefgl.api import load_federated_graph
    from securefgl.attacks import (
        PublicInfo,
        TrainingRecipe,
        invert_update,
        recover_label_counts,
        score_reconstruction,
        server_view,
    )
    from securefgl.attacks._capture import capture_run
    from securefgl.attacks.gradient_inversion import updates_in_view
    from securefgl.config import RunConfig
    from securefgl.nn.registry import build_model

    cfg = RunConfig.from_mapping(
        {
            "dataset": {"name": "Cora"},
            "partition": {"method": "louvain", "clients": 10, "split": "public"},
            "protocol": {"name": "plaintext"},
            "model": {"name": model_name, "dropout": 0.0},
            "train": {"rounds": 1, "local_epochs": 1, "optimizer": "sgd", "lr": 0.2},
            "output": {"save": False},
            "device": "cpu",
        }
    )
    fg = load_federated_graph(cfg)
    t_run, run = _time(lambda: capture_run(cfg, fg, 0), 1)
    print(f"[{model_name}] capture of one FedAvg round (10 clients, plaintext): {t_run:.2f} s")
    pub = PublicInfo("fedavg", fg.num_features, fg.num_classes, 10, cfg.model, cfg.train, run.final_broadcast)
    view = server_view(run.records, pub)
    ups = updates_in_view(view, view.observations[0])
    model = build_model(cfg.model, fg.num_features, fg.num_classes)
    recipe = TrainingRecipe.from_train_config(cfg.train)
    t = min((int(c.train_mask.sum()), i) for i, c in enumerate(fg.clients) if int(c.train_mask.sum()) > 0)[1]
    c = fg.clients[t]
    xt, yt = c.x[c.train_mask], c.y[c.train_mask]
    for source in ("individual", "sum"):
        up = ups["individual"][t] if source == "individual" else ups["sum"]
        n = None if source == "individual" else len(yt)
        sec, rec = _time(
            lambda up=up, n=n: invert_update(
                up,
                model,
                recipe,
                num_features=fg.num_features,
                num_classes=fg.num_classes,
                num_nodes=n,
                config=inv,
                device=dev,
            ),
            repeat,
        )
        sc = score_reconstruction(rec.x, rec.y, xt, yt, num_classes=fg.num_classes)
        print(
            f"[{model_name}] gradient inversion ({source}, client {t}, n={len(yt)}): {sec:.2f} s  "
            f"label acc {sc['label_accuracy']:.3f}  feature cos {sc['feature_cosine']:.3f}  "
            f"F1 {sc.get('feature_f1', float('nan')):.3f}"
        )
    sec, _ = _time(
        lambda: recover_label_counts(ups["individual"][t], model, recipe, fg.num_classes, num_nodes=len(yt)),
        repeat,
    )
    print(f"[{model_name}] iDLG label counts: {sec * 1000:.1f} ms")
    return fg, model, run


if __name__ == "__main__":
    main()
