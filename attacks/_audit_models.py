"""The audit's attacks on the released model: link stealing and membership inference from its posteriors."""

from __future__ import annotations

from typing import Any

import torch

from securefgl.attacks._audit_context import _Context
from securefgl.attacks._common import AttackOutcome, metric
from securefgl.errors import NothingToAttackError


def _posteriors(ctx: _Context) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """The released model's outputs on every client's graph, in global node order (the deployment)."""
    from securefgl.attacks.gradient_inversion import model_forward
    from securefgl.nn.registry import build_model

    fg = ctx.fg
    view = ctx.view("server") if "server" in ctx.cfg.views else ctx.view(ctx.cfg.views[0])
    params = view.public.released_model
    if not params:
        raise NothingToAttackError("the run released no model to query")
    model = build_model(
        ctx.run_cfg.model, fg.num_features, fg.num_classes, generator=torch.Generator().manual_seed(0)
    )
    n = fg.num_nodes
    logits = torch.zeros(n, fg.num_classes, dtype=torch.float64)
    labels = torch.zeros(n, dtype=torch.long)
    train = torch.zeros(n, dtype=torch.bool)
    test = torch.zeros(n, dtype=torch.bool)
    owner = torch.full((n,), -1, dtype=torch.long)
    for i, c in enumerate(fg.clients):
        gid = c.global_id.cpu()
        with torch.no_grad():
            out = model_forward(
                model, {k: v.float() for k, v in params.items()}, c.x.float().cpu(), c.edge_index.cpu()
            )
        logits[gid] = out.to(torch.float64)
        labels[gid] = c.y.cpu()
        train[gid] = c.train_mask.cpu()
        test[gid] = c.test_mask.cpu() | c.val_mask.cpu()
        owner[gid] = i
    return logits, labels, train, test, owner


def _model_attack(ctx: _Context, name: str, kind: str) -> AttackOutcome:
    from securefgl.attacks.link_stealing import DISTANCES, balanced_pairs, link_stealing
    from securefgl.attacks.membership import membership_inference

    cfg, fg = ctx.cfg, ctx.fg
    view = ctx.view(kind)
    if not view.public.released_model:
        raise NothingToAttackError(f"view {view.name!r} holds no released model")
    logits, labels, train, test, owner = _posteriors(ctx)
    post = torch.softmax(logits, -1)
    bar = ctx.bars.task(f"{ctx.protocol}/{kind}: {name}", cfg.trials)
    per: list[dict[str, Any]] = []
    vals: dict[str, list[float]] = {}
    roc_fig = None
    if name == "link-stealing":
        local = []
        for c in fg.clients:
            local.append(c.global_id.cpu()[c.edge_index.cpu()])
        edges = torch.cat(local, 1)
        for t in range(cfg.trials):
            g = torch.Generator().manual_seed(cfg.seed * 1000 + t)
            pairs, y = balanced_pairs(edges, fg.num_nodes, generator=g, max_pairs=2000, groups=owner)
            res = link_stealing(post, pairs, y, metrics=DISTANCES)
            best = res["correlation"]
            vals.setdefault("auc", []).append(best["auc"])
            vals.setdefault("precision@k", []).append(best["precision@k"])
            vals.setdefault("best_distance_auc", []).append(res[res["best"]]["auc"])
            per.append(
                {
                    "trial": t,
                    "k": res["k"],
                    "best": res["best"],
                    **{d: {"auc": res[d]["auc"], "precision@k": res[d]["precision@k"]} for d in DISTANCES},
                }
            )
            if roc_fig is None:
                roc_fig = (best["fpr"], best["tpr"])
            bar(t + 1, cfg.trials)
        metrics = {
            "auc": metric(vals["auc"], {"chance": 0.5}),
            "precision@k": metric(vals["precision@k"], {"chance": 0.5}),
            "best_distance_auc": metric(vals["best_distance_auc"], {"chance": 0.5}),
        }
        reason = (
            "Attack-0 (correlation distance) on balanced pairs of the clients' edges vs sampled non-edges of "
            "the same clients, posteriors of the released model; best_distance_auc picks the best of 8 "
            "distances after the fact (optimistic)"
        )
    else:
        members = train
        pool = torch.nonzero(test).flatten()
        for t in range(cfg.trials):
            g = torch.Generator().manual_seed(cfg.seed * 1000 + t)
            k = min(int(members.sum()), pool.numel())
            nm = torch.zeros_like(test)
            nm[pool[torch.randperm(pool.numel(), generator=g)[:k]]] = True
            mem = torch.zeros_like(train)
            idx = torch.nonzero(members).flatten()
            mem[idx[torch.randperm(idx.numel(), generator=g)[:k]]] = True
            res = membership_inference(logits, labels, mem, nm)
            for s in ("loss", "confidence"):
                vals.setdefault(f"{s}_auc", []).append(res[s]["auc"])
                vals.setdefault(f"{s}_tpr@1%fpr", []).append(res[s]["tpr@0.01"])
                vals.setdefault(f"{s}_tpr@0.1%fpr", []).append(res[s]["tpr@0.001"])
            per.append({"trial": t, "members": res["members"], "non_members": res["non_members"]})
            if roc_fig is None:
                roc_fig = (res["loss"]["fpr"], res["loss"]["tpr"])
            bar(t + 1, cfg.trials)
        metrics = {}
        for k, v in vals.items():
            ch = 0.5 if k.endswith("auc") else (0.01 if "@1%" in k else 0.001)
            metrics[k] = metric(v, {"chance": ch})
        reason = (
            "members: training nodes; non-members: an equal number of validation/test nodes; the released "
            "model applied to each client's graph"
        )
    if roc_fig is not None:
        ctx.figures["roc"][f"{name}/{ctx.protocol}"] = roc_fig
    return AttackOutcome(name, ctx.protocol, kind, "ok", reason, metrics, {"view": view.name, "trials": per})
