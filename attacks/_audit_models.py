"""The audit's attacks on the released model: link stealing and membership inference from its posteriors."""

from __future__ import annotations

from typing import Any

import torch

from securefgl.attacks._audit_context import _Context
from securefgl.attacks._common import AttackOutcome, metric
from securefgl.errors import NothingToAttackError


def _posteriors(ctx: _Context) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """The released model's outputs on every client's graph, in global node order (the deployment).

    For ``gap`` the outputs come from GAP's own client half (:func:`_gap_outputs`); for the model-averaging
    algorithms from the run's architecture loaded with the released parameters.
    """
    fg = ctx.fg
    view = ctx.view("server") if "server" in ctx.cfg.views else ctx.view(ctx.cfg.views[0])
    params = view.public.released_model
    if not params:
        raise NothingToAttackError("the run released no model to query")
    if ctx.run_cfg.algorithm.name == "gap":
        outputs = _gap_outputs(ctx, params)
    else:
        outputs = _model_outputs(ctx, params)
    n = fg.num_nodes
    logits = torch.zeros(n, fg.num_classes, dtype=torch.float64)
    labels = torch.zeros(n, dtype=torch.long)
    train = torch.zeros(n, dtype=torch.bool)
    test = torch.zeros(n, dtype=torch.bool)
    owner = torch.full((n,), -1, dtype=torch.long)
    for i, c in enumerate(fg.clients):
        gid = c.global_id.cpu()
        logits[gid] = outputs[i]
        labels[gid] = c.y.cpu()
        train[gid] = c.train_mask.cpu()
        test[gid] = c.test_mask.cpu() | c.val_mask.cpu()
        owner[gid] = i
    return logits, labels, train, test, owner


def _model_outputs(ctx: _Context, params: dict[str, torch.Tensor]) -> list[torch.Tensor]:
    """Every client's logits from the run's architecture with the released parameters (FedAvg, FedProx)."""
    from securefgl.attacks.gradient_inversion import model_forward
    from securefgl.nn.registry import build_model

    fg = ctx.fg
    model = build_model(
        ctx.run_cfg.model, fg.num_features, fg.num_classes, generator=torch.Generator().manual_seed(0)
    )
    weights = {k: v.float() for k, v in params.items()}
    out = []
    for c in fg.clients:
        with torch.no_grad():
            logits = model_forward(model, weights, c.x.float().cpu(), c.edge_index.cpu())
        out.append(logits.to(torch.float64))
    return out


def _gap_outputs(ctx: _Context, params: dict[str, torch.Tensor]) -> list[torch.Tensor]:
    """Every client's logits from GAP's released model, computed by GAP's real client half.

    GAP's broadcast is a flat dict of its parts (``encoder.*``, ``head.*``, ``bases.*``, ``out.*``) that the
    run's architecture cannot load, and its predictions need each client's noisy aggregates
    :math:`X^{(0..K)}`, which never leave the client. So the algorithm is rebuilt from the run's public
    facts (:func:`~securefgl.engine.runner.make_setting`, the run's algorithm options) and every client
    runs ``init_client`` then ``evaluate`` on the released parameters, in the classifier phase (the encoder
    phase when ``hops == 0``: the DP-MLP).

    The aggregates are recomputed here, not the deployment's own: each client bounds its degrees (node level)
    and draws the aggregation noise afresh, from generators of the attack seed (degree sampling) and of GAP's
    ``noise`` option (``"os"``: fresh OS randomness), at the **same scale** as the deployment (the plan's
    ``aggregation_noise_std``, from the same public settings). The posteriors are therefore a statistically
    equivalent draw of the released model's outputs, not a bit-for-bit copy of what the clients computed.
    """
    from securefgl.algorithms.base import Client, RoundState
    from securefgl.algorithms.registry import create_algorithm
    from securefgl.engine.runner import make_setting

    fg, rc = ctx.fg, ctx.run_cfg
    cpu = torch.device("cpu")
    setting = make_setting(rc, fg, cpu)
    alg: Any = create_algorithm(rc.algorithm.name, setting, rc.algorithm.options)
    phase = "classifier" if alg.plan.hops > 0 else "encoder"
    broadcast = {k: v.detach().cpu() for k, v in params.items()}
    out = []
    for i, data in enumerate(fg.clients):
        client = Client(id=i, data=data.to(cpu), generator=torch.Generator().manual_seed(ctx.cfg.seed + i))
        alg.init_client(client)
        rs = RoundState(phase=phase, round=0, global_round=0, clients=(i,), broadcast=broadcast)
        with torch.no_grad():
            logits = alg.evaluate([client], broadcast, rs)[i]
        out.append(logits.detach().cpu().to(torch.float64))
    return out


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
