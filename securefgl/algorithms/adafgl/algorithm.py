r"""AdaFGL: a federated knowledge extractor under secure aggregation, then adaptive local personalisation.

Li, Wu, Zhang, Sun, Li, Wang, "AdaFGL: A New Paradigm for Federated Node Classification with Topology
Heterogeneity" (ICDE 2024, https://arxiv.org/abs/2401.11750). Implemented from
``shared/specs/adafgl.md``; section numbers below refer to that spec.

**Step 1** (§2.1, Alg. 1) is FedAvg of a GCN, the *federated knowledge extractor*. In round :math:`t` each
participating client :math:`i` runs :math:`E` local epochs from the broadcast :math:`\tilde W^t` and uploads
only a numerator and a denominator, which the protocol sums:

.. math::
    u_i = \big(n_i \,\mathrm{vec}(W_i^t),\ n_i\big), \qquad
    U = \sum_{i \in S_t} u_i, \qquad
    \tilde W^{t+1} = \frac{\sum_i n_i W_i^t}{\sum_i n_i} \quad \text{(eq. 4)}

with :math:`n_i = |V_i|` (spec §7.6). The server sees :math:`U` only. This is the engine's FedAvg (schema,
batched local training, server step) with the node-count weight of eq. (4).

**Step 2** (§2.2, Alg. 2) runs on every client with the extractor :math:`\tilde W` (by default the evaluated
round's global model with the best validation accuracy, as the official code keeps it; ``extractor="last"``:
the final broadcast :math:`\tilde W^{T+1}`) and sends nothing (its transcript is empty):

.. math::
    \hat P = \mathrm{softmax}(\mathrm{GCN}_{\tilde W^{T+1}}(X, A)), \quad
    \tilde P = \alpha A + (1-\alpha)\,B(\hat P) \quad \text{(eqs. 5-6)} \\
    X_s = [X \,\|\, \hat{\mathcal A}X \,\|\, \dots \,\|\, \hat{\mathcal A}^{K_p}X],\
    \hat{\mathcal A} = D^{-1/2}(\tilde P + I)D^{-1/2} \quad \text{(eq. 7)} \\
    \hat Y_{ho} = \tfrac12(\mathrm{softmax}(\mathrm{MLP}_{ho}(X_s)) + \hat P), \quad
    L_{knowledge} = \mathrm{mean}\big((\mathrm{MLP}_{ho}(X_s) - \hat P)^2\big) \quad \text{(eqs. 8-9)} \\
    \hat Y_{he} = \tfrac13\big(\mathrm{softmax}(H_f) + \mathrm{softmax}(\tilde H_{he}) + \mathrm{softmax}(H_m)\big)
    \quad \text{(eqs. 10-13)} \\
    \hat Y = \mathrm{HCS}\,\hat Y_{ho} + (1-\mathrm{HCS})\,\hat Y_{he}, \quad
    \mathrm{HCS} = \text{LP accuracy on hidden train nodes} \quad \text{(eqs. 15-17)}

where :math:`B` is the binarised cosine similarity of predicted class distributions (threshold 0.999),
:math:`H_f = \mathrm{MLP}_f(X)`, :math:`\tilde H_{he} = \mathrm{MLP}_{he}(X_s)` and :math:`H_m` is the learnable
message passing of eqs. (11)-(12) (see
:class:`~securefgl.algorithms.adafgl.model.LearnableMessagePassing`).

**Blend** (``blend="select"``, an extension; issue 27). Eq. (17) weights the extractor by HCS/2 (through
:math:`\hat Y_{ho}` only), so on a heterophilous client (HCS near 0.2) the federated knowledge all but vanishes
from the prediction and AdaFGL can fall below the FedAvg extractor it starts from. A last phase of one round
chooses one weight :math:`\gamma` of a public grid (0 = the paper, 1 = the extractor) for every client's
prediction :math:`(1-\gamma)\hat Y + \gamma\hat P`, from one secure sum of per-client validation counts:

.. math::
    c_{i,g} = |\{v \in V^{val}_i : \arg\max((1-\gamma_g)\hat Y_i + \gamma_g \hat P_i)_v = y_v\}|, \qquad
    \gamma = \gamma_{g^*},\ g^* = \arg\max_g \textstyle\sum_i c_{i,g}

Pooling the validation nodes of every client is what makes the choice reliable; a per-client choice on a
client's own validation nodes (``fallback="extractor"``) was measured to be too noisy to help. With
``blend_alpha`` the server keeps the extractor (:math:`\gamma = 1`) unless a weight beats it by more than the
counts' noise (a one-sided McNemar test on the pooled validation nodes, from a second count sum
:math:`d_g = \sum_i d_{i,g}`, the nodes on which exactly one of blend :math:`g` and the extractor is right):

.. math::
    G = \{g : \textstyle\sum_i c_{i,g} - \sum_i c_{i,1} > z\sqrt{d_g}\}, \qquad
    g^* = \arg\max_{g \in G} \textstyle\sum_i c_{i,g}\ \ (\gamma = 1 \text{ if } G = \emptyset)

With ``blend_holdout`` the counts are taken on a fixed share of each client's validation nodes that step 2's
epoch selection never sees: each client keeps every blend at its own best epoch, chosen on about 150 nodes,
which lifts the blends' validation counts above the extractor's (that has no epoch to pick) by several points
that do not carry over to test (issue 27, Actor structure non-iid at 60/20/20).

Step 2 trains the K clients' personalised models together (batched over clients, each with its own
parameters, optimiser state, HCS and best epoch) when ``train.batched`` is on, and one client at a time
(a batch of one, through the same training loop) otherwise; clients above ``dense_max_nodes`` always run
alone with sparse similarity and message passing.

Security:
    The server sees, per round, only :math:`\sum_i n_i \mathrm{clip}_B(W_i)` and :math:`\sum_i n_i` (released by
    the protocol) and broadcasts their ratio. Step 2 sends nothing: :math:`\hat P_i`, :math:`\tilde P_i`,
    :math:`\mathrm{HCS}_i` and the personalised models never leave client :math:`i`. Not protected: the
    broadcast extractor itself (the sum), and per-client diagnostics a simulation chooses to print. With
    ``blend="select"`` the server also learns the pooled validation counts per grid weight (a sum, like the
    evaluation sums) and broadcasts the chosen weight.

Shapes:
    per client: ``x`` ``(N_k, F)``, ``edge_index`` ``(2, E_k)``; uploads one block ``w.<name>`` per GCN
    parameter tensor (its shape, times :math:`n_k`) and ``n`` ``(1,)``; step 2 predictions ``(N_k, C)``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from securefgl.algorithms.adafgl.client import AdaFGLClient
from securefgl.algorithms.adafgl.options import BLEND, STEP1, STEP2, AdaFGLOptions
from securefgl.algorithms.adafgl.schema import blend_schema, extractor_schema
from securefgl.algorithms.adafgl.server import AdaFGLServer
from securefgl.algorithms.base import Phase, RoundState
from securefgl.algorithms.baselines.fedavg import FedAvg
from securefgl.algorithms.baselines.fedavg.schema import count_bound
from securefgl.algorithms.registry import register_algorithm
from securefgl.protocols.encoding import SumSchema

__all__ = ["AdaFGL"]


@register_algorithm
class AdaFGL(AdaFGLServer, AdaFGLClient, FedAvg):
    r"""AdaFGL (see the module docstring): FedAvg of the knowledge extractor, then local personalisation.

    Phases: ``federated`` (``train.rounds`` rounds of FedAvg through the protocol; uploads
    :math:`n_k \mathrm{clip}_B(W_k)` per parameter tensor and the count :math:`n_k`) and ``personalize``
    (local only, no sum: the engine calls no protocol, so its transcript is empty), and with ``blend="select"``
    ``blend`` (one round, every client; uploads the count vector ``blend.val_correct``, and with ``blend_alpha``
    ``blend.val_discordant``). Evaluation in the
    federated phase scores the extractor (the FedAvg global model); the final metrics are those of the
    personalised predictions :math:`\hat Y` (returned as :math:`\log\hat Y`).

    Step 1 is the engine's FedAvg (schema, batched local training, server step); only the weight
    :math:`n_k = |V_k|` (``weighting="nodes"``, the spec's choice) is added here.

    Args:
        setting: the public facts of the run (the extractor is ``setting.model``: GCN in the paper).
        options: :class:`AdaFGLOptions` or a mapping validated against it.
    """

    name = "adafgl"
    dp_blocks = False  # step 1 uploads weighted weights; DP-FedAvg deltas are not wired into AdaFGL
    Options = AdaFGLOptions
    batched = True

    def phases(self, train: Any) -> Sequence[Phase]:
        steps = [Phase(STEP1, kind="rounds", rounds=train.rounds), Phase(STEP2, kind="local")]
        if self.options.blend == "select":
            steps.append(Phase(BLEND, kind="rounds", rounds=1, sample=False))
        return tuple(steps)

    def schema(self, rs: RoundState) -> SumSchema:
        """Step 1's sum (:func:`~securefgl.algorithms.adafgl.schema.extractor_schema`), or the blend phase's
        (:func:`~securefgl.algorithms.adafgl.schema.blend_schema`)."""
        max_clients = max(self.setting.max_clients_per_round, len(rs.clients))
        if rs.phase == BLEND:
            return blend_schema(
                len(self.options.blend_grid),
                count_bound=self.setting.count_bound,
                max_clients=max_clients,
                discordant=self.options.blend_alpha is not None,
            )
        return extractor_schema(
            rs.broadcast,
            param_bound=self.options.param_bound,
            count_bound=count_bound(self.options, self.setting.count_bound, delta=False),
            max_clients=max_clients,
        )
