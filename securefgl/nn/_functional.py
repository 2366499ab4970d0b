"""Internal helpers shared by the model families: seeded initialisation and seeded dropout."""

from __future__ import annotations

import math

import torch
from torch import Tensor

__all__ = ["dropout", "glorot_", "init_parameters", "set_generator"]


def glorot_(param: Tensor, generator: torch.Generator) -> None:
    """Glorot-uniform in place, drawn on the CPU from ``generator`` (so CPU and CUDA runs agree)."""
    fan_in, fan_out = param.size(-1), param.size(-2)
    bound = math.sqrt(6.0 / (fan_in + fan_out))
    values = torch.empty(param.shape, dtype=param.dtype).uniform_(-bound, bound, generator=generator)
    with torch.no_grad():
        param.copy_(values.to(param.device))


def init_parameters(module: torch.nn.Module, generator: torch.Generator) -> None:
    """Initialise every parameter of ``module``: biases zero, everything else Glorot-uniform.

    Parameters are visited in ``named_parameters`` order, so the same generator state gives the same model.
    """
    if generator.device.type != "cpu":
        raise ValueError(f"init_parameters needs a CPU generator, got one on {generator.device}")
    for name, param in module.named_parameters():
        if name.endswith("bias") or param.dim() < 2:
            with torch.no_grad():
                param.zero_()
        else:
            glorot_(param, generator)


def dropout(x: Tensor, p: float, training: bool, generator: torch.Generator | None) -> Tensor:
    """Inverted dropout whose mask comes from ``generator`` (global RNG only when it is ``None``).

    Each element is kept with probability ``1 - p`` and scaled by ``1 / (1 - p)``. For a large input that
    needs no gradient and is mostly zeros (bag-of-words node features), only the non-zero entries draw a
    random number: dropping a zero changes nothing, so the output has the same distribution at a fraction
    of the cost.

    Args:
        x: Input of any shape.
        p: Drop probability in ``[0, 1)``.
        training: Identity when ``False`` or ``p == 0``.
        generator: On ``x``'s device.
    """
    if not training or p == 0.0:
        return x
    scale = 1.0 / (1.0 - p)
    if not x.requires_grad and x.numel() >= _SPARSE_MIN:
        flat = x.reshape(-1)
        nz = (flat != 0).nonzero().squeeze(1)
        if nz.numel() <= _SPARSE_DENSITY * flat.numel():
            keep = torch.rand(nz.numel(), generator=generator, device=x.device) >= p
            nz = nz[keep]
            out = torch.zeros_like(flat)
            out[nz] = flat[nz] * scale
            return out.view_as(x)
    keep = torch.rand(x.shape, generator=generator, device=x.device, dtype=x.dtype) >= p
    return x * keep * scale


_SPARSE_MIN = 1 << 16
_SPARSE_DENSITY = 0.25


def set_generator(module: torch.nn.Module, generator: torch.Generator | None) -> None:
    """Make ``module`` (a securefgl model) draw its dropout masks from ``generator``."""
    module.generator = generator
