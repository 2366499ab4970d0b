"""FedLoG's public combination: the registered :class:`FedLoG` = server half + client half.

Part of :mod:`securefgl.algorithms.fedlog`: the server-side steps are in
:mod:`~securefgl.algorithms.fedlog.server`, the client-side steps in
:mod:`~securefgl.algorithms.fedlog.client`, what is summed in :mod:`~securefgl.algorithms.fedlog.schema`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from securefgl.algorithms.base import Algorithm, Phase, RoundState, SumRequest
from securefgl.algorithms.fedlog.client import FedLoGClient
from securefgl.algorithms.fedlog.options import FedLoGOptions
from securefgl.algorithms.fedlog.schema import round_requests
from securefgl.algorithms.fedlog.server import FedLoGServer
from securefgl.algorithms.registry import register_algorithm

__all__ = ["FedLoG"]


@register_algorithm
class FedLoG(FedLoGServer, FedLoGClient, Algorithm):
    r"""FedLoG (Kim et al., ICLR 2025), https://arxiv.org/abs/2503.03995, with the server seeing sums only.

    "Subgraph Federated Learning for Local Generalization": each client trains a GraphSAGE embedder with a
    head-degree and a tail-degree prototype branch (:math:`m` learnable synthetic nodes per class and branch,
    :math:`X^H_k, X^T_k \in \mathbb{R}^{Cm\times F}`), mixed per node by
    :math:`\alpha_v=\sigma(\deg v-(\tau+1))`. The server turns the clients' head-branch synthetic nodes into
    *global synthetic data* weighted by class rate, and every client additionally fits that data (feature
    scaling :math:`\lambda_{k,c}` and class-wise prompt generators :math:`\psi_c`) so that it generalises to
    classes and nodes it never saw. Spec: ``shared/specs/fedlog.md``.

    Client :math:`k`, round :math:`r` (one local epoch of mini-batches :math:`B`):

    .. math::
        L = \underbrace{\tfrac{1}{|B|}\textstyle\sum_{v\in B}\big[\alpha_v\,\mathrm{CE}_H(v)+(1-\alpha_v)\,
        \mathrm{CE}_T(v)\big]}_{L_{pred}} + \beta\,\tfrac12(\lVert X^H_k\rVert_F+\lVert X^T_k\rVert_F)
        + \gamma\,L_{syn}(\hat X,\tilde y),\qquad
        \hat x_{c,j} = \tilde x_{c,j} + \lambda_{k,c}(\bar x - \tilde x_{c,j})

    Server (Eq. 4 and the model average), written as ratios of sums (spec §3):

    .. math::
        \theta = \frac{\sum_k a_k\,\mathrm{clip}(\theta_k)}{\sum_k a_k},\qquad
        \tilde X[c] = \frac{\sum_k \rho_{k,c}\,\pi_{k,c}(X^H_k[c])}{\sum_k \rho_{k,c}},\qquad
        \psi_c = \frac{\sum_k \rho_{k,c}\,\psi_k}{\sum_k \rho_{k,c}}

    with :math:`\rho_{k,c}` the share of class :math:`c` among client :math:`k`'s training labels,
    :math:`a_k = 1` (``weighting="uniform"``, the code) or :math:`n_k`, and :math:`\pi_{k,c}` a fresh random
    permutation of the :math:`m` slots drawn *by the client*. One secure sum per round carries the numerators,
    the denominators, the per-class holder counts :math:`\sum_k 1[\rho_{k,c}>0]` and the evaluation counters;
    the prompt generators are summed once (round 0). Class rows of :math:`\tilde X` and :math:`\psi_c` are
    released row-wise under the minimum-contributors rule (``min_holders``); a class held by nobody, or by
    fewer than ``min_holders`` clients, gets no synthetic nodes and is listed in the run report.

    Privacy (spec §3, §6): the server learns :math:`\theta`, :math:`\tilde X`, :math:`\sum_k\rho_{k,c}`,
    :math:`\psi_c` and pooled metrics. :math:`X^T_k`, :math:`\lambda_k` and the optimiser state never leave
    the client; no client reads another client's synthetic nodes. With ``min_holders=1`` (paper behaviour) a
    class held by one client releases that client's permuted :math:`\rho X^H_k[c]` (spec §3 item 3); raise
    ``min_holders`` to withhold it (at the cost of Missing-Class accuracy).

    Evaluation (spec §1.2): the engine's metrics are the local models' Seen-Graph val/test accuracy. FedLoG's
    generalisation metrics (Seen Graph, Unseen Node, Missing Class pooled; New Client mean over local models)
    are summed securely as integer counters in each round's upload; the server's history and the best-round
    pick (by pooled Seen-Graph val accuracy, later rounds win ties) are in ``run_report``. Attach the test
    sets with :func:`~securefgl.algorithms.fedlog.attach_generalization_sets`: they go to
    ``FederatedGraph.client_eval``, which the engine hands to each client as ``Client.eval_data``; only the
    evaluation counters read them, never the training steps.

    Args:
        setting: The public facts of the run (:class:`~securefgl.algorithms.base.Setting`).
        options: A :class:`FedLoGOptions` (``FedLoG.Options``) or a mapping validated against it, with the
            options below. (default: ``None``, the defaults)
        num_proto: ``m``, synthetic nodes per class and branch. (default: ``20``)
        tau: Tail-degree threshold. (default: ``3``)
        beta: Norm-regulariser weight. (default: ``1.0``)
        gamma: ``L_syn`` weight. (default: ``1.0``)
        lr: Adam learning rate of the model and the synthetic nodes. (default: ``0.001``)
        weight_decay: Model weight decay. (default: ``5e-4``)
        batch_size: Training nodes per step. (default: ``64``)
        hidden: Embedder hidden width. (default: ``128``)
        out_dim: Embedding width. (default: ``64``)
        dropout: Embedder dropout. (default: ``0.5``)
        classifier_mode: ``"paper"`` (Eqs. 8-10, per-query mean over all :math:`Cm` prototypes; costs
            :math:`O(N C m D^2)` per forward, so training refines only the mini-batch rows) or ``"released"``
            (the official code's behaviour: :math:`\tilde h = \mathrm{LN}(h)`, which the spec says likely
            produced the published numbers). (default: ``"paper"``)
        prompt_mode: ``"paper"`` (pretrained :math:`\psi_k` -> secure :math:`\psi_c`, eval mode) or ``"none"``
            (the w/o-PG ablation). (default: ``"paper"``)
        prompt_epochs: Prompt-generator pretraining epochs. (default: ``100``)
        prompt_inits: ``T`` random GNN initialisations of the gradient-matching loss. (default: ``20``)
        prompt_lr: Prompt-generator learning rate. (default: ``0.01``)
        warmup_epochs: Round-0 cross-entropy warm-up of the embedder with a throw-away linear head, before the
            first local epoch, at most this many epochs, early-stopped on the client's val accuracy (spec
            §2.5). A code-only step [C], not in the paper, so off by default (``0``). The spec recommends it
            on, to match the code (``100``), but the tables reproduced in ``examples/reproduce_fedlog.py``
            were measured without it, and a diagnosis run of 100 rounds on Cora with K=3 showed that it speeds
            up the start but does not improve the 100-round result. (default: ``0``)
        warmup_patience: Epochs without a val-accuracy improvement before the warm-up stops (the code's 10,
            there on test accuracy). (default: ``10``)
        lambda_step: Per-step change of :math:`\lambda_{k,c}`. (default: ``0.001``)
        lambda_threshold: Synthetic class accuracy above which :math:`\lambda_{k,c}` grows. (default: ``0.8``)
        weighting: ``"uniform"`` (the code) or ``"train"`` (by train-node count) model averaging.
        min_holders: Minimum number of clients holding a class for its synthetic rows to be released.
            (default: ``1``)
        param_bound: Public clip range of model parameters. (default: ``8.0``)
        x_bound: Public clip range of synthetic features. (default: ``1.0``)
        psi_bound: Public clip range of prompt-generator parameters. (default: ``8.0``)

    Shapes:
        Upload per client and round: the model's parameters, ``xh.num`` ``(C, m, F)``, ``xh.den`` and
        ``holders`` ``(C,)``, counters ``(4,)``; once: ``psi.*`` ``(C, *param)``. Download: the model,
        ``syn.x`` ``(C' m, F)`` and ``syn.y`` ``(C' m,)`` for the ``C'`` released classes; once:
        :math:`\psi_c`.
    """

    name = "fedlog"
    Options = FedLoGOptions

    def phases(self, train: Any) -> Sequence[Phase]:
        return (Phase("train", kind="rounds", rounds=train.rounds, sample=False),)

    def requests(self, rs: RoundState) -> Sequence[SumRequest]:
        return round_requests(self.setting, self.options, rs)
