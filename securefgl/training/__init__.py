"""securefgl.training: the batched client-training stack, used by every algorithm's client half.

* :mod:`securefgl.training.batched`: the client-batch layout (:class:`GraphBatch`, a padded disjoint union
  of the client graphs) and its bucketed/sparse products;
* :mod:`securefgl.training.optim`: optimisers over stacked per-client parameters;
* :mod:`securefgl.training.local_training`: the train and predict loops (batched, and one client at a
  time as the reference);
* :mod:`securefgl.training.device`: device selection (``auto``, ``cpu``, ``cuda[:i]``).

This package sits below :mod:`securefgl.algorithms` and above :mod:`securefgl.nn`: it imports neither the
algorithms nor the engine (checked by the import-linter contracts in ``pyproject.toml``).
"""

from __future__ import annotations

from securefgl.training.batched import GradSink, GraphBatch, SparseOperator, plan_buckets
from securefgl.training.device import check_device_string, resolve_device, tune_cpu_allocator
from securefgl.training.local_training import (
    TrainedClients,
    client_batch,
    make_optimizer,
    predict_shared,
    predict_stacked,
    seed_from,
    stack_params,
    train_clients,
    train_clients_sequential,
    workspace_generator,
)
from securefgl.training.optim import OptimizerStore, StackedOptimizer

__all__ = [
    "GradSink",
    "GraphBatch",
    "OptimizerStore",
    "SparseOperator",
    "StackedOptimizer",
    "TrainedClients",
    "check_device_string",
    "client_batch",
    "make_optimizer",
    "plan_buckets",
    "predict_shared",
    "predict_stacked",
    "resolve_device",
    "seed_from",
    "stack_params",
    "train_clients",
    "train_clients_sequential",
    "tune_cpu_allocator",
    "workspace_generator",
]
