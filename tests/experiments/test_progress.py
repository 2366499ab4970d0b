"""securefgl.experiments.progress: progress lines through the engine's run hooks."""

from __future__ import annotations

import io
from types import SimpleNamespace

from securefgl.engine.hooks import RunHooks
from securefgl.experiments.progress import Progress, format_seconds


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def _round(done: int, total: int) -> SimpleNamespace:
    return SimpleNamespace(done=done, total=total)


def test_format_seconds() -> None:
    assert format_seconds(9) == "9s"
    assert format_seconds(75) == "1m15s"
    assert format_seconds(3725) == "1h02m"
    assert format_seconds(-3) == "0s"


def test_lines_show_rounds_done_and_time_left() -> None:
    clock, out = Clock(), io.StringIO()
    progress = Progress(total_runs=2, every_s=10, stream=out, clock=clock)
    hooks = progress.hooks("cora seed 0")
    assert isinstance(hooks, RunHooks)
    for done in range(1, 11):
        clock.t = 5.0 * done  # 5 s per round
        hooks.round(_round(done, 10))
    # one line every 10 s (rounds 2, 4, 6, 8), then the end of the run
    assert len(progress.lines) == 5
    assert "run 1/2: round 2/10, 10s elapsed, ~40s left in this run" in progress.lines[0]
    assert progress.lines[-1].endswith("(run done; script ~50s left)")
    assert out.getvalue().count("\n") == 5
    hooks = progress.hooks("cora seed 1")
    clock.t = 50.0 + 20.0
    hooks.round(_round(4, 10))
    assert "run 2/2: round 4/10, 20s elapsed, ~30s left in this run, ~30s in the script" in progress.lines[-1]


def test_a_run_ended_early_still_counts() -> None:
    clock = Clock()
    progress = Progress(total_runs=3, every_s=1000, stream=io.StringIO(), clock=clock)
    hooks = progress.hooks("a")
    clock.t = 30.0
    hooks.round(_round(3, 10))  # early stopping: the run never reaches round 10
    progress.hooks("b")
    assert progress.runs_done == 1
    assert progress.run_seconds == [30.0]
    assert progress.script_left(0.0) == 30.0  # the third run at the mean run time


def test_unknown_total() -> None:
    clock = Clock()
    progress = Progress(stream=io.StringIO(), clock=clock)
    hooks = progress.hooks("x")
    clock.t = 2.0
    hooks.round(_round(1, 1))
    assert progress.lines == ["  [x] run 1: round 1/1, 2s elapsed (run done)"]


def test_a_run_says_when_it_starts() -> None:
    """A first round can take minutes (FedLoG's prompt pretraining): the run's start is printed at once."""
    progress = Progress(total_runs=2, every_s=30, stream=io.StringIO(), clock=Clock())
    hooks = progress.hooks("cora metis+ secagg seed 0")
    hooks.round_start(SimpleNamespace(phase="train", round=0, num_rounds=100, done=0, total=100))
    hooks.round_start(SimpleNamespace(phase="train", round=1, num_rounds=100, done=1, total=100))
    assert progress.lines == ["  [cora metis+ secagg seed 0] run 1/2: started (100 rounds)"]


def test_a_slow_first_round_does_not_inflate_the_time_left() -> None:
    """The time per round is measured after the first round: 3 s rounds after a 13-minute first one leave
    about 3 s a round, not the mean (which printed "22h left" on FedLoG)."""
    clock = Clock()
    progress = Progress(total_runs=1, every_s=30, stream=io.StringIO(), clock=clock)
    hooks = progress.hooks("fedlog")
    clock.t = 816.0  # round 1: 13m36s
    hooks.round(_round(1, 100))
    assert "~22h26m left" in progress.lines[-1]  # one round seen: nothing better to go by
    for done in range(2, 12):
        clock.t = 816.0 + 3.0 * (done - 1)
        hooks.round(_round(done, 100))
    assert "round 11/100, 14m06s elapsed, ~4m27s left in this run" in progress.lines[-1]
