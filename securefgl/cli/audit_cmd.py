"""``securefgl audit``: run a federated job under each protocol and measure what each adversary recovers.

The command body only builds an :class:`~securefgl.attacks.audit.AuditConfig` and calls
:func:`securefgl.attacks.audit`; the report (``audit.json``, ``summary.md``, figures) lands in ``--output``.
"""

from __future__ import annotations

import contextlib
import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from securefgl.cli._app import app
from securefgl.cli._console import stdout_console
from securefgl.cli._names import names, unknown_name
from securefgl.cli._output import check_output
from securefgl.errors import ConfigError, SecureFGLError

__all__ = ["audit_command"]


def _csv(text: str | None, what: str) -> tuple[str, ...]:
    if text is None:
        return ()
    items = tuple(s.strip() for s in text.split(",") if s.strip())
    if not items:
        raise ConfigError(f"--{what} needs at least one name, got {text!r}")
    return items


def _attack_names() -> str:
    return names("attack")


@app.command("audit")
def audit_command(
    algorithm: Annotated[
        str | None, typer.Option(help="Algorithm to audit. (default: fedavg; gap with --privacy)")
    ] = None,
    model: Annotated[str, typer.Option(help="Model architecture.")] = "sgc",
    dataset: Annotated[str, typer.Option(help="Dataset (or csbm).")] = "Cora",
    clients: Annotated[int, typer.Option(help="Number of clients.")] = 10,
    attack: Annotated[
        str, typer.Option(help=f"Comma-separated attacks: {_attack_names()}.")
    ] = "gradient-inversion,label,link-stealing",
    protocol: Annotated[str, typer.Option(help="Comma-separated protocols.")] = "plaintext,secagg,secagg+dp",
    view: Annotated[
        str, typer.Option(help="Comma-separated adversaries: server, client, collusion.")
    ] = "server",
    trials: Annotated[int, typer.Option(help="Targets / seeds per attack (mean ± std).")] = 5,
    seed: Annotated[int, typer.Option(help="Training and attack seed.")] = 0,
    rounds: Annotated[
        int | None, typer.Option(help="Rounds of the federated job (0: the run config's). (default: 20)")
    ] = 20,
    restarts: Annotated[int, typer.Option(help="Gradient-inversion random restarts (scales its cost).")] = 1,
    iterations: Annotated[int, typer.Option(help="Gradient-inversion iterations per restart.")] = 25,
    imprint_rounds: Annotated[
        int, typer.Option(help="Crafted rounds of the malicious-model attack (bins = rounds x (hidden-1)).")
    ] = 64,
    split: Annotated[
        str | None, typer.Option(help="Node split: 'public' or ratios like 0.2,0.4,0.4. (default: the run's)")
    ] = None,
    graph_known: Annotated[
        bool, typer.Option("--graph-known", help="Grant the adversary the targets' graph structure.")
    ] = False,
    output: Annotated[
        Path | None, typer.Option(help="Report folder (audit.json, summary.md, figures).")
    ] = None,
    device: Annotated[str, typer.Option(help="cpu, cuda or auto.")] = "cpu",
    threads: Annotated[
        int | None,
        typer.Option(
            help="CPU threads for tensor operations. (default: 1 for graphs under 20,000 nodes, whose small "
            "operations only slow down with more; for larger graphs the idle cores, at most 4)"
        ),
    ] = None,
    root: Annotated[
        str | None,
        typer.Option(
            "--root",
            help="Data root holding the datasets' raw files (default: $SECUREFGL_DATA, else "
            "~/.cache/securefgl/data; fill it with `securefgl datasets import DIR`).",
        ),
    ] = None,
    set_: Annotated[
        list[str] | None,
        typer.Option(
            "--set", help="Any run setting as section.key=value (repeatable), e.g. train.optimizer=sgd."
        ),
    ] = None,
    privacy: Annotated[
        str | None,
        typer.Option(
            help="Audit GAP with differential privacy of this unit: node, edge or none (GAP without noise); "
            "sets --algorithm gap."
        ),
    ] = None,
    epsilon: Annotated[
        float | None,
        typer.Option(help="GAP's target epsilon of the run (inf: no noise). (default: GAP's, 8)"),
    ] = None,
    delta: Annotated[
        float | None, typer.Option(help="GAP's target delta. (default: GAP's, 1/(10 N) for N nodes)")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the result as JSON on stdout.")] = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress bars.")] = False,
) -> None:
    """Audit what an adversary recovers from a run, under each protocol, against chance and public baselines.

    Progress goes to stderr (also with --json), so redirected output holds only the report.
    """
    try:
        _audit(locals())
    except SecureFGLError as exc:
        if as_json:
            typer.echo(
                json.dumps({"error": str(exc), "type": type(exc).__name__, "exit_code": exc.exit_code})
            )
            raise typer.Exit(exc.exit_code) from None
        raise


def _audit(o: dict[str, Any]) -> None:
    if o["threads"] is not None and o["threads"] < 1:
        raise ConfigError(f"--threads must be >= 1, got {o['threads']}")
    if o["output"] is not None:
        check_output(o["output"])
    o["algorithm"] = _algorithm(o)
    for kind, key in (("algorithm", "algorithm"), ("model", "model"), ("dataset", "dataset")):
        if (msg := unknown_name(kind, o[key])) is not None:
            raise ConfigError(f"--{key}: {msg}")
    from securefgl.attacks import AuditConfig, InversionConfig, audit
    from securefgl.config import merge, parse_overrides

    run: dict[str, Any] = {}
    if o["split"] is not None:
        split: Any = o["split"]
        if split != "public":
            try:
                split = [float(v) for v in split.split(",")]
            except ValueError:
                raise ConfigError(f"--split must be 'public' or three ratios, got {o['split']!r}") from None
        run = {"partition": {"split": split}}
    if o["root"] is not None:
        run = merge(run, {"dataset": {"root": o["root"]}})
    threads = o["threads"]
    if threads is None:
        from securefgl.cli._threads import approximate_nodes, default_threads

        threads = default_threads(approximate_nodes(o["dataset"]))
    import torch

    torch.set_num_threads(threads)
    run = merge(run, {"threads": threads})
    if o["set_"]:
        run = merge(run, parse_overrides(o["set_"]))
    cfg = AuditConfig(
        algorithm=o["algorithm"],
        model=o["model"],
        dataset=o["dataset"],
        clients=o["clients"],
        attacks=_csv(o["attack"], "attack"),
        protocols=_csv(o["protocol"], "protocol"),
        views=_csv(o["view"], "view"),
        trials=o["trials"],
        seed=o["seed"],
        rounds=o["rounds"] or None,
        inversion=InversionConfig(restarts=o["restarts"], iterations=o["iterations"]),
        imprint_rounds=o["imprint_rounds"],
        graph_known=o["graph_known"],
        run=run,
        output=str(o["output"]) if o["output"] is not None else None,
        device=o["device"],
        progress=not (o["quiet"] or o["as_json"]),
        privacy=o["privacy"],
        epsilon=o["epsilon"],
        delta=o["delta"],
    )
    with contextlib.redirect_stdout(sys.stderr):  # the audit's progress bars: stdout holds only the report
        result = audit(cfg)
    if o["as_json"]:
        typer.echo(result.to_json())
        return
    _print(result)


def _algorithm(o: dict[str, Any]) -> str:
    """``--algorithm``, or ``gap`` when ``--privacy``/``--epsilon``/``--delta`` ask for GAP's DP.

    Raises:
        ConfigError: a DP option with another algorithm (naming both).
    """
    given = [f"--{k} {o[k]}" for k in ("privacy", "epsilon", "delta") if o[k] is not None]
    if not given:
        return o["algorithm"] or "fedavg"
    if o["algorithm"] not in (None, "gap"):
        raise ConfigError(
            f"{' '.join(given)} is differential privacy of algorithm gap (node-/edge-level DP); "
            f"--algorithm {o['algorithm']} has no such option: drop --algorithm or use --algorithm gap"
        )
    return "gap"


def _privacy_lines(result: Any) -> list[str]:
    """One line per protocol whose run stated an algorithm-level privacy guarantee (GAP's)."""
    out = []
    for protocol, facts in result.runs.items():
        st = facts.get("algorithm_privacy")
        if not st:
            continue
        eps = st.get("epsilon")
        if st.get("unit") == "none" or eps is None:
            out.append(
                f"privacy ({protocol}): no differential privacy (unit {st.get('unit')}, epsilon infinite)"
            )
            continue
        out.append(
            f"privacy ({protocol}): {st.get('unit')}-level DP, epsilon {eps:.3g} at delta {st.get('delta'):.3g} "
            f"({st.get('accountant')}), noise multiplier {st.get('noise_multiplier', 0.0):.4g}"
        )
    return out


def _print(result: Any) -> None:
    from rich.table import Table

    table = Table(title="privacy audit")
    for col in ("attack", "protocol", "view", "metric", "value", "baselines"):
        table.add_column(col)
    for r in result.table():
        if r["status"] != "ok":
            table.add_row(
                r["attack"],
                r["protocol"],
                r["view"],
                "—",
                r["status"].replace("_", " "),
                (r["reason"] or "")[:80],
            )
            continue
        value = f"{r['mean']:.3f} ± {r['std']:.3f}" if r["mean"] is not None else "n/a"
        bl = ", ".join(f"{k} {v:.3f}" for k, v in r["baselines"].items() if v is not None)
        table.add_row(r["attack"], r["protocol"], r["view"], r["metric"], value, bl)
    console = stdout_console()  # logs and pipes get full rows
    console.print(table)
    for line in _privacy_lines(result):
        console.print(line)
    if result.output_dir is not None:
        console.print(f"report: {result.output_dir / 'summary.md'}")
