"""The audit on GAP: the model attacks query GAP's released model through its client half; DP options."""

from __future__ import annotations

import json
import math

import pytest
from typer.testing import CliRunner

from securefgl.attacks.audit import AuditConfig, audit
from securefgl.cli import app
from securefgl.errors import ConfigError

runner = CliRunner()

SMALL = {
    "dataset": {"csbm": {"num_nodes": 240, "num_classes": 3, "num_features": 12, "avg_degree": 6.0}},
    "partition": {"method": "louvain", "cache": False, "split": [0.5, 0.25, 0.25]},
    "model": {"hidden": 32, "dropout": 0.0},
    "train": {"lr": 0.01},
}


def test_cli_privacy_node_runs_model_attacks_on_gap(tmp_path):
    args = [
        "audit",
        "--privacy",
        "node",
        "--epsilon",
        "4",
        "--model",
        "gcn",
        "--dataset",
        "csbm",
        "--clients",
        "3",
        "--attack",
        "membership,link-stealing,gradient-inversion,label",
        "--protocol",
        "secagg",
        "--trials",
        "2",
        "--rounds",
        "3",
        "--split",
        "0.5,0.25,0.25",
        "--json",
        "--output",
        str(tmp_path),
        "--set",
        "dataset.csbm.num_nodes=240",
        "--set",
        "partition.cache=false",
    ]
    r = runner.invoke(app, args)
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["config"]["algorithm"] == "gap"
    assert doc["config"]["privacy"] == "node" and doc["config"]["epsilon"] == 4.0
    cells = {o["attack"]: o for o in doc["outcomes"]}
    for name, key in (("membership", "loss_auc"), ("link-stealing", "auc")):
        assert cells[name]["status"] == "ok", cells[name]
        auc = cells[name]["metrics"][key]["mean"]
        assert math.isfinite(auc) and 0.0 <= auc <= 1.0
    # the update attacks read FedAvg's w.* blocks: refused with a reason, never a crash
    for name in ("gradient-inversion", "label"):
        assert cells[name]["status"] == "not_applicable"
        assert "gap" in cells[name]["reason"] and "FedAvg" in cells[name]["reason"]
    # the run's privacy statement is in the audit's facts (and on disk)
    st = doc["runs"]["secagg"]["algorithm_privacy"]
    assert st["unit"] == "node" and 0 < st["epsilon"] <= 4.0 + 1e-6
    assert st["noise_multiplier"] > 0 and st["mechanisms"] and st["assumptions"]
    on_disk = json.loads((tmp_path / "audit.json").read_text())
    assert on_disk["runs"]["secagg"]["algorithm_privacy"] == st


def test_audit_gap_without_noise_states_no_guarantee():
    res = audit(
        AuditConfig(
            algorithm="gap",
            model="gcn",
            dataset="csbm",
            clients=3,
            trials=1,
            rounds=2,
            attacks=("membership",),
            protocols=("plaintext",),
            run=SMALL,
            privacy="none",
        )
    )
    assert res.get("membership", "plaintext").status == "ok"
    st = res.runs["plaintext"]["algorithm_privacy"]
    assert st["epsilon"] is None and st["noise_multiplier"] == 0.0


def test_privacy_with_another_algorithm_is_refused():
    r = runner.invoke(app, ["audit", "--algorithm", "fedavg", "--privacy", "node", "--json"])
    assert r.exit_code == 2, r.output
    err = json.loads(r.stdout)
    assert err["type"] == "ConfigError"
    assert "--privacy node" in err["error"] and "fedavg" in err["error"] and "gap" in err["error"]
    with pytest.raises(ConfigError, match=r"privacy='node'.*'fedavg'"):
        AuditConfig(algorithm="fedavg", privacy="node")
    with pytest.raises(ConfigError, match=r"epsilon=1\.0.*'fedprox'"):
        AuditConfig(algorithm="fedprox", epsilon=1.0)
    with pytest.raises(ConfigError, match="privacy: invalid value 'graph'"):
        AuditConfig(algorithm="gap", privacy="graph")
