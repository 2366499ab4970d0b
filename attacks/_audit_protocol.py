"""The audit's attacks on secure aggregation itself, by the server: model inconsistency, a cohort of one,
disaggregation over sums with varying participants."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import torch

from securefgl.attacks._audit_context import _Context, _targets, _Upload, _upload_setup
from securefgl.attacks._common import AttackOutcome, metric
from securefgl.errors import AttackNotApplicableError


def _protocol_attack(ctx: _Context, name: str, kind: str) -> AttackOutcome:
    """The server attacks the aggregation itself: a crafted model, a cohort of one, disaggregation."""
    if kind != "server":
        raise AttackNotApplicableError(f"{name} is an attack by the server; view {kind!r} does not run it")
    targets = _targets(ctx.fg, ctx.cfg.trials)
    if name == "malicious-model":
        from securefgl.attacks._audit_malicious import _malicious_attack

        return _malicious_attack(ctx, targets, ctx.bars.task(f"{ctx.protocol}: {name}", 3))
    if name == "analytic-inversion":
        return _analytic_attack(ctx, targets)
    upload = _upload_setup(ctx)
    per: list[dict[str, Any]] = []
    bar = ctx.bars.task(f"{ctx.protocol}: {name}", len(targets))
    if name == "model-inconsistency":
        metrics, reason = _inconsistency(ctx, upload, targets, bar, per)
    elif name == "min-cohort":
        metrics, reason = _min_cohort(ctx, upload, targets, bar, per)
    else:
        metrics, reason = _disaggregation(ctx, upload, targets, bar, per)
    return AttackOutcome(name, ctx.protocol, "server", "ok", reason, metrics, {"per_target": per})


def _inconsistency(
    ctx: _Context, up: _Upload, targets: list[int], bar: Callable[[int, int], None], per: list[dict[str, Any]]
) -> tuple[dict[str, Any], str]:
    """Pasquini et al.: show the target the real model and the others a crafted one, with and without the
    session binding the model the clients received."""
    from securefgl.algorithms.base import Client, RoundState
    from securefgl.attacks.aggregation_attacks import model_inconsistency_attack
    from securefgl.nn.registry import build_model
    from securefgl.protocols.encoding import SumSchema
    from securefgl.protocols.registry import get_protocol

    cfg, fg, alg = ctx.cfg, ctx.fg, up.alg
    opts = dict(ctx.run_cfg.protocol.options)
    clients = sorted(up.contribs)
    vals: dict[str, list[float]] = {}
    base: dict[str, list[float]] = {}
    model = build_model(ctx.run_cfg.model, fg.num_features, fg.num_classes)
    ws: dict[str, Any] = {"generator": torch.Generator().manual_seed(cfg.seed)}
    cl = [
        Client(i, d.to(ctx.device), torch.Generator().manual_seed(i), workspace=ws)
        for i, d in enumerate(fg.clients)
    ]
    for c in cl:
        alg.init_client(c)

    def train(ids: Sequence[int], bc: Mapping[str, torch.Tensor]) -> dict[int, Any]:
        if not ids:
            return {}
        rs = RoundState("train", 0, 0, tuple(ids), dict(bc), 1)
        out = alg.client_steps([cl[i] for i in ids], rs)
        return {k: {n: torch.as_tensor(x).detach().cpu() for n, x in v.items()} for k, v in out.items()}

    def schema_for(bc: Mapping[str, torch.Tensor]) -> SumSchema:
        return alg.schema(RoundState("train", 0, 0, tuple(clients), dict(bc), 1))

    for i, t in enumerate(targets):
        row = {"target": t}
        for bind in (True, False):
            r = model_inconsistency_attack(
                get_protocol(ctx.protocol, **opts),
                schema_for,
                train,
                model,
                up.broadcast,
                clients,
                t,
                bind_context=bind,
            )
            key = "bound" if bind else "unbound"
            row[key] = {
                "refused": r.refused,
                "target_in_sum": r.target_in_sum,
                "isolation_error": r.isolation_error,
                "baseline_error": r.baseline_error,
            }
            if bind:
                vals.setdefault("target_isolated", []).append(
                    1.0 if (r.target_in_sum and r.isolation_error < 1e-3) else 0.0
                )
                vals.setdefault("caught", []).append(0.0 if r.target_in_sum else 1.0)
            else:
                base.setdefault("target_isolated", []).append(
                    1.0 if (r.target_in_sum and r.isolation_error < 1e-3) else 0.0
                )
        per.append(row)
        bar(i + 1, len(targets))
    metrics = {
        k: metric(v, {"without_binding": float(np.mean(base[k]))} if k in base else {})
        for k, v in vals.items()
    }
    reason = (
        "the server shows the target the real model and the others a crafted one (dead first layer); "
        "'caught' = the target was excluded/the session refused because clients bind the model they "
        "received into the session id; 'without_binding' = the same attack on a protocol run without "
        "that binding"
    )
    return metrics, reason


def _min_cohort(
    ctx: _Context, up: _Upload, targets: list[int], bar: Callable[[int, int], None], per: list[dict[str, Any]]
) -> tuple[dict[str, Any], str]:
    """The server invites the target alone, under the algorithm's schema and under a minimum cohort rule."""
    from securefgl.attacks.aggregation_attacks import minimum_cohort_attack
    from securefgl.protocols.encoding import SumSchema
    from securefgl.protocols.registry import get_protocol

    cfg, schema, contribs, context = ctx.cfg, up.schema, up.contribs, up.context
    opts = dict(ctx.run_cfg.protocol.options)
    vals: dict[str, list[float]] = {}
    base: dict[str, list[float]] = {}
    strict = SumSchema(
        schema.blocks,
        max_clients=schema.max_clients,
        precision=schema.precision,
        min_contributors=min(schema.max_clients, max(2, cfg.guard_min_difference)),
    )
    for i, t in enumerate(targets):
        ok, why, cos = minimum_cohort_attack(
            get_protocol(ctx.protocol, **opts), schema, contribs, t, context=context
        )
        ok2, why2, _ = minimum_cohort_attack(
            get_protocol(ctx.protocol, **opts), strict, contribs, t, context=context
        )
        vals.setdefault("released_alone", []).append(1.0 if ok2 else 0.0)
        base.setdefault("released_alone", []).append(1.0 if ok else 0.0)
        per.append(
            {
                "target": t,
                "schema_min_contributors": schema.min_contributors,
                "released": ok,
                "cosine": cos,
                "refused": why,
                "with_rule": {"released": ok2, "refused": why2},
            }
        )
        bar(i + 1, len(targets))
    metrics = {
        "released_alone": metric(
            vals["released_alone"], {"algorithm_schema": float(np.mean(base["released_alone"]))}
        )
    }
    reason = (
        f"the server invites the target alone; 'algorithm_schema' = under the algorithm's own schema "
        f"(min_contributors={schema.min_contributors}), the figure = with min_contributors="
        f"{strict.min_contributors}"
    )
    return metrics, reason


def _disaggregation(
    ctx: _Context, up: _Upload, targets: list[int], bar: Callable[[int, int], None], per: list[dict[str, Any]]
) -> tuple[dict[str, Any], str]:
    """Lam et al.: least squares over releases of random client subsets, undefended and under ReleaseGuard."""
    from securefgl.attacks.aggregation_attacks import disaggregation_attack
    from securefgl.protocols.registry import get_protocol
    from securefgl.protocols.release_guard import ReleaseGuard

    cfg = ctx.cfg
    opts = dict(ctx.run_cfg.protocol.options)
    clients = sorted(up.contribs)
    vals: dict[str, list[float]] = {}
    base: dict[str, list[float]] = {}
    rng = np.random.default_rng(cfg.seed)
    k = len(clients)
    sets: list[list[int]] = []
    seen: set[tuple[int, ...]] = set()
    for _ in range(50 * k):
        if len(sets) >= 2 * k:
            break
        size = int(rng.integers(max(2, k // 2), max(3, k)))
        s_ = tuple(sorted(rng.choice(clients, size=min(size, k), replace=False).tolist()))
        if s_ not in seen:
            seen.add(s_)
            sets.append(list(s_))
    for label in ("undefended", "difference", "fixed"):
        p = get_protocol(ctx.protocol, **opts)
        if label != "undefended":
            p = ReleaseGuard(p, min_difference=cfg.guard_min_difference, mode=label)  # type: ignore[arg-type]
        res = disaggregation_attack(p, up.schema, up.contribs, sets, context=up.context)
        frac = len(res.identifiable) / max(1, k)
        (vals if label == "undefended" else base).setdefault(f"identified_{label}", []).append(frac)
        per.append(
            {
                "guard": label,
                "released": len(res.released),
                "refused": len(res.refused),
                "identifiable": res.identifiable,
                "max_error": max(res.errors.values()) if res.errors else None,
            }
        )
    bar(len(targets), len(targets))
    metrics = {
        "identified_fraction": metric(
            vals["identified_undefended"],
            {
                "guard_difference": float(np.mean(base["identified_difference"])),
                "guard_fixed": float(np.mean(base["identified_fixed"])),
            },
        )
    }
    reason = (
        f"{len(sets)} releases of the first upload over distinct random subsets of the clients; least "
        "squares on the participation matrix; 'guard_*' = the same under ReleaseGuard(mode=...)"
    )
    return metrics, reason


def _analytic_attack(ctx: _Context, targets: list[int]) -> AttackOutcome:
    """Analytic first-layer inversion of the honest first uploads (the job's own recipe): each target's upload
    under plaintext, the protocol's sum of every client otherwise; scored on the targets' training nodes."""
    from securefgl.attacks._audit_config import run_config
    from securefgl.attacks.analytic_inversion import AnalyticConfig, analytic_study
    from securefgl.protocols.registry import parse_protocol

    spec = parse_protocol(ctx.protocol)
    plain = spec.base == "plaintext" and not spec.dp
    bar = ctx.bars.task(f"{ctx.protocol}: analytic-inversion", 1)
    acfg = AnalyticConfig(seed=ctx.cfg.seed)
    res = analytic_study(
        run_config(ctx.cfg, ctx.protocol),
        ctx.fg,
        seed=ctx.cfg.seed,
        protocols=() if plain else (ctx.protocol,),
        config=acfg,
        protocol_options=dict(ctx.run_cfg.protocol.options),
    )
    bar(1, 1)
    view = "plaintext" if plain else ctx.protocol
    rows = {r["client"]: r for r in res.rows if r["view"] == view and r["client"] in targets}
    per = [{k: v for k, v in rows[t].items() if k != "view"} for t in targets if t in rows]
    exact = [float(r["exact"]) for r in per]
    cos = [float(r["mean_best_cosine"]) for r in per]
    chance = [float(r.get("chance_mean_best_cosine", float("nan"))) for r in per]
    chance_exact = [float(r.get("chance_exact", float("nan"))) for r in per]
    metrics = {
        "exact_recovery": metric(exact, {"chance": float(np.nanmean(chance_exact)) if chance_exact else 0.0}),
        "feature_cosine": metric(cos, {"chance": float(np.nanmean(chance)) if chance else float("nan")}),
    }
    seen = (
        "each client's own upload"
        if plain
        else f"the {ctx.protocol} sum of all {len(ctx.fg.clients)} clients"
    )
    reason = (
        f"rows dW_i / db_i of the first layer ({res.model}; GCN: propagated inputs, graph known) of {seen} in "
        f"the first round (the job's own recipe); figure = fraction of each target's training nodes recovered "
        f"with cosine > {acfg.exact_cosine}, and their mean best cosine; chance: as many random public rows"
    )
    return AttackOutcome(
        "analytic-inversion", ctx.protocol, "server", "ok", reason, metrics, {"per_target": per}
    )
