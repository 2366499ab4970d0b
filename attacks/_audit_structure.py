"""The audit's structure attack: a curious FedStruct client infers other clients' edges from its setup rows."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from securefgl.attacks._audit_context import _Context
from securefgl.attacks._common import AttackOutcome, metric
from securefgl.errors import AttackNotApplicableError, NothingToAttackError


def _structure_attack(ctx: _Context, name: str, kind: str) -> AttackOutcome:
    """A curious FedStruct client rebuilds its rows from the setup sums designated to it and infers edges."""
    from securefgl.algorithms.fedstruct._setup import StructureView
    from securefgl.attacks.structure_inference import external_edge_inference

    if kind != "client":
        raise AttackNotApplicableError(
            f"external-edge inference models a curious client reading the setup sums designated to it "
            f"(view 'client'); the {kind!r} view is not modelled"
        )
    cfg, fg = ctx.cfg, ctx.fg
    view = ctx.view(kind)
    t = view.colluders[0]
    sums = [o.released["B"] for o in view.observations if o.phase == "setup" and o.released is not None]
    opts = ctx.run.algorithm.options
    hops = int(opts.num_hops_s)
    if len(sums) != hops - 1:
        raise NothingToAttackError(
            f"view {view.name!r} received {len(sums)} setup sums, expected num_hops_s - 1 = {hops - 1}"
        )
    betas = list(opts.beta) if opts.beta is not None else [0.0] * (hops - 1) + [1.0]
    sv = StructureView.from_data(t, fg.clients[t])
    rows = betas[0] * sv.first_power()
    for b, s in zip(betas[1:], sums, strict=True):
        rows = rows + b * s.to(torch.float64).cpu() / sv.tilde_deg[:, None]
    own = sv.gid[sv.order]  # the setup's rows are in ascending global id
    known = torch.cat([sv.gid[sv.edge_index], torch.stack([sv.gid[sv.cross_src], sv.cross_dst])], 1)
    truth = fg.global_data().edge_index
    bar = ctx.bars.task(f"{ctx.protocol}/{kind}: {name}", cfg.trials)
    vals: dict[str, list[float]] = {}
    per: list[dict[str, Any]] = []
    roc_fig = None
    for i in range(cfg.trials):
        g = torch.Generator().manual_seed(cfg.seed * 1000 + i)
        res = external_edge_inference(rows, own, known, truth, fg.num_nodes, generator=g, beta=betas)
        for k in ("auc", "precision@k"):
            vals.setdefault(k, []).append(res[k])
            vals.setdefault(f"public_{k}", []).append(res["public"][k])
            vals.setdefault(f"chance_{k}", []).append(res["chance"][k])
        per.append({k: res[k] for k in ("k", "pairs", "external_neighbours", "informative_pairs")})
        if roc_fig is None:
            roc_fig = (res["fpr"], res["tpr"])
        bar(i + 1, cfg.trials)
    metrics = {
        k: metric(
            vals[k],
            {"chance": float(np.mean(vals[f"chance_{k}"])), "public": float(np.mean(vals[f"public_{k}"]))},
        )
        for k in ("auc", "precision@k")
    }
    ctx.figures["roc"][f"{name}/{ctx.protocol}"] = roc_fig
    reason = (
        f"client {t} rebuilds its rows of A_bar (L_s={hops}) from the setup sums designated to "
        "it and scores pairs (external neighbour, outside node) against as many non-edges; 'public' = the "
        "same score on the walks it computes from its own edges alone"
    )
    return AttackOutcome(name, ctx.protocol, kind, "ok", reason, metrics, {"view": view.name, "trials": per})
