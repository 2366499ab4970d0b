r"""Local training of many clients: batched (the default) and one client at a time (the reference).

In a round, every invited client trains its own copy of a shared architecture on its own graph for ``E``
full-batch epochs. :func:`train_clients` does this for all of them *together*:

* the client graphs form one padded disjoint union (:class:`~securefgl.training.batched.GraphBatch`, built once
  and kept in the clients' shared workspace);
* the K copies of every parameter are stacked into one ``(K, ...)`` leaf tensor, and the model's
  ``batched_forward`` applies client ``k``'s weights to client ``k``'s rows with bucketed ``bmm`` and one
  sparse product for message passing;
* the objective is the *sum* of the clients' losses, so the gradient of the stacked tensor holds each
  client's own gradient in its slice:

  .. math::
      \nabla_{W_k} \sum_j \mathcal L_j(W_j) = \nabla_{W_k}\mathcal L_k(W_k);

* one optimiser steps the stacked leaves. Adam, SGD (with momentum) and weight decay act element-wise, so
  this equals K separate optimisers, one per client.

Memory per round: the K parameter copies the clients train, their gradients and the optimiser state (what
K separate clients would hold), plus activations of the union graph; never one extra model copy per client
per step. Results are unbound once, at the end, into per-client views.

:func:`train_each_client` trains one client at a time through the same code (a batch of one per call):
what a deployment's client runs, and the simulation's ``train.batched = false``. The tests check both
against a plain ``torch.nn`` + ``torch.optim`` loop per client (equal within float tolerance when dropout is
off; with dropout the masks are drawn differently).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch
import torch.nn.functional as F
from torch import Tensor

from securefgl.training.batched import GradSink, GraphBatch
from securefgl.training.optim import OptimizerStore, StackedOptimizer

if TYPE_CHECKING:
    from securefgl.algorithms.base import Client

__all__ = [
    "TrainedClients",
    "client_batch",
    "make_optimizer",
    "predict_shared",
    "predict_stacked",
    "stack_params",
    "train_clients",
    "train_each_client",
    "seed_from",
    "workspace_generator",
]


@dataclass
class TrainedClients:
    """The result of local training.

    Args:
        ids: Client ids, in the order of the stacked first dimension (not necessarily the order of the
            clients passed in: see :func:`train_clients`).
        params: ``name -> (K, ...)`` trained parameters (no grad).
        losses: ``(K,)`` training loss of each client in its last epoch (NaN for a client without train nodes).
        skipped: Clients without train nodes left out of ``params`` (``batch_order`` mode only): their
            parameters are the initial ones.
    """

    ids: list[int]
    params: dict[str, Tensor]
    losses: Tensor
    skipped: list[int] = field(default_factory=list)

    def client(self, i: int) -> dict[str, Tensor]:
        """Client at position ``i``: views into the stacked tensors."""
        return {k: v[i] for k, v in self.params.items()}

    def position(self, client_id: int) -> int:
        """Row of ``client_id`` in the stacked tensors."""
        return self.ids.index(client_id)

    def in_order(self, ids: Sequence[int]) -> TrainedClients:
        """The same result with rows in the order of ``ids`` (a copy only if the order differs)."""
        if list(ids) == self.ids:
            return self
        idx = torch.tensor([self.ids.index(i) for i in ids], device=self.losses.device)
        return TrainedClients(
            list(ids), {n: v.index_select(0, idx) for n, v in self.params.items()}, self.losses[idx]
        )


def make_optimizer(
    params: Sequence[Tensor], name: str, lr: float, weight_decay: float, momentum: float = 0.0
):
    """The optimiser a client uses (``adam`` or ``sgd``)."""
    if name == "adam":
        return torch.optim.Adam(params, lr=lr, weight_decay=weight_decay)
    if name == "sgd":
        return torch.optim.SGD(params, lr=lr, weight_decay=weight_decay, momentum=momentum)
    raise ValueError(f"unknown optimizer {name!r}; valid: 'adam', 'sgd'")


def client_batch(clients: Sequence[Client]) -> GraphBatch:
    """The padded union of these clients' graphs (client side only), built once.

    A batch of one is kept in that client's own state; a batch of several in the workspace the
    simulation gives them.
    """
    if len(clients) == 1:
        own = clients[0].state
        if "graph_batch" not in own:
            own["graph_batch"] = GraphBatch.from_graphs([clients[0].data])
        return own["graph_batch"]
    key = ("graph_batch", tuple(c.id for c in clients))
    ws = clients[0].workspace
    cache = ws.setdefault("graph_batches", {})
    if key not in cache:
        if len(cache) >= 4:  # bound memory when the sampled set changes every round
            cache.pop(next(iter(cache)))
        cache[key] = GraphBatch.from_graphs([c.data for c in clients])
    return cache[key]


def _store(clients: Sequence[Client], key: str) -> OptimizerStore:
    stores = clients[0].workspace.setdefault("optimizer_state", {})
    if key not in stores:
        stores[key] = OptimizerStore()
    return stores[key]


def stack_params(init: Mapping[str, Tensor] | Sequence[Mapping[str, Tensor]], k: int) -> dict[str, Tensor]:
    """Stacked ``(k, ...)`` copies: ``init`` shared by all (one mapping) or one mapping per client."""
    if isinstance(init, Mapping):
        return {n: v.detach().unsqueeze(0).repeat(k, *([1] * v.dim())) for n, v in init.items()}
    return {n: torch.stack([p[n].detach() for p in init]) for n in init[0]}


def _initial(init, stacked: bool, i: int | None) -> dict[str, Tensor]:
    """Client ``i``'s starting parameters (detached); ``i=None``: the first (or shared) ones."""
    if stacked:
        return {n: v.detach() if i is None else v[i].detach() for n, v in init.items()}
    if isinstance(init, Mapping):
        return {n: v.detach() for n, v in init.items()}
    return {n: v.detach() for n, v in init[0 if i is None else i].items()}


def _batch_leaves(init, stacked: bool, perm: Tensor, perm_list: list[int], k: int) -> dict[str, Tensor]:
    """The ``(k, ...)`` trainable leaves in batch order (rows ``perm`` of the clients' starting parameters)."""
    if stacked:
        leaves = {n: v.detach().index_select(0, perm) for n, v in init.items()}
    elif isinstance(init, Mapping):
        leaves = {n: v.detach().unsqueeze(0).repeat(k, *([1] * v.dim())) for n, v in init.items()}
    else:
        leaves = {n: torch.stack([init[i][n].detach() for i in perm_list]) for n in init[0]}
    for v in leaves.values():
        v.requires_grad_(True)
    return leaves


def _train_targets(batch: GraphBatch, k: int) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """``(rows, owner, target, counts)``: the train rows of the union, their client and label, and the
    number of train rows of each client."""
    rows = batch.masks["train_mask"].nonzero().squeeze(1)
    owner = batch.row_client[rows]
    target = batch.y[rows]
    counts = torch.bincount(owner, minlength=k).to(batch.x.dtype)
    return rows, owner, target, counts


def _run_epochs(
    model, leaves, batch, opt, targets, k, prox_mu, center, generator, epochs: int, last: Tensor
) -> Tensor:
    """``epochs`` full-batch epochs; the per-client losses of the last one (``last`` if there is none)."""
    rows, owner, target, counts = targets
    sink = GradSink([v for v in leaves.values() if v.dim() >= 3])
    batch.grad_sink = sink
    try:
        for _ in range(epochs):
            last = _epoch(
                model,
                leaves,
                batch,
                opt,
                sink,
                rows,
                owner,
                target,
                counts,
                k,
                prox_mu,
                center,
                generator,
            )
    finally:
        batch.grad_sink = None
    return last


def _unbind(clients: Sequence[Client], leaves: dict[str, Tensor], perm: Tensor, init, stacked: bool):
    """The trained leaves back in ``clients`` order; clients without train nodes get their initial rows."""
    k = len(clients)
    result = {}
    for n, v in leaves.items():
        full = torch.empty((k, *v.shape[1:]), dtype=v.dtype, device=v.device)
        full.index_copy_(0, perm, v.detach())
        for i in range(k):
            if clients[i].num_train == 0:
                full[i] = _initial(init, stacked, i)[n]
        result[n] = full
    return result


def train_clients(
    model: torch.nn.Module,
    clients: Sequence[Client],
    init: Mapping[str, Tensor] | Sequence[Mapping[str, Tensor]] | Mapping[str, Tensor],
    *,
    epochs: int,
    lr: float,
    optimizer: str = "adam",
    weight_decay: float = 0.0,
    momentum: float = 0.0,
    prox_mu: float = 0.0,
    prox_center: Mapping[str, Tensor] | None = None,
    generator: torch.Generator | None = None,
    stacked: bool = False,
    state_key: str | None = None,
    batch_order: bool = False,
) -> TrainedClients:
    r"""Train every client's copy of ``model`` together (see the module docstring).

    Args:
        model: A securefgl model (has ``batched_forward``); only its structure is used.
        clients: The clients of the round (each with ``data.train_mask``).
        init: Starting parameters: one mapping shared by all clients, one mapping per client, or (with
            ``stacked=True``) a mapping of already stacked ``(K, ...)`` tensors in ``clients`` order.
        epochs: Full-batch epochs.
        lr, optimizer, weight_decay, momentum: The optimiser (re-created for this call).
        prox_mu: FedProx proximal weight: adds :math:`\frac{\mu}{2}\lVert W_k - W_c\rVert^2` per client.
        prox_center: :math:`W_c` (shared by all clients), required when ``prox_mu > 0``.
        generator: Dropout masks (on the clients' device).
        stacked: ``init`` is already stacked.
        state_key: Keep each client's optimiser state between calls under this key (in the clients' shared
            workspace); ``None`` starts every call with a fresh optimiser.
        batch_order: Return the rows in the batch layout's order (largest client first) and leave clients
            without train nodes out (``result.skipped``), which avoids one copy of all K models;
            ``result.ids`` says the order either way.

    Returns:
        Stacked parameters, rows in ``clients`` order (or the batch order, see ``batch_order``); clients
        without train nodes keep their initial parameters.
    """
    k = len(clients)
    device = clients[0].device
    active = [i for i, c in enumerate(clients) if c.num_train > 0]
    losses = torch.full((k,), float("nan"), device=device)
    if not active:
        initial = functools.partial(_initial, init, stacked)
        return TrainedClients([c.id for c in clients], _restack(initial, k, stacked, init), losses)
    sub = [clients[i] for i in active]
    batch = client_batch(sub)
    # Stacked leaves in batch order (largest client first), so every bucket is a contiguous slice.
    perm_list = [active[b] for b in batch.order]
    perm = torch.tensor(perm_list, device=device)
    leaves = _batch_leaves(init, stacked, perm, perm_list, len(sub))
    batch_ids = [clients[i].id for i in perm_list]
    store = _store(clients, state_key) if state_key is not None else None
    state = None
    if store is not None:
        state = store.gather(batch_ids, leaves, StackedOptimizer.names_for(leaves, optimizer, momentum))
    opt = StackedOptimizer(leaves, optimizer, lr, weight_decay, momentum, state=state)
    targets = _train_targets(batch, len(sub))
    center = {n: v.detach() for n, v in (prox_center or {}).items()}
    if prox_mu > 0 and not center:
        raise ValueError("prox_mu > 0 needs prox_center")
    none = torch.full((len(sub),), float("nan"), device=device)  # the losses when no epoch runs
    last = _run_epochs(model, leaves, batch, opt, targets, len(sub), prox_mu, center, generator, epochs, none)
    if store is not None:
        store.scatter(batch_ids, *opt.state())
    del opt
    losses[perm] = last
    if batch_order or (len(sub) == k and perm_list == list(range(k))):
        # Hand the stacked leaves back as they are, in batch order (no copy of the K models).
        ids = [clients[i].id for i in perm_list]
        skipped = [c.id for c in clients if c.num_train == 0]
        return TrainedClients(ids, {n: v.detach() for n, v in leaves.items()}, last.clone(), skipped)
    return TrainedClients([c.id for c in clients], _unbind(clients, leaves, perm, init, stacked), losses)


def _epoch(
    model, leaves, batch, opt, sink, rows, owner, target, counts, k, prox_mu, center, generator
) -> Tensor:
    """One full-batch epoch of every client at once; returns the per-client losses (before the step)."""
    opt.zero_grad()
    out = model.batched_forward(leaves, batch, training=True, generator=generator)
    per_node = F.cross_entropy(out[rows], target, reduction="none")
    per_client = torch.zeros(k, dtype=per_node.dtype, device=per_node.device)
    per_client = per_client.index_add(0, owner, per_node) / counts
    objective = per_client.sum()
    if prox_mu > 0:
        prox = sum(((leaves[n] - center[n]) ** 2).sum() for n in leaves)
        objective = objective + 0.5 * prox_mu * prox
    objective.backward()
    sink.collect()
    opt.step()
    return per_client.detach()


def train_each_client(
    model: torch.nn.Module,
    clients: Sequence[Client],
    init: Mapping[str, Tensor] | Sequence[Mapping[str, Tensor]],
    *,
    stacked: bool = False,
    batch_order: bool = False,
    **options: Any,
) -> TrainedClients:
    """Every client alone, as a batch of one through :func:`train_clients` (same arguments and result).

    This is what a deployment's client runs (its batch is itself), and the simulation's ``train.batched =
    false``: the same code path as the batched round, one client per call. Rows are in ``clients`` order
    (``batch_order`` is accepted for a uniform signature).
    """
    parts = []
    for i, c in enumerate(clients):
        if stacked:
            own: Mapping[str, Tensor] = {n: v[i] for n, v in init.items()}  # type: ignore[union-attr]
        elif isinstance(init, Mapping):
            own = init
        else:
            own = init[i]
        parts.append(train_clients(model, [c], own, **options))
    return TrainedClients(
        [c.id for c in clients],
        {n: torch.cat([p.params[n] for p in parts]) for n in parts[0].params},
        torch.cat([p.losses for p in parts]),
    )


def _restack(initial, k: int, stacked: bool, init) -> dict[str, Tensor]:
    if stacked:
        return {n: v.detach().clone() for n, v in init.items()}
    if isinstance(init, Mapping):
        return stack_params(init, k)
    return stack_params(list(init), k)


def workspace_generator(clients: Sequence[Client]) -> torch.Generator | None:
    """The generator for work done for several clients at once (dropout masks of batched training).

    The engine seeds it per run in the clients' shared workspace; ``None`` (global RNG) if absent.
    """
    return clients[0].workspace.get("generator") if clients else None


def seed_from(generator: torch.Generator) -> torch.Generator:
    """A CPU generator seeded from ``generator`` (model initialisation draws on the CPU)."""
    seed = int(torch.randint(0, 2**62, (1,), generator=generator, device=generator.device))
    return torch.Generator().manual_seed(seed)


@torch.no_grad()
def predict_shared(
    model: torch.nn.Module, params: Mapping[str, Tensor], clients: Sequence[Client]
) -> dict[int, Tensor]:
    """Class scores of one shared model on every client's graph, in one forward over their union.

    The union is disjoint, so this equals one forward per client.
    """
    batch = client_batch(clients)
    model.eval()
    out = torch.func.functional_call(model, dict(params), (batch.x, batch.edge_index))
    parts = batch.split(out)
    return {c.id: parts[i] for i, c in enumerate(clients)}


@torch.no_grad()
def predict_stacked(
    model: torch.nn.Module, params: Mapping[str, Tensor], clients: Sequence[Client]
) -> dict[int, Tensor]:
    """Class scores of per-client models (stacked ``(K, ...)`` in ``clients`` order), all at once."""
    batch = client_batch(clients)
    perm = torch.tensor(batch.order, device=clients[0].device)
    ordered = {n: v.index_select(0, perm) for n, v in params.items()}
    out = model.batched_forward(ordered, batch, training=False, generator=None)
    parts = batch.split(out)
    return {c.id: parts[i] for i, c in enumerate(clients)}
