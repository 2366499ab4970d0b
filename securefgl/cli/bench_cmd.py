"""``securefgl bench``: side-by-side benchmarks. ``bench protocols`` compares every protocol to its floors.

``--section`` picks what runs (any registered section: ``protocols``, ``unmasking``, ``ckks``,
``ckks-bytes``, ``dp``, ...); ``--full`` runs those five on the issue-3 grid. The CKKS and DP tables
alone: ``securefgl bench protocols --section ckks --section ckks-bytes --section dp --clients 10``.

The logic lives in :mod:`securefgl.benchmarking`; this module only parses options and prints.
"""

from __future__ import annotations

from typing import Annotated

import typer

from securefgl.cli._app import app
from securefgl.cli._names import NAMES

__all__ = ["FULL_SECTIONS", "bench_app", "protocols"]

bench_app = typer.Typer(
    name="bench",
    help="Side-by-side benchmarks (ratios against baselines measured in the same run).",
    no_args_is_help=True,
)
app.add_typer(bench_app, name="bench")


def _protocol_help() -> str:
    bases = ", ".join(n for n in NAMES["protocol"] if not n.endswith("+dp"))
    return f"Protocol to benchmark (repeatable; default: all available: {bases})."


#: Sections run by ``--full``: the issue-3 grid and unmasking check, then the issue-5 CKKS and DP tables.
FULL_SECTIONS: tuple[str, ...] = ("protocols", "unmasking", "ckks", "ckks-bytes", "dp")


def _section_help() -> str:
    names = ", ".join(NAMES["bench-section"])
    return (
        f"Section to run (repeatable; one of: {names}). Default 'protocols'; "
        f"with --full: {', '.join(FULL_SECTIONS)}."
    )


@bench_app.command("protocols")
def protocols(
    protocol: Annotated[list[str] | None, typer.Option("--protocol", "-p", help=_protocol_help())] = None,
    clients: Annotated[
        list[int] | None, typer.Option("--clients", "-n", help="Number of clients (repeatable; default 10).")
    ] = None,
    length: Annotated[
        list[int] | None, typer.Option("--length", "-d", help="Vector length (repeatable; default 10000).")
    ] = None,
    dropout: Annotated[
        list[float] | None,
        typer.Option(
            "--dropout", help="Fraction of clients that drop before uploading (repeatable; default 0)."
        ),
    ] = None,
    full: Annotated[
        bool,
        typer.Option(
            "--full",
            help="Issue-3 grid (n 10,100; d 1e4,1e5,1e6; dropout 0,0.1) plus the n=500 unmasking check "
            "and the CKKS and DP sections (CKKS only where n*d <= 1e6 unless --protocol ckks). "
            "Takes many minutes; explicit --clients/--length/--dropout/--section still win.",
        ),
    ] = False,
    section: Annotated[
        list[str] | None,
        typer.Option(
            "--section",
            help=_section_help(),
        ),
    ] = None,
    quick: Annotated[
        bool,
        typer.Option(
            "--quick",
            help="A smoke run in under a minute: n=10, d 1e4 and 1e5, no dropout, no consistency rows, "
            "3 repeats. Explicit --clients/--length/--dropout/--section/--repeats still win.",
        ),
    ] = False,
    repeats: Annotated[
        int | None,
        typer.Option(
            help="Timed runs per case, each followed by its floors; medians (min-max) are reported. "
            "Default 3 (1 with --full, whose grid takes many minutes at one)."
        ),
    ] = None,
    seed: Annotated[int, typer.Option(help="Seed of the random test vectors (not of any protocol key).")] = 0,
    prg: Annotated[
        str, typer.Option(help="PRG of the raw floor: aes256-ctr, aes128-ctr or chacha20.")
    ] = "aes256-ctr",
    json_out: Annotated[bool, typer.Option("--json", help="Print JSON instead of tables.")] = False,
) -> None:
    """Benchmark the aggregation protocols against plaintext summation and the raw PRG floor."""
    from securefgl.benchmarking import (
        DEFAULT_GRID,
        QUICK_GRID,
        BenchConfig,
        format_report,
        run_benchmarks,
        to_json,
    )

    grid = DEFAULT_GRID if full else {"clients": (10,), "lengths": (10_000,), "dropouts": (0.0,)}
    if quick and not full:
        grid = QUICK_GRID
    sections = tuple(section) if section else (FULL_SECTIONS if full else ("protocols",))
    config = BenchConfig(
        protocols=tuple(protocol or ()),
        clients=tuple(clients or grid["clients"]),
        lengths=tuple(length or grid["lengths"]),
        dropouts=tuple(dropout if dropout is not None and len(dropout) else grid["dropouts"]),
        repeats=repeats if repeats is not None else (1 if full else 3),
        seed=seed,
        sections=sections,
        prg=prg,
        consistency=not quick,
    )
    progress = None if json_out else (lambda msg: typer.echo(msg, err=True))
    result = run_benchmarks(config, progress=progress)
    typer.echo(to_json(result) if json_out else format_report(result))
