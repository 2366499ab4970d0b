"""Tests of FedSpray (the securefgl.algorithms.fedspray package and its private helpers)."""

from __future__ import annotations

import dataclasses
import logging
import math

import pytest
import torch
from torch_geometric.data import Data

from securefgl.algorithms.base import Client, RoundState, Setting
from securefgl.algorithms.fedspray import FedSpray, FedSprayOptions
from securefgl.algorithms.fedspray._batch import client_batch
from securefgl.algorithms.fedspray._train import (
    ClientState,
    LocalResult,
    client_uploads,
    local_update,
    stack_states,
    unstack_states,
)
from securefgl.algorithms.fedspray.encoder import ENCODER_KEYS, encoder_shapes, init_encoder
from securefgl.algorithms.fedspray.models import gnn_forward, to_math_layout
from securefgl.algorithms.fedspray.options import Hyper
from securefgl.algorithms.fedspray.presets import get_preset, preset_names
from securefgl.algorithms.fedspray.server import server_update
from securefgl.algorithms.registry import create_algorithm, find_problems
from securefgl.config import TrainConfig
from securefgl.errors import ConfigError, NonFiniteError, TrainingError
from securefgl.nn import ModelSpec, build_model
from securefgl.protocols.base import Sums
from securefgl.protocols.registry import get_protocol
from securefgl.training.optim import StackedOptimizer

C, F, D = 4, 40, 8


@pytest.fixture(autouse=True)
def _one_thread():
    """Tiny tensors: intra-op threads only add contention (100x slower on a loaded 2-core machine)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def _client(n: int, major: int, gen: torch.Generator, *, sparse: bool = True) -> Data:
    """A small label-skewed graph: 70% of nodes in ``major``, class-dependent features, homophilous edges."""
    y = torch.where(
        torch.rand(n, generator=gen) < 0.7, torch.full((n,), major), torch.randint(0, C, (n,), generator=gen)
    )
    if sparse:
        p = 0.04 + 0.2 * (torch.arange(F)[None] % C == y[:, None]).float()
        x = (torch.rand(n, F, generator=gen) < p).float()
    else:
        x = torch.randn(n, F, generator=gen) + 0.8 * torch.nn.functional.one_hot(y, C).repeat(1, F // C)
    src = torch.randint(0, n, (3 * n,), generator=gen)
    dst = torch.randint(0, n, (3 * n,), generator=gen)
    keep = (y[src] == y[dst]) | (torch.rand(3 * n, generator=gen) < 0.2)
    ei = torch.stack([src[keep], dst[keep]])
    ei = torch.cat([ei, ei.flip(0)], 1)
    perm = torch.randperm(n, generator=gen)
    masks = [torch.zeros(n, dtype=torch.bool) for _ in range(3)]
    masks[0][perm[: n // 4]] = True
    masks[1][perm[n // 4 : n // 2]] = True
    masks[2][perm[n // 2 :]] = True
    return Data(x=x, y=y, edge_index=ei, train_mask=masks[0], val_mask=masks[1], test_mask=masks[2])


def _clients(k: int = 3, seed: int = 0, *, sparse: bool = True) -> list[Data]:
    gen = torch.Generator().manual_seed(seed)
    return [_client(40 + 13 * i, i % C, gen, sparse=sparse) for i in range(k)]


def _states(datas: list[Data], kind: str = "gcn", seed: int = 0, hidden: int = 16) -> list[ClientState]:
    gen = torch.Generator().manual_seed(seed)
    out = []
    for d in datas:
        model = build_model(ModelSpec(name=kind, hidden=hidden, dropout=0.0), F, C, generator=gen)
        gnn = {n: p.detach().clone() for n, p in model.named_parameters()}
        enc = {k: torch.zeros(s) for k, s in encoder_shapes(F, D, C).items()}
        out.append(ClientState(gnn, enc, torch.full((d.num_nodes, D), 0.1)))
    return out


def _setting(datas: list[Data], kind: str = "gcn", rounds: int = 3) -> Setting:
    n = sum(d.num_nodes for d in datas)
    return Setting(
        num_features=F,
        num_classes=C,
        num_clients=len(datas),
        num_nodes=n,
        count_bound=n,
        model=ModelSpec(name=kind, hidden=16, dropout=0.0),
        train=TrainConfig(rounds=rounds, local_epochs=2, lr=0.01, weight_decay=0.0),
        device=torch.device("cpu"),
        max_clients_per_round=len(datas),
    )


def _engine_clients(datas: list[Data], seed: int = 0) -> list[Client]:
    ws: dict = {"generator": torch.Generator().manual_seed(seed + 99)}
    return [
        Client(i, d, torch.Generator().manual_seed(seed * 100 + i), workspace=ws) for i, d in enumerate(datas)
    ]


def _round(algo, server, clients, broadcast, protocol, r: int):
    rs = RoundState("train", r, r, tuple(c.id for c in clients), broadcast, 3)
    schema = algo.schema(rs)
    uploads = algo.client_steps(clients, rs)
    sums, transcript = protocol.aggregate(schema, uploads, round_index=r)
    return uploads, sums, algo.server_step(server, sums, rs), schema


# ------------------------------------------------------------------------------------------------------
# building blocks
# ------------------------------------------------------------------------------------------------------


def test_stacked_adam_with_node_rows_equals_one_torch_adam_per_client():
    """FedSpray's optimiser layout: per-client weights plus per-node proxy rows, clients at different
    step counts (they joined at different rounds), against one ``torch.optim.Adam`` per client."""
    gen = torch.Generator().manual_seed(1)
    k, segs = 3, [(0, 2), (2, 5), (5, 6)]
    w0, p0 = torch.randn(k, 5, 4, generator=gen), torch.randn(6, 4, generator=gen)
    ref = [
        (torch.nn.Parameter(w0[i].clone()), torch.nn.Parameter(p0[s:e].clone()))
        for i, (s, e) in enumerate(segs)
    ]
    opts = [torch.optim.Adam(list(r), lr=0.05, weight_decay=0.01) for r in ref]
    w, p = w0.clone().requires_grad_(True), p0.clone().requires_grad_(True)
    buffers = {
        f"{n}.{b}": torch.zeros_like(t) for n, t in (("w", w), ("p", p)) for b in ("exp_avg", "exp_avg_sq")
    }
    steps = torch.zeros(k, dtype=torch.float64)
    for i in range(k):  # client i takes i steps alone first, each as a batch of one
        for _ in range(i):
            gw, gp = torch.randn(5, 4, generator=gen), torch.randn(segs[i][1] - segs[i][0], 4, generator=gen)
            s, e = segs[i]
            one = {
                "w": w.detach()[i : i + 1].clone().requires_grad_(True),
                "p": p.detach()[s:e].clone().requires_grad_(True),
            }
            state = (
                {n: b[i : i + 1] if n.startswith("w") else b[s:e] for n, b in buffers.items()},
                steps[i : i + 1],
            )
            alone = StackedOptimizer(one, "adam", 0.05, 0.01, state=state, segments={"p": [(0, e - s)]})
            one["w"].grad, one["p"].grad = gw[None].clone(), gp.clone()
            alone.step()
            with torch.no_grad():
                w[i], p[s:e] = one["w"][0], one["p"]
            ref[i][0].grad, ref[i][1].grad = gw.clone(), gp.clone()
            opts[i].step()
    assert steps.tolist() == [0.0, 1.0, 2.0]
    opt = StackedOptimizer({"w": w, "p": p}, "adam", 0.05, 0.01, state=(buffers, steps), segments={"p": segs})
    for _ in range(4):
        gw, gp = torch.randn(k, 5, 4, generator=gen), torch.randn(6, 4, generator=gen)
        w.grad, p.grad = gw.clone(), gp.clone()
        opt.step()
        for i, (s, e) in enumerate(segs):
            ref[i][0].grad, ref[i][1].grad = gw[i].clone(), gp[s:e].clone()
            opts[i].step()
    for i, (s, e) in enumerate(segs):
        torch.testing.assert_close(w.detach()[i], ref[i][0].detach(), rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(p.detach()[s:e], ref[i][1].detach(), rtol=1e-5, atol=1e-6)
    opt.reset()
    assert float(opt.steps.abs().sum()) == 0.0 and all(
        float(b.abs().sum()) == 0.0 for b in opt.buffers.values()
    )


@pytest.mark.parametrize("kind", ["gcn", "sage", "sgc"])
@pytest.mark.parametrize("sparse", [True, False])
def test_batched_gnn_equals_securefgl_nn_model(kind, sparse):
    datas = _clients(3, seed=2, sparse=sparse)
    pack = client_batch(datas, num_classes=C)
    assert (pack.sparse_features()[1] is not None) == sparse
    spec = ModelSpec(name=kind, hidden=16, dropout=0.0)
    gen = torch.Generator().manual_seed(0)
    models = [build_model(spec, F, C, generator=gen).eval() for _ in datas]
    params = {
        n: to_math_layout(n, torch.stack([dict(m.named_parameters())[n].detach() for m in models]))
        for n, _ in models[0].named_parameters()
    }
    out = gnn_forward(kind, params, pack, layers=2, hops=2)
    for i, (d, m) in enumerate(zip(datas, models, strict=True)):
        s, e = pack.segments()[i]
        with torch.no_grad():
            torch.testing.assert_close(out[s:e], m(d.x, d.edge_index), rtol=1e-4, atol=1e-4)


def test_batched_local_update_equals_each_client_alone():
    datas = _clients(3, seed=3)
    hp = Hyper(
        gnn="gcn", epochs=3, lr=0.01, encoder_lr=0.01, proxy_mode="code_persistent", kd_conf_threshold=0.3
    )
    gen = torch.Generator().manual_seed(5)
    enc = init_encoder(F, D, C, generator=gen)
    proxies = torch.randn(C, D, generator=gen)
    together = _states(datas)
    alone = _states(datas)
    pack = client_batch(datas, num_classes=C)
    stacked = stack_states(together, pack, hp)
    res = local_update(pack, stacked, enc, proxies, hp)
    unstack_states(stacked, together, pack)
    for i, d in enumerate(datas):
        p1 = client_batch([d], num_classes=C)
        st1 = stack_states([alone[i]], p1, hp)
        r1 = local_update(p1, st1, enc, proxies, hp)
        unstack_states(st1, [alone[i]], p1)
        for k in ENCODER_KEYS:
            torch.testing.assert_close(res.enc[k][i], r1.enc[k][0], rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(res.class_proxies[i], r1.class_proxies[0], rtol=1e-4, atol=1e-5)
        for k in together[i].gnn:
            torch.testing.assert_close(together[i].gnn[k], alone[i].gnn[k], rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(together[i].proxy, alone[i].proxy, rtol=1e-4, atol=1e-5)


# ------------------------------------------------------------------------------------------------------
# aggregation from sums
# ------------------------------------------------------------------------------------------------------


def _batch_with_counts(counts: list[list[int]], nodes: list[int], f: int):
    """A client batch whose labelled nodes have exactly these class counts (a hand-made example)."""
    datas = []
    for row, n in zip(counts, nodes, strict=True):
        y = torch.zeros(n, dtype=torch.long)
        train = torch.zeros(n, dtype=torch.bool)
        labels = [c for c, m in enumerate(row) for _ in range(m)]
        y[: len(labels)] = torch.tensor(labels, dtype=torch.long)
        train[: len(labels)] = True
        edges = torch.stack([torch.arange(n - 1), torch.arange(1, n)])
        datas.append(Data(x=torch.ones(n, f), y=y, edge_index=edges, train_mask=train))
    return client_batch(datas, num_classes=len(counts[0]))


@pytest.mark.parametrize("upload", ["delta", "raw"])
@pytest.mark.parametrize("proxy_weight", ["ratio", "count"])
def test_server_aggregation_from_sums_equals_weighted_formulas(upload, proxy_weight):
    c, f, d = 3, 5, 2
    gen = torch.Generator().manual_seed(7)
    # client 0: classes 0 and 1; client 1: class 0 only; client 2: no labelled node; nobody holds class 2
    counts = [[3, 1, 0], [2, 0, 0], [0, 0, 0]]
    pack = _batch_with_counts(counts, nodes=[10, 6, 4], f=f)
    prev = {k: torch.randn(s, generator=gen) for k, s in encoder_shapes(f, d, c).items()}
    prev_s = torch.randn(c, d, generator=gen)
    local = {
        k: torch.stack([v + 0.01 * torch.randn(v.shape, generator=gen) for _ in range(3)])
        for k, v in prev.items()
    }
    cls = torch.randn(3, c, d, generator=gen) * torch.tensor(counts).clamp(max=1)[..., None]
    result = LocalResult(enc=local, class_proxies=cls, gnn_loss=torch.zeros(3), encoder_loss=torch.zeros(3))
    hp = Hyper(upload=upload, proxy_weight=proxy_weight, encoder_clip=16.0)
    uploads, notes = client_uploads(result, pack, [0, 1, 2], prev, prev_s, hp, round_index=4)
    assert notes["no_labelled_nodes"] == [2]
    assert int(uploads[2]["enc.weight"]) == 0 and float(uploads[2]["proxy.weight"].abs().sum()) == 0.0

    setting = _setting(_clients(3))
    algo = FedSpray(
        setting, {"proxy_dim": d, "upload": upload, "proxy_weight": proxy_weight, "encoder_clip": 16.0}
    )
    schema = _schema_for(algo, f, c, d)
    sums, _ = get_protocol("plaintext").aggregate(schema, uploads)
    enc, proxies, report = server_update(sums, prev, prev_s, hp)

    n = torch.tensor([4.0, 2.0, 0.0])  # labelled-node counts; client 2 weighs 0
    for k in ENCODER_KEYS:
        expected = (n.view(-1, *[1] * prev[k].dim()) * local[k]).sum(0) / n.sum()
        torch.testing.assert_close(enc[k], expected, rtol=1e-5, atol=1e-5)
    a = torch.tensor(counts, dtype=torch.float32)
    if proxy_weight == "ratio":
        a = a / a.sum(1, keepdim=True).clamp(min=1)
    for j in (0, 1):
        expected = (a[:, j, None] * cls[:, j]).sum(0) / a[:, j].sum()
        torch.testing.assert_close(proxies[j], expected, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(proxies[2], prev_s[2])  # held by nobody: previous value kept
    assert report.absent_classes == [2] and report.updated_classes == [0, 1]


def _schema_for(algo: FedSpray, f: int, c: int, d: int):
    """The algorithm's schema for a hand-made shape (F, C, D) instead of the setting's."""
    import dataclasses

    s = dataclasses.replace(algo.setting, num_features=f, num_classes=c)
    clone = FedSpray(s, dataclasses.replace(algo.options, proxy_dim=d))
    return clone.schema(RoundState("train", 0, 0, (0, 1, 2), {}, 1))


def test_min_contributors_rule_withholds_single_holder_classes():
    datas = _clients(3, seed=4)
    for i, dt in enumerate(datas):  # only client 0 has labelled nodes of class 3
        if i:
            dt.train_mask &= dt.y != 3
    datas[0].y[datas[0].train_mask.nonzero()[:2, 0]] = 3
    setting = _setting(datas)
    algo = create_algorithm("fedspray", setting, {"proxy_dim": D, "proxy_min_clients": 2})
    clients = _engine_clients(datas)
    for c in clients:
        algo.init_client(c)
    server = algo.init_server(torch.Generator().manual_seed(0))
    b0 = algo.initial_broadcast(server)
    _, sums, b1, _ = _round(algo, server, clients, b0, get_protocol("secagg"), 0)
    assert bool(sums.withheld_rows("proxy.sum")[3])
    assert server["reports"][-1]["withheld_classes"] == [3]
    torch.testing.assert_close(b1["proxies"][3], b0["proxies"][3])
    assert not torch.equal(b1["proxies"][0], b0["proxies"][0])


# ------------------------------------------------------------------------------------------------------
# protocols: secagg equals plaintext; the server sees sums only
# ------------------------------------------------------------------------------------------------------


def test_secagg_and_plaintext_give_the_same_global_encoder_and_proxies():
    datas = _clients(4, seed=5)
    setting = _setting(datas)
    runs = {}
    for name in ("plaintext", "secagg"):
        algo = create_algorithm("fedspray", setting, {"proxy_dim": D})
        clients = _engine_clients(datas, seed=1)
        for c in clients:
            algo.init_client(c)
        server = algo.init_server(torch.Generator().manual_seed(11))
        b = algo.initial_broadcast(server)
        bounds = []
        for r in range(3):
            _, sums, b, schema = _round(algo, server, clients, b, get_protocol(name), r)
            bounds.append(sums.max_abs_error)
        runs[name] = (b, bounds)
    (bp, _), (bs, bounds) = runs["plaintext"], runs["secagg"]
    # per element: the quantisation error of a sum (K * 2^-20) divided by the total weight, over 3 rounds
    assert max(bounds[0].values()) < 1e-4
    for k in bp:
        diff = float((bp[k] - bs[k]).abs().max())
        assert diff < 1e-4, (k, diff)


def test_one_round_secagg_sum_equals_plaintext_within_stated_error():
    datas = _clients(4, seed=6)
    setting = _setting(datas)
    algo = create_algorithm("fedspray", setting, {"proxy_dim": D})
    clients = _engine_clients(datas)
    for c in clients:
        algo.init_client(c)
    server = algo.init_server(torch.Generator().manual_seed(0))
    rs = RoundState("train", 0, 0, tuple(range(4)), algo.initial_broadcast(server), 1)
    schema = algo.schema(rs)
    uploads = algo.client_steps(clients, rs)
    plain, _ = get_protocol("plaintext").aggregate(schema, uploads)
    masked, _ = get_protocol("secagg").aggregate(schema, uploads)
    for name in plain:
        err = masked.max_abs_error[name] + 1e-12
        assert float((plain[name].double() - masked[name].double()).abs().max()) <= err, name
    e1, p1, _ = server_update(plain, server["enc"], server["proxies"], algo.hyper)
    e2, p2, _ = server_update(masked, server["enc"], server["proxies"], algo.hyper)
    total = float(plain["enc.weight"].sum())
    for k in ENCODER_KEYS:
        assert float((e1[k] - e2[k]).abs().max()) <= masked.max_abs_error[f"enc.{k}"] / total + 1e-6
    assert float((p1 - p2).abs().max()) < 1e-4


def test_server_step_takes_sums_only_and_keeps_no_per_client_value():
    datas = _clients(3, seed=8)
    setting = _setting(datas)
    algo = create_algorithm("fedspray", setting, {"proxy_dim": D})
    clients = _engine_clients(datas)
    for c in clients:
        algo.init_client(c)
    server = algo.init_server(torch.Generator().manual_seed(0))
    b0 = algo.initial_broadcast(server)
    rs = RoundState("train", 0, 0, (0, 1, 2), b0, 1)
    uploads = algo.client_steps(clients, rs)
    with pytest.raises(TrainingError, match="Sums only"):
        algo.server_step(server, uploads, rs)  # per-client values are refused outright
    with pytest.raises(TrainingError, match="Sums only"):
        algo.server_step(server, dict(uploads[0]), rs)
    sums, transcript = get_protocol("secagg").aggregate(algo.schema(rs), uploads)
    assert isinstance(sums, Sums) and sums.num_contributors == 3
    algo.server_step(server, sums, rs)
    # nothing the server keeps equals any single client's upload block (weights, class ratios, numerators)
    kept = [server["enc"][k] for k in ENCODER_KEYS] + [server["proxies"]]
    for up in uploads.values():
        for name, value in up.items():
            v = torch.as_tensor(value).double().flatten()
            for t in kept:
                t = t.double().flatten()
                assert not (t.numel() == v.numel() and torch.allclose(t, v)), name
    report = server["reports"][-1]
    assert set(report) == {
        "round",
        "total_weight",
        "absent_classes",
        "withheld_classes",
        "updated_classes",
        "encoder_kept",
    }
    assert report["total_weight"] == float(sum(int(d.train_mask.sum()) for d in datas))  # only the sum
    # the server step is a function of the sum alone: a hand-built Sums of the same totals gives the same update
    by_hand = Sums(
        {k: sum(torch.as_tensor(up[k]).double() for up in uploads.values()) for k in uploads[0]},
        num_contributors=3,
    )
    fresh = algo.init_server(torch.Generator().manual_seed(0))
    fresh2 = algo.init_server(torch.Generator().manual_seed(0))
    b_secagg, b_hand = algo.server_step(fresh, sums, rs), algo.server_step(fresh2, by_hand, rs)
    for k in b_secagg:
        torch.testing.assert_close(b_secagg[k], b_hand[k], rtol=0, atol=1e-5)
    # and the algorithm itself holds no client state (sealed)
    with pytest.raises(TrainingError):
        algo.stash = uploads  # type: ignore[attr-defined]


# ------------------------------------------------------------------------------------------------------
# bad input
# ------------------------------------------------------------------------------------------------------


def test_class_absent_from_every_client_keeps_old_proxy_and_is_reported(caplog):
    datas = _clients(3, seed=9)
    for dt in datas:
        dt.train_mask &= dt.y != 2
    setting = _setting(datas)
    algo = create_algorithm("fedspray", setting, {"proxy_dim": D})
    clients = _engine_clients(datas)
    for c in clients:
        algo.init_client(c)
    server = algo.init_server(torch.Generator().manual_seed(0))
    b0 = algo.initial_broadcast(server)
    with caplog.at_level(logging.WARNING, logger="securefgl.algorithms.fedspray"):
        _, _, b1, _ = _round(algo, server, clients, b0, get_protocol("plaintext"), 0)
    torch.testing.assert_close(b1["proxies"][2], b0["proxies"][2])
    assert torch.isfinite(b1["proxies"]).all()
    assert server["reports"][-1]["absent_classes"] == [2]
    assert "class(es) [2]" in caplog.text
    assert algo.run_report(server)["absent_class_rounds"] == {"2": 1}


def test_client_without_labelled_nodes_weighs_zero_and_is_reported(caplog):
    datas = _clients(3, seed=10)
    datas[1].train_mask[:] = False
    setting = _setting(datas)
    algo = create_algorithm("fedspray", setting, {"proxy_dim": D})
    clients = _engine_clients(datas)
    with caplog.at_level(logging.WARNING, logger="securefgl.algorithms.fedspray"):
        for c in clients:
            algo.init_client(c)
    assert "client 1 has no labelled nodes" in caplog.text
    server = algo.init_server(torch.Generator().manual_seed(0))
    uploads, sums, _, _ = _round(
        algo, server, clients, algo.initial_broadcast(server), get_protocol("plaintext"), 0
    )
    assert int(uploads[1]["enc.weight"]) == 0
    assert float(torch.as_tensor(uploads[1]["proxy.weight"]).abs().sum()) == 0.0
    assert all(float(torch.as_tensor(uploads[1][f"enc.{k}"]).abs().max()) == 0.0 for k in ENCODER_KEYS)
    assert int(sums["enc.weight"]) == int(datas[0].train_mask.sum() + datas[2].train_mask.sum())


def test_non_finite_proxies_stop_the_run_naming_client_and_round():
    datas = _clients(3, seed=11)
    setting = _setting(datas)
    algo = create_algorithm("fedspray", setting, {"proxy_dim": D, "proxy_mode": "code_persistent"})
    clients = _engine_clients(datas)
    for c in clients:
        algo.init_client(c)
    clients[2].state["fedspray"].proxy[clients[2].data.train_mask] = float("nan")
    server = algo.init_server(torch.Generator().manual_seed(0))
    rs = RoundState("train", 0, 7, (0, 1, 2), algo.initial_broadcast(server), 1)
    with pytest.raises(NonFiniteError, match=r"client 2 .*round 7"):
        algo.client_steps(clients, rs)


def test_options_are_validated_with_the_valid_choices():
    with pytest.raises(ConfigError, match="proxy_mode.*paper_reset"):
        create_algorithm("fedspray", _setting(_clients(2)), {"proxy_mode": "reset"})
    with pytest.raises(ConfigError, match="lambda1"):
        FedSprayOptions(lambda1=-1.0)
    with pytest.raises(ConfigError, match="kd_conf_threshold"):
        FedSprayOptions(kd_conf_threshold=1.0)
    with pytest.raises(ConfigError, match="unknown key"):
        create_algorithm("fedspray", _setting(_clients(2)), {"lamda1": 1.0})
    problems = find_problems("fedspray", "secagg", "gat", "cora")
    assert any("does not train model 'gat'" in p.reason for p in problems)
    problems = find_problems(
        "fedspray", "secagg", "gcn", "cora", options={"proxy_min_clients": 5}, num_clients=3
    )
    assert any("proxy_min_clients=5" in p.reason for p in problems)


def test_presets_are_valid_run_configs():
    from securefgl.config import RunConfig, build, merge

    assert preset_names() == ["fedspray-code", "fedspray-paper"]
    code = get_preset("FedSpray_Code")
    cfg = build(RunConfig, merge(code, {"dataset": {"name": "csbm"}, "protocol": {"name": "plaintext"}}))
    assert cfg.algorithm.options["proxy_mode"] == "code_persistent" and cfg.train.rounds == 500
    paper = build(RunConfig, get_preset("fedspray-paper"))
    assert paper.train.rounds == 300 and paper.algorithm.options["lambda1"] == 5.0
    with pytest.raises(ConfigError, match="fedspray-code"):
        get_preset("fedspray")


# ------------------------------------------------------------------------------------------------------
# end to end
# ------------------------------------------------------------------------------------------------------


def test_end_to_end_on_a_synthetic_graph_through_the_engine():
    from securefgl.config import ProtocolConfig, RunConfig, build
    from securefgl.data import make_csbm, partition_graph
    from securefgl.engine.runner import run_seed

    data = make_csbm(num_nodes=400, num_classes=3, avg_degree=6.0, homophily=0.8, num_features=24, seed=0)
    fg = partition_graph(data, "louvain", 4, seed=0, split=(0.4, 0.3, 0.3), cache=False)
    cfg = build(
        RunConfig,
        {
            "dataset": {"name": "csbm"},
            "partition": {"method": "louvain", "clients": 4, "split": [0.4, 0.3, 0.3]},
            "protocol": {"name": "secagg"},
            "algorithm": {"name": "fedspray", "options": {"proxy_dim": 16}},
            "model": {"name": "gcn", "hidden": 16, "dropout": 0.0},
            "train": {"rounds": 6, "local_epochs": 3, "lr": 0.01, "weight_decay": 0.0},
            "device": "cpu",
        },
    )
    res = run_seed(cfg, fg, 0, torch.device("cpu"))
    o = res.final.overall
    assert math.isfinite(o["test_acc"]) and o["test_acc"] > 1 / 3 + 0.1
    assert 0.0 <= o["test_minority_acc"] <= 1.0
    assert res.report["rounds"] == 6
    assert all(r.crypto_seconds > 0 and r.total_up > 0 for r in res.rounds)
    rows = [c.row() for c in res.final.per_client]
    assert all("test_minority_acc" in r for r in rows)
    # uploads rounded onto the grid by the clients (protocol.grid_upload): the plaintext run is identical
    plain = run_seed(
        dataclasses.replace(cfg, protocol=ProtocolConfig("plaintext")), fg, 0, torch.device("cpu")
    )
    assert [r.loss for r in plain.rounds] == [r.loss for r in res.rounds]
    assert plain.final.overall == res.final.overall


@pytest.mark.parametrize("sparse", [True, False])
def test_gnn_dropout_is_seeded_and_only_in_training(sparse):
    datas = _clients(2, seed=12, sparse=sparse)
    pack = client_batch(datas, num_classes=C)
    params = {
        k: to_math_layout(k, torch.stack([s.gnn[k] for s in _states(datas, "sage")]))
        for k in _states(datas, "sage")[0].gnn
    }
    run = [
        gnn_forward("sage", params, pack, dropout=0.5, generator=torch.Generator().manual_seed(s))
        for s in (1, 1, 2)
    ]
    torch.testing.assert_close(run[0], run[1])  # same generator state, same masks
    assert not torch.allclose(run[0], run[2])
    assert not torch.allclose(run[0], gnn_forward("sage", params, pack))  # eval (no dropout) differs
