"""GAP, federated: node- and edge-level DP with aggregation perturbation; see :mod:`.algorithm`.

Files: ``options.py`` (:class:`GAPOptions`), ``plan.py`` (the public privacy plan and statement), ``model.py``
(encoder and classifier), ``schema.py`` (what is summed), ``client.py`` (the client half), ``server.py`` (the
server half), ``algorithm.py`` (the registered :class:`GAP`).
"""

from __future__ import annotations

from securefgl.algorithms.gap.algorithm import GAP
from securefgl.algorithms.gap.client import GAPClient
from securefgl.algorithms.gap.model import GAPModel
from securefgl.algorithms.gap.options import GAPOptions
from securefgl.algorithms.gap.plan import GAPPlan, head_sensitivity, make_plan
from securefgl.algorithms.gap.server import GAPServer

__all__ = [
    "GAP",
    "GAPClient",
    "GAPModel",
    "GAPOptions",
    "GAPPlan",
    "GAPServer",
    "head_sensitivity",
    "make_plan",
]
