"""``metis``: a ``pymetis`` k-way partition (minimum edge cut), and the METIS call the other methods reuse."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from torch_geometric.data import Data

from securefgl.data.partition._base import _Result
from securefgl.errors import PartitionError


@dataclass(frozen=True)
class MetisParams:
    """``metis`` parameters.

    Args:
        contiguous: Ask METIS for contiguous parts (fails on disconnected graphs). (default: ``False``)
    """

    contiguous: bool = False


def _metis(
    n: int,
    src: np.ndarray,
    dst: np.ndarray,
    nparts: int,
    seed: int,
    contiguous: bool = False,
    recursive: bool | None = None,
) -> np.ndarray:
    """pymetis partition of the graph given by directed edge lists (both directions, src-sorted).

    ``recursive=None`` keeps pymetis's choice (recursive bisection up to 8 parts, k-way above); ``False``
    forces k-way, ``True`` recursive bisection.
    """
    if nparts == 1:
        return np.zeros(n, dtype=np.int64)
    import pymetis

    order = np.argsort(src, kind="stable")
    src, dst = src[order], dst[order]
    xadj = np.concatenate([[0], np.cumsum(np.bincount(src, minlength=n))]).astype(np.int64)
    adjacency = pymetis.CSRAdjacency(xadj, dst.astype(np.int64))
    options = pymetis.Options(seed=int(seed) % (2**31 - 1))
    try:
        result = pymetis.part_graph(
            nparts, adjacency, options=options, contiguous=contiguous or None, recursive=recursive
        )
    except Exception as exc:  # METIS reports input problems as generic errors
        raise PartitionError(f"METIS could not split the graph into {nparts} parts: {exc}") from exc
    return np.asarray(result.vertex_part, dtype=np.int64)


def _metis_method(data: Data, k: int, seed: int, p: MetisParams) -> _Result:
    ei = data.edge_index.numpy()
    owner = _metis(int(data.num_nodes), ei[0], ei[1], k, seed, p.contiguous)
    return _Result(owner)
