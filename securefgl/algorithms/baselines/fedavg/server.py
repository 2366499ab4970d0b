r"""FedAvg's server half: the global model, updated from the two sums only.

.. math::
    w \leftarrow \frac{\sum_k n_k\,\mathrm{clip}_B(w_k)}{\sum_k n_k}
    \quad\text{or, with deltas,}\quad w \leftarrow w + \frac{\sum_k \Delta_k}{\sum_k 1}
"""

from __future__ import annotations

from typing import Any

import torch

from securefgl.algorithms.base import Broadcast, RoundState, Setting
from securefgl.algorithms.baselines.fedavg.schema import uses_delta
from securefgl.protocols.base import Sums

__all__ = ["FedAvgServer"]


class FedAvgServer:
    """Server-side methods of :class:`~securefgl.algorithms.baselines.fedavg.FedAvg` (a mixin of it).

    The server state is ``{"params": {name: tensor}}``: the global model, built from public information and
    then from the released sums.
    """

    setting: Setting
    options: Any

    def init_server(self, generator: torch.Generator) -> dict[str, Any]:
        model = self.setting.make_model(generator=generator)
        return {"params": {n: p.detach().clone() for n, p in model.named_parameters()}}

    def initial_broadcast(self, server: dict[str, Any]) -> Broadcast:
        return dict(server["params"])

    def server_step(self, server: dict[str, Any], sums: Sums, rs: RoundState) -> Broadcast:
        den = float(sums["n"][0])
        if den > 0 and uses_delta(self.options, self.setting.protocol):
            server["params"] = {
                n: (v.to(torch.float64) + sums[f"d.{n}"].to(torch.float64).to(v.device) / den).to(v.dtype)
                for n, v in server["params"].items()
            }
        elif den > 0:
            server["params"] = {
                n: (sums[f"w.{n}"].to(torch.float64) / den).to(v.dtype).to(v.device)
                for n, v in server["params"].items()
            }
        return dict(server["params"])
