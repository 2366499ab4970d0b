r"""FedSpray's client batch: the training stack's ``packed`` layout plus the labelled-node class counts.

Client side, private to :mod:`securefgl.algorithms.fedspray`. The clients of a round are trained *together*
on one :class:`~securefgl.training.batched.GraphBatch` in the ``packed`` layout (caller's order, client
``k`` owns rows ``segments()[k]``, no padding), so that each client's per-node proxies are one contiguous
slice of a stacked tensor. A loss that is a sum of per-client losses gives every client exactly the
gradient it would get alone, and :class:`~securefgl.training.optim.StackedOptimizer` (element-wise, with a
per-client step count) makes exactly the update the client's own Adam would make; so one batched step
equals ``K`` independent local steps, and one client alone is a batch of one.

Shapes: ``K`` clients, ``N`` nodes of all of them, ``C`` classes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor

from securefgl.errors import ConfigError
from securefgl.training.batched import GraphBatch

__all__ = ["client_batch", "num_train", "train_counts"]


def client_batch(clients: Sequence[Any], *, num_classes: int) -> GraphBatch:
    """The clients' local graphs (``x``, ``y``, local ``edge_index``, split masks) in the packed layout.

    Raises:
        ConfigError: No client, a client without nodes, features of different widths, labels outside
            ``[0, C)``.
    """
    if not clients:
        raise ConfigError("FedSpray needs at least one client in a batch, got none")
    for k, c in enumerate(clients):
        if int(c.num_nodes) == 0:
            raise ConfigError(
                f"client at batch position {k} has no nodes; FedSpray needs a non-empty local graph"
            )
    widths = sorted({int(c.x.shape[1]) for c in clients})
    if len(widths) != 1:
        raise ConfigError(f"clients have features of different widths {widths}; expected one width")
    batch = GraphBatch.from_graphs(clients, layout="packed")
    y = batch.y
    if y.numel() and (int(y.min()) < 0 or int(y.max()) >= num_classes):
        raise ConfigError(
            f"labels must lie in [0, {num_classes}), got min {int(y.min())}, max {int(y.max())}"
        )
    return batch


def train_counts(batch: GraphBatch, num_classes: int) -> Tensor:
    """``(K, C)`` class histogram of every client's labelled nodes (cached on the batch)."""

    def make() -> Tensor:
        train = batch.masks["train_mask"]
        counts = torch.zeros(batch.num_graphs, num_classes, device=batch.device)
        ones = torch.ones(int(train.sum()), device=batch.device)
        return counts.index_put_((batch.row_client[train], batch.y[train]), ones, accumulate=True)

    return batch.cached(("fedspray_train_counts", num_classes), make)


def num_train(batch: GraphBatch, num_classes: int) -> Tensor:
    """``(K,)`` labelled nodes per client."""
    return train_counts(batch, num_classes).sum(1).long()
