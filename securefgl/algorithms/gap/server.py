r"""GAP's server half: FedAvg of the phase's parameters, from the two sums only.

.. math::
    \theta \leftarrow \frac{\sum_k n_k\,\mathrm{clip}_B(\theta_k)}{\sum_k n_k}
    \quad\text{or, with deltas,}\quad \theta \leftarrow \theta + \frac{\sum_k \Delta_k}{\sum_k 1}

for the parameters :math:`\theta` the phase trains; the others are broadcast unchanged. Under node-level DP
the sum is one DP-SGD step's noisy gradient sum :math:`G` and the server applies Adam (Kingma and Ba 2015) to
it, its moments kept in the server state (post-processing of released sums):

.. math::
    m \leftarrow \beta_1 m + (1 - \beta_1) G,\quad v \leftarrow \beta_2 v + (1 - \beta_2) G^2,\quad
    \theta \leftarrow \theta - \eta\, \frac{m / (1 - \beta_1^t)}{\sqrt{v / (1 - \beta_2^t)} + 10^{-8}}
"""

from __future__ import annotations

from typing import Any

import torch

from securefgl.algorithms.base import Broadcast, RoundState, Setting
from securefgl.algorithms.gap.model import GAPModel, build_gap_model
from securefgl.algorithms.gap.plan import GAPPlan
from securefgl.algorithms.gap.schema import phase_params
from securefgl.protocols.base import Sums

__all__ = ["GAPServer"]


class GAPServer:
    """Server-side methods of :class:`~securefgl.algorithms.gap.GAP` (a mixin of it).

    Server state: ``{"params": {name: tensor}}``, every part of the model.
    """

    setting: Setting
    options: Any
    plan: GAPPlan

    def _fresh_model(self, generator: torch.Generator) -> GAPModel:
        return build_gap_model(self.setting, self.options, self.plan.hops, generator=generator)

    def init_server(self, generator: torch.Generator) -> dict[str, Any]:
        return {"params": self._fresh_model(generator).flat_state()}

    def initial_broadcast(self, server: dict[str, Any]) -> Broadcast:
        return dict(server["params"])

    def server_step(self, server: dict[str, Any], sums: Sums, rs: RoundState) -> Broadcast:  # type: ignore[override]
        if "n" not in sums:
            self._adam_step(server, sums, rs.phase)
            return dict(server["params"])
        den = float(sums["n"][0])
        if den > 0:
            params = server["params"]
            for name, v in phase_params(params, rs.phase, self.options.classifier).items():
                if f"d.{name}" in sums:
                    new = v.to(torch.float64) + sums[f"d.{name}"].to(torch.float64).to(v.device) / den
                else:
                    new = sums[f"w.{name}"].to(torch.float64).to(v.device) / den
                params[name] = new.to(v.dtype)
        return dict(server["params"])

    def _adam_step(self, server: dict[str, Any], sums: Sums, phase: str) -> None:
        b1, b2, lr = 0.9, 0.999, self.setting.train.lr
        params = server["params"]
        moments = server.setdefault("adam", {})
        t = server.setdefault("adam_t", {}).get(phase, 0) + 1
        server["adam_t"][phase] = t
        for name, v in phase_params(params, phase, self.options.classifier).items():
            g = sums[f"g.{name}"].to(torch.float64).to(v.device)
            m, s2 = moments.get(name, (torch.zeros_like(g), torch.zeros_like(g)))
            m = b1 * m + (1 - b1) * g
            s2 = b2 * s2 + (1 - b2) * g * g
            moments[name] = (m, s2)
            step = lr * (m / (1 - b1**t)) / ((s2 / (1 - b2**t)).sqrt() + 1e-8)
            params[name] = (v.to(torch.float64) - step).to(v.dtype)

    def run_report(self, server: Any) -> dict[str, Any]:
        return {"privacy": self.plan.statement.to_dict()}
