"""``dirichlet``: label skew, each class split among the clients with proportions drawn from ``Dir(alpha)``."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from torch_geometric.data import Data

from securefgl.data.partition._base import _Result, _rng
from securefgl.errors import ConfigError, PartitionError


@dataclass(frozen=True)
class DirichletParams:
    """``dirichlet`` parameters.

    Args:
        alpha: Concentration; small values give strong label skew. (default: 0.5)
        min_size: Redraw until every client has at least this many nodes. (default: 1)
        max_tries: Redraws before giving up with a PartitionError. (default: 100)
    """

    alpha: float = 0.5
    min_size: int = 1
    max_tries: int = 100

    def __post_init__(self) -> None:
        if not self.alpha > 0 or not math.isfinite(self.alpha):
            raise ConfigError(f"alpha must be a finite number > 0, got {self.alpha}")
        if self.min_size < 1 or self.max_tries < 1:
            raise ConfigError(f"min_size and max_tries must be >= 1, got {self.min_size}, {self.max_tries}")


def _dirichlet(data: Data, k: int, seed: int, p: DirichletParams) -> _Result:
    y = data.y.numpy()
    n = y.shape[0]
    rng = _rng(seed, 2)
    classes = np.unique(y[y >= 0])
    for attempt in range(p.max_tries):
        owner = np.full(n, -1, dtype=np.int64)
        for c in classes:
            idx = np.flatnonzero(y == c)
            idx = idx[rng.permutation(idx.size)]
            prop = rng.dirichlet(np.full(k, p.alpha))
            cuts = (np.cumsum(prop)[:-1] * idx.size).astype(np.int64)
            for client, part in enumerate(np.split(idx, cuts)):
                owner[part] = client
        if np.bincount(owner[owner >= 0], minlength=k).min() >= p.min_size:
            return _Result(owner, info={"attempts": attempt + 1})
    raise PartitionError(
        f"dirichlet: no draw in {p.max_tries} tries gave every one of the {k} clients at least {p.min_size} nodes; "
        f"raise alpha, lower min_size or use fewer clients"
    )
