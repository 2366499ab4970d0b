"""``securefgl run``: train an algorithm under a secure-aggregation protocol and report the results.

With no option besides ``--protocol secagg`` it runs FedAvg on the embedded synthetic graph (a small
contextual SBM split among 10 clients) and finishes in seconds. Options override the config file
(``--config``), which overrides the defaults; ``--set section.key=value`` reaches any other setting.
The command body only builds the config and calls :func:`securefgl.run`.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from securefgl.cli._app import app
from securefgl.errors import ConfigError, SecureFGLError

__all__ = ["run_command"]


def _names(kind: str) -> str:
    try:
        if kind == "protocol":
            from securefgl.protocols.registry import available_protocols

            return ", ".join(available_protocols())
        if kind == "algorithm":
            from securefgl.algorithms.registry import available_algorithms

            return ", ".join(available_algorithms())
        if kind == "model":
            from securefgl.nn.registry import available_models

            return ", ".join(available_models())
        if kind == "dataset":
            from securefgl.data import dataset_names

            return ", ".join(dataset_names())
        if kind == "partition":
            from securefgl.data import partition_methods

            return ", ".join(partition_methods())
        if kind == "preset":
            from securefgl.algorithms.presets import preset_names

            return ", ".join(preset_names())
    except Exception:  # help text must never crash
        return "see the documentation"
    return ""


def _parse_seeds(text: str) -> list[int]:
    try:
        seeds = [int(s) for s in text.replace(" ", "").split(",") if s]
    except ValueError:
        raise ConfigError(f"--seeds must be comma-separated integers like 0,1,2, got {text!r}") from None
    if not seeds:
        raise ConfigError("--seeds needs at least one seed")
    return seeds


def _build_overrides(**opts: Any) -> dict[str, Any]:
    o: dict[str, Any] = {}

    def put(section: str, key: str, value: Any) -> None:
        if value is not None:
            o.setdefault(section, {})[key] = value

    put("protocol", "name", opts["protocol"])
    put("protocol", "dropout", opts["dropout"])
    put("algorithm", "name", opts["algorithm"])
    put("dataset", "name", opts["dataset"])
    put("partition", "method", opts["partition"])
    put("partition", "clients", opts["clients"])
    put("partition", "split", opts["split"])
    put("model", "name", opts["model"])
    put("model", "hidden", opts["hidden"])
    put("train", "rounds", opts["rounds"])
    put("train", "local_epochs", opts["local_epochs"])
    put("train", "lr", opts["lr"])
    put("train", "client_fraction", opts["client_fraction"])
    put("output", "dir", opts["output"])
    if opts["seeds"] is not None:
        o["seeds"] = _parse_seeds(opts["seeds"])
    if opts["device"] is not None:
        o["device"] = opts["device"]
    if opts["threads"] is not None:
        o["threads"] = opts["threads"]
    return o


@app.command("run")
def run_command(
    protocol: Annotated[
        str | None, typer.Option(help=f"Secure-sum protocol: {_names('protocol')}. (default: secagg)")
    ] = None,
    algorithm: Annotated[
        str | None, typer.Option(help=f"Algorithm: {_names('algorithm')}. (default: fedavg)")
    ] = None,
    dataset: Annotated[
        str | None, typer.Option(help=f"Dataset: {_names('dataset')}. (default: csbm)")
    ] = None,
    partition: Annotated[
        str | None, typer.Option(help=f"Partition method: {_names('partition')}. (default: louvain)")
    ] = None,
    clients: Annotated[int | None, typer.Option(help="Number of clients K. (default: 10)")] = None,
    preset: Annotated[
        str | None,
        typer.Option(
            help=f"Named paper settings: {_names('preset')}. opfgl-paper picks them by --dataset and "
            "--partition (louvain+ or metis+). A config file, options and --set win over the preset."
        ),
    ] = None,
    rounds: Annotated[int | None, typer.Option(help="Communication rounds. (default: 50)")] = None,
    local_epochs: Annotated[
        int | None, typer.Option("--local-epochs", help="Local epochs per round. (default: 3)")
    ] = None,
    lr: Annotated[float | None, typer.Option(help="Learning rate. (default: 0.01)")] = None,
    client_fraction: Annotated[
        float | None, typer.Option("--client-fraction", help="Fraction of clients per round. (default: 1.0)")
    ] = None,
    seeds: Annotated[
        str | None, typer.Option(help="Comma-separated training seeds, e.g. 0,1,2. (default: 0)")
    ] = None,
    config: Annotated[
        Path | None, typer.Option("--config", help="Run config file (TOML/YAML/JSON); options override it.")
    ] = None,
    device: Annotated[str | None, typer.Option(help="auto, cpu, cuda or cuda:<i>. (default: auto)")] = None,
    threads: Annotated[
        int | None,
        typer.Option(
            help="CPU threads for tensor operations; 1 is often fastest on a busy machine. (default: torch's)"
        ),
    ] = None,
    dropout: Annotated[
        float | None,
        typer.Option(
            help="Fraction of each round's clients that drop out at a random protocol phase. (default: 0)"
        ),
    ] = None,
    model: Annotated[str | None, typer.Option(help=f"Model: {_names('model')}. (default: gcn)")] = None,
    hidden: Annotated[int | None, typer.Option(help="Hidden width. (default: 64)")] = None,
    split: Annotated[
        str | None, typer.Option(help="Node split: 'public' or train,val,test ratios like 0.2,0.4,0.4.")
    ] = None,
    output: Annotated[
        Path | None,
        typer.Option(help="Results folder. (default: ./results/<time>-<algorithm>-<protocol>-<dataset>)"),
    ] = None,
    no_save: Annotated[bool, typer.Option("--no-save", help="Do not write a results folder.")] = False,
    set_: Annotated[
        list[str] | None,
        typer.Option(
            "--set", help="Any other setting as section.key=value (repeatable), e.g. train.patience=10."
        ),
    ] = None,
    quiet: Annotated[
        bool, typer.Option("--quiet", "-q", help="No progress bar or table; one summary line.")
    ] = False,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print the result as JSON on stdout (for pipelines).")
    ] = False,
) -> None:
    """Train an algorithm where the server only sees sums, and report accuracy, F1, bytes and time.

    With only --protocol secagg it runs FedAvg on a small synthetic graph (10 clients) in seconds.
    """
    try:
        _run(locals())
    except SecureFGLError as exc:
        if as_json:
            typer.echo(
                json.dumps({"error": str(exc), "type": type(exc).__name__, "exit_code": exc.exit_code})
            )
            raise typer.Exit(exc.exit_code) from None
        raise


def _run(opts: dict[str, Any]) -> None:
    from securefgl.config import load_run_config, merge, parse_overrides

    split = opts["split"]
    if split is not None and split != "public":
        try:
            split = [float(v) for v in split.split(",")]
        except ValueError:
            raise ConfigError(
                f"--split must be 'public' or three ratios like 0.2,0.4,0.4, got {split!r}"
            ) from None
    overrides = _build_overrides(
        protocol=opts["protocol"],
        dropout=opts["dropout"],
        algorithm=opts["algorithm"],
        dataset=opts["dataset"],
        partition=opts["partition"],
        clients=opts["clients"],
        split=split,
        model=opts["model"],
        hidden=opts["hidden"],
        rounds=opts["rounds"],
        local_epochs=opts["local_epochs"],
        lr=opts["lr"],
        client_fraction=opts["client_fraction"],
        output=str(opts["output"]) if opts["output"] is not None else None,
        seeds=opts["seeds"],
        device=opts["device"],
        threads=opts["threads"],
    )
    if opts["set_"]:
        overrides = merge(overrides, parse_overrides(opts["set_"]))
    if opts["no_save"]:
        overrides = merge(overrides, {"output": {"save": False}})
    base = None
    if opts["preset"] is not None:
        from securefgl.algorithms.presets import resolve_preset

        base = resolve_preset(opts["preset"], dataset=opts["dataset"], partition=opts["partition"])
    cfg = load_run_config(opts["config"], overrides, base=base)
    from securefgl.algorithms.registry import check_combination

    check_combination(  # before any output: a bad combination is one error line
        cfg.algorithm.name,
        cfg.protocol.name,
        cfg.model.name,
        cfg.dataset.name,
        options=cfg.algorithm.options,
        num_clients=cfg.partition.clients,
        dropout=cfg.protocol.dropout,
    )

    import securefgl
    from securefgl.training.device import tune_cpu_allocator

    tune_cpu_allocator()  # large batched-training buffers: avoid a page fault storm per epoch (Linux glibc)
    quiet, as_json = opts["quiet"], opts["as_json"]
    if quiet or as_json:
        result = securefgl.run(cfg)
    else:
        result = _run_with_progress(cfg)
    if as_json:
        typer.echo(json.dumps(_json_summary(result), indent=2))
    elif quiet:
        acc, acc_sd = result.metric("test_acc")
        f1, f1_sd = result.metric("test_f1")
        typer.echo(
            f"test acc {100 * acc:.2f} ± {100 * acc_sd:.2f}  test F1 {100 * f1:.2f} ± {100 * f1_sd:.2f}"
            f"  results: {result.output_dir or '(not saved)'}"
        )
    else:
        _print_table(result)


def _json_summary(result: Any) -> dict[str, Any]:
    def clean(v: Any) -> Any:
        if isinstance(v, float) and (math.isnan(v) or math.isinf(v)):
            return None
        if isinstance(v, dict):
            return {k: clean(x) for k, x in v.items()}
        if isinstance(v, list):
            return [clean(x) for x in v]
        return v

    d = result.to_dict()
    d["seeds"] = [{k: v for k, v in s.items() if k != "rounds"} for s in d["seeds"]]
    return clean(d)


def _fmt_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"


def _run_with_progress(cfg: Any) -> Any:
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    import securefgl

    console = Console(stderr=True)
    console.print(
        f"[bold]securefgl run[/]: algorithm [cyan]{cfg.algorithm.name}[/], protocol [cyan]{cfg.protocol.name}[/], "
        f"dataset [cyan]{cfg.dataset.name}[/] ({cfg.partition.method}, {cfg.partition.clients} clients), "
        f"model [cyan]{cfg.model.name}[/], seeds {list(cfg.seeds)}"
    )
    state: dict[str, Any] = {}
    with Progress(
        TextColumn("[bold blue]seed {task.fields[seed]}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("loss {task.fields[loss]}"),
        TextColumn("val acc {task.fields[val]}"),
        TextColumn("{task.fields[bytes]}"),
        TimeElapsedColumn(),
        console=console,
        transient=False,
    ) as progress:

        def on_seed(seed: int, planned: int) -> None:
            state["task"] = progress.add_task("", total=planned, seed=seed, loss="-", val="-", bytes="0 B")
            state["bytes"] = 0

        def on_round(seed: int, rec: Any) -> None:
            state["bytes"] += rec.total_up + rec.total_down
            fields: dict[str, Any] = {"bytes": _fmt_bytes(state["bytes"])}
            if not math.isnan(rec.loss):
                fields["loss"] = f"{rec.loss:.3f}"
            if rec.metrics:
                fields["val"] = f"{100 * rec.metrics['val_acc']:.1f}%"
            progress.update(state["task"], advance=1, **fields)

        result = securefgl.run(cfg, on_round=on_round, on_seed=on_seed)
        for task in progress.tasks:
            progress.update(task.id, completed=task.total)
    return result


def _print_table(result: Any) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    seeds = result.seeds
    per: dict[int, list[dict[str, Any]]] = {}
    traffic: dict[int, list[tuple[int, int]]] = {}
    for s in seeds:
        tb = s.client_bytes()
        if s.final is None:
            continue
        for cm in s.final.per_client:
            per.setdefault(cm.client, []).append(cm.row())
            traffic.setdefault(cm.client, []).append(tb.get(cm.client, (0, 0)))

    def avg(rows: list[dict[str, Any]], key: str) -> float:
        vals = [r[key] for r in rows if not (isinstance(r[key], float) and math.isnan(r[key]))]
        return sum(vals) / len(vals) if vals else float("nan")

    def pct(v: float) -> str:
        return "-" if math.isnan(v) else f"{100 * v:.2f}"

    table = Table(
        title=f"Per-client test results (mean over {len(seeds)} seed{'s' if len(seeds) > 1 else ''})"
    )
    for col in ("client", "nodes", "test nodes", "acc %", "macro-F1 %", "minority acc %", "up", "down"):
        table.add_column(col, justify="right")
    for cid in sorted(per):
        rows = per[cid]
        up = sum(t[0] for t in traffic[cid]) / len(traffic[cid])
        down = sum(t[1] for t in traffic[cid]) / len(traffic[cid])
        table.add_row(
            str(cid),
            str(rows[0]["num_nodes"]),
            str(rows[0]["test_n"]),
            pct(avg(rows, "test_acc")),
            pct(avg(rows, "test_f1")),
            pct(avg(rows, "test_minority_acc")),
            _fmt_bytes(up),
            _fmt_bytes(down),
        )
    console.print(table)

    summ = result.summary

    def ms(key: str, scale: float = 100.0, fmt: str = "{:.2f}") -> str:
        if key not in summ:
            return "-"
        m, s = summ[key]["mean"], summ[key]["std"]
        if math.isnan(m):
            return "-"
        if len(seeds) == 1 or fmt.format(scale * s) == fmt.format(0.0):
            return fmt.format(scale * m)
        return fmt.format(scale * m) + " ± " + fmt.format(scale * s)

    overall = Table(title="Overall (node-weighted over clients; mean ± std over seeds)")
    overall.add_column("metric")
    overall.add_column("value", justify="right")
    overall.add_row("test accuracy %", ms("test_acc"))
    overall.add_row("test macro-F1 %", ms("test_f1"))
    overall.add_row("test accuracy % (pooled)", ms("test_acc_pooled"))
    overall.add_row("minority-class accuracy %", ms("test_minority_acc"))
    overall.add_row("val accuracy %", ms("val_acc"))
    overall.add_row("rounds run", ms("rounds", 1.0, "{:.0f}"))
    overall.add_row("best round", ms("best_round", 1.0, "{:.0f}"))
    up = summ.get("bytes_up", {}).get("mean", 0.0)
    down = summ.get("bytes_down", {}).get("mean", 0.0)
    overall.add_row("bytes up / down (all clients)", f"{_fmt_bytes(up)} / {_fmt_bytes(down)}")
    overall.add_row("time training (s)", ms("train_seconds", 1.0))
    overall.add_row("time cryptography (s)", ms("crypto_seconds", 1.0))
    overall.add_row("time evaluation (s)", ms("eval_seconds", 1.0))
    overall.add_row("dropouts", ms("dropouts", 1.0, "{:.0f}"))
    if "dp_epsilon" in summ:
        delta = summ.get("dp_delta", {}).get("mean", float("nan"))
        overall.add_row(f"privacy spent: epsilon at delta {delta:g}", ms("dp_epsilon", 1.0))
    overall.add_row("device", result.device)
    console.print(overall)
    if result.output_dir is not None:
        console.print(
            f"results: [bold]{result.output_dir}[/] (config.toml, metrics.json, clients.csv, plot.png)"
        )
    sys.stdout.flush()
