"""The audit's statistics attacks (O-pFGL, FedSpray uploads): a client's class statistics, and differencing."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from securefgl.attacks._audit_config import AuditConfig
from securefgl.attacks._audit_context import _Context, _targets, _Upload, _upload_setup
from securefgl.attacks._common import AttackOutcome, metric
from securefgl.errors import NothingToAttackError


@dataclass(frozen=True, eq=False)
class _StatisticsRun:
    """What every target's statistics trial shares: the first upload, its layout and the adversary's view."""

    ctx: _Context
    kind: str
    layout: Any
    upload: _Upload
    pub: Any
    targets: list[int]

    def view(self, records: list[Any]) -> Any:
        """The adversary's view of ``records``."""
        from securefgl.attacks.views import client_view, collusion_view, server_view

        if self.kind == "server":
            return server_view(records, self.pub)
        if self.kind == "client":
            return client_view(records, self.pub, self.targets[0] if self.targets else 0)
        return collusion_view(records, self.pub, [c for c in self.ctx.colluders()])


def _stat_attack(ctx: _Context, name: str, kind: str) -> AttackOutcome:
    """A client's class statistics (``statistics``) or their differencing across two releases."""
    from securefgl.attacks.statistics_inversion import class_statistics, layout_for
    from securefgl.attacks.views import PublicInfo

    cfg, fg = ctx.cfg, ctx.fg
    layout = layout_for(cfg.algorithm)
    upload = _upload_setup(ctx)
    targets = [t for t in _targets(fg, cfg.trials) if t in upload.contribs]
    pub = PublicInfo(cfg.algorithm, fg.num_features, fg.num_classes, fg.num_clients)
    run = _StatisticsRun(ctx, kind, layout, upload, pub, targets)
    bar = ctx.bars.task(f"{ctx.protocol}/{kind}: {name}", len(targets))
    vals: dict[str, list[float]] = {}
    pubv: dict[str, list[float]] = {}
    chance: dict[str, list[float]] = {}
    per: list[dict[str, Any]] = []
    for i, t in enumerate(targets):
        truth = class_statistics(upload.contribs[t], layout, upload.broadcast)
        row: dict[str, Any] = {"target": t}
        if name == "statistics":
            _statistics_target(run, t, truth, row, vals, pubv, chance)
        else:
            _differencing_target(run, t, truth, row, vals, pubv)
        per.append(row)
        bar(i + 1, len(targets))
    if name == "statistics":
        metrics, reason = _statistics_metrics(vals, pubv, chance)
    else:
        metrics, reason = _differencing_metrics(cfg, vals, pubv)
    return AttackOutcome(
        name, ctx.protocol, kind, "ok", reason, metrics, {"targets": targets, "per_target": per}
    )


def _statistics_target(
    run: _StatisticsRun,
    t: int,
    truth: Any,
    row: dict[str, Any],
    vals: dict[str, list[float]],
    pubv: dict[str, list[float]],
    chance: dict[str, list[float]],
) -> None:
    """One aggregation of the first upload: target ``t``'s statistics from the view and from the sum."""
    from securefgl.attacks.statistics_inversion import class_statistics, compare_statistics
    from securefgl.attacks.views import AggregationRecord
    from securefgl.protocols.registry import get_protocol

    ctx, up, layout = run.ctx, run.upload, run.layout
    fg, schema, contribs, broadcast = ctx.fg, up.schema, up.contribs, up.broadcast
    protocol = get_protocol(ctx.protocol, **dict(ctx.run_cfg.protocol.options))
    sums, tr = protocol.aggregate(schema, contribs, round_index=0, context=up.context)
    view = run.view([AggregationRecord("stats", "upload", 0, schema, broadcast, tr, sums, None, contribs)])
    obs = view.observations[0]
    total = view.released_sum(obs)
    agg = class_statistics({k: total[k] for k in total}, layout, broadcast)
    sp = compare_statistics(agg, truth)
    for k, v in sp.items():
        pubv.setdefault(k, []).append(v)
    try:
        ins = view.individual_inputs(obs)
        got = ins.get(t)
        if got is not None:
            sc = compare_statistics(class_statistics(got.values, layout, broadcast), truth)
            for k, v in sc.items():
                vals.setdefault(k, []).append(v)
            row["view"] = sc
            row["kind"] = got.kind
    except NothingToAttackError as exc:
        row["view"] = f"nothing to attack: {exc}"
    row["public"] = sp
    uni = torch.full((fg.num_classes,), 1.0 / fg.num_classes, dtype=torch.float64)
    chance.setdefault("label_l1", []).append(float((uni - truth.label_distribution).abs().sum()))


def _differencing_target(
    run: _StatisticsRun,
    t: int,
    truth: Any,
    row: dict[str, Any],
    vals: dict[str, list[float]],
    pubv: dict[str, list[float]],
) -> None:
    """Two releases that differ by target ``t``, undefended and under ReleaseGuard."""
    from securefgl.attacks.statistics_inversion import (
        class_statistics,
        compare_statistics,
        differencing_attack,
        subtract,
    )
    from securefgl.protocols.registry import get_protocol
    from securefgl.protocols.release_guard import ReleaseGuard

    ctx, up, layout = run.ctx, run.upload, run.layout
    results = {}
    for label, guarded in (("undefended", False), ("guarded", True)):
        base = get_protocol(ctx.protocol, **dict(ctx.run_cfg.protocol.options))
        proto = ReleaseGuard(base, min_difference=ctx.cfg.guard_min_difference) if guarded else base
        res = differencing_attack(
            proto, up.schema, up.contribs, t, context=up.context, broadcast=up.broadcast
        )
        if res.recovered is None:
            results[label] = {"refused": res.refused}
            continue
        view = run.view(res.records)
        if len(view.observations) < 2 or any(o.released is None for o in view.observations):
            results[label] = {"refused": f"view {view.name!r} did not receive both sums"}
            continue
        a, b = (view.released_sum(o) for o in view.observations[:2])
        diff = subtract({k: a[k] for k in a}, {k: b[k] for k in b})
        results[label] = compare_statistics(class_statistics(diff, layout, up.broadcast), truth)
    row.update(results)
    und, gua = results["undefended"], results["guarded"]
    if "refused" not in und:
        for k, v in und.items():
            vals.setdefault(k, []).append(v)
    if "refused" not in gua:
        for k, v in gua.items():
            pubv.setdefault(f"guarded_{k}", []).append(v)
    vals.setdefault("guard_refused", []).append(1.0 if "refused" in gua else 0.0)


def _statistics_metrics(
    vals: dict[str, list[float]], pubv: dict[str, list[float]], chance: dict[str, list[float]]
) -> tuple[dict[str, Any], str]:
    """The ``statistics`` figures against the released sum's and chance's, and what they measure."""
    metrics = {}
    main = vals if vals else pubv
    for k in ("label_l1", "mean_cosine", "mean_max_abs_error", "exact"):
        if k in main:
            base = {"public": float(np.nanmean(pubv[k]))} if vals and k in pubv else {}
            if k in chance:
                base["chance"] = float(np.mean(chance[k]))
            metrics[k] = metric(main[k], base, higher_is_worse=k not in ("label_l1", "mean_max_abs_error"))
    reason = (
        "the target's upload as the view holds it; 'public' = the released sum's statistics against the "
        "target's"
        if vals
        else "no individual upload: figures are the released sum's statistics "
        "against the target's (public information)"
    )
    return metrics, reason


def _differencing_metrics(
    cfg: AuditConfig, vals: dict[str, list[float]], pubv: dict[str, list[float]]
) -> tuple[dict[str, Any], str]:
    """The ``differencing`` figures, with the guarded run's as the ``with_guard`` baseline."""
    metrics = {}
    for k in ("exact", "label_l1", "mean_max_abs_error", "guard_refused", "classes_withheld"):
        # a trial whose classes were all withheld compares no mean: it counts in 'exact' (as 0), not here
        got = [v for v in vals.get(k, []) if k != "mean_max_abs_error" or np.isfinite(v)]
        if got:
            base = {}
            gk = f"guarded_{k}"
            if gk in pubv:
                base["with_guard"] = float(np.nanmean(pubv[gk]))
            metrics[k] = metric(got, base, higher_is_worse=k not in ("label_l1", "mean_max_abs_error"))
    reason = (
        f"two releases of the same statistic, the second after the target dropped out; 'with_guard' = "
        f"the same under ReleaseGuard(min_difference={cfg.guard_min_difference}), which refuses the second "
        "release (guard_refused = 1)"
    )
    return metrics, reason
