"""Progress lines for the long reproduction scripts, through the engine's :class:`~securefgl.engine.hooks.RunHooks`.

A reproduction runs many seeds of many cells; :class:`Progress` knows how many runs the script will make and
prints a line when each run starts (``on_round_start``; a first round can be long: FedLoG's prompt pretraining
takes minutes) and, through each run's ``on_round`` hook, the rounds done in that run, the runs done in the
script, and an estimate of the time left for the run and for the whole script. The time per round is measured
from the end of the first round seen, so that a slow first round (setup, warm-up) does not inflate the
estimate for the rest (100 FedLoG rounds of 3 s after a 13-minute first one were "22h left")::

    progress = Progress(total_runs=len(cells) * len(seeds))
    for ...:
        res = run_seed(cfg, fg, seed, device, hooks=progress.hooks("chameleon/louvain secagg seed 0"))

The hook only observes (it never changes a run). Lines go to stderr, at most one every ``every_s`` seconds per
run plus one at the start and one at the end of each run, so that a script's stdout (its tables) stays clean. Nothing here imports
torch: the engine's hook class is imported when :meth:`Progress.hooks` is first called.
"""

from __future__ import annotations

import sys
import time
from typing import IO, Any

__all__ = ["Progress", "format_seconds"]


def format_seconds(seconds: float) -> str:
    """``75`` -> ``"1m15s"``, ``3725`` -> ``"1h02m"``, ``9`` -> ``"9s"``."""
    s = max(0, int(round(seconds)))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{(s % 3600) // 60:02d}m"


class Progress:
    """Rounds done and time left, for a script that makes ``total_runs`` runs.

    Args:
        total_runs: How many runs (seeds x cells x protocols) the script will make; ``0`` if unknown.
        every_s: The least number of seconds between two lines of one run.
        stream: Where lines go. (default: ``sys.stderr``)
        clock: The clock (tests pass a fake one). (default: ``time.perf_counter``)
    """

    def __init__(
        self,
        total_runs: int = 0,
        every_s: float = 30.0,
        stream: IO[str] | None = None,
        clock: Any = time.perf_counter,
    ) -> None:
        self.total_runs = int(total_runs)
        self.every_s = float(every_s)
        self.stream = stream
        self.clock = clock
        self.runs_done = 0
        self.run_seconds: list[float] = []
        self.lines: list[str] = []
        self._open: list[float] | None = None  # [start, elapsed] of a run not yet counted as done

    def _emit(self, line: str) -> None:
        self.lines.append(line)
        print(line, file=self.stream or sys.stderr, flush=True)

    def script_left(self, current_left: float, in_run: bool = True) -> float | None:
        """Seconds left in the script: ``current_left`` of the run in progress (``in_run``) plus the runs not yet
        started at the mean run time so far; ``None`` while no run has finished or the total is unknown."""
        if not self.total_runs:
            return None
        later = max(0, self.total_runs - self.runs_done - (1 if in_run else 0))
        if not later:
            return current_left
        if not self.run_seconds:
            return None
        return current_left + later * sum(self.run_seconds) / len(self.run_seconds)

    def hooks(self, label: str) -> Any:
        """The :class:`~securefgl.engine.hooks.RunHooks` of one run named ``label`` (call once per run)."""
        from securefgl.engine.hooks import RunHooks

        if self._open is not None:  # the previous run stopped early (early stopping): count it now
            self.run_seconds.append(self._open[1])
            self.runs_done += 1
        t0 = self.clock()
        last = [t0]
        first: list[tuple[int, float]] = []  # (rounds done, elapsed) at the first round end seen
        self._open = [t0, 0.0]

        def runs() -> str:
            run_no = self.runs_done + 1
            return f"run {run_no}/{self.total_runs}" if self.total_runs else f"run {run_no}"

        def on_round_start(event: Any) -> None:
            if int(event.done) == 0:
                self._emit(f"  [{label}] {runs()}: started ({int(event.total)} rounds)")

        def on_round(event: Any) -> None:
            now = self.clock()
            done, total = int(event.done), int(event.total)
            finished = done >= total
            elapsed = now - t0
            self._open = None if finished else [t0, elapsed]
            if not first:
                first.append((done, elapsed))
            if not finished and now - last[0] < self.every_s:
                return
            last[0] = now
            done0, elapsed0 = first[0]
            per_round = (elapsed - elapsed0) / (done - done0) if done > done0 else elapsed / max(done, 1)
            left = per_round * max(total - done, 0)
            runs_text = runs()
            line = f"  [{label}] {runs_text}: round {done}/{total}, {format_seconds(elapsed)} elapsed"
            if finished:
                self.run_seconds.append(elapsed)
                self.runs_done += 1
                rest = self.script_left(0.0, in_run=False)
                line += (
                    " (run done" + ("" if rest is None else f"; script ~{format_seconds(rest)} left") + ")"
                )
            else:
                rest = self.script_left(left)
                line += f", ~{format_seconds(left)} left in this run"
                if rest is not None and self.total_runs > 1:
                    line += f", ~{format_seconds(rest)} in the script"
            self._emit(line)

        return RunHooks(on_round_start=on_round_start, on_round=on_round)
