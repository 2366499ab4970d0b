"""The audit's malicious-model attack: a server that broadcasts imprint bins, on the protocol's secure sum.

The server chooses the recipe of the crafted rounds (SGD, one local epoch, dropout off: the setting the
attack is documented for, :mod:`securefgl.attacks.imprint`); every client is honest and the sum is computed
by the protocol under audit with real keys. Scored per target (the clients with the fewest training nodes):
the fraction of its training nodes recovered exactly (cosine > 0.99). Chance is 0 (an adversary with no view
recovers no node exactly); the baselines are the same attack against clients that run the first-layer
sanity test and the update-rule check (:mod:`securefgl.attacks.model_check`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import numpy as np

from securefgl.attacks._audit_context import _Context
from securefgl.attacks._common import AttackOutcome, metric

#: The recipe the malicious server sets for its crafted rounds.
SERVER_RECIPE = {"train": {"optimizer": "sgd", "local_epochs": 1, "lr": 0.1}, "model": {"dropout": 0.0}}


def _attacker_job(ctx: _Context) -> Any:
    from securefgl.attacks._audit_config import run_config
    from securefgl.attacks._imprint_run import malicious_setup
    from securefgl.config import merge

    cfg = dataclasses.replace(ctx.cfg, run=merge(dict(ctx.cfg.run), SERVER_RECIPE))
    return malicious_setup(run_config(cfg, ctx.protocol), ctx.fg, ctx.cfg.seed, "cpu")


def _malicious_attack(ctx: _Context, targets: list[int], bar: Callable[[int, int], None]) -> AttackOutcome:
    """Imprint bins for ``cfg.imprint_rounds`` rounds; then the same with the client-side checks."""
    from securefgl.attacks._imprint_run import rule_guard, run_imprint, sanity_guard
    from securefgl.attacks.imprint import ImprintConfig, match_rows

    setup = _attacker_job(ctx)
    opts = dict(ctx.run_cfg.protocol.options)
    icfg = ImprintConfig(rounds=ctx.cfg.imprint_rounds, seed=ctx.cfg.seed)
    runs = {}
    guards = (("none", None), ("sanity_test", sanity_guard(setup)), ("update_rule", rule_guard(setup)))
    for i, (label, guard) in enumerate(guards):
        runs[label] = run_imprint(
            setup, ctx.protocol, targets[0], config=icfg, protocol_options=opts, client_check=guard
        )
        bar(i + 1, len(guards))
    per: list[dict[str, Any]] = []
    vals: dict[str, list[float]] = {k: [] for k in runs}
    for t in targets:
        row: dict[str, Any] = {"target": t, "training_nodes": int(setup.truth[t].shape[0])}
        for label, res in runs.items():
            best, exact = match_rows(res.recovered, setup.truth[t], icfg.exact_cosine)
            frac = float(exact.double().mean()) if exact.numel() else float("nan")
            vals[label].append(frac)
            row[label] = {"exact": frac, "mean_best_cosine": float(best.mean()), "refused": res.refused}
        per.append(row)
    res = runs["none"]
    if res.best_target is not None:
        ctx.figures["reconstructions"][f"{ctx.protocol} malicious-model (client {targets[0]})"] = (
            setup.truth[targets[0]],
            res.best_target,
        )
    metrics = {
        "exact_recovery": metric(
            vals["none"],
            {
                "chance": 0.0,
                "clients_run_sanity_test": float(np.mean(vals["sanity_test"])),
                "clients_check_update_rule": float(np.mean(vals["update_rule"])),
            },
        )
    }
    reason = (
        f"the server broadcasts imprint bins (Fowl et al. 2022) for {icfg.rounds} rounds with its recipe "
        f"(SGD, 1 local epoch, dropout 0); the {ctx.protocol} sum of all {len(setup.clients)} clients is "
        f"inverted; the figure = fraction of the target's training nodes recovered with cosine > "
        f"{icfg.exact_cosine}; all clients' nodes: {res.exact_all:.3f}; "
        f"refused: {res.refused or 'no'}; with the sanity test: {runs['sanity_test'].refused or 'not refused'}"
    )
    extra = {"per_target": per, "rounds": icfg.rounds, "exact_all": res.exact_all, "certified": res.certified}
    return AttackOutcome("malicious-model", ctx.protocol, "server", "ok", reason, metrics, extra)
