"""``securefgl audit`` through the CLI runner."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from securefgl.cli import app

runner = CliRunner()


def test_audit_help_lists_attacks():
    r = runner.invoke(app, ["audit", "--help"])
    assert r.exit_code == 0 and "link-stealing" in r.output and "--protocol" in r.output


def test_audit_json_small_run(tmp_path):
    args = [
        "audit",
        "--algorithm",
        "fedavg",
        "--model",
        "mlp",
        "--dataset",
        "csbm",
        "--clients",
        "3",
        "--attack",
        "label,min-cohort",
        "--protocol",
        "plaintext",
        "--trials",
        "1",
        "--rounds",
        "1",
        "--json",
        "--output",
        str(tmp_path),
        "--set",
        "dataset.csbm.num_nodes=150",
        "--set",
        "partition.cache=false",
        "--set",
        "train.optimizer=sgd",
        "--set",
        "train.local_epochs=1",
    ]
    r = runner.invoke(app, args)
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert {o["attack"] for o in doc["outcomes"]} == {"label", "min-cohort"}
    assert (tmp_path / "summary.md").exists()


def test_audit_bad_attack_is_a_config_error():
    r = runner.invoke(app, ["audit", "--attack", "telepathy", "--json"])
    assert r.exit_code == 2
    assert json.loads(r.stdout)["type"] == "ConfigError"
