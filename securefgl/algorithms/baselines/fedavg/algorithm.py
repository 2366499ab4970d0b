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
from typing import Any

from securefgl.algorithms.base import Algorithm, CompatibilityProblem, Phase, RoundState
from securefgl.algorithms.baselines.fedavg.client import FedAvgClient
from securefgl.algorithms.baselines.fedavg.options import FedAvgOptions
from securefgl.algorithms.baselines.fedavg.schema import count_bound, model_schema, uses_delta
from securefgl.algorithms.baselines.fedavg.server import FedAvgServer
from securefgl.algorithms.registry import register_algorithm
from securefgl.protocols.encoding import SumSchema
from securefgl.protocols.registry import ProtocolSpec

__all__ = ["FedAvg"]


@register_algorithm
class FedAvg(FedAvgServer, FedAvgClient, Algorithm):
    """Federated averaging weighted by train-node count (see the module docstring).

    The server half is :class:`~securefgl.algorithms.baselines.fedavg.server.FedAvgServer`, the client half
    :class:`~securefgl.algorithms.baselines.fedavg.client.FedAvgClient`; the sum is declared in
    :mod:`securefgl.algorithms.baselines.fedavg.schema`.
    """

    name = "fedavg"
    batched = True
    dp_blocks = True
    Options = FedAvgOptions

    @classmethod
    def compatibility(
        cls, *, protocol: ProtocolSpec, model: str, dataset: str, options: Any, num_clients: int | None
    ) -> list[CompatibilityProblem]:
        if isinstance(options, Mapping):
            upload = options.get("upload", "auto")
        else:
            upload = getattr(options, "upload", "auto")
        if cls.dp_blocks and protocol.dp and upload == "weights":
            return [
                CompatibilityProblem(
                    f"protocol {protocol!r} noises only blocks marked for DP, and upload='weights' marks none",
                    "use upload='delta' or 'auto' (the default), or a protocol without '+dp'",
                    True,
                )
            ]
        return []

    # ------------------------------------------------------------------ structure ------------------------

    def phases(self, train: Any) -> Sequence[Phase]:
        phases = [Phase("train", kind="rounds", rounds=train.rounds)]
        if self.options.finetune_epochs > 0:
            phases.append(Phase("finetune", kind="local"))
        return tuple(phases)

    def schema(self, rs: RoundState) -> SumSchema:
        delta = uses_delta(self.options, self.setting.protocol)
        return model_schema(
            rs.broadcast,
            param_bound=self.options.param_bound,
            count_bound=count_bound(self.options, self.setting.count_bound, delta=delta),
            delta=delta,
            max_clients=max(self.setting.max_clients_per_round, len(rs.clients)),
        )
