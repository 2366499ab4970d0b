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
from securefgl.cli._names import names as _names
from securefgl.cli._names import unknown_name
from securefgl.cli._output import check_output, claim_output
from securefgl.cli._privacy import privacy_lines, privacy_overrides
from securefgl.cli._progress import RunTracker as _Tracker
from securefgl.cli._progress import fmt_bytes as _fmt_bytes
from securefgl.errors import ConfigError, SecureFGLError, UnsupportedCombinationError

__all__ = ["run_command"]


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
        str | None,
        typer.Option(
            help=f"Secure-sum protocol: {_names('protocol')}. (default: secagg) Its options go through --set "
            "protocol.options.NAME=VALUE, e.g. session_uses=1000 (secagg/secagg+: one key agreement resumed "
            "by later sums), optimistic_uses=true with it (one round trip a sum, all clients or nothing) and "
            "prg=aes128-ctr (AES-128 masks, ~1.4x faster, 128-bit security: SECURITY.md 3.2)."
        ),
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
            help="CPU threads for tensor operations. (default: 1 for graphs under 20,000 nodes, whose small "
            "operations only slow down with more; for larger graphs the idle cores, at most 4)"
        ),
    ] = None,
    dropout: Annotated[
        float | None,
        typer.Option(
            help="Fraction of each round's clients that drop out at a random protocol phase. A rate that "
            "leaves fewer survivors than the protocol's threshold (SecAgg: a majority of the round's clients; "
            "--set protocol.options.threshold=T) or dp_min_contributors is refused before the run; a round "
            "that still aborts is skipped, and train.max_failed_rounds (default 5) in a row end the run. "
            "(default: 0)"
        ),
    ] = None,
    model: Annotated[str | None, typer.Option(help=f"Model: {_names('model')}. (default: gcn)")] = None,
    hidden: Annotated[int | None, typer.Option(help="Hidden width. (default: 64)")] = None,
    split: Annotated[
        str | None, typer.Option(help="Node split: 'public' or train,val,test ratios like 0.2,0.4,0.4.")
    ] = None,
    output: Annotated[
        Path | None,
        typer.Option(
            help="Results folder, checked before any work. An existing non-empty folder is never overwritten: "
            "the run writes to <folder>-1 (-2, ...) unless --overwrite. "
            "(default: ./results/<time>-<algorithm>-<protocol>-<dataset>)"
        ),
    ] = None,
    overwrite: Annotated[
        bool, typer.Option("--overwrite", help="Write into an existing --output folder, replacing its files.")
    ] = False,
    no_save: Annotated[
        bool, typer.Option("--no-save", help="Do not write a results folder (conflicts with --output).")
    ] = False,
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
            "--set", help="Any other setting as section.key=value (repeatable), e.g. train.patience=10."
        ),
    ] = None,
    quiet: Annotated[
        bool, typer.Option("--quiet", "-q", help="No progress bar or table; one summary line.")
    ] = False,
    privacy: Annotated[
        str | None,
        typer.Option(
            help="Differential privacy of the people in the graph: 'node' or 'edge' (GAP: aggregation "
            "perturbation + DP-SGD; --model mlp is DP-MLP) or 'client' (distributed DP in the secure sum, "
            "DP-FedAvg). The guarantee, its accountant and assumptions are printed and saved. (default: none)"
        ),
    ] = None,
    epsilon: Annotated[
        float | None, typer.Option(help="Privacy budget of --privacy (inf: no noise). (default: 8)")
    ] = None,
    delta: Annotated[
        float | None,
        typer.Option(help="Delta of --privacy. (default: 1/(10 N) for node/edge, 1e-5 for client)"),
    ] = None,
    as_json: Annotated[
        bool,
        typer.Option(
            "--json", help="Print the result as JSON on stdout (for pipelines); progress stays on stderr."
        ),
    ] = False,
) -> None:
    """Train an algorithm where the server only sees sums, and report accuracy, F1, bytes and time.

    With only --protocol secagg it runs FedAvg on a small synthetic graph (10 clients) in seconds.
    A round whose protocol aborts (too few clients survive) is skipped and recorded; the run stops after
    train.max_failed_rounds consecutive aborted rounds (default 5; --set train.max_failed_rounds=N).
    On Ctrl-C or a failure the finished seeds and the rounds so far are saved, marked INCOMPLETE.
    """
    try:
        _run(locals())
    except _Interrupted as exc:
        typer.echo(str(exc), err=True)
        raise typer.Exit(130) from None
    except SecureFGLError as exc:
        _report_failure(exc, as_json)
        raise


def _report_failure(exc: SecureFGLError, as_json: bool) -> None:
    """Exit with the error as JSON (``--json``) or one line naming the partial results; else return."""
    where = getattr(exc, "output_dir", None)
    if as_json:
        payload = {"error": str(exc), "type": type(exc).__name__, "exit_code": exc.exit_code}
        if where is not None:
            payload["output_dir"] = str(where)
        typer.echo(json.dumps(payload))
        raise typer.Exit(exc.exit_code) from None
    if where is not None:
        typer.secho(
            f"error: {exc} (partial results saved in {where}, marked INCOMPLETE)",
            fg=typer.colors.RED,
            err=True,
        )
        raise typer.Exit(exc.exit_code) from None


def _check_range(
    value: float | None, option: str, low: float, *, strict: bool = False, high: float | None = None
) -> None:
    if value is None:
        return
    bad = value <= low if strict else value < low
    if high is not None:
        bad = bad or value > high
    if bad:
        what = f"> {low:g}" if strict else f">= {low:g}"
        if high is not None:
            what += f" and <= {high:g}"
        raise ConfigError(f"{option} must be {what}, got {value:g}")


def _early_checks(opts: dict[str, Any]) -> None:
    """Checks that need no torch: conflicting options, names, ranges, the output folder (milliseconds)."""
    if opts["no_save"] and opts["output"] is not None:
        raise ConfigError("--no-save and --output contradict each other; drop one of them")
    if opts["no_save"] and opts["overwrite"]:
        raise ConfigError("--no-save and --overwrite contradict each other; drop one of them")
    for kind, key in (
        ("protocol", "protocol"),
        ("algorithm", "algorithm"),
        ("dataset", "dataset"),
        ("partition", "partition"),
        ("model", "model"),
        ("preset", "preset"),
    ):
        if opts[key] is not None and (msg := unknown_name(kind, opts[key])) is not None:
            raise ConfigError(f"--{key}: {msg}")
    for option, key in (("--rounds", "rounds"), ("--local-epochs", "local_epochs"), ("--clients", "clients")):
        _check_range(opts[key], option, 1)
    _check_range(opts["hidden"], "--hidden", 1)
    _check_range(opts["threads"], "--threads", 1)
    _check_range(opts["lr"], "--lr", 0, strict=True)
    _check_range(opts["client_fraction"], "--client-fraction", 0, strict=True, high=1)
    if opts["dropout"] is not None and not 0.0 <= opts["dropout"] < 1.0:
        raise ConfigError(f"--dropout must be in [0, 1), got {opts['dropout']:g}")
    if opts["seeds"] is not None:
        _parse_seeds(opts["seeds"])
    if opts["output"] is not None:
        check_output(opts["output"])
    if opts["config"] is not None and not opts["config"].is_file():
        raise ConfigError(f"--config {str(opts['config'])!r} is not a file")


def _run(opts: dict[str, Any]) -> None:
    _early_checks(opts)
    privacy = privacy_overrides(  # checked here too: a bad --privacy is one line before any work
        opts["privacy"],
        opts["epsilon"],
        opts["delta"],
        algorithm=opts["algorithm"],
        protocol=opts["protocol"],
        clients=opts["clients"],
    )
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
    overrides = merge(overrides, privacy)
    if opts["root"] is not None:
        overrides = merge(overrides, {"dataset": {"root": opts["root"]}})
    if opts["set_"]:
        overrides = merge(overrides, parse_overrides(opts["set_"]))
    if opts["no_save"]:
        if overrides.get("output", {}).get("dir") is not None:
            raise ConfigError("--no-save and output.dir contradict each other; drop one of them")
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
    _refuse_unused_protocol(cfg, opts["protocol"])
    _check_protocol(cfg)
    if cfg.threads is None:
        from securefgl.cli._threads import approximate_nodes, default_threads
        from securefgl.config import replace

        cfg = replace(
            cfg, threads=default_threads(approximate_nodes(cfg.dataset.name, cfg.dataset.csbm.num_nodes))
        )
    out_dir = _claim_output(cfg, opts["overwrite"], opts["quiet"] or opts["as_json"])

    from securefgl.training.device import tune_cpu_allocator

    tune_cpu_allocator()  # large batched-training buffers: avoid a page fault storm per epoch (Linux glibc)
    quiet, as_json = opts["quiet"], opts["as_json"]
    result = _execute(cfg, out_dir, progress=not quiet)
    aborted = _aborted_rounds(result)
    if aborted:
        typer.echo(
            f"note: {aborted} round(s) aborted (too few clients survived) and were skipped; the run stops "
            f"after train.max_failed_rounds={cfg.train.max_failed_rounds} in a row"
            + (f" (listed in {result.output_dir / 'metrics.json'})" if result.output_dir is not None else ""),
            err=True,
        )
    if as_json:
        typer.echo(json.dumps(_json_summary(result), indent=2))
    elif quiet:
        acc, acc_sd = result.metric("test_acc")
        f1, f1_sd = result.metric("test_f1")
        typer.echo(
            f"test acc {100 * acc:.2f} ± {100 * acc_sd:.2f}  test F1 {100 * f1:.2f} ± {100 * f1_sd:.2f}"
            f"  results: {result.output_dir or '(not saved)'}"
        )
        if result.privacy.get("unit", "none") != "none":
            typer.echo(privacy_lines(result.privacy)[0])
    else:
        _print_table(result)


def _aborted_rounds(result: Any) -> int:
    """Rounds skipped because their protocol aborted, over all seeds."""
    return sum(len(s.report.get("aborted_rounds", ())) for s in result.seeds)


def _refuse_unused_protocol(cfg: Any, asked: str | None) -> None:
    """An explicit --protocol for an algorithm that never communicates would be silently ignored: refuse."""
    if asked is None:
        return
    from securefgl.algorithms.registry import get_algorithm

    if not get_algorithm(cfg.algorithm.name).uses_protocol:
        raise UnsupportedCombinationError(
            f"--algorithm {cfg.algorithm.name} never communicates, so --protocol {asked} would have no "
            "effect; drop --protocol (or pick a federated algorithm)"
        )


def _check_protocol(cfg: Any) -> None:
    """Build the run's protocol now, so that bad protocol or DP options (or rounds smaller than the smallest sum
    it releases) are one line before any progress bar, and refuse a dropout rate that leaves fewer clients
    than it needs in every round."""
    from securefgl.algorithms.registry import get_algorithm
    from securefgl.engine.run_protocol import build_run_protocol, check_round_size

    if not get_algorithm(cfg.algorithm.name).uses_protocol:
        return
    per_round = cfg.train.clients_in_round(cfg.partition.clients)
    protocol = build_run_protocol(cfg, per_round, cfg.partition.clients)  # what the run will build
    check_round_size(protocol, cfg.protocol.spec, per_round)
    rate = float(cfg.protocol.dropout)
    if rate <= 0:
        return
    inner = getattr(protocol, "base", protocol)
    needed, what = 0, ""
    if hasattr(inner, "parameters"):
        needed, what = int(inner.parameters(per_round).threshold), "the protocol's threshold"
    min_contrib = getattr(protocol, "min_contributors", None)
    if isinstance(min_contrib, int) and min_contrib > needed:
        needed, what = min_contrib, "DP's min_contributors"
    dropped = int(round(rate * per_round))
    alive = per_round - dropped
    if needed and alive < needed:
        most = (per_round - needed) / per_round
        raise ConfigError(
            f"--dropout {rate:g} drops {dropped} of the {per_round} clients of every round, leaving {alive}, "
            f"below {what} {needed}: every round would abort. Use --dropout <= {most:.2f}, more clients, "
            f"or a lower threshold (--set protocol.options.threshold={alive})"
        )


def _claim_output(cfg: Any, overwrite: bool, quiet: bool) -> Path | None:
    """The results folder this run writes (checked now, before any work); ``None`` when saving is off."""
    if not cfg.output.save:
        return None
    if cfg.output.dir is not None:
        wanted = Path(cfg.output.dir)
    else:
        import datetime as _dt

        stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
        name = f"{stamp}-{cfg.algorithm.name}-{cfg.protocol.name}-{cfg.dataset.name}".replace("+", "plus")
        wanted = Path("results") / name
    out_dir, renamed = claim_output(wanted, overwrite=overwrite)
    if renamed:
        typer.echo(
            f"note: {wanted} already holds results; writing to {out_dir} (--overwrite reuses it)", err=True
        )
    return out_dir


class _Interrupted(Exception):
    """Ctrl-C during a run, after what was finished has been saved."""

    def __init__(self, message: str) -> None:
        super().__init__(message)


def _execute(cfg: Any, out_dir: Path | None, *, progress: bool) -> Any:
    """Run every seed, saving after each one; on Ctrl-C or a failure save what finished, marked incomplete."""
    import securefgl
    from securefgl.api import RunResult
    from securefgl.config import replace
    from securefgl.engine.hooks import RunHooks
    from securefgl.engine.metrics import mean_std
    from securefgl.engine.records import SeedResult
    from securefgl.engine.results import write_results

    done: list[Any] = []
    facts: dict[str, Any] = {"device": "", "graph": {}}
    tracker = _Tracker(cfg, enabled=progress)

    def save(status: str, error: str | None = None, partial: Any = None) -> bool:
        seeds = done + ([partial] if partial is not None else [])
        if out_dir is None or not seeds:
            return False
        summary = mean_std([s.summary() for s in seeds if s.final is not None] or [{}])
        plot = cfg.output.plot and status in ("ok", "failed")  # no plot between seeds or after Ctrl-C
        write_results(out_dir, cfg, seeds, summary, status=status, error=error, extra=facts, plot=plot)
        return True

    seed = cfg.seeds[0]
    with tracker:
        try:  # Ctrl-C may come at any point: during a seed, between seeds, while saving
            for seed in cfg.seeds:
                one = replace(cfg, {"seeds": [seed], "output": {"save": False}})
                tracker.setup(seed)
                try:
                    r = securefgl.run(
                        one,
                        on_round=tracker.on_round,
                        on_seed=tracker.on_seed,
                        hooks=RunHooks(on_round_start=tracker.on_round_start),
                    )
                except Exception as exc:  # a bug must not lose the finished seeds either
                    partial = getattr(exc, "partial", None)
                    if partial is None and tracker.rounds_of(seed):
                        partial = SeedResult(
                            seed, rounds=tracker.rounds_of(seed), status="failed", error=str(exc)
                        )
                    if save("failed", f"seed {seed}: {type(exc).__name__}: {exc}", partial):
                        exc.output_dir = out_dir  # type: ignore[attr-defined]
                    raise
                facts.update(device=r.device, graph=r.graph)
                done.extend(r.seeds)
                if len(done) < len(cfg.seeds):
                    save("running", f"{len(done)} of {len(cfg.seeds)} seeds finished")
            if out_dir is not None:
                save("ok")
        except KeyboardInterrupt:
            rounds = [] if any(s.seed == seed for s in done) else tracker.rounds_of(seed)
            partial = SeedResult(seed, rounds=rounds, status="interrupted", error="interrupted (Ctrl-C)")
            saved = save(
                "interrupted",
                f"interrupted (Ctrl-C) with {len(done)} of {len(cfg.seeds)} seeds finished",
                partial if rounds else None,
            )
            where = (
                f"finished seeds and partial metrics saved in {out_dir}, marked INCOMPLETE"
                if saved
                else "nothing was saved"
            )
            raise _Interrupted(
                f"interrupted: {len(done)} of {len(cfg.seeds)} seeds finished; {where}"
            ) from None
    return RunResult(cfg, done, facts["device"], facts["graph"], out_dir)


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
    d["seeds"] = [
        {
            **{k: v for k, v in s.items() if k != "rounds"},
            "round_seconds": _round_seconds(s.get("rounds", [])),
        }
        for s in d["seeds"]
    ]
    return clean(d)


def _round_seconds(rounds: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per round, where the time went: local training, the protocol (crypto), the server step, evaluation."""
    keys = ("train", "crypto", "server", "eval")
    return [
        {"phase": r["phase"], "round": r["round"], **{k: r[f"{k}_seconds"] for k in keys}} for r in rounds
    ]


def _print_table(result: Any) -> None:
    from rich.table import Table

    from securefgl.cli._console import stdout_console

    console = stdout_console()
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
    if (
        "test_auc" in summ
    ):  # binary tasks: pooled ROC AUC from the summed score histograms (selects the round)
        overall.add_row("test ROC AUC %", ms("test_auc"))
        overall.add_row("val ROC AUC %", ms("val_auc"))
    overall.add_row("rounds run", ms("rounds", 1.0, "{:.0f}"))
    overall.add_row("best round", ms("best_round", 1.0, "{:.0f}"))
    up = summ.get("bytes_up", {}).get("mean", 0.0)
    down = summ.get("bytes_down", {}).get("mean", 0.0)
    overall.add_row("bytes up / down (all clients)", f"{_fmt_bytes(up)} / {_fmt_bytes(down)}")
    overall.add_row("time training (s)", ms("train_seconds", 1.0))
    overall.add_row("time cryptography (s)", ms("crypto_seconds", 1.0))
    overall.add_row("time evaluation (s)", ms("eval_seconds", 1.0))
    overall.add_row("dropouts", ms("dropouts", 1.0, "{:.0f}"))
    overall.add_row("rounds aborted and skipped (all seeds)", str(_aborted_rounds(result)))
    if "dp_epsilon" in summ:
        delta = summ.get("dp_delta", {}).get("mean", float("nan"))
        overall.add_row(f"privacy spent: epsilon at delta {delta:g}", ms("dp_epsilon", 1.0))
    overall.add_row("device", result.device)
    console.print(overall)
    for line in privacy_lines(result.privacy):
        console.print(line, highlight=False, markup=False)
    if result.output_dir is not None:
        from securefgl.engine.results import result_files

        console.print(
            f"results: [bold]{result.output_dir}[/] ({', '.join(result_files(result.output_dir))})",
            highlight=False,
        )
    sys.stdout.flush()
