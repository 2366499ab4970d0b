"""FedLoG: secure class-rate-weighted synthetic data, isolation, protocol equivalence, bad input."""

from __future__ import annotations

import copy
import math

import pytest
import torch
import torch.nn.functional as F

import securefgl.algorithms.fedlog as fedlog_mod
import securefgl.algorithms.fedlog._train as fedlog_client
from securefgl.algorithms.base import Client, RoundState, Setting
from securefgl.algorithms.fedlog import FedLoG, attach_generalization_sets
from securefgl.algorithms.fedlog._train import warmup_embedder
from securefgl.algorithms.fedlog.eval_sets import EVAL_KEYS
from securefgl.algorithms.fedlog.model import FedLoGNet, init_fedlog
from securefgl.config import RunConfig, TrainConfig, build
from securefgl.data import make_csbm, partition_graph
from securefgl.engine.runner import make_setting, run_seed, start_seed
from securefgl.errors import ConfigError
from securefgl.nn._functional import init_parameters
from securefgl.nn.registry import ModelSpec
from securefgl.protocols.registry import get_protocol

TINY = {
    "num_proto": 2,
    "hidden": 16,
    "out_dim": 8,
    "prompt_epochs": 2,
    "prompt_inits": 1,
    "batch_size": 16,
}


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    # tiny graphs: thread hand-off dominates on a loaded 2-core machine
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)


def _graph(num_classes: int = 4, missing=None, seed: int = 0, hops: int = 2):
    data = make_csbm(num_nodes=240, num_classes=num_classes, num_features=8, avg_degree=6, seed=seed)
    params = {} if missing is None else {"missing_classes": missing}
    fg = partition_graph(data, "fedlog", 3, seed=seed, split=(0.4, 0.3, 0.3), cache=False, **params)
    return attach_generalization_sets(fg, hops=hops)


def _run(fg, protocol: str = "plaintext", rounds: int = 2, **options):
    cfg = build(
        RunConfig,
        {
            "algorithm": {"name": "fedlog", "options": {**TINY, **options}},
            "protocol": {"name": protocol},
            "train": {"rounds": rounds},
            "device": "cpu",
        },
    )
    return run_seed(cfg, fg, 0, torch.device("cpu"))


def _setting(f: int = 3, c: int = 3, k: int = 3) -> Setting:
    return Setting(
        num_features=f,
        num_classes=c,
        num_clients=k,
        num_nodes=100,
        count_bound=100,
        model=ModelSpec(),
        train=TrainConfig(rounds=2),
        max_clients_per_round=k,
    )


def _hand_contributions(alg: FedLoG, rho: torch.Tensor, xh: torch.Tensor, rs: RoundState):
    """Uploads written by hand from the spec's rule: rho * X^H (already slot-permuted), rho, holders."""
    schema = alg.requests(rs)[0].schema
    out = {}
    for k in range(rho.shape[0]):
        contrib = {}
        for b in schema.blocks:
            if b.name.startswith("theta.") and b.name != "theta.den":
                contrib[b.name] = torch.full(b.shape, float(k + 1) / 10)
        contrib.update(
            {
                "theta.den": torch.tensor([1]),
                "xh.num": rho[k].view(-1, 1, 1) * xh[k],
                "xh.den": rho[k],
                "holders": (rho[k] > 0).long(),
                "eval.correct": torch.tensor([k, 1, 0, 0]),
                "eval.count": torch.tensor([3, 2, 0, 0]),
                "eval.nc_acc": torch.tensor([0.5]),
                "eval.nc_models": torch.tensor([1]),
            }
        )
        out[k] = contrib
    return schema, out


def test_server_aggregation_equals_weighted_formula() -> None:
    alg = FedLoG(_setting(), {**TINY, "prompt_mode": "none"})
    gen = torch.Generator().manual_seed(0)
    server = alg.init_server(gen)
    rs = RoundState("train", 1, 1, (0, 1, 2), alg.initial_broadcast(server), 2)
    rho = torch.tensor([[0.5, 0.5, 0.0], [0.25, 0.75, 0.0], [1.0, 0.0, 0.0]])  # class 2: held by nobody
    xh = torch.rand(3, 3, 2, 3, generator=gen) * 2 - 1  # (K, C, m, F)
    schema, contribs = _hand_contributions(alg, rho, xh, rs)
    sums, _ = get_protocol("plaintext").aggregate(schema, contribs)
    out = alg.server_step(server, sums, rs)
    # Eq. 4: x~[c] = sum_k w_kc X_k[c], w_kc = rho_kc / sum_k' rho_k'c
    expect = {c: sum(rho[k, c] / rho[:, c].sum() * xh[k, c] for k in range(3)) for c in (0, 1)}
    assert out["syn.y"].tolist() == [0, 0, 1, 1]
    torch.testing.assert_close(out["syn.x"][:2], expect[0], atol=1e-5, rtol=0)
    torch.testing.assert_close(out["syn.x"][2:], expect[1], atol=1e-5, rtol=0)
    # class 1 is held by clients 0 and 1 only: client 2's rows have weight 0
    assert not torch.allclose(out["syn.x"][2:], xh[2, 1])
    # model: uniform mean
    name = next(k for k in out if k.startswith("theta."))
    torch.testing.assert_close(out[name], torch.full_like(out[name], 0.2), atol=1e-5, rtol=0)
    rep = alg.run_report(server)["fedlog"]
    assert rep["classes"] == {"absent": [2], "withheld": [], "synthetic": [0, 1]}
    assert rep["last"]["seen_val"] == pytest.approx(3 / 9)
    assert rep["last"]["seen_test"] == pytest.approx(3 / 6)
    assert rep["last"]["unseen_node"] is None and rep["last"]["new_client"] == pytest.approx(0.5)


def test_min_holders_withholds_single_holder_class() -> None:
    alg = FedLoG(_setting(), {**TINY, "prompt_mode": "none", "min_holders": 2})
    gen = torch.Generator().manual_seed(1)
    server = alg.init_server(gen)
    rs = RoundState("train", 1, 1, (0, 1, 2), alg.initial_broadcast(server), 2)
    rho = torch.tensor([[0.5, 0.5, 0.0], [0.5, 0.0, 0.5], [1.0, 0.0, 0.0]])  # classes 1, 2: one holder each
    xh = torch.rand(3, 3, 2, 3, generator=gen)
    schema, contribs = _hand_contributions(alg, rho, xh, rs)
    sums, _ = get_protocol("plaintext").aggregate(schema, contribs)
    out = alg.server_step(server, sums, rs)
    assert out["syn.y"].tolist() == [0, 0]
    assert torch.isfinite(out["syn.x"]).all()
    assert alg.run_report(server)["fedlog"]["classes"]["withheld"] == [1, 2]


@pytest.mark.parametrize("protocol", ["secagg", "secagg+", "ckks"])
def test_protocols_equal_plaintext_up_to_quantisation(protocol: str) -> None:
    alg = FedLoG(_setting(f=4), {**TINY, "prompt_mode": "none"})
    gen = torch.Generator().manual_seed(2)
    server = alg.init_server(gen)
    rs = RoundState("train", 1, 1, (0, 1, 2), alg.initial_broadcast(server), 2)
    rho = torch.tensor([[0.2, 0.8, 0.0], [0.6, 0.1, 0.3], [0.0, 0.0, 1.0]])
    xh = torch.rand(3, 3, 2, 4, generator=gen) * 2 - 1
    schema, contribs = _hand_contributions(alg, rho, xh, rs)
    outs = {}
    for name in ("plaintext", protocol):
        s = alg.init_server(torch.Generator().manual_seed(2))
        sums, _ = get_protocol(name).aggregate(schema, contribs)
        outs[name] = alg.server_step(s, sums, rs)
    # fixed-point error of the numerator, divided by the smallest denominator (CKKS: its own small error)
    bound = schema.error_bound(3)["xh.num"] / float(rho.sum(0).min()) + (1e-4 if protocol == "ckks" else 1e-6)
    assert outs["plaintext"].keys() == outs[protocol].keys()
    diff = (outs["plaintext"]["syn.x"] - outs[protocol]["syn.x"]).abs().max()
    assert 0 <= float(diff) <= bound


def test_end_to_end_short_run_reports_all_settings() -> None:
    fg = _graph()
    res = _run(fg, "secagg", rounds=2)
    rep = res.report["fedlog"]
    assert len(rep["history"]) == 2
    for key in ("seen_val", "seen_test", "unseen_node", "missing_class", "new_client"):
        v = rep["best"][key]
        assert v is not None and math.isfinite(v) and 0 <= v <= 1, (key, v)
    assert math.isfinite(res.final.overall["val_acc"])
    # seen-graph metrics from the secure counters equal the engine's own pooled metrics of that round
    ev = res.evals[rep["history"].index(rep["last"])]
    assert rep["last"]["seen_val"] == pytest.approx(ev.overall["val_acc_pooled"])
    # prompt generators are summed once: round 0 uploads more than round 1
    assert res.rounds[0].total_up > res.rounds[1].total_up > 0


def test_secagg_and_plaintext_runs_are_identical() -> None:
    """Uploads rounded onto the grid by the clients (protocol.grid_upload): every metric agrees to the bit."""
    fg = _graph(seed=1)
    a = _run(fg, "plaintext", rounds=2, prompt_mode="none")
    b = _run(fg, "secagg", rounds=2, prompt_mode="none")
    ha, hb = a.report["fedlog"]["history"], b.report["fedlog"]["history"]
    assert len(ha) == len(hb) == 2
    for ra, rb in zip(ha, hb, strict=True):
        for key in ("seen_val", "seen_test", "unseen_node", "missing_class"):
            assert ra[key] == rb[key]
    assert [r.loss for r in a.rounds] == [r.loss for r in b.rounds]


def test_client_upload_is_rate_weighted_permutation_of_own_head_nodes() -> None:
    fg = _graph()
    alg = FedLoG(_setting(f=fg.num_features, c=fg.num_classes), {**TINY, "prompt_mode": "none"})
    alg.seal()
    client = Client(0, fg.clients[0], torch.Generator().manual_seed(0))
    alg.init_client(client)
    server = alg.init_server(torch.Generator().manual_seed(0))
    rs = RoundState("train", 0, 0, (0,), alg.initial_broadcast(server), 2)
    up = alg.client_step(client, rs)
    rho = client.state["rho"].float()
    xh = client.state["xh"].detach().view(fg.num_classes, 2, -1)
    for c in range(fg.num_classes):
        rows = up["xh.num"][c]
        want = rho[c] * xh[c]
        # same multiset of rows: every uploaded row matches one of the client's own rows
        d = torch.cdist(rows, want)
        assert float(d.min(1).values.max()) < 1e-6
    assert up["holders"].tolist() == (rho > 0).long().tolist()
    assert "xt" not in str(sorted(up)) and "lam" not in str(sorted(up))


def _tensors(obj, seen=None):
    seen = set() if seen is None else seen
    if id(obj) in seen:
        return
    seen.add(id(obj))
    if isinstance(obj, torch.Tensor):
        yield obj
    elif isinstance(obj, torch.nn.Module):
        yield from (p for p in obj.state_dict().values())
    elif isinstance(obj, dict):
        for v in obj.values():
            yield from _tensors(v, seen)
    elif isinstance(obj, list | tuple):
        for v in obj:
            yield from _tensors(v, seen)


def test_no_client_can_reach_another_clients_data() -> None:
    fg = _graph()
    setting = _setting(f=fg.num_features, c=fg.num_classes)
    alg = FedLoG(setting, TINY)
    alg.seal()
    clients = [
        Client(i, d, torch.Generator().manual_seed(i), eval_data=ev)
        for i, (d, ev) in enumerate(zip(fg.clients, fg.client_eval, strict=True))
    ]
    for c in clients:
        alg.init_client(c)
    server = alg.init_server(torch.Generator().manual_seed(0))
    bc = alg.initial_broadcast(server)
    prot = get_protocol("plaintext")
    for r in range(2):
        rs = RoundState("train", r, r, (0, 1, 2), bc, 2)
        outs = alg.client_steps(clients, rs)
        sums = {}
        for req in alg.requests(rs):
            contribs = {cid: (o if len(alg.requests(rs)) == 1 else o[req.key]) for cid, o in outs.items()}
            sums[req.key] = prot.aggregate(req.schema, contribs)[0]
        bc = alg.server_step(server, sums if len(sums) > 1 else sums["main"], rs)
    # the algorithm object holds no client, and the server state holds no per-client value
    assert not any(isinstance(v, Client) for v in vars(alg).values())
    assert set(server) == {"theta", "history", "classes"}
    # no tensor reachable from one client's state shares storage with another client's state or data
    ptrs = {}
    for c in clients:
        mine = {t.untyped_storage().data_ptr() for t in _tensors(c.state) if t.numel()}
        mine |= {getattr(c.data, k).untyped_storage().data_ptr() for k in ("x", "y", "edge_index")}
        mine |= {t.untyped_storage().data_ptr() for t in c.eval_data.values() if t.numel()}
        ptrs[c.id] = mine
    for a in clients:
        for b in clients:
            if a.id < b.id:
                assert not (ptrs[a.id] & ptrs[b.id]), (a.id, b.id)
    # the broadcast synthetic data is not any single client's head-branch data
    for c in clients:
        own = c.state["xh"].detach()
        assert not torch.allclose(bc["syn.x"], own[: bc["syn.x"].shape[0]], atol=1e-4)


def test_class_absent_everywhere_gets_no_synthetic_nodes() -> None:
    data = make_csbm(num_nodes=240, num_classes=4, num_features=8, avg_degree=6, seed=0)
    data.num_classes = 5  # class 4 exists in the label space but has no node
    fg = attach_generalization_sets(partition_graph(data, "fedlog", 3, seed=0, cache=False), hops=1)
    res = _run(fg, rounds=2)
    rep = res.report["fedlog"]
    assert 4 in rep["classes"]["absent"] and 4 not in rep["classes"]["synthetic"]
    assert all(math.isfinite(r.loss) for r in res.rounds)
    assert math.isfinite(res.final.overall["val_acc"])


def test_client_with_a_single_class_and_huge_threshold() -> None:
    present = torch.unique(_graph(missing=[[], [], []]).clients[0].y).tolist()  # all but one class missing
    fg = _graph(missing=[present[1:], [], []])
    assert torch.unique(fg.clients[0].y).tolist() == present[:1]
    res = _run(fg, rounds=2, tau=1000.0)
    rep = res.report["fedlog"]
    assert all(math.isfinite(r.loss) for r in res.rounds)
    for key in ("seen_val", "seen_test", "missing_class"):
        assert rep["best"][key] is not None and math.isfinite(rep["best"][key])


def test_generalization_sets_masks() -> None:
    fg = _graph()
    assert fg.client_eval is not None and len(fg.client_eval) == fg.num_clients
    for d, ev in zip(fg.clients, fg.client_eval, strict=True):
        trained = set(d.y[d.train_mask].tolist())
        own = set(d.global_id.tolist())
        assert set(ev) == set(EVAL_KEYS)
        assert ev["unseen_x"].shape[0] == ev["unseen_y"].shape[0] >= d.num_nodes
        assert all(int(y) in trained for y in ev["unseen_y"][ev["unseen_node_mask"]])
        assert all(int(y) not in trained for y in ev["unseen_y"][ev["unseen_cls_mask"]])
        assert ev["nc_x"].shape[0] == fg.held_out.num_nodes
        assert len(own) == d.num_nodes
    zero = attach_generalization_sets(_graph(), hops=0)
    assert all(int(ev["unseen_node_mask"].sum()) == 0 for ev in zero.client_eval)
    with pytest.raises(ConfigError, match="hops"):
        attach_generalization_sets(fg, hops=-1)


def _engine_clients(fg, cfg):
    """Client 0..K-1 exactly as the engine builds them (``eval_data`` from ``fg.client_eval``)."""
    alg = FedLoG(make_setting(cfg, fg, "cpu"), cfg.algorithm.options)
    alg.seal()
    clients, server, bc, _ = start_seed(alg, fg, 0, torch.device("cpu"))
    return alg, clients, server, bc


def _eval_attrs(data) -> list[str]:
    return [a for a in sorted(data.keys()) if a.startswith(("unseen_", "nc_"))]


def test_training_data_carries_no_evaluation_sets_and_ignores_other_clients_sets() -> None:
    """The generalisation sets live in ``client_eval`` (handed to each client as its own ``eval_data``), not on
    the training ``Data``; poisoning every other client's evaluation sets in place leaves client 0's upload
    unchanged (so no tensor of client 0's sets is shared with another client's)."""
    plain = partition_graph(
        make_csbm(num_nodes=240, num_classes=4, num_features=8, avg_degree=6, seed=0),
        "fedlog",
        3,
        seed=0,
        split=(0.4, 0.3, 0.3),
        cache=False,
    )
    before = [sorted(d.keys()) for d in plain.clients]
    fg = attach_generalization_sets(plain, hops=2)
    assert plain.client_eval is None and fg.client_eval is not None
    assert [sorted(d.keys()) for d in fg.clients] == before  # untouched: no new attribute
    assert not any(_eval_attrs(d) for d in fg.clients)
    cfg = build(RunConfig, {"algorithm": {"name": "fedlog", "options": TINY}, "device": "cpu"})

    def flat(up: dict) -> dict[str, torch.Tensor]:
        parts = up.items() if "main" in up else [("main", up)]
        return {f"{key}/{name}": v for key, block in parts for name, v in block.items()}

    uploads: list[list[dict[str, torch.Tensor]]] = []
    for poisoned in (False, True):
        if poisoned:  # every tensor of clients 1 and 2's evaluation sets: NaN (or garbage), in place
            for ev in fg.client_eval[1:]:
                for v in ev.values():
                    if v.is_floating_point():
                        v.fill_(float("nan"))
                    elif v.dtype == torch.bool:
                        v.logical_not_()
                    else:
                        v.fill_(10**9)
        alg, clients, _, bc = _engine_clients(fg, cfg)
        for k, c in enumerate(clients):
            assert set(c.eval_data) == set(EVAL_KEYS)
            assert all(v is fg.client_eval[k][n] for n, v in c.eval_data.items())  # its own entry only
            assert not _eval_attrs(c.data)
        ups = []
        for r in range(2):  # client 0's client half: round 0 (with the prompt generator) and round 1
            up = flat(alg.client_step(clients[0], RoundState("train", r, r, (0, 1, 2), bc, 2)))
            assert int(up["main/eval.count"][2] + up["main/eval.count"][3]) > 0  # its eval sets were read
            assert int(up["main/eval.nc_models"][0]) == 1
            ups.append(up)
        uploads.append(ups)
    assert torch.isnan(fg.client_eval[1]["unseen_x"]).all()
    for r, (a, b) in enumerate(zip(*uploads, strict=True)):
        assert a.keys() == b.keys() and any(k.startswith("main/theta.") for k in a)
        for name in a:
            assert torch.equal(a[name], b[name]), (r, name)


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("num_proto", 0),
        ("dropout", 1.0),
        ("classifier_mode", "x"),
        ("prompt_mode", "random"),
        ("min_holders", 0),
    ],
)
def test_bad_options_are_rejected(key, value) -> None:
    with pytest.raises(ConfigError, match=key):
        FedLoG(_setting(), {key: value})


def _warm_net(fg, seed: int = 0) -> FedLoGNet:
    net = FedLoGNet(fg.num_features, TINY["hidden"], TINY["out_dim"])
    return init_fedlog(net, torch.Generator().manual_seed(seed))


def _warm(net, data, epochs: int = 30, patience: int = 10, seed: int = 0) -> int:
    gen = torch.Generator().manual_seed(seed)
    return warmup_embedder(net, data, int(data.y.max()) + 1, epochs, 1e-2, 5e-4, 16, patience, gen)


def _head_ce(net, head, data) -> float:
    """Train cross-entropy of the warm-up objective (embedder + linear head, eval mode)."""
    net.eval()
    with torch.no_grad():
        logits = head(net.embed(data.x, data.edge_index))[data.train_mask]
        return float(F.cross_entropy(logits, data.y[data.train_mask]))


def test_warmup_trains_the_embedder_only_and_lowers_train_ce(monkeypatch) -> None:
    heads = []

    def spy(module, generator):  # the warm-up's throw-away head, and its initial weights
        init_parameters(module, generator)
        heads.append((module, copy.deepcopy(module)))

    monkeypatch.setattr(fedlog_client, "init_parameters", spy)
    fg = _graph()
    data = fg.clients[0]
    cold = _warm_net(fg)
    net = copy.deepcopy(cold)
    run = _warm(net, data)
    assert 1 <= run <= 30
    before, after = cold.state_dict(), net.state_dict()
    for name in before:
        same = torch.equal(before[name], after[name])
        assert same != name.startswith(("conv1.", "conv2.")), name  # the embedder moved, the branches did not
    assert all(torch.isfinite(v).all() for v in after.values())
    (head, head0), *_ = heads
    assert _head_ce(net, head, data) < 0.5 * _head_ce(cold, head0, data)
    # same generator seed, same result; another seed, another result
    again = copy.deepcopy(cold)
    assert _warm(again, data) == run
    assert all(torch.equal(after[k], v) for k, v in again.state_dict().items())
    other = copy.deepcopy(cold)
    _warm(other, data, seed=1)
    assert not torch.equal(other.conv1.lin_l.weight, net.conv1.lin_l.weight)


def test_warmup_early_stops_on_validation_not_test() -> None:
    fg = _graph()
    data = fg.clients[0]
    net = _warm_net(fg)
    run = _warm(net, data, epochs=200, patience=1)
    assert 2 <= run < 200
    # the test nodes play no part: hiding them changes nothing
    no_test = copy.copy(data)
    no_test.test_mask = torch.zeros_like(data.test_mask)
    net2 = _warm_net(fg)
    assert _warm(net2, no_test, epochs=200, patience=1) == run
    assert all(torch.equal(a, b) for a, b in zip(net.parameters(), net2.parameters(), strict=True))
    # without val nodes there is no early stopping: every epoch runs
    no_val = copy.copy(data)
    no_val.val_mask = torch.zeros_like(data.val_mask)
    assert _warm(_warm_net(fg), no_val, epochs=run + 3, patience=1) == run + 3


def test_warmup_without_train_or_val_nodes() -> None:
    fg = _graph()
    data = fg.clients[1]
    no_train = copy.copy(data)
    no_train.train_mask = torch.zeros_like(data.train_mask)
    net = _warm_net(fg)
    before = copy.deepcopy(net.state_dict())
    assert _warm(net, no_train) == 0
    assert all(torch.equal(before[k], v) for k, v in net.state_dict().items())
    no_val = copy.copy(data)
    no_val.val_mask = torch.zeros_like(data.val_mask)
    assert _warm(net, no_val, epochs=4) == 4
    assert all(torch.isfinite(v).all() for v in net.state_dict().values())
    assert _warm(net, no_val, epochs=0) == 0


@pytest.mark.parametrize(("key", "value"), [("warmup_epochs", -1), ("warmup_patience", 0)])
def test_bad_warmup_options_name_the_value(key, value) -> None:
    with pytest.raises(ConfigError, match=f"{key}={value}"):
        FedLoG(_setting(), {key: value})
    assert FedLoG.Options().warmup_epochs == 0  # off by default: a code-only step


def test_end_to_end_with_warmup_is_deterministic_and_finite() -> None:
    fg = _graph(seed=2)
    a = _run(fg, rounds=2, prompt_mode="none", warmup_epochs=5)
    b = _run(fg, rounds=2, prompt_mode="none", warmup_epochs=5)
    off = _run(fg, rounds=2, prompt_mode="none")
    ha, hb = a.report["fedlog"]["history"], b.report["fedlog"]["history"]
    assert ha == hb and [r.loss for r in a.rounds] == [r.loss for r in b.rounds]
    assert all(math.isfinite(r.loss) for r in a.rounds)
    for key in ("seen_val", "seen_test", "unseen_node", "missing_class", "new_client"):
        v = ha[-1][key]
        assert v is not None and math.isfinite(v) and 0 <= v <= 1, (key, v)
    assert math.isfinite(a.final.overall["val_acc"])
    assert a.rounds[0].loss != off.rounds[0].loss  # the warm-up ran in round 0


def test_registered() -> None:
    from securefgl.algorithms.registry import get_algorithm

    assert get_algorithm("FedLoG") is fedlog_mod.FedLoG
