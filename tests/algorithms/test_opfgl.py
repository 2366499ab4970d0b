"""Tests of O-pFGL (the securefgl.algorithms.opfgl package: its halves and private helpers)."""

from __future__ import annotations

import math

import pytest
import torch

from securefgl.algorithms.opfgl._pseudo_graph import (
    PseudoGraph,
    PseudoGraphConfig,
    generate_pseudo_graph,
    moments_from_sums,
    pseudo_graph_sizes,
)
from securefgl.algorithms.opfgl._statistics import (
    accumulated_class_homophily,
    class_sums,
    client_statistics,
    distillation_factors,
    gcn_operator,
    label_propagation,
    node_homophily,
    propagate_features,
    reliable_nodes,
)
from securefgl.algorithms.opfgl._train import StageConfig, distillation_weights
from securefgl.errors import ConfigError, MalformedMessageError, TrainingError


@pytest.fixture(autouse=True)
def _one_thread():
    """Small tensors: one intra-op thread is faster, and avoids spin-waiting on a shared machine."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def _undirected(pairs: list[tuple[int, int]]) -> torch.Tensor:
    e = torch.tensor(pairs, dtype=torch.long).T
    return torch.cat([e, e.flip(0)], dim=1)


# A hand-checkable graph: a path 0-1-2-3-4 plus an isolated node 5.
#   labels  0 0 1 1 1 0 ; train nodes {0, 1, 2, 3}; features one scalar per node.
PATH = _undirected([(0, 1), (1, 2), (2, 3), (3, 4)])
Y = torch.tensor([0, 0, 1, 1, 1, 0])
TRAIN = torch.tensor([True, True, True, True, False, False])
X = torch.tensor([[1.0], [2.0], [3.0], [4.0], [5.0], [6.0]])


def _dense_gcn(edge_index: torch.Tensor, n: int, loops: bool) -> torch.Tensor:
    a = torch.zeros(n, n)
    a[edge_index[0], edge_index[1]] = 1.0
    if loops:
        a = a + torch.eye(n)
    d = a.sum(1)
    inv = torch.where(d > 0, d.pow(-0.5), torch.zeros_like(d))
    return inv[:, None] * a * inv[None, :]


def test_propagation_matches_dense_formula() -> None:
    op = gcn_operator(PATH, 6).to_dense()
    assert torch.allclose(op, _dense_gcn(PATH, 6, True))
    # degrees with self loop: 2 3 3 3 2 1 ; row 0 of Ã: [1/2, 1/sqrt(6), 0, ...]
    assert op[0, 0] == pytest.approx(0.5)
    assert op[0, 1] == pytest.approx(1 / math.sqrt(6))
    assert op[5, 5] == pytest.approx(1.0)  # isolated node keeps its own feature
    xp = propagate_features(X, PATH, hops=2)
    a = _dense_gcn(PATH, 6, True)
    assert xp.shape == (6, 3)
    assert torch.allclose(xp, torch.cat([X, a @ X, a @ a @ X], 1), atol=1e-6)
    with pytest.raises(ConfigError):
        propagate_features(X, PATH, hops=-1)


def test_homophily_factors_hand_checked() -> None:
    h = node_homophily(PATH, Y, TRAIN)
    # node 0: labelled nbrs {1}, same -> 1 ; node 1: {0 same, 2 diff} -> 1/2 ;
    # node 2: {1 diff, 3 same} -> 1/2 ; node 3: {2 same} (4 unlabelled) -> 1
    assert h[:4].tolist() == [1.0, 0.5, 0.5, 1.0]
    assert h[5] == 0.0  # no labelled neighbour
    hc = accumulated_class_homophily(h, Y, TRAIN, 3)
    assert hc.tolist() == [1.5, 1.5, 0.0]
    w = distillation_factors(hc)
    assert w[0].item() == pytest.approx(1 / (1 + math.log(2.5)))
    assert w[2].item() == 1.0  # H = 0 -> 1


def test_label_propagation_pyg_form() -> None:
    soft = label_propagation(PATH, Y, TRAIN, 2, num_iters=2, alpha=0.9)
    a = _dense_gcn(PATH, 6, False)
    y0 = torch.zeros(6, 2)
    y0[TRAIN] = torch.nn.functional.one_hot(Y[TRAIN], 2).float()
    out = y0.clone()
    for _ in range(2):
        out = (0.9 * a @ out + 0.1 * y0).clamp(0, 1)
    out[5] = 0.5  # isolated unlabelled node: zero mass -> uniform 1/C
    assert torch.allclose(soft, out, atol=1e-6)


def test_hre_criteria() -> None:
    soft = torch.tensor(
        [[1.0, 0.0], [0.5, 0.5], [0.0, 0.9], [0.97, 0.03], [0.0, 2.0], [0.99, 0.01]]
    )  # unnormalised on purpose
    deg = torch.tensor([1, 2, 2, 2, 1, 0])
    labeled = torch.tensor([True, False, False, False, False, False])
    hc = torch.tensor([3.0, 1.0])
    mask, pseudo = reliable_nodes(
        soft, deg, labeled, hc, top_k=1, degree_threshold=0, confidence_threshold=0.95
    )
    # class 0 is the top-1 class; node 3 (0.97) and node 5 (0.99) are confident class-0 nodes
    assert mask.tolist() == [False, False, False, True, False, True]
    mask, _ = reliable_nodes(soft, deg, labeled, hc, top_k=1, degree_threshold=1, confidence_threshold=0.95)
    assert mask.tolist() == [False, False, False, True, False, False]  # C1 removes the isolated node
    mask, _ = reliable_nodes(soft, deg, labeled, hc, top_k=2, degree_threshold=0, confidence_threshold=1.0)
    assert mask.tolist() == [False, False, True, False, True, False]  # normalised confidence 1 only
    mask, _ = reliable_nodes(soft, deg, labeled, hc, top_k=0, degree_threshold=0, confidence_threshold=0.0)
    assert not mask.any()
    assert pseudo.tolist() == [0, 0, 1, 0, 1, 0]


def test_client_upload_equals_spec_statistics() -> None:
    """The upload is N, Σx, Σx², 1, |V_L^c| per class over S^c = V_L^c ∪ V_r^c, zero when N < 2."""
    reliable = torch.tensor([False, False, False, False, True, False])
    pseudo = torch.tensor([0, 0, 1, 1, 1, 0])
    xp = propagate_features(X, PATH, hops=1)
    sums = class_sums(xp, Y, TRAIN, reliable, pseudo, 3, min_count=2)
    s0 = xp[[0, 1]].double()
    s1 = xp[[2, 3, 4]].double()
    assert sums["count"].tolist() == [2.0, 3.0, 0.0]
    assert torch.allclose(sums["sum"][0], s0.sum(0)) and torch.allclose(sums["sum"][1], s1.sum(0))
    assert torch.allclose(sums["sumsq"][1], (s1**2).sum(0))
    assert sums["contrib"].tolist() == [1.0, 1.0, 0.0]
    assert sums["orig"].tolist() == [2.0, 2.0, 0.0]  # node 4 is reliable, not an original label
    # A class with a single member is not uploaded at all (min_count = 2), not even its original count.
    sums = class_sums(
        xp,
        Y,
        torch.tensor([True, False, True, True, False, False]),
        torch.zeros(6, dtype=torch.bool),
        pseudo,
        3,
    )
    assert sums["count"].tolist() == [0.0, 2.0, 0.0]
    assert sums["orig"].tolist() == [0.0, 2.0, 0.0]
    assert (sums["sum"][0] == 0).all() and sums["contrib"][0] == 0
    # mean and unbiased variance recovered from the sums equal the spec's per-client statistics
    mu = sums["sum"][1] / sums["count"][1]
    var = (sums["sumsq"][1] - sums["count"][1] * mu**2) / (sums["count"][1] - 1)
    assert torch.allclose(mu, xp[[2, 3]].double().mean(0))
    assert torch.allclose(var, xp[[2, 3]].double().var(0))


def test_client_statistics_clips_and_reports() -> None:
    x = X * 10.0  # propagated values up to 60: outside a bound of 8
    st = client_statistics(x, PATH, Y, TRAIN, 2, feature_bound=8.0, top_k=1, confidence_threshold=0.5)
    assert st.xprop.abs().max() <= 8.0
    assert st.clipped > 0 and 0 < st.clip_rate <= 1
    assert st.clip_rate == pytest.approx(st.clipped / st.xprop.numel())
    for v in st.sums.values():
        assert torch.isfinite(v).all()
    with pytest.raises(ConfigError):
        client_statistics(X, PATH, Y, TRAIN, 2, feature_bound=0.0)
    bad = X.clone()
    bad[0, 0] = float("nan")
    with pytest.raises(Exception, match="NaN"):
        client_statistics(bad, PATH, Y, TRAIN, 2)


# ---------------------------------------------------------------------------------------------------
# Server: sums -> moments
# ---------------------------------------------------------------------------------------------------


def _client_groups(seed: int, sizes: list[int], d: int = 5) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(n, d, generator=g, dtype=torch.float64) * (i + 1) + i for i, n in enumerate(sizes)]


@pytest.mark.parametrize("sizes", [[2, 3, 7], [5, 2], [10]])
def test_pooled_variance_identity_against_centralised_formula(sizes: list[int]) -> None:
    groups = _client_groups(len(sizes), sizes)
    n = torch.tensor([float(len(g)) for g in groups], dtype=torch.float64)
    b = torch.stack([g.sum(0) for g in groups])
    q = torch.stack([(g * g).sum(0) for g in groups])
    m = moments_from_sums(
        n.sum()[None], b.sum(0)[None], q.sum(0)[None], torch.tensor([float(len(sizes))]), n.sum()[None]
    )
    # Eq. 9, centralised: pooled over clients with the per-client means and unbiased variances
    mus = torch.stack([g.mean(0) for g in groups])
    s2 = torch.stack([g.var(0) if len(g) > 1 else torch.zeros(g.size(1), dtype=g.dtype) for g in groups])
    mu = (n[:, None] * mus).sum(0) / n.sum()
    pooled = ((n - 1)[:, None] * s2).sum(0) + (n[:, None] * (mus - mu) ** 2).sum(0)
    expected = pooled / (n.sum() - len(sizes))
    assert torch.allclose(m.mean[0], mu, atol=1e-12)
    assert torch.allclose(m.var[0], expected, atol=1e-10)
    assert torch.allclose(m.std[0], expected.sqrt(), atol=1e-10)
    # "unbiased": the ordinary unbiased variance of the union of all clients' nodes
    mu2 = moments_from_sums(
        n.sum()[None],
        b.sum(0)[None],
        q.sum(0)[None],
        torch.tensor([float(len(sizes))]),
        n.sum()[None],
        denominator="unbiased",
    )
    assert torch.allclose(mu2.var[0], torch.cat(groups).var(0), atol=1e-10)


def test_moments_skip_withheld_and_absent_classes_without_nan() -> None:
    c, d = 4, 3
    count = torch.tensor([5.0, float("nan"), 0.0, 2.0])
    total = torch.ones(c, d)
    total[1] = float("nan")  # a row withheld by the release rule comes back as NaN
    total[2] = 0.0
    sq = torch.ones(c, d) * 3
    sq[1] = float("nan")
    sq[2] = 0.0
    contrib = torch.tensor([2.0, 1.0, 0.0, 1.0])
    withheld = torch.tensor([False, True, False, False])
    m = moments_from_sums(count, total, sq, contrib, count.nan_to_num(0.0), withheld_rows=withheld)
    assert m.released.tolist() == [True, False, False, True]
    assert m.withheld == (1,) and m.absent == (2,)
    assert m.degenerate == ()
    for t in (m.mean, m.var, m.std, m.weight, m.count):
        assert torch.isfinite(t).all()
    assert m.weight.sum().item() == pytest.approx(1.0)
    assert m.weight[1] == 0 and m.weight[2] == 0
    # A class of 2 nodes from 2 one-node contributors: A - M = 0 -> degenerate, variance 0, flagged.
    m = moments_from_sums(
        torch.tensor([2.0]), torch.ones(1, d), torch.ones(1, d), torch.tensor([2.0]), torch.tensor([2.0])
    )
    assert m.degenerate == (0,) and (m.var == 0).all()
    m = moments_from_sums(
        torch.tensor([3.0]), torch.ones(1, d), torch.ones(1, d), torch.tensor([1.0]), torch.tensor([3.0])
    )
    assert m.single_contributor == (0,)
    with pytest.raises(ConfigError):
        moments_from_sums(count, total, sq, contrib, count, denominator="n")


# ---------------------------------------------------------------------------------------------------
# Server: pseudo-graph
# ---------------------------------------------------------------------------------------------------


def _moments(c: int = 3, f: int = 6, hops: int = 1, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    groups = [torch.rand(8 + 3 * k, (hops + 1) * f, generator=g, dtype=torch.float64) + k for k in range(c)]
    count = torch.tensor([float(len(x)) for x in groups])
    return moments_from_sums(
        count,
        torch.stack([x.sum(0) for x in groups]),
        torch.stack([(x * x).sum(0) for x in groups]),
        torch.full((c,), 2.0),
        count,
    )


def test_pseudo_graph_deterministic_and_aligned() -> None:
    m = _moments()
    cfg = PseudoGraphConfig(loops=60, lr_feat=0.05, lr_adj=0.01)
    a = generate_pseudo_graph(m, 6, cfg, seed=7, model_seed=3)
    b = generate_pseudo_graph(m, 6, cfg, seed=7, model_seed=3)
    assert a.digest() == b.digest()
    assert a.y.tolist() == [0, 1, 2] and a.x.shape == (3, 6)
    assert a.info["align_loss_last"] < a.info["align_loss_first"]
    assert (a.edge_weight >= cfg.threshold).all() and (a.edge_index[0] != a.edge_index[1]).all()
    c = generate_pseudo_graph(m, 6, cfg, seed=8)
    assert c.digest() != a.digest()
    # byte round trip and validation
    payload = a.to_bytes()
    back = PseudoGraph.from_bytes(payload)
    assert torch.equal(back.x, a.x) and torch.equal(back.edge_index, a.edge_index)
    assert torch.equal(back.y, a.y) and back.model_seed == 3
    with pytest.raises(MalformedMessageError):
        PseudoGraph.from_bytes(payload[:-1])
    with pytest.raises(MalformedMessageError):
        PseudoGraph.from_bytes(b"XXXXXXXX" + payload[8:])


def test_pseudo_graph_sizes_rate_and_multi_node_std() -> None:
    m = _moments()
    sizes = pseudo_graph_sizes(m, PseudoGraphConfig(rate=0.25))
    assert sizes.tolist() == [math.ceil(0.25 * 8), math.ceil(0.25 * 11), math.ceil(0.25 * 14)]
    cfg = PseudoGraphConfig(nodes_per_class=3, loops=50, align_moment="var", smoothness="laplacian")
    g = generate_pseudo_graph(m, 6, cfg, seed=1)
    assert g.num_nodes == 9 and torch.isfinite(g.x).all()
    g = generate_pseudo_graph(m, 6, PseudoGraphConfig(nodes_per_class=2, loops=20, binary_edges=True), seed=1)
    assert set(g.edge_weight.tolist()) <= {1.0}


def test_pseudo_graph_size_zero_is_a_clear_error() -> None:
    m = moments_from_sums(
        torch.zeros(3), torch.zeros(3, 4), torch.zeros(3, 4), torch.zeros(3), torch.zeros(3)
    )
    assert pseudo_graph_sizes(m, PseudoGraphConfig()).sum() == 0
    with pytest.raises(TrainingError, match="size zero"):
        generate_pseudo_graph(m, 2, PseudoGraphConfig(loops=5), seed=0)
    with pytest.raises(ConfigError):
        PseudoGraphConfig(nodes_per_class=0)
    with pytest.raises(ConfigError):
        PseudoGraphConfig(rate=0.0)


def test_single_class_pseudo_graph() -> None:
    m = _moments(c=1)
    g = generate_pseudo_graph(m, 6, PseudoGraphConfig(loops=20), seed=0)
    assert g.num_nodes == 1 and g.edge_index.shape == (2, 0)


def test_distillation_weights_clamp() -> None:
    soft = torch.tensor([[1.0, 0.0], [0.5, 0.5], [0.0, 0.0]])
    w = torch.tensor([0.2, 1.0])
    assert torch.allclose(distillation_weights(soft, w, beta=0.5), torch.tensor([0.1, 0.3, 0.0]))
    assert torch.allclose(
        distillation_weights(soft, w, beta=0.5, gamma_min=0.05, gamma_max=0.2), torch.tensor([0.1, 0.2, 0.05])
    )
    with pytest.raises(ConfigError):
        distillation_weights(soft, w, beta=-1.0)
    with pytest.raises(ConfigError):
        StageConfig(lr=0.0)


# ---------------------------------------------------------------------------------------------------
# The algorithm under the Algorithm interface, with real protocols
# ---------------------------------------------------------------------------------------------------


def _setting(num_features: int, num_classes: int, num_clients: int, num_nodes: int):
    from securefgl.algorithms.base import Setting
    from securefgl.config import TrainConfig
    from securefgl.nn.registry import ModelSpec

    return Setting(
        num_features=num_features,
        num_classes=num_classes,
        num_clients=num_clients,
        num_nodes=num_nodes,
        count_bound=num_nodes,
        model=ModelSpec("gcn", hidden=16, layers=2, dropout=0.0),
        train=TrainConfig(),
        max_clients_per_round=num_clients,
    )


def _federated(num_clients: int = 3, seed: int = 0, num_classes: int = 3, method: str = "random"):
    from securefgl.data import make_csbm
    from securefgl.data.partition import partition_graph

    g = make_csbm(
        num_nodes=240,
        num_classes=num_classes,
        avg_degree=6,
        homophily=0.8,
        num_features=8,
        signal=1.5,
        seed=seed,
    )
    return partition_graph(g, method, num_clients, seed=seed, cache=False)


FAST = {
    "condense_loops": 40,
    "max_iters": 60,
    "eval_every": 20,
    "patience": 2,
    "stage1_lr": 1e-2,
    "stage2_lr": 1e-2,
    "confidence_threshold": 0.6,
}


def _clients(fg):
    from securefgl.algorithms.base import Client

    return [Client(i, d, torch.Generator().manual_seed(100 + i)) for i, d in enumerate(fg.clients)]


def _upload(algo, clients):
    from securefgl.algorithms.base import RoundState

    rs = RoundState(
        "upload",
        0,
        0,
        tuple(c.id for c in clients),
        algo.initial_broadcast(algo.init_server(torch.Generator().manual_seed(0))),
    )
    for c in clients:
        algo.init_client(c)
    return rs, {c.id: algo.client_step(c, rs) for c in clients}


def _algo(fg, **options):
    from securefgl.algorithms.opfgl import OPFGL

    algo = OPFGL(_setting(fg.num_features, fg.num_classes, fg.num_clients, fg.num_nodes), {**FAST, **options})
    algo.seal()
    return algo


def test_server_step_is_a_function_of_the_sums_only() -> None:
    """Two client populations whose uploads differ but sum to the same vector get the same broadcast."""
    from securefgl.protocols.base import Sums
    from securefgl.protocols.registry import get_protocol

    fg = _federated()
    algo = _algo(fg, min_class_contributors=1)
    rs, contribs = _upload(algo, _clients(fg))
    schema = algo.build_schema()
    # Same total, different individual vectors: move all of client 1's statistics onto client 0.
    moved = {k: dict(v) for k, v in contribs.items()}
    for name in moved[0]:
        moved[0][name] = contribs[0][name] + contribs[1][name]
        moved[1][name] = torch.zeros_like(contribs[1][name])
    plain = get_protocol("plaintext")
    out = []
    for batch in (contribs, moved):
        sums, _ = plain.aggregate(schema, batch)
        assert isinstance(sums, Sums)
        server = algo.init_server(torch.Generator().manual_seed(0))
        out.append(algo.server_step(server, sums, rs))
    assert sorted(out[0]) == sorted(out[1])
    for k in out[0]:
        assert torch.equal(out[0][k], out[1][k]), k
    # The server step never holds a client: the algorithm object is sealed during a run.
    with pytest.raises(TrainingError):
        algo.stash = contribs


def test_secagg_and_plaintext_give_the_same_pseudo_graph() -> None:
    from securefgl.protocols.registry import get_protocol

    fg = _federated()
    # Default (grid_upload): on-grid uploads make every protocol release bit-identical sums.
    algo = _algo(fg, condense_loops=60, min_class_contributors=2)
    rs, contribs = _upload(algo, _clients(fg))
    schema = algo.build_schema()
    released, graphs = [], []
    for name in ("plaintext", "secagg", "ckks"):
        sums, _ = get_protocol(name).aggregate(schema, contribs)
        released.append(sums)
        graphs.append(algo.server_step(algo.init_server(torch.Generator().manual_seed(0)), sums, rs))
    for other in released[1:]:
        for k in schema.names:
            assert torch.equal(released[0][k], other[k]), k
    for g in graphs[1:]:
        assert sorted(g) == sorted(graphs[0]) and all(torch.equal(g[k], graphs[0][k]) for k in g)
    # Without it, the protocol's stochastic rounding makes the sums differ within the stated error bound,
    # and the pseudo-graphs agree up to that quantisation.
    raw = _algo(fg, condense_loops=60, min_class_contributors=2, grid_upload=False)
    rs, contribs = _upload(raw, _clients(fg))
    plain, _ = get_protocol("plaintext").aggregate(schema, contribs)
    masked, _ = get_protocol("secagg").aggregate(schema, contribs)
    for k in ("sum", "sumsq"):
        assert (plain[k] - masked[k]).abs().max() <= masked.max_abs_error[k]
    a = raw.server_step(raw.init_server(torch.Generator().manual_seed(0)), plain, rs)
    b = raw.server_step(raw.init_server(torch.Generator().manual_seed(0)), masked, rs)
    assert torch.equal(a["y"], b["y"]) and torch.equal(a["edge_index"], b["edge_index"])
    assert torch.allclose(a["x"], b["x"], atol=1e-4) and torch.allclose(
        a["edge_weight"], b["edge_weight"], atol=1e-4
    )


def test_single_contributor_class_is_withheld_and_reported() -> None:
    from securefgl.protocols.registry import get_protocol

    fg = _federated()
    algo = _algo(fg, min_class_contributors=2)
    rs, contribs = _upload(algo, _clients(fg))
    # Class 2 is uploaded by client 0 only.
    for cid in (1, 2):
        for name in ("count", "sum", "sumsq", "contrib", "orig"):
            contribs[cid][name][2] = 0
    sums, _ = get_protocol("plaintext").aggregate(algo.build_schema(), contribs)
    assert sums.withheld_rows("sum")[2]
    server = algo.init_server(torch.Generator().manual_seed(0))
    out = algo.server_step(server, sums, rs)
    report = algo.run_report(server)
    assert report["withheld_classes"] == [2] and 2 not in report["released_classes"]
    assert out["released"].tolist() == [True, True, False]
    assert out["y"].tolist() == [0, 1]  # no pseudo node for the withheld class
    assert torch.isfinite(out["x"]).all() and torch.isfinite(out["edge_weight"]).all()
    # With the rule at 1 the same class is released and flagged as a single client's statistics.
    algo1 = _algo(fg, min_class_contributors=1)
    sums, _ = get_protocol("plaintext").aggregate(algo1.build_schema(), contribs)
    server = algo1.init_server(torch.Generator().manual_seed(0))
    algo1.server_step(server, sums, rs)
    assert algo1.run_report(server)["single_contributor_classes"] == [2]


def test_nothing_released_is_a_clear_error_or_local_training() -> None:
    from securefgl.protocols.registry import get_protocol

    fg = _federated()
    algo = _algo(fg, min_class_contributors=3)
    clients = _clients(fg)
    rs, contribs = _upload(algo, clients)
    for name in ("count", "sum", "sumsq", "contrib", "orig"):
        contribs[0][name].zero_()  # only 2 of 3 clients contribute: every class is withheld
    sums, _ = get_protocol("plaintext").aggregate(algo.build_schema(), contribs)
    with pytest.raises(TrainingError, match="size zero"):
        algo.server_step(algo.init_server(torch.Generator().manual_seed(0)), sums, rs)
    local = _algo(fg, min_class_contributors=3, on_empty="local")
    server = local.init_server(torch.Generator().manual_seed(0))
    out = local.server_step(server, sums, rs)
    assert "x" not in out and local.run_report(server)["withheld_classes"] == [0, 1, 2]
    from securefgl.algorithms.base import Phase

    local.personalize_clients(clients, out, Phase("train", kind="local"))
    scores = local.evaluate(clients, out, rs)
    assert all(torch.isfinite(s).all() for s in scores.values())


def test_feature_clip_rate_is_reported_from_the_sum() -> None:
    from securefgl.protocols.registry import get_protocol

    fg = _federated()
    algo = _algo(fg, feature_bound=0.5, min_class_contributors=1)
    rs, contribs = _upload(algo, _clients(fg))
    sums, _ = get_protocol("plaintext").aggregate(algo.build_schema(), contribs)
    server = algo.init_server(torch.Generator().manual_seed(0))
    algo.server_step(server, sums, rs)
    rate = algo.run_report(server)["feature_clip_rate"]
    assert 0.0 < rate <= 1.0
    total = sum(float(c["clip"][0]) for c in contribs.values()) / sum(
        float(c["clip"][1]) for c in contribs.values()
    )
    assert rate == pytest.approx(total)


def _run(fg, protocol: str, options: dict, model: dict | None = None):
    from securefgl.config import RunConfig
    from securefgl.engine.runner import run_seed

    cfg = RunConfig.from_mapping(
        {
            "protocol": {"name": protocol},
            "algorithm": {"name": "opfgl", "options": {**FAST, **options}},
            "partition": {"clients": fg.num_clients},
            "model": model or {"name": "gcn", "hidden": 16, "dropout": 0.0},
        }
    )
    return run_seed(cfg, fg, 0, torch.device("cpu"))


def test_end_to_end_small_synthetic_graph_with_an_absent_class() -> None:
    """Full run through the engine; class 3 has no node anywhere (absent everywhere)."""
    fg = _federated(num_classes=3)
    fg.num_classes = 4  # a dataset whose class 3 is absent everywhere
    res = _run(fg, "plaintext", {"min_class_contributors": 2})
    assert res.report["absent_classes"] == [3]
    assert res.report["released_classes"] == [0, 1, 2]
    overall = res.final.overall
    for key in ("test_acc", "test_f1", "val_acc"):
        assert math.isfinite(overall[key])
    assert overall["test_acc"] > 0.5
    up = res.rounds[0].bytes_up
    assert len(up) == fg.num_clients and all(v > 0 for v in up.values())
    assert res.report["broadcast_bytes"] > 0
    # the pseudo-graph download is charged once to every client, by the local phase that consumes it
    local = [r for r in res.rounds if r.phase != res.rounds[0].phase]
    assert local and all(d >= res.report["broadcast_bytes"] for d in local[0].bytes_down.values())
    assert sum(r.bytes_down.get(0, 0) for r in local) == local[0].bytes_down[0]


def test_heterogeneous_client_models() -> None:
    fg = _federated()
    res = _run(fg, "plaintext", {"client_models": ("gcn:hidden=8", "sgc:K=2", "gcn:hidden=24,layers=3")})
    assert math.isfinite(res.final.overall["test_acc"])


def test_options_and_compatibility() -> None:
    from securefgl.algorithms.opfgl import OPFGL, OPFGLOptions, parse_model_entry
    from securefgl.protocols.registry import ProtocolSpec

    with pytest.raises(ConfigError):
        OPFGLOptions(top_k=-1)
    with pytest.raises(ConfigError):
        OPFGLOptions(gamma_min=0.5, gamma_max=0.1)
    with pytest.raises(ConfigError):
        OPFGLOptions(client_models=("gcn:hidden",))
    assert parse_model_entry("sgc:K=4,dropout=0.0") == {"name": "sgc", "dropout": 0.0, "options": {"K": 4}}
    a5 = {"model": "gcn", "dataset": "Cora", "options": {"generation": "client"}, "num_clients": 10}
    probs = OPFGL.compatibility(protocol=ProtocolSpec("secagg"), **a5)
    assert len(probs) == 1 and probs[0].permanent
    assert OPFGL.compatibility(protocol=ProtocolSpec("ckks"), **a5) == []
    assert OPFGL.compatibility(protocol=ProtocolSpec("ckks+dp"), **a5) == []  # the base is what counts


def test_presets() -> None:
    from securefgl.algorithms.opfgl import OPFGLOptions
    from securefgl.algorithms.opfgl.presets import preset_cases, preset_config
    from securefgl.config import RunConfig

    for ds, part in preset_cases("opfgl-paper"):
        cfg = preset_config("opfgl-paper", dataset=ds, partition=part)
        OPFGLOptions(**cfg["algorithm"]["options"])
    cfg = RunConfig.from_mapping(preset_config("opfgl-paper", dataset="cora", partition="louvain"))
    assert cfg.algorithm.options["degree_threshold"] == 20 and cfg.algorithm.options["gamma_max"] == 0.15
    assert cfg.seeds == (0, 1, 2) and cfg.partition.method == "louvain+"
    with pytest.raises(ConfigError):
        preset_config("opfgl-paper", dataset="Cora", partition="random")
    with pytest.raises(ConfigError):
        preset_config("nope", dataset="Cora", partition="metis+")


def test_a5_variant_clients_build_the_same_graph_under_ckks() -> None:
    """A.5: the sum goes to the clients (CKKS); each rebuilds G' from the shared seed; all agree."""
    from securefgl.algorithms.base import Phase
    from securefgl.algorithms.opfgl import pseudo_graph_from_broadcast
    from securefgl.protocols.registry import get_protocol

    fg = _federated()
    algo = _algo(fg, generation="client", min_class_contributors=2)
    clients = _clients(fg)
    rs, contribs = _upload(algo, clients)
    [request] = algo.requests(rs)
    assert request.recipient == 0 and request.relay
    sums, transcript = get_protocol("ckks").aggregate(request.schema, contribs, recipient=request.recipient)
    for c in clients:  # what the engine does with relay=True: the same sum into every participant's inbox
        c.inbox[request.key] = sums
    # the server step receives nothing and forwards the public seeds only
    out = algo.server_step(algo.init_server(torch.Generator().manual_seed(0)), {}, rs)
    assert "x" not in out
    algo.personalize_clients(clients, out, Phase("train", kind="local"))
    digests = {c.state["opfgl"]["pseudo_graph_digest"] for c in clients}
    assert len(digests) == 1
    assert all(c.state["opfgl"]["report"]["released_classes"] == [0, 1, 2] for c in clients)
    # the same sums and seeds on the server side give the very same graph
    server_algo = _algo(fg, min_class_contributors=2)
    server = server_algo.init_server(torch.Generator().manual_seed(0))
    graph = pseudo_graph_from_broadcast(server_algo.server_step(server, sums, rs), fg.num_classes)
    assert graph.digest() in digests
    scores = algo.evaluate(clients, out, rs)
    assert all(torch.isfinite(s).all() for s in scores.values())


def test_fast_gcn_path_equals_the_model_forward() -> None:
    from securefgl.algorithms.opfgl._train import LocalGraph
    from securefgl.nn.registry import ModelSpec, build_model

    g = torch.Generator().manual_seed(0)
    x = (torch.rand(50, 40, generator=g) < 0.05).float()  # sparse bag-of-words: sparse first layer
    ei = _undirected([(i, (i * 7 + 3) % 50) for i in range(50) if i != (i * 7 + 3) % 50])
    w = torch.rand(ei.size(1), generator=g) + 0.1
    model = build_model(ModelSpec("gcn", hidden=8, layers=3, dropout=0.0), 40, 3, generator=g)
    for graph, ref in [
        (LocalGraph(x, ei), lambda: model(x, ei)),
        (LocalGraph(x * 3 + 1, ei), lambda: model(x * 3 + 1, ei)),  # dense features
    ]:
        a, b = graph.logits(model), ref()
        assert torch.allclose(a, b, atol=1e-5)
        ga = torch.autograd.grad(a.square().sum(), list(model.parameters()))
        gb = torch.autograd.grad(b.square().sum(), list(model.parameters()))
        assert all(torch.allclose(u, v, atol=1e-4) for u, v in zip(ga, gb, strict=True))
    # weighted edges (the pseudo-graph) go through the same operator as PyG's GCNConv with edge weights
    from torch_geometric.nn import GCNConv

    conv = GCNConv(40, 3)
    conv.lin.weight.data = model.convs[0].lin.weight.data[:3].clone()
    one = build_model(ModelSpec("gcn", hidden=8, layers=1, dropout=0.0), 40, 3, generator=g)
    one.convs[0].lin.weight.data = conv.lin.weight.data.clone()
    assert torch.allclose(LocalGraph(x, ei, w).logits(one), conv(x, ei, w), atol=1e-5)


def test_shared_stage1_equals_per_client_stage1() -> None:
    from securefgl.algorithms.opfgl._train import LocalGraph, StageConfig, train_stage1, train_stage1_shared
    from securefgl.nn.registry import ModelSpec, build_model

    fg = _federated()
    m = _moments(c=3, f=fg.num_features, seed=1)
    pg = generate_pseudo_graph(m, fg.num_features, PseudoGraphConfig(loops=30), seed=2)
    cfg = StageConfig(lr=1e-2, max_iters=120, eval_every=20, patience=2)

    def fresh():
        return build_model(
            ModelSpec("gcn", hidden=8, dropout=0.0),
            fg.num_features,
            3,
            generator=torch.Generator().manual_seed(5),
        )

    locs = [(LocalGraph(d.x, d.edge_index), d.y, d.val_mask) for d in fg.clients]
    shared = train_stage1_shared(fresh(), pg.x, pg.edge_index, pg.edge_weight, pg.y, locs, cfg)
    for (state, res), (graph, y, val) in zip(shared, locs, strict=True):
        model = fresh()
        alone = train_stage1(model, pg.x, pg.edge_index, pg.edge_weight, pg.y, graph, y, val, cfg)
        assert (alone.best_val, alone.best_iter, alone.iters) == (res.best_val, res.best_iter, res.iters)
        for k, v in model.state_dict().items():
            assert torch.equal(v, state[k]), k


def test_server_min_class_count_and_per_client_top_k() -> None:
    from securefgl.protocols.registry import get_protocol

    fg = _federated()
    algo = _algo(fg, min_class_contributors=1, client_top_k=(0, 3, 0))
    clients = _clients(fg)
    rs, contribs = _upload(algo, clients)
    assert clients[0].state["opfgl"]["reliable"] == 0 and clients[2].state["opfgl"]["reliable"] == 0
    sums, _ = get_protocol("plaintext").aggregate(algo.build_schema(), contribs)
    counts = sums["count"].tolist()
    threshold = int(min(counts)) + 1  # the smallest class falls below the server-side threshold
    small = _algo(fg, min_class_contributors=1, min_class_count=threshold)
    server = small.init_server(torch.Generator().manual_seed(0))
    out = small.server_step(server, sums, rs)
    report = small.run_report(server)
    skipped = [c for c, n in enumerate(counts) if n < threshold]
    assert report["below_min_count_classes"] == skipped and set(skipped) <= set(report["withheld_classes"])
    assert sorted(set(out["y"].tolist())) == [c for c in range(3) if c not in skipped]


def test_a5_every_client_reads_only_its_own_inbox(monkeypatch) -> None:
    """A.5 through the engine: the released sum is relayed into every client's own inbox (the same object);
    a client-side generation given one client reads that client's inbox only, and a client without the sum
    is a clear error instead of a read of another client's inbox."""
    from securefgl.algorithms.base import Phase
    from securefgl.algorithms.opfgl import OPFGL
    from securefgl.algorithms.opfgl.schema import STATS
    from securefgl.protocols.registry import get_protocol

    fg = _federated()
    seen: dict[int, object] = {}
    original = OPFGL._client_generation

    def spy(self, clients, broadcast):
        seen.update({c.id: c.inbox.get(STATS) for c in clients})
        return original(self, clients, broadcast)

    monkeypatch.setattr(OPFGL, "_client_generation", spy)
    res = _run(fg, "ckks", {"generation": "client", "min_class_contributors": 2})
    assert math.isfinite(res.final.overall["test_acc"])
    assert sorted(seen) == list(range(fg.num_clients))
    assert all(s is not None for s in seen.values())
    assert len({id(s) for s in seen.values()}) == 1  # one released sum, relayed unchanged
    monkeypatch.undo()

    algo = _algo(fg, generation="client", min_class_contributors=2)
    clients = _clients(fg)
    rs, contribs = _upload(algo, clients)
    [request] = algo.requests(rs)
    sums, _ = get_protocol("plaintext").aggregate(request.schema, contribs)
    out = algo.server_step(algo.init_server(torch.Generator().manual_seed(0)), {}, rs)
    clients[0].inbox[STATS] = sums
    # client 0 alone: its own inbox suffices; the others' (empty) inboxes are never consulted
    graphs = algo._client_generation(clients[:1], out)
    assert graphs[0] is not None and clients[0].state["opfgl"]["report"]["released_classes"] == [0, 1, 2]
    # a client whose inbox holds nothing does not fall back on another client's inbox
    with pytest.raises(TrainingError, match="client 1 has no summed statistics"):
        algo._client_generation(clients[:2], out)
    with pytest.raises(TrainingError, match="client 2"):
        algo.personalize_clients([clients[2]], out, Phase("train", kind="local"))
    # each client builds from its own inbox: a different sum in client 1's inbox gives a different graph
    other = get_protocol("plaintext").aggregate(request.schema, {k: contribs[k] for k in (0, 1)})[0]
    clients[1].inbox[STATS] = other
    g1 = algo._client_graph(clients[1], out)
    assert g1 is None or g1.digest() != graphs[0].digest()
