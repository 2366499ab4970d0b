"""Analytic first-layer inversion (rows dW_i / db_i) of honest uploads, plaintext and under the secure sum."""

from __future__ import annotations

import os

import pytest
import torch
import torch.nn.functional as F

from securefgl.attacks.analytic_inversion import (
    AnalyticConfig,
    analytic_study,
    first_layer_candidates,
    score_inversion,
    subsample_train,
    upload_delta,
)
from securefgl.config import RunConfig
from securefgl.data import make_csbm, partition_graph
from securefgl.errors import ConfigError


def _mlp_grads(x: torch.Tensor, y: torch.Tensor, hidden: int = 32, seed: int = 0):
    """Gradients of a two-layer ReLU MLP's first layer on the batch ``x`` (mean cross-entropy)."""
    g = torch.Generator().manual_seed(seed)
    w1 = (torch.randn(hidden, x.shape[1], generator=g, dtype=torch.float64) * 0.3).requires_grad_()
    b1 = (torch.randn(hidden, generator=g, dtype=torch.float64) * 0.1).requires_grad_()
    w2 = torch.randn(3, hidden, generator=g, dtype=torch.float64) * 0.3
    loss = F.cross_entropy(torch.relu(x @ w1.T + b1) @ w2.T, y)
    dw, db = torch.autograd.grad(loss, (w1, b1))
    return dw, db


def test_single_node_gradient_is_inverted_exactly():
    g = torch.Generator().manual_seed(1)
    x = torch.rand(1, 12, generator=g, dtype=torch.float64)
    dw, db = _mlp_grads(x, torch.tensor([2]))
    rows, rep = first_layer_candidates(dw, db)
    assert rows.shape[0] == 1  # every live unit gives the same row: merged
    assert rep[0] == int((db.abs() > 0).sum()) >= 2
    assert torch.allclose(rows[0], x[0], atol=1e-10)
    # the SGD update -lr * grad gives the same rows (sign and scale cancel)
    rows2, _ = first_layer_candidates(-0.1 * dw, -0.1 * db)
    assert torch.allclose(rows2[0], x[0], atol=1e-10)
    s = score_inversion(rows, x, torch.rand(50, 12, generator=g, dtype=torch.float64))
    assert s["exact"] == 1.0 and s["mean_best_cosine"] > 0.999999
    assert s["chance_mean_best_cosine"] < 0.99


def test_deduplication_merges_units_of_one_node_and_keeps_distinct_rows():
    x = torch.tensor([[1.0, 0.0, 2.0], [0.0, 3.0, 1.0]], dtype=torch.float64)
    # units 0-2: node 0 alone (different error signals); units 3-4: node 1 alone; unit 5: a mixture; 6: dead
    delta = torch.tensor(
        [[0.5, 0.0], [-1.0, 0.0], [2.0, 0.0], [0.0, 0.3], [0.0, -0.7], [1.0, 1.0], [0.0, 0.0]],
        dtype=torch.float64,
    )
    dw, db = delta @ x, delta.sum(1)
    rows, rep = first_layer_candidates(dw, db)
    assert rep.tolist() == [3, 2, 1]
    assert torch.allclose(rows[0], x[0]) and torch.allclose(rows[1], x[1])
    assert torch.allclose(rows[2], x.mean(0))  # a unit both nodes reach gives their weighted mean
    best = score_inversion(rows, x)
    assert best["exact"] == 1.0
    assert first_layer_candidates(torch.zeros(4, 3), torch.zeros(4))[0].shape == (0, 3)
    with pytest.raises(ConfigError):
        first_layer_candidates(torch.zeros(4, 3), torch.zeros(5))
    with pytest.raises(ConfigError):
        AnalyticConfig(exact_cosine=0.0)


def test_the_sum_of_many_nodes_defeats_the_ratio():
    """Summed over several clients' nodes every unit sees many inputs: no row is one node's input."""
    g = torch.Generator().manual_seed(2)
    x = torch.randn(60, 12, generator=g, dtype=torch.float64)
    y = torch.randint(0, 3, (60,), generator=g)
    dw, db = _mlp_grads(x, y)
    rows, rep = first_layer_candidates(dw, db)
    s = score_inversion(rows, x)
    assert s["exact"] == 0.0
    assert int((rep >= 2).sum()) == 0


def test_upload_delta_reads_fedavg_and_dp_uploads():
    bc = {"a": torch.ones(2, 2)}
    up = {"w.a": 3 * (torch.ones(2, 2) + 0.5), "n": torch.tensor([3.0])}
    assert torch.allclose(upload_delta(up, "a", bc), torch.full((2, 2), 1.5, dtype=torch.float64))
    assert torch.equal(upload_delta({"d.a": torch.ones(2)}, "a", bc), torch.ones(2, dtype=torch.float64))


def _csbm_job(model: str, epochs: int = 1):
    data = make_csbm(num_nodes=240, num_classes=3, num_features=16, avg_degree=4.0, seed=0)
    fg = partition_graph(data, "louvain", 4, seed=0, cache=False, split=(0.5, 0.25, 0.25))
    cfg = RunConfig.from_mapping(
        {
            "dataset": {"name": "csbm"},
            "partition": {"clients": 4},
            "algorithm": {"name": "fedavg"},
            "model": {"name": model, "hidden": 32, "dropout": 0.0},
            "train": {"optimizer": "sgd", "local_epochs": epochs, "lr": 0.1},
            "protocol": {"name": "secagg"},
            "output": {"save": False},
            "seeds": [0],
        }
    )
    return cfg, fg


def test_federated_path_one_node_per_client_plaintext_exact_secure_sum_not():
    """The engine's clients and FedAvg's own step: a client with one training node is recovered exactly
    from its upload; the secure sum of the 4 clients (real keys) gives no row that is one node's input
    for clients that keep 30 nodes each."""
    cfg, fg = _csbm_job("mlp")
    one = analytic_study(cfg, subsample_train(fg, 1), protocols=("secagg",))
    assert one.summary["plaintext"]["exact"] == 1.0
    many = analytic_study(cfg, subsample_train(fg, 30), protocols=("secagg",))
    assert many.summary["secagg"]["exact"] <= 0.05
    assert many.summary["secagg"]["mean_best_cosine"] < one.summary["plaintext"]["mean_best_cosine"]


def test_federated_path_gcn_recovers_propagated_rows():
    cfg, fg = _csbm_job("gcn")
    res = analytic_study(cfg, subsample_train(fg, 1), protocols=())
    assert res.summary["plaintext"]["exact"] >= 0.5
    assert "graph-unknown" in res.summary


def test_audit_registers_the_analytic_inversion():
    from securefgl.attacks import ATTACKS, AuditConfig, audit

    assert "analytic-inversion" in ATTACKS
    run = {
        "dataset": {"csbm": {"num_nodes": 240, "num_features": 16, "num_classes": 3}},
        "partition": {"split": [0.5, 0.25, 0.25]},
        "train": {"optimizer": "sgd", "local_epochs": 1, "lr": 0.1},
        "model": {"dropout": 0.0, "hidden": 32},
    }
    res = audit(
        AuditConfig(
            model="mlp",
            dataset="csbm",
            clients=4,
            attacks=("analytic",),
            protocols=("plaintext", "secagg"),
            trials=2,
            run=run,
        )
    )
    plain = res.get("analytic-inversion", "plaintext")
    sec = res.get("analytic-inversion", "secagg")
    assert plain.status == "ok" and sec.status == "ok"
    assert plain.metrics["feature_cosine"].mean > sec.metrics["feature_cosine"].mean


@pytest.mark.slow
@pytest.mark.parametrize("model", ["mlp", "gcn"])
def test_analytic_inversion_positive_control_on_cora(model):
    """Real Cora split among 100 clients (about 4 training nodes each, no subsampling), FedAvg SGD, one local
    step: the plaintext uploads give at least half of the clients' training nodes exactly (GCN: their
    propagated rows, graph known) and a mean best cosine >= 0.9, far above chance; the secure sum of all 100
    clients gives none."""
    from securefgl.api import load_federated_graph

    root = os.environ.get("SECUREFGL_DATA")
    cfg = RunConfig.from_mapping(
        {
            "dataset": {"name": "Cora", **({"root": root} if root else {})},
            "partition": {"clients": 100},
            "algorithm": {"name": "fedavg"},
            "model": {"name": model, "dropout": 0.0},
            "train": {"optimizer": "sgd", "local_epochs": 1, "lr": 0.1},
            "protocol": {"name": "secagg"},
            "output": {"save": False},
        }
    )
    res = analytic_study(cfg, load_federated_graph(cfg), protocols=("secagg",))
    plain, sec = res.summary["plaintext"], res.summary["secagg"]
    assert plain["nodes"] <= 8, plain
    assert plain["exact"] >= 0.5, plain
    assert plain["mean_best_cosine"] >= 0.9, plain
    assert plain["mean_best_cosine"] > plain["chance_mean_best_cosine"] + 0.3, plain
    assert sec["exact"] <= 0.01, sec
    assert sec["mean_best_cosine"] < plain["mean_best_cosine"] - 0.3, sec
