r"""``audit(config) -> AuditResult``: run a federated job under each protocol and attack every adversary view.

A privacy claim rests on a measurement. For one algorithm, model and dataset, the audit

1. checks, before any work, which (attack, protocol) cells apply (an attack that does not apply is refused with
   :class:`~securefgl.errors.AttackNotApplicableError` naming the reason; the cell is reported as such);
2. runs the federated job once per protocol with the engine's :func:`~securefgl.engine.runner.run_seed`,
   observing it through the engine's hooks to keep every aggregation's transcript
   (:mod:`securefgl.attacks._capture`); the run's utility is the engine's final evaluation (the round the
   server selected), the attacks on the model use the last broadcast;
3. builds each adversary's view from the transcripts alone (:mod:`securefgl.attacks.views`);
4. runs each attack on each view, over ``trials`` targets/seeds, and scores it against ground truth, next to
   its baselines: *chance* (what an adversary with no view gets) and *public* (the same attack on what the
   adversary is entitled to see, e.g. the released sum);
5. writes ``audit.json`` (for pipelines), ``summary.md`` (for a reviewer), and figures (true vs reconstructed
   features, ROC curves) with matplotlib's Agg backend.

A view that holds nothing for an attack (CKKS ciphertexts, a client's view of other clients' updates) is
reported as "nothing to attack", never as a zero score.

Attacks (``AuditConfig.attacks``):

=========================  =====================================================================================
``gradient-inversion``     labels and features of a small client's training nodes from its update (DLG/iDLG/IG)
``label``                  iDLG label counts from the output bias of a client's update
``link-stealing``          edges from the released model's posteriors (He et al. 2021, Attack-0)
``structure-inference``    a curious FedStruct client: other clients' edges from its setup rows (AUC, P@k)
``membership``             training-node membership from the released model (loss / confidence thresholds)
``statistics``             a client's class statistics / proxies (O-pFGL, FedSpray) from its upload
``differencing``           a client's statistics from two releases that differ by it, before/after ReleaseGuard
``model-inconsistency``    Pasquini et al.: isolate a target by showing others a crafted model
``min-cohort``             a "sum" of one client; the minimum-contributors rule
``disaggregation``         least squares over sums with varying participants (Lam et al.)
``malicious-model``        imprint bins (Fowl et al. 2022): training nodes recovered exactly from the secure sum
``analytic-inversion``     first-layer rows dW_i / db_i of honest uploads (or their sum): training nodes exactly
=========================  =====================================================================================

Layout: the configuration and the applicability rules (:mod:`~securefgl.attacks._audit_config`), the
per-protocol run context (``_audit_context``), one driver module per attack family (``_audit_updates``,
``_audit_models``, ``_audit_structure``, ``_audit_statistics``, ``_audit_protocol``), and the findings with
their report (``_audit_report``); this module runs them in order.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch

from securefgl.attacks._audit_config import (
    _MODEL_ATTACKS,
    _STAT_ATTACKS,
    _STRUCTURE_ATTACKS,
    _UPDATE_ATTACKS,
    ATTACKS,
    AuditConfig,
    _applicability,
    run_config,
)
from securefgl.attacks._audit_context import _Context, _Progress
from securefgl.attacks._audit_models import _model_attack
from securefgl.attacks._audit_protocol import _protocol_attack
from securefgl.attacks._audit_report import AuditResult, _write
from securefgl.attacks._audit_statistics import _stat_attack
from securefgl.attacks._audit_structure import _structure_attack
from securefgl.attacks._audit_updates import _update_attack
from securefgl.attacks._common import AttackOutcome
from securefgl.errors import AttackNotApplicableError, NothingToAttackError, ProtocolError

__all__ = ["ATTACKS", "AuditConfig", "AuditResult", "audit"]


def audit(config: AuditConfig | Mapping[str, Any]) -> AuditResult:
    """Run the audit described by ``config`` (see :class:`AuditConfig` and the module docstring).

    Raises:
        ConfigError: invalid names or values (before any work).
        AttackNotApplicableError: not one requested attack applies to any requested protocol (the message
            lists every reason).
    """
    cfg = config if isinstance(config, AuditConfig) else AuditConfig(**dict(config))
    t0 = time.perf_counter()
    cells = {p: _applicability(cfg, p) for p in cfg.protocols}
    if all(len(reasons) == len(cfg.attacks) for reasons in cells.values()):
        lines = "\n".join(f"  - {a} under {p}: {r}" for p, rs in cells.items() for a, r in rs.items())
        raise AttackNotApplicableError(f"no requested attack applies to any requested protocol:\n{lines}")

    outcomes: list[AttackOutcome] = []
    runs: dict[str, dict[str, Any]] = {}
    figures: dict[str, Any] = {"reconstructions": {}, "roc": {}}
    from securefgl.training.device import resolve_device

    device = resolve_device(cfg.device) if cfg.device != "cpu" else torch.device("cpu")
    fg = None
    with _Progress(cfg.progress) as bars:
        for protocol in cfg.protocols:
            skip = cells[protocol]
            for a in cfg.attacks:
                if a in skip:
                    for v in cfg.views:
                        outcomes.append(AttackOutcome(a, protocol, v, "not_applicable", skip[a]))
            todo = [a for a in cfg.attacks if a not in skip]
            if not todo:
                continue
            run_cfg = run_config(cfg, protocol)
            if fg is None:
                from securefgl.algorithms.registry import get_algorithm
                from securefgl.api import load_federated_graph

                fg = load_federated_graph(run_cfg)
                if get_algorithm(cfg.algorithm).needs_cross_edges:
                    from securefgl.data.cross_edges import attach_cross_edges

                    fg = attach_cross_edges(fg)  # as the engine does (spec §1.2: what clients know)
            ctx = _Context(cfg, protocol, run_cfg, fg, device, bars, figures)
            needs_run = any(a in _UPDATE_ATTACKS + _MODEL_ATTACKS + _STRUCTURE_ATTACKS for a in todo)
            if needs_run:
                try:
                    ctx.capture()
                except ProtocolError as exc:
                    for a in todo:
                        for v in cfg.views:
                            outcomes.append(
                                AttackOutcome(
                                    a,
                                    protocol,
                                    v,
                                    "failed",
                                    f"the federated run aborted: {type(exc).__name__}: {exc}",
                                )
                            )
                    continue
                runs[protocol] = ctx.run_facts()
            for a in todo:
                for v in cfg.views:
                    t1 = time.perf_counter()
                    try:
                        out = _attack(ctx, a, v)
                    except NothingToAttackError as exc:
                        out = AttackOutcome(a, protocol, v, "nothing_to_attack", str(exc))
                    except AttackNotApplicableError as exc:
                        out = AttackOutcome(a, protocol, v, "not_applicable", str(exc))
                    out.seconds = time.perf_counter() - t1
                    outcomes.append(out)
    result = AuditResult(
        config=_config_dict(cfg), outcomes=outcomes, runs=runs, seconds=time.perf_counter() - t0
    )
    if cfg.output is not None:
        result.output_dir = _write(result, Path(cfg.output), figures if cfg.figures else None)
    return result


def _config_dict(cfg: AuditConfig) -> dict[str, Any]:
    d = asdict(cfg)
    d["inversion"] = asdict(cfg.inversion)
    d["run"] = json.loads(json.dumps(dict(cfg.run), default=str))
    return d


def _attack(ctx: _Context, name: str, kind: str) -> AttackOutcome:
    """Run attack ``name`` on the ``kind`` adversary's view with the driver of its family."""
    if name in _UPDATE_ATTACKS:
        return _update_attack(ctx, name, kind)
    if name in _MODEL_ATTACKS:
        return _model_attack(ctx, name, kind)
    if name in _STAT_ATTACKS:
        return _stat_attack(ctx, name, kind)
    if name in _STRUCTURE_ATTACKS:
        return _structure_attack(ctx, name, kind)
    return _protocol_attack(ctx, name, kind)
