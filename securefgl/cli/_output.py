"""Results folders of the command line: checked before any work, never overwritten by accident.

:func:`check_output` answers in microseconds (no torch), so a bad ``--output`` is one error line before
anything is loaded or trained; :func:`claim_output` then picks the folder the run writes to: the requested
one when it is new or empty, else the first free ``<name>-1``, ``<name>-2``, ... (``overwrite=True`` reuses
it).
"""

from __future__ import annotations

import os
from pathlib import Path

from securefgl.errors import ConfigError

__all__ = ["check_output", "claim_output"]


def check_output(path: Path, *, option: str = "--output") -> None:
    """Refuse a results folder that cannot be created or written.

    Raises:
        ConfigError: ``path`` is an existing file, lies under a file, or its nearest existing folder is not
            writable; the message names the path and what to pass instead.
    """
    path = path.expanduser()
    if path.exists() and not path.is_dir():
        raise ConfigError(f"{option} {str(path)!r} is an existing file; pass a folder path (new or existing)")
    probe = path
    while not probe.exists():
        if probe.parent == probe:
            break
        probe = probe.parent
    if probe.exists() and not probe.is_dir():
        raise ConfigError(f"{option} {str(path)!r} lies under the file {str(probe)!r}; pass a folder path")
    if probe.exists() and not os.access(probe, os.W_OK | os.X_OK):
        raise ConfigError(
            f"{option} {str(path)!r} cannot be written ({str(probe)!r} is not writable); "
            "pass a folder you can write to"
        )


def claim_output(path: Path, *, overwrite: bool = False) -> tuple[Path, bool]:
    """The folder a run will write to, and whether it is a new name (the requested one was taken).

    Args:
        path: The requested folder.
        overwrite: Reuse an existing non-empty folder instead of choosing a suffixed name.

    Raises:
        ConfigError: as :func:`check_output`.
    """
    check_output(path)
    path = path.expanduser()
    if overwrite or not path.exists() or not any(path.iterdir()):
        return path, False
    n = 1
    while True:
        candidate = path.with_name(f"{path.name}-{n}")
        if not candidate.exists() or (candidate.is_dir() and not any(candidate.iterdir())):
            return candidate, True
        n += 1
