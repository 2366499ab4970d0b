r"""Simple graph convolution (Wu et al., ICML 2019), https://arxiv.org/abs/1902.07153.

.. math::
    \hat Y = \mathrm{dropout}\big(S^K X\big)\, W^\top + b, \qquad S = \tilde D^{-1/2}(A+I)\tilde D^{-1/2}

A PyG :class:`~torch_geometric.nn.SGConv` (one linear layer after ``K`` propagation steps); ``hidden`` and
``layers`` do not apply. ``S^K X`` does not depend on the parameters, so the batched form computes it once
per batch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
from torch import Tensor
from torch_geometric.nn import SGConv
from torch_geometric.nn.conv.gcn_conv import gcn_norm

from securefgl.errors import ConfigError
from securefgl.nn._functional import dropout
from securefgl.nn.registry import register_model

if TYPE_CHECKING:
    from securefgl.training.batched import GraphBatch

__all__ = ["SGC"]


@register_model("sgc")
class SGC(torch.nn.Module):
    """SGC with ``K`` propagation steps.

    Args:
        in_channels: ``F``.
        out_channels: ``C``.
        hidden: Unused (SGC is linear).
        layers: Unused.
        dropout: Dropout on ``S^K X`` before the linear layer. (default: ``0.5``)
        K: Propagation steps. (default: ``2``)

    Shapes:
        x ``(N, F)``, edge_index ``(2, E)`` -> ``(N, C)`` logits.
    """

    @dataclass(frozen=True)
    class Options:
        K: int = 2

        def __post_init__(self) -> None:
            if self.K < 1:
                raise ConfigError(f"model.options.K must be >= 1, got {self.K}")

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        *,
        hidden: int = 64,
        layers: int = 2,
        dropout: float = 0.5,
        K: int = 2,
    ) -> None:
        super().__init__()
        self.conv = SGConv(in_channels, out_channels, K=K, cached=False)
        self.K = K
        self.p = dropout
        self.generator: torch.Generator | None = None

    def propagate(self, x: Tensor, edge_index: Tensor) -> Tensor:
        """``S^K x``."""
        ei, w = gcn_norm(edge_index, None, x.size(0), False, True, dtype=x.dtype)
        for _ in range(self.K):
            x = self.conv.propagate(ei, x=x, edge_weight=w)
        return x

    def forward(self, x: Tensor, edge_index: Tensor) -> Tensor:
        z = self.propagate(x, edge_index)
        return self.conv.lin(dropout(z, self.p, self.training, self.generator))

    def batched_forward(
        self,
        params: dict[str, Tensor],
        batch: GraphBatch,
        *,
        training: bool,
        generator: torch.Generator | None,
    ) -> Tensor:
        """The same network for every client of ``batch`` with stacked ``params`` (``(K, ...)`` each)."""

        def make() -> Tensor:
            adj = batch.gcn_operator()
            z = batch.x
            for _ in range(self.K):
                z = adj @ z
            return z

        z = batch.cached(("sgc", self.K), make)
        z = dropout(z, self.p, training, generator)
        return batch.linear(z, params["conv.lin.weight"], params["conv.lin.bias"])
