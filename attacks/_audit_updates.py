"""The audit's update attacks: gradient inversion and iDLG labels of the smallest clients' training nodes."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

import numpy as np
import torch

from securefgl.attacks._audit_config import AuditConfig
from securefgl.attacks._audit_context import _Context, _targets, _truth
from securefgl.attacks._common import AttackOutcome, metric
from securefgl.errors import NothingToAttackError


def _prior_guess(fg: Any, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The chance baseline: n copies of the population's mean feature vector, labels in proportion to the
    population's class distribution (what an adversary knows with no view at all)."""
    xs = torch.cat([c.x for c in fg.clients]).to(torch.float64)
    ys = torch.cat([c.y for c in fg.clients])
    counts = torch.bincount(ys, minlength=fg.num_classes).to(torch.float64)
    from securefgl.attacks._inversion_analytic import _round_counts

    k = _round_counts(counts / counts.sum() * n, n)
    labels = torch.repeat_interleave(torch.arange(fg.num_classes), k)
    return xs.mean(0, keepdim=True).repeat(n, 1), labels


def _observation(view: Any, cfg: AuditConfig) -> Any:
    rounds = [o for o in view.observations if o.key == "main" or len(view.observations) == 1]
    if not rounds:
        raise NothingToAttackError(f"view {view.name!r} observed no model-update aggregation")
    idx = min(cfg.attack_round, len(rounds) - 1)
    return rounds[idx]


def _update_attack(ctx: _Context, name: str, kind: str) -> AttackOutcome:
    """Gradient inversion / labels of the smallest clients, from what the view holds."""
    from securefgl.attacks.gradient_inversion import TrainingRecipe, updates_in_view
    from securefgl.nn.registry import build_model

    cfg, fg = ctx.cfg, ctx.fg
    view = ctx.view(kind)
    obs = _observation(view, cfg)
    ups = updates_in_view(view, obs)
    own = set(view.colluders)
    targets = _targets(fg, cfg.trials, exclude=own)
    if "individual" not in ups and "sum" not in ups:
        raise NothingToAttackError(
            f"view {view.name!r} holds neither an individual update nor a released sum"
        )
    model = build_model(
        ctx.run_cfg.model, fg.num_features, fg.num_classes, generator=torch.Generator().manual_seed(0)
    )
    recipe = TrainingRecipe.from_train_config(ctx.run_cfg.train, prox_mu=view.public.prox_mu)
    if kind == "collusion" and "sum" in ups and "individual" not in ups:
        ups = _collusion_residual(view, obs, ups)
    indiv = ups.get("individual", {})
    bar = ctx.bars.task(f"{ctx.protocol}/{kind}: {name}", len(targets))
    vals: dict[str, list[float]] = {}
    pub: dict[str, list[float]] = {}
    chance: dict[str, list[float]] = {}
    per: list[dict[str, Any]] = []
    kinds = {u.source for u in indiv.values()}
    for i, t in enumerate(targets):
        per.append(_update_target(ctx, name, kind, view, ups, model, recipe, i, t, vals, pub, chance))
        bar(i + 1, len(targets))
    if not vals and not pub:
        raise NothingToAttackError(f"view {view.name!r} holds no update of the targets")
    metrics = {}
    main = vals if vals else pub
    for k, v in main.items():
        base = {"chance": float(np.mean(chance[k]))} if k in chance else {}
        if vals and k in pub:
            base["public"] = float(np.mean(pub[k]))
        metrics[k] = metric(v, base, higher_is_worse=k != "mse")
    if vals:
        what = (
            "the target's individual upload in the clear"
            if kinds == {"individual"}
            else "the target's masked vector (decoded as if it were an encoding)"
        )
        reason = f"attack on {what}; 'public' = the same attack on the released sum"
    else:
        why = "no individual upload (ciphertexts or a client's view)"
        reason = f"{why}: figures are the attack on the released sum (the public information) itself"
    return AttackOutcome(
        name,
        ctx.protocol,
        kind,
        "ok",
        reason,
        metrics,
        {
            "view": view.name,
            "targets": targets,
            "per_target": per,
            "round": obs.round_index,
            "recipe": asdict(recipe),
            "sources": sorted(kinds) or ["sum"],
        },
    )


def _update_target(
    ctx: _Context,
    name: str,
    kind: str,
    view: Any,
    ups: dict[str, Any],
    model: Any,
    recipe: Any,
    i: int,
    t: int,
    vals: dict[str, list[float]],
    pub: dict[str, list[float]],
    chance: dict[str, list[float]],
) -> dict[str, Any]:
    """Attack target ``t`` (the ``i``-th) with each update the view holds, and score its chance baseline.

    The scores are appended to ``vals`` (the view's individual update), ``pub`` (the released sum) and
    ``chance``; returns the target's row of the report.
    """
    from securefgl.attacks.gradient_inversion import (
        label_accuracy,
        recover_label_counts,
        score_reconstruction,
    )

    cfg, fg = ctx.cfg, ctx.fg
    indiv = ups.get("individual", {})
    x_true, y_true = _truth(fg, t)
    n = int(y_true.numel())
    gx, gy = _prior_guess(fg, n)
    if name == "label":
        ch = {
            "label_accuracy": label_accuracy(
                torch.bincount(gy, minlength=fg.num_classes), y_true, fg.num_classes
            )
        }
    else:
        ch = score_reconstruction(gx, gy, x_true, y_true, num_classes=fg.num_classes)
    for k, v in ch.items():
        chance.setdefault(k, []).append(v)
    graph = view.graph.get(t) if cfg.graph_known else None
    row: dict[str, Any] = {"target": t, "train_nodes": n}
    for source, up in (("view", indiv.get(t)), ("public", ups.get("sum"))):
        if up is None:
            continue
        if name == "label":
            nn_ = n if up.source != "sum" else n  # the adversary scales the aggregate to the target's size
            counts = recover_label_counts(up, model, recipe, fg.num_classes, num_nodes=nn_)
            sc = {"label_accuracy": label_accuracy(counts, y_true, fg.num_classes)}
        else:
            sc = _invert_target(ctx, kind, source, up, model, recipe, i, t, graph, x_true, y_true)
        for k, v in sc.items():
            (vals if source == "view" else pub).setdefault(k, []).append(v)
        row[source] = sc
    return row


def _invert_target(
    ctx: _Context,
    kind: str,
    source: str,
    up: Any,
    model: Any,
    recipe: Any,
    i: int,
    t: int,
    graph: Any,
    x_true: torch.Tensor,
    y_true: torch.Tensor,
) -> dict[str, float]:
    """Reconstruct target ``t``'s training nodes from ``up`` and score them (a figure for the first few)."""
    from securefgl.attacks.gradient_inversion import invert_update, score_reconstruction

    cfg, fg = ctx.cfg, ctx.fg
    n = int(y_true.numel())
    rec = invert_update(
        up,
        model,
        recipe,
        num_features=fg.num_features,
        num_classes=fg.num_classes,
        num_nodes=n if up.source != "individual" else None,
        graph=graph,
        config=cfg.inversion,
        generator=torch.Generator().manual_seed(cfg.seed + i),
        device=ctx.device,
    )
    extra = {}
    if cfg.model == "sgc":
        extra["propagated"] = _propagated(model, fg, t)
    sc = score_reconstruction(rec.x, rec.y, x_true, y_true, num_classes=fg.num_classes, extra_targets=extra)
    if source == "view" and len(ctx.figures["reconstructions"]) < 6:
        ctx.figures["reconstructions"][f"{ctx.protocol}/{kind}/client{t}"] = (
            x_true[:4],
            rec.x[:4],
        )
    return sc


def _collusion_residual(view: Any, obs: Any, ups: dict[str, Any]) -> dict[str, Any]:
    """Server + colluders: subtract the colluders' own uploads from the sum (the honest clients' sum)."""
    from securefgl.attacks.gradient_inversion import update_from_upload

    total = view.released_sum(obs)
    rest = {k: total[k].to(torch.float64).clone() for k in total}
    for c, vals in obs.own_inputs.items():
        if c in obs.survivors:
            for k in rest:
                rest[k] = rest[k] - vals[k].to(torch.float64).reshape(rest[k].shape)
    honest = [c for c in obs.survivors if c not in obs.own_inputs]
    up = update_from_upload(rest, obs.broadcast, source="sum", contributors=len(honest))
    out = dict(ups)
    out["sum"] = up
    if len(honest) == 1:
        out["individual"] = {honest[0]: update_from_upload(rest, obs.broadcast, source="individual")}
    return out


def _propagated(model: Any, fg: Any, client: int) -> torch.Tensor:
    c = fg.clients[client]
    with torch.no_grad():
        z = model.propagate(c.x.cpu(), c.edge_index.cpu())
    return z[c.train_mask.cpu()]
