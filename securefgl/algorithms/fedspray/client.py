r"""FedSpray's client half: per-client state, the batched local round, the uploads, evaluation.

Part of :mod:`securefgl.algorithms.fedspray` (the method is documented on
:class:`~securefgl.algorithms.fedspray.FedSpray`). Every method receives one client batch (all simulated
clients, or one in a deployment) and reads only those clients' own data and the public broadcast.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import torch

from securefgl.algorithms.base import Broadcast, Client, RoundState, Setting
from securefgl.algorithms.fedspray._batch import client_batch
from securefgl.algorithms.fedspray._train import (
    ClientState,
    client_uploads,
    gnn_logits,
    local_update,
    stack_states,
    unstack_states,
)
from securefgl.algorithms.fedspray.encoder import ENCODER_KEYS, encoder_shapes
from securefgl.algorithms.fedspray.models import to_math_layout, uniform01_like
from securefgl.algorithms.fedspray.options import FedSprayOptions, Hyper
from securefgl.algorithms.fedspray.schema import PROXY_KEY
from securefgl.errors import TrainingError
from securefgl.training.batched import GraphBatch

__all__ = ["FedSprayClient"]

log = logging.getLogger(__name__)

_STATE = "fedspray"
_PACK = "fedspray_pack"


class FedSprayClient:
    """FedSpray's client-side steps (a mixin of :class:`~securefgl.algorithms.fedspray.FedSpray`)."""

    setting: Setting
    options: FedSprayOptions
    hyper: Hyper

    def init_client(self, client: Client) -> None:
        from securefgl.training.local_training import seed_from

        gen = seed_from(client.generator)
        model = self.setting.make_model(generator=gen)
        gnn = {n: p.detach().clone() for n, p in model.named_parameters()}
        if self.options.gnn_init == "uniform01":
            gnn = uniform01_like(gnn, gen)
        f, c, d = self.setting.num_features, self.setting.num_classes, self.options.proxy_dim
        dev = client.device
        enc = {k: torch.zeros(s, device=dev) for k, s in encoder_shapes(f, d, c).items()}
        proxy = torch.full((client.num_nodes, d), float(self.options.proxy_init), device=dev)
        client.state[_STATE] = ClientState({k: v.to(dev) for k, v in gnn.items()}, enc, proxy)
        if client.num_train == 0:
            log.warning(
                "fedspray: client %d has no labelled nodes; it contributes zero weight to the encoder and "
                "proxy averages (it still trains its GNN on distillation targets)",
                client.id,
            )

    def _pack(self, clients: Sequence[Client]) -> GraphBatch:
        ws = clients[0].workspace
        ids = tuple(c.id for c in clients)
        cached = ws.get(_PACK)
        if cached is None or cached[0] != ids:
            cached = (ids, client_batch([c.data for c in clients], num_classes=self.setting.num_classes))
            ws[_PACK] = cached
        return cached[1]

    def client_steps(self, clients: Sequence[Client], rs: RoundState) -> dict[int, Any]:
        from securefgl.training.local_training import workspace_generator

        if len(clients) > 1 and not self.setting.train.batched:
            # train.batched=false: each client alone, the float order a deployed client (a batch of one) has
            return {k: v for c in clients for k, v in self.client_steps([c], rs).items()}
        pack = self._pack(clients)
        enc, proxies = _unpack_broadcast(rs.broadcast)
        states = [c.state[_STATE] for c in clients]
        stacked = stack_states(states, pack, self.hyper)
        result = local_update(pack, stacked, enc, proxies, self.hyper, workspace_generator(clients))
        unstack_states(stacked, states, pack)
        for i, c in enumerate(clients):
            c.record_loss(float(result.gnn_loss[i]))
        uploads, notes = client_uploads(
            result, pack, [c.id for c in clients], enc, proxies, self.hyper, round_index=rs.global_round
        )
        if any(notes["clipped_elements"].values()):
            log.warning(
                "fedspray round %d: clipped upload elements %s", rs.global_round, notes["clipped_elements"]
            )
        return uploads

    def client_step(self, client: Client, rs: RoundState) -> Any:
        """One client alone (the reference path): the batched step with a batch of one."""
        return self.client_steps([client], rs)[client.id]

    def evaluate(
        self, clients: Sequence[Client], broadcast: Broadcast, rs: RoundState
    ) -> dict[int, torch.Tensor]:
        """Every client's personalised GNN (eval mode) on its own graph."""
        if len(clients) > 1 and not self.setting.train.batched:
            return {k: v for c in clients for k, v in self.evaluate([c], broadcast, rs).items()}
        pack = self._pack(clients)
        keys = list(clients[0].state[_STATE].gnn)
        params = {k: to_math_layout(k, torch.stack([c.state[_STATE].gnn[k] for c in clients])) for k in keys}
        with torch.no_grad():
            out = gnn_logits(pack, params, self.hyper)
        return {c.id: out[s:e] for c, (s, e) in zip(clients, pack.segments(), strict=True)}


def _unpack_broadcast(broadcast: Broadcast) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
    missing = [k for k in (*(f"enc.{k}" for k in ENCODER_KEYS), PROXY_KEY) if k not in broadcast]
    if missing:
        raise TrainingError(f"fedspray broadcast lacks {missing}; got {sorted(broadcast)}")
    return {k: broadcast[f"enc.{k}"] for k in ENCODER_KEYS}, broadcast[PROXY_KEY]
