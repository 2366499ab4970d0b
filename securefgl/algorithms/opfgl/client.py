"""O-pFGL's client half: the statistics upload, then the two local stages on the broadcast pseudo-graph.

Each method receives this client's own data (a batch of clients in simulation, one in a deployment) and the
public broadcast; nothing here reads another client's state. The upload is the only message a client sends
(:meth:`OPFGLClient.client_step`); Stage 1 and Stage 2 (:meth:`OPFGLClient.personalize_clients`) are
local. Under variant A.5 every client also rebuilds the pseudo-graph from the sum in its own inbox, with
the same generator the server would run (:mod:`securefgl.algorithms.opfgl._pseudo_graph`).

Paper: Yan et al., *Towards Federated Graph Learning in One-shot Communication* (O-pFGL),
https://arxiv.org/abs/2411.11304
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor

from securefgl.algorithms.base import Broadcast, Client, Phase, RoundState, Setting
from securefgl.algorithms.opfgl._pseudo_graph import PseudoGraph, pseudo_graph_from_sums, seed_from
from securefgl.algorithms.opfgl._statistics import client_statistics
from securefgl.algorithms.opfgl._train import (
    LocalGraph,
    StageResult,
    distillation_weights,
    train_stage1,
    train_stage1_shared,
    train_stage2,
)
from securefgl.algorithms.opfgl.options import OPFGLOptions, parse_model_entry
from securefgl.algorithms.opfgl.schema import STATS, build_schema
from securefgl.errors import InconsistentViewError, TrainingError

__all__ = ["OPFGLClient", "pseudo_graph_from_broadcast"]


def pseudo_graph_from_broadcast(broadcast: Broadcast, num_classes: int) -> PseudoGraph:
    """Rebuild the :class:`PseudoGraph` from the broadcast tensors."""
    return PseudoGraph(
        x=broadcast["x"].float(),
        edge_index=broadcast["edge_index"].long(),
        edge_weight=broadcast["edge_weight"].float(),
        y=broadcast["y"].long(),
        num_classes=num_classes,
        model_seed=int(broadcast["model_seed"]),
    )


class OPFGLClient:
    """The client-side methods of :class:`~securefgl.algorithms.opfgl.OPFGL` (a mixin: no state of its own).

    ``init_client`` and ``client_step`` compute and upload the class statistics; ``personalize_clients``
    runs Stage 1 (on the pseudo-graph) and Stage 2 (on the local graph, distilled from Stage 1's model).
    """

    setting: Setting
    options: OPFGLOptions

    # ------------------------------------------------------------------ the upload ----------------------

    def init_client(self, client: Client) -> None:
        client.state.setdefault("opfgl", {})

    def client_step(self, client: Client, rs: RoundState) -> Any:
        o = self.options
        d = client.data
        stats = client_statistics(
            d.x,
            d.edge_index,
            d.y,
            d.train_mask,
            self.setting.num_classes,
            hops=o.hops,
            lp_iters=o.lp_iters,
            lp_alpha=o.lp_alpha,
            top_k=min(
                o.client_top_k[client.id % len(o.client_top_k)] if o.client_top_k else o.top_k,
                self.setting.num_classes,
            ),
            degree_threshold=o.degree_threshold,
            confidence_threshold=o.confidence_threshold,
            min_count=o.min_count,
            feature_bound=o.feature_bound,
        )
        st = client.state.setdefault("opfgl", {})
        st["soft_labels"] = stats.soft_labels
        st["w_dist"] = stats.w_dist
        st["clip_rate"] = stats.clip_rate
        st["reliable"] = int(stats.reliable.sum())
        st["uploaded_classes"] = [int(c) for c in torch.nonzero(stats.sums["contrib"]).flatten()]
        out = {k: v.cpu() for k, v in stats.sums.items()}
        if o.grid_upload:
            # Round the real blocks to the schema's public fixed-point grid (round to nearest). On-grid
            # values are encoded exactly by every protocol and their sum is exact in float64, so plaintext,
            # secagg, secagg+ and ckks release bit-identical sums and the run does not depend on the protocol.
            steps = build_schema(self.setting, self.options).steps
            for name in ("sum", "sumsq"):
                out[name] = torch.round(out[name] / steps[name]) * steps[name]
        return out

    # ------------------------------------------------------------------ local stages --------------------

    def _make_model(self, client: Client, model_seed: int) -> torch.nn.Module:
        from securefgl.nn.registry import ModelSpec, build_model

        o = self.options
        if o.client_models:
            kwargs = parse_model_entry(o.client_models[client.id % len(o.client_models)])
            kwargs.setdefault("dropout", o.model_dropout if o.model_dropout is not None else 0.0)
            spec = ModelSpec(**kwargs)
            gen = torch.Generator().manual_seed(seed_from(client.generator))
        else:
            spec = self.setting.model
            if o.model_dropout is not None:
                spec = ModelSpec(
                    name=spec.name,
                    hidden=spec.hidden,
                    layers=spec.layers,
                    dropout=o.model_dropout,
                    options=dict(spec.options),
                )
            gen = torch.Generator().manual_seed(int(model_seed))
        return build_model(
            spec, self.setting.num_features, self.setting.num_classes, generator=gen, device=client.device
        )

    def personalize_clients(self, clients: Sequence[Client], broadcast: Broadcast, phase: Phase) -> None:
        """Stage 1 on the pseudo-graph, then Stage 2 on the local graph, for every client."""
        if self.options.generation == "client":
            graphs = self._client_generation(clients, broadcast)
        else:
            graph = (
                pseudo_graph_from_broadcast(broadcast, self.setting.num_classes) if "x" in broadcast else None
            )
            if graph is None and self.options.on_empty == "raise":
                raise TrainingError(
                    "O-pFGL: the broadcast holds no pseudo-graph (no class statistic was released)"
                )
            graphs = {c.id: graph for c in clients}
        model_seed = int(broadcast["model_seed"])
        stage1: dict[int, tuple[dict[str, Tensor], StageResult]] = {}
        first = graphs[clients[0].id] if clients else None
        if not self.options.client_models and first is not None and len(clients) > 1:
            # Homogeneous models: every client starts Stage 1 from the same seeded weights on the same
            # pseudo-graph, so the trajectory is shared; each client still selects its own checkpoint.
            dev = clients[0].device
            model = self._make_model(clients[0], model_seed)
            selected = train_stage1_shared(
                model,
                first.x.to(dev),
                first.edge_index.to(dev),
                first.edge_weight.to(dev),
                first.y.to(dev),
                [(LocalGraph(c.data.x, c.data.edge_index), c.data.y, c.data.val_mask) for c in clients],
                self.options.stage_config(1),
            )
            stage1 = {c.id: sel for c, sel in zip(clients, selected, strict=True)}
        for c in clients:
            self._personalize_one(c, graphs[c.id], model_seed, stage1.get(c.id))

    def _client_generation(
        self, clients: Sequence[Client], broadcast: Broadcast
    ) -> dict[int, PseudoGraph | None]:
        """Variant A.5: every client rebuilds ``G'`` from the sum in its own inbox and the shared seed.

        The engine relays the released sum to every participant (``SumRequest(relay=True)``); each client
        reads only ``client.inbox``. The final digest comparison is the run's consistency check over the
        clients' *digests* (what a deployment would exchange), not over their data.
        """
        graphs: dict[int, PseudoGraph | None] = {}
        digests: dict[int, str] = {}
        for c in clients:
            graph = self._client_graph(c, broadcast)
            graphs[c.id] = graph
            digests[c.id] = c.state["opfgl"]["pseudo_graph_digest"]
        if len(set(digests.values())) != 1:
            raise InconsistentViewError(
                f"O-pFGL A.5: clients built different pseudo-graphs from the same sums and seed: {digests}"
            )
        return graphs

    def _client_graph(self, client: Client, broadcast: Broadcast) -> PseudoGraph | None:
        """One client's A.5 generation: ``G'`` from the sum in its own inbox (decrypted locally) and the seeds."""
        sums = client.inbox.get(STATS)
        if sums is None:
            raise TrainingError(
                f"O-pFGL A.5: client {client.id} has no summed statistics in its inbox "
                f"(the {STATS!r} sum must be relayed to every participant: SumRequest(relay=True))"
            )
        graph, report = pseudo_graph_from_sums(
            sums,
            self.options,
            num_features=self.setting.num_features,
            device=self.setting.device,
            generation_seed=int(broadcast["generation_seed"]),
            model_seed=int(broadcast["model_seed"]),
        )
        st = client.state.setdefault("opfgl", {})
        st["report"] = report
        st["pseudo_graph_digest"] = graph.digest() if graph is not None else "empty"
        return graph

    def _personalize_one(
        self,
        client: Client,
        graph: PseudoGraph | None,
        model_seed: int,
        stage1: tuple[dict[str, Tensor], StageResult] | None = None,
    ) -> None:
        o = self.options
        d = client.data
        st = client.state.setdefault("opfgl", {})
        model = self._make_model(client, model_seed)
        local = LocalGraph(d.x, d.edge_index)
        if graph is not None:
            dev = client.device
            if stage1 is not None:
                model.load_state_dict(stage1[0])
                r1 = stage1[1]
            else:
                r1 = train_stage1(
                    model,
                    graph.x.to(dev),
                    graph.edge_index.to(dev),
                    graph.edge_weight.to(dev),
                    graph.y.to(dev),
                    local,
                    d.y,
                    d.val_mask,
                    o.stage_config(1),
                )
            st["stage1"] = {"best_val": r1.best_val, "best_iter": r1.best_iter, "iters": r1.iters}
            model.eval()
            with torch.no_grad():
                teacher_logits = local.logits(model)
            gamma = distillation_weights(
                st["soft_labels"].to(client.device),
                st["w_dist"].to(client.device),
                beta=o.beta,
                gamma_min=o.gamma_min,
                gamma_max=o.gamma_max,
            )
        else:
            teacher_logits = torch.zeros(d.num_nodes, self.setting.num_classes, device=client.device)
            gamma = torch.zeros(d.num_nodes, device=client.device)
        r2 = train_stage2(
            model, teacher_logits, gamma, local, d.y, d.train_mask, d.val_mask, o.stage_config(2)
        )
        st["stage2"] = {"best_val": r2.best_val, "best_iter": r2.best_iter, "iters": r2.iters}
        client.state["model"] = model
