"""``random``: each node goes to a client drawn uniformly at random (FedStruct)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from torch_geometric.data import Data

from securefgl.data.partition._base import _Result, _rng


@dataclass(frozen=True)
class RandomParams:
    """``random`` has no parameters."""


def _random(data: Data, k: int, seed: int, p: RandomParams) -> _Result:
    owner = _rng(seed, 1).integers(0, k, size=int(data.num_nodes), dtype=np.int64)
    return _Result(owner)
