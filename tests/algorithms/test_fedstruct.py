"""FedStruct: private multi-hop setup, decoupled GCN, FedSGD through the protocols, end to end."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from securefgl.algorithms.base import Client, RoundState, Setting
from securefgl.algorithms.fedstruct import FedStruct, attach_cross_edges
from securefgl.algorithms.fedstruct._setup import (
    SetupTooLargeError,
    SingleContributorWarning,
    StructureView,
    central_abar,
    check_setup_budget,
    local_abar,
    private_abar,
)
from securefgl.algorithms.fedstruct.model import DecoupledGCN
from securefgl.algorithms.fedstruct.schema import setup_schema
from securefgl.algorithms.registry import create_algorithm, get_algorithm
from securefgl.config import RunConfig
from securefgl.data import make_csbm, partition_graph
from securefgl.data.federated import build_federated_graph
from securefgl.engine.runner import make_setting, run_seed
from securefgl.errors import ConfigError, PartitionError
from securefgl.protocols.base import SERVER
from securefgl.protocols.registry import get_protocol


@pytest.fixture(scope="module")
def small_fg():
    data = make_csbm(num_nodes=60, num_classes=3, avg_degree=4.0, homophily=0.7, num_features=8, seed=0)
    return attach_cross_edges(partition_graph(data, "random", 4, seed=0, cache=False))


def _views(fg):
    return [StructureView.from_data(i, c) for i, c in enumerate(fg.clients)]


def _central(fg, hops, beta=None):
    g = fg.global_data()
    return central_abar(g.edge_index, g.num_nodes, hops, beta)


@pytest.mark.parametrize(
    ("name", "tol"),
    [("none", 1e-12), ("plaintext", 1e-6), ("secagg", 1e-6), ("secagg+", 1e-6), ("ckks", 1e-4)],
)
def test_private_setup_equals_central_powers(small_fg, name, tol):
    protocol = None if name == "none" else get_protocol(name)
    beta = (0.2, 0.3, 0.5)
    ref = _central(small_fg, 3, beta)
    abar, cost = private_abar(_views(small_fg), protocol, 3, beta=beta)
    for c, a in zip(small_fg.clients, abar, strict=True):
        assert a.shape == (c.num_nodes, small_fg.num_nodes)
        assert float((a - ref[c.global_id]).abs().max()) < tol
    if protocol is not None:
        assert cost.aggregations == 2 * 4  # (L_s - 1) K receiver-blinded sums
        assert all(v > 0 for v in cost.bytes_up.values())


def test_pure_power_default_and_local_branch(small_fg):
    ref = _central(small_fg, 2)
    g = small_fg.global_data()
    a = torch.zeros(g.num_nodes, g.num_nodes, dtype=torch.float64)
    a[g.edge_index[0], g.edge_index[1]] = 1.0
    a += torch.eye(g.num_nodes, dtype=torch.float64)
    a_hat = a / a.sum(1, keepdim=True)  # row normalisation, global degrees
    assert torch.allclose(ref, a_hat @ a_hat)
    abar, _ = private_abar(_views(small_fg), None, 2)
    assert torch.allclose(abar[1], (a_hat @ a_hat)[small_fg.clients[1].global_id])
    c = small_fg.clients[0]
    loc = local_abar(c.edge_index, c.num_nodes, 1)
    assert torch.allclose(loc.sum(1), torch.ones(c.num_nodes, dtype=torch.float64))


def test_server_never_sees_an_unmasked_block(small_fg):
    views = _views(small_fg)
    owner = torch.full((small_fg.num_nodes,), -1, dtype=torch.long)
    for v in views:
        owner[v.gid] = v.cid
    n0 = views[0].num_nodes
    prev = [v.first_power() for v in views]
    contribs = {v.cid: {"B": v.contribution(0, n0, owner, prev[v.cid])} for v in views}
    total = sum(c["B"] for c in contribs.values())
    schema = setup_schema(n0, small_fg.num_nodes, max_clients=4, bound=60.0)

    def leaks(transcript, vec: np.ndarray) -> bool:
        nz = np.flatnonzero(vec)
        start = int(nz[0]) if nz.size else 0
        needle = np.ascontiguousarray(vec[start : start + 6]).tobytes()
        return any(needle in m.payload for m in transcript.view(SERVER))

    ring = {c: schema.encode(v).data for c, v in contribs.items()}
    floats = {c: schema.pack(v)[0] for c, v in contribs.items()}
    _, plain_tr = get_protocol("plaintext").aggregate(schema, contribs, recipient=0)
    assert any(leaks(plain_tr, floats[c]) or leaks(plain_tr, ring[c]) for c in contribs)  # the check can fail
    sums, tr = get_protocol("secagg").aggregate(schema, contribs, recipient=0)
    assert tr.recipient == 0 and tr.view(SERVER)
    assert not any(leaks(tr, floats[c]) or leaks(tr, ring[c]) for c in contribs)
    assert not leaks(tr, schema.pack({"B": total})[0]) and not leaks(tr, schema.encode({"B": total}).data)
    assert float((sums["B"] - total).abs().max()) < 1e-6


def test_pruning_keeps_top_entries(small_fg):
    dense, _ = private_abar(_views(small_fg), None, 3)
    pruned, _ = private_abar(_views(small_fg), None, 3, prune_p=2)
    for c, d, p in zip(small_fg.clients, dense, pruned, strict=True):
        assert int((p != 0).sum()) <= 2 * c.num_nodes
        assert float(p.sum()) <= float(d.sum()) + 1e-9
    big, _ = private_abar(_views(small_fg), None, 3, prune_p=small_fg.num_nodes)
    assert all(torch.allclose(a, b) for a, b in zip(big, dense, strict=True))


def test_dense_setup_over_budget_is_refused_with_estimate(small_fg):
    with pytest.raises(SetupTooLargeError, match=r"GiB.*num_hops_s=1.*prune"):
        check_setup_budget([271] * 10, 2708, 10, max_bytes=2**30, max_memory=2**40, pruned=False)
    with pytest.raises(SetupTooLargeError, match="setup_max_memory"):
        private_abar(_views(small_fg), None, 3, max_memory=1000)
    est = check_setup_budget([271] * 10, 2708, 10, max_bytes=2**40, max_memory=2**40, pruned=False)
    assert (
        est["per_client_bytes"] == 9 * 2708 * 2708 * 8 and est["total_bytes"] == 10 * est["per_client_bytes"]
    )
    setting, _ = _setting(small_fg)
    alg = create_algorithm("fedstruct", setting, {"num_hops_s": 3, "setup_max_bytes": 1000.0})
    with pytest.raises(SetupTooLargeError, match="would send"):
        alg.phases(setting.train)


def test_missing_cross_edge_information_is_a_clear_error(small_fg):
    bare = dataclasses.replace(small_fg, cross_edges=None)
    with pytest.raises(PartitionError, match="cross-client edges"):
        attach_cross_edges(bare)
    raw = partition_graph(make_csbm(num_nodes=40, num_features=4, seed=1), "random", 2, seed=0, cache=False)
    with pytest.raises(PartitionError, match="attach_cross_edges"):
        StructureView.from_data(0, raw.clients[0])


def test_single_contributor_warns_and_isolated_client_works():
    # two communities: nodes 0..29 (clients 0 and 1, linked), nodes 30..49 (client 2, no inter-client edges)
    rng = np.random.default_rng(0)
    edges = set()
    for lo, hi in ((0, 30), (30, 50)):
        for _ in range(3 * (hi - lo)):
            a, b = rng.integers(lo, hi, 2)
            if a != b:
                edges |= {(int(a), int(b)), (int(b), int(a))}
    ei = torch.tensor(sorted(edges)).T
    data = make_csbm(num_nodes=50, num_features=4, num_classes=2, seed=0)
    data.edge_index = ei
    owner = np.array([i % 2 for i in range(30)] + [2] * 20)
    masks = tuple(np.arange(50) % 3 == r for r in range(3))
    fg = attach_cross_edges(build_federated_graph(data, owner, 3, masks))
    views = _views(fg)
    assert views[2].cross_src.numel() == 0
    with pytest.warns(SingleContributorWarning, match="client 0"):
        abar, _ = private_abar(views, get_protocol("secagg"), 3)
    ref = _central(fg, 3)
    for c, a in zip(fg.clients, abar, strict=True):
        assert float((a - ref[c.global_id]).abs().max()) < 1e-6
    assert float(abar[2][:, :30].abs().max()) == 0.0  # the isolated client's rows stay on its own nodes


def _setting(fg, rounds=5, lr=0.01):
    cfg = RunConfig.from_mapping({"train": {"rounds": rounds, "lr": lr, "weight_decay": 0.0}})
    setting = Setting(
        fg.num_features,
        fg.num_classes,
        fg.num_clients,
        fg.num_nodes,
        fg.num_nodes,
        cfg.model,
        cfg.train,
        max_clients_per_round=fg.num_clients,
    )
    return setting, cfg


SMALL = {"num_hops": 2, "num_hops_s": 3, "d_s": 16, "hidden_f": [8], "hidden_s": [8], "dropout": 0.0}


@pytest.mark.parametrize(("protocol", "u_form"), [("plaintext", False), ("secagg", False), ("secagg", True)])
def test_fedsgd_aggregated_gradient_equals_central_gradient(small_fg, protocol, u_form):
    setting, _ = _setting(small_fg)
    alg = create_algorithm("fedstruct", setting, {**SMALL, "u_form": u_form})
    proto = get_protocol(protocol)
    clients = [Client(i, d, torch.Generator().manual_seed(i)) for i, d in enumerate(small_fg.clients)]
    for c in clients:
        alg.init_client(c)
    server = alg.init_server(torch.Generator().manual_seed(0))
    bc = alg.initial_broadcast(server)
    g_round = 0
    for phase in alg.phases(setting.train)[:-1]:
        for r in range(phase.rounds):
            rs = RoundState(phase.name, r, g_round, tuple(range(4)), bc)
            (req,) = alg.requests(rs)
            outs = alg.client_steps(clients, rs)
            sums, _ = proto.aggregate(req.schema, outs, round_index=g_round, recipient=req.recipient)
            if req.recipient is None:
                bc = alg.server_step(server, sums, rs)
            else:
                clients[req.recipient].inbox[req.key] = sums
            g_round += 1
    assert torch.equal(bc["owner"], small_fg.node_owner)
    params0 = {k: v.clone() for k, v in bc.items() if k.startswith("theta.") or k == "S"}
    rs = RoundState("train", 0, g_round, tuple(range(4)), bc)
    (req,) = alg.requests(rs)
    outs = alg.client_steps(clients, rs)
    if u_form:  # the upload is the n x C matrix U plus the feature-branch gradients only
        assert outs[0]["U"].shape == (small_fg.num_nodes, 3)
        assert not any(k.startswith("g.theta.g.") or k == "g.S" for k in outs[0])
    sums, _ = proto.aggregate(req.schema, outs, round_index=g_round)
    alg.server_step(server, sums, rs)
    fed = server["last_grad"]

    # centralised: the whole graph's A-bar rows, each client's local A-bar, one loss over all train nodes
    g = small_fg.global_data()
    abar = central_abar(g.edge_index, g.num_nodes, 3).float()
    model = DecoupledGCN(g.num_features if hasattr(g, "num_features") else 8, 3, 16, [8], [8], 0.0)
    params = {k: v.clone().requires_grad_(True) for k, v in params0.items()}
    theta = {k[6:]: v for k, v in params.items() if k.startswith("theta.")}
    total, count = 0.0, 0
    for c in small_fg.clients:
        aloc = local_abar(c.edge_index, c.num_nodes, 2).float()
        z = torch.func.functional_call(model, theta, (c.x, aloc, abar[c.global_id], params["S"]))
        total = total + F.cross_entropy(z[c.train_mask], c.y[c.train_mask], reduction="sum")
        count += int(c.train_mask.sum())
    grads = torch.autograd.grad(total / count, list(params.values()))
    assert set(fed) == set(params)
    for k, gr in zip(params, grads, strict=True):
        assert torch.allclose(fed[k], gr, atol=1e-5, rtol=1e-4), k
    assert server["num_train"] == count


def test_options_are_validated():
    with pytest.raises(ConfigError, match="nsf"):
        FedStruct.Options(nsf="spectral")
    with pytest.raises(ConfigError, match="gdv_graphlet_size"):
        FedStruct.Options(nsf="gdv", gdv_graphlet_size=3)
    with pytest.raises(ConfigError, match="beta"):
        FedStruct.Options(num_hops_s=2, beta=(1.0,))
    with pytest.raises(ConfigError, match="u_form"):
        FedStruct.Options(u_form=True)  # default dropout 0.7 in g: the U-form would not be exact
    assert get_algorithm("fedstruct") is FedStruct


def _run(fg, protocol, options, rounds=25):
    cfg = RunConfig.from_mapping(
        {
            "protocol": {"name": protocol},
            "algorithm": {"name": "fedstruct", "options": options},
            "train": {
                "rounds": rounds,
                "lr": 0.01,
                "weight_decay": 5e-4,
                "select_best": False,
                "eval_every": 5,
            },
            "output": {"save": False},
        }
    )
    return run_seed(cfg, fg, 0, torch.device("cpu"))


def test_end_to_end_small_graph_secagg_equals_plaintext():
    data = make_csbm(
        num_nodes=200, num_classes=3, avg_degree=6.0, homophily=0.8, num_features=8, signal=0.5, seed=3
    )
    fg = attach_cross_edges(partition_graph(data, "random", 4, seed=0, split=(0.2, 0.2, 0.6), cache=False))
    opts = {**SMALL, "dropout": 0.3}
    plain = _run(fg, "plaintext", opts)
    secure = _run(fg, "secagg", opts)
    assert [r.phase for r in plain.rounds][:1] == ["directory"]
    assert sum(r.phase == "setup" for r in plain.rounds) == 2 * 4
    assert plain.final.overall["test_acc"] > 0.7
    assert abs(plain.final.overall["test_acc"] - secure.final.overall["test_acc"]) <= 0.02
    setup_up = sum(sum(r.bytes_up.values()) for r in secure.rounds if r.phase == "setup")
    # dense masked n_i x n blocks to every receiver: (L_s - 1) K n^2 ring elements of >= 5 bytes (packed ring)
    assert setup_up >= 2 * 4 * 200 * 200 * 5
    deg = _run(fg, "plaintext", {**opts, "nsf": "degree"}, rounds=25)
    losses = [r.loss for r in deg.rounds if r.phase == "train"]
    assert losses[-1] < 0.8 * losses[0] and deg.final.overall["test_acc"] > 0.55


def test_missing_cross_edges_fail_the_run():
    data = make_csbm(num_nodes=60, num_features=4, seed=0)
    fg = partition_graph(data, "random", 3, seed=0, cache=False)
    stripped = dataclasses.replace(fg, cross_edges=None, cross_owners=None)
    with pytest.raises(PartitionError, match="cross-client edge"):
        _run(stripped, "plaintext", SMALL, rounds=1)


@pytest.mark.parametrize("nsf", ["gdv", "node2vec"])
def test_fedstruct_a_server_computes_global_features(nsf):
    """node2vec / GDV run as FedStruct-A: the server gets the federation's edges (only then), computes S once
    and broadcasts it; the private setup still gives the structure rows, and training learns."""
    data = make_csbm(
        num_nodes=200, num_classes=3, avg_degree=6.0, homophily=0.8, num_features=8, signal=0.5, seed=3
    )
    fg = attach_cross_edges(partition_graph(data, "random", 4, seed=0, split=(0.2, 0.2, 0.6), cache=False))
    opts = {**SMALL, "dropout": 0.3, "nsf": nsf, "n2v_epochs": 2, "d_s": 16}
    cfg = RunConfig.from_mapping({"algorithm": {"name": "fedstruct", "options": opts}})
    setting = make_setting(cfg, fg, "cpu")
    g = fg.global_data()
    assert setting.public_edge_index is not None
    assert setting.public_edge_index.shape[1] == torch.unique(g.edge_index, dim=1).shape[1]
    b_cfg = RunConfig.from_mapping({"algorithm": {"name": "fedstruct", "options": SMALL}})
    assert make_setting(b_cfg, fg, "cpu").public_edge_index is None  # FedStruct-B: the server knows no edge
    res = _run(fg, "secagg", opts, rounds=25)
    losses = [r.loss for r in res.rounds if r.phase == "train"]
    assert losses[-1] < 0.8 * losses[0]
    assert res.final.overall["test_acc"] > 0.5
    assert res.report["variant"] == "A" and res.report["nsf"] == nsf


def test_fedstruct_a_without_server_edges_is_a_clear_error(small_fg):
    setting = make_setting(RunConfig.from_mapping({"algorithm": {"name": "fedstruct"}}), small_fg, "cpu")
    algo = FedStruct(setting, {"nsf": "gdv"})  # a B-mode setting: the server was given no edge
    with pytest.raises(ConfigError, match="FedStruct-A"):
        algo.init_server(torch.Generator().manual_seed(0))
