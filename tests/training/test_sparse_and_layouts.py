"""Tests of the training stack's shared pieces: SparseOperator's storages and GraphBatch's padded layout."""

from __future__ import annotations

import pytest
import torch
from torch_geometric.data import Data

from securefgl.training.batched import GraphBatch
from securefgl.training.sparse import SparseOperator


def _random_sparse(n: int, m: int, seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    dense = torch.randn(n, m, generator=g) * (torch.rand(n, m, generator=g) < 0.3)
    row, col = dense.nonzero(as_tuple=True)
    return row, col, dense[row, col]


@pytest.mark.parametrize("storage", ["csr", "coo", "bag"])
def test_sparse_operator_product_gradient_and_new_values(storage):
    row, col, val = _random_sparse(7, 5, 0)
    op = SparseOperator.build(row, col, val, (7, 5), storage=storage)
    dense = torch.zeros(7, 5)
    dense[row, col] = val
    h = torch.randn(5, 3, generator=torch.Generator().manual_seed(1), requires_grad=True)
    out = op @ h
    torch.testing.assert_close(out, dense @ h)
    out.square().sum().backward()
    ref = h.detach().clone().requires_grad_(True)
    (dense @ ref).square().sum().backward()
    torch.testing.assert_close(h.grad, ref.grad)
    # rescaled entries keep the pattern of both a and its transpose (a_t's values follow perm)
    halved = op.with_values(op.values() * 0.5)
    torch.testing.assert_close(halved @ h.detach(), 0.5 * (dense @ h.detach()))
    torch.testing.assert_close(halved.a_t.to_dense(), 0.5 * dense.T)


def test_the_storages_hold_the_same_entries_in_the_same_order():
    row, col, val = _random_sparse(9, 9, 2)
    csr = SparseOperator.build(row, col, val, (9, 9))
    h = torch.randn(9, 4, generator=torch.Generator().manual_seed(3))
    for storage in ("coo", "bag"):
        other = SparseOperator.build(row, col, val, (9, 9), storage=storage)
        assert other.storage == storage and csr.storage == "csr"
        assert torch.equal(other.values(), csr.values()) and torch.equal(other.perm, csr.perm)
        torch.testing.assert_close(other @ h, csr @ h)
    assert SparseOperator.build(row, col, val, (9, 9), storage="coo").a.layout == torch.sparse_coo
    with pytest.raises(ValueError, match="unknown sparse storage .bsr.; valid: .csr., .coo., .bag."):
        SparseOperator.build(row, col, val, (9, 9), storage="bsr")


def _graph(n: int, seed: int) -> Data:
    g = torch.Generator().manual_seed(seed)
    return Data(
        x=torch.randn(n, 4, generator=g),
        edge_index=torch.randint(0, n, (2, 2 * n), generator=g),
        y=torch.randint(0, 3, (n,), generator=g),
        train_mask=torch.rand(n, generator=g) < 0.5,
    )


def test_padded_layout_keeps_order_and_pads_every_graph_to_the_largest():
    graphs = [_graph(n, i) for i, n in enumerate((3, 6, 4))]
    batch = GraphBatch.from_graphs(graphs, layout="padded")
    assert batch.padded and not batch.packed
    assert batch.order == [0, 1, 2] and batch.buckets == [(0, 3, 6, 0)] and batch.num_rows == 18
    assert batch.segments() == [(0, 3), (6, 12), (12, 16)]
    for i, g in enumerate(graphs):
        assert torch.equal(batch.split(batch.x)[i], g.x)
        assert torch.equal(batch.x.view(3, 6, 4)[i, : g.num_nodes], g.x)
    # join is split's inverse, zero on the padding rows
    per_graph = [torch.full((g.num_nodes, 2), float(i + 1)) for i, g in enumerate(graphs)]
    joined = batch.join(per_graph)
    assert [t.tolist() for t in batch.split(joined)] == [t.tolist() for t in per_graph]
    pad = torch.ones(18, dtype=torch.bool)
    pad[batch.rows] = False
    assert torch.all(joined[pad] == 0) and torch.all(batch.y[pad] == -1)


@pytest.mark.parametrize("layout", ["padded", "bucketed", "packed"])
def test_block_operator_applies_each_graphs_matrix_to_its_own_rows(layout):
    graphs = [_graph(n, i) for i, n in enumerate((5, 2, 4))]
    mats = []
    for i, g in enumerate(graphs):
        n = g.num_nodes
        m = torch.randn(n, n, generator=torch.Generator().manual_seed(10 + i))
        mats.append(m.to_sparse())
    batch = GraphBatch.from_graphs(graphs, layout=layout)
    h = torch.randn(batch.num_rows, 3, generator=torch.Generator().manual_seed(4))
    out = batch.block_operator(mats) @ h
    for i, (m, part) in enumerate(zip(mats, batch.split(out), strict=True)):
        torch.testing.assert_close(part, m.to_dense() @ batch.split(h)[i])


def test_per_client_features_in_the_padded_layout_dense_and_sparse():
    graphs = [_graph(n, i) for i, n in enumerate((5, 3))]
    sparse_graphs = [Data(**{**g.to_dict(), "x": torch.where(g.x > 1.0, g.x, 0.0)}) for g in graphs]
    w = torch.randn(2, 4, 6, generator=torch.Generator().manual_seed(5))
    for gs, storage in ((graphs, "csr"), (sparse_graphs, "csr"), (sparse_graphs, "bag")):
        batch = GraphBatch.from_graphs(gs, layout="padded")
        parts = batch.split(batch.features(storage=storage).linear(w))
        for k, g in enumerate(gs):
            torch.testing.assert_close(parts[k], g.x @ w[k])
