r"""GraphSAGE with mean aggregation (Hamilton et al., NeurIPS 2017), https://arxiv.org/abs/1706.02216.

.. math::
    h_i^{(l+1)} = \sigma\Big(W_1^{(l)} \tfrac{1}{|\mathcal N(i)|}\sum_{j\in\mathcal N(i)} h_j^{(l)}
    + b^{(l)} + W_2^{(l)} h_i^{(l)}\Big)

Built from PyG :class:`~torch_geometric.nn.SAGEConv` layers (``aggr="mean"``, root weight, no
normalisation), with dropout before every layer and ReLU between layers.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import Tensor
from torch_geometric.nn import SAGEConv

from securefgl.nn._functional import dropout
from securefgl.nn.registry import register_model

if TYPE_CHECKING:
    from securefgl.training.batched import GraphBatch

__all__ = ["GraphSAGE"]


@register_model("sage", aliases=("graphsage",))
class GraphSAGE(torch.nn.Module):
    """A ``layers``-deep GraphSAGE (mean).

    Args:
        in_channels: ``F``.
        out_channels: ``C``.
        hidden: Hidden width. (default: ``64``)
        layers: Number of SAGEConv layers. (default: ``2``)
        dropout: Dropout before every layer. (default: ``0.5``)

    Shapes:
        x ``(N, F)``, edge_index ``(2, E)`` -> ``(N, C)`` logits.
    """

    def __init__(
        self, in_channels: int, out_channels: int, *, hidden: int = 64, layers: int = 2, dropout: float = 0.5
    ) -> None:
        super().__init__()
        dims = [in_channels] + [hidden] * (layers - 1) + [out_channels]
        self.convs = torch.nn.ModuleList(
            SAGEConv(a, b, aggr="mean") for a, b in zip(dims[:-1], dims[1:], strict=True)
        )
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
        mean = batch.mean_operator()
        x = batch.x
        for i in range(len(self.convs)):
            x = (
                batch.input_dropout(self.p, training, generator)
                if i == 0
                else dropout(x, self.p, training, generator)
            )
            if i == 0 and not (training and self.p > 0):
                agg = batch.cached("sage_agg0", lambda x=x: mean @ x)
            else:
                agg = mean @ x
            pre = f"convs.{i}."
            h = batch.linear(agg, params[pre + "lin_l.weight"], params[pre + "lin_l.bias"])
            x = h + batch.linear(x, params[pre + "lin_r.weight"])
            if i < len(self.convs) - 1:
                x = x.relu()
        return x
