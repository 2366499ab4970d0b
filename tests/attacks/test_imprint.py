"""Malicious-model attacks (imprint bins, trap weights) on the secure sum, and the client-side checks."""

from __future__ import annotations

import os

import pytest
import torch

from securefgl.attacks._imprint_run import malicious_setup, rule_guard, run_imprint, sanity_guard
from securefgl.attacks.imprint import (
    ImprintConfig,
    bin_edges,
    craft_imprint,
    imprint_layout,
    match_rows,
    recover_bins,
)
from securefgl.attacks.model_check import (
    BroadcastCheck,
    SuspiciousModelError,
    check_update_rule,
    first_layer_sanity,
)
from securefgl.config import RunConfig
from securefgl.data import make_csbm, partition_graph
from securefgl.errors import AttackNotApplicableError, ConfigError
from securefgl.nn.registry import ModelSpec, build_model


def _setup(model: str, protocol: str = "secagg", hidden: int = 32):
    data = make_csbm(num_nodes=240, num_classes=3, num_features=16, avg_degree=4.0, seed=0)
    fg = partition_graph(data, "louvain", 4, seed=0, cache=False, split=(0.5, 0.25, 0.25))
    cfg = RunConfig.from_mapping(
        {
            "dataset": {"name": "csbm"},
            "partition": {"clients": 4},
            "algorithm": {"name": "fedavg"},
            "model": {"name": model, "hidden": hidden, "dropout": 0.0},
            "train": {"optimizer": "sgd", "local_epochs": 1, "lr": 0.1},
            "protocol": {"name": protocol},
            "output": {"save": False},
            "seeds": [0],
        }
    )
    setup = malicious_setup(cfg, fg)
    target = min(setup.truth, key=lambda c: (setup.truth[c].shape[0] == 0, setup.truth[c].shape[0]))
    return setup, target


@pytest.fixture(scope="module")
def mlp_job():
    return _setup("mlp")


def test_recover_bins_is_exact_for_single_inputs():
    """The closed form: one input per bin comes back exactly, a bin of two comes back mixed."""
    g = torch.Generator().manual_seed(0)
    x = torch.rand(3, 5, generator=g, dtype=torch.float64)
    h = torch.tensor([0.15, 0.55, 0.6])  # inputs 1 and 2 share the bin (0.5, 0.7]
    edges = torch.tensor([0.1, 0.3, 0.5, 0.7])
    grad = torch.tensor([0.7, -0.4, 0.9], dtype=torch.float64)
    fire = (h.unsqueeze(0) > edges.unsqueeze(1)).double()  # (H, n)
    dw, db = fire @ (grad.unsqueeze(1) * x), fire @ grad
    rows = recover_bins(dw, db)
    best, exact = match_rows(rows, x)
    assert exact.tolist() == [True, False, False]
    assert best[0] > 1 - 1e-12


@pytest.mark.parametrize("protocol", ["plaintext", "secagg"])
def test_imprint_bins_recover_inputs_from_the_secure_sum(mlp_job, protocol):
    setup, target = mlp_job
    res = run_imprint(setup, protocol, target, config=ImprintConfig(rounds=8))
    assert res.refused == ""
    assert res.rounds == 8
    assert res.exact_all >= 0.5, res
    assert res.exact_target >= 0.5, res


def test_secagg_sum_gives_the_plaintext_answer(mlp_job):
    """The real protocol computes the same sum: the same nodes come back under plaintext and secagg."""
    setup, target = mlp_job
    a = run_imprint(setup, "plaintext", target, config=ImprintConfig(rounds=4))
    b = run_imprint(setup, "secagg", target, config=ImprintConfig(rounds=4))
    assert a.exact_all == b.exact_all
    assert a.recovered.shape == b.recovered.shape
    best_a, exact_a = match_rows(a.recovered, torch.cat(list(setup.truth.values())))
    best_b, exact_b = match_rows(b.recovered, torch.cat(list(setup.truth.values())))
    assert torch.equal(exact_a, exact_b)
    assert torch.allclose(best_a[exact_a], best_b[exact_b], atol=1e-6)


def test_one_round_of_few_bins_recovers_little(mlp_job):
    """More inputs than bins: most bins hold several inputs (the curve against rounds starts low)."""
    setup, target = mlp_job
    many = run_imprint(setup, "secagg", target, config=ImprintConfig(rounds=8))
    one = run_imprint(setup, "secagg", target, config=ImprintConfig(rounds=1))
    assert one.exact_all < many.exact_all


def test_trap_weights_recover_inputs(mlp_job):
    setup, target = mlp_job
    res = run_imprint(setup, "secagg", target, config=ImprintConfig(kind="trap", rounds=8, trap_rate=0.02))
    assert res.exact_all >= 0.3, res


def test_imprint_on_gcn_recovers_propagated_inputs():
    setup, target = _setup("gcn")
    assert imprint_layout(setup.model).propagated
    res = run_imprint(setup, "secagg", target, config=ImprintConfig(rounds=24))
    assert res.exact_target >= 0.5, res


def test_dp_noise_stops_the_imprint():
    setup, target = _setup("mlp", protocol="secagg+dp")
    opts = {"dp_min_contributors": 3, "dp_clip_norm": 1.0, "dp_epsilon": 1.0, "dp_rounds": 4}
    res = run_imprint(setup, "secagg+dp", target, config=ImprintConfig(rounds=4), protocol_options=opts)
    assert res.refused == ""
    assert res.exact_all <= 0.1, res


def test_sgc_has_no_bins():
    model = build_model(ModelSpec("sgc"), 16, 3)
    with pytest.raises(AttackNotApplicableError, match="single linear layer"):
        imprint_layout(model)


def test_config_is_checked():
    with pytest.raises(ConfigError, match="kind"):
        ImprintConfig(kind="robbing")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="rounds"):
        ImprintConfig(rounds=0)


def test_sanity_test_passes_honest_models_and_refuses_bins_and_traps(mlp_job):
    setup, target = mlp_job
    inputs = setup.truth[target]
    assert first_layer_sanity(setup.model, setup.broadcast, inputs).passed
    lay = imprint_layout(setup.model)
    a, ladders = bin_edges(
        setup.public, torch.randn(lay.num_features, dtype=torch.float64), lay.hidden, 1, 1.0
    )
    bins = craft_imprint(lay, setup.broadcast, a, ladders[0], setup.num_classes, 0.05)
    rep = first_layer_sanity(setup.model, bins, inputs)
    assert not rep.passed and rep.parallel_fraction == 1.0
    guard = sanity_guard(setup)
    res = run_imprint(
        setup, "secagg", target, config=ImprintConfig(kind="trap", rounds=2), client_check=guard
    )
    assert res.rounds == 0 and "SuspiciousModelError" in res.refused


def test_sanity_test_misses_a_few_traps(mlp_job):
    """What the heuristic does not stop: traps on a quarter of the units, the rest honest."""
    setup, target = mlp_job
    cfg = ImprintConfig(kind="trap", rounds=8, trap_units=4, trap_rate=0.02)
    res = run_imprint(setup, "secagg", target, config=cfg, client_check=sanity_guard(setup, BroadcastCheck()))
    assert res.refused == ""
    assert res.exact_all > 0.05, res


def test_update_rule_refuses_every_crafted_model(mlp_job):
    setup, target = mlp_job
    check_update_rule(setup.broadcast, setup.broadcast)
    with pytest.raises(SuspiciousModelError, match="differs"):
        bad = dict(setup.broadcast)
        bad[imprint_layout(setup.model).first_bias] = bad[imprint_layout(setup.model).first_bias] + 1
        check_update_rule(bad, setup.broadcast)
    for kind in ("bins", "trap"):
        res = run_imprint(
            setup, "secagg", target, config=ImprintConfig(kind=kind), client_check=rule_guard(setup)
        )
        assert res.rounds == 0 and res.exact_all == 0.0


@pytest.mark.slow
@pytest.mark.parametrize("dataset", ["Cora", "CiteSeer"])
@pytest.mark.parametrize("model", ["mlp", "gcn"])
def test_imprint_positive_control_on_real_data(dataset, model):
    """Real data, 10 clients, SecAgg with real keys: at least half of the smallest client's nodes exactly."""
    from securefgl.api import load_federated_graph

    root = os.environ.get("SECUREFGL_DATA")
    ds = {"name": dataset, **({"root": root} if root else {})}
    cfg = RunConfig.from_mapping(
        {
            "dataset": ds,
            "partition": {"clients": 10},
            "algorithm": {"name": "fedavg"},
            "model": {"name": model, "dropout": 0.0},
            "train": {"optimizer": "sgd", "local_epochs": 1, "lr": 0.1},
            "protocol": {"name": "secagg"},
            "output": {"save": False},
        }
    )
    fg = load_federated_graph(cfg)
    setup = malicious_setup(cfg, fg)
    target = min((int(c.train_mask.sum()), i) for i, c in enumerate(fg.clients) if int(c.train_mask.sum()))[1]
    res = run_imprint(setup, "secagg", target, config=ImprintConfig(rounds=64))
    assert res.exact_target >= 0.5, res


def _audit_cfg(model: str, **kw):
    from securefgl.attacks import AuditConfig

    run = {
        "dataset": {"csbm": {"num_nodes": 240, "num_features": 16, "num_classes": 3}},
        "partition": {"split": [0.5, 0.25, 0.25]},
    }
    return AuditConfig(
        model=model, dataset="csbm", clients=4, attacks=("malicious-model",), trials=2, run=run, **kw
    )


def test_audit_runs_the_malicious_model_attack_on_the_secure_sum():
    from securefgl.attacks import audit

    res = audit(_audit_cfg("mlp", protocols=("secagg",), imprint_rounds=8))
    out = res.get("malicious-model", "secagg")
    assert out.status == "ok"
    m = out.metrics["exact_recovery"]
    assert m.mean >= 0.5
    assert m.baselines["chance"] == 0.0
    assert m.baselines["clients_run_sanity_test"] == 0.0
    assert m.baselines["clients_check_update_rule"] == 0.0


def test_audit_refuses_the_malicious_model_attack_on_sgc():
    from securefgl.attacks import audit

    with pytest.raises(AttackNotApplicableError, match="single linear layer"):
        audit(_audit_cfg("sgc", protocols=("secagg",)))
