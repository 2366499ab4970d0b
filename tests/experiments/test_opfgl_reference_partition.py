"""The replay of O-pFGL's louvain+ / metis+ partitions (securefgl.experiments.opfgl_reference_partition)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from securefgl.data.partition import _greedy_pack
from securefgl.errors import ConfigError
from securefgl.experiments.opfgl_reference_partition import (
    DELTA,
    NUM_GROUPS,
    SPLIT,
    export_graph,
    pack_reference,
    reference_partition,
)

REPO = Path(__file__).resolve().parents[2]


def _communities(n: int, seed: int) -> list[np.ndarray]:
    """Random communities of 1..120 nodes, ordered by their first node (python-louvain's key order)."""
    rng = np.random.default_rng(seed)
    labels = np.minimum(rng.integers(0, n, n) // 3, rng.integers(0, n // 40, n))
    comms = [np.flatnonzero(labels == c) for c in np.unique(labels)]
    return sorted(comms, key=lambda a: int(a[0]))


@pytest.mark.parametrize("seed", [0, 1])
def test_packing_equals_the_library(seed: int) -> None:
    n = 3000
    comms = _communities(n, seed)
    com_of = np.empty(n, dtype=np.int64)
    for j, c in enumerate(comms):
        com_of[c] = j
    groups = pack_reference({v: int(com_of[v]) for v in range(n)}, n)
    assert len(groups) == NUM_GROUPS
    assert sorted(v for g in groups for v in g) == list(range(n)), "every node packed exactly once"
    ours = _greedy_pack(comms, n, NUM_GROUPS, DELTA, "breadth")
    for owner, members in enumerate(groups):
        assert sorted(members) == np.flatnonzero(ours == owner).tolist(), f"owner {owner} differs"


def _graph_file(path: Path, n: int = 600, classes: int = 3, seed: int = 0) -> Path:
    """A small planted-partition graph, stored as export_graph stores one (u < v, labels)."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, classes, n)
    u, v = rng.integers(0, n, (2, 8 * n))
    same = y[u] == y[v]
    keep = (u < v) & (same | (rng.random(u.size) < 0.1))
    edges = np.unique(np.stack([u[keep], v[keep]], 1), axis=0)
    np.savez(path, u=edges[:, 0], v=edges[:, 1], y=y, num_nodes=n)
    return path


def test_metis_replay_is_a_seeded_partition_with_a_per_class_split(tmp_path: Path) -> None:
    pytest.importorskip("pymetis")
    graph = _graph_file(tmp_path / "g_graph.npz")
    a = reference_partition(graph, "metis+", 4, seed=42)
    b = reference_partition(graph, "metis+", 4, seed=42)
    assert set(a) == {"node_owner", "train_mask", "val_mask", "test_mask"}
    for key in a:
        assert np.array_equal(a[key], b[key]), f"{key} differs between two runs with the same seed"
    owner, y = a["node_owner"], np.load(graph)["y"]
    assert owner.dtype == np.int64 and owner.min() >= 0 and set(owner.tolist()) <= set(range(4))
    roles = a["train_mask"].astype(int) + a["val_mask"] + a["test_mask"]
    assert (roles == 1).all(), "every node has exactly one split role"
    for k in np.unique(owner):
        for c in np.unique(y[owner == k]):
            mine = (owner == k) & (y == c)
            m = int(mine.sum())
            assert int((mine & a["train_mask"]).sum()) == int(m * SPLIT[0])
            assert int((mine & a["val_mask"]).sum()) == int(m * SPLIT[1])


def test_unknown_method_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="valid: louvain\\+, metis\\+"):
        reference_partition(tmp_path / "absent.npz", "louvain", 10, 42)


def test_export_writes_each_undirected_edge_once(cora, tmp_path: Path) -> None:
    path = export_graph("Cora", tmp_path / "ref", None)
    assert path == tmp_path / "ref" / "Cora_graph.npz"
    z = np.load(path)
    assert (z["u"] < z["v"]).all()
    assert 2 * z["u"].size == int(cora.edge_index.size(1))
    assert int(z["num_nodes"]) == int(cora.num_nodes) and np.array_equal(z["y"], cora.y.numpy())


def test_the_replays_need_neither_torch_nor_the_rest_of_securefgl(tmp_path: Path) -> None:
    """Step 2 runs in the reference tools' environment: importing the replays must not import torch."""
    pytest.importorskip("pymetis")
    graph = _graph_file(tmp_path / "g_graph.npz", n=300)
    code = textwrap.dedent(
        f"""
        import sys
        import securefgl.experiments
        from securefgl.experiments import adafgl_reference_partition, opfgl_reference_partition
        arrays = opfgl_reference_partition.reference_partition({str(graph)!r}, "metis+", 3, 42)
        assert arrays["node_owner"].min() >= 0
        assert "torch" not in sys.modules, "torch was imported"
        print(" ".join(sorted(m for m in sys.modules if m.startswith("securefgl"))))
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=REPO)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == [
        "securefgl",
        "securefgl.errors",
        "securefgl.experiments",
        "securefgl.experiments.adafgl_reference_partition",
        "securefgl.experiments.claims",
        "securefgl.experiments.opfgl_reference_partition",
        "securefgl.experiments.partition_files",
    ]
