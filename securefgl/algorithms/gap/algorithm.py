r"""GAP (Sajadmanesh et al., USENIX Security 2023, https://arxiv.org/abs/2203.00949) federated: node- and
edge-level differential privacy for the people in the graph, with every upload through the secure sum.

GAP splits a GNN into three modules so that the edges are queried a fixed number of times:

1. **encoder** (no edges): an MLP trained with a linear head on node features and labels; under node-level
   DP with DP-SGD (Opacus: per-node clipping, Gaussian noise, Poisson sampling);
2. **aggregation perturbation**: :math:`X^{(k)} = \mathrm{normalize}(A^\top X^{(k-1)} + \mathcal{N}(0,
   \sigma^2 I))`, ``k = 1..K``, from the unit-norm encoder output :math:`X^{(0)}`, computed **once**;
   node level bounds every degree by ``D`` (sampled edges), so the sensitivity is :math:`\sqrt D`
   (:math:`\sqrt 2` for one undirected edge);
3. **classifier** (no further edge queries): per-hop layers on :math:`X^{(0..K)}`, concatenated, then a linear
   output; under node-level DP with DP-SGD. Two options change the modules for small graphs: ``embedding=vote``
   aggregates the encoder's one-hot predicted class (a noisy count of the neighbours' classes) and
   ``classifier=residual`` adds a zero-started linear term per hop to the encoder's own logits and trains the
   encoder on (:mod:`securefgl.algorithms.gap.model`); ``aggregation_noise_scale`` sets the hops' noise
   multiplier relative to the DP-SGD parts'. ``classifier=head`` replaces the aggregation perturbation: the
   frozen encoder's logits plus per-hop links on the exact aggregates, trained with full-batch DP gradient
   descent at the node sensitivity ``(2D + 1) C`` (one hop; ``K`` hops: ``plan.head_sensitivity``); the
   released model is node-DP, the client's predictions on its own graph are not (GAP's guarantee covers them).
   ``classifier=noisy-head`` keeps GAP's guarantee with the same head: its links read the noised aggregates
   and its full-batch steps have sensitivity ``C`` (their noise scaled by ``head_noise_scale``).

Federated, every client runs the three steps on its own subgraph, and the encoder and classifier are learnt over
secure sums (phases ``encoder`` then ``classifier``). Under node-level DP each round is one federated DP-SGD step:
every client uploads its clipped per-node gradient sum plus a share of the step's Gaussian noise, so the noise
of one step covers all the federation's nodes (:mod:`securefgl.privacy.dpsgd`), and the server applies Adam to
the released sum; no node count is ever summed. Edge-level and non-private runs train locally and average as
FedAvg. The noise multiplier is shared by all parts (the hops' scaled by ``aggregation_noise_scale``) and
calibrated to ``epsilon`` with Opacus's RDP accountant (:mod:`securefgl.algorithms.gap.plan`); the run reports one
:class:`~securefgl.privacy.PrivacyStatement` (``run_report()["privacy"]``). A ``+dp`` protocol adds client-level
distributed DP on top (DP-FedAvg deltas, its own accountant); with ``model=mlp`` (``hops=0``) GAP is the DP-MLP
baseline: DP-SGD on features only.

Args:
    see :class:`~securefgl.algorithms.gap.options.GAPOptions`.

Shapes:
    Upload per client and round: one block per parameter tensor of the phase's part, plus ``n`` ``(1,)``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from securefgl.algorithms.base import Algorithm, CompatibilityProblem, Phase, RoundState, Setting
from securefgl.algorithms.baselines.fedavg.schema import uses_delta
from securefgl.algorithms.gap.client import GAPClient
from securefgl.algorithms.gap.options import GAPOptions
from securefgl.algorithms.gap.plan import make_plan
from securefgl.algorithms.gap.schema import gradient_schema, round_schema
from securefgl.algorithms.gap.server import GAPServer
from securefgl.algorithms.registry import register_algorithm
from securefgl.protocols.encoding import SumSchema
from securefgl.protocols.registry import ProtocolSpec

__all__ = ["GAP"]


@register_algorithm
class GAP(GAPServer, GAPClient, Algorithm):
    """Federated GAP (see the module docstring): node-/edge-level DP with aggregation perturbation."""

    name = "gap"
    dp_blocks = True
    Options = GAPOptions

    def __init__(self, setting: Setting, options: Any = None) -> None:
        super().__init__(setting, options)
        self.plan = make_plan(
            self.options,
            model_name=setting.model.name,
            model_layers=setting.model.layers,
            rounds=setting.train.rounds,
            num_nodes=setting.num_nodes,
            clients_per_round=setting.max_clients_per_round or setting.num_clients,
        )

    @classmethod
    def compatibility(
        cls, *, protocol: ProtocolSpec, model: str, dataset: str, options: Any, num_clients: int | None
    ) -> list[CompatibilityProblem]:
        return []

    def phases(self, train: Any) -> Sequence[Phase]:
        if self.plan.hops == 0:
            return (Phase("encoder", rounds=self.plan.encoder_rounds),)
        return (
            Phase("encoder", rounds=self.plan.encoder_rounds, evaluate=False),
            Phase("classifier", rounds=self.plan.classifier_rounds),
        )

    def schema(self, rs: RoundState) -> SumSchema:
        max_clients = max(self.setting.max_clients_per_round, len(rs.clients))
        if self.options.private and self.options.privacy == "node":
            return gradient_schema(
                rs.broadcast,
                rs.phase,
                classifier=self.options.classifier,
                clip=self.options.clip,
                count_bound=self.setting.count_bound,
                share_std=self.plan.dp_step(rs.phase, self.options.sample_rate)[1],
                noise_shares=self.plan.noise_shares,
                dp=self.setting.protocol.dp,
                max_clients=max_clients,
            )
        delta = uses_delta(self.options, self.setting.protocol)
        uniform = delta or (self.options.private and self.options.privacy == "node")
        return round_schema(
            rs.broadcast,
            rs.phase,
            classifier=self.options.classifier,
            param_bound=self.options.param_bound,
            count_bound=1 if uniform else self.setting.count_bound,
            delta=delta,
            max_clients=max_clients,
        )
