"""examples/privacy_utility.py: its run configs are valid and its table is computed from the saved records."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from securefgl.config import RunConfig


@pytest.fixture(scope="module")
def sweep(load_example):
    return load_example("privacy_utility")


def test_every_method_and_epsilon_is_a_valid_run_config(sweep) -> None:
    for method, (_, _, _, epsilons) in sweep.METHODS.items():
        for eps in epsilons:
            cfg = RunConfig.from_mapping(sweep.run_config("Cora", method, eps, [0, 1]))
            assert cfg.partition.clients == 10 and cfg.protocol.spec.base == "secagg"
    dense = RunConfig.from_mapping(sweep.run_config("csbm-dense", "GAP node", 8.0, [0]))
    assert dense.dataset.name == "csbm" and dense.dataset.csbm.avg_degree == 40
    opts = sweep.run_config("Cora", "GAP node residual-vote", 8.0, [0])["algorithm"]["options"]
    assert opts["classifier"] == "residual" and opts["embedding"] == "vote" and opts["privacy"] == "node"


def test_the_table_and_plot_come_from_the_records(sweep, tmp_path: Path) -> None:
    for method, eps, accs in (
        ("GAP node", 8.0, [0.4, 0.5]),
        ("DP-MLP node", 8.0, [0.3, 0.3]),
        ("GAP edge", None, [0.7, 0.9]),
    ):
        record = {"dataset": "Cora", "method": method, "epsilon": eps, "seeds": [0, 1], "test_acc": accs}
        slug = sweep.record_slug("Cora", method, math.inf if eps is None else eps)
        (tmp_path / f"{slug}.json").write_text(json.dumps(record), encoding="utf-8")
    table = sweep.report(tmp_path, tmp_path / "plot.png")
    assert "| Cora | accuracy % | GAP node |  |  |  | 45.0 ± 5.0 |  | 2 |" in table
    assert "| Cora | accuracy % | GAP edge |  |  |  |  | 80.0 ± 10.0 | 2 |" in table
    assert (tmp_path / "plot.png").stat().st_size > 0


def test_seeds_of_several_runs_are_pooled_once(sweep, tmp_path: Path) -> None:
    for sub, seeds, accs in (("a", [0, 1], [0.4, 0.6]), ("b", [1, 2], [0.9, 0.5])):
        (tmp_path / sub).mkdir()
        record = {"dataset": "Cora", "method": "GAP node", "epsilon": 8.0, "seeds": seeds, "test_acc": accs}
        (tmp_path / sub / "x.json").write_text(json.dumps(record), encoding="utf-8")
    table = sweep.report(tmp_path, None)
    assert (
        "| Cora | accuracy % | GAP node |  |  |  | 50.0 ± 8.2 |  | 3 |" in table
    )  # seed 1 from the first run only


def test_binary_tasks_are_tabled_by_their_roc_auc(sweep, tmp_path: Path) -> None:
    for method, accs, aucs in (("GAP node", [0.8, 0.8], [0.9, 0.7]), ("DP-MLP node", [0.8, 0.8], [0.5, 0.6])):
        record = {
            "dataset": "Minesweeper",
            "method": method,
            "epsilon": 8.0,
            "seeds": [0, 1],
            "test_acc": accs,
            "test_auc": aucs,
        }
        (tmp_path / f"{sweep.record_slug('Minesweeper', method, 8.0)}.json").write_text(
            json.dumps(record), encoding="utf-8"
        )
    table = sweep.report(tmp_path, tmp_path / "plot.png")
    assert "| Minesweeper | ROC AUC % | GAP node |  |  |  | 80.0 ± 10.0 |  | 2 |" in table
    assert "| Minesweeper | ROC AUC % | DP-MLP node |  |  |  | 55.0 ± 5.0 |  | 2 |" in table


def test_other_json_in_the_folder_is_skipped_not_fatal(sweep, tmp_path: Path, capsys) -> None:
    record = {"dataset": "Cora", "method": "GAP node", "epsilon": 8.0, "seeds": [0], "test_acc": [0.5]}
    (tmp_path / "gap.json").write_text(json.dumps(record), encoding="utf-8")
    (tmp_path / "metrics.json").write_text(json.dumps({"status": "ok", "seeds": []}), encoding="utf-8")
    (tmp_path / "broken.json").write_text("{not json", encoding="utf-8")
    (tmp_path / "other_method.json").write_text(json.dumps({**record, "method": "not one"}), encoding="utf-8")
    table = sweep.report(tmp_path, None)
    assert "| Cora | accuracy % | GAP node |  |  |  | 50.0 ± 0.0 |  | 1 |" in table
    err = capsys.readouterr().err
    assert "metrics.json (not a record" in err and "broken.json (JSONDecodeError)" in err
    assert "other_method.json" in err


def test_a_folder_without_records_is_one_clear_error(sweep, tmp_path: Path) -> None:
    (tmp_path / "metrics.json").write_text("{}", encoding="utf-8")
    with pytest.raises(SystemExit, match="no record of this sweep"):
        sweep.report(tmp_path, None)
    with pytest.raises(SystemExit, match="is not a folder"):
        sweep.report(tmp_path / "missing", None)
