"""``securefgl run`` end to end: the synthetic default, Cora, JSON output, and errors with exit codes."""

from __future__ import annotations

import json

import pytest
import torch
from typer.testing import CliRunner

from securefgl.cli import app, main

runner = CliRunner()


def test_help_lists_the_registries():
    res = runner.invoke(app, ["run", "--help"])
    assert res.exit_code == 0
    for name in ("secagg", "plaintext", "fedavg", "centralized", "gcn", "sage", "louvain", "Cora"):
        assert name in res.output


def test_default_synthetic_run_with_only_protocol(tmp_path, monkeypatch, data_root):
    monkeypatch.chdir(tmp_path)
    res = runner.invoke(app, ["run", "--protocol", "secagg"])
    assert res.exit_code == 0, res.output
    for needle in ("Per-client test results", "test accuracy %", "time cryptography", "bytes up / down"):
        assert needle in res.output
    folders = list((tmp_path / "results").iterdir())
    assert len(folders) == 1
    assert {p.name for p in folders[0].iterdir()} == {
        "config.toml",
        "metrics.json",
        "clients.csv",
        "plot.png",
    }
    metrics = json.loads((folders[0] / "metrics.json").read_text())
    assert metrics["status"] == "ok" and metrics["graph"]["name"] == "csbm"
    assert metrics["summary"]["test_acc"]["mean"] > 0.8


@pytest.fixture
def keep_threads():
    n = torch.get_num_threads()
    yield
    torch.set_num_threads(n)


def test_cora_quiet_two_seeds(tmp_path, data_root, keep_threads):
    res = runner.invoke(
        app,
        [
            "run",
            "--protocol",
            "plaintext",
            "--dataset",
            "Cora",
            "--partition",
            "louvain",
            "--clients",
            "5",
            "--rounds",
            "3",
            "--seeds",
            "0,1",
            "--quiet",
            "--threads",
            "1",
            "--output",
            str(tmp_path / "cora"),
        ],
    )
    assert res.exit_code == 0, res.output
    assert res.output.startswith("test acc ") and "±" in res.output
    metrics = json.loads((tmp_path / "cora" / "metrics.json").read_text())
    assert [s["seed"] for s in metrics["seeds"]] == [0, 1]
    assert metrics["graph"]["name"] == "Cora" and metrics["graph"]["num_clients"] == 5
    assert torch.get_num_threads() == 1
    assert "threads = 1" in (tmp_path / "cora" / "config.toml").read_text()


def test_json_output_for_pipelines(data_root):
    res = runner.invoke(
        app,
        [
            "run",
            "--protocol",
            "plaintext",
            "--rounds",
            "2",
            "--no-save",
            "--json",
            "--model",
            "sage",
            "--set",
            "dataset.csbm.num_nodes=500",
            "--set",
            "train.eval_every=2",
        ],
    )
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert out["config"]["model"]["name"] == "sage" and out["config"]["dataset"]["csbm"]["num_nodes"] == 500
    assert out["output_dir"] is None
    assert set(out["summary"]["test_f1"]) == {"mean", "std"}
    assert "rounds" not in out["seeds"][0]
    split = out["seeds"][0]["round_seconds"]  # where each round's time went, for pipelines
    assert [(r["phase"], r["round"]) for r in split] == [("train", 0), ("train", 1)]
    assert all(set(r) == {"phase", "round", "train", "crypto", "server", "eval"} for r in split)
    assert all(r["train"] > 0 and r["crypto"] >= 0 for r in split) and split[1]["eval"] > 0


def _exit(argv, capsys):
    with pytest.raises(SystemExit) as info:
        main(argv)
    return info.value.code, capsys.readouterr().err


@pytest.mark.parametrize(
    "argv, code, needle",
    [
        (["run", "--protocol", "rot13", "--no-save"], 2, "unknown protocol 'rot13'"),
        (["run", "--model", "transformer", "--no-save"], 2, "valid choices: gat, gcn"),
        (["run", "--algorithm", "local", "--dropout", "0.2", "--no-save"], 3, "never communicates"),
        (["run", "--seeds", "a,b", "--no-save"], 2, "--seeds"),
        (["run", "--set", "train.clients_per_round=11", "--no-save"], 2, "more clients per round"),
        (["run", "--device", "tpu", "--no-save"], 2, "unknown device 'tpu'"),
        (
            ["run", "--preset", "nope", "--no-save"],
            2,
            "valid choices: fedspray-code, fedspray-paper, opfgl-paper",
        ),
        (
            ["run", "--preset", "opfgl-paper", "--dataset", "Cora", "--no-save"],
            2,
            "give --dataset and --partition",
        ),
        (
            ["run", "--preset", "opfgl-paper", "--dataset", "Cora", "--partition", "dirichlet", "--no-save"],
            2,
            "defined: Cora/louvain+",
        ),
    ],
)
def test_errors_map_to_exit_codes(argv, code, needle, capsys, data_root):
    got, err = _exit(argv, capsys)
    assert got == code
    assert needle in err and err.startswith("error: ")


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message when CUDA is absent")
def test_cuda_asked_but_absent(capsys, data_root):
    got, err = _exit(["run", "--device", "cuda", "--no-save"], capsys)
    assert got == 2 and "CUDA is not available" in err


def test_json_errors(data_root):
    res = runner.invoke(app, ["run", "--protocol", "rot13", "--json"])
    assert res.exit_code == 2
    out = json.loads(res.stdout)
    assert out["type"] == "ConfigError" and out["exit_code"] == 2 and "rot13" in out["error"]


def test_preset_is_the_lowest_layer(data_root):
    """``--preset`` fills the config; options and ``--set`` win over it."""
    res = runner.invoke(
        app,
        [
            "run",
            "--preset",
            "fedspray-code",
            "--protocol",
            "plaintext",
            "--rounds",
            "1",
            "--no-save",
            "--json",
        ]
        + ["--set", "dataset.csbm.num_nodes=300", "--set", "algorithm.options.lambda1=2.0"],
    )
    assert res.exit_code == 0, res.output
    cfg = json.loads(res.stdout)["config"]
    assert cfg["algorithm"]["name"] == "fedspray" and cfg["train"]["rounds"] == 1
    assert cfg["algorithm"]["options"]["proxy_mode"] == "code_persistent"
    assert cfg["algorithm"]["options"]["lambda1"] == 2.0 and cfg["train"]["local_epochs"] == 5


def test_opfgl_paper_preset_with_a_partition_file():
    from securefgl.algorithms.presets import resolve_preset
    from securefgl.config import load_run_config

    base = resolve_preset("OpFGL-paper", dataset="cora", partition="louvain")
    cfg = load_run_config(
        None, {"partition": {"method": "file", "params": {"path": "ref/Cora_louvain+.npz"}}}, base=base
    )
    assert cfg.dataset.name == "Cora" and cfg.partition.method == "file" and cfg.partition.seed == 42
    assert cfg.partition.params == {"path": "ref/Cora_louvain+.npz"}
    assert cfg.algorithm.options["degree_threshold"] == 20 and list(cfg.seeds) == [0, 1, 2]
