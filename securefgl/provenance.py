"""Provenance: the library versions and securefgl commit a result was computed with, saved beside it.

Seeded figures are bit-exact within one install but move with the numerical libraries: a fresh install
(torch 2.13, torch_geometric 2.8.1, numpy 2.4.6) gave AdaFGL 62.6 where the earlier install gave 61.2 on
the same Chameleon seed. A reproduction result that does not name its libraries cannot be re-run to the bit,
so every run's ``metrics.json`` (:func:`securefgl.engine.results.write_results`) and every reproduction
script's ``--out`` file carry :func:`library_versions`, and ``examples/reproductions_report.py`` carries it
into the page.

Read from the installed distributions' metadata (:mod:`importlib.metadata`), so nothing heavy is imported
and the replays' torch-free environments can call it too.
"""

from __future__ import annotations

import platform
import subprocess
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

#: The distributions whose versions change seeded figures (numerics, graph handling, partitioning) or the
#: secure sums' encoding, in the order the page lists them.
LIBRARIES: tuple[str, ...] = (
    "torch",
    "torch_geometric",
    "numpy",
    "scipy",
    "networkx",
    "pymetis",
    "scikit-learn",
    "cryptography",
    "tenseal",
    "opacus",
    "securefgl",
)


def library_versions(names: tuple[str, ...] = LIBRARIES) -> dict[str, str | None]:
    """``{"python": ..., name: version or None, "securefgl_commit": ...}`` for the interpreter, each of
    ``names`` and the checkout securefgl was imported from.

    A distribution that is not installed maps to ``None`` rather than being left out, so two results
    compare key by key.
    """
    out: dict[str, str | None] = {"python": platform.python_version()}
    for name in names:
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            out[name] = None
    out["securefgl_commit"] = source_commit()
    return out


def source_commit() -> str | None:
    """The git commit of the checkout this package was imported from, ``+dirty`` when its tracked files
    differ from it; ``None`` outside a git checkout (an installed wheel) or without git."""
    here = Path(__file__).resolve()
    try:
        top, commit = _git(here.parent, "rev-parse", "--show-toplevel", "HEAD").split()
        # an installed copy inside some other repository (a venv in a user's project) is not a checkout
        if Path(top, "securefgl", here.name).resolve() != here:
            return None
        dirty = _git(here.parent, "status", "--porcelain", "--untracked-files=no").strip()
    except (OSError, subprocess.SubprocessError, ValueError):
        return None
    return commit + ("+dirty" if dirty else "")


def _git(cwd: Path, *args: str) -> str:
    """``git <args>``'s standard output, run in ``cwd``; raises on failure."""
    return subprocess.run(
        ["git", *args], cwd=cwd, capture_output=True, text=True, timeout=10, check=True
    ).stdout
