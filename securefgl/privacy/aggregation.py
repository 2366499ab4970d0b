r"""Aggregation perturbation (GAP): noisy multi-hop neighbourhood sums of unit-norm embeddings, computed once.

.. math::
    X^{(0)} = \mathrm{normalize}(H),\qquad
    \tilde X^{(k)} = A^\top X^{(k-1)} + \mathcal{N}(0, \sigma^2 I),\qquad
    X^{(k)} = \mathrm{normalize}(\tilde X^{(k)}),\quad k = 1..K

with every row normalised to unit L2 norm. Removing one undirected edge changes two rows of :math:`A^\top X` by
one unit row each (sensitivity :math:`\sqrt 2`; GAP states 1 for a directed edge); removing one node of a graph
of degree at most ``D`` changes at most ``D`` rows (sensitivity :math:`\sqrt D`; the removed node's own rows
leave the output). Each hop is one Gaussian mechanism with noise multiplier :math:`\sigma / \Delta`; the
later hops read only earlier noisy outputs (post-processing), so ``K`` hops compose ``K`` mechanisms, and
training on :math:`X^{(0..K)}` queries the edges no further.
"""

from __future__ import annotations

import math

import torch

from securefgl.errors import ConfigError

__all__ = ["aggregation_sensitivity", "normalize_rows", "perturbed_aggregates"]


def aggregation_sensitivity(unit: str, degree_bound: int | None) -> float:
    """L2 sensitivity of one hop :math:`A^\\top X` (unit-norm rows) for ``unit`` ``"edge"`` or ``"node"``."""
    if unit == "edge":
        return math.sqrt(2.0)
    if unit == "node":
        if degree_bound is None or degree_bound < 1:
            raise ConfigError(f"node-level sensitivity needs a degree bound >= 1, got {degree_bound}")
        return math.sqrt(float(degree_bound))
    raise ConfigError(f"privacy unit {unit!r} has no aggregation sensitivity; valid: 'edge', 'node'")


def normalize_rows(x: torch.Tensor, eps: float = 1e-12) -> torch.Tensor:
    """Every row scaled to unit L2 norm (zero rows stay zero)."""
    return x / x.norm(dim=1, keepdim=True).clamp_min(eps)


def perturbed_aggregates(
    x0: torch.Tensor,
    edge_index: torch.Tensor,
    hops: int,
    *,
    noise_std: float,
    generator: torch.Generator | None,
) -> list[torch.Tensor]:
    """``[X^(0), X^(1), ..., X^(K)]``: the normalised embeddings and ``hops`` noisy normalised aggregates.

    Args:
        x0: ``(N, d)`` node embeddings (normalised here).
        edge_index: ``(2, E)`` directed edges ``src -> dst``; row ``dst`` sums its sources (``A^T X``).
        hops: ``K >= 0``.
        noise_std: :math:`\\sigma`, the standard deviation of the Gaussian noise on every entry (0: none).
        generator: Noise randomness (on ``x0``'s device); required when ``noise_std > 0``.
    """
    if hops < 0:
        raise ConfigError(f"hops must be >= 0, got {hops}")
    if noise_std < 0 or not math.isfinite(noise_std):
        raise ConfigError(f"noise_std must be a finite number >= 0, got {noise_std}")
    if noise_std > 0 and generator is None:
        raise ConfigError("a noise generator is required when noise_std > 0")
    out = [normalize_rows(x0)]
    src, dst = edge_index[0], edge_index[1]
    for _ in range(hops):
        prev = out[-1]
        agg = torch.zeros_like(prev).index_add_(0, dst, prev[src])
        if noise_std > 0:
            agg = agg + noise_std * torch.randn(
                agg.shape, generator=generator, device=agg.device, dtype=agg.dtype
            )
        out.append(normalize_rows(agg))
    return out
