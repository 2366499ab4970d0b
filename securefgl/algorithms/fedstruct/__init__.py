r"""FedStruct-B (Aliakbari et al. 2024): decoupled learning over interconnected subgraphs, private multi-hop setup.

https://arxiv.org/abs/2402.19163; the math is in :mod:`securefgl.algorithms.fedstruct.algorithm`. The package
keeps the two halves apart:

* :mod:`~securefgl.algorithms.fedstruct.options`: :class:`FedStructOptions` (``FedStruct.Options``);
* :mod:`~securefgl.algorithms.fedstruct.schema`: what is summed (directory, setup blocks, gradients);
* :mod:`~securefgl.algorithms.fedstruct.model`: the decoupled GCN (used by both halves);
* :mod:`~securefgl.algorithms.fedstruct.client`: :class:`FedStructClient` (helper: ``_setup``, the private
  setup of :math:`\bar A_{[i]}`);
* :mod:`~securefgl.algorithms.fedstruct.server`: :class:`FedStructServer` (helper: ``_nsf``, FedStruct-A
  structure features; it imports no client module);
* :mod:`~securefgl.algorithms.fedstruct.algorithm`: :class:`FedStruct`, the registered combination.

Clients need their inter-client edges: pass :func:`attach_cross_edges` ``(fg)`` to the run.
"""

from __future__ import annotations

from securefgl.algorithms.fedstruct._setup import (
    SetupTooLargeError,
    SingleContributorWarning,
    attach_cross_edges,
)
from securefgl.algorithms.fedstruct.algorithm import FedStruct
from securefgl.algorithms.fedstruct.client import FedStructClient
from securefgl.algorithms.fedstruct.options import FedStructOptions
from securefgl.algorithms.fedstruct.server import FedStructServer

__all__ = [
    "FedStruct",
    "FedStructClient",
    "FedStructOptions",
    "FedStructServer",
    "SetupTooLargeError",
    "SingleContributorWarning",
    "attach_cross_edges",
]
