"""securefgl.attacks: what an adversary can reconstruct from its view of a run.

Adversary views are built from protocol transcripts only (:mod:`~securefgl.attacks.views`); one module per
attack (gradient inversion, statistics inversion and differencing, link stealing, membership inference,
FedStruct external-edge inference, attacks on secure aggregation itself); :func:`audit` runs them all against
a federated job under each protocol and writes a report.
"""

from __future__ import annotations

from securefgl.attacks._common import AttackOutcome, Metric, hungarian_match, roc_summary, tpr_at_fpr
from securefgl.attacks.aggregation_attacks import (
    dead_first_layer,
    disaggregation_attack,
    minimum_cohort_attack,
    model_inconsistency_attack,
)
from securefgl.attacks.analytic_inversion import (
    AnalyticConfig,
    AnalyticResult,
    analytic_study,
    first_layer_candidates,
)
from securefgl.attacks.audit import ATTACKS, AuditConfig, AuditResult, audit
from securefgl.attacks.gradient_inversion import (
    InversionConfig,
    ModelUpdate,
    Reconstruction,
    TrainingRecipe,
    bias_candidates,
    invert_update,
    recover_label_counts,
    score_reconstruction,
    simulate_update,
)
from securefgl.attacks.imprint import ImprintConfig, ImprintResult, imprint_attack
from securefgl.attacks.link_stealing import balanced_pairs, link_stealing
from securefgl.attacks.membership import membership_inference
from securefgl.attacks.model_check import (
    BroadcastCheck,
    SuspiciousModelError,
    check_update_rule,
    first_layer_sanity,
)
from securefgl.attacks.statistics_inversion import (
    class_statistics,
    compare_statistics,
    differencing_attack,
    layout_for,
)
from securefgl.attacks.structure_inference import external_edge_inference
from securefgl.attacks.views import (
    AdversaryView,
    AggregationRecord,
    GraphKnowledge,
    PublicInfo,
    client_view,
    collusion_view,
    server_view,
)

__all__ = [
    "ATTACKS",
    "AdversaryView",
    "AggregationRecord",
    "AnalyticConfig",
    "AnalyticResult",
    "AttackOutcome",
    "AuditConfig",
    "AuditResult",
    "BroadcastCheck",
    "GraphKnowledge",
    "ImprintConfig",
    "ImprintResult",
    "InversionConfig",
    "Metric",
    "ModelUpdate",
    "PublicInfo",
    "Reconstruction",
    "SuspiciousModelError",
    "TrainingRecipe",
    "analytic_study",
    "audit",
    "balanced_pairs",
    "bias_candidates",
    "check_update_rule",
    "class_statistics",
    "client_view",
    "collusion_view",
    "compare_statistics",
    "dead_first_layer",
    "differencing_attack",
    "disaggregation_attack",
    "external_edge_inference",
    "first_layer_candidates",
    "first_layer_sanity",
    "hungarian_match",
    "imprint_attack",
    "invert_update",
    "layout_for",
    "link_stealing",
    "membership_inference",
    "minimum_cohort_attack",
    "model_inconsistency_attack",
    "recover_label_counts",
    "roc_summary",
    "score_reconstruction",
    "server_view",
    "simulate_update",
    "tpr_at_fpr",
]
