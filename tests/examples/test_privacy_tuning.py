"""examples/privacy_tuning.py: equal draws for both methods, selection on validation only, records the report reads."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from securefgl.config import RunConfig


@pytest.fixture(scope="module")
def tuning(load_example):
    return load_example("privacy_tuning")


def _write_trials(tuning, out: Path, method: str, trials: list[dict[str, Any]]) -> None:
    path = tuning._trials_path(out, "Cora", method)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(t) + "\n" for t in trials), encoding="utf-8")


def test_trial_i_draws_the_same_shared_options_for_every_method(tuning) -> None:
    for i in range(20):
        gap, mlp = tuning._draw("Cora", "GAP node", i), tuning._draw("Cora", "DP-MLP node", i)
        head = tuning._draw("Cora", "GAP node head", i)
        assert {k: gap[k] for k in tuning.SPACE} == mlp == {k: head[k] for k in tuning.SPACE}
        assert set(gap) == set(tuning.SPACE) | set(tuning.GAP_SPACE)
        assert set(head) == set(tuning.SPACE) | set(tuning.HEAD_SPACE)
    assert len({json.dumps(tuning._draw("Cora", "DP-MLP node", i), sort_keys=True) for i in range(20)}) > 10


def test_a_trial_becomes_a_valid_run_config(tuning) -> None:
    hp = {**tuning._draw("Cora", "GAP node", 3), "rounds": 100, "split": 0.3, "hops": 2, "degree_bound": 5}
    raw = tuning.config("Cora", "GAP node", 8.0, hp, [0, 1])
    cfg = RunConfig.from_mapping(raw)
    opts = raw["algorithm"]["options"]
    assert (opts["encoder_rounds"], opts["classifier_rounds"]) == (30, 70)
    assert (opts["hops"], opts["degree_bound"], opts["privacy"]) == (2, 5, "node")
    assert cfg.train.lr == hp["lr"] and cfg.model.hidden == hp["hidden"] and "split" not in opts
    mlp = tuning.config("Cora", "DP-MLP node", 8.0, tuning._draw("Cora", "DP-MLP node", 3), [0])
    assert RunConfig.from_mapping(mlp).model.name == "mlp" and "hops" not in mlp["algorithm"]["options"]
    head = tuning.config("Cora", "GAP node head", 8.0, tuning._draw("Cora", "GAP node head", 3), [0])
    head_opts = RunConfig.from_mapping(head).algorithm.options
    assert (head_opts["classifier"], head_opts["hops"]) == ("head", 1)  # the (2D + 1) C sensitivity's one hop


def test_binary_tasks_are_scored_by_roc_auc(tuning) -> None:
    binary = [{"val_acc": 0.80, "val_auc": 0.56}, {"val_acc": 0.78, "val_auc": 0.60}]
    assert tuning._score(binary, "val") == pytest.approx(0.58)  # not the majority-class accuracy
    multiclass = [{"val_acc": 0.5, "val_auc": None}, {"val_acc": 0.7}]
    assert tuning._score(multiclass, "val") == pytest.approx(0.6)


def test_the_best_trial_is_chosen_by_validation_never_by_test(tuning, tmp_path: Path) -> None:
    hp = tuning._draw("Cora", "DP-MLP node", 0)
    _write_trials(
        tuning,
        tmp_path,
        "DP-MLP node",
        [
            {"trial": 0, "epsilon": 8.0, "hp": {**hp, "lr": 0.1}, "val": 0.50, "test": 0.90},
            {"trial": 1, "epsilon": 8.0, "hp": {**hp, "lr": 0.01}, "val": 0.55, "test": 0.40},
        ],
    )
    assert tuning.best_trial(tmp_path, "Cora", "DP-MLP node")["hp"]["lr"] == 0.01
    with pytest.raises(SystemExit, match="run 'search' first"):
        tuning.best_trial(tmp_path, "Cora", "GAP node")


def test_refinement_changes_one_or_two_options_of_a_top_three_trial(tuning) -> None:
    trials = [
        {"trial": i, "hp": tuning._draw("Cora", "GAP node", i), "val": v}
        for i, v in enumerate([0.2, 0.5, 0.4, 0.45, 0.1])
    ]
    top = [trials[1]["hp"], trials[3]["hp"], trials[2]["hp"]]
    tried = {json.dumps(t["hp"], sort_keys=True) for t in trials}
    for i in range(30):
        hp = tuning._neighbour("Cora", "GAP node", i, trials)
        assert json.dumps(hp, sort_keys=True) not in tried
        assert min(sum(hp[k] != b[k] for k in hp) for b in top) in (1, 2)


def test_search_and_evaluate_write_records_the_report_reads(
    tuning, load_example, tmp_path: Path, monkeypatch
) -> None:
    """A real two-trial search per method on the small synthetic graph, then the tuned rows of the report."""
    monkeypatch.setitem(tuning.SPACE, "rounds", [2])
    for method in tuning.TUNED:
        tuning.search("csbm", method, 8.0, budget=1, refine=1, out=tmp_path)
        trials = tuning.load_trials(tmp_path, "csbm", method)
        assert [t["phase"] for t in trials] == ["random", "refine"] and all(
            0 <= t["val"] <= 1 for t in trials
        )
        tuning.search(
            "csbm", method, 8.0, budget=1, refine=1, out=tmp_path
        )  # done: resumes with nothing to do
        assert len(tuning.load_trials(tmp_path, "csbm", method)) == 2
    tuning.evaluate("csbm", list(tuning.TUNED), [0], [8.0], tmp_path)
    record = json.loads((tmp_path / f"{tuning.record_slug('csbm', 'GAP node tuned', 8.0)}.json").read_text())
    assert record["privacy"]["unit"] == "node" and record["privacy"]["epsilon"] == pytest.approx(
        8.0, rel=0.05
    )
    assert record["hyperparameters"] == tuning.best_trial(tmp_path, "csbm", "GAP node")["hp"]
    head = json.loads(
        (tmp_path / f"{tuning.record_slug('csbm', 'GAP node head tuned', 8.0)}.json").read_text()
    )
    mechanisms = [m["name"] for m in head["privacy"]["mechanisms"]]
    assert mechanisms[1].startswith("head DP-GD") and head["privacy"]["epsilon"] <= 8.0
    table = load_example("privacy_utility").report(tmp_path, None)
    assert (
        "| csbm | accuracy % | GAP node tuned |" in table
        and "| csbm | accuracy % | DP-MLP node tuned |" in table
        and "| csbm | accuracy % | GAP node head tuned |" in table
    )
