"""``louvain+`` / ``metis+``: O-pFGL's label-imbalance splits (spec ``opfgl.md`` §1.2).

Over-partition into ``num_coms`` groups (packed Louvain communities, or METIS parts), then ``KMeans(K)`` on the
groups' normalised label histograms; a client is the union of one cluster.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
from torch_geometric.data import Data

from securefgl.data.partition._base import _Result
from securefgl.data.partition._community import _greedy_pack, _louvain
from securefgl.data.partition._kmeans import _kmeans
from securefgl.data.partition._metis import _metis
from securefgl.errors import ConfigError, PartitionError


@dataclass(frozen=True)
class LouvainPlusParams:
    """``louvain+`` parameters (O-pFGL defaults).

    Args:
        num_coms: Number of owners the Louvain groups are packed into before KMeans. (default: 100)
        delta: Size slack: groups are cut at ``N // num_coms - delta`` nodes, owners accept up to
            ``target + delta``. (default: 20)
        resolution: Louvain resolution. (default: 1.0)
        n_init: KMeans restarts. (default: 10)
        backend: Louvain implementation, as for ``louvain``. (default: ``"auto"``)
        chunk_order: Order of the cut community pieces before packing: ``"breadth"`` (first pieces of all
            communities, then second pieces, ...: O-pFGL's reference packing, which mixes communities within an
            owner) or ``"community"`` (each community's pieces together: purer, more label-skewed owners).
            (default: ``"breadth"``)
    """

    num_coms: int = 100
    delta: int = 20
    resolution: float = 1.0
    n_init: int = 10
    backend: Literal["auto", "networkx", "vectorized"] = "auto"
    chunk_order: Literal["breadth", "community"] = "breadth"

    def __post_init__(self) -> None:
        if self.chunk_order not in ("breadth", "community"):
            raise ConfigError(
                f"chunk_order: invalid value {self.chunk_order!r}; valid choices: 'breadth', 'community'"
            )
        if self.num_coms < 1 or self.delta < 0 or self.n_init < 1 or self.resolution <= 0:
            raise ConfigError(
                f"need num_coms >= 1, delta >= 0, n_init >= 1, resolution > 0; got num_coms={self.num_coms}, "
                f"delta={self.delta}, n_init={self.n_init}, resolution={self.resolution}"
            )


@dataclass(frozen=True)
class MetisPlusParams:
    """``metis+`` parameters (O-pFGL defaults).

    Args:
        num_coms: Metis parts before KMeans. (default: 100)
        n_init: KMeans restarts. (default: 10)
    """

    num_coms: int = 100
    n_init: int = 10

    def __post_init__(self) -> None:
        if self.num_coms < 1 or self.n_init < 1:
            raise ConfigError(f"need num_coms >= 1 and n_init >= 1, got {self.num_coms}, {self.n_init}")


def _cluster_groups_by_labels(
    group_of: np.ndarray, y: np.ndarray, num_classes: int, k: int, seed: int, n_init: int, what: str
) -> tuple[np.ndarray, dict[str, Any]]:
    """O-pFGL step 4-6: KMeans(k) on the normalised label histograms of the groups; node -> client."""
    n_groups = int(group_of.max()) + 1
    valid = group_of >= 0
    hist = np.zeros((n_groups, num_classes), dtype=np.float64)
    np.add.at(hist, (group_of[valid], y[valid]), 1.0)
    sizes = hist.sum(1)
    nonempty = np.flatnonzero(sizes > 0)
    if nonempty.size < k:
        raise PartitionError(
            f"{what}: only {nonempty.size} non-empty groups for {k} clients; use fewer clients or more groups"
        )
    dist = hist[nonempty] / sizes[nonempty, None]
    labels = _kmeans(dist, k, seed, n_init)
    client_of_group = np.full(n_groups, -1, dtype=np.int64)
    client_of_group[nonempty] = labels
    owner = np.where(valid, client_of_group[np.maximum(group_of, 0)], -1)
    return owner, {"num_groups": int(nonempty.size), "group_sizes": sizes[nonempty].astype(int).tolist()}


def _louvain_plus(data: Data, k: int, seed: int, p: LouvainPlusParams) -> _Result:
    n = int(data.num_nodes)
    comms, backend = _louvain(data, seed, p.resolution, p.backend)
    group_of = _greedy_pack(comms, n, p.num_coms, p.delta, p.chunk_order)
    owner, info = _cluster_groups_by_labels(
        group_of, data.y.numpy(), int(data.num_classes), k, seed, p.n_init, "louvain+"
    )
    info.update(num_communities=len(comms), backend=backend)
    return _Result(owner, info=info)


def _metis_plus(data: Data, k: int, seed: int, p: MetisPlusParams) -> _Result:
    ei = data.edge_index.numpy()
    group_of = _metis(int(data.num_nodes), ei[0], ei[1], p.num_coms, seed)
    owner, info = _cluster_groups_by_labels(
        group_of, data.y.numpy(), int(data.num_classes), k, seed, p.n_init, "metis+"
    )
    return _Result(owner, info=info)
