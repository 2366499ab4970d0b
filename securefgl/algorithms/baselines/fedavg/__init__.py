"""FedAvg (McMahan et al., AISTATS 2017) as a secure sum; see :mod:`.algorithm` for the method.

Files: ``options.py`` (:class:`FedAvgOptions`), ``schema.py`` (what is summed), ``client.py`` (the
client half, :class:`FedAvgClient`), ``server.py`` (the server half, :class:`FedAvgServer`),
``algorithm.py`` (the registered :class:`FedAvg`).
"""

from __future__ import annotations

from securefgl.algorithms.baselines.fedavg.algorithm import FedAvg
from securefgl.algorithms.baselines.fedavg.client import FedAvgClient
from securefgl.algorithms.baselines.fedavg.options import FedAvgOptions
from securefgl.algorithms.baselines.fedavg.schema import count_bound, model_schema, uses_delta
from securefgl.algorithms.baselines.fedavg.server import FedAvgServer

__all__ = [
    "FedAvg",
    "FedAvgClient",
    "FedAvgOptions",
    "FedAvgServer",
    "count_bound",
    "model_schema",
    "uses_delta",
]
