r"""AdaFGL's server half: FedAvg's server step, the step-1 extractor kept from the evaluation sums, and the
blend weight chosen from one sum of validation counts (``blend="select"``)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from statistics import NormalDist
from typing import Any

import torch

from securefgl.algorithms.adafgl.options import BLEND, STEP1, STEP2
from securefgl.algorithms.base import Broadcast, Phase, RoundState
from securefgl.algorithms.baselines.fedavg.server import FedAvgServer
from securefgl.protocols.base import Sums

__all__ = ["AdaFGLServer", "blend_test_z"]

#: The broadcast key of the chosen blend weight.
BLEND_WEIGHT = "blend.weight"


def blend_test_z(alpha: float, alternatives: int) -> float:
    r"""The one-sided McNemar threshold of ``blend_alpha``: :math:`z = \Phi^{-1}(1 - \alpha / m)` for the
    :math:`m` weights tested against the extractor (Bonferroni, so that the family's level is :math:`\alpha`)."""
    return NormalDist().inv_cdf(1.0 - alpha / max(alternatives, 1))


class AdaFGLServer(FedAvgServer):
    """Server-side methods of :class:`~securefgl.algorithms.adafgl.AdaFGL` (a mixin of it).

    The server state is FedAvg's (``{"params": ...}``) plus ``"extractor"``: the best step-1 global model and
    its pooled validation accuracy, and with ``blend="select"`` ``"blend"``: the chosen weight and the pooled
    validation counts it was chosen from; all learnt from sums.
    """

    def server_step(self, server: dict[str, Any], sums: Sums, rs: RoundState) -> Broadcast:
        r"""FedAvg's step in step 1; in the blend phase, :math:`\gamma = ` the grid weight with the most pooled
        validation nodes right (the first wins ties), broadcast as ``blend.weight``; with ``blend_alpha``, the
        most among the weights that pass the test against the extractor (:func:`blend_test_z`), else 1."""
        if rs.phase != BLEND:
            return super().server_step(server, sums, rs)
        counts = [int(v) for v in sums["blend.val_correct"].tolist()]
        grid = self.options.blend_grid
        report: dict[str, Any] = {}
        candidates = list(range(len(grid)))
        alpha = self.options.blend_alpha
        if alpha is not None:
            discordant = [int(v) for v in sums["blend.val_discordant"].tolist()]
            ref = grid.index(1.0)
            z = blend_test_z(alpha, len(grid) - 1)
            candidates = [ref] + [
                g for g in candidates if g != ref and counts[g] - counts[ref] > z * math.sqrt(discordant[g])
            ]
            report = {"val_discordant": dict(zip(map(float, grid), discordant, strict=True)), "z": z}
        best = max(candidates, key=lambda g: (counts[g], -g))
        server["blend"] = {
            "weight": float(grid[best]),
            "val_correct": dict(zip(map(float, grid), counts, strict=True)),
            **report,
        }
        return {BLEND_WEIGHT: torch.tensor([float(grid[best])], dtype=torch.float64)}

    def server_evaluated(self, server: Any, metrics: Mapping[str, float], rs: RoundState) -> None:
        r"""Keep the step-1 global model with the best pooled validation accuracy (server side, from sums).

        The accuracy is :math:`\sum_k c_k / \sum_k n_k` of the evaluation sum; the first round wins ties.
        """
        if rs.phase != STEP1:
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
        """Step 2 starts from the kept extractor (``extractor="best_val"``) or the last global model; the blend
        phase downloads nothing (its round sends only counts up)."""
        if phase.name == BLEND:
            return {}
        kept = server.get("extractor") if isinstance(server, Mapping) else None
        if phase.name == STEP2 and self.options.extractor == "best_val" and kept is not None:
            return dict(kept["params"])
        return broadcast

    def run_report(self, server: Any) -> dict[str, Any]:
        """The chosen blend weight and the pooled validation counts per weight (``blend="select"``)."""
        blend = server.get("blend") if isinstance(server, Mapping) else None
        return {} if blend is None else {"adafgl_blend": blend}
