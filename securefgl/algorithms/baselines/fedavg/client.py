r"""FedAvg's client half: the clients of a round train together and upload their summands.

.. math::
    w_k \leftarrow \mathrm{LocalTrain}_E(w;\,G_k),\qquad
    \text{upload}_k = \big(\,n_k\,\mathrm{clip}_B(w_k),\;\; n_k\,\big)
    \quad\text{or}\quad \big(\mathrm{clip}_B(w_k) - w,\;\; 1\big)

Training runs on :mod:`securefgl.training.local_training` (batched over clients); FedAvg+FT's fine-tuned
personal models stay in the clients' workspace (client side).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import torch

from securefgl.algorithms.base import Broadcast, Client, Phase, RoundState, Setting
from securefgl.algorithms.baselines.fedavg.schema import uses_delta
from securefgl.training.local_training import (
    predict_shared,
    predict_stacked,
    train_clients,
    train_each_client,
    workspace_generator,
)

__all__ = ["FedAvgClient"]


class FedAvgClient:
    """Client-side methods of :class:`~securefgl.algorithms.baselines.fedavg.FedAvg` (a mixin of it)."""

    name: ClassVar[str]
    setting: Setting
    options: Any

    #: FedProx's proximal weight; 0 for FedAvg.
    def prox_mu(self) -> float:
        return 0.0

    def _train(
        self,
        clients: Sequence[Client],
        init: Any,
        epochs: int,
        center: Mapping | None,
        key: str,
        stacked: bool = False,
        batch_order: bool = False,
    ) -> Any:
        train = self.setting.train
        model = self.setting.make_model(generator=torch.Generator().manual_seed(0))  # structure only
        fn = train_clients if train.batched else train_each_client
        return fn(
            model,
            clients,
            init,
            epochs=epochs,
            lr=train.lr,
            optimizer=train.optimizer,
            weight_decay=train.weight_decay,
            momentum=train.momentum,
            prox_mu=self.prox_mu(),
            prox_center=center,
            generator=workspace_generator(clients),
            stacked=stacked,
            state_key=key if train.optimizer_state == "persistent" else None,
            batch_order=batch_order,
        )

    def client_steps(self, clients: Sequence[Client], rs: RoundState) -> dict[int, Any]:
        glob = {n: v.to(clients[0].device) for n, v in rs.broadcast.items()}
        res = self._train(
            clients,
            glob,
            self.setting.train.local_epochs,
            glob if self.prox_mu() > 0 else None,
            f"{self.name}.train",
            batch_order=True,
        )
        by_id = {c.id: c for c in clients}
        order = [by_id[i] for i in res.ids]  # rows of the stacked result
        if uses_delta(self.options, self.setting.protocol):
            return self._delta_uploads(clients, order, res, glob)
        counts = [1 if self.options.weighting == "uniform" else c.num_train for c in order]
        weights = torch.tensor(counts, dtype=torch.float32, device=clients[0].device)
        bound = self.options.param_bound
        out: dict[int, Any] = {c.id: {} for c in clients}
        for n, v in res.params.items():
            # one stacked product, then views per client (unbound once)
            num = v.clamp(-bound, bound).mul_(weights.view(-1, *([1] * (v.dim() - 1))))
            for c, part in zip(order, num.unbind(0), strict=True):
                out[c.id][f"w.{n}"] = part
        for i, c in enumerate(order):
            c.record_loss(res.losses[i])
            out[c.id]["n"] = torch.tensor([counts[i]], dtype=torch.int64)
        for cid in res.skipped:  # no train node: nothing learnt, weight 0 (or 1 x the broadcast if uniform)
            w = 1 if self.options.weighting == "uniform" else 0
            out[cid] = {f"w.{n}": v.clamp(-bound, bound) * w for n, v in glob.items()}
            out[cid]["n"] = torch.tensor([w], dtype=torch.int64)
        return out

    def _delta_uploads(
        self, clients: Sequence[Client], order: Sequence[Client], res: Any, glob: Mapping[str, torch.Tensor]
    ) -> dict[int, Any]:
        """DP-FedAvg uploads: ``d.<param> = clip_B(w_k) - w`` (unweighted) and ``n = 1`` per trained client."""
        bound = self.options.param_bound
        out: dict[int, Any] = {c.id: {} for c in clients}
        for n, v in res.params.items():
            delta = v.clamp(-bound, bound) - glob[n].unsqueeze(0)
            for c, part in zip(order, delta.unbind(0), strict=True):
                out[c.id][f"d.{n}"] = part
        for i, c in enumerate(order):
            c.record_loss(res.losses[i])
            out[c.id]["n"] = torch.tensor([1], dtype=torch.int64)
        for cid in res.skipped:  # no train node: no change, and not counted
            out[cid] = {f"d.{n}": torch.zeros_like(v) for n, v in glob.items()}
            out[cid]["n"] = torch.tensor([0], dtype=torch.int64)
        return out

    def personalize_clients(self, clients: Sequence[Client], broadcast: Broadcast, phase: Phase) -> None:
        glob = {n: v.to(clients[0].device) for n, v in broadcast.items()}
        center = glob if self.prox_mu() > 0 else None  # FedProx fine-tunes near the global model too
        res = self._train(clients, glob, self.options.finetune_epochs, center, f"{self.name}.finetune")
        clients[0].workspace["fedavg_personal"] = (tuple(c.id for c in clients), res.params)

    # ------------------------------------------------------------------ evaluation -------------------------

    def evaluate(
        self, clients: Sequence[Client], broadcast: Broadcast, rs: RoundState
    ) -> dict[int, torch.Tensor]:
        model = self.setting.make_model(generator=torch.Generator().manual_seed(0))
        personal = clients[0].workspace.get("fedavg_personal")
        if personal is not None and personal[0] == tuple(c.id for c in clients):
            return predict_stacked(model, personal[1], clients)
        glob = {n: v.to(clients[0].device) for n, v in broadcast.items()}
        return predict_shared(model, glob, clients)
