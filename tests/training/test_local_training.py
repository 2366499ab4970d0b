"""Client training (a batch of clients, or each client as a batch of one) computes the updates of a plain
``torch.nn`` + ``torch.optim`` loop per client, the oracle written out in this module."""

from __future__ import annotations

import copy
from collections.abc import Mapping

import pytest
import torch
from torch_geometric.data import Data

from securefgl.algorithms.base import Client
from securefgl.nn import ModelSpec, build_model
from securefgl.training.local_training import (
    make_optimizer,
    predict_shared,
    predict_stacked,
    train_clients,
    train_each_client,
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


def _torch_reference(
    model,
    clients,
    init,
    *,
    epochs,
    lr,
    optimizer="adam",
    weight_decay=0.0,
    momentum=0.0,
    prox_mu=0.0,
    prox_center=None,
    saved=None,
):
    """One client at a time with ``model.forward`` and a ``torch.optim`` optimiser (the test oracle).

    ``saved``: a dict kept by the caller for persistent optimiser state (client id -> state dict).
    Returns ``(params name -> (K, ...), losses (K,))`` in ``clients`` order.
    """
    per = [init] * len(clients) if isinstance(init, Mapping) else list(init)
    params = dict(model.named_parameters())
    out = {n: [] for n in params}
    losses = []
    center = {n: v.detach() for n, v in (prox_center or {}).items()}
    for c, p0 in zip(clients, per, strict=True):
        with torch.no_grad():
            for n, v in params.items():
                v.copy_(p0[n])
        loss = torch.tensor(float("nan"))
        if c.num_train > 0:
            opt = make_optimizer(list(params.values()), optimizer, lr, weight_decay, momentum)
            if saved is not None and c.id in saved:
                opt.load_state_dict(saved[c.id])
            model.train()
            mask = c.data.train_mask
            for _ in range(epochs):
                opt.zero_grad(set_to_none=True)
                loss = torch.nn.functional.cross_entropy(
                    model(c.data.x, c.data.edge_index)[mask], c.data.y[mask]
                )
                objective = loss
                if prox_mu > 0:
                    objective = objective + 0.5 * prox_mu * sum(
                        ((params[n] - center[n]) ** 2).sum() for n in params
                    )
                objective.backward()
                opt.step()
            if saved is not None:
                saved[c.id] = copy.deepcopy(opt.state_dict())
        for n, v in params.items():
            out[n].append(v.detach().clone())
        losses.append(float(loss.detach()))
    return {n: torch.stack(v) for n, v in out.items()}, torch.tensor(losses)


@pytest.mark.parametrize("name", ["gcn", "sage", "sgc", "gat", "mlp"])
@pytest.mark.parametrize("optimizer", ["adam", "sgd"])
def test_batched_and_each_alone_equal_the_torch_loop(name, optimizer):
    clients = _clients()
    model = _model(name)
    init = _params(model)
    kw = dict(
        epochs=4, lr=0.05, optimizer=optimizer, weight_decay=5e-4, momentum=0.9, prox_mu=0.1, prox_center=init
    )
    a = train_clients(model, clients, init, **kw)
    b = train_each_client(model, clients, init, **kw)
    ref, ref_losses = _torch_reference(_model(name), clients, init, **kw)
    assert a.ids == b.ids == [c.id for c in clients]
    for n in init:
        assert a.params[n].shape == b.params[n].shape == (len(clients), *init[n].shape)
        torch.testing.assert_close(a.params[n], ref[n], atol=2e-6, rtol=1e-5)
        torch.testing.assert_close(b.params[n], ref[n], atol=2e-6, rtol=1e-5)
    torch.testing.assert_close(a.losses, ref_losses, atol=1e-6, rtol=1e-5, equal_nan=True)
    torch.testing.assert_close(b.losses, ref_losses, atol=1e-6, rtol=1e-5, equal_nan=True)
    assert torch.isnan(a.losses[4])
    for n in init:  # the client without train nodes keeps the initial model; the others moved
        torch.testing.assert_close(a.params[n][4], init[n])
        assert not torch.allclose(a.params[n][0], init[n])


@pytest.mark.parametrize("optimizer", ["adam", "sgd"])
def test_persistent_optimizer_state_with_client_sampling(optimizer):
    clients = _clients()
    model = _model("gcn")
    alone = _clients()  # the same clients with their own workspace, trained one at a time
    pa = pb = pr = _params(model)
    saved: dict = {}
    for subset in ([0, 1, 2, 3, 4, 5, 6], [1, 3, 5], [0, 1, 2, 6], [3, 4, 5, 6, 0]):
        kw = dict(epochs=2, lr=0.05, optimizer=optimizer, weight_decay=5e-4, momentum=0.9)
        a = train_clients(model, [clients[i] for i in subset], pa, state_key="t", **kw)
        b = train_each_client(model, [alone[i] for i in subset], pb, state_key="t", **kw)
        ref, _ = _torch_reference(_model("gcn"), [clients[i] for i in subset], pr, saved=saved, **kw)
        for n in pa:
            torch.testing.assert_close(a.params[n], ref[n], atol=2e-6, rtol=1e-5)
            torch.testing.assert_close(b.params[n], ref[n], atol=2e-6, rtol=1e-5)
        pa = {n: v.mean(0) for n, v in a.params.items()}
        pb = {n: v.mean(0) for n, v in b.params.items()}
        pr = {n: v.mean(0) for n, v in ref.items()}


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
    c, _ = _torch_reference(models[0], clients, per, epochs=3, lr=0.01)
    d = train_each_client(models[0], clients, stacked, epochs=3, lr=0.01, stacked=True)
    for n in per[0]:
        torch.testing.assert_close(a.params[n], b.params[n])
        torch.testing.assert_close(a.params[n], c[n], atol=2e-6, rtol=1e-5)
        torch.testing.assert_close(d.params[n], c[n], atol=2e-6, rtol=1e-5)


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


def test_zero_epochs_returns_the_initial_models_and_nan_losses():
    clients = _clients()
    model = _model("gcn")
    init = _params(model)
    for fn in (train_clients, train_each_client):
        res = fn(model, clients, init, epochs=0, lr=0.1)
        assert res.ids == [c.id for c in clients]
        assert bool(torch.isnan(res.losses).all())
        for n in init:
            torch.testing.assert_close(res.params[n], init[n].unsqueeze(0).expand_as(res.params[n]))
