"""Degree bounding and aggregation perturbation."""

from __future__ import annotations

import math

import pytest
import torch

from securefgl.errors import ConfigError
from securefgl.privacy import (
    aggregation_sensitivity,
    bound_degree,
    max_degree,
    normalize_rows,
    perturbed_aggregates,
    undirected_edges,
)


def _star_plus_ring(n_leaves: int = 30) -> torch.Tensor:
    hub = [(0, i) for i in range(1, n_leaves + 1)]
    ring = [(i, i + 1) for i in range(1, n_leaves)]
    e = torch.tensor(hub + ring).T
    return torch.cat([e, e.flip(0)], dim=1)


def test_a_node_above_the_bound_keeps_only_sampled_edges() -> None:
    ei = _star_plus_ring()
    n = 31
    assert max_degree(ei, n) == 30
    kept = bound_degree(ei, n, 4, generator=torch.Generator().manual_seed(0))
    assert max_degree(kept, n) <= 4
    original = {tuple(e) for e in ei.T.tolist()}
    hub_edges = [tuple(e) for e in kept.T.tolist() if e[0] == 0]
    assert 1 <= len(hub_edges) <= 4 and all(e in original for e in hub_edges)  # sampled from its own edges
    assert {tuple(e) for e in kept.T.tolist()} <= original  # nothing new
    assert {(b, a) for a, b in kept.T.tolist()} == {tuple(e) for e in kept.T.tolist()}  # both directions


def test_the_hub_keeps_a_different_sample_under_another_seed() -> None:
    ei = _star_plus_ring()
    picks = {
        frozenset(
            tuple(e)
            for e in bound_degree(ei, 31, 4, generator=torch.Generator().manual_seed(s)).T.tolist()
            if e[0] == 0
        )
        for s in range(6)
    }
    assert len(picks) > 1


def test_a_graph_under_the_bound_is_kept_whole_without_self_loops_or_repeats() -> None:
    ei = torch.tensor([[0, 1, 1, 2, 2, 2], [1, 0, 2, 1, 2, 1]])  # a repeat and a self-loop
    kept = bound_degree(ei, 3, 5, generator=torch.Generator().manual_seed(0))
    assert sorted(map(tuple, kept.T.tolist())) == [(0, 1), (1, 0), (1, 2), (2, 1)]
    assert sorted(map(tuple, undirected_edges(ei).T.tolist())) == [(0, 1), (1, 0), (1, 2), (2, 1)]
    with pytest.raises(ConfigError, match="degree bound"):
        bound_degree(ei, 3, 0, generator=torch.Generator())


def test_removing_a_node_moves_each_hop_by_at_most_sqrt_degree() -> None:
    """Sensitivity of one hop under node removal (rows of the other nodes): at most sqrt(D)."""
    g = torch.Generator().manual_seed(1)
    n, d, bound = 40, 8, 5
    ei = torch.randint(0, n, (2, 200), generator=g)
    kept = bound_degree(ei, n, bound, generator=g)
    x = normalize_rows(torch.randn(n, d, generator=g))
    for v in range(n):
        keep = (kept[0] != v) & (kept[1] != v)
        x_wo = x.clone()
        x_wo[v] = 0
        raw_full = torch.zeros(n, d).index_add_(0, kept[1], x[kept[0]])
        raw_wo = torch.zeros(n, d).index_add_(0, kept[1, keep], x_wo[kept[0, keep]])
        others = torch.arange(n) != v
        assert (raw_full - raw_wo)[others].norm() <= aggregation_sensitivity("node", bound) + 1e-6


def test_aggregates_are_unit_rows_with_noise_of_the_stated_scale() -> None:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(500, 16, generator=g)
    ei = torch.empty(2, 0, dtype=torch.long)  # no edges: a hop is pure noise, before normalisation
    out = perturbed_aggregates(x, ei, 2, noise_std=3.0, generator=torch.Generator().manual_seed(1))
    assert len(out) == 3
    for a in out:
        assert torch.allclose(a.norm(dim=1), torch.ones(500), atol=1e-5)
    assert aggregation_sensitivity("edge", None) == pytest.approx(math.sqrt(2))
    assert aggregation_sensitivity("node", 9) == pytest.approx(3.0)
    with pytest.raises(ConfigError, match="generator"):
        perturbed_aggregates(x, ei, 1, noise_std=1.0, generator=None)
