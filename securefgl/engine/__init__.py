"""securefgl.engine: the federated run loop, evaluation through secure sums, hooks, records and metrics.

The run configuration lives in :mod:`securefgl.config`, devices and the batched client-training stack in
:mod:`securefgl.training`.

The entry point for users is :func:`securefgl.run` (:mod:`securefgl.api`); this package holds its parts.
"""

from __future__ import annotations

from securefgl.engine.evaluation import RoundSelector, metrics_from_sums
from securefgl.engine.hooks import (
    AggregateEvent,
    EvaluateEvent,
    RoundEvent,
    RoundStartEvent,
    RunHooks,
    StartEvent,
)
from securefgl.engine.metrics import aggregate_clients, client_metrics, macro_f1, mean_std
from securefgl.engine.runner import EvalRecord, RoundRecord, SeedResult, run_seed

__all__ = [
    "AggregateEvent",
    "EvaluateEvent",
    "RoundEvent",
    "RoundSelector",
    "RoundStartEvent",
    "RunHooks",
    "StartEvent",
    "metrics_from_sums",
    "EvalRecord",
    "RoundRecord",
    "SeedResult",
    "aggregate_clients",
    "client_metrics",
    "macro_f1",
    "mean_std",
    "run_seed",
]
