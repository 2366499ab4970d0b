"""``kmeans``: KMeans on node features, size-capped (FedStruct), and the single-threaded KMeans call."""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass

import numpy as np
from torch_geometric.data import Data

from securefgl.data.partition._base import _Result
from securefgl.errors import ConfigError


@dataclass(frozen=True)
class KMeansParams:
    """``kmeans`` parameters (FedStruct).

    Args:
        cap: Enforce the size cap ``ceil(N / K) + delta``. (default: ``True``)
        delta: Slack of the cap. (default: 20)
        n_init: KMeans restarts. (default: 10)
    """

    cap: bool = True
    delta: int = 20
    n_init: int = 10

    def __post_init__(self) -> None:
        if self.delta < 0 or self.n_init < 1:
            raise ConfigError(f"need delta >= 0 and n_init >= 1, got {self.delta}, {self.n_init}")


def _kmeans(points: np.ndarray, k: int, seed: int, n_init: int) -> np.ndarray:
    from sklearn.cluster import KMeans
    from threadpoolctl import threadpool_limits

    # One thread: the result does not depend on the machine's thread count, and OpenMP spinning under CPU
    # contention (tests run in parallel) made multi-threaded KMeans up to 100x slower on 2-core machines.
    with warnings.catch_warnings(), threadpool_limits(limits=1):
        warnings.simplefilter("ignore")  # "distinct clusters < n_clusters" is checked by the caller
        km = KMeans(n_clusters=k, n_init=n_init, random_state=int(seed) % 2**32)
        return km.fit_predict(np.ascontiguousarray(points)).astype(np.int64)


def _split_to_cap(groups: list[np.ndarray], cap: int) -> list[np.ndarray]:
    out, todo = [], list(groups)
    while todo:
        g = todo.pop()
        if g.size > cap:
            half = g.size // 2
            todo.extend([g[:half], g[half:]])
        else:
            out.append(g)
    return out


def _kmeans_method(data: Data, k: int, seed: int, p: KMeansParams) -> _Result:
    n = int(data.num_nodes)
    x = data.x.numpy().astype(np.float32, copy=False)
    labels = _kmeans(x, k, seed, p.n_init)
    if not p.cap:
        return _Result(labels)
    cap = math.ceil(n / k) + p.delta
    groups = [np.flatnonzero(labels == c) for c in range(k)]
    pieces = _split_to_cap([g for g in groups if g.size], cap)
    pieces.sort(key=lambda a: (-a.size, int(a[0])))
    owner = np.full(n, -1, dtype=np.int64)
    sizes = np.zeros(k, dtype=np.int64)
    moved = 0
    for i, g in enumerate(pieces):
        if i < k:
            owner[g] = i
            sizes[i] += g.size
            continue
        while g.size:
            fits = np.flatnonzero(sizes + g.size <= cap)
            if fits.size:  # the first client (in order) that can take the whole group
                o, take = int(fits[0]), g.size
            else:  # no client can: move the excess into the client with the most room (k * cap >= n)
                o = int(np.argmax(cap - sizes))
                take = int(cap - sizes[o])
                moved += g.size - take
            owner[g[:take]] = o
            sizes[o] += take
            g = g[take:]
    return _Result(owner, info={"cap": int(cap), "pieces": len(pieces), "moved_nodes": int(moved)})
