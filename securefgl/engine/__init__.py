"""securefgl.engine: the federated run loop, configuration, devices, batched local training and metrics.

The entry point for users is :func:`securefgl.run` (:mod:`securefgl.api`); this package holds its parts.
"""

from __future__ import annotations

from securefgl.engine.config import (
    AlgorithmConfig,
    OutputConfig,
    ProtocolConfig,
    RunConfig,
    TrainConfig,
    load_run_config,
)
from securefgl.engine.device import resolve_device
from securefgl.engine.local_training import (
    TrainedClients,
    predict_shared,
    predict_stacked,
    train_clients,
    train_clients_sequential,
)
from securefgl.engine.metrics import aggregate_clients, client_metrics, macro_f1, mean_std
from securefgl.engine.optim import OptimizerStore, StackedOptimizer
from securefgl.engine.runner import EvalRecord, RoundRecord, SeedResult, run_seed

__all__ = [
    "AlgorithmConfig",
    "EvalRecord",
    "OptimizerStore",
    "OutputConfig",
    "ProtocolConfig",
    "RoundRecord",
    "RunConfig",
    "SeedResult",
    "StackedOptimizer",
    "TrainConfig",
    "TrainedClients",
    "aggregate_clients",
    "client_metrics",
    "load_run_config",
    "macro_f1",
    "mean_std",
    "predict_shared",
    "predict_stacked",
    "resolve_device",
    "run_seed",
    "train_clients",
    "train_clients_sequential",
]
