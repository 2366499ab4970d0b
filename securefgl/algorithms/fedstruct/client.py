"""FedStruct's client half: the directory entry, the private setup of :math:`\bar A_{[i]}`, FedSGD gradients.

Each method receives this client's own data (with its inter-client edges, see
:func:`~securefgl.data.cross_edges.attach_cross_edges`) and the public broadcast; a client reads another
client's contribution only as the secure sum in its own inbox (``abar``, designated-recipient). The setup
math is in :mod:`securefgl.algorithms.fedstruct._setup`.

Aliakbari et al., *FedStruct*, https://arxiv.org/abs/2402.19163; spec ``shared/specs/fedstruct.md``.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch.func import functional_call

from securefgl.algorithms.base import Broadcast, Client, RoundState, Setting
from securefgl.algorithms.fedstruct._setup import (
    SingleContributorWarning,
    StructureView,
    _betas,
    local_abar,
    prune_top,
)
from securefgl.algorithms.fedstruct.model import DecoupledGCN, decoupled_gcn
from securefgl.algorithms.fedstruct.options import FedStructOptions
from securefgl.algorithms.fedstruct.schema import SETUP_KEY, uploads
from securefgl.errors import TrainingError

__all__ = ["FedStructClient"]


class FedStructClient:
    """The client-side methods of :class:`~securefgl.algorithms.fedstruct.FedStruct` (a mixin: no state of its own).

    Per-client state lives in ``client.state["fedstruct"]``: the structure view, the powers received so far,
    the running :math:`\bar A_{[i]}` and the local :math:`\bar A^{(i)}`.
    """

    setting: Setting
    options: FedStructOptions

    def init_client(self, client: Client) -> None:
        o = self.options
        view = StructureView.from_data(client.id, client.data)
        adj = [c for c in view.adjacent_clients() if c != client.id]
        if o.num_hops_s > 1 and len(adj) == 1:
            warnings.warn(
                f"FedStruct setup: client {client.id} has a single other adjacent client ({adj[0]}); the secure "
                "sum it receives hides nothing about that client's block (spec §3.4)",
                SingleContributorWarning,
                stacklevel=2,
            )
        p1 = view.first_power()
        betas = _betas(o.num_hops_s, o.beta)
        aloc = local_abar(view.edge_index, view.num_nodes, o.num_hops)
        client.state["fedstruct"] = {
            "view": view,
            "P": {1: p1},
            "level": 1,
            "abar_sorted": betas[0] * p1,
            "betas": betas,
            "aloc": aloc.to(torch.float32).to(client.device),
            "abar": None,
            "bytes_setup": 0,
        }

    def _drain(self, client: Client) -> None:
        st = client.state["fedstruct"]
        sums = client.inbox.pop(SETUP_KEY, None)
        if sums is None:
            return
        view: StructureView = st["view"]
        level = st["level"] + 1
        p = sums["B"].to(torch.float64).cpu() / view.tilde_deg[:, None]
        if self.options.prune_p is not None:
            p = prune_top(p, self.options.prune_p * view.num_nodes)
        st["P"][level] = p
        st["level"] = level
        st["abar_sorted"] = st["abar_sorted"] + st["betas"][level - 1] * p

    def _finalize(self, client: Client) -> None:
        st = client.state["fedstruct"]
        if st["abar"] is not None:
            return
        if st["level"] != self.options.num_hops_s:
            raise TrainingError(
                f"fedstruct: client {client.id} reached training with power {st['level']} of "
                f"num_hops_s={self.options.num_hops_s}; the setup did not complete"
            )
        view: StructureView = st["view"]
        st["abar"] = st["abar_sorted"][view.rank()].to(torch.float32).to(client.device)
        st["P"].clear()
        st["abar_sorted"] = None

    def _directory_contribution(self, client: Client) -> dict[str, torch.Tensor]:
        view: StructureView = client.state["fedstruct"]["view"]
        owner = torch.zeros(view.n, dtype=torch.int64)
        owner[view.gid] = client.id + 1
        out = {"owner": owner}
        if self.options.nsf == "degree":
            deg = torch.zeros(view.n, dtype=torch.int64)
            deg[view.gid[view.order]] = (view.tilde_deg - 1).round().long()
            out["degree"] = deg
        return out

    def client_steps(self, clients: Sequence[Client], rs: RoundState) -> dict[int, Any]:
        for c in clients:
            self._drain(c)
        if rs.phase == "directory":
            return {c.id: self._directory_contribution(c) for c in clients}
        if rs.phase == "setup":
            k = self.setting.num_clients
            level, receiver = 2 + rs.round // k, rs.round % k
            owner = rs.broadcast["owner"].cpu()
            n_i = int((owner == receiver).sum())
            out = {}
            for c in clients:
                st = c.state["fedstruct"]
                for lv in [lv for lv in st["P"] if lv < level - 1]:
                    del st["P"][lv]
                out[c.id] = {"B": st["view"].contribution(receiver, n_i, owner, st["P"][level - 1])}
            return out
        return {c.id: self._train_step(c, rs) for c in clients}

    def _forward(
        self, client: Client, broadcast: Broadcast, params: dict[str, torch.Tensor], model: DecoupledGCN
    ):
        st = client.state["fedstruct"]
        s = params["S"] if "S" in params else broadcast["S"].to(client.device)
        theta = {k[len("theta.") :]: v for k, v in params.items() if k.startswith("theta.")}
        return functional_call(model, theta, (client.data.x, st["aloc"], st["abar"], s))

    def _train_step(self, client: Client, rs: RoundState) -> dict[str, torch.Tensor]:
        self._finalize(client)
        st = client.state["fedstruct"]
        model = decoupled_gcn(self.setting, self.options).to(client.device).train()
        params = {
            k: v.detach().to(client.device).clone().requires_grad_(uploads(self.options, k))
            for k, v in rs.broadcast.items()
            if k.startswith("theta.") or (k == "S" and self.options.nsf == "h2v")
        }
        devices = [] if client.device.type != "cuda" else [client.device]
        with torch.random.fork_rng(devices=devices):
            torch.manual_seed(int(torch.randint(0, 2**62, (1,), generator=client.generator)))
            if self.options.u_form:
                theta = {k[len("theta.") :]: v for k, v in params.items() if k.startswith("theta.")}
                s = params["S"] if "S" in params else rs.broadcast["S"].to(client.device)
                with torch.no_grad():
                    g_out = functional_call(
                        model.g, {k[2:]: v for k, v in theta.items() if k.startswith("g.")}, (s,)
                    )
                leaf = g_out.detach().requires_grad_(True)
                f_out = functional_call(
                    model.f, {k[2:]: v for k, v in theta.items() if k.startswith("f.")}, (client.data.x,)
                )
                logits = st["aloc"] @ f_out + st["abar"] @ leaf
            else:
                logits = self._forward(client, rs.broadcast, params, model)
        mask = client.data.train_mask
        loss = F.cross_entropy(logits[mask], client.data.y[mask], reduction="sum")
        names = [k for k in params if uploads(self.options, k)]
        wrt = [params[k] for k in names] + ([leaf] if self.options.u_form else [])
        if int(mask.sum()) > 0:
            grads = list(torch.autograd.grad(loss, wrt, allow_unused=True))
        else:
            grads = [None] * len(wrt)
        client.record_loss(float(loss.detach()) / max(int(mask.sum()), 1))
        out = {
            f"g.{k}": (torch.zeros_like(params[k]) if g is None else g).detach().cpu()
            for k, g in zip(names, grads, strict=False)
        }
        if self.options.u_form:
            u = grads[-1]
            out["U"] = (torch.zeros_like(leaf) if u is None else u).detach().cpu()
        out["count"] = torch.tensor([int(mask.sum())], dtype=torch.int64)
        return out

    # ------------------------------------------------------------------ evaluation -----------------------

    def evaluate(
        self, clients: Sequence[Client], broadcast: Broadcast, rs: RoundState
    ) -> dict[int, torch.Tensor]:
        out = {}
        for c in clients:
            self._drain(c)
            self._finalize(c)
            model = decoupled_gcn(self.setting, self.options).to(c.device).eval()
            params = {k: v.to(c.device) for k, v in broadcast.items() if k.startswith("theta.") or k == "S"}
            with torch.no_grad():
                out[c.id] = self._forward(c, broadcast, params, model)
        return out
