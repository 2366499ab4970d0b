r"""FedSpray's feature-structure encoder as both halves share it: parameter layout, initialisation, reference.

Part of :mod:`securefgl.algorithms.fedspray` (the method is documented on
:class:`~securefgl.algorithms.fedspray.FedSpray`). The encoder
:math:`\omega = (W_e, b_e, W_p, b_p, W_q, b_q)` is the shared model: the server initialises it
(:func:`init_encoder`), the clients train local copies of it (the forward pass is
:func:`securefgl.algorithms.fedspray.models.encoder_forward`), and both compute the round's reference
:math:`\omega_{\mathrm{ref}}` of the uploaded differences (:func:`reference_encoder`). Pure tensor code.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import torch
from torch import Tensor

__all__ = ["ENCODER_KEYS", "encoder_shapes", "init_encoder", "reference_encoder"]

#: The encoder's parameters, in upload order: embedding layer g_e, classifier g_p, projector g_q.
ENCODER_KEYS = ("W_e", "b_e", "W_p", "b_p", "W_q", "b_q")


def _uniform(shape: tuple[int, ...], low: float, high: float, gen: torch.Generator) -> Tensor:
    return torch.rand(shape, generator=gen) * (high - low) + low


def init_encoder(
    num_features: int,
    dim: int,
    num_classes: int,
    *,
    generator: torch.Generator,
    device: torch.device | str = "cpu",
) -> dict[str, Tensor]:
    r"""The global feature-structure encoder :math:`\omega_0 = (W_e, b_e, W_p, b_p, W_q, b_q)`.

    Every weight and bias is drawn from :math:`U(\pm 1/\sqrt{\mathrm{out}})`, ``out`` being the layer's
    output width (FedSpray's code). Shapes: :math:`W_e (F, D)`, :math:`b_e (D,)`, :math:`W_p, W_q (D, C)`,
    :math:`b_p, b_q (C,)`.
    """
    be, bc = 1 / math.sqrt(dim), 1 / math.sqrt(num_classes)
    enc = {
        "W_e": _uniform((num_features, dim), -be, be, generator),
        "b_e": _uniform((dim,), -be, be, generator),
        "W_p": _uniform((dim, num_classes), -bc, bc, generator),
        "b_p": _uniform((num_classes,), -bc, bc, generator),
        "W_q": _uniform((dim, num_classes), -bc, bc, generator),
        "b_q": _uniform((num_classes,), -bc, bc, generator),
    }
    return {k: v.to(device) for k, v in enc.items()}


def encoder_shapes(num_features: int, dim: int, num_classes: int) -> dict[str, tuple[int, ...]]:
    """Shapes of the encoder's parameters, in :data:`ENCODER_KEYS` order."""
    return {
        "W_e": (num_features, dim),
        "b_e": (dim,),
        "W_p": (dim, num_classes),
        "b_p": (num_classes,),
        "W_q": (dim, num_classes),
        "b_q": (num_classes,),
    }


def reference_encoder(enc: Mapping[str, Tensor], projector_init: str) -> dict[str, Tensor]:
    r"""What every client's local encoder starts from in a round, given the broadcast encoder.

    ``"global_q"``: the broadcast itself. ``"global_p_quirk"`` (FedSpray's code): the projector is loaded
    from the broadcast *classifier*, :math:`(W_q, b_q) \leftarrow (W_p, b_p)`.
    """
    ref = {k: enc[k] for k in ENCODER_KEYS}
    if projector_init == "global_p_quirk":
        ref["W_q"], ref["b_q"] = enc["W_p"], enc["b_p"]
    return ref
