r"""FedStruct-B (Aliakbari et al. 2024), https://arxiv.org/abs/2402.19163: decoupled learning over
interconnected subgraphs, with the multi-hop matrix computed privately.

Spec: ``shared/specs/fedstruct.md`` (§2.4-2.8, §3.4). Client :math:`i` predicts

.. math::
    \hat Y_i = \mathrm{softmax}\big(\bar A^{(i)} f_{\theta_f}(X_i) + \bar A_{[i]}\, g_{\theta_s}(S)\big),

with :math:`\bar A^{(i)}` the ``L``-hop matrix of its local graph and :math:`\bar A_{[i]}` its rows of the
``L_s``-hop matrix of the global graph (row-normalised :math:`\hat A = \tilde D^{-1}(A + I)`, pure power by
default). The run has three phases:

1. ``directory`` (1 round, server-bound sum): each client adds ``cid + 1`` at its nodes' global ids (and, for
   degree features, its nodes' global degrees). The server learns the node -> client map (and degrees),
   nothing about edges, and broadcasts it with the initial model.
2. ``setup`` (``(L_s - 1) K`` rounds): round ``(l - 2) K + i`` sums :math:`B^{(l)}_{ik} = \tilde A_{ik}
   P^{(l-1)}_{[k]}` over every client :math:`k` for receiver :math:`i` only (``SumRequest(recipient=i)``:
   designated-recipient secure aggregation, the server relays masked blocks); one receiver at a time.
   See :mod:`securefgl.algorithms.fedstruct._setup`.
3. ``train`` (FedSGD, eq. 8): each round every client uploads the gradients of the summed cross-entropy over
   its training nodes with respect to :math:`\theta_f, \theta_s` and (Hop2Vec) :math:`S`, plus its
   train-node count; the server divides the sums (:math:`\nabla L = \frac{1}{|\tilde V|}\sum_i \nabla L_i`)
   and takes one Adam step (lr and weight decay from ``train``), then broadcasts :math:`\theta, S`.

Clients need their inter-client edges: pass ``attach_cross_edges(fg)`` to the run (a client without them
raises :class:`~securefgl.errors.PartitionError`).

Args:
    num_hops: ``L`` of the local feature branch. (default: ``2``)
    num_hops_s: ``L_s`` of the structure branch (1: local, no setup sums). (default: ``10``)
    beta: :math:`\beta_1..\beta_{L_s}`, or ``None`` for the pure power. (default: ``None``)
    nsf: Node structure features: ``"h2v"`` (Hop2Vec, learnable, FedStruct-B default), ``"degree"`` (one-hot
        global degree, summed once by the protocol), or the task-agnostic ``"node2vec"`` / ``"gdv"``
        (graphlet degree vectors), which need the global graph and so run as **FedStruct-A**: the server is
        given the federation's edge set (:attr:`~securefgl.algorithms.base.Setting.public_edge_index`),
        computes :math:`S` once (:mod:`securefgl.algorithms.fedstruct._nsf`) and broadcasts it. With the
        decoupled GCN, A and B give the same predictions for the same :math:`\bar A` and :math:`S` (spec
        §7 items 14-15), so :math:`\bar A_{[i]}` still comes from the private setup. (default: ``"h2v"``)
    n2v_epochs: Node2Vec training epochs (the authors': 50). (default: ``50``)
    gdv_graphlet_size: Largest graphlet of the GDV: ``5`` (73 orbits, the authors') or ``4`` (15).
        (default: ``5``)
    d_s: Structure-feature width. (default: ``256``)
    hidden_f / hidden_s: Hidden widths of ``f`` and ``g``. (default: ``(64,)``, ``(256,)``)
    dropout: Dropout in ``f`` and ``g``. (default: ``0.7``)
    dropout_s: Dropout in ``g`` only, ``None`` for ``dropout``. (default: ``None``)
    u_form: Upload :math:`U_i = \bar A_{[i]}^\top \partial L_i / \partial Z_i` (``n x C``) instead of the
        gradients of :math:`\theta_s` and ``S`` (spec §3.1 S7): the server back-propagates the summed
        :math:`U` through :math:`g_{\theta_s}(S)`, which it holds. Exact only without dropout in ``g``, so it
        requires ``dropout_s = 0``. (default: ``False``)
    h2v_std: Std of the Hop2Vec initialisation. (default: ``0.05``)
    prune_p: Keep the top ``p n_i`` entries of each aggregated power (``None``: dense). (default: ``None``)
    grad_bound: Public clip bound of each gradient element of a client's summed loss. (default: ``1e4``)
    setup_max_bytes / setup_max_memory: Dense setup budget; over it the run is refused with the estimate.
        (default: 64 GiB, 4 GiB)

Shapes:
    Setup upload per client and receiver ``i``: ``(n_i, n)``; train upload per client: the parameters of
    ``f`` and ``g`` plus ``S`` ``(n, d_s)`` (Hop2Vec) plus ``count`` ``(1,)``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import securefgl.algorithms.fedstruct.options as _options
import securefgl.algorithms.fedstruct.schema as _schema
from securefgl.algorithms.base import Algorithm, Phase, RoundState, SumRequest
from securefgl.algorithms.fedstruct._setup import check_setup_budget
from securefgl.algorithms.fedstruct.client import FedStructClient
from securefgl.algorithms.fedstruct.options import FedStructOptions
from securefgl.algorithms.fedstruct.server import FedStructServer
from securefgl.algorithms.registry import register_algorithm

__all__ = ["FedStruct"]


@register_algorithm
class FedStruct(FedStructServer, FedStructClient, Algorithm):
    """FedStruct-B with the decoupled GCN and FedSGD (see the module docstring).

    The server half is :class:`~securefgl.algorithms.fedstruct.server.FedStructServer`, the client half
    :class:`~securefgl.algorithms.fedstruct.client.FedStructClient`; what is summed is declared in
    :mod:`securefgl.algorithms.fedstruct.schema`.
    """

    name = "fedstruct"
    #: Clients need their inter-client edges (``attach_cross_edges(fg)`` before the run; see the report).
    needs_cross_edges = True
    Options = FedStructOptions

    # ------------------------------------------------------------------ structure ------------------------

    @classmethod
    def server_knows_edges(cls, options: Any) -> bool:
        """FedStruct-A (``nsf`` ``"node2vec"`` or ``"gdv"``): the server knows the global edge set."""
        return _options.server_knows_edges(options)

    @property
    def variant(self) -> str:
        """``"A"`` (server knows the edges) or ``"B"`` (it does not; the default)."""
        return _options.variant(self.options)

    def phases(self, train: Any) -> Sequence[Phase]:
        o = self.options
        k, n = self.setting.num_clients, self.setting.num_nodes
        check_setup_budget(
            [math.ceil(n / k)] * k,
            n,
            o.num_hops_s,
            max_bytes=o.setup_max_bytes,
            max_memory=o.setup_max_memory,
            pruned=o.prune_p is not None,
        )
        out = [Phase("directory", rounds=1, sample=False, evaluate=False)]
        if o.num_hops_s > 1:
            out.append(Phase("setup", rounds=(o.num_hops_s - 1) * k, sample=False, evaluate=False))
        out.append(Phase("train", rounds=train.rounds))
        return tuple(out)

    @property
    def feature_width(self) -> int:
        """Width of :math:`S`: ``d_s``, or the GDV's orbit count (73 or 15)."""
        return _options.feature_width(self.options)

    # ------------------------------------------------------------------ the sums ------------------------

    def requests(self, rs: RoundState) -> Sequence[SumRequest]:
        return _schema.requests(self.setting, self.options, rs)
