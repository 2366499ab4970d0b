"""The contextual SBM generator."""

from __future__ import annotations

import time

import numpy as np
import pytest
import torch

from securefgl.data import edge_homophily, make_csbm
from securefgl.errors import ConfigError


def test_deterministic_by_seed() -> None:
    a, b = make_csbm(num_nodes=500, seed=3), make_csbm(num_nodes=500, seed=3)
    c = make_csbm(num_nodes=500, seed=4)
    assert torch.equal(a.edge_index, b.edge_index) and torch.equal(a.x, b.x) and torch.equal(a.y, b.y)
    assert not torch.equal(a.edge_index, c.edge_index)


@pytest.mark.parametrize("h", [0.05, 0.5, 0.9])
def test_edge_homophily_degree_and_cleanliness(h: float) -> None:
    d = make_csbm(num_nodes=4000, num_classes=4, avg_degree=8.0, homophily=h, num_features=8, seed=1)
    src, dst = d.edge_index.numpy()
    keys = src * d.num_nodes + dst
    assert not (src == dst).any() and np.unique(keys).size == keys.size
    assert np.array_equal(np.sort(keys), np.sort(dst * d.num_nodes + src))
    assert d.edge_index.shape[1] == 4000 * 8  # exactly N d / 2 undirected edges, both directions stored
    assert edge_homophily(d.edge_index, d.y) == pytest.approx(h, abs=0.002)


def test_imbalance_and_signal() -> None:
    d = make_csbm(num_nodes=3000, num_classes=3, imbalance=0.5, signal=3.0, num_features=32, seed=0)
    counts = torch.bincount(d.y).tolist()
    assert counts[0] > counts[1] > counts[2] and sum(counts) == 3000
    assert counts[0] / counts[2] == pytest.approx(4.0, rel=0.02)
    means = torch.stack([d.x[d.y == c].mean(0) for c in range(3)])
    # class means are separated by about signal * sqrt(F) and per-node noise is unit
    assert torch.cdist(means, means)[0, 1] > 0.5 * 3.0 * 32**0.5
    assert d.x.std(0).mean() > 0.9


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"homophily": 1.5}, "homophily"),
        ({"num_classes": 1}, "num_classes"),
        ({"num_nodes": 3}, "num_nodes"),
        ({"imbalance": 1.0}, "imbalance"),
        ({"seed": 1.5}, "seed must be an integer"),
        ({"avg_degree": -1}, "avg_degree"),
    ],
)
def test_bad_parameters(kwargs: dict, needle: str) -> None:
    with pytest.raises(ConfigError, match=needle):
        make_csbm(**kwargs)


@pytest.mark.slow
def test_million_nodes_in_seconds() -> None:
    t = time.perf_counter()
    d = make_csbm(
        num_nodes=1_000_000, num_classes=10, avg_degree=10.0, homophily=0.7, num_features=32, seed=0
    )
    elapsed = time.perf_counter() - t
    assert d.num_nodes == 1_000_000 and d.edge_index.shape[1] == 10_000_000
    assert elapsed < 30.0
