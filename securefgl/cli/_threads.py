"""The default number of CPU threads of ``securefgl run`` and ``securefgl audit`` when ``--threads`` is not given.

Torch's own default (one thread per core) is badly wrong for the small graphs most runs use: their
operations are tiny, so threads mostly wait on each other, and on a busy machine they also wait for cores.
Measured on a 2-core machine shared with other jobs, the synthetic default took 72-84 s with torch's default
against 10 s with one thread (issue #26). Large graphs do gain from a few threads when cores are free. So:
one thread below :data:`LARGE_GRAPH_NODES` nodes; above it, the cores left free by the current load, at most
:data:`MAX_THREADS`.
"""

from __future__ import annotations

import os

__all__ = ["LARGE_GRAPH_NODES", "MAX_THREADS", "approximate_nodes", "default_threads"]

#: Graphs with at least this many nodes get more than one thread by default.
LARGE_GRAPH_NODES = 20_000

#: Upper bound of the default (more threads rarely help the sparse operations of these models).
MAX_THREADS = 4

#: Published node counts of the datasets of at least :data:`LARGE_GRAPH_NODES` nodes (others are smaller).
_LARGE = {
    "Physics": 34_493,
    "Roman-empire": 22_662,
    "Amazon-ratings": 24_492,
    "Questions": 48_921,
    "Flickr": 89_250,
    "Reddit": 232_965,
    "ogbn-arxiv": 169_343,
    "ogbn-products": 2_449_029,
}


def approximate_nodes(dataset: str, csbm_nodes: int = 3000) -> int:
    """Nodes of ``dataset`` (case-insensitive): the synthetic graph's configured size, else its published size
    when large, else ``0`` (a graph under :data:`LARGE_GRAPH_NODES` nodes)."""
    key = dataset.strip().lower().replace("_", "-")
    if key in ("csbm", "synthetic"):
        return int(csbm_nodes)
    return next((n for name, n in _LARGE.items() if name.lower() == key), 0)


def default_threads(nodes: int) -> int:
    """1 for graphs under :data:`LARGE_GRAPH_NODES` nodes; else the idle cores (cores minus the 1-minute load
    average), between 1 and :data:`MAX_THREADS`."""
    if nodes < LARGE_GRAPH_NODES:
        return 1
    cores = os.cpu_count() or 1
    try:
        load = os.getloadavg()[0]
    except OSError:  # not available on this platform
        load = 0.0
    return max(1, min(MAX_THREADS, cores - round(load)))
