"""Homophily metrics against hand-computed values and PyG's implementation."""

from __future__ import annotations

import math

import pytest
import torch
from torch_geometric.utils import homophily as pyg_homophily

from securefgl.data.homophily import adjusted_homophily, class_homophily, edge_homophily, node_homophily


def _und(pairs: list[tuple[int, int]]) -> torch.Tensor:
    e = torch.tensor(pairs).t()
    return torch.cat([e, e.flip(0)], 1)


def test_hand_computed_path() -> None:
    # path 0-1-2-3 with labels 0 0 1 1, plus isolated node 4 (label 1)
    ei = _und([(0, 1), (1, 2), (2, 3)])
    y = torch.tensor([0, 0, 1, 1, 1])
    assert edge_homophily(ei, y) == pytest.approx(2 / 3)
    # node: 1, 1/2, 1/2, 1, isolated 0 -> 3/5 ; excluding isolated -> 3/4
    assert node_homophily(ei, y) == pytest.approx(3 / 5)
    assert node_homophily(ei, y, isolated="exclude") == pytest.approx(3 / 4)
    # class: h_0 = 2/3 (class-0 degree sum 3, same 2), h_1 = 2/3; proportions 2/5, 3/5
    assert class_homophily(ei, y) == pytest.approx(max(0, 2 / 3 - 2 / 5) + max(0, 2 / 3 - 3 / 5))
    # adjusted: degree shares 3/6 and 3/6 -> expected 1/2 -> (2/3 - 1/2) / (1/2) = 1/3
    assert adjusted_homophily(ei, y) == pytest.approx(1 / 3)


def test_empty_graph_is_nan_and_bad_option_raises() -> None:
    ei = torch.empty(2, 0, dtype=torch.long)
    y = torch.tensor([0, 1])
    assert math.isnan(edge_homophily(ei, y))
    assert math.isnan(adjusted_homophily(ei, y))
    with pytest.raises(ValueError, match="valid choices"):
        node_homophily(ei, y, isolated="drop")


def test_matches_pyg_on_cora(cora) -> None:
    ei, y = cora.edge_index, cora.y
    assert edge_homophily(ei, y) == pytest.approx(float(pyg_homophily(ei, y, method="edge")), abs=1e-6)
    assert node_homophily(ei, y) == pytest.approx(float(pyg_homophily(ei, y, method="node")), abs=1e-6)
    assert class_homophily(ei, y) == pytest.approx(
        float(pyg_homophily(ei, y, method="edge_insensitive")), abs=1e-6
    )
    assert 0.0 < adjusted_homophily(ei, y) < edge_homophily(ei, y)
