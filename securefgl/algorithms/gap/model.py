r"""GAP's three modules as one ``torch.nn.Module`` of ``torch.nn.Linear`` layers (Opacus has per-sample rules).

* encoder: ``encoder_layers`` x (Linear + ReLU), the last of width ``encoder_dim``, with a linear ``head`` to
  the classes for its own training; :math:`X^{(0)}` (normalised by the aggregation module) is the encoder
  output (``embedding="hidden"``, GAP's paper), the head's class probabilities (``"prediction"``) or the
  one-hot predicted class (``"vote"``: each aggregate is then a noisy count of the neighbours' predicted
  classes, the whole unit norm of a row in one coordinate), or the node's raw features (``"features"``: no
  encoder in the aggregation, for graphs whose few features describe a node's surroundings rather than the node,
  such as Minesweeper's counts of neighbouring mines; the hops then cost no encoder training before them), or
  the one-hot training labels (``"labels"``: zero rows for nodes whose label the client does not train on, so
  each aggregate is a noisy count of the neighbours' known classes, the "label trick" under GAP's noise);
* classifier ``"gap"`` (GAP's paper): one base layer (Linear + ReLU) per hop :math:`k = 0..K` on
  :math:`X^{(k)}`, concatenated, then a linear ``out`` layer to the classes, the encoder frozen;
* classifier ``"head"``: the frozen encoder's logits plus the same links, on exact (un-noised) aggregates: the
  links are trained with full-batch DP gradient descent at the node-level sensitivity of the sum, ``(2D + 1) C``
  for one hop (a node is its own example and in the aggregates of at most ``D`` others; ``K`` hops:
  :func:`~securefgl.algorithms.gap.plan.head_sensitivity`), so the released model is node-DP without noising
  the aggregates, and predictions read the client's exact graph (not covered when published);
* classifier ``"noisy-head"``: the same head on GAP's noised aggregates (released once, so a node's example reads
  only its own logits, label and rows of them): full-batch DP gradient descent at sensitivity ``C``, and GAP's
  guarantee, predictions included;
* classifier ``"residual"``: the encoder's own logits on the raw features plus a linear ``link`` per hop
  :math:`k = 1..K`, started at zero and trained with the encoder: the classifier phase starts from the
  encoder's prediction, and its DP-SGD steps keep improving the encoder instead of fitting a new model on a
  frozen embedding.

With ``hops = 0`` only the encoder and its head are used: an MLP (the DP-MLP baseline under node-level DP).
Parameter names start with the part they belong to (``encoder.``, ``head.``, ``bases.``, ``out.``, ``links.``),
which is how each phase picks what it trains and sums.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from securefgl.errors import ConfigError
from securefgl.nn._functional import dropout, init_parameters

__all__ = [
    "CLASSIFIER_PARTS",
    "ENCODER_PARTS",
    "HEADS",
    "RESIDUAL_PARTS",
    "GAPModel",
    "build_gap_model",
    "part_names",
    "phase_parts",
]

ENCODER_PARTS = ("encoder.", "head.")
#: The classifiers that are a linear term per hop on the frozen encoder's logits (exact or noised aggregates).
HEADS = ("head", "noisy-head")
CLASSIFIER_PARTS = ("bases.", "out.")
RESIDUAL_PARTS = ("links.",)


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


class _Residual(_Dropout):
    """The encoder's own logits plus one linear term per aggregation hop: ``forward(x, x1, ..., xK)``.

    The encoder and head are the :class:`_Encoder`'s own modules (trained on in the classifier phase); the
    ``links`` start at zero, so the classifier starts as the encoder's prediction.
    """

    def __init__(self, enc: _Encoder, links: torch.nn.ModuleList, p: float) -> None:
        super().__init__(p)
        self.encoder = enc.encoder
        self.head = enc.head
        self.links = links

    def forward(self, x: Tensor, *aggs: Tensor) -> Tensor:
        for lin in self.encoder:
            x = lin(self.drop(x)).relu()
        out = self.head(self.drop(x))
        for link, a in zip(self.links, aggs, strict=True):
            out = out + link(a)
        return out


class _Head(_Dropout):
    """The frozen encoder's logits (an input) plus one linear term per hop: ``forward(logits, x1, ..., xK)``."""

    def __init__(self, links: torch.nn.ModuleList) -> None:
        super().__init__(0.0)
        self.links = links

    def forward(self, logits: Tensor, *aggs: Tensor) -> Tensor:
        for link, a in zip(self.links, aggs, strict=True):
            logits = logits + link(a)
        return logits


class GAPModel(torch.nn.Module):
    """The encoder (with its head) and the classifier of GAP.

    Args:
        in_channels: ``F``.
        num_classes: ``C``.
        hidden: Width of every layer.
        hops: ``K``.
        encoder_layers: Layers of the encoder (the last one outputs ``encoder_dim``).
        encoder_dim: Width of the encoder output.
        embedding: :math:`X^{(0)}`: ``"hidden"`` (the encoder output, ``encoder_dim`` wide), ``"prediction"``
            (the head's class probabilities) or ``"vote"`` (the one-hot predicted class), both ``C`` wide, or
            ``"features"`` (the input features, ``F`` wide), or ``"labels"`` (the one-hot training labels, ``C``
            wide) (:meth:`embedding`).
        classifier: ``"gap"`` (per-hop layers, concatenated, then a linear output) or ``"residual"`` (the
            encoder's logits plus a zero-initialised linear term per hop ``k >= 1``; see :class:`_Residual`) or
            ``"head"`` or ``"noisy-head"`` (the same terms on the frozen encoder's logits; see :class:`_Head`).
        link_prior: Start of every link's weight as ``link_prior * I`` when the aggregates are ``C`` wide (a
            public prior: a neighbour's vote backs its class); 0 starts the links at zero.
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
        embedding: str = "hidden",
        classifier: str = "gap",
        link_prior: float = 0.0,
        dropout: float = 0.0,
        generator: torch.Generator | None = None,
    ) -> None:
        super().__init__()
        dims = [in_channels] + [hidden] * (encoder_layers - 1) + [encoder_dim]
        enc = torch.nn.ModuleList(torch.nn.Linear(a, b) for a, b in zip(dims[:-1], dims[1:], strict=True))
        self.hops = hops
        self.embedding_kind = embedding
        self.enc = _Encoder(enc, torch.nn.Linear(encoder_dim, num_classes), dropout)
        class_wide = embedding in ("prediction", "vote", "labels")
        width = num_classes if class_wide else in_channels if embedding == "features" else encoder_dim
        self.cls: _Classifier | _Residual | _Head | None = None
        if hops > 0 and classifier in HEADS:
            self.cls = _Head(torch.nn.ModuleList(torch.nn.Linear(width, num_classes) for _ in range(hops)))
        elif hops > 0 and classifier == "residual":
            links = torch.nn.ModuleList(torch.nn.Linear(width, num_classes) for _ in range(hops))
            self.cls = _Residual(self.enc, links, dropout)
        elif hops > 0:
            self.cls = _Classifier(
                torch.nn.ModuleList(torch.nn.Linear(width, hidden) for _ in range(hops + 1)),
                torch.nn.Linear((hops + 1) * hidden, num_classes),
                dropout,
            )
        if generator is not None:
            init_parameters(self, generator)
        if isinstance(self.cls, _Residual | _Head):
            with torch.no_grad():
                for p in self.cls.links.parameters():
                    p.zero_()
                if link_prior and class_wide:  # a neighbour's vote backs its class
                    for link in self.cls.links:
                        link.weight.copy_(link_prior * torch.eye(num_classes))

    @property
    def residual(self) -> bool:
        """Whether the classifier is the encoder plus per-hop terms (it then reads the raw features)."""
        return isinstance(self.cls, _Residual)

    def classifier_inputs(self, x: Tensor, aggregates: list[Tensor]) -> list[Tensor]:
        """What the classifier reads: :math:`X^{(0..K)}`, or the features and :math:`X^{(1..K)}` (residual)."""
        if isinstance(self.cls, _Head):
            with torch.no_grad():
                return [self.enc(x), *aggregates[1:]]
        return [x, *aggregates[1:]] if self.residual else list(aggregates)

    def embedding(self, x: Tensor, labels: Tensor | None = None) -> Tensor:
        """:math:`X^{(0)}` before normalisation: the encoder output, the head's probabilities, its one-hot class,
        the features themselves, or ``labels`` (``"labels"``: the one-hot known labels, zero rows elsewhere).

        Raises:
            ConfigError: ``"labels"`` without ``labels``.
        """
        if self.embedding_kind == "features":
            return x
        if self.embedding_kind == "labels":
            if labels is None:
                raise ConfigError("embedding 'labels' needs the one-hot labels it aggregates")
            return labels.to(x.dtype)
        if self.embedding_kind == "prediction":
            return self.enc(x).softmax(dim=-1)
        if self.embedding_kind == "vote":
            logits = self.enc(x)
            return torch.nn.functional.one_hot(logits.argmax(dim=-1), logits.shape[-1]).to(logits.dtype)
        return self.enc.embed(x)

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
        embedding=options.embedding,
        classifier=options.classifier,
        link_prior=options.link_prior,
        dropout=dropout,
        generator=generator,
    ).to(setting.device)


def phase_parts(phase: str, classifier: str) -> tuple[str, ...]:
    """The parameter-name prefixes a phase trains: the encoder and head, then the classifier (for
    ``"residual"``: the encoder, head and links)."""
    if phase == "encoder":
        return ENCODER_PARTS
    if classifier in HEADS:
        return RESIDUAL_PARTS
    return ENCODER_PARTS + RESIDUAL_PARTS if classifier == "residual" else CLASSIFIER_PARTS


def part_names(params: dict[str, Tensor] | object, parts: tuple[str, ...]) -> list[str]:
    """The names of ``params`` that belong to ``parts`` (prefixes), in order."""
    return [n for n in params if n.startswith(parts)]  # type: ignore[attr-defined]
