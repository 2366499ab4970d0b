r"""FedSpray (Fu et al., KDD 2024): structure proxy alignment, with the server seeing only sums.

The method, its sums and its options are documented on :class:`FedSpray`. The package keeps the two halves
apart:

* ``options``: :class:`FedSprayOptions` (``[algorithm.options]``) and ``Hyper``, the view both halves use;
* ``schema``: what is summed, the round's :class:`~securefgl.protocols.encoding.SumSchema` (public);
* ``client``: :class:`FedSprayClient`, per-client state, the batched local round, uploads, evaluation;
* ``server``: :class:`FedSprayServer`, the public initial state, Eqs. 14-15 from the sums, the run report;
  it imports no client-side module;
* ``algorithm``: :class:`FedSpray`, the registered combination of the two halves;
* ``encoder``: the shared feature-structure encoder's parameter layout, initialisation and round reference;
* ``models``: the clients' batched personalised GNNs and the encoder's forward pass;
* ``presets``: the named run-config presets ``fedspray-paper`` and ``fedspray-code``;
* ``_batch``, ``_train`` (client side, private): the client batch (the training stack's ``packed``
  :class:`~securefgl.training.batched.GraphBatch` with its class counts), the local training (stepped by
  :class:`~securefgl.training.optim.StackedOptimizer`) and the uploads.
"""

from __future__ import annotations

from securefgl.algorithms.fedspray.algorithm import FedSpray
from securefgl.algorithms.fedspray.client import FedSprayClient
from securefgl.algorithms.fedspray.options import FedSprayOptions
from securefgl.algorithms.fedspray.server import FedSprayServer

__all__ = ["FedSpray", "FedSprayClient", "FedSprayOptions", "FedSprayServer"]
