r"""Centralized training: one model on the whole graph (the upper reference, no privacy).

.. math::
    w \leftarrow \arg\min_w \sum_{v \in V_L} \mathrm{CE}\big(f_w(A, X)_v, y_v\big)

on the global graph :math:`G` (every client's nodes *and* the cross-client edges), with
:math:`V_L` the union of the clients' training nodes. Nothing is summed; the protocol is unused. Each round
runs ``E`` epochs with one persistent optimiser, so ``rounds`` and ``eval_every`` mean the same as in
federated runs. Predictions on the global graph are evaluated on each client's own nodes, so the metrics
aggregate over clients exactly as for the federated algorithms.

Shapes:
    x ``(N, F)``, edge_index ``(2, E)`` of the whole graph -> logits ``(N, C)``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

import torch
import torch.nn.functional as F

from securefgl.algorithms.base import Algorithm, Broadcast, Client, Phase, RoundState
from securefgl.algorithms.registry import register_algorithm
from securefgl.training.local_training import make_optimizer, seed_from, workspace_generator

__all__ = ["Centralized"]

_KEY = "centralized"


@register_algorithm
class Centralized(Algorithm):
    """One model trained on the whole graph (see the module docstring).

    Client side only (the non-private reference): nothing is summed, so there is no schema and no server half.
    """

    name = "centralized"
    uses_protocol = False
    #: The engine puts the whole graph (``FederatedGraph.global_data()``) in ``workspace["global_data"]``.
    needs_global_graph: ClassVar[bool] = True

    def phases(self, train: Any) -> Sequence[Phase]:
        return (Phase("train", kind="rounds", rounds=train.rounds, sample=False),)

    def _state(self, clients: Sequence[Client]) -> dict[str, Any]:
        ws = clients[0].workspace
        if _KEY not in ws:
            gen = workspace_generator(clients) or clients[0].generator
            model = self.setting.make_model(generator=seed_from(gen))
            train = self.setting.train
            opt = make_optimizer(
                list(model.parameters()), train.optimizer, train.lr, train.weight_decay, train.momentum
            )
            ws[_KEY] = {"model": model, "optimizer": opt}
        return ws[_KEY]

    def client_steps(self, clients: Sequence[Client], rs: RoundState) -> dict[int, Any]:
        state = self._state(clients)
        data = clients[0].workspace["global_data"]
        model, opt = state["model"], state["optimizer"]
        model.generator = workspace_generator(clients)
        model.train()
        loss = torch.tensor(float("nan"))
        for _ in range(self.setting.train.local_epochs):
            opt.zero_grad(set_to_none=True)
            out = model(data.x, data.edge_index)
            loss = F.cross_entropy(out[data.train_mask], data.y[data.train_mask])
            loss.backward()
            opt.step()
        for c in clients:
            c.record_loss(loss.detach())
        return {c.id: None for c in clients}

    @torch.no_grad()
    def evaluate(
        self, clients: Sequence[Client], broadcast: Broadcast, rs: RoundState
    ) -> dict[int, torch.Tensor]:
        model = self._state(clients)["model"]
        data = clients[0].workspace["global_data"]
        model.eval()
        out = model(data.x, data.edge_index)
        return {c.id: out[c.data.global_id.to(out.device)] for c in clients}
