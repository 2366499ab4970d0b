"""Batched client training computes the same updates as the one-client-at-a-time reference."""

from __future__ import annotations

import pytest
import torch
from torch_geometric.data import Data

from securefgl.algorithms.base import Client
from securefgl.nn import ModelSpec, build_model
from securefgl.training.local_training import (
    predict_shared,
    predict_stacked,
    train_clients,
    train_clients_sequential,
)
from securefgl.training.optim import StackedOptimizer


def _edges(n: int, p: float, g: torch.Generator) -> torch.Tensor:
    upper = torch.triu(torch.rand(n, n, generator=g) < p, diagonal=1)
    src, dst = upper.nonzero().t()
    return torch.cat([torch.stack([src, dst]), torch.stack([dst, src])], dim=1)


def _clients(sizes=(5, 17, 9, 30, 3, 12, 40), feats=10, classes=3, seed=0, empty=(4,)):
    g = torch.Generator().manual_seed(seed)
    ws: dict = {}
    out = []
    for i, n in enumerate(sizes):
        train = torch.rand(n, generator=g) < 0.5
        if i in empty:
            train[:] = False  # a client without labelled nodes must be left untouched
        data = Data(
            x=torch.randn(n, feats, generator=g),
            edge_index=_edges(n, 0.2, g),
            y=torch.randint(0, classes, (n,), generator=g),
            train_mask=train,
            val_mask=~train,
            test_mask=~train,
            num_nodes=n,
        )
        out.append(Client(i, data, torch.Generator().manual_seed(100 + i), workspace=ws))
    return out


def _model(name: str):
    return build_model(
        ModelSpec(name=name, hidden=8, dropout=0.0), 10, 3, generator=torch.Generator().manual_seed(0)
    )


def _params(model):
    return {n: p.detach().clone() for n, p in model.named_parameters()}


@pytest.mark.parametrize("name", ["gcn", "sage", "sgc", "gat", "mlp"])
@pytest.mark.parametrize("optimizer", ["adam", "sgd"])
def test_batched_equals_sequential(name, optimizer):
    clients = _clients()
    model = _model(name)
    init = _params(model)
    kw = dict(
        epochs=4, lr=0.05, optimizer=optimizer, weight_decay=5e-4, momentum=0.9, prox_mu=0.1, prox_center=init
    )
    a = train_clients(model, clients, init, **kw)
    b = train_clients_sequential(model, clients, init, **kw)
    assert a.ids == b.ids == [c.id for c in clients]
    for n in init:
        assert a.params[n].shape == (len(clients), *init[n].shape)
        torch.testing.assert_close(a.params[n], b.params[n], atol=2e-6, rtol=1e-5)
    torch.testing.assert_close(a.losses, b.losses, atol=1e-6, rtol=1e-5, equal_nan=True)
    assert torch.isnan(a.losses[4])
    for n in init:  # the client without train nodes keeps the initial model; the others moved
        torch.testing.assert_close(a.params[n][4], init[n])
        assert not torch.allclose(a.params[n][0], init[n])


@pytest.mark.parametrize("optimizer", ["adam", "sgd"])
def test_persistent_optimizer_state_with_client_sampling(optimizer):
    clients = _clients()
    model = _model("gcn")
    pa = pb = _params(model)
    for subset in ([0, 1, 2, 3, 4, 5, 6], [1, 3, 5], [0, 1, 2, 6], [3, 4, 5, 6, 0]):
        chosen = [clients[i] for i in subset]
        kw = dict(epochs=2, lr=0.05, optimizer=optimizer, weight_decay=5e-4, momentum=0.9, state_key="t")
        a = train_clients(model, chosen, pa, **kw)
        b = train_clients_sequential(model, chosen, pb, **kw)
        for n in pa:
            torch.testing.assert_close(a.params[n], b.params[n], atol=2e-6, rtol=1e-5)
        pa = {n: v.mean(0) for n, v in a.params.items()}
        pb = {n: v.mean(0) for n, v in b.params.items()}


def test_per_client_initial_models_and_stacked_input():
    clients = _clients(empty=())
    models = [
        build_model(
            ModelSpec(name="sage", hidden=8, dropout=0.0), 10, 3, generator=torch.Generator().manual_seed(i)
        )
        for i in range(len(clients))
    ]
    per = [_params(m) for m in models]
    a = train_clients(models[0], clients, per, epochs=3, lr=0.01)
    stacked = {n: torch.stack([p[n] for p in per]) for n in per[0]}
    b = train_clients(models[0], clients, stacked, epochs=3, lr=0.01, stacked=True)
    c = train_clients_sequential(models[0], clients, per, epochs=3, lr=0.01)
    for n in per[0]:
        torch.testing.assert_close(a.params[n], b.params[n])
        torch.testing.assert_close(a.params[n], c.params[n], atol=2e-6, rtol=1e-5)


def test_stacked_optimizer_matches_torch_adam_elementwise():
    g = torch.Generator().manual_seed(0)
    w = torch.randn(3, 4, 5, generator=g)
    leaf = w.clone().requires_grad_(True)
    opt = StackedOptimizer({"w": leaf}, "adam", lr=0.1, weight_decay=0.01)
    refs = [w[i].clone().requires_grad_(True) for i in range(3)]
    topts = [torch.optim.Adam([r], lr=0.1, weight_decay=0.01) for r in refs]
    for _ in range(5):
        target = torch.randn(3, 4, 5, generator=g)
        opt.zero_grad()
        ((leaf - target) ** 2).sum().backward()
        opt.step()
        for i in range(3):
            topts[i].zero_grad()
            ((refs[i] - target[i]) ** 2).sum().backward()
            topts[i].step()
    torch.testing.assert_close(leaf.detach(), torch.stack([r.detach() for r in refs]))


def test_memory_one_stacked_leaf_per_parameter():
    """The trained state is one (K, ...) tensor per parameter: no per-client model objects are kept."""
    clients = _clients(empty=())
    model = _model("gcn")
    res = train_clients(model, clients, _params(model), epochs=1, lr=0.01)
    assert set(res.params) == {n for n, _ in model.named_parameters()}
    assert all(v.shape[0] == len(clients) and not v.requires_grad for v in res.params.values())


def test_predictions_batched_equal_per_client():
    clients = _clients(empty=())
    model = _model("gcn")
    model.eval()
    params = _params(model)
    shared = predict_shared(model, params, clients)
    stacked = predict_stacked(
        model, {n: v.unsqueeze(0).repeat(len(clients), *[1] * v.dim()) for n, v in params.items()}, clients
    )
    for c in clients:
        ref = model(c.data.x, c.data.edge_index)
        torch.testing.assert_close(shared[c.id], ref, atol=2e-6, rtol=1e-5)
        torch.testing.assert_close(stacked[c.id], ref, atol=2e-6, rtol=1e-5)
