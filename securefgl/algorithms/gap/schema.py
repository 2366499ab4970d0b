r"""What GAP sums in a round: the trained part's parameters (FedAvg's blocks) and a count.

The encoder phase sums ``encoder.*`` and ``head.*``, the classifier phase ``bases.*`` and ``out.*``, each as
FedAvg does (:func:`securefgl.algorithms.baselines.fedavg.schema.model_schema`). Under node-level DP every
round is one DP-SGD step instead: ``g.<param>`` is the client's clipped per-node gradient sum plus its noise
share (bound: ``count_bound * C`` plus 20 share standard deviations), with no count (a train-node count in the
sum would itself reveal whether a node is there), released only with all ``m`` noise shares in it.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

from securefgl.algorithms.baselines.fedavg.schema import model_schema
from securefgl.algorithms.gap.model import phase_parts
from securefgl.protocols.encoding import BlockSpec, SumSchema

__all__ = ["gradient_schema", "phase_params", "round_schema"]


def phase_params(
    broadcast: Mapping[str, torch.Tensor], phase: str, classifier: str = "gap"
) -> dict[str, torch.Tensor]:
    """The parameters a phase trains and sums (:func:`~securefgl.algorithms.gap.model.phase_parts`)."""
    parts = phase_parts(phase, classifier)
    return {n: v for n, v in broadcast.items() if n.startswith(parts)}


def round_schema(
    broadcast: Mapping[str, torch.Tensor],
    phase: str,
    *,
    classifier: str = "gap",
    param_bound: float,
    count_bound: int,
    delta: bool,
    max_clients: int,
) -> SumSchema:
    """The round's sum (see the module docstring); ``count_bound`` 1 for uniform weights or deltas."""
    return model_schema(
        phase_params(broadcast, phase, classifier),
        param_bound=param_bound,
        count_bound=count_bound,
        delta=delta,
        max_clients=max_clients,
    )


def gradient_schema(
    broadcast: Mapping[str, torch.Tensor],
    phase: str,
    *,
    classifier: str = "gap",
    clip: float,
    count_bound: int,
    share_std: float,
    noise_shares: int,
    dp: bool,
    max_clients: int,
) -> SumSchema:
    """A node-level DP-SGD round's sum: noisy clipped gradient sums, released with ``noise_shares`` shares."""
    bound = count_bound * clip + 20.0 * share_std
    blocks = [
        BlockSpec(f"g.{n}", tuple(v.shape), bound=bound, dp=dp)
        for n, v in phase_params(broadcast, phase, classifier).items()
    ]
    return SumSchema(blocks, max_clients=max_clients, min_contributors=min(noise_shares, max_clients))
