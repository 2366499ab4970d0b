"""Shared fixtures: a writable data root with the real raw files, Cora, and a small synthetic graph.

``data_root`` is ``$SECUREFGL_DATA`` when set (CI points it at a writable copy of ``../shared/datasets``);
otherwise ``<repo>/../shared/datasets`` is copied once per session into a temporary directory and
``SECUREFGL_DATA`` is set to it for the whole session, so the library never writes into the repository.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
import torch

# The test graphs are small: one intra-op thread is as fast, and it avoids OpenMP spin-waiting that made
# small scatters up to 100x slower on a loaded 2-core machine.
torch.set_num_threads(1)

REPO_ROOT = Path(__file__).resolve().parents[1]
SHARED_DATASETS = (REPO_ROOT / ".." / "shared" / "datasets").resolve()


@pytest.fixture(scope="session")
def data_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A writable data root holding the shared raw files; ``SECUREFGL_DATA`` points at it for the session."""
    env = os.environ.get("SECUREFGL_DATA")
    if env:
        return Path(env)
    if not SHARED_DATASETS.is_dir():
        pytest.skip(f"no $SECUREFGL_DATA and no shared datasets at {SHARED_DATASETS}")
    root = tmp_path_factory.mktemp("securefgl-data")
    shutil.copytree(SHARED_DATASETS, root, dirs_exist_ok=True)
    os.environ["SECUREFGL_DATA"] = str(root)
    return root


@pytest.fixture(scope="session")
def cora(data_root: Path):
    """The Cora graph (Planetoid, public split), loaded once per session."""
    from securefgl.data import load_dataset

    return load_dataset("Cora", data_root)


@pytest.fixture
def small_csbm():
    """A 300-node, 3-class contextual SBM (seed 0), fresh for each test."""
    from securefgl.data import make_csbm

    return make_csbm(num_nodes=300, num_classes=3, avg_degree=6.0, homophily=0.8, num_features=16, seed=0)
