"""The ``file`` partition method, ``save_partition``, and the O-pFGL reference-partition replay's packing."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import networkx as nx
import numpy as np
import pytest

from securefgl.data import partition_graph
from securefgl.data.partition import _greedy_pack, save_partition
from securefgl.errors import ConfigError, PartitionError

from .test_partition import _same, check_invariants

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "opfgl_reference_partition.py"


def test_roundtrip_keeps_assignment_and_split(small_csbm, tmp_path) -> None:
    fg = partition_graph(small_csbm, "louvain+", 4, seed=1, cache=False, num_coms=20)
    path = save_partition(fg, tmp_path / "part.npz")
    back = partition_graph(small_csbm, "file", 4, seed=7, split=(0.5, 0.25, 0.25), path=str(path))
    check_invariants(back, small_csbm)
    assert _same(fg, back), "the file's owner and split must be used as they are"
    assert back.meta["split"] == "file" and back.meta["cache_hit"] is False
    assert back.meta["info"] == {"path": str(path), "split_from_file": True}


def test_owner_only_file_draws_the_configured_split(small_csbm, tmp_path) -> None:
    fg = partition_graph(small_csbm, "metis", 3, seed=0, cache=False)
    path = tmp_path / "owner.npz"
    np.savez(path, node_owner=fg.node_owner.numpy())
    a = partition_graph(small_csbm, "file", 3, seed=1, split=(0.5, 0.2, 0.3), path=str(path))
    b = partition_graph(small_csbm, "file", 3, seed=2, split=(0.5, 0.2, 0.3), path=str(path))
    check_invariants(a, small_csbm)
    assert np.array_equal(a.node_owner.numpy(), fg.node_owner.numpy())
    assert a.meta["split"] == [0.5, 0.2, 0.3]
    assert not _same(a, b), "without masks in the file the split follows the seed"


def _write(path: Path, **arrays: np.ndarray) -> str:
    np.savez(path, **arrays)
    return str(path)


def test_bad_files_are_refused_with_the_reason(small_csbm, tmp_path) -> None:
    n = int(small_csbm.num_nodes)
    owner = np.arange(n) % 3
    masks = {"train_mask": owner == 0, "val_mask": owner == 1, "test_mask": owner == 2}
    cases = [
        (str(tmp_path / "absent.npz"), 3, "does not exist"),
        (_write(tmp_path / "a.npz", owner=owner), 3, "no 'node_owner' array .*owner"),
        (_write(tmp_path / "b.npz", node_owner=owner[:-1]), 3, f"must be \\({n},\\) integers"),
        (_write(tmp_path / "c.npz", node_owner=owner.astype(float)), 3, "integers"),
        (_write(tmp_path / "d.npz", node_owner=owner), 2, "set partition.clients to 3"),
        (
            _write(tmp_path / "e.npz", node_owner=owner - 2),
            3,
            "client id -2; valid ids are -1 .no client. and 0..2",
        ),
        (
            _write(tmp_path / "f.npz", node_owner=owner, train_mask=masks["train_mask"]),
            3,
            "but not test_mask",
        ),
        (
            _write(tmp_path / "g.npz", node_owner=owner, **{**masks, "val_mask": owner >= 0}),
            3,
            "more than one",
        ),
        (_write(tmp_path / "h.npz", node_owner=owner, **{**masks, "test_mask": owner * 1}), 3, "booleans"),
        (_write(tmp_path / "i.npz", node_owner=np.where(owner == 2, 0, owner)), 3, "client 2 is empty"),
    ]
    for path, k, needle in cases:
        with pytest.raises(PartitionError, match=needle):
            partition_graph(small_csbm, "file", k, path=path)
    (tmp_path / "junk.npz").write_text("not a zip")
    with pytest.raises(PartitionError, match="not a readable .npz") as info:
        partition_graph(small_csbm, "file", 3, path=str(tmp_path / "junk.npz"))
    assert "pickle" not in str(info.value)  # numpy's loader wording is not the user's problem
    with pytest.raises(ConfigError, match="--set partition.params.path=partition.npz"):
        partition_graph(small_csbm, "file", 3)


def test_reference_replay_packs_like_the_library(cora) -> None:
    """The replay script's packing (spec §1.2, reference order) equals ``_greedy_pack(..., "breadth")`` on Cora."""
    spec = importlib.util.spec_from_file_location("opfgl_reference_partition", EXAMPLE)
    assert spec is not None and spec.loader is not None
    replay = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(replay)
    n = int(cora.num_nodes)
    g = nx.Graph()
    g.add_nodes_from(range(n))
    g.add_edges_from(cora.edge_index.t().tolist())
    comms = sorted(
        (np.sort(np.fromiter(c, dtype=np.int64)) for c in nx.community.louvain_communities(g, seed=3)),
        key=lambda a: int(a[0]),
    )
    com_of = np.empty(n, dtype=np.int64)
    for j, c in enumerate(comms):
        com_of[c] = j
    groups = replay.pack_reference({v: int(com_of[v]) for v in range(n)}, n)
    ours = _greedy_pack(comms, n, 100, 20, "breadth")
    assert len(groups) == 100
    for owner, members in enumerate(groups):
        assert sorted(members) == np.flatnonzero(ours == owner).tolist(), f"owner {owner} differs"
