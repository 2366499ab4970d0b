"""Models: construction from the registry, seeded initialisation, and batched == per-client forward."""

from __future__ import annotations

import pytest
import torch
from torch_geometric.data import Data

from securefgl.errors import ConfigError
from securefgl.nn import ModelSpec, available_models, build_model, get_model_class
from securefgl.training.batched import GraphBatch, plan_buckets

MODELS = ["gcn", "sage", "sgc", "gat", "mlp"]


def random_graph(n: int, p: float, g: torch.Generator) -> torch.Tensor:
    """Undirected G(n, p) edges (both directions, no self loops) drawn from ``g``."""
    upper = torch.triu(torch.rand(n, n, generator=g) < p, diagonal=1)
    src, dst = upper.nonzero().t()
    return torch.cat([torch.stack([src, dst]), torch.stack([dst, src])], dim=1)


def _graphs(sizes, feats=10, seed=0):
    g = torch.Generator().manual_seed(seed)
    out = []
    for n in sizes:
        out.append(
            Data(
                x=torch.randn(n, feats, generator=g),
                edge_index=random_graph(n, 0.25, g),
                y=torch.randint(0, 3, (n,), generator=g),
                num_nodes=n,
            )
        )
    return out


def test_registry_lists_every_family_and_resolves_aliases():
    assert set(MODELS) <= set(available_models())
    assert get_model_class("GraphSAGE") is get_model_class("sage")
    with pytest.raises(ConfigError, match="valid choices: .*gcn"):
        ModelSpec(name="transformer")


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"dropout": 1.0}, "dropout"),
        ({"hidden": 0}, "hidden"),
        ({"layers": 0}, "layers"),
        ({"name": "gat", "options": {"heads": 0}}, "heads"),
        ({"name": "gcn", "options": {"K": 2}}, "takes no options"),
        ({"name": "sgc", "options": {"k": 2}}, "unknown key"),
    ],
)
def test_model_spec_rejects_bad_values(kwargs, match):
    with pytest.raises(ConfigError, match=match):
        ModelSpec(**kwargs)


@pytest.mark.parametrize("name", MODELS)
def test_forward_shape_and_seeded_init_without_global_rng(name):
    spec = ModelSpec(name=name, hidden=8, layers=3 if name != "sgc" else 2)
    before = torch.random.get_rng_state()
    a = build_model(spec, 10, 4, generator=torch.Generator().manual_seed(7))
    b = build_model(spec, 10, 4, generator=torch.Generator().manual_seed(7))
    c = build_model(spec, 10, 4, generator=torch.Generator().manual_seed(8))
    assert torch.equal(torch.random.get_rng_state(), before), "model construction touched the global RNG"
    for (na, pa), (_, pb), (_, pc) in zip(
        a.named_parameters(), b.named_parameters(), c.named_parameters(), strict=True
    ):
        assert torch.equal(pa, pb), na
        if pa.dim() >= 2:
            assert not torch.equal(pa, pc), na
    g = _graphs([12])[0]
    a.eval()
    out = a(g.x, g.edge_index)
    assert out.shape == (12, 4)
    assert torch.isfinite(out).all()


@pytest.mark.parametrize("name", MODELS)
def test_batched_forward_equals_per_client_forward(name):
    graphs = _graphs([5, 17, 9, 30, 3, 12, 1])
    batch = GraphBatch.from_graphs(graphs, bucket_overhead=4)
    assert len(batch.buckets) > 1  # exercise several bucketed bmm calls
    spec = ModelSpec(name=name, hidden=8, dropout=0.0)
    models = [
        build_model(spec, 10, 3, generator=torch.Generator().manual_seed(i)) for i in range(len(graphs))
    ]
    for m in models:
        m.eval()
    names = [n for n, _ in models[0].named_parameters()]
    stacked = {n: torch.stack([dict(models[i].named_parameters())[n] for i in batch.order]) for n in names}
    out = models[0].batched_forward(stacked, batch, training=False, generator=None)
    assert out.shape == (batch.num_rows, 3)
    parts = batch.split(out)
    for i, g in enumerate(graphs):
        torch.testing.assert_close(parts[i], models[i](g.x, g.edge_index), atol=2e-6, rtol=1e-5)


def test_graph_batch_layout():
    graphs = _graphs([4, 9, 2, 9])
    batch = GraphBatch.from_graphs(graphs, bucket_overhead=0)
    assert batch.order == [1, 3, 0, 2]  # largest first, stable
    assert batch.num_rows >= sum(g.num_nodes for g in graphs)
    for i, g in enumerate(graphs):
        torch.testing.assert_close(batch.split(batch.x)[i], g.x)
        assert torch.equal(batch.split(batch.y)[i], g.y)
    pad = torch.ones(batch.num_rows, dtype=torch.bool)
    pad[batch.rows] = False
    assert torch.all(batch.x[pad] == 0) and torch.all(batch.y[pad] == -1)


def test_plan_buckets_covers_all_and_trades_padding_for_calls():
    sizes = [100, 99, 98, 50, 49, 10, 9, 1]
    for overhead in (0.0, 10.0, 1e9):
        spans = plan_buckets(sizes, overhead)
        assert spans[0][0] == 0 and spans[-1][1] == len(sizes)
        assert all(a[1] == b[0] for a, b in zip(spans[:-1], spans[1:], strict=True))
    assert len(plan_buckets(sizes, 1e9)) == 1
    assert len(plan_buckets(sizes, 0.0)) == len(set(sizes))


def test_dropout_draws_from_the_model_generator():
    spec = ModelSpec(name="gat", hidden=8, dropout=0.5, options={"attention_dropout": 0.3})
    m = build_model(spec, 10, 3, generator=torch.Generator().manual_seed(0))
    g = _graphs([20])[0]
    m.train()
    m.generator = torch.Generator().manual_seed(1)
    a = m(g.x, g.edge_index)
    m.generator = torch.Generator().manual_seed(1)
    b = m(g.x, g.edge_index)
    m.generator = torch.Generator().manual_seed(2)
    c = m(g.x, g.edge_index)
    torch.testing.assert_close(a, b)
    assert not torch.allclose(a, c)


def test_sparse_aware_dropout_keeps_the_distribution():
    from securefgl.nn._functional import dropout

    x = torch.zeros(400, 400)
    x[::7, ::3] = 2.0  # about 5% non-zero, large enough for the sparse path
    out = dropout(x, 0.25, True, torch.Generator().manual_seed(0))
    nz = x != 0
    assert torch.all(out[~nz] == 0)
    kept = out[nz] != 0
    assert torch.allclose(out[nz][kept], torch.full_like(out[nz][kept], 2.0 / 0.75))
    assert abs(kept.float().mean().item() - 0.75) < 0.02
    dense = torch.ones(10, 10)
    assert dropout(dense, 0.5, False, None) is dense
