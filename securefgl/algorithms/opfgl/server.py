"""O-pFGL's server half: public seeds, then the pseudo-graph built from the released sums only.

The server step receives the ``stats`` sum (``A, B, Q, M, O`` and the clip counts), turns it into class
moments and optimises the global pseudo-graph :math:`G'` (:mod:`securefgl.algorithms.opfgl._pseudo_graph`),
which it broadcasts with the model seed. Under variant A.5 it receives no sum and only relays the seeds.
This module imports no client-side module, nor ``securefgl.training``, ``securefgl.data`` or
``securefgl.engine``.

Paper: Yan et al., *Towards Federated Graph Learning in One-shot Communication* (O-pFGL),
https://arxiv.org/abs/2411.11304
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor

from securefgl.algorithms.base import Broadcast, RoundState, Setting
from securefgl.algorithms.opfgl._pseudo_graph import pseudo_graph_from_sums, seed_from
from securefgl.algorithms.opfgl.options import OPFGLOptions
from securefgl.algorithms.opfgl.schema import STATS

__all__ = ["OPFGLServer"]


class OPFGLServer:
    """The server-side methods of :class:`~securefgl.algorithms.opfgl.OPFGL` (a mixin: no state of its own).

    The server state (``init_server``) holds the two public seeds and the report of what the server learnt.
    """

    setting: Setting
    options: OPFGLOptions

    def init_server(self, generator: torch.Generator) -> Any:
        return {
            "generation_seed": seed_from(generator),
            "model_seed": seed_from(generator),
            "report": {},
        }

    def initial_broadcast(self, server: Any) -> Broadcast:
        return {
            "generation_seed": torch.tensor([server["generation_seed"]], dtype=torch.int64),
            "model_seed": torch.tensor([server["model_seed"]], dtype=torch.int64),
        }

    def server_step(self, server: Any, sums: Any, rs: RoundState) -> Broadcast:
        if self.options.generation == "client":
            # A.5: the server received no sum; it only relays the public seeds.
            return dict(rs.broadcast)
        if isinstance(sums, Mapping) and STATS in sums and not hasattr(sums, "withheld_rows"):
            sums = sums[STATS]
        graph, report = pseudo_graph_from_sums(
            sums,
            self.options,
            num_features=self.setting.num_features,
            device=self.setting.device,
            generation_seed=server["generation_seed"],
            model_seed=server["model_seed"],
        )
        server["report"] = report
        out: dict[str, Tensor] = {"model_seed": torch.tensor([server["model_seed"]], dtype=torch.int64)}
        released = torch.zeros(self.setting.num_classes, dtype=torch.bool)
        released[report["released_classes"]] = True
        out["released"] = released
        if graph is not None:
            out.update(
                x=graph.x,
                edge_index=graph.edge_index.to(torch.int32),
                edge_weight=graph.edge_weight,
                y=graph.y.to(torch.int16),
            )
        report["broadcast_bytes"] = int(sum(t.numel() * t.element_size() for t in out.values()))
        return out

    def run_report(self, server: Any) -> dict[str, Any]:
        """What the server learnt and decided (released/withheld/absent classes, pseudo-graph diagnostics)."""
        return dict(server.get("report", {})) if isinstance(server, Mapping) else {}
