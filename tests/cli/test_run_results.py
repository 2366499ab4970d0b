"""``securefgl run`` never loses results: --output checked first, no overwrite, Ctrl-C and failures saved,
aborted rounds skipped, refused combinations (issue #26, items 2, 7 and 9)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

SMALL = [
    "--rounds",
    "2",
    "--threads",
    "1",
    "--set",
    "dataset.csbm.num_nodes=300",
    "--set",
    "output.plot=false",
]


@pytest.mark.parametrize(
    ("make", "needle"),
    [
        (lambda d: (d / "f.txt").write_text("x") and d / "f.txt", "is an existing file"),
        (lambda d: (d / "f.txt").write_text("x") and d / "f.txt" / "sub", "lies under the file"),
    ],
)
def test_bad_output_is_refused_before_any_work(cli, tmp_path: Path, make, needle: str) -> None:
    out = make(tmp_path)
    res = cli(["run", "--output", str(out), *SMALL])
    res.one_error_line(2, needle, str(out))


@pytest.mark.parametrize(
    "extra",
    [["--no-save", "--output", "x"], ["--no-save", "--overwrite"], ["--no-save", "--set", "output.dir=x"]],
)
def test_conflicting_save_options_are_refused(cli, extra: list[str]) -> None:
    res = cli(["run", *extra, *SMALL])
    res.one_error_line(2, "contradict")


def test_existing_results_are_never_overwritten(cli, tmp_path: Path, data_root) -> None:
    out = tmp_path / "res"
    out.mkdir()
    (out / "metrics.json").write_text("precious")
    res = cli(["run", "--output", str(out), "-q", *SMALL])
    assert res.exit_code == 0, res.output
    assert (out / "metrics.json").read_text() == "precious"
    assert f"writing to {out}-1" in res.stderr
    assert json.loads((tmp_path / "res-1" / "metrics.json").read_text())["status"] == "ok"
    assert str(tmp_path / "res-1") in res.stdout
    forced = cli(["run", "--output", str(out), "--overwrite", "-q", *SMALL])
    assert forced.exit_code == 0, forced.output
    assert json.loads((out / "metrics.json").read_text())["status"] == "ok"
    assert not (out / "INCOMPLETE").exists()


def test_results_line_lists_only_files_written(cli, tmp_path: Path, data_root) -> None:
    res = cli(["run", "--output", str(tmp_path / "r"), *SMALL])
    assert res.exit_code == 0, res.output
    line = next(ln for ln in res.stdout.splitlines() if ln.startswith("results:"))
    assert "metrics.json" in line and "plot.png" not in line


def test_ctrl_c_keeps_finished_seeds_and_marks_the_folder(
    cli, tmp_path: Path, monkeypatch, data_root
) -> None:
    from securefgl.cli import run_cmd

    original = run_cmd._Tracker.on_round

    def interrupt_in_seed_1(self, seed, rec):  # noqa: ANN001, ANN202
        original(self, seed, rec)
        if seed == 1:
            raise KeyboardInterrupt

    monkeypatch.setattr(run_cmd._Tracker, "on_round", interrupt_in_seed_1)
    out = tmp_path / "r"
    res = cli(["run", "--output", str(out), "--seeds", "0,1,2", "-q", *SMALL])
    line = res.one_error_line(130, "interrupted: 1 of 3 seeds finished", str(out))
    assert "INCOMPLETE" in line
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["status"] == "interrupted"
    assert [s["seed"] for s in metrics["seeds"]] == [0, 1]
    assert metrics["seeds"][0]["status"] == "ok" and metrics["seeds"][1]["status"] == "interrupted"
    assert len(metrics["seeds"][1]["rounds"]) == 1
    assert metrics["summary"]["test_acc"]["mean"] > 0
    assert "interrupted" in (out / "INCOMPLETE").read_text()


def test_a_failure_saves_partial_results_in_one_line(cli, tmp_path: Path, monkeypatch, data_root) -> None:
    from securefgl.errors import InvalidMessage
    from securefgl.protocols.secagg import SecAgg

    original = SecAgg.aggregate

    def attacked(self, schema, contributions, **kw):  # noqa: ANN001, ANN003, ANN202
        if kw.get("round_index") == 1:
            raise InvalidMessage()
        return original(self, schema, contributions, **kw)

    monkeypatch.setattr(SecAgg, "aggregate", attacked)
    out = tmp_path / "r"
    res = cli(["run", "--output", str(out), "--seeds", "0", "-q", *SMALL])
    res.one_error_line(6, "invalid message", f"partial results saved in {out}")
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["status"] == "failed" and len(metrics["seeds"][0]["rounds"]) == 1
    assert (out / "INCOMPLETE").is_file()


def test_aborted_rounds_are_skipped_and_recorded(cli, tmp_path: Path, monkeypatch, data_root) -> None:
    from securefgl.errors import ThresholdError
    from securefgl.protocols.secagg import SecAgg

    original = SecAgg.aggregate

    def flaky(self, schema, contributions, **kw):  # noqa: ANN001, ANN003, ANN202
        if kw.get("dropouts") is not None and kw.get("round_index") in (1, 2):
            raise ThresholdError("too few survivors", party="server", phase="unmasking")
        return original(self, schema, contributions, **kw)

    monkeypatch.setattr(SecAgg, "aggregate", flaky)
    out = tmp_path / "r"
    args = ["run", "--output", str(out), "--dropout", "0.1", *SMALL, "--rounds", "4"]
    res = cli([*args, "-q"])
    assert res.exit_code == 0, res.output
    assert "2 round(s) aborted" in res.stderr
    metrics = json.loads((out / "metrics.json").read_text())
    aborted = metrics["seeds"][0]["report"]["aborted_rounds"]
    assert [a["global_round"] for a in aborted] == [1, 2]
    strict = [
        "run",
        "--no-save",
        "--dropout",
        "0.1",
        *SMALL,
        "--rounds",
        "4",
        "--set",
        "train.max_failed_rounds=2",
        "-q",
    ]
    stop = cli(strict)
    stop.one_error_line(6, "2 consecutive rounds aborted (train.max_failed_rounds=2)")


def test_dropout_that_can_never_succeed_is_refused_before_the_run(cli) -> None:
    res = cli(["run", "--dropout", "0.5", "--no-save", *SMALL])
    res.one_error_line(2, "--dropout 0.5", "threshold 6", "--dropout <= 0.40")


@pytest.mark.parametrize(
    ("args", "needles"),
    [
        (["--protocol", "secagg", "--clients", "1"], ["fewer than 2 inputs", "1 client(s)", "plaintext"]),
        (["--protocol", "ckks", "--clients", "1"], ["--protocol ckks", "fewer than 2 inputs"]),
        (
            ["--protocol", "secagg+dp", "--clients", "3", "--set", "protocol.options.dp_min_contributors=5",
             "--set", "protocol.options.dp_epsilon=8", "--set", "protocol.options.dp_clip_norm=1.0"],
            ["fewer than 5 inputs", "3 client(s)", "dp_min_contributors=3"],
        ),
    ],
)  # fmt: skip
def test_rounds_smaller_than_the_smallest_released_sum_are_refused_before_the_run(
    cli, args: list[str], needles: list[str]
) -> None:
    cli(["run", "--no-save", *SMALL, *args]).one_error_line(2, *needles)


def test_protocol_of_an_algorithm_that_never_communicates_is_refused(cli) -> None:
    res = cli(["run", "--algorithm", "centralized", "--protocol", "secagg", "--no-save", *SMALL])
    res.one_error_line(3, "never communicates", "--protocol secagg")


def test_a_diverging_loss_is_warned_once(capsys: pytest.CaptureFixture[str]) -> None:
    from types import SimpleNamespace

    from securefgl.cli.run_cmd import _Tracker

    cfg = SimpleNamespace(protocol=SimpleNamespace(spec=SimpleNamespace(dp=True)))
    tracker = _Tracker(cfg, enabled=False)
    for rnd, loss in enumerate([1.1, 3.0, 9.0, 17.6, 40.0]):
        tracker.on_round(
            0, SimpleNamespace(loss=loss, global_round=rnd, total_up=0, total_down=0, metrics=None)
        )
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and "rose from 1.1 to 17.6 by round 4" in err[0] and "dp_min_contributors" in err[0]


def test_progress_names_the_phase_now_running() -> None:
    from types import SimpleNamespace

    from securefgl.cli._progress import RunTracker
    from securefgl.engine.hooks import RoundStartEvent

    cfg = SimpleNamespace(
        algorithm=SimpleNamespace(name="fedstruct"),
        protocol=SimpleNamespace(name="secagg"),
        dataset=SimpleNamespace(name="csbm"),
        partition=SimpleNamespace(method="louvain", clients=3),
        model=SimpleNamespace(name="gcn"),
        seeds=[4],
    )
    with RunTracker(cfg, enabled=True) as tracker:
        tracker.on_seed(4, 10)
        tracker.on_round_start(RoundStartEvent("setup", 1, 6, 2, 10))
        assert tracker.progress.tasks[tracker.task].description == "seed 4 · setup 2/6"
        tracker.on_round_start(RoundStartEvent("train", 0, 1, 8, 10))
        assert tracker.progress.tasks[tracker.task].description == "seed 4 · train"


def test_default_threads_by_graph_size(monkeypatch: pytest.MonkeyPatch) -> None:
    from securefgl.cli import _threads

    assert _threads.default_threads(_threads.approximate_nodes("Cora")) == 1
    assert _threads.default_threads(_threads.approximate_nodes("csbm", 3000)) == 1
    monkeypatch.setattr(_threads.os, "cpu_count", lambda: 16)
    monkeypatch.setattr(_threads.os, "getloadavg", lambda: (2.0, 0.0, 0.0))
    assert _threads.default_threads(_threads.approximate_nodes("reddit")) == 4
    monkeypatch.setattr(_threads.os, "getloadavg", lambda: (15.4, 0.0, 0.0))
    assert _threads.default_threads(_threads.approximate_nodes("Reddit")) == 1


def test_claim_output_takes_the_next_free_suffix(tmp_path: Path) -> None:
    from securefgl.cli._output import claim_output

    for name in ("r", "r-1"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "metrics.json").write_text("{}")
    (tmp_path / "r-2").mkdir()  # empty: reusable
    assert claim_output(tmp_path / "r") == (tmp_path / "r-2", True)
    assert claim_output(tmp_path / "r", overwrite=True) == (tmp_path / "r", False)
    assert claim_output(tmp_path / "new") == (tmp_path / "new", False)


def test_dp_option_errors_come_before_any_progress_bar(cli) -> None:
    res = cli(["run", "--protocol", "secagg+dp", "--no-save", *SMALL])
    res.one_error_line(2, "min_contributors", "--set protocol.options.dp_min_contributors=9")
