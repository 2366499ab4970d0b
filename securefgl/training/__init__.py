"""securefgl.training: the batched client-training stack, used by every algorithm's client half.

* :mod:`securefgl.training.batched`: the one client-batch layout (:class:`GraphBatch`, the disjoint union
  of the client graphs, ``bucketed`` for ``bmm`` or ``packed`` for per-node state) and its products;
* :mod:`securefgl.training.sparse`: the one sparse product (:class:`SparseOperator`, ``A @ H`` with a cached
  transpose), used by every client half that trains on graphs;
* :mod:`securefgl.training.optim`: the one optimiser over stacked per-client parameters
  (:class:`StackedOptimizer`, Adam or SGD with per-client step counts);
* :mod:`securefgl.training.local_training`: the train and predict loops (a batch of clients, or each
  client alone as a batch of one: the same code);
* :mod:`securefgl.training.device`: device selection (``auto``, ``cpu``, ``cuda[:i]``).

This package sits below :mod:`securefgl.algorithms` and above :mod:`securefgl.nn`: it imports neither the
algorithms nor the engine (checked by the import-linter contracts in ``pyproject.toml``).
"""

from __future__ import annotations

from securefgl.training.batched import Features, GradSink, GraphBatch, plan_buckets
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
    train_each_client,
    workspace_generator,
)
from securefgl.training.optim import OptimizerStore, StackedOptimizer
from securefgl.training.sparse import SparseOperator

__all__ = [
    "Features",
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
    "train_each_client",
    "tune_cpu_allocator",
    "workspace_generator",
]
