"""Tests of securefgl.protocols._harary: Google's (degree, threshold) table, graph structure, bounds."""

from __future__ import annotations

import math
import os

import networkx as nx
import numpy as np
import pytest
from scipy import stats

from securefgl.errors import ConfigError
from securefgl.protocols._harary import (
    SecretSharingGraph,
    complete_graph_threshold,
    find_graph_parameters,
    harary_disconnection_log_probability,
    hypergeometric_log_pmf,
)

C, S, N = "curious", "semi-malicious", "none"

# Google fcp/secagg/server/graph_parameter_finder_test.cc (sigma = 40, eta = 20):
# (n, corrupt_rate, dropout_rate, adversary, degree, threshold). The rows of
# ../shared/specs/secure-aggregation-anchors.md section 1.2 are among them.
GOOGLE_TABLE = [
    (100, 0.45, 0.45, C, 92, 46), (1000, 0.45, 0.45, C, 822, 417), (10000, 0.45, 0.45, C, 3494, 1771),
    (100000, 0.45, 0.45, C, 5508, 2788), (1000000, 0.45, 0.45, C, 6240, 3156),
    (10, 0.33, 0.33, C, 8, 4), (100, 0.33, 0.33, C, 68, 34), (1000, 0.33, 0.33, C, 286, 150),
    (10000, 0.33, 0.33, C, 422, 221), (100000, 0.33, 0.33, C, 480, 251), (1000000, 0.33, 0.33, C, 518, 270),
    (100, 0.3, 0.3, S, 92, 62), (1000, 0.3, 0.3, S, 872, 584), (10000, 0.3, 0.3, S, 4822, 3230),
    (100000, 0.3, 0.3, S, 9388, 6286), (1000000, 0.3, 0.3, S, 11136, 7454),
    (10, 0.05, 0.33, C, 4, 2), (100, 0.05, 0.33, C, 28, 6), (1000, 0.05, 0.33, C, 72, 24),
    (10000, 0.05, 0.33, C, 86, 29), (100000, 0.05, 0.33, C, 96, 32), (1000000, 0.05, 0.33, C, 102, 34),
    (10, 0.05, 0.33, S, 8, 5), (100, 0.05, 0.33, S, 72, 39), (1000, 0.05, 0.33, S, 398, 223),
    (10000, 0.05, 0.33, S, 746, 420), (100000, 0.05, 0.33, S, 882, 496), (1000000, 0.05, 0.33, S, 970, 545),
    (10, 0.33, 0.05, C, 4, 4), (100, 0.33, 0.05, C, 34, 29), (1000, 0.33, 0.05, C, 78, 60),
    (10000, 0.33, 0.05, C, 92, 70), (100000, 0.33, 0.05, C, 102, 77), (1000000, 0.33, 0.05, C, 110, 83),
    (10, 0.33, 0.05, S, 4, 4), (100, 0.33, 0.05, S, 42, 37), (1000, 0.33, 0.05, S, 132, 109),
    (10000, 0.33, 0.05, S, 178, 146), (1000000, 0.33, 0.05, S, 212, 173),
    (10, 0.05, 0.05, C, 2, 2), (100, 0.05, 0.05, C, 12, 6), (1000, 0.05, 0.05, C, 30, 17),
    (10000, 0.05, 0.05, C, 34, 20), (100000, 0.05, 0.05, C, 36, 21), (1000000, 0.05, 0.05, C, 38, 22),
    (10, 0.05, 0.05, S, 2, 2), (100, 0.05, 0.05, S, 16, 11), (1000, 0.05, 0.05, S, 52, 37),
    (10000, 0.05, 0.05, S, 62, 44), (100000, 0.05, 0.05, S, 68, 48), (1000000, 0.05, 0.05, S, 74, 52),
    (10, 0.33, 0.0, C, 4, 4), (100, 0.33, 0.0, C, 26, 25), (1000, 0.33, 0.0, C, 38, 36),
    (10000, 0.33, 0.0, C, 42, 40), (100000, 0.33, 0.0, C, 46, 44), (1000000, 0.33, 0.0, C, 50, 47),
    (10, 0.33, 0.0, S, 4, 4), (100, 0.33, 0.0, S, 26, 26), (1000, 0.33, 0.0, S, 38, 37),
    (10000, 0.33, 0.0, S, 42, 41), (100000, 0.33, 0.0, S, 46, 45), (1000000, 0.33, 0.0, S, 50, 49),
    (10, 0.0, 0.33, C, 4, 2), (100, 0.0, 0.33, C, 26, 2), (1000, 0.0, 0.33, C, 38, 2),
    (10000, 0.0, 0.33, C, 42, 2), (100000, 0.0, 0.33, C, 46, 2), (1000000, 0.0, 0.33, C, 50, 2),
    (10, 0.0, 0.33, N, 4, 2), (100, 0.0, 0.33, N, 26, 2), (1000, 0.0, 0.33, N, 38, 2),
    (10000, 0.0, 0.33, N, 42, 2), (100000, 0.0, 0.33, N, 46, 2), (1000000, 0.0, 0.33, N, 50, 2),
    (10, 0.0, 0.33, S, 8, 5), (100, 0.0, 0.33, S, 68, 35), (1000, 0.0, 0.33, S, 228, 115),
    (10000, 0.0, 0.33, S, 326, 164), (100000, 0.0, 0.33, S, 372, 187), (1000000, 0.0, 0.33, S, 410, 206),
    (10, 0.0, 0.0, C, 2, 2), (100, 0.0, 0.0, C, 2, 2), (1000, 0.0, 0.0, C, 2, 2),
    (10000, 0.0, 0.0, C, 2, 2), (100000, 0.0, 0.0, C, 2, 2), (1000000, 0.0, 0.0, C, 2, 2),
    (1000, 0.0, 0.0, N, 2, 2), (10000, 0.0, 0.0, N, 2, 2), (100000, 0.0, 0.0, N, 2, 2), (1000000, 0.0, 0.0, N, 2, 2),
    (10, 0.0, 0.0, S, 2, 2), (100, 0.0, 0.0, S, 2, 2), (1000, 0.0, 0.0, S, 2, 2),
    (10000, 0.0, 0.0, S, 2, 2), (100000, 0.0, 0.0, S, 2, 2), (1000000, 0.0, 0.0, S, 2, 2),
]  # fmt: skip

# The rows whose exact linear scan walks through thousands of degrees take seconds each.
_SLOW = {row for row in GOOGLE_TABLE if row[4] > 2500}


@pytest.mark.parametrize(
    "row",
    [pytest.param(r, marks=pytest.mark.slow) if r in _SLOW else r for r in GOOGLE_TABLE],
    ids=lambda r: f"n{r[0]}-a{r[1]}-d{r[2]}-{r[3]}",
)
def test_reproduces_googles_table(row: tuple[int, float, float, str, int, int]) -> None:
    """Exactly Google's degree and threshold (their test only requires threshold <= the table's)."""
    n, a, d, adv, k, t = row
    p = find_graph_parameters(n, dropout_rate=d, corrupt_rate=a, adversary=adv)
    assert (p.degree, p.threshold, p.complete) == (k, t, False)
    assert p.neighbourhood_size == k + 1


def test_anchor_table_rows() -> None:
    """The rows quoted in the anchors spec, section 1.2 (the last one falls to the complete graph there)."""
    rows = [
        (100, 0.05, 0.05, C, 12, 6), (100, 0.05, 0.05, S, 16, 11), (1000, 0.05, 0.05, C, 30, 17),
        (1000, 0.05, 0.05, S, 52, 37), (10000, 0.05, 0.05, C, 34, 20), (10000, 0.05, 0.05, S, 62, 44),
        (1000, 0.05, 0.33, C, 72, 24), (1000, 0.05, 0.33, S, 398, 223), (1000, 0.33, 0.05, C, 78, 60),
        (1000, 0.33, 0.05, S, 132, 109), (1000, 0.33, 0.33, C, 286, 150), (1000, 0.45, 0.45, C, 822, 417),
        (10, 0.05, 0.05, C, 2, 2), (10, 0.05, 0.05, S, 2, 2),
    ]  # fmt: skip
    for n, a, d, adv, k, t in rows:
        p = find_graph_parameters(n, dropout_rate=d, corrupt_rate=a, adversary=adv)
        assert (p.degree, p.threshold) == (k, t), (n, a, d, adv)


@pytest.mark.parametrize(
    ("n", "a", "d", "adv"),
    [
        (1000, 0.5, 0.5, C),
        (1000, 0.5, 0.5, S),
        (1000, 0.33, 0.33, S),
        (1000, 0.1, 1.0, C),
        (1000, 0.1, -1.0, C),
        (100, 0.1, 0.1, N),
    ],
)
def test_infeasible_or_invalid_threat_models_are_refused(n: int, a: float, d: float, adv: str) -> None:
    with pytest.raises(ConfigError):
        find_graph_parameters(n, dropout_rate=d, corrupt_rate=a, adversary=adv)


def test_bad_arguments() -> None:
    with pytest.raises(ConfigError, match="num_clients"):
        find_graph_parameters(0, dropout_rate=0.1, corrupt_rate=0.1)
    with pytest.raises(ConfigError, match="adversary"):
        find_graph_parameters(10, dropout_rate=0.1, corrupt_rate=0.1, adversary="malicious")


def test_small_n_falls_back_to_the_complete_graph() -> None:
    p = find_graph_parameters(5, dropout_rate=0.3, corrupt_rate=0.3)
    assert p.complete and p.degree == 4 and p.threshold == complete_graph_threshold(5, corrupt_rate=0.3)
    assert complete_graph_threshold(10) == 6
    assert complete_graph_threshold(10, corrupt_rate=0.6) == 7
    assert complete_graph_threshold(10, corrupt_rate=0.4, adversary=S) == 8
    assert complete_graph_threshold(1) == 1 and complete_graph_threshold(2) == 2


def test_parameters_meet_their_bounds() -> None:
    """Re-derive the three conditions with scipy for the chosen (k, t) and check k - 2 fails."""
    for n, a, d in [(1000, 0.05, 0.05), (500, 0.05, 0.1), (300, 0.2, 0.2)]:
        p = find_graph_parameters(n, dropout_rate=d, corrupt_rate=a)
        k, t = p.degree, p.threshold
        corrupt, dropped = math.floor(a * n + 1e-9), math.floor(d * n + 1e-9)
        assert harary_disconnection_log_probability(n, k, corrupt + dropped) < -41 * math.log(2)
        assert stats.hypergeom(n, corrupt, k).sf(t - 1) < 2.0**-41 / n  # >= t corrupted neighbours
        assert stats.hypergeom(n, n - dropped, k).cdf(t - 1) < 2.0**-20 / n  # < t surviving neighbours
        q = find_graph_parameters(n, dropout_rate=d, corrupt_rate=a)
        assert q == p  # deterministic (and cached)


def test_hypergeometric_pmf_matches_scipy() -> None:
    xs, logp = hypergeometric_log_pmf(500, 40, 33)
    ref = stats.hypergeom(500, 40, 33).logpmf(xs)
    assert np.allclose(logp, ref, atol=1e-9)
    assert math.isclose(float(np.exp(logp).sum()), 1.0, rel_tol=1e-12)


@pytest.mark.parametrize(("n", "k"), [(7, 2), (12, 4), (50, 10), (101, 32)])
def test_harary_graph_structure(n: int, k: int) -> None:
    clients = [3 * i + 1 for i in range(n)]
    g = SecretSharingGraph(clients, k, os.urandom(32))
    assert not g.complete and g.degree == k
    nx_graph = nx.Graph()
    for c in clients:
        nb = g.neighbours(c)
        assert c in nb and len(nb) == k + 1 and list(nb) == sorted(nb)
        nx_graph.add_edges_from((c, v) for v in nb if v != c)
        assert all(g.are_neighbours(c, v) for v in nb)
    assert all(d == k for _, d in nx_graph.degree())  # k-regular, symmetric
    if n <= 50:
        assert nx.node_connectivity(nx_graph) == k  # Harary graphs H_{k,n} are k-connected
    # the ring order is a permutation of the clients
    assert sorted(g.ring_order()) == clients


def test_label_permutation_depends_on_the_seed_only() -> None:
    clients = list(range(40))
    s1, s2 = os.urandom(32), os.urandom(32)
    assert (
        SecretSharingGraph(clients, 6, s1).ring_order()
        == SecretSharingGraph(clients[::-1], 6, s1).ring_order()
    )
    assert SecretSharingGraph(clients, 6, s1).ring_order() != SecretSharingGraph(clients, 6, s2).ring_order()


def test_label_permutation_is_uniform() -> None:
    """Position of client 0 over many seeds: chi-square against uniform over 10 positions."""
    pos = [SecretSharingGraph(range(10), 2, os.urandom(32)).ring_order().index(0) for _ in range(2000)]
    assert stats.chisquare(np.bincount(pos, minlength=10)).pvalue > 1e-4


def test_complete_graph_and_errors() -> None:
    g = SecretSharingGraph([5, 1, 9], 2, os.urandom(32))
    assert g.complete and g.neighbours(5) == (1, 5, 9)
    with pytest.raises(ConfigError, match="even"):
        SecretSharingGraph(range(10), 3, os.urandom(32))
    with pytest.raises(ConfigError, match="distinct"):
        SecretSharingGraph([1, 1, 2], 2, os.urandom(32))
    with pytest.raises(ConfigError, match="not in the graph"):
        g.neighbours(7)
