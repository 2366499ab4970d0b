"""A deployed run over all its seeds, written to the same results folder as ``securefgl run``."""

from __future__ import annotations

import sys
from pathlib import Path

from securefgl.config import RunConfig
from securefgl.deploy.server import DeployedRun, Transport
from securefgl.engine.hooks import RunHooks
from securefgl.engine.metrics import mean_std
from securefgl.engine.records import SeedResult
from securefgl.engine.results import write_results
from securefgl.errors import SecureFGLError

__all__ = ["run_deployed"]


class _Progress:
    """Progress lines to stderr and, when given, appended to ``path`` (``securefgl deploy`` follows that file)."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)

    def __call__(self, message: str) -> None:
        line = f"[securefgl deploy] {message}"
        print(line, file=sys.stderr, flush=True)
        if self.path is not None:
            with self.path.open("a", encoding="utf-8") as f:
                f.write(line + "\n")


def _progress_hooks(seed: int, say: _Progress) -> RunHooks:
    def on_round(ev: object) -> None:
        rec = ev.record  # type: ignore[attr-defined]
        metrics = rec.metrics or {}
        acc = f" val_acc={metrics['val_acc']:.4f}" if "val_acc" in metrics else ""
        drop = f" dropped={sorted(rec.dropped)}" if rec.dropped else ""
        say(f"seed {seed} round {ev.done}/{ev.total} ({rec.phase}) loss={rec.loss:.4f}{acc}{drop}")  # type: ignore[attr-defined]

    return RunHooks(on_round=on_round)


def run_deployed(
    config: RunConfig, transport: Transport, out_dir: Path | None, rejoin_timeout: float | None = None
) -> list[SeedResult]:
    """Run every seed of ``config`` with the clients behind ``transport``; write ``out_dir`` (if given).

    ``rejoin_timeout``: seconds a round waits for a client that left to answer again (default: a stage's wait).

    Raises:
        SecureFGLError: a seed failed; the results folder holds the seeds so far with status ``failed``.
    """
    say = _Progress(out_dir / "progress.log" if out_dir is not None else None)
    done: list[SeedResult] = []
    extra: dict[str, object] = {"device": "cpu", "deployment": "flower"}
    for seed in config.seeds:
        run = DeployedRun(config, seed, transport, _progress_hooks(seed, say), say)
        run.rejoin_timeout = rejoin_timeout
        try:
            done.append(run.execute())
        except SecureFGLError as exc:
            if out_dir is not None:
                write_results(
                    out_dir,
                    config,
                    done,
                    mean_std([s.summary() for s in done if s.final is not None] or [{}]),
                    status="failed",
                    error=f"seed {seed}: {type(exc).__name__}: {exc}",
                    extra=extra,
                    plot=False,
                )
            raise
        extra["graph"] = {
            "name": run.fed.name,
            "num_nodes": run.fed.num_nodes,
            "num_clients": run.fed.num_clients,
        }
        # Bytes of our frames as handed to Flower (protocol messages, broadcasts, framing), per client.
        wire = extra.setdefault("wire_bytes", {})
        assert isinstance(wire, dict)
        wire[str(seed)] = {
            "up": {str(c): n for c, n in sorted(run.wire_up.items())},
            "down": {str(c): n for c, n in sorted(run.wire_down.items())},
            "rounds": len(run.result.rounds),
        }
    say(f"all {len(done)} seed(s) finished")
    if out_dir is not None:
        summary = mean_std([s.summary() for s in done]) if done else {}
        write_results(out_dir, config, done, summary, extra=extra, plot=config.output.plot)
    return done
