r"""FedSpray's models: the clients' batched personalised GNNs and the encoder's forward pass.

Part of :mod:`securefgl.algorithms.fedspray` (the method is documented on
:class:`~securefgl.algorithms.fedspray.FedSpray`), client side. Pure tensor functions over stacked per-client
parameters ``(K, ...)`` and a client batch (:class:`~securefgl.training.batched.GraphBatch` in the
``packed`` layout); the encoder's parameters themselves are in
:mod:`securefgl.algorithms.fedspray.encoder`.

Shapes: ``K`` clients, ``N`` nodes of all of them, ``F`` input features, ``H`` hidden width, ``C`` classes,
``D`` proxy / embedding width (``d_s``).
"""

from __future__ import annotations

import torch
from torch import Tensor

from securefgl.algorithms.fedspray.encoder import _uniform
from securefgl.errors import ConfigError
from securefgl.training.batched import GraphBatch

__all__ = [
    "GNN_KINDS",
    "encoder_forward",
    "gnn_forward",
    "gnn_param_shapes",
    "to_math_layout",
    "uniform01_like",
]

GNN_KINDS = ("gcn", "sgc", "sage")


def gnn_param_shapes(
    kind: str, num_features: int, num_classes: int, hidden: int, layers: int
) -> dict[str, tuple[int, ...]]:
    """Parameter names and shapes of a securefgl GNN (``securefgl.nn``'s names; weights ``(out, in)``)."""
    if kind == "sgc":
        return {"conv.lin.weight": (num_classes, num_features), "conv.lin.bias": (num_classes,)}
    dims = [num_features] + [hidden] * (layers - 1) + [num_classes]
    out: dict[str, tuple[int, ...]] = {}
    for i, (a, b) in enumerate(zip(dims[:-1], dims[1:], strict=True)):
        if kind == "gcn":
            out[f"convs.{i}.lin.weight"] = (b, a)
            out[f"convs.{i}.bias"] = (b,)
        elif kind == "sage":
            out[f"convs.{i}.lin_l.weight"] = (b, a)
            out[f"convs.{i}.lin_l.bias"] = (b,)
            out[f"convs.{i}.lin_r.weight"] = (b, a)
        else:
            raise ConfigError(f"unknown FedSpray GNN {kind!r}; valid choices: {', '.join(GNN_KINDS)}")
    return out


def uniform01_like(params: dict[str, Tensor], generator: torch.Generator) -> dict[str, Tensor]:
    """FedSpray's code initialisation: every parameter, biases included, from :math:`U[0,1)`."""
    return {k: _uniform(tuple(v.shape), 0.0, 1.0, generator).to(v.device) for k, v in params.items()}


def gnn_forward(
    kind: str,
    params: dict[str, Tensor],
    pack: GraphBatch,
    *,
    layers: int = 2,
    hops: int = 2,
    dropout: float = 0.0,
    generator: torch.Generator | None = None,
) -> Tensor:
    r"""Logits of every client's own GNN on its own graph: stacked ``params`` ``(K, ...)`` -> ``(N, C)``.

    ``params`` use securefgl.nn's names with weights in ``(K, in, out)`` layout (:func:`to_math_layout`).

    The same networks as :mod:`securefgl.nn` (dropout before every layer, ReLU between layers):

    - ``gcn``: :math:`h' = \hat A\, h W^\top + b`.
    - ``sage``: :math:`h_i' = \mathrm{mean}_{j \in N(i)} h_j W_l^\top + b_l + h_i W_r^\top`.
    - ``sgc``: :math:`\hat A^{K} X W^\top + b` (``hops`` = K).

    ``dropout > 0`` draws masks from ``generator`` (training); 0 is the deterministic network.
    """
    b = pack.row_client

    def drop(h: Tensor) -> Tensor:
        if dropout == 0.0:
            return h
        keep = torch.empty_like(h).bernoulli_(1.0 - dropout, generator=generator)
        return h * keep / (1.0 - dropout)

    if kind == "sgc":
        z = drop(pack.propagated(hops))
        return pack.segment_matmul(z, params["conv.lin.weight"]) + params["conv.lin.bias"][b]
    if kind not in ("gcn", "sage"):
        raise ConfigError(f"unknown FedSpray GNN {kind!r}; valid choices: {', '.join(GNN_KINDS)}")
    feats = pack.features(dropout, generator)
    h: Tensor | None = None
    for i in range(layers):
        if i > 0:
            h = drop(h)  # type: ignore[arg-type]

        def lin(name: str, i: int = i, h: Tensor | None = h) -> Tensor:
            if i == 0:
                return feats.linear(params[name])
            return pack.segment_matmul(h, params[name])  # type: ignore[arg-type]

        if kind == "gcn":
            out = pack.gcn_operator() @ lin(f"convs.{i}.lin.weight") + params[f"convs.{i}.bias"][b]
        else:
            out = (
                pack.mean_operator() @ lin(f"convs.{i}.lin_l.weight")
                + params[f"convs.{i}.lin_l.bias"][b]
                + lin(f"convs.{i}.lin_r.weight")
            )
        h = torch.relu(out) if i < layers - 1 else out
    return h  # type: ignore[return-value]


def to_math_layout(name: str, value: Tensor) -> Tensor:
    """A securefgl.nn parameter in the layout :func:`gnn_forward` uses: weights ``(out, in)`` -> ``(in, out)``.

    Works on one client's tensor or a stacked one (the last two axes are swapped); the map is its own inverse.
    """
    return value.transpose(-1, -2).contiguous() if name.endswith("weight") else value


def encoder_forward(enc: dict[str, Tensor], pack: GraphBatch, proxies: Tensor) -> tuple[Tensor, Tensor]:
    r"""Classifier and projector logits of the feature-structure encoder.

    .. math::

        e_i = \mathrm{ReLU}(x_i W_e + b_e),\quad o^p_i = (e_i + s_i) W_p + b_p,\quad o^q_i = e_i W_q + b_q.

    ``enc`` is the global encoder (2-D weights, shared by all nodes) or the clients' local copies stacked
    ``(K, ...)``.

    Shapes:
        proxies: ``(N, D)``. Returns ``(o_p, o_q)``, each ``(N, C)``.
    """
    feats = pack.features()
    if enc["W_e"].dim() == 2:
        e = torch.relu(feats.linear(enc["W_e"]) + enc["b_e"])
        return (e + proxies) @ enc["W_p"] + enc["b_p"], e @ enc["W_q"] + enc["b_q"]
    b = pack.row_client
    e = torch.relu(feats.linear(enc["W_e"]) + enc["b_e"][b])
    o_p = pack.segment_matmul(e + proxies, enc["W_p"]) + enc["b_p"][b]
    o_q = pack.segment_matmul(e, enc["W_q"]) + enc["b_q"][b]
    return o_p, o_q
