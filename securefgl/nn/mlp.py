r"""Multi-layer perceptron on node features only (no graph).

.. math::
    H^{(l+1)} = \sigma\big(\mathrm{dropout}(H^{(l)}) W^{(l)\top} + b^{(l)}\big)

Built from PyG :class:`~torch_geometric.nn.Linear` layers with ReLU between layers.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import Tensor
from torch_geometric.nn import Linear

from securefgl.nn._functional import dropout
from securefgl.nn.registry import register_model

if TYPE_CHECKING:
    from securefgl.training.batched import GraphBatch

__all__ = ["MLP"]


@register_model("mlp")
class MLP(torch.nn.Module):
    """A ``layers``-deep MLP; ``edge_index`` is accepted and ignored.

    Args:
        in_channels: ``F``.
        out_channels: ``C``.
        hidden: Hidden width. (default: ``64``)
        layers: Number of linear layers. (default: ``2``)
        dropout: Dropout before every layer. (default: ``0.5``)

    Shapes:
        x ``(N, F)`` -> ``(N, C)`` logits.
    """

    def __init__(
        self, in_channels: int, out_channels: int, *, hidden: int = 64, layers: int = 2, dropout: float = 0.5
    ) -> None:
        super().__init__()
        dims = [in_channels] + [hidden] * (layers - 1) + [out_channels]
        self.lins = torch.nn.ModuleList(Linear(a, b) for a, b in zip(dims[:-1], dims[1:], strict=True))
        self.p = dropout
        self.generator: torch.Generator | None = None

    def forward(self, x: Tensor, edge_index: Tensor | None = None) -> Tensor:
        for i, lin in enumerate(self.lins):
            x = dropout(x, self.p, self.training, self.generator)
            x = lin(x)
            if i < len(self.lins) - 1:
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
        x = batch.x
        for i in range(len(self.lins)):
            x = (
                batch.input_dropout(self.p, training, generator)
                if i == 0
                else dropout(x, self.p, training, generator)
            )
            x = batch.linear(x, params[f"lins.{i}.weight"], params[f"lins.{i}.bias"])
            if i < len(self.lins) - 1:
                x = x.relu()
        return x
