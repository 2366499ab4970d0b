"""The ``securefgl`` command line: wires commands; each command lives in its own module.

Every :class:`~securefgl.errors.SecureFGLError` becomes a one-line message on stderr and the exit code
of its class (see ``securefgl --help``): 2 bad configuration, 3 unsupported combination, 4 dataset
files missing, 5 training failed, 6 protocol aborted.
"""

from __future__ import annotations

import sys

import typer

from securefgl.cli._app import app
from securefgl.errors import SecureFGLError

__all__ = ["app", "main"]

# Command modules register themselves on ``app`` (securefgl.cli._app) when imported, in the order
# ``securefgl --help`` lists them (one import per module, below).
# --- command modules ---
import securefgl.cli.data_cmds  # noqa: E402, F401, I001
import securefgl.cli.bench_cmd  # noqa: E402, F401, I001
import securefgl.cli.run_cmd  # noqa: E402, F401, I001
import securefgl.cli.audit_cmd  # noqa: E402, F401, I001
# --- end command modules ---


def main(argv: list[str] | None = None) -> None:
    """Console entry point: run the app, turning library errors into a message and an exit code."""
    try:
        app(args=argv, standalone_mode=True)
    except SecureFGLError as exc:
        typer.secho(f"error: {exc}", fg=typer.colors.RED, err=True)
        sys.exit(exc.exit_code)
