r"""FedLoG's local model: GraphSAGE embedder, head/tail prototype branches, degree mixing, prompt generator.

Part of :mod:`securefgl.algorithms.fedlog` (spec ``shared/specs/fedlog.md`` §2.1, §2.3, §2.4); both halves use
it (the server builds the initial model and reads the parameter names, the clients train it).

The embedder :math:`f_E` is a 2-layer mean-aggregation GraphSAGE. Each branch :math:`g_B`
(:math:`B \in \{H, T\}`) refines a layer-normed query :math:`h_v` against the branch's prototypes
:math:`z_p = f_E(X^B, I)_p` (Eqs. 6-10, paper semantics: a per-query mean over all :math:`C m` prototypes)

.. math::
    m_{pv} = \phi_m([\bar h_v \,\|\, \lVert z_p - h_v\rVert^2]),\quad
    h_v \leftarrow h_v + \frac{1}{|P|}\sum_p (z_p - h_v)\,\phi_x(m_{pv})

and predicts :math:`p^B(c\mid v) = \mathrm{softmax}_c(-\lVert \tilde h^B_v - \bar z^B_c\rVert^2)`; the two
branches are mixed with :math:`\alpha_v = \sigma(\deg(v) - (\tau + 1))`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch_geometric.nn import SAGEConv

from securefgl.nn._functional import dropout as _dropout
from securefgl.nn._functional import glorot_, init_parameters

if TYPE_CHECKING:
    from securefgl.algorithms.base import Setting
    from securefgl.algorithms.fedlog.options import FedLoGOptions

__all__ = [
    "Branch",
    "FedLoGNet",
    "PromptGenerator",
    "degree_alpha",
    "init_fedlog",
    "make_net",
    "neighbour_mean",
]


def neighbour_mean(h: Tensor, edge_index: Tensor) -> Tensor:
    """Mean of the neighbours' rows of ``h`` (self excluded; zero for isolated nodes). Shapes: (N, F)."""
    n = h.shape[0]
    src, dst = edge_index
    keep = src != dst
    src, dst = src[keep], dst[keep]
    out = torch.zeros_like(h).index_add_(0, dst, h[src])
    deg = torch.zeros(n, device=h.device, dtype=h.dtype).index_add_(
        0, dst, torch.ones_like(dst, dtype=h.dtype)
    )
    return out / deg.clamp(min=1).unsqueeze(-1)


def degree_alpha(edge_index: Tensor, num_nodes: int, tau: float) -> Tensor:
    r""":math:`\alpha_v = \sigma(\deg(v) - (\tau + 1))` with the degree counted without self-loops. Shape (N,)."""
    src, dst = edge_index
    keep = src != dst
    deg = torch.zeros(num_nodes, device=edge_index.device).index_add_(
        0, dst[keep], torch.ones(int(keep.sum()), device=edge_index.device)
    )
    return torch.sigmoid(deg - (tau + 1.0))


class _Layer(nn.Module):
    """One classifier layer: ``phi_m`` (65 -> 64 -> 64, SiLU) and ``phi_x`` (64 -> 64 -> 64 -> 1)."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.m1 = nn.Linear(dim + 1, dim)
        self.m2 = nn.Linear(dim, dim)
        self.x1 = nn.Linear(dim, dim)
        self.x2 = nn.Linear(dim, dim)
        self.x3 = nn.Linear(dim, 1, bias=False)
        nn.init.xavier_uniform_(self.x3.weight, gain=0.001)

    def forward(self, h: Tensor, hbar: Tensor, z: Tensor) -> Tensor:
        diff = z.unsqueeze(0) - h.unsqueeze(1)  # (N, P, D)
        dist = diff.pow(2).sum(-1, keepdim=True)  # (N, P, 1)
        dim = h.shape[1]
        # phi_m's first layer on [hbar || d] split into its two parts (hbar is shared over prototypes)
        m = F.linear(hbar, self.m1.weight[:, :dim], self.m1.bias).unsqueeze(1) + dist * self.m1.weight[:, dim]
        m = F.silu(self.m2(F.silu(m)))
        s = self.x3(F.silu(self.x2(F.silu(self.x1(m)))))  # (N, P, 1)
        return h + (diff * s).mean(1)


class Branch(nn.Module):
    """A prototype classifier branch ``g_H`` or ``g_T`` (spec §2.1, Eqs. 6-10)."""

    def __init__(self, dim: int, layers: int = 2, mode: str = "paper") -> None:
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.layers = nn.ModuleList(_Layer(dim) for _ in range(layers))
        self.mode = mode

    def forward(self, h: Tensor, hbar: Tensor, z: Tensor, class_proto: Tensor) -> Tensor:
        """Log-probabilities ``(N, C)`` from queries ``h``/``hbar`` ``(N, D)``, prototypes ``z`` ``(P, D)``."""
        h = self.norm(h)
        if self.mode == "paper":
            for layer in self.layers:
                h = layer(h, hbar, z)
        return torch.log_softmax(-torch.cdist(h, class_proto).pow(2), dim=-1)


class FedLoGNet(nn.Module):
    """Embedder + head and tail branches (the averaged model ``theta``).

    Args:
        in_dim: ``F``.
        hidden: Embedder hidden width. (default: ``128``)
        out_dim: Embedding width ``D``. (default: ``64``)
        dropout: Embedder dropout. (default: ``0.5``)
        mode: ``"paper"`` (Eqs. 8-10) or ``"released"`` (the official code's no-op refinement).

    Shapes:
        ``embed(x (N, F), edge_index (2, E)) -> (N, D)``.
    """

    def __init__(
        self, in_dim: int, hidden: int = 128, out_dim: int = 64, dropout: float = 0.5, mode: str = "paper"
    ) -> None:
        super().__init__()
        self.conv1 = SAGEConv(in_dim, hidden, aggr="mean")
        self.conv2 = SAGEConv(hidden, out_dim, aggr="mean")
        self.dropout = dropout
        self.head = Branch(out_dim, mode=mode)
        self.tail = Branch(out_dim, mode=mode)

    def embed(self, x: Tensor, edge_index: Tensor, generator: torch.Generator | None = None) -> Tensor:
        h = F.relu(self.conv1(x, edge_index))
        h = _dropout(h, self.dropout, self.training, generator)
        return self.conv2(h, edge_index)

    def prototypes(
        self, xs: Tensor, num_classes: int, generator: torch.Generator | None = None
    ) -> tuple[Tensor, Tensor]:
        """Prototype embeddings ``(C m, D)`` and class prototypes ``(C, D)`` of synthetic rows ``(C m, F)``.

        The synthetic nodes have an identity adjacency: one self-loop each.
        """
        loops = torch.arange(xs.shape[0], device=xs.device).repeat(2, 1)
        z = self.embed(xs, loops, generator)
        return z, z.view(num_classes, -1, z.shape[1]).mean(1)

    def branch_logp(
        self,
        x: Tensor,
        edge_index: Tensor,
        xh: Tensor,
        xt: Tensor,
        num_classes: int,
        generator: torch.Generator | None = None,
        index: Tensor | None = None,
    ) -> tuple[Tensor, Tensor]:
        """Head and tail log-probabilities ``(N, C)`` of the nodes of a graph (all, or the rows ``index``).

        The embedder always runs on the whole graph; only the branch refinement (``O(N C m D^2)``) is
        restricted to ``index`` (a training mini-batch needs its own rows only).
        """
        h = self.embed(x, edge_index, generator)
        hbar = neighbour_mean(h, edge_index)
        if index is not None:
            h, hbar = h[index], hbar[index]
        zh, ph = self.prototypes(xh, num_classes, generator)
        zt, pt = self.prototypes(xt, num_classes, generator)
        return self.head(h, hbar, zh, ph), self.tail(h, hbar, zt, pt)


class PromptGenerator(nn.Module):
    """``psi``: Linear(F, 256)-ReLU-Linear(256, 512)-ReLU-Dropout(0.5)-Linear(512, F)-tanh (spec §2.3)."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.l1 = nn.Linear(dim, 256)
        self.l2 = nn.Linear(256, 512)
        self.l3 = nn.Linear(512, dim)

    def forward(self, x: Tensor, generator: torch.Generator | None = None) -> Tensor:
        h = F.relu(self.l2(F.relu(self.l1(x))))
        return torch.tanh(self.l3(_dropout(h, 0.5, self.training, generator)))


def init_fedlog(module: nn.Module, generator: torch.Generator) -> nn.Module:
    """Glorot weights and zero biases from ``generator``; LayerNorm scales 1; ``phi_x``'s last layer gain 0.001."""
    init_parameters(module, generator)
    for name, sub in module.named_modules():
        if isinstance(sub, nn.LayerNorm):
            with torch.no_grad():
                sub.weight.fill_(1.0)
        if name.endswith(".x3"):
            glorot_(sub.weight, generator)
            with torch.no_grad():
                sub.weight.mul_(0.001)
    return module


def make_net(setting: Setting, options: FedLoGOptions, generator: torch.Generator) -> FedLoGNet:
    """A freshly initialised :class:`FedLoGNet` of the run, on ``setting.device``.

    The server's initial model :math:`\\theta_0` and every client's local model start from it.
    """
    o = options
    net = FedLoGNet(setting.num_features, o.hidden, o.out_dim, o.dropout, o.classifier_mode)
    return init_fedlog(net, generator).to(setting.device)
