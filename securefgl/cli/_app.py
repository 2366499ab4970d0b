"""The Typer application that every command module registers its command on.

It has a module of its own so that the command modules import it without importing :mod:`securefgl.cli`,
which imports them.
"""

from __future__ import annotations

import typer

__all__ = ["app"]

app = typer.Typer(
    name="securefgl",
    help=(
        "Privacy-preserving federated graph learning: the server only ever sees sums.\n\n"
        "Exit codes: 0 ok, 1 other error, 2 bad configuration, 3 unsupported combination, "
        "4 dataset files missing, 5 training failed, 6 protocol aborted."
    ),
    no_args_is_help=True,
    add_completion=False,
    context_settings={"help_option_names": ["-h", "--help"]},
    pretty_exceptions_enable=False,
)
