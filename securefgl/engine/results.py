"""The results folder of a run: resolved config, ``metrics.json``, per-client CSV and a PNG plot.

Layout::

    <dir>/config.toml     the resolved RunConfig (re-runnable with ``securefgl run --config``)
    <dir>/metrics.json    status, per-seed round records and final metrics, mean/std over seeds, and the
                          library versions and securefgl commit it ran with (``libraries``)
    <dir>/clients.csv     one row per (seed, client): final val/test accuracy and F1, minority accuracy,
                          bytes up and down
    <dir>/plot.png        validation/test accuracy and cumulative communication against rounds
    <dir>/INCOMPLETE      present only while a run is unfinished, failed or was interrupted: why

A run that fails part-way still writes these with ``"status": "failed"`` (``"interrupted"`` after Ctrl-C,
``"running"`` between seeds) and the seeds and rounds it completed; the ``INCOMPLETE`` marker says so
to anyone listing the folder, and a finished run removes it.
"""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

from securefgl.config import save_config
from securefgl.provenance import library_versions

if TYPE_CHECKING:
    from securefgl.config import RunConfig
    from securefgl.engine.runner import SeedResult

__all__ = ["INCOMPLETE_MARKER", "RESULT_FILES", "result_files", "write_results"]

#: The marker file of a results folder whose run did not finish.
INCOMPLETE_MARKER = "INCOMPLETE"

#: The files a results folder can hold, in the order they are listed to the user.
RESULT_FILES = ("config.toml", "metrics.json", "clients.csv", "plot.png", INCOMPLETE_MARKER)


def _jsonable(obj: Any) -> Any:
    if isinstance(obj, float):
        return None if math.isnan(obj) or math.isinf(obj) else obj
    if isinstance(obj, dict):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_jsonable(v) for v in obj]
    return obj


def write_results(
    out_dir: Path,
    config: RunConfig,
    seeds: list[SeedResult],
    summary: dict[str, dict[str, float]],
    *,
    status: str = "ok",
    error: str | None = None,
    extra: dict[str, Any] | None = None,
    plot: bool = True,
) -> Path:
    """Write (or overwrite) the results folder and return it.

    A ``status`` other than ``"ok"`` also writes the ``INCOMPLETE`` marker (status and error); ``"ok"``
    removes it.
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    save_config(config, out_dir / "config.toml")
    payload = {
        "status": status,
        "error": error,
        **(extra or {}),
        "libraries": library_versions(),
        "summary": summary,
        "seeds": [s.to_dict() for s in seeds],
    }
    (out_dir / "metrics.json").write_text(json.dumps(_jsonable(payload), indent=2) + "\n", encoding="utf-8")
    _write_csv(out_dir / "clients.csv", seeds)
    if plot and any(s.rounds for s in seeds):
        _plot(out_dir / "plot.png", seeds)
    marker = out_dir / INCOMPLETE_MARKER
    if status == "ok":
        marker.unlink(missing_ok=True)
    else:
        marker.write_text(f"status: {status}\n" + (f"error: {error}\n" if error else ""), encoding="utf-8")
    return out_dir


def result_files(out_dir: Path) -> list[str]:
    """The names of the result files present in ``out_dir``, in :data:`RESULT_FILES` order."""
    return [name for name in RESULT_FILES if (out_dir / name).is_file()]


def _write_csv(path: Path, seeds: list[SeedResult]) -> None:
    rows = []
    for s in seeds:
        traffic = s.client_bytes()
        if s.final is None:
            continue
        for cm in s.final.per_client:
            up, down = traffic.get(cm.client, (0, 0))
            rows.append({"seed": s.seed, **cm.row(), "bytes_up": up, "bytes_down": down})
    fields = list(rows[0]) if rows else ["seed", "client"]
    with path.open("w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=fields)
        writer.writeheader()
        writer.writerows(rows)


def _plot(path: Path, seeds: list[SeedResult]) -> None:
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    fig, (ax_acc, ax_com) = plt.subplots(1, 2, figsize=(10, 4))
    for s in seeds:
        xs = [r.global_round + 1 for r in s.rounds if r.metrics]
        for key, style in (("val_acc", "--"), ("test_acc", "-")):
            ys = [100 * r.metrics[key] for r in s.rounds if r.metrics]
            if xs:
                ax_acc.plot(xs, ys, style, label=f"seed {s.seed} {key.replace('_acc', '')}")
        total, cum, rx = 0, [], []
        for r in s.rounds:
            total += r.total_up + r.total_down
            cum.append(total / 2**20)
            rx.append(r.global_round + 1)
        ax_com.plot(rx, cum, label=f"seed {s.seed}")
    ax_acc.set_xlabel("round")
    ax_acc.set_ylabel("accuracy (%)")
    ax_acc.set_title("accuracy (node-weighted over clients)")
    ax_acc.legend(fontsize=7)
    ax_com.set_xlabel("round")
    ax_com.set_ylabel("MiB (up + down, all clients)")
    ax_com.set_title("cumulative communication")
    ax_com.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
