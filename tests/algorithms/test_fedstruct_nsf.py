"""FedStruct-A structure features: random walks, Node2Vec, graphlet degree vectors (checked by brute force)."""

from __future__ import annotations

import itertools

import networkx as nx
import numpy as np
import pytest
import torch

from securefgl.algorithms.fedstruct._nsf import (
    _csr,
    graphlet_degree_vectors,
    node2vec_features,
    orbit_counts,
    uniform_random_walks,
)
from securefgl.errors import ConfigError

#: (sorted degree sequence of the connected induced subgraph, degree of the node in it) -> orbit
#: (Pržulj 2007 numbering, as ORCA), for the graphlets on 2-4 nodes.
_ORBIT = {
    ((1, 1), 1): 0,
    ((1, 1, 2), 1): 1,
    ((1, 1, 2), 2): 2,
    ((2, 2, 2), 2): 3,
    ((1, 1, 2, 2), 1): 4,
    ((1, 1, 2, 2), 2): 5,
    ((1, 1, 1, 3), 1): 6,
    ((1, 1, 1, 3), 3): 7,
    ((2, 2, 2, 2), 2): 8,
    ((1, 2, 2, 3), 1): 9,
    ((1, 2, 2, 3), 2): 10,
    ((1, 2, 2, 3), 3): 11,
    ((2, 2, 3, 3), 2): 12,
    ((2, 2, 3, 3), 3): 13,
    ((3, 3, 3, 3), 3): 14,
}


def _brute_force_orbits(g: nx.Graph) -> np.ndarray:
    out = np.zeros((g.number_of_nodes(), 15), dtype=np.int64)
    for size in (2, 3, 4):
        for nodes in itertools.combinations(g.nodes, size):
            sub = g.subgraph(nodes)
            if not nx.is_connected(sub):
                continue
            seq = tuple(sorted(d for _, d in sub.degree))
            for v, d in sub.degree:
                out[v, _ORBIT[(seq, d)]] += 1
    return out


def _edge_index(g: nx.Graph) -> torch.Tensor:
    return torch.tensor(list(g.edges), dtype=torch.long).T


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_four_node_orbits_equal_brute_force(seed):
    g = nx.gnp_random_graph(11, 0.35, seed=seed)
    g.add_node(11)  # an isolated node: all zeros
    counts = orbit_counts(_edge_index(g), 12, graphlet_size=4)
    np.testing.assert_array_equal(counts, _brute_force_orbits(g))
    five = orbit_counts(_edge_index(g), 12, graphlet_size=5)
    assert five.shape == (12, 73)
    np.testing.assert_array_equal(five[:, :15], counts)  # the 5-node run extends the 4-node orbits


def test_gdv_is_standardised_and_handles_no_edges():
    g = nx.gnp_random_graph(30, 0.2, seed=4)
    feats = graphlet_degree_vectors(_edge_index(g), 30)
    assert feats.shape == (30, 73) and feats.dtype == torch.float32
    varying = feats.std(0) > 0
    assert torch.allclose(feats.mean(0), torch.zeros(73), atol=1e-5)
    assert torch.allclose(feats.std(0, unbiased=False)[varying], torch.ones(int(varying.sum())), atol=1e-4)
    empty = graphlet_degree_vectors(torch.zeros(2, 0, dtype=torch.long), 4, graphlet_size=4)
    assert empty.shape == (4, 15) and not empty.any() and torch.isfinite(empty).all()
    with pytest.raises(ConfigError, match="graphlet_size"):
        orbit_counts(_edge_index(g), 30, graphlet_size=6)


def test_random_walks_follow_edges_and_stay_at_isolated_nodes():
    ei = torch.tensor([[0, 1, 2], [1, 2, 3]])
    rowptr, col = _csr(ei, 5)  # node 4 is isolated
    walks = uniform_random_walks(
        rowptr, col, torch.tensor([0, 3, 4] * 50), 12, torch.Generator().manual_seed(0)
    )
    assert walks.shape == (150, 13)
    steps = torch.stack([walks[:, :-1].reshape(-1), walks[:, 1:].reshape(-1)])
    assert (steps[0] - steps[1]).abs().eq(1)[steps[0] != 4].all()  # a path graph: every step moves one hop
    assert (walks[2::3] == 4).all()
    # uniform: from node 1 the walk goes to 0 and 2 about equally often
    nxt = steps[1][steps[0] == 1]
    assert 0.35 < float((nxt == 0).float().mean()) < 0.65


@pytest.mark.parametrize("dense_max_nodes", [8192, 0])  # all-pairs score matrix / gathered sparse rows
def test_node2vec_separates_communities_and_is_seeded(dense_max_nodes):
    g = nx.connected_caveman_graph(2, 8)  # two 8-cliques joined by one rewired edge
    ei = _edge_index(g)
    kw = {"dim": 16, "epochs": 40, "batch_size": 8, "lr": 0.1, "dense_max_nodes": dense_max_nodes}
    emb = node2vec_features(ei, 16, generator=torch.Generator().manual_seed(0), **kw)
    again = node2vec_features(ei, 16, generator=torch.Generator().manual_seed(0), **kw)
    assert torch.equal(emb, again)
    z = torch.nn.functional.normalize(emb, dim=1)
    sim = z @ z.T
    same = torch.zeros(16, 16, dtype=torch.bool)
    same[:8, :8] = same[8:, 8:] = True
    same.fill_diagonal_(False)
    other = ~same
    other.fill_diagonal_(False)
    assert float(sim[same].mean()) > float(sim[other].mean()) + 0.3
    with pytest.raises(ConfigError, match="context_size"):
        node2vec_features(ei, 16, context_size=30, generator=torch.Generator())
    with pytest.raises(ConfigError, match="pyg-lib"):
        node2vec_features(ei, 16, p=0.5, generator=torch.Generator())
