r"""Local (standalone) training: every client trains its own model on its own subgraph; nothing is sent.

.. math::
    w_k \leftarrow \mathrm{LocalTrain}_E(w_k;\,G_k) \quad\text{every round, for every client } k

No sum is computed, so the protocol is unused and the server learns nothing. Each client initialises its
model from its own generator; a round is ``E`` local epochs (optimiser state kept or reset as
``train.optimizer_state`` says, as in FedAvg), and the clients train together (:func:`securefgl.training.local_training.train_clients`). This is the lower reference
of personalised federated learning.

Shapes:
    No upload, no download. Per-client state: one model, kept stacked ``(K, ...)`` on the client side.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from securefgl.algorithms.base import Algorithm, Broadcast, Client, Phase, RoundState
from securefgl.algorithms.registry import register_algorithm
from securefgl.training.local_training import (
    predict_stacked,
    seed_from,
    stack_params,
    train_clients,
    train_each_client,
    workspace_generator,
)

__all__ = ["Local"]

_KEY = "local_params"


@register_algorithm
class Local(Algorithm):
    """Standalone training without communication (see the module docstring).

    Client side only: nothing is summed, so there is no schema and no server half (the server state is the
    default ``None``).
    """

    name = "local"
    uses_protocol = False
    batched = True

    def phases(self, train: Any) -> Sequence[Phase]:
        return (Phase("train", kind="rounds", rounds=train.rounds, sample=False),)

    def _initial(self, clients: Sequence[Client]) -> dict[str, torch.Tensor]:
        per = []
        for c in clients:
            model = self.setting.make_model(generator=seed_from(c.generator))
            per.append({n: p.detach() for n, p in model.named_parameters()})
        return stack_params(per, len(clients))

    def client_steps(self, clients: Sequence[Client], rs: RoundState) -> dict[int, Any]:
        ws = clients[0].workspace
        ids = tuple(c.id for c in clients)
        if ws.get(_KEY) is None or ws[_KEY][0] != ids:
            ws[_KEY] = (ids, self._initial(clients))
        train = self.setting.train
        fn = train_clients if train.batched else train_each_client
        model = self.setting.make_model(generator=torch.Generator().manual_seed(0))  # structure only
        res = fn(
            model,
            clients,
            ws[_KEY][1],
            epochs=train.local_epochs,
            lr=train.lr,
            optimizer=train.optimizer,
            weight_decay=train.weight_decay,
            momentum=train.momentum,
            generator=workspace_generator(clients),
            stacked=True,
            state_key="local" if train.optimizer_state == "persistent" else None,
        )
        ws[_KEY] = (ids, res.params)
        for i, c in enumerate(clients):
            c.record_loss(res.losses[i])
        return {c.id: None for c in clients}

    def evaluate(
        self, clients: Sequence[Client], broadcast: Broadcast, rs: RoundState
    ) -> dict[int, torch.Tensor]:
        ws = clients[0].workspace
        if ws.get(_KEY) is None:
            ws[_KEY] = (tuple(c.id for c in clients), self._initial(clients))
        model = self.setting.make_model(generator=torch.Generator().manual_seed(0))
        return predict_stacked(model, ws[_KEY][1], clients)
