r"""AdaFGL's client half: step 1's local training with the weight of eq. (4), and step 2 (local only).

Step 2 (spec §2.2) corrects each client's topology, smooths its features, scores HCS and trains the
personalised model (:mod:`._local`, :mod:`._batched`, :mod:`._topology`, :mod:`.model`); nothing of it leaves
the client. With ``blend="select"``, each client then counts its validation nodes that every blend of
:math:`\hat Y` with the extractor's :math:`\hat P` gets right; only the sum of these counts leaves.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from securefgl.algorithms.adafgl._local import client_homophily_report, prepare_client, train_prepared
from securefgl.algorithms.adafgl.options import BLEND, STEP1
from securefgl.algorithms.adafgl.server import BLEND_WEIGHT
from securefgl.algorithms.base import Broadcast, Client, Phase, RoundState
from securefgl.algorithms.baselines.fedavg.client import FedAvgClient
from securefgl.errors import TrainingError
from securefgl.training.local_training import predict_shared, workspace_generator

__all__ = ["AdaFGLClient"]


class AdaFGLClient(FedAvgClient):
    """Client-side methods of :class:`~securefgl.algorithms.adafgl.AdaFGL` (a mixin of it).

    Step 1 is FedAvg's client half (:meth:`FedAvgClient._train`) with the weight :math:`n_k` of eq. (4);
    step 2 keeps each client's personalised predictions in ``client.state["adafgl"]``.
    """

    def prox_mu(self) -> float:
        return 0.0

    # ------------------------------------------------------------------ step 1 ----------------------------

    def _weight(self, client: Client) -> int:
        if self.options.weighting == "uniform":
            return 1
        return client.num_nodes if self.options.weighting == "nodes" else client.num_train

    def client_steps(self, clients: Sequence[Client], rs: RoundState) -> dict[int, Any]:
        """FedAvg's client step with the weight of eq. (4): ``{w.<param>: n_k clip_B(W_k), n: n_k}``; in the
        blend phase, ``{blend.val_correct: counts}`` (:meth:`blend_counts`)."""
        if rs.phase == BLEND:
            return {c.id: self._blend_upload(c) for c in clients}
        glob = {n: v.to(clients[0].device) for n, v in rs.broadcast.items()}
        res = self._train(clients, glob, self.setting.train.local_epochs, None, f"{self.name}.train")
        weights = [self._weight(c) for c in clients]
        bound = self.options.param_bound
        out: dict[int, Any] = {c.id: {} for c in clients}
        for n, v in res.params.items():
            w = torch.tensor(weights, dtype=v.dtype, device=v.device).view(-1, *([1] * (v.dim() - 1)))
            for i, part in enumerate((v.clamp(-bound, bound) * w).unbind(0)):
                out[clients[i].id][f"w.{n}"] = part
        for i, c in enumerate(clients):
            c.record_loss(res.losses[i])
            out[c.id]["n"] = torch.tensor([weights[i]], dtype=torch.int64)
        return out

    # ------------------------------------------------------------------ step 2 ----------------------------

    def personalize_clients(self, clients: Sequence[Client], broadcast: Broadcast, phase: Phase) -> None:
        """Step 2 on every client with the chosen extractor (``options.extractor``); sends nothing."""
        if not clients:
            return
        model = self.setting.make_model(generator=torch.Generator().manual_seed(0))  # structure only
        glob = {n: v.to(clients[0].device) for n, v in broadcast.items()}
        logits = predict_shared(model, glob, clients)
        prepared, held = [], {}
        for c in clients:
            d = c.data
            z = logits[c.id].detach().float()
            val = d.val_mask
            if self.options.blend_holdout is not None:
                val, held[c.id] = split_validation(d.val_mask, self.options.blend_holdout, c.id)
            prepared.append(
                prepare_client(
                    d.x.float(),
                    d.edge_index,
                    d.y,
                    (d.train_mask, val, d.test_mask),
                    torch.softmax(z, dim=1),
                    z,
                    self.options,
                    num_classes=self.setting.num_classes,
                    generator=c.generator,
                    client=c.id,
                )
            )
        results = train_prepared(
            prepared,
            self.options,
            num_classes=self.setting.num_classes,
            generators=[c.generator for c in clients],
            batched=self.setting.train.batched,
            batch_generator=workspace_generator(clients),
        )
        for c, p, res in zip(clients, prepared, results, strict=True):
            c.state["adafgl"] = {
                "probs": res.outcome.probs.detach(),
                "p_hat": p.inputs.p_hat.detach(),
                "blends": res.outcome.blends,
                "hcs": res.hcs,
                "best_epoch": res.outcome.best_epoch,
                "similarity_edges": res.similarity_edges,
                "dense_message_passing": res.dense_message_passing,
                "fell_back": res.fell_back,
                **({"blend_val_mask": held[c.id]} if c.id in held else {}),
            }

    # ------------------------------------------------------------------ blend ------------------------------

    def _blend_upload(self, client: Client) -> dict[str, torch.Tensor]:
        out = {"blend.val_correct": self.blend_counts(client)}
        if self.options.blend_alpha is not None:
            out["blend.val_discordant"] = self.blend_discordant(client)
        return out

    def blend_counts(self, client: Client) -> torch.Tensor:
        r"""How many of the client's validation nodes :math:`(1-\gamma)\hat Y + \gamma\hat P` gets right, for
        every :math:`\gamma` of ``blend_grid``: an ``int64`` vector (the blend phase's upload)."""
        right = self._val_right(client)
        return torch.tensor([int(r.sum()) for r in right], dtype=torch.int64)

    def blend_discordant(self, client: Client) -> torch.Tensor:
        r"""For every :math:`\gamma` of ``blend_grid``, how many of the client's validation nodes exactly one of
        that blend and the extractor (:math:`\gamma = 1`) gets right: an ``int64`` vector (``blend_alpha``)."""
        right = self._val_right(client)
        ref = right[self.options.blend_grid.index(1.0)]
        return torch.tensor([int((r ^ ref).sum()) for r in right], dtype=torch.int64)

    def _val_right(self, client: Client) -> list[torch.Tensor]:
        """Per grid weight, the boolean vector of the client's validation nodes that blend gets right (with
        ``blend_holdout``, of the nodes held out of step 2's epoch selection)."""
        st = _step2_state(client)
        y, val = client.data.y.long(), st.get("blend_val_mask", client.data.val_mask)
        return [((_blend(st, g).argmax(dim=1) == y) & val) for g in self.options.blend_grid]

    # ------------------------------------------------------------------ evaluation -------------------------

    def evaluate(
        self, clients: Sequence[Client], broadcast: Broadcast, rs: RoundState
    ) -> dict[int, torch.Tensor]:
        r"""Extractor scores during step 1; :math:`\log\hat Y` of the personalised model after step 2; after
        the blend phase, the log of the blend with the broadcast weight."""
        if rs.phase == STEP1:
            return super().evaluate(clients, broadcast, rs)
        weight = float(broadcast[BLEND_WEIGHT][0]) if rs.phase == BLEND else 0.0
        return {c.id: _blend(_step2_state(c), weight).clamp_min(1e-12).log() for c in clients}

    def client_report(self, client: Client) -> dict[str, Any]:
        """Client-side diagnostics (spec §6): homophily of the local graph and the client's HCS.

        These are individual values: they stay on the client (or in a simulation's report); the server
        never receives them.
        """
        d = client.data
        rep = client_homophily_report(d.edge_index, d.y, self.setting.num_classes)
        st = client.state.get("adafgl")
        if st is not None:
            rep["hcs"] = st["hcs"]
            rep["step2_best_epoch"] = st["best_epoch"]
            rep["similarity_edges"] = st["similarity_edges"]
            rep["step2_fell_back_to_extractor"] = st.get("fell_back", False)
        return rep


#: Seeds the fixed draw of each client's held-out validation nodes (``blend_holdout``), offset by the client id.
HOLDOUT_SEED = 27


def split_validation(val: torch.Tensor, fraction: float, client: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(selection, held out)``: ``round(fraction * |val|)`` of the validation nodes, drawn once per client from
    a fixed seed (a public draw, like the data split: it does not change with the run's seed), held out of
    step 2's epoch selection; each part keeps at least one node when there are two or more."""
    idx = val.nonzero().flatten()
    n = idx.numel()
    k = min(max(round(fraction * n), 1), n - 1) if n >= 2 else 0
    order = torch.randperm(n, generator=torch.Generator().manual_seed(HOLDOUT_SEED + client))
    held = torch.zeros_like(val)
    held[idx[order[:k]].to(val.device)] = True
    return val & ~held, held


def _step2_state(client: Client) -> dict[str, Any]:
    st = client.state.get("adafgl")
    if st is None:
        raise TrainingError(
            f"adafgl: client {client.id} has no step-2 result; the personalize phase did not run"
        )
    return st


def _blend(st: dict[str, Any], weight: float) -> torch.Tensor:
    r""":math:`(1-\gamma)\hat Y + \gamma\hat P` at the blend's own best-validation epoch (exactly :math:`\hat Y`
    at :math:`\gamma = 0`; :class:`~securefgl.algorithms.adafgl.model.LocalOutcome`'s ``blends``)."""
    probs = st["probs"]
    if weight == 0.0:
        return probs
    kept = st.get("blends", {}).get(weight)
    if kept is not None:
        return kept
    return (1.0 - weight) * probs + weight * st["p_hat"].to(probs.dtype)
