r"""GAP's three modules as one ``torch.nn.Module`` of ``torch.nn.Linear`` layers (Opacus has per-sample rules).

* encoder: ``encoder_layers`` x (Linear + ReLU), the last of width ``encoder_dim``, with a linear ``head`` to the classes for its
  own training; :math:`X^{(0)}` is the encoder output (normalised by the aggregation module);
* classifier: one base layer (Linear + ReLU) per hop :math:`k = 0..K` on :math:`X^{(k)}`, concatenated, then
  a linear ``out`` layer to the classes.

With ``hops = 0`` only the encoder and its head are used: an MLP (the DP-MLP baseline under node-level DP).
Parameter names start with the part they belong to (``encoder.``, ``head.``, ``bases.``, ``out.``), which is
how each phase picks what it trains and sums.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from securefgl.nn._functional import dropout, init_parameters

__all__ = ["ENCODER_PARTS", "CLASSIFIER_PARTS", "GAPModel", "build_gap_model", "part_names"]

ENCODER_PARTS = ("encoder.", "head.")
CLASSIFIER_PARTS = ("bases.", "out.")


class _Dropout(torch.nn.Module):
    """Seeded dropout before every linear layer (``generator`` set by the client that trains)."""

    def __init__(self, p: float) -> None:
        super().__init__()
        self.p = p
        self.generator: torch.Generator | None = None

    def drop(self, x: Tensor) -> Tensor:
        return dropout(x, self.p, self.training, self.generator)


class _Encoder(_Dropout):
    """Encoder and head trained together: ``forward`` gives class logits."""

    def __init__(self, layers: torch.nn.ModuleList, head: torch.nn.Linear, p: float) -> None:
        super().__init__(p)
        self.encoder = layers
        self.head = head

    def embed(self, x: Tensor) -> Tensor:
        for lin in self.encoder:
            x = lin(self.drop(x)).relu()
        return x

    def forward(self, x: Tensor) -> Tensor:
        return self.head(self.drop(self.embed(x)))


class _Classifier(_Dropout):
    """Per-hop bases and the output layer: ``forward(x0, x1, ..., xK)`` gives class logits."""

    def __init__(self, bases: torch.nn.ModuleList, out: torch.nn.Linear, p: float) -> None:
        super().__init__(p)
        self.bases = bases
        self.out = out

    def forward(self, *xs: Tensor) -> Tensor:
        hs = [base(self.drop(x)).relu() for base, x in zip(self.bases, xs, strict=True)]
        return self.out(self.drop(torch.cat(hs, dim=1)))


class GAPModel(torch.nn.Module):
    """The encoder (with its head) and the classifier of GAP.

    Args:
        in_channels: ``F``.
        num_classes: ``C``.
        hidden: Width of every layer.
        hops: ``K``.
        encoder_layers: Layers of the encoder (the last one outputs ``encoder_dim``).
        encoder_dim: Width of :math:`X^{(0)}` and of every aggregate.
        dropout: Dropout before every linear layer (seeded: set ``enc.generator`` and ``cls.generator``).
        generator: Initialisation randomness (Glorot-uniform weights, zero biases); ``None`` leaves PyTorch's.
    """

    def __init__(
        self,
        in_channels: int,
        num_classes: int,
        *,
        hidden: int,
        hops: int,
        encoder_layers: int,
        encoder_dim: int,
        dropout: float = 0.0,
        generator: torch.Generator | None = None,
    ) -> None:
        super().__init__()
        dims = [in_channels] + [hidden] * (encoder_layers - 1) + [encoder_dim]
        enc = torch.nn.ModuleList(torch.nn.Linear(a, b) for a, b in zip(dims[:-1], dims[1:], strict=True))
        self.hops = hops
        self.enc = _Encoder(enc, torch.nn.Linear(encoder_dim, num_classes), dropout)
        self.cls = (
            _Classifier(
                torch.nn.ModuleList(torch.nn.Linear(encoder_dim, hidden) for _ in range(hops + 1)),
                torch.nn.Linear((hops + 1) * hidden, num_classes),
                dropout,
            )
            if hops > 0
            else None
        )
        if generator is not None:
            init_parameters(self, generator)

    def flat_state(self) -> dict[str, Tensor]:
        """Parameters by part-prefixed name (``encoder.0.weight``, ``head.bias``, ``bases.1.weight``, ...)."""
        out = {n: p.detach().clone() for n, p in self.enc.named_parameters()}
        if self.cls is not None:
            out.update({n: p.detach().clone() for n, p in self.cls.named_parameters()})
        return out

    def load_flat(self, params: dict[str, Tensor] | object) -> None:
        """Copy ``params`` (a :meth:`flat_state` mapping) into the modules."""
        with torch.no_grad():
            for n, p in self.enc.named_parameters():
                p.copy_(params[n])  # type: ignore[index]
            if self.cls is not None:
                for n, p in self.cls.named_parameters():
                    p.copy_(params[n])  # type: ignore[index]


def build_gap_model(
    setting: Any, options: Any, hops: int, *, dropout: float = 0.0, generator: torch.Generator | None = None
) -> GAPModel:
    """The run's GAP model (public ``setting`` and ``options``) on ``setting.device``."""
    return GAPModel(
        setting.num_features,
        setting.num_classes,
        hidden=setting.model.hidden,
        hops=hops,
        encoder_layers=options.encoder_layers,
        encoder_dim=options.encoder_dim,
        dropout=dropout,
        generator=generator,
    ).to(setting.device)


def part_names(params: dict[str, Tensor] | object, parts: tuple[str, ...]) -> list[str]:
    """The names of ``params`` that belong to ``parts`` (prefixes), in order."""
    return [n for n in params if n.startswith(parts)]  # type: ignore[attr-defined]
