"""Consoles of the command line: tables on stdout use the whole width, also when piped or redirected."""

from __future__ import annotations

import os
import sys
from typing import Any

__all__ = ["stdout_console"]

#: Width of tables written to a pipe or a file: wide enough that no row wraps.
PIPE_WIDTH = 240


def stdout_console() -> Any:
    """A rich console on stdout: the terminal's width, or :data:`PIPE_WIDTH` (``$COLUMNS`` if set) off a terminal."""
    from rich.console import Console

    if sys.stdout.isatty():
        return Console()
    columns = os.environ.get("COLUMNS", "")
    return Console(width=int(columns) if columns.isdigit() else PIPE_WIDTH)
