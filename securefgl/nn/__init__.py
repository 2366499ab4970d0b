"""securefgl.nn: the GNN models (one module per family) and their registry.

Every family has a ``forward(x, edge_index)`` built from PyG layers and a ``batched_forward(params, batch)``
that runs K clients' copies at once on a :class:`~securefgl.training.batched.GraphBatch` (the client-batch
layout of the training stack, :mod:`securefgl.training`) with stacked parameters.
"""

from __future__ import annotations

from securefgl.nn.gat import GAT
from securefgl.nn.gcn import GCN
from securefgl.nn.mlp import MLP
from securefgl.nn.registry import ModelSpec, available_models, build_model, get_model_class, register_model
from securefgl.nn.sage import GraphSAGE
from securefgl.nn.sgc import SGC

__all__ = [
    "GAT",
    "GCN",
    "MLP",
    "SGC",
    "GraphSAGE",
    "ModelSpec",
    "available_models",
    "build_model",
    "get_model_class",
    "register_model",
]

classes = ["GAT", "GCN", "GraphSAGE", "MLP", "SGC"]
