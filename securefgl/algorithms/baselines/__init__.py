"""The baselines: FedAvg, FedProx, Local and Centralized, registered by name.

FedAvg is a package with the files every algorithm package has (``options.py``, ``schema.py``, ``client.py``,
``server.py``, ``algorithm.py``). FedProx changes only FedAvg's client half (a proximal weight), and Local and
Centralized sum nothing (no server half), so each of them is one module.
"""

from __future__ import annotations

from securefgl.algorithms.baselines.centralized import Centralized
from securefgl.algorithms.baselines.fedavg import FedAvg, FedAvgClient, FedAvgOptions, FedAvgServer
from securefgl.algorithms.baselines.fedprox import FedProx
from securefgl.algorithms.baselines.local import Local

__all__ = ["Centralized", "FedAvg", "FedAvgClient", "FedAvgOptions", "FedAvgServer", "FedProx", "Local"]
