"""``securefgl datasets`` and ``securefgl partition``: list the known datasets, build and describe partitions.

Both commands are thin: they resolve a typed config (defaults < ``--config`` file < ``--set`` overrides <
explicit flags), call :mod:`securefgl.data`, and print a rich table or JSON (``--json``).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from securefgl.cli._app import app
from securefgl.cli._console import stdout_console
from securefgl.cli._names import names
from securefgl.cli._output import check_output
from securefgl.config import DataConfig, build, load_mapping, merge, parse_overrides, save_config, to_dict
from securefgl.errors import ConfigError, SecureFGLError

if TYPE_CHECKING:
    from securefgl.data.federated import FederatedGraph

__all__ = ["datasets_command", "partition_command"]


def _fail(exc: SecureFGLError, as_json: bool) -> typer.Exit:
    if as_json:
        typer.echo(json.dumps({"error": str(exc), "type": type(exc).__name__, "exit_code": exc.exit_code}))
    else:
        typer.secho(f"error: {exc}", fg=typer.colors.RED, err=True)
    return typer.Exit(exc.exit_code)


def _fmt(value: float | None, digits: int = 3) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "—"
    return f"{value:.{digits}f}"


def _clean(obj: Any) -> Any:
    """JSON-safe copy (NaN -> None)."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {k: _clean(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_clean(v) for v in obj]
    return obj


def _dataset_rows(root: str | None, stats: bool, names: list[str] | None = None) -> list[dict[str, Any]]:
    from securefgl.data import (
        DATASETS,
        canonical_name,
        data_root,
        edge_homophily,
        load_dataset,
        missing_files,
    )

    base = data_root(root)
    wanted = [canonical_name(n) for n in names] if names else list(DATASETS)
    rows = []
    for name in wanted:
        info = DATASETS[name]
        row: dict[str, Any] = {"name": name, "family": info.family, "public_split": info.public_split}
        if info.family == "synthetic":
            row["status"] = "synthetic (no files needed)"
            row["available"] = True
        else:
            missing = missing_files(name, base)
            where = base / (info.files[0] if info.family == "npz" else info.files[0].split("/")[0])
            if info.requires is not None:
                import importlib.util

                if importlib.util.find_spec(info.requires) is None:
                    row["available"] = False
                    row["status"] = f"needs the optional package {info.requires!r}"
                    rows.append(row)
                    continue
            row["available"] = not missing
            row["status"] = (
                f"found: {where}"
                if not missing
                else f"missing {len(missing)} of {len(info.files)} files under {where}"
            )
        if stats and row["available"]:
            try:
                data = load_dataset(name, base, download=False)
            except Exception as exc:  # one bad dataset marks its row; the listing goes on
                row["available"] = False
                row["status"] = f"unreadable: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}"
            else:
                row.update(
                    nodes=int(data.num_nodes),
                    edges=int(data.edge_index.shape[1]) // 2,
                    features=int(data.x.shape[1]),
                    classes=int(data.num_classes),
                    edge_homophily=edge_homophily(data.edge_index, data.y),
                )
        rows.append(row)
    return rows


@app.command("datasets")
def datasets_command(
    names: Annotated[
        list[str] | None,
        typer.Argument(
            help="Only these datasets (default: every known dataset). `import DIR` instead copies the raw "
            "files found under DIR into the data root, checks them and lists what is now available.",
            metavar="[NAMES]... | import DIR",
        ),
    ] = None,
    root: Annotated[
        str | None,
        typer.Option("--root", help="Data root (default: $SECUREFGL_DATA, else ~/.cache/securefgl/data)."),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")] = False,
    stats: Annotated[
        bool,
        typer.Option("--stats/--no-stats", help="Load the available datasets to report sizes and homophily."),
    ] = True,
) -> None:
    """List the known datasets: where each is found (or why not), nodes, edges, features, classes, homophily.

    `securefgl datasets import DIR` copies the raw files of every known dataset found under DIR (laid out as
    under the data root, e.g. DIR/Cora/raw/ind.cora.x, DIR/heterophily-npz/chameleon.npz) into the data
    root, checks that each loads, and lists them.
    """
    if names and names[0] == "import":
        _import_command(names[1:], root, as_json)
        return
    try:
        rows = _dataset_rows(root, stats, names)
    except SecureFGLError as exc:
        raise _fail(exc, as_json) from exc
    if as_json:
        typer.echo(json.dumps(_clean(rows), indent=2))
        return
    from securefgl.data.root import data_root

    _print_rows(rows, f"securefgl datasets (data root: {data_root(root)})")


def _print_rows(rows: list[dict[str, Any]], title: str) -> None:
    table = Table(title=title)
    for col, justify in (
        ("dataset", "left"),
        ("status", "left"),
        ("nodes", "right"),
        ("edges", "right"),
        ("features", "right"),
        ("classes", "right"),
        ("edge hom.", "right"),
    ):
        table.add_column(col, justify=justify)  # type: ignore[arg-type]
    for r in rows:
        table.add_row(
            r["name"],
            r["status"],
            str(r.get("nodes", "—")),
            str(r.get("edges", "—")),
            str(r.get("features", "—")),
            str(r.get("classes", "—")),
            _fmt(r.get("edge_homophily")),
        )
    stdout_console().print(table)


def _import_command(args: list[str], root: str | None, as_json: bool) -> None:
    """``securefgl datasets import DIR``: copy, check, list."""
    try:
        if len(args) != 1:
            raise ConfigError(
                f"datasets import takes one folder, got {len(args)} argument(s); "
                "usage: securefgl datasets import DIR [--root ROOT]"
            )
        report = _import_datasets(Path(args[0]), root)
        rows = _dataset_rows(root, True, [r["name"] for r in report["imported"]])
    except SecureFGLError as exc:
        raise _fail(exc, as_json) from exc
    for row in rows:
        row["import"] = next(r["action"] for r in report["imported"] if r["name"] == row["name"])
    if as_json:
        typer.echo(json.dumps(_clean({**report, "datasets": rows}), indent=2))
    else:
        for r in report["imported"]:
            typer.echo(f"{r['name']}: {r['action']}", err=True)
        for r in report["skipped"]:
            typer.echo(f"skipped {r['name']}: {r['reason']}", err=True)
        _print_rows(rows, f"imported into the data root {report['root']}")
    if any(not r.get("available") for r in rows) or report["skipped"]:
        raise typer.Exit(4)


def _import_datasets(src: Path, root: str | None) -> dict[str, Any]:
    """Copy every known dataset whose raw files are all under ``src`` into the data root (checked first).

    A file already there with the same bytes is left alone; a different one is replaced and the dataset's
    stale ``processed/`` folder removed. A dataset with missing or unreadable files is skipped, with why.
    """
    import filecmp
    import shutil

    src = src.expanduser().resolve()
    if not src.is_dir():
        raise ConfigError(
            f"datasets import: {str(src)!r} is not a folder; pass the folder holding the raw files"
        )
    from securefgl.data.datasets import DATASETS, unreadable_files
    from securefgl.data.root import data_root
    from securefgl.errors import DatasetNotFoundError

    base = data_root(root)
    if base == src:
        raise ConfigError(f"datasets import: {str(src)!r} is already the data root; nothing to copy")
    check_output(base, option="data root")
    imported: list[dict[str, Any]] = []
    skipped: list[dict[str, str]] = []
    for name, info in DATASETS.items():
        if not info.files:
            continue
        top = info.files[0].split("/")[0]
        layout = src.parent if src.name == top and not (src / top).exists() else src
        present = [rel for rel in info.files if (layout / rel).exists()]
        if not present:
            continue
        if len(present) < len(info.files):
            lacking = [rel for rel in info.files if rel not in present]
            skipped.append({"name": name, "reason": f"missing {', '.join(str(layout / r) for r in lacking)}"})
            continue
        bad = unreadable_files(name, layout)
        if bad:
            skipped.append({"name": name, "reason": "; ".join(f"{p} {why}" for p, why in bad)})
            continue
        copied = 0
        for rel in info.files:
            source, target = layout / rel, base / rel
            if target.is_file() and filecmp.cmp(source, target, shallow=False):
                continue
            if target.is_dir():
                shutil.rmtree(target)
            target.parent.mkdir(parents=True, exist_ok=True)
            tmp = target.with_name(target.name + ".importing")
            shutil.copyfile(source, tmp)
            tmp.replace(target)
            copied += 1
        if copied:
            shutil.rmtree(
                base / top / "processed", ignore_errors=True
            )  # stale: rebuilt from the new raw files
        action = f"copied {copied} of {len(info.files)} files" if copied else "already in the data root"
        imported.append({"name": name, "action": action})
    if not imported:
        reason = f" ({'; '.join(r['name'] + ': ' + r['reason'] for r in skipped)})" if skipped else ""
        raise DatasetNotFoundError(
            f"datasets import: no complete dataset under {str(src)!r}{reason}; expected the data-root layout, "
            "e.g. DIR/Cora/raw/ind.cora.x or DIR/heterophily-npz/chameleon.npz (see `securefgl datasets`)"
        )
    return {"source": str(src), "root": str(base), "imported": imported, "skipped": skipped}


def _histogram(hist: list[int]) -> str:
    if len(hist) <= 12:
        return " ".join(str(h) for h in hist)
    top = sorted(range(len(hist)), key=lambda c: -hist[c])[:6]
    return " ".join(f"c{c}:{hist[c]}" for c in top) + f" (+{sum(1 for h in hist if h) - 6} classes)"


def _plot(summary: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    clients = summary["clients"]
    hist = np.array([c["class_histogram"] for c in clients], dtype=float)
    k, c = hist.shape
    fig, ax = plt.subplots(figsize=(max(6.0, 0.5 * k + 2), 4.5))
    bottom = np.zeros(k)
    cmap = plt.get_cmap("tab20" if c > 10 else "tab10")
    for cls in range(c):
        ax.bar(np.arange(k), hist[:, cls], bottom=bottom, color=cmap(cls % cmap.N), label=f"class {cls}")
        bottom += hist[:, cls]
    ax.set_xlabel("client")
    ax.set_ylabel("nodes")
    ax.set_xticks(np.arange(k))
    ax.set_title(f"{summary['dataset']} · {summary['method']} · {k} clients: class histogram per client")
    if c <= 20:
        ax.legend(fontsize="small", ncol=2, bbox_to_anchor=(1.01, 1), loc="upper left")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _resolve_config(
    config: Path | None, sets: list[str], flags: dict[str, dict[str, Any]]
) -> tuple[DataConfig, list[str]]:
    values: dict[str, Any] = {}
    ignored: list[str] = []
    if config is not None:
        raw = load_mapping(config)
        for key in list(raw):
            if key not in ("dataset", "partition"):
                if not isinstance(raw[key], dict):
                    raise ConfigError(
                        f"unknown key {key!r} in {str(config)!r}; valid sections: dataset, partition"
                    )
                ignored.append(key)  # sections of other commands (e.g. the run config's [train])
                del raw[key]
        values = raw
    if sets:
        values = merge(values, parse_overrides(sets))
    values = merge(values, {sec: {k: v for k, v in kv.items() if v is not None} for sec, kv in flags.items()})
    return build(DataConfig, values), ignored


def _parse_split(text: str | None) -> Any:
    if text is None:
        return None
    if text.strip().lower() == "public":
        return "public"
    try:
        return [float(p) for p in text.replace(" ", "").split(",")]
    except ValueError as exc:
        raise ConfigError(
            f"--split: invalid value {text!r}; valid: 'public' or 'train,val,test' ratios"
        ) from exc


@app.command("partition")
def partition_command(
    dataset: Annotated[
        str | None,
        typer.Option("--dataset", "-d", help="Dataset name (see `securefgl datasets`); default csbm."),
    ] = None,
    method: Annotated[
        str | None,
        typer.Option(
            "--method",
            "-m",
            help=f"Partition method: {names('partition')} (default louvain).",
        ),
    ] = None,
    clients: Annotated[
        int | None, typer.Option("--clients", "-k", help="Number of clients (default 10).")
    ] = None,
    seed: Annotated[int | None, typer.Option("--seed", help="Partition and split seed (default 0).")] = None,
    split: Annotated[
        str | None, typer.Option("--split", help="'train,val,test' ratios (default 0.2,0.4,0.4) or 'public'.")
    ] = None,
    param: Annotated[
        list[str] | None, typer.Option("--param", "-p", help="Method parameter key=value (repeatable).")
    ] = None,
    root: Annotated[
        str | None,
        typer.Option("--root", help="Data root (default: $SECUREFGL_DATA, else ~/.cache/securefgl/data)."),
    ] = None,
    config: Annotated[
        Path | None, typer.Option("--config", help="TOML/YAML/JSON file with dataset and partition sections.")
    ] = None,
    set_: Annotated[
        list[str] | None, typer.Option("--set", help="Config override section.key=value (repeatable).")
    ] = None,
    no_cache: Annotated[
        bool, typer.Option("--no-cache", help="Neither read nor write the partition cache.")
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of tables.")] = False,
    plot: Annotated[
        Path | None, typer.Option("--plot", help="Write per-client class histograms to this PNG.")
    ] = None,
    out: Annotated[
        Path | None,
        typer.Option(
            "--out",
            help="Write partition.json, config.toml and partition.npz (node -> client and the split, read back "
            "by `--partition file --set partition.params.path=...`) to this folder.",
        ),
    ] = None,
    export: Annotated[
        Path | None,
        typer.Option(
            "--export",
            help="Write one data file per client (its subgraph, masks, its cross-client edge view) and "
            "federation.json (public facts) to this folder, for `securefgl deploy` / SuperNodes.",
        ),
    ] = None,
) -> None:
    """Build (or load from the cache) a partition and describe it per client.

    Per client: nodes, edges, train/val/test counts, class histogram, edge homophily, cross-client edges.
    """
    try:
        flags = _partition_flags(dataset, method, clients, seed, split, param, root, no_cache)
        cfg, ignored = _resolve_config(config, set_ or [], flags)
        with Console(stderr=True).status(f"loading {cfg.dataset.name}", spinner="dots") as status:
            data = cfg.dataset.load()
            status.update(
                f"partitioning {cfg.dataset.name}: {cfg.partition.method}, {cfg.partition.clients} clients"
            )
            fg = cfg.partition.apply(data, root=cfg.dataset.root)
    except SecureFGLError as exc:
        raise _fail(exc, as_json) from exc

    summary = fg.summary()
    resolved = to_dict(cfg)
    written = _write_partition_files(cfg, fg, summary, resolved, plot, out)
    if export is not None:
        from securefgl.deploy.export import export_clients

        written += [str(p) for p in export_clients(fg, export)]
    if as_json:
        payload = {
            "summary": summary,
            "meta": fg.meta,
            "config": resolved,
            "written": written,
            "ignored": ignored,
        }
        typer.echo(json.dumps(_clean(payload), indent=2))
        return
    _print_partition(cfg, fg, summary, ignored, written)


def _partition_flags(
    dataset: str | None,
    method: str | None,
    clients: int | None,
    seed: int | None,
    split: str | None,
    param: list[str] | None,
    root: str | None,
    no_cache: bool,
) -> dict[str, dict[str, Any]]:
    """The explicit ``partition`` flags as config sections (``None``: not given)."""
    params = parse_overrides(param or [])
    return {
        "dataset": {"name": dataset, "root": root},
        "partition": {
            "method": method,
            "clients": clients,
            "seed": seed,
            "split": _parse_split(split),
            "cache": False if no_cache else None,
            "params": params or None,  # with the method: a method may need a parameter (file: path)
        },
    }


def _write_partition_files(
    cfg: DataConfig,
    fg: FederatedGraph,
    summary: dict[str, Any],
    resolved: dict[str, Any],
    plot: Path | None,
    out: Path | None,
) -> list[str]:
    """Write the ``--plot`` PNG and the ``--out`` folder (each with the resolved config); the paths written."""
    from securefgl.data.partition import save_partition

    written: list[str] = []
    if plot is not None:
        _plot(summary, plot)
        written.append(str(plot))
        written.append(str(save_config(cfg, plot.with_name(plot.stem + ".config.toml"))))
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        (out / "partition.json").write_text(
            json.dumps(_clean({"summary": summary, "meta": fg.meta, "config": resolved}), indent=2),
            encoding="utf-8",
        )
        written.append(str(out / "partition.json"))
        written.append(str(save_partition(fg, out / "partition.npz")))
        written.append(str(save_config(cfg, out / "config.toml")))
    return written


def _partition_table(cfg: DataConfig, fg: FederatedGraph, summary: dict[str, Any]) -> Table:
    """One row per client: sizes, split counts, class histogram, homophily, cross-client edges."""
    p = cfg.partition
    split_txt = "public" if p.split == "public" else "/".join(f"{r:g}" for r in p.split)  # type: ignore[union-attr]
    if fg.meta.get("split") == "file":
        split_txt = "from the file"
    table = Table(
        title=f"{fg.name} · {p.method} · {fg.num_clients} clients · seed {p.seed} · split {split_txt} ({p.split_scope})"
    )
    for col in (
        "client",
        "nodes",
        "edges",
        "train",
        "val",
        "test",
        "class histogram",
        "edge hom.",
        "cross edges",
    ):
        table.add_column(col, justify="left" if col == "class histogram" else "right")
    for row in summary["clients"]:
        table.add_row(
            str(row["client"]),
            str(row["nodes"]),
            str(row["edges"]),
            str(row["train"]),
            str(row["val"]),
            str(row["test"]),
            _histogram(row["class_histogram"]),
            _fmt(row["edge_homophily"]),
            str(row["cross_edges"]),
        )
    return table


def _print_partition(
    cfg: DataConfig, fg: FederatedGraph, summary: dict[str, Any], ignored: list[str], written: list[str]
) -> None:
    """The table, the totals, where the partition came from, and the files written."""
    console = stdout_console()
    console.print(_partition_table(cfg, fg, summary))
    console.print(
        f"nodes: {summary['num_nodes']} ({summary['nodes_in_clients']} in clients) · "
        f"cross-client edges: {summary['cross_edges']} · edges touching no-client nodes: {summary['unowned_edges']}"
        + (f" · injected edges: {summary['injected_edges']}" if summary["injected_edges"] else "")
        + (f" · held-out new client: {summary['held_out_nodes']} nodes" if summary["held_out_nodes"] else "")
    )
    if cfg.partition.cache:
        state = (
            "loaded from cache"
            if fg.meta.get("cache_hit")
            else f"built in {fg.meta.get('time_s', 0):.2f} s, cached"
        )
        console.print(f"partition {state}: {fg.meta.get('cache_path')}", highlight=False)
    else:
        console.print(f"partition built in {fg.meta.get('time_s', 0):.2f} s (cache off)")
    if ignored:
        console.print(f"config sections not used by this command: {', '.join(ignored)}")
    for path in written:
        console.print(f"wrote {path}", highlight=False)
