"""Time per attack on Cora (this machine's CPU, or a GPU with --device cuda).

One FedAvg round per protocol is captured once; then each attack is timed on the server's view:

* gradient inversion of one small client's update (SGC and MLP, graph unknown), and of the released sum;
* iDLG label counts;
* link stealing (Attack-0, 8 distances, 2 x 2000 pairs) and membership inference on the released model;
* differencing of O-pFGL's class statistics (two SecAgg releases), with and without ReleaseGuard;
* the secure-aggregation attacks (model inconsistency, minimum cohort, disaggregation, the malicious-model
  imprint attack with its 64 crafted rounds) at the protocol level.

    python benchmarks/attacks.py [--device cuda] [--restarts 4] [--iterations 100]

Prints one line per attack: wall seconds (median of ``--repeat`` runs) and what it recovered.

``--malicious OUT`` runs the malicious-model study instead (:mod:`securefgl.attacks.imprint`): imprint bins
and trap weights on Cora and CiteSeer (10 clients, MLP and GCN, FedAvg with the server's recipe: SGD, one
local epoch, dropout 0), the secure sum computed by the real protocols, against plaintext, secagg and
secagg+dp (epsilon 8 and 1 over the crafted rounds), with and without the client-side checks; then the
recovery against the number of crafted rounds and the local recipe. Writes ``imprint.json`` and figures::

    python benchmarks/attacks.py --malicious /tmp/imprint [--imprint-rounds 64] [--datasets Cora,CiteSeer]
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
    p.add_argument("--malicious", default=None, help="run the malicious-model study, write it here")
    p.add_argument("--imprint-rounds", type=int, default=64)
    p.add_argument("--datasets", default="Cora,CiteSeer")
    p.add_argument("--models", default="mlp,gcn")
    p.add_argument("--root", default=None, help="data root (default: the run config's)")
    a = p.parse_args()
    if a.malicious is not None:
        malicious_study(a)
        return

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

    for attacks in (
        ("differencing",),
        ("model-inconsistency",),
        ("min-cohort", "disaggregation"),
        ("malicious-model",),
    ):
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


# ----------------------------------------------------------------------------------------------------
# the malicious-model study
# ----------------------------------------------------------------------------------------------------


def _imprint_job(dataset: str, model_name: str, root: str | None, **train: Any) -> tuple[Any, Any, int]:
    """The job a malicious server runs: FedAvg, 10 clients, its recipe; ``(setup, fg, target)``."""
    from securefgl.api import load_federated_graph
    from securefgl.attacks._imprint_run import malicious_setup
    from securefgl.config import RunConfig

    recipe = {"optimizer": "sgd", "local_epochs": 1, "lr": 0.1, **train}
    ds: dict[str, Any] = {"name": dataset} if root is None else {"name": dataset, "root": root}
    protocol = "secagg+dp" if recipe.pop("dp", False) else "secagg"
    cfg = RunConfig.from_mapping(
        {
            "dataset": ds,
            "partition": {"clients": 10},
            "algorithm": {"name": "fedavg"},
            "model": {"name": model_name, "dropout": 0.0},
            "train": recipe,
            "protocol": {"name": protocol},
            "output": {"save": False},
            "seeds": [0],
        }
    )
    fg = load_federated_graph(cfg)
    setup = malicious_setup(cfg, fg)
    target = min(
        (int(c.train_mask.sum()), i) for i, c in enumerate(fg.clients) if int(c.train_mask.sum()) > 0
    )[1]
    return setup, fg, target


def malicious_study(a: argparse.Namespace) -> None:
    """Run the study on every (dataset, model) and write ``imprint.json`` and the figures to ``a.malicious``."""
    import json
    from pathlib import Path

    from securefgl.attacks._imprint_run import imprint_study, run_imprint
    from securefgl.attacks.imprint import ImprintConfig, imprint_layout

    torch.set_num_threads(max(1, torch.get_num_threads()))
    out = Path(a.malicious)
    out.mkdir(parents=True, exist_ok=True)
    report: dict[str, Any] = {"rounds": a.imprint_rounds, "jobs": {}}
    for dataset in a.datasets.split(","):
        for model_name in a.models.split(","):
            key = f"{dataset}/{model_name}"
            setup, fg, target = _imprint_job(dataset, model_name, a.root)
            t0 = time.perf_counter()
            dp_setup, _, _ = _imprint_job(dataset, model_name, a.root, dp=True)
            rows, recon = imprint_study(setup, target, rounds=a.imprint_rounds, dp_setup=dp_setup)
            job: dict[str, Any] = {"target": target, "target_nodes": int(setup.truth[target].shape[0])}
            job["total_train_nodes"] = int(sum(int(t.shape[0]) for t in setup.truth.values()))
            job["grid"], job["grid_seconds"] = rows, time.perf_counter() - t0
            for r in rows:
                print(
                    f"{key:14s} {r['protocol']:10s} {r['attack']:7s} eps={r['epsilon']!s:5s} "
                    f"defence={r['defence']:11s} rounds={r['rounds_released']:3d} "
                    f"exact target {r['exact_target']:.3f} all {r['exact_all']:.3f} "
                    f"cos {r['best_cosine_target']:.3f} certified {r['certified']:4d} {r['seconds']:.1f}s "
                    f"{r['refused'][:70]}"
                )
            sweep = []
            for rounds in sorted({1, 4, 16, a.imprint_rounds}):
                res = run_imprint(setup, "secagg", target, config=ImprintConfig(rounds=rounds))
                sweep.append(
                    {
                        "rounds": rounds,
                        "bins": rounds * (imprint_layout(setup.model).hidden - 1),
                        "exact_target": res.exact_target,
                        "exact_all": res.exact_all,
                        "seconds": res.seconds,
                    }
                )
            job["rounds_sweep"] = sweep
            recipes = []
            for label, tr in (
                ("sgd E=1", {}),
                ("sgd E=3", {"local_epochs": 3}),
                ("adam E=1", {"optimizer": "adam"}),
            ):
                s2, _, _ = _imprint_job(dataset, model_name, a.root, **tr)
                res = run_imprint(s2, "secagg", target, config=ImprintConfig(rounds=a.imprint_rounds))
                recipes.append(
                    {"recipe": label, "exact_target": res.exact_target, "exact_all": res.exact_all}
                )
            job["recipes"] = recipes
            print(f"{key}: rounds sweep {sweep}\n{key}: recipes {recipes}")
            report["jobs"][key] = job
            _recon_figure(out / f"imprint_{dataset}_{model_name}.png", recon, key)
    (out / "imprint.json").write_text(json.dumps(report, indent=1, default=float))
    _study_figures(out, report)
    print(f"wrote {out}/imprint.json and figures")


def _recon_figure(path: Any, recon: dict[str, torch.Tensor], title: str, nodes: int = 6) -> None:
    """True first-layer inputs of the target's nodes next to the best recovered rows (support columns)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    truth = recon["truth"][:nodes]
    cols = torch.nonzero(truth.abs().sum(0) > 0).flatten()[:80]
    panels = [("true", truth)] + [(k, v[:nodes]) for k, v in recon.items() if k != "truth"]
    fig, axes = plt.subplots(len(panels), 1, figsize=(8, 1.1 * len(panels) + 0.6), squeeze=False)
    for ax, (name, rows) in zip(axes[:, 0], panels, strict=True):
        r = rows[:, cols].double()
        r = r / r.abs().amax(dim=1, keepdim=True).clamp(min=1e-30)
        ax.imshow(r.numpy(), aspect="auto", cmap="gray_r", vmin=0, vmax=1, interpolation="nearest")
        ax.set_ylabel(name, rotation=0, ha="right", fontsize=7)
        ax.set_xticks([])
        ax.set_yticks([])
    axes[0, 0].set_title(f"{title}: target's training nodes (rows) on their non-zero features", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _study_figures(out: Any, report: dict[str, Any]) -> None:
    """Bars per protocol (beside chance = 0), recovery against epsilon, and against the crafted rounds."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    jobs = report["jobs"]
    fig, axes = plt.subplots(1, 3, figsize=(15, 4))
    labels = [
        "plaintext",
        "secagg",
        "secagg+dp eps=8",
        "secagg+dp eps=1",
        "secagg + sanity test",
        "secagg + update rule",
    ]
    width = 0.8 / max(1, len(jobs))
    for j, (key, job) in enumerate(jobs.items()):
        g = [r for r in job["grid"] if r["attack"] == "bins"]
        pick = {
            "plaintext": [r for r in g if r["protocol"] == "plaintext" and r["defence"] == "none"],
            "secagg": [r for r in g if r["protocol"] == "secagg" and r["defence"] == "none"],
            "secagg+dp eps=8": [r for r in g if r["epsilon"] == 8.0],
            "secagg+dp eps=1": [r for r in g if r["epsilon"] == 1.0],
            "secagg + sanity test": [r for r in g if r["defence"] == "sanity"],
            "secagg + update rule": [r for r in g if r["defence"] == "update-rule"],
        }
        vals = [pick[k][0]["exact_target"] if pick[k] else float("nan") for k in labels]
        axes[0].bar([i + j * width for i in range(len(labels))], vals, width, label=key)
        eps = [(r["epsilon"], r["exact_target"]) for r in g if r["epsilon"] is not None]
        sec = pick["secagg"][0]["exact_target"] if pick["secagg"] else float("nan")
        xs = [e for e, _ in sorted(eps)] + [100.0]
        axes[1].plot(xs, [v for _, v in sorted(eps)] + [sec], "o-", label=key)
        sw = job["rounds_sweep"]
        axes[2].plot([s["bins"] for s in sw], [s["exact_target"] for s in sw], "o-", label=key)
    axes[0].axhline(0.0, color="k", lw=0.8, ls="--", label="chance (0)")
    axes[0].set_xticks([i + 0.4 - width / 2 for i in range(len(labels))], labels, rotation=20, fontsize=7)
    axes[0].set_ylabel("target's training nodes recovered exactly (cos > 0.99)")
    axes[0].set_title(f"imprint bins, {report['rounds']} crafted rounds, 10 clients")
    axes[1].set_xscale("log")
    axes[1].set_xlabel("epsilon over the crafted rounds (100 = no DP, secagg)")
    axes[1].set_title("secagg+dp: recovery against epsilon")
    axes[2].set_xscale("log")
    axes[2].set_xlabel("bins = crafted rounds x (hidden - 1)")
    axes[2].set_title("secagg: recovery against bins")
    for ax in axes:
        ax.set_ylim(-0.02, 1.02)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out / "imprint_summary.png", dpi=120)
    plt.close(fig)


if __name__ == "__main__":
    main()
