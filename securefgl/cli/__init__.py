"""The ``securefgl`` command line: wires commands; each command lives in its own module.

Every :class:`~securefgl.errors.SecureFGLError` becomes a one-line message on stderr and the exit code
of its class (see ``securefgl --help``): 2 bad configuration, 3 unsupported combination, 4 dataset
files missing, 5 training failed, 6 protocol aborted.
"""

from __future__ import annotations

import os
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
import securefgl.cli.deploy_cmd  # noqa: E402, F401, I001
# --- end command modules ---


#: Set to 1 to see the traceback of an unexpected error instead of its one-line summary.
DEBUG_ENV = "SECUREFGL_DEBUG"


def main(argv: list[str] | None = None) -> None:
    """Console entry point: run the app, turning library errors into a message and an exit code.

    An unexpected exception (a bug) is one line too, exit code 1, naming where partial results were saved;
    ``SECUREFGL_DEBUG=1`` shows its traceback.
    """
    try:
        app(args=argv, standalone_mode=True)
    except SecureFGLError as exc:
        typer.secho(f"error: {exc}", fg=typer.colors.RED, err=True)
        sys.exit(exc.exit_code)
    except Exception as exc:
        if os.environ.get(DEBUG_ENV) == "1":
            raise
        where = getattr(exc, "output_dir", None)
        saved = f"; partial results saved in {where}, marked INCOMPLETE" if where is not None else ""
        typer.secho(
            f"internal error: {type(exc).__name__}: {exc}{saved} (a bug: please report it with the traceback "
            f"that {DEBUG_ENV}=1 shows)",
            fg=typer.colors.RED,
            err=True,
        )
        sys.exit(1)
