r"""FedAvg (McMahan et al., AISTATS 2017), https://arxiv.org/abs/1602.05629, as a secure sum.

Client :math:`k` starts from the broadcast global model :math:`w`, trains ``E`` local epochs on its own
subgraph and uploads a numerator and a denominator block:

.. math::
    w_k \leftarrow \mathrm{LocalTrain}_E(w;\,G_k),\qquad
    \text{upload}_k = \big(\,n_k\,\mathrm{clip}_B(w_k),\;\; n_k\,\big)

with :math:`n_k` its number of training nodes (``weighting="train"``) or 1 (``"uniform"``) and
:math:`B` the public parameter bound. The server receives only the two sums and divides:

.. math::
    w \leftarrow \frac{\sum_k n_k\,\mathrm{clip}_B(w_k)}{\sum_k n_k}.

Each parameter tensor is one real block of bound :math:`n_{\max} B` (:math:`n_{\max}` the public node-count
bound); the denominator is an exact count block.

With ``upload="delta"`` (chosen automatically under a ``+dp`` protocol) the clients upload the DP-FedAvg form
(McMahan et al., ICLR 2018, https://arxiv.org/abs/1710.06963): the unweighted model change
:math:`\Delta_k = \mathrm{clip}_B(w_k) - w` in blocks marked for differential privacy (the DP wrapper
L2-clips and noises them), and a count of 1; the server applies
:math:`w \leftarrow w + \sum_k \Delta_k / \sum_k 1`. Weighting by node count would make one client's
influence, and so the noise needed, grow with its size; the delta form keeps the sensitivity at the clip norm. The clients of a round train together
(:func:`securefgl.training.local_training.train_clients`). With ``finetune_epochs > 0`` a local phase after the
last round fine-tunes the global model on each client (FedAvg+FT, the O-pFGL baseline).

Args:
    weighting: ``"train"`` (by train-node count) or ``"uniform"``; ``upload="delta"`` is always uniform.
        (default: ``"train"``)
    upload: ``"weights"`` (weighted model sums), ``"delta"`` (DP-FedAvg deltas, blocks marked ``dp``), or
        ``"auto"``: ``"delta"`` under a ``+dp`` protocol, else ``"weights"``. (default: ``"auto"``)
    param_bound: Public clip range of every parameter. (default: ``16.0``)
    finetune_epochs: Local fine-tuning epochs after federated training; 0 disables. (default: ``0``)

Shapes:
    Upload per client: one block per parameter tensor (the model's shapes) plus ``n`` ``(1,)``; download:
    the model's parameters. K clients per round.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import torch

from securefgl.algorithms.base import (
    Algorithm,
    Broadcast,
    Client,
    CompatibilityProblem,
    Phase,
    RoundState,
)
from securefgl.algorithms.registry import register_algorithm
from securefgl.errors import ConfigError
from securefgl.protocols.base import Sums
from securefgl.protocols.encoding import BlockSpec, SumSchema
from securefgl.training.local_training import (
    predict_shared,
    predict_stacked,
    train_clients,
    train_clients_sequential,
    workspace_generator,
)

__all__ = ["FedAvg"]


@register_algorithm
class FedAvg(Algorithm):
    """Federated averaging weighted by train-node count (see the module docstring)."""

    name = "fedavg"
    batched = True
    dp_blocks = True

    @dataclass(frozen=True)
    class Options:
        weighting: Literal["train", "uniform"] = "train"
        param_bound: float = 16.0
        finetune_epochs: int = 0
        upload: Literal["auto", "weights", "delta"] = "auto"

        def __post_init__(self) -> None:
            if self.upload not in ("auto", "weights", "delta"):
                raise ConfigError(
                    f"algorithm.options.upload: invalid value {self.upload!r}; valid choices: 'auto', 'weights', "
                    "'delta'"
                )
            if not self.param_bound > 0:
                raise ConfigError(f"algorithm.options.param_bound must be > 0, got {self.param_bound}")
            if self.finetune_epochs < 0:
                raise ConfigError(
                    f"algorithm.options.finetune_epochs must be >= 0, got {self.finetune_epochs}"
                )

    #: FedProx's proximal weight; 0 for FedAvg.
    def prox_mu(self) -> float:
        return 0.0

    @classmethod
    def compatibility(
        cls, *, protocol: str, model: str, dataset: str, options: Any, num_clients: int | None
    ) -> list[CompatibilityProblem]:
        if isinstance(options, Mapping):
            upload = options.get("upload", "auto")
        else:
            upload = getattr(options, "upload", "auto")
        if cls.dp_blocks and protocol.endswith("+dp") and upload == "weights":
            return [
                CompatibilityProblem(
                    f"protocol {protocol!r} noises only blocks marked for DP, and upload='weights' marks none",
                    "use upload='delta' or 'auto' (the default), or a protocol without '+dp'",
                    True,
                )
            ]
        return []

    def _delta(self) -> bool:
        """Whether clients upload DP-FedAvg deltas (see ``upload``)."""
        upload = getattr(self.options, "upload", "weights")  # subclasses without the option upload weights
        if upload == "auto":
            return self.setting.protocol.endswith("+dp")
        return upload == "delta"

    # ------------------------------------------------------------------ structure ------------------------

    def phases(self, train: Any) -> Sequence[Phase]:
        phases = [Phase("train", kind="rounds", rounds=train.rounds)]
        if self.options.finetune_epochs > 0:
            phases.append(Phase("finetune", kind="local"))
        return tuple(phases)

    # ------------------------------------------------------------------ server -----------------------------

    def init_server(self, generator: torch.Generator) -> dict[str, Any]:
        model = self.setting.make_model(generator=generator)
        return {"params": {n: p.detach().clone() for n, p in model.named_parameters()}}

    def initial_broadcast(self, server: dict[str, Any]) -> Broadcast:
        return dict(server["params"])

    def _count_bound(self) -> int:
        return 1 if self.options.weighting == "uniform" or self._delta() else self.setting.count_bound

    def schema(self, rs: RoundState) -> SumSchema:
        if self._delta():
            blocks = [
                BlockSpec(f"d.{n}", tuple(v.shape), bound=2 * self.options.param_bound, dp=True)
                for n, v in rs.broadcast.items()
            ]
            blocks.append(BlockSpec("n", (1,), kind="count", bound=1))
            return SumSchema(blocks, max_clients=max(self.setting.max_clients_per_round, len(rs.clients)))
        bound = self._count_bound() * self.options.param_bound
        blocks = [BlockSpec(f"w.{n}", tuple(v.shape), bound=bound) for n, v in rs.broadcast.items()]
        blocks.append(BlockSpec("n", (1,), kind="count", bound=self._count_bound()))
        return SumSchema(blocks, max_clients=max(self.setting.max_clients_per_round, len(rs.clients)))

    def server_step(self, server: dict[str, Any], sums: Sums, rs: RoundState) -> Broadcast:
        den = float(sums["n"][0])
        if den > 0 and self._delta():
            server["params"] = {
                n: (v.to(torch.float64) + sums[f"d.{n}"].to(torch.float64).to(v.device) / den).to(v.dtype)
                for n, v in server["params"].items()
            }
        elif den > 0:
            server["params"] = {
                n: (sums[f"w.{n}"].to(torch.float64) / den).to(v.dtype).to(v.device)
                for n, v in server["params"].items()
            }
        return dict(server["params"])

    # ------------------------------------------------------------------ clients ----------------------------

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
        fn = train_clients if train.batched else train_clients_sequential
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
        if self._delta():
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
        res = self._train(clients, glob, self.options.finetune_epochs, None, f"{self.name}.finetune")
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
