"""O-pFGL: one-shot personalised federated graph learning whose only upload is a secure sum.

Yan et al., *Towards Federated Graph Learning in One-shot Communication*, https://arxiv.org/abs/2411.11304;
the math is in :mod:`securefgl.algorithms.opfgl.algorithm`. The package keeps the two halves apart:

* :mod:`~securefgl.algorithms.opfgl.options`: :class:`OPFGLOptions` (and the generator/stage settings);
* :mod:`~securefgl.algorithms.opfgl.schema`: what is summed (the ``stats`` request and its schema);
* :mod:`~securefgl.algorithms.opfgl.client`: :class:`OPFGLClient`, the upload and the two local stages
  (helpers: ``_statistics``, ``_train``);
* :mod:`~securefgl.algorithms.opfgl.server`: :class:`OPFGLServer`, the pseudo-graph from the sums (helper:
  ``_pseudo_graph``, shared with the A.5 clients; it imports no client module);
* :mod:`~securefgl.algorithms.opfgl.algorithm`: :class:`OPFGL`, the registered combination;
* :mod:`~securefgl.algorithms.opfgl.presets`: the paper's per-dataset settings.
"""

from __future__ import annotations

from securefgl.algorithms.opfgl.algorithm import OPFGL
from securefgl.algorithms.opfgl.client import OPFGLClient, pseudo_graph_from_broadcast
from securefgl.algorithms.opfgl.options import OPFGLOptions, parse_model_entry
from securefgl.algorithms.opfgl.server import OPFGLServer

__all__ = [
    "OPFGL",
    "OPFGLClient",
    "OPFGLOptions",
    "OPFGLServer",
    "parse_model_entry",
    "pseudo_graph_from_broadcast",
]
