r"""What AdaFGL sums: step 1's extractor blocks (eq. 4); step 2 sums nothing.

Step 1 uploads FedAvg's weighted-weights blocks
(:func:`securefgl.algorithms.baselines.fedavg.schema.model_schema`): ``w.<param>``
:math:`= n_i\,\mathrm{clip}_B(W_i)` for every parameter tensor of the extractor and the count ``n``
:math:`= n_i` (:math:`|V_i|` with ``weighting="nodes"``), bounded by the public node-count bound.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

from securefgl.algorithms.baselines.fedavg.schema import model_schema
from securefgl.protocols.encoding import SumSchema

__all__ = ["extractor_schema"]


def extractor_schema(
    broadcast: Mapping[str, torch.Tensor], *, param_bound: float, count_bound: int, max_clients: int
) -> SumSchema:
    """Step 1's sum for the extractor ``broadcast`` (FedAvg's ``upload="weights"`` blocks; no DP deltas)."""
    return model_schema(
        broadcast, param_bound=param_bound, count_bound=count_bound, delta=False, max_clients=max_clients
    )
