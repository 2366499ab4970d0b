r"""Graph attention network (Veličković et al., ICLR 2018), https://arxiv.org/abs/1710.10903.

.. math::
    \alpha_{ij} = \mathrm{softmax}_{j\in\mathcal N(i)\cup\{i\}}
        \mathrm{LeakyReLU}_{0.2}\big(a_s^\top W h_j + a_d^\top W h_i\big),\qquad
    h_i' = \big\Vert_{h=1}^{H} \sum_j \alpha^{h}_{ij} W^{h} h_j + b

Built from PyG :class:`~torch_geometric.nn.GATConv` layers: ``heads`` concatenated heads in hidden layers,
one averaged head in the output layer, ELU between layers. Attention dropout is drawn from the model's
generator (the PyG layer's own dropout is kept at 0 and applied here).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import Tensor
from torch_geometric.nn import GATConv
from torch_geometric.utils import add_self_loops, remove_self_loops, softmax

from securefgl.errors import ConfigError
from securefgl.nn._functional import dropout
from securefgl.nn.registry import register_model

if TYPE_CHECKING:
    from securefgl.training.batched import GraphBatch

__all__ = ["GAT"]


def _attend(
    xs: Tensor, a_src: Tensor, a_dst: Tensor, edge_index: Tensor, n: int, p: float, training: bool, gen
) -> Tensor:
    """Attention-weighted sum: xs ``(n, H, C)``, a_* ``(n, H)`` node scores -> ``(n, H, C)``."""
    src, dst = edge_index
    alpha = F.leaky_relu(a_src[src] + a_dst[dst], 0.2)
    alpha = softmax(alpha, dst, num_nodes=n)
    alpha = dropout(alpha, p, training, gen)
    out = torch.zeros_like(xs)
    out.index_add_(0, dst, xs[src] * alpha.unsqueeze(-1))
    return out


@register_model("gat")
class GAT(torch.nn.Module):
    """A ``layers``-deep GAT.

    Args:
        in_channels: ``F``.
        out_channels: ``C``.
        hidden: Width per head. (default: ``64``)
        layers: Number of GATConv layers. (default: ``2``)
        dropout: Feature dropout before every layer. (default: ``0.5``)
        heads: Heads of the hidden layers (concatenated). (default: ``8``)
        attention_dropout: Dropout on the attention coefficients. (default: ``0.0``)

    Shapes:
        x ``(N, F)``, edge_index ``(2, E)`` -> ``(N, C)`` logits.
    """

    @dataclass(frozen=True)
    class Options:
        heads: int = 8
        attention_dropout: float = 0.0

        def __post_init__(self) -> None:
            if self.heads < 1:
                raise ConfigError(f"model.options.heads must be >= 1, got {self.heads}")
            if not 0.0 <= self.attention_dropout < 1.0:
                raise ConfigError(
                    f"model.options.attention_dropout must be in [0, 1), got {self.attention_dropout}"
                )

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        *,
        hidden: int = 64,
        layers: int = 2,
        dropout: float = 0.5,
        heads: int = 8,
        attention_dropout: float = 0.0,
    ) -> None:
        super().__init__()
        convs = []
        fin = in_channels
        for i in range(layers):
            last = i == layers - 1
            h, c = (1, out_channels) if last else (heads, hidden)
            convs.append(GATConv(fin, c, heads=h, concat=not last, dropout=0.0))
            fin = h * c
        self.convs = torch.nn.ModuleList(convs)
        self.p = dropout
        self.attention_dropout = attention_dropout
        self.generator: torch.Generator | None = None

    def forward(self, x: Tensor, edge_index: Tensor) -> Tensor:
        if not (self.training and self.attention_dropout > 0):
            for i, conv in enumerate(self.convs):
                x = dropout(x, self.p, self.training, self.generator)
                x = conv(x, edge_index)
                if i < len(self.convs) - 1:
                    x = F.elu(x)
            return x
        # Attention dropout drawn from self.generator: the same math as GATConv.forward, spelled out.
        n = x.size(0)
        ei, _ = remove_self_loops(edge_index)
        ei, _ = add_self_loops(ei, num_nodes=n)
        for i, conv in enumerate(self.convs):
            x = dropout(x, self.p, self.training, self.generator)
            h, c = conv.heads, conv.out_channels
            xs = conv.lin(x).view(n, h, c)
            a_src = (xs * conv.att_src).sum(-1)
            a_dst = (xs * conv.att_dst).sum(-1)
            out = _attend(xs, a_src, a_dst, ei, n, self.attention_dropout, self.training, self.generator)
            out = out.reshape(n, h * c) if conv.concat else out.mean(dim=1)
            x = out + conv.bias
            if i < len(self.convs) - 1:
                x = F.elu(x)
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
        n = batch.num_rows
        ei = batch.self_loop_edges()
        x = batch.x
        for i, conv in enumerate(self.convs):
            pre = f"convs.{i}."
            x = (
                batch.input_dropout(self.p, training, generator)
                if i == 0
                else dropout(x, self.p, training, generator)
            )
            h, c = conv.heads, conv.out_channels
            xs = batch.linear(x, params[pre + "lin.weight"]).view(n, h, c)
            a_src = (xs * batch.per_row(params[pre + "att_src"].squeeze(1))).sum(-1)
            a_dst = (xs * batch.per_row(params[pre + "att_dst"].squeeze(1))).sum(-1)
            out = _attend(xs, a_src, a_dst, ei, n, self.attention_dropout, training, generator)
            out = out.reshape(n, h * c) if conv.concat else out.mean(dim=1)
            x = out + batch.per_row(params[pre + "bias"])
            if i < len(self.convs) - 1:
                x = F.elu(x)
        return x
