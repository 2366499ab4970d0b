"""securefgl.provenance: the versions a result names, read from the installed
distributions and the checkout."""

from __future__ import annotations

import subprocess
from importlib.metadata import version
from pathlib import Path

import numpy as np
import pytest
import torch

from securefgl import provenance
from securefgl.provenance import LIBRARIES, library_versions, source_commit

ROOT = Path(__file__).resolve().parents[1]


def test_every_named_library_is_reported_with_its_installed_version() -> None:
    versions = library_versions()
    assert list(versions) == ["python", *LIBRARIES, "securefgl_commit"]
    assert versions["numpy"] == np.__version__
    assert versions["torch"] == version("torch") and versions["torch"].startswith(torch.__version__[:4])


def test_a_library_that_is_not_installed_is_none_not_left_out() -> None:
    versions = library_versions(("numpy", "no-such-distribution-securefgl"))
    assert versions["no-such-distribution-securefgl"] is None and versions["numpy"] == np.__version__


def test_the_commit_is_the_checkouts_when_imported_from_one() -> None:
    try:
        head = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("the tests do not run from a git checkout")
    commit = source_commit()
    if Path(provenance.__file__).resolve().parents[1] != ROOT:
        pytest.skip("securefgl is imported from an installed copy, not this checkout")
    assert commit is not None and commit.removesuffix("+dirty") == head


def test_outside_a_checkout_the_commit_is_none(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A copy of the module outside any git repository (an installed wheel) names no commit."""
    copy = tmp_path / "securefgl" / "provenance.py"
    copy.parent.mkdir(parents=True)
    copy.write_text(Path(provenance.__file__).read_text())
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path))
    namespace: dict[str, object] = {"__file__": str(copy), "__name__": "libraries_copy"}
    exec(compile(copy.read_text(), str(copy), "exec"), namespace)
    assert namespace["source_commit"]() is None
