r"""FedStruct's decoupled GCN (spec §2.6): :math:`Z_i = \bar A^{(i)} f_{\theta_f}(X_i) + \bar A_{[i]} g_{\theta_s}(S)`.

Aliakbari et al., *FedStruct*, https://arxiv.org/abs/2402.19163, eqs. (16), (17), (20). ``f`` and ``g`` are
MLPs ``LayerNorm -> Linear -> ReLU -> Dropout -> ... -> Linear`` (the authors' form); with Hop2Vec the
structure features ``S`` (``n x d_s``) are learned too (spec §2.2, §7 item 5).

Shapes:
    ``x``: ``(n_i, F)``; ``aloc``: ``(n_i, n_i)``; ``abar``: ``(n_i, n)``; ``s``: ``(n, d_s)``; output
    ``(n_i, C)`` logits.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import torch
from torch import nn

from securefgl.algorithms.fedstruct.options import feature_width

if TYPE_CHECKING:
    from securefgl.algorithms.base import Setting
    from securefgl.algorithms.fedstruct.options import FedStructOptions

__all__ = ["DecoupledGCN", "decoupled_gcn", "degree_onehot", "make_mlp"]


def make_mlp(
    in_dim: int,
    hidden: Sequence[int],
    out_dim: int,
    dropout: float,
    *,
    generator: torch.Generator | None = None,
) -> nn.Sequential:
    """``LayerNorm(in) -> [Linear -> ReLU -> Dropout]* -> Linear(out)``, initialised from ``generator``."""
    layers: list[nn.Module] = [nn.LayerNorm(in_dim)]
    dims = [in_dim, *hidden]
    for a, b in zip(dims[:-1], dims[1:], strict=True):
        layers += [nn.Linear(a, b), nn.ReLU(), nn.Dropout(dropout)]
    layers.append(nn.Linear(dims[-1], out_dim))
    mlp = nn.Sequential(*layers)
    if generator is not None:
        with torch.no_grad():
            for m in mlp:
                if isinstance(m, nn.Linear):
                    bound = 1.0 / m.in_features**0.5
                    m.weight.copy_(torch.rand(m.weight.shape, generator=generator) * 2 * bound - bound)
                    m.bias.copy_(torch.rand(m.bias.shape, generator=generator) * 2 * bound - bound)
    return mlp


class DecoupledGCN(nn.Module):
    r"""Feature branch ``f`` on local features, structure branch ``g`` on the structure features.

    Args:
        num_features: ``F``.
        num_classes: ``C``.
        d_s: Structure-feature width.
        hidden_f: Hidden widths of ``f``.
        hidden_s: Hidden widths of ``g``.
        dropout: Dropout after every hidden layer (of ``f``, and of ``g`` unless ``dropout_s`` is given).
        dropout_s: Dropout of ``g`` (default: ``dropout``).
        generator: Seeded initialisation.
    """

    def __init__(
        self,
        num_features: int,
        num_classes: int,
        d_s: int,
        hidden_f: Sequence[int],
        hidden_s: Sequence[int],
        dropout: float,
        *,
        dropout_s: float | None = None,
        generator: torch.Generator | None = None,
    ) -> None:
        super().__init__()
        self.f = make_mlp(num_features, hidden_f, num_classes, dropout, generator=generator)
        ds = dropout if dropout_s is None else dropout_s
        self.g = make_mlp(d_s, hidden_s, num_classes, ds, generator=generator)

    def forward(
        self, x: torch.Tensor, aloc: torch.Tensor, abar: torch.Tensor, s: torch.Tensor
    ) -> torch.Tensor:
        return aloc @ self.f(x) + abar @ self.g(s)


def degree_onehot(degree: torch.Tensor, d_s: int) -> torch.Tensor:
    """``(n, d_s)`` one-hot of the node degree clipped to ``d_s - 1`` (spec §2.2, "Deg")."""
    idx = degree.long().clamp(0, d_s - 1)
    return torch.nn.functional.one_hot(idx, d_s).to(torch.float32)


def decoupled_gcn(
    setting: Setting, options: FedStructOptions, generator: torch.Generator | None = None
) -> DecoupledGCN:
    """The run's :class:`DecoupledGCN` (widths from the public setting and the options; the same on both halves)."""
    o = options
    return DecoupledGCN(
        setting.num_features,
        setting.num_classes,
        feature_width(o),
        o.hidden_f,
        o.hidden_s,
        o.dropout,
        dropout_s=o.dropout_s,
        generator=generator,
    )
