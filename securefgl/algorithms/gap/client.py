r"""GAP's client half: degree bounding, DP-SGD of the encoder, the noisy aggregates (once), DP-SGD of the classifier.

Per client :math:`k`, on its own subgraph only:

1. ``init_client``: the undirected edge set, degree-bounded to ``D`` under node-level DP;
2. encoder phase, every round: start from the broadcast encoder and, under node-level DP, upload one DP-SGD
   step's clipped per-node gradient sum plus a noise share (:func:`securefgl.privacy.dp_gradient_sum`); else
   train it with its head for ``local_epochs`` full-batch Adam epochs and upload FedAvg's blocks;
3. first use in the classifier phase: :math:`X^{(0..K)}` from the final global encoder and the noisy
   aggregation (:func:`securefgl.privacy.perturbed_aggregates`), computed once and kept in ``client.state``:
   recomputing would spend the aggregation budget again;
4. classifier phase, every round: the same for the classifier on the local training nodes' rows of
   :math:`X^{(0..K)}` (the residual classifier: their features and :math:`X^{(1..K)}`; the head: the frozen
   encoder's logits and the exact :math:`X^{(1..K)}`, every training node in every step, with the noise of
   the head's sensitivity, ``(2D + 1) C`` for one hop; the noisy head: the same on the noised
   :math:`X^{(1..K)}`, at sensitivity ``C``).

Evaluation applies the broadcast model to the client's own aggregates, client side.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any, ClassVar

import torch
import torch.nn.functional as F

from securefgl.algorithms.base import Broadcast, Client, RoundState, Setting
from securefgl.algorithms.baselines.fedavg.schema import uses_delta
from securefgl.algorithms.gap.model import GAPModel, build_gap_model
from securefgl.algorithms.gap.plan import GAPPlan
from securefgl.algorithms.gap.schema import phase_params
from securefgl.privacy import bound_degree, dp_gradient_sum, perturbed_aggregates, undirected_edges

__all__ = ["GAPClient"]


class GAPClient:
    """Client-side methods of :class:`~securefgl.algorithms.gap.GAP` (a mixin of it)."""

    name: ClassVar[str]
    setting: Setting
    options: Any
    plan: GAPPlan

    def _node_private(self) -> bool:
        return self.options.private and self.options.privacy == "node"

    def init_client(self, client: Client) -> None:
        n = client.num_nodes
        if self._node_private():
            edges = bound_degree(
                client.data.edge_index, n, self.options.degree_bound, generator=client.generator
            )
        else:
            edges = undirected_edges(client.data.edge_index)
        if self.options.noise == "os":
            seed = int.from_bytes(os.urandom(8), "little")
        else:  # insecure-seeded: reproducible, from the client's own seeded generator
            seed = int(torch.randint(0, 2**62, (1,), generator=client.generator))
        client.state["gap"] = {"edges": edges, "noise": torch.Generator().manual_seed(seed)}

    def _model(self, broadcast: Broadcast, device: torch.device) -> GAPModel:
        model = build_gap_model(
            self.setting, self.options, self.plan.hops, dropout=self.setting.model.dropout
        )
        model = model.to(device)
        model.load_flat({n: v.to(device) for n, v in broadcast.items()})
        return model

    def _aggregates(self, client: Client, model: GAPModel) -> list[torch.Tensor]:
        """:math:`X^{(0..K)}` of every local node, computed on first use (one aggregation per run)."""
        st = client.state["gap"]
        if "aggregates" not in st:
            model.eval()
            with torch.no_grad():
                known = None  # "labels": the labels this client trains on, zero rows elsewhere
                if self.options.embedding == "labels":
                    y = client.data.y.clamp_min(0)
                    known = F.one_hot(y, self.setting.num_classes) * client.data.train_mask[:, None]
                x0 = model.embedding(client.data.x, known)
                # 0 without privacy, and in the plan of the (exact) head
                noise = self.plan.aggregation_noise_std if self.options.private else 0.0
                aggs = perturbed_aggregates(
                    x0.cpu(), st["edges"].cpu(), self.plan.hops, noise_std=noise, generator=st["noise"]
                )
            st["aggregates"] = [a.to(client.device) for a in aggs]
        return st["aggregates"]

    def _train(
        self, client: Client, module: torch.nn.Module, inputs: list[torch.Tensor], y: torch.Tensor
    ) -> list[float]:
        train = self.setting.train
        module.generator = client.generator  # seeded dropout
        opt = (
            torch.optim.Adam(module.parameters(), lr=train.lr)
            if train.optimizer == "adam"
            else torch.optim.SGD(module.parameters(), lr=train.lr, momentum=train.momentum)
        )
        losses = []
        module.train()
        for _ in range(train.local_epochs):
            opt.zero_grad()
            loss = F.cross_entropy(module(*inputs), y)
            loss.backward()
            opt.step()
            losses.append(float(loss.detach()))
        return losses

    def client_steps(self, clients: Sequence[Client], rs: RoundState) -> dict[int, Any]:
        delta = uses_delta(self.options, self.setting.protocol)
        uniform = delta or self._node_private()
        bound = self.options.param_bound
        out: dict[int, Any] = {}
        for c in clients:
            model = self._model(rs.broadcast, c.device)
            start = phase_params(rs.broadcast, rs.phase, self.options.classifier)
            mask = c.data.train_mask
            if rs.phase == "encoder":
                module: torch.nn.Module = model.enc
                inputs = [c.data.x[mask]]
            else:
                assert model.cls is not None
                module = model.cls
                inputs = [a[mask] for a in model.classifier_inputs(c.data.x, self._aggregates(c, model))]
            if self._node_private():
                module.generator = c.generator  # type: ignore[assignment]  # seeded dropout
                rate, share = self.plan.dp_step(rs.phase, self.options.sample_rate)
                grads, loss = dp_gradient_sum(
                    module,
                    inputs,
                    c.data.y[mask],
                    sample_rate=rate,
                    clip=self.options.clip,
                    noise_std=share,
                    sampling_generator=c.generator,
                    noise_generator=c.state["gap"]["noise"],
                )
                c.record_loss(loss)
                out[c.id] = {f"g.{n}": g for n, g in grads.items()}
                continue
            trained = c.num_train > 0
            if trained:
                losses = self._train(c, module, inputs, c.data.y[mask])
                if losses:
                    c.record_loss(sum(losses) / len(losses))
            new = phase_params(model.flat_state(), rs.phase, self.options.classifier)
            weight = (1 if uniform else c.num_train) if trained else 0
            if delta:
                up = {
                    f"d.{n}": (v.clamp(-bound, bound) - start[n].to(v)) * (1 if trained else 0)
                    for n, v in new.items()
                }
            else:
                up = {f"w.{n}": v.clamp(-bound, bound) * weight for n, v in new.items()}
            up["n"] = torch.tensor([weight], dtype=torch.int64)
            out[c.id] = up
        return out

    def evaluate(
        self, clients: Sequence[Client], broadcast: Broadcast, rs: RoundState
    ) -> dict[int, torch.Tensor]:
        out = {}
        for c in clients:
            model = self._model(broadcast, c.device)
            model.eval()
            with torch.no_grad():
                if self.plan.hops == 0 or rs.phase == "encoder":
                    out[c.id] = model.enc(c.data.x)
                else:
                    assert model.cls is not None
                    out[c.id] = model.cls(*model.classifier_inputs(c.data.x, self._aggregates(c, model)))
        return out
