"""AdaFGL's server half: FedAvg's server step, and the step-1 extractor kept from the evaluation sums."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from securefgl.algorithms.adafgl.options import STEP2
from securefgl.algorithms.base import Broadcast, Phase, RoundState
from securefgl.algorithms.baselines.fedavg.server import FedAvgServer

__all__ = ["AdaFGLServer"]


class AdaFGLServer(FedAvgServer):
    """Server-side methods of :class:`~securefgl.algorithms.adafgl.AdaFGL` (a mixin of it).

    The server state is FedAvg's (``{"params": ...}``) plus ``"extractor"``: the best step-1 global model and
    its pooled validation accuracy, both learnt from sums.
    """

    def server_evaluated(self, server: Any, metrics: Mapping[str, float], rs: RoundState) -> None:
        r"""Keep the step-1 global model with the best pooled validation accuracy (server side, from sums).

        The accuracy is :math:`\sum_k c_k / \sum_k n_k` of the evaluation sum; the first round wins ties.
        """
        if rs.phase == STEP2:
            return
        acc = float(metrics.get("val_acc_pooled", float("nan")))
        if math.isnan(acc):
            return
        kept = server.get("extractor")
        if kept is None or acc > kept["acc"]:
            server["extractor"] = {
                "acc": acc,
                "params": {n: v.detach().clone() for n, v in rs.broadcast.items()},
            }

    def start_phase(self, server: Any, phase: Phase, broadcast: Broadcast) -> Broadcast:
        """Step 2 starts from the kept extractor (``extractor="best_val"``) or the last global model."""
        kept = server.get("extractor") if isinstance(server, Mapping) else None
        if phase.name == STEP2 and self.options.extractor == "best_val" and kept is not None:
            return dict(kept["params"])
        return broadcast
