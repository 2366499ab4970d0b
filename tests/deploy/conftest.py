"""Deployment tests' data: a private copy of Cora's raw files, taken from the session's data root."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest


@pytest.fixture(scope="module")
def cora_root(data_root: Path, tmp_path_factory: pytest.TempPathFactory) -> str:
    """A data root holding only Cora (each module's deployed parties write their own ``processed/``)."""
    if not (data_root / "Cora").is_dir():
        pytest.skip(f"Cora raw files not available under {data_root}")
    dst = tmp_path_factory.mktemp("data")
    shutil.copytree(data_root / "Cora", dst / "Cora")
    return str(dst)
