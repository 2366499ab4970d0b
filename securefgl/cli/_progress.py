"""Progress of ``securefgl run`` on stderr: a setup spinner, one bar per seed with time left, the rounds
seen so far (kept for the results folder on Ctrl-C) and a warning when the training loss diverges."""

from __future__ import annotations

import math
from typing import Any

import typer

__all__ = ["DIVERGENCE_FACTOR", "RunTracker", "fmt_bytes"]


def fmt_bytes(n: float) -> str:
    """``n`` bytes in B/KiB/MiB/GiB."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"


#: A loss this many times its first value (and at least 1 higher) counts as diverging.
DIVERGENCE_FACTOR = 10.0


class RunTracker:
    """Progress on stderr (a setup spinner, then one bar per seed with time left), the rounds seen so far
    (saved on Ctrl-C) and a warning when a seed's training loss diverges."""

    def __init__(self, cfg: Any, *, enabled: bool) -> None:
        self.cfg, self.enabled = cfg, enabled
        self.rounds: dict[int, list[Any]] = {}
        self.first_loss: dict[int, float] = {}
        self.warned: set[int] = set()
        self.bytes = 0
        self.task: Any = None
        self.seed: int | None = None
        self.setup_task: Any = None
        self.progress: Any = None

    def __enter__(self) -> RunTracker:
        if not self.enabled:
            return self
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            SpinnerColumn,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        console = Console(stderr=True)
        cfg = self.cfg
        console.print(
            f"[bold]securefgl run[/]: algorithm [cyan]{cfg.algorithm.name}[/], protocol [cyan]{cfg.protocol.name}[/], "
            f"dataset [cyan]{cfg.dataset.name}[/] ({cfg.partition.method}, {cfg.partition.clients} clients), "
            f"model [cyan]{cfg.model.name}[/], seeds {list(cfg.seeds)}",
            highlight=False,
        )
        self.progress = Progress(
            SpinnerColumn(),
            TextColumn("[bold blue]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("loss {task.fields[loss]}"),
            TextColumn("val acc {task.fields[val]}"),
            TextColumn("{task.fields[bytes]}"),
            TimeElapsedColumn(),
            TextColumn("left"),
            TimeRemainingColumn(),
            console=console,
            transient=False,
        )
        self.progress.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.progress is not None:
            self.progress.__exit__(*exc)

    def setup(self, seed: int) -> None:
        if self.progress is not None:
            self.setup_task = self.progress.add_task(
                f"seed {seed}: loading data, partitioning, setting up",
                total=None,
                loss="-",
                val="-",
                bytes="",
            )

    def on_seed(self, seed: int, planned: int) -> None:
        self.seed = seed
        self.rounds[seed] = []
        self.bytes = 0
        if self.progress is None:
            return
        if self.setup_task is not None:
            self.progress.remove_task(self.setup_task)
            self.setup_task = None
        self.task = self.progress.add_task(f"seed {seed}", total=planned, loss="-", val="-", bytes="0 B")

    def on_round_start(self, event: Any) -> None:
        """Name the phase and round now running (a long setup round shows what it is doing)."""
        if self.progress is None or self.task is None:
            return
        where = f"{event.phase} {event.round + 1}/{event.num_rounds}" if event.num_rounds > 1 else event.phase
        self.progress.update(self.task, description=f"seed {self.seed} · {where}")

    def rounds_of(self, seed: int) -> list[Any]:
        return list(self.rounds.get(seed, []))

    def on_round(self, seed: int, rec: Any) -> None:
        self.rounds.setdefault(seed, []).append(rec)
        self._watch_loss(seed, rec)
        if self.progress is None or self.task is None:
            return
        self.bytes += rec.total_up + rec.total_down
        fields: dict[str, Any] = {"bytes": fmt_bytes(self.bytes)}
        if not math.isnan(rec.loss):
            fields["loss"] = f"{rec.loss:.3f}"
        if rec.metrics:
            fields["val"] = f"{100 * rec.metrics['val_acc']:.1f}%"
        self.progress.update(self.task, advance=1, **fields)

    def _watch_loss(self, seed: int, rec: Any) -> None:
        loss = rec.loss
        if math.isnan(loss) or seed in self.warned:
            return
        first = self.first_loss.setdefault(seed, loss)
        if loss > DIVERGENCE_FACTOR * first and loss > first + 1.0:
            self.warned.add(seed)
            hint = (
                " With DP the noise on each update shrinks with more clients per round (dp_min_contributors "
                "with them), a smaller model (--model sgc) and fewer rounds; see the README's DP example."
                if getattr(self.cfg.protocol.spec, "dp", False)
                else " Lower --lr."
            )
            msg = (
                f"warning: seed {seed}: the training loss rose from {first:.3g} to {loss:.3g} by round "
                f"{rec.global_round + 1}: the model is diverging.{hint}"
            )
            if self.progress is not None:
                self.progress.console.print(f"[yellow]{msg}[/]", highlight=False)
            else:
                typer.echo(msg, err=True)
