"""The replay of AdaFGL's Louvain community split (securefgl.experiments.adafgl_reference_partition)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from securefgl.data import partition_graph
from securefgl.errors import ConfigError
from securefgl.experiments.adafgl_reference_partition import (
    client_rows,
    export_graph,
    pack_reference,
    read_edge_file,
    reference_graph,
    reference_partition,
)


def test_packing_deals_chunks_in_rotation() -> None:
    # 10 nodes, 3 clients: target 3; communities 0-3 (cut to 0-2 | 3), 4-6, 7-9
    part = {v: (0 if v < 4 else 1 if v < 7 else 2) for v in range(10)}
    owners, forced = pack_reference(part, 10, 3)
    assert forced == 0
    assert owners == [[0, 1, 2], [4, 5, 6], [7, 8, 9, 3]]


def test_packing_appends_a_forced_chunk_twice_as_the_reference() -> None:
    # 9 nodes, 2 clients: target 4; three communities of 3 nodes: the third fits nowhere (3 + 3 > 4 + 1), so
    # after a full turn it lands on the owner the pointer stopped at, once in the loop and once after it
    part = {v: v // 3 for v in range(9)}
    owners, forced = pack_reference(part, 9, 2)
    assert forced == 1
    assert owners == [[0, 1, 2], [3, 4, 5, 6, 7, 8, 6, 7, 8]]


def test_read_edge_file_skips_lines_that_are_not_two_integers(tmp_path: Path) -> None:
    f = tmp_path / "chameleon.edge"
    f.write_text("node_id\tnode_id\n0\t1\n2 3 0.5\n\n4\n-1 5\n")
    assert read_edge_file(f).tolist() == [[0, 1], [2, 3], [-1, 5]]
    (tmp_path / "empty.edge").write_text("header only\n")
    assert read_edge_file(tmp_path / "empty.edge").shape == (0, 2)


def test_reference_graph_keeps_one_triangle_in_order() -> None:
    src = np.array([0, 1, 1, 2, 2])
    dst = np.array([1, 0, 2, 1, 2])  # (2, 2) is a self-loop
    upper = reference_graph(src, dst, 4, "upper")
    assert list(upper.nodes) == [0, 1, 2, 3]
    assert list(upper.edges) == [(0, 1), (1, 2), (2, 2)]
    lower = reference_graph(src, dst, 4, "lower")
    assert sorted(lower.edges) == [(0, 1), (1, 2), (2, 2)]
    with pytest.raises(ConfigError, match="valid: upper, lower"):
        reference_graph(src, dst, 4, "both")


def test_export_of_a_planetoid_graph(cora, tmp_path: Path) -> None:
    path = export_graph("Cora", tmp_path, None, None)
    z = np.load(path)
    assert path.name == "Cora_graph.npz" and bool(z["exact"])
    assert z["src"].size == int(cora.edge_index.size(1))
    order = np.lexsort((z["dst"], z["src"]))
    assert np.array_equal(order, np.arange(order.size)), "sorted by row, then column"
    with pytest.raises(ConfigError, match="--edge-file is for the Geom-GCN datasets"):
        export_graph("Cora", tmp_path, None, tmp_path / "chameleon.edge")


def test_replay_on_a_small_graph(tmp_path: Path) -> None:
    pytest.importorskip("community")
    rng = np.random.default_rng(0)
    n = 200
    y = rng.integers(0, 3, n)
    u, v = rng.integers(0, n, (2, 1200))
    keep = (u != v) & ((y[u] == y[v]) | (rng.random(u.size) < 0.1))
    src, dst = np.concatenate([u[keep], v[keep]]), np.concatenate([v[keep], u[keep]])
    graph = tmp_path / "g_graph.npz"
    np.savez(graph, src=src, dst=dst, y=y, num_nodes=n, exact=True)
    arrays, report = reference_partition(graph, 4, 2023, (0.2, 0.4), "upper")
    again, _ = reference_partition(graph, 4, 2023, (0.2, 0.4), "upper")
    assert all(np.array_equal(arrays[k], again[k]) for k in arrays)
    owner = arrays["node_owner"]
    assert owner.min() >= 0 and owner.max() <= 3
    roles = arrays["train_mask"].astype(int) + arrays["val_mask"] + arrays["test_mask"]
    assert (roles == 1).all()
    assert sum(report["sizes_with_duplicates"]) == n + report["duplicated"]
    assert report["exact_input"] is True


def test_client_rows(small_csbm) -> None:
    fg = partition_graph(small_csbm, "metis", 3, seed=0, cache=False)
    rows = client_rows(fg)
    assert len(rows) == 3
    assert sum(r["n"] for r in rows) == int(small_csbm.num_nodes)
    for r, c in zip(rows, fg.clients, strict=True):
        assert r["edges"] == int(c.edge_index.size(1)) // 2
        assert sum(r["hist"]) == r["n"] and len(r["hist"]) == fg.num_classes
        assert sum(r["split"]) == r["n"]
        assert 0.0 <= r["h_edge"] <= 1.0
