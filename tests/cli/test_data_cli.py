"""`securefgl datasets` and `securefgl partition` through typer's CliRunner."""

from __future__ import annotations

import json
import tomllib

import pytest
from typer.testing import CliRunner

from securefgl.cli import app

runner = CliRunner()


def test_help_lists_data_commands() -> None:
    result = runner.invoke(app, ["--help"])
    assert result.exit_code == 0
    assert "datasets" in result.output and "partition" in result.output


def test_datasets_json(data_root) -> None:
    result = runner.invoke(
        app,
        [
            "datasets",
            "cora",
            "minesweeper",
            "chameleon",
            "PubMed",
            "csbm",
            "--json",
            "--root",
            str(data_root),
        ],
    )
    assert result.exit_code == 0, result.output
    rows = {r["name"]: r for r in json.loads(result.stdout)}
    assert rows["Cora"]["available"] and rows["Cora"]["nodes"] == 2708 and rows["Cora"]["classes"] == 7
    assert rows["Cora"]["edges"] == 5278 and 0.8 < rows["Cora"]["edge_homophily"] < 0.82
    assert rows["Minesweeper"]["available"] and rows["chameleon"]["features"] == 2325
    assert not rows["PubMed"]["available"] and "missing" in rows["PubMed"]["status"]
    assert rows["csbm"]["available"] and list(rows) == ["Cora", "Minesweeper", "chameleon", "PubMed", "csbm"]
    bad = runner.invoke(app, ["datasets", "Coraa"])
    assert bad.exit_code == 2 and "valid choices" in bad.output


def test_datasets_table_without_stats(data_root) -> None:
    result = runner.invoke(app, ["datasets", "--no-stats", "--root", str(data_root)])
    assert result.exit_code == 0, result.output
    assert "Roman-empire" in result.output and "found" in result.output


def test_partition_table_and_cache(data_root) -> None:
    args = ["partition", "--dataset", "Cora", "--method", "metis+", "--clients", "4", "--seed", "3"]
    first = runner.invoke(app, args)
    assert first.exit_code == 0, first.output
    assert "Cora · metis+ · 4 clients" in first.output and "cross-client edges" in first.output
    assert "cached" in first.output or "loaded from cache" in first.output  # a reused data root has it
    second = runner.invoke(app, args)
    assert "loaded from cache" in second.output


def test_partition_json_plot_out_and_config(data_root, tmp_path) -> None:
    cfg = tmp_path / "run.toml"
    cfg.write_text(
        '[dataset]\nname = "csbm"\n[dataset.csbm]\nnum_nodes = 400\nnum_classes = 3\n'
        '[partition]\nmethod = "dirichlet"\nclients = 3\n[partition.params]\nalpha = 0.3\n'
        "[train]\nrounds = 5\n"
    )
    plot = tmp_path / "figs" / "hist.png"
    result = runner.invoke(
        app,
        [
            "partition",
            "--config",
            str(cfg),
            "--set",
            "partition.seed=2",
            "--clients",
            "5",
            "-p",
            "min_size=3",
            "--json",
            "--plot",
            str(plot),
            "--out",
            str(tmp_path / "out"),
            "--no-cache",
        ],
    )
    assert result.exit_code == 0, result.output
    payload = json.loads(result.stdout)
    assert payload["config"]["partition"] == {
        "method": "dirichlet",
        "clients": 5,
        "seed": 2,
        "split": [0.2, 0.4, 0.4],
        "split_scope": "client",
        "stratified": True,
        "cache": False,
        "params": {"alpha": 0.3, "min_size": 3},
    }
    assert payload["ignored"] == ["train"]
    summary = payload["summary"]
    assert summary["num_clients"] == 5 and summary["num_nodes"] == 400
    assert sum(r["nodes"] for r in summary["clients"]) == 400
    assert all(r["nodes"] >= 3 for r in summary["clients"])
    assert plot.is_file() and plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    saved = tomllib.loads((tmp_path / "figs" / "hist.config.toml").read_text())
    assert saved["partition"]["clients"] == 5 and saved["dataset"]["csbm"]["num_nodes"] == 400
    assert json.loads((tmp_path / "out" / "partition.json").read_text())["summary"] == summary
    assert (tmp_path / "out" / "config.toml").is_file()
    # partition.npz reads back through the file method: the same owners as the table
    import numpy as np

    with np.load(tmp_path / "out" / "partition.npz") as z:
        owner = z["node_owner"]
        assert z["train_mask"].dtype == np.bool_
    sizes = np.bincount(owner[owner >= 0], minlength=5).tolist()
    assert sizes == [r["nodes"] for r in summary["clients"]]


@pytest.mark.parametrize(
    ("args", "code", "needle"),
    [
        (["--method", "spectral"], 2, "valid choices: random, metis, louvain"),
        (["--dataset", "Corra"], 2, "valid choices: Cora"),
        (["--split", "0.6,0.3,0.2"], 2, "sum to 1.1 > 1"),
        (["--clients", "100000"], 2, "clients requested for a graph of 3000 nodes"),
        (["--dataset", "PubMed", "--root", "EMPTY"], 4, "SECUREFGL_DATA"),
        (["-p", "alpha=1"], 2, "valid keys in 'partition.params': resolution"),
        (["--set", "partition.sede=1"], 2, "unknown key 'partition.sede'"),
    ],
)
def test_partition_bad_input_exit_codes(tmp_path, args: list[str], code: int, needle: str) -> None:
    args = [str(tmp_path / "empty") if a == "EMPTY" else a for a in args]
    result = runner.invoke(app, ["partition", "--no-cache", *args])
    assert result.exit_code == code
    assert needle in result.output
    as_json = runner.invoke(app, ["partition", "--no-cache", "--json", *args])
    assert as_json.exit_code == code and needle in json.loads(as_json.stdout)["error"]


def test_non_integer_seed_is_a_usage_error() -> None:
    result = runner.invoke(app, ["partition", "--seed", "1.5"])
    assert result.exit_code == 2 and "--seed" in result.output and "valid integer" in result.output


def test_partition_from_a_file(data_root, tmp_path) -> None:
    from securefgl.data import load_dataset, partition_graph
    from securefgl.data.partition import save_partition

    fg = partition_graph(load_dataset("Cora", data_root), "metis", 3, seed=1, cache=False)
    path = save_partition(fg, tmp_path / "cora3.npz")
    args = ["partition", "--dataset", "Cora", "--method", "file", "--clients", "3", "--param", f"path={path}"]
    res = runner.invoke(app, args)
    assert res.exit_code == 0, res.output
    assert "Cora · file · 3 clients" in res.output and "from the file" in res.output
    missing = runner.invoke(app, [*args[:-1], f"path={tmp_path / 'absent.npz'}"])
    assert missing.exit_code == 2 and "does not exist" in missing.output
