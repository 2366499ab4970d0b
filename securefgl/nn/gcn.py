r"""Graph convolutional network (Kipf and Welling, ICLR 2017), https://arxiv.org/abs/1609.02907.

.. math::
    H^{(l+1)} = \sigma\big(\tilde D^{-1/2}(A+I)\tilde D^{-1/2}\,\mathrm{dropout}(H^{(l)})\,W^{(l)} + b^{(l)}\big),
    \qquad \sigma = \mathrm{ReLU} \text{ (none after the last layer)}

Built from PyG :class:`~torch_geometric.nn.GCNConv` layers; :meth:`GCN.batched_forward` evaluates K
clients' copies at once on a :class:`~securefgl.training.batched.GraphBatch` with stacked parameters.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import Tensor
from torch_geometric.nn import GCNConv

from securefgl.nn._functional import dropout
from securefgl.nn.registry import register_model

if TYPE_CHECKING:
    from securefgl.training.batched import GraphBatch

__all__ = ["GCN"]


@register_model("gcn")
class GCN(torch.nn.Module):
    r"""A ``layers``-deep GCN.

    Args:
        in_channels: ``F``.
        out_channels: ``C``.
        hidden: Hidden width. (default: ``64``)
        layers: Number of GCNConv layers. (default: ``2``)
        dropout: Dropout before every layer. (default: ``0.5``)

    Shapes:
        x ``(N, F)``, edge_index ``(2, E)`` -> ``(N, C)`` logits.
    """

    def __init__(
        self, in_channels: int, out_channels: int, *, hidden: int = 64, layers: int = 2, dropout: float = 0.5
    ) -> None:
        super().__init__()
        dims = [in_channels] + [hidden] * (layers - 1) + [out_channels]
        self.convs = torch.nn.ModuleList(GCNConv(a, b) for a, b in zip(dims[:-1], dims[1:], strict=True))
        self.p = dropout
        self.generator: torch.Generator | None = None

    def forward(self, x: Tensor, edge_index: Tensor) -> Tensor:
        for i, conv in enumerate(self.convs):
            x = dropout(x, self.p, self.training, self.generator)
            x = conv(x, edge_index)
            if i < len(self.convs) - 1:
                x = x.relu()
        return x

    def batched_forward(
        self,
        params: dict[str, Tensor],
        batch: GraphBatch,
        *,
        training: bool,
        generator: torch.Generator | None,
    ) -> Tensor:
        """The same network for every client of ``batch`` with stacked ``params`` (``(K, ...)`` each)."""
        adj = batch.gcn_operator()
        x = batch.x
        for i in range(len(self.convs)):
            x = (
                batch.input_dropout(self.p, training, generator)
                if i == 0
                else dropout(x, self.p, training, generator)
            )
            h = batch.linear(x, params[f"convs.{i}.lin.weight"])
            x = adj @ h + batch.per_row(params[f"convs.{i}.bias"])
            if i < len(self.convs) - 1:
                x = x.relu()
        return x

    def __repr__(self) -> str:
        c = self.convs
        return f"GCN({c[0].in_channels}, {c[-1].out_channels}, hidden={c[0].out_channels}, layers={len(c)}, dropout={self.p})"
