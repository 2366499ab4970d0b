r"""What AdaFGL sums: step 1's extractor blocks (eq. 4); step 2 sums nothing; the blend phase sums counts.

Step 1 uploads FedAvg's weighted-weights blocks
(:func:`securefgl.algorithms.baselines.fedavg.schema.model_schema`): ``w.<param>``
:math:`= n_i\,\mathrm{clip}_B(W_i)` for every parameter tensor of the extractor and the count ``n``
:math:`= n_i` (:math:`|V_i|` with ``weighting="nodes"``), bounded by the public node-count bound.

With ``blend="select"`` a last phase of one round sums ``blend.val_correct``: for every weight
:math:`\gamma_g` of the public grid, how many of client :math:`i`'s validation nodes the blend
:math:`(1-\gamma_g)\hat Y_i + \gamma_g \hat P_i` gets right (a count vector, each entry at most :math:`|V_i|`).
With ``blend_alpha`` set it also sums ``blend.val_discordant``: for every :math:`\gamma_g`, the validation nodes on
which exactly one of that blend and the extractor (:math:`\gamma = 1`) is right (McNemar's discordant pairs).
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

from securefgl.algorithms.baselines.fedavg.schema import model_schema
from securefgl.protocols.encoding import BlockSpec, SumSchema

__all__ = ["blend_schema", "extractor_schema"]


def extractor_schema(
    broadcast: Mapping[str, torch.Tensor], *, param_bound: float, count_bound: int, max_clients: int
) -> SumSchema:
    """Step 1's sum for the extractor ``broadcast`` (FedAvg's ``upload="weights"`` blocks; no DP deltas)."""
    return model_schema(
        broadcast, param_bound=param_bound, count_bound=count_bound, delta=False, max_clients=max_clients
    )


def blend_schema(
    grid_size: int, *, count_bound: int, max_clients: int, discordant: bool = False
) -> SumSchema:
    """The blend phase's sum: ``blend.val_correct``, one validation count per grid weight, and with
    ``discordant`` ``blend.val_discordant`` (the same shape; ``blend_alpha``'s test)."""
    names = ["blend.val_correct", *(["blend.val_discordant"] if discordant else [])]
    return SumSchema(
        [BlockSpec(n, (grid_size,), kind="count", bound=count_bound) for n in names], max_clients=max_clients
    )
