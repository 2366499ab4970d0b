r"""FedLoG's client half: local state, the local round, the uploads, evaluation.

Part of :mod:`securefgl.algorithms.fedlog` (the method is documented on
:class:`~securefgl.algorithms.fedlog.FedLoG`; the training functions are in
:mod:`securefgl.algorithms.fedlog._train`). Every method works on one client's own data, its evaluation-only
sets (``Client.eval_data``, read by the evaluation counters alone) and the public broadcast.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from securefgl.algorithms.base import Broadcast, Client, RoundState, Setting
from securefgl.algorithms.fedlog._train import (
    eval_counters,
    local_epoch,
    predict,
    pretrain_prompt,
    warmup_embedder,
)
from securefgl.algorithms.fedlog.model import (
    FedLoGNet,
    PromptGenerator,
    degree_alpha,
    init_fedlog,
    make_net,
)
from securefgl.algorithms.fedlog.options import FedLoGOptions
from securefgl.training.local_training import seed_from

__all__ = ["FedLoGClient"]


class FedLoGClient:
    """FedLoG's client-side steps (a mixin of :class:`~securefgl.algorithms.fedlog.FedLoG`)."""

    setting: Setting
    options: FedLoGOptions

    def init_client(self, client: Client) -> None:
        o = self.options
        c, m, f = self.setting.num_classes, o.num_proto, self.setting.num_features
        gen = seed_from(client.generator)
        dev = self.setting.device
        data = client.data
        ytr = data.y[data.train_mask]
        counts = torch.bincount(ytr.cpu(), minlength=c).double()
        rho = counts / counts.sum() if counts.sum() > 0 else torch.zeros(c, dtype=torch.float64)
        xh = torch.empty(c * m, f)
        xt = torch.empty(c * m, f)
        bound = (6.0 / (c * m + f)) ** 0.5
        xh.uniform_(-bound, bound, generator=gen)
        xt.uniform_(-bound, bound, generator=gen)
        client.state.update(
            net=make_net(self.setting, self.options, gen),
            xh=xh.to(dev).requires_grad_(True),
            xt=xt.to(dev).requires_grad_(True),
            lam=torch.zeros(c, device=dev),
            rho=rho,
            alpha=degree_alpha(data.edge_index, int(data.num_nodes), o.tau),
            perm_gen=gen,
            psi_c=None,
        )

    def client_steps(self, clients: Sequence[Client], rs: RoundState) -> dict[int, Any]:
        return {cl.id: self.client_step(cl, rs) for cl in clients}

    def client_step(self, client: Client, rs: RoundState) -> dict[str, Any]:
        o = self.options
        st = client.state
        c = self.setting.num_classes
        net: FedLoGNet = st["net"]
        syn, psi_c = self._receive(client, rs)

        psi_contrib = None
        if rs.round == 0 and o.prompt_mode == "paper":
            psi_contrib = self._psi_contribution(client)

        if rs.round == 0 and o.warmup_epochs > 0:  # spec §2.5: same generators as local_epoch
            warmup_embedder(
                net,
                client.data,
                c,
                o.warmup_epochs,
                o.lr,
                o.weight_decay,
                o.batch_size,
                o.warmup_patience,
                st["perm_gen"],
                client.generator,
            )

        loss = local_epoch(
            net,
            st["xh"],
            st["xt"],
            st["lam"],
            client.data,
            o,
            c,
            st["perm_gen"],
            syn,
            psi_c,
            st["alpha"],
            client.generator,
        )
        if loss == loss:  # not NaN: a client without training nodes reports no loss
            client.record_loss(loss)

        st["scores"] = predict(net, st["xh"], st["xt"], client.data.x, client.data.edge_index, c, o.tau)
        correct, count, nc_acc, nc_models = eval_counters(
            net, st["xh"], st["xt"], client.data, client.eval_data, c, o.tau, own=st["scores"]
        )
        out = self._upload(client, correct, count, nc_acc, nc_models)
        if psi_contrib is None:
            return out
        return {"main": out, "psi": psi_contrib}

    def _receive(
        self, client: Client, rs: RoundState
    ) -> tuple[tuple[torch.Tensor, torch.Tensor] | None, dict[int, PromptGenerator] | None]:
        """Load the broadcast; returns the global synthetic data and the prompt generators to use with it.

        The global model goes into the local one, the class-wise prompt generators (downloaded once) into
        ``client.state``.
        """
        o = self.options
        st = client.state
        dev = self.setting.device
        net: FedLoGNet = st["net"]
        theta = {n[len("theta.") :]: v.to(dev) for n, v in rs.broadcast.items() if n.startswith("theta.")}
        net.load_state_dict(theta)
        psi_keys = [k for k in rs.broadcast if k.startswith("psi.")]
        if psi_keys:  # class-wise prompt generators, downloaded once
            psi_c = {}
            for cls in sorted({int(k.split(".")[1]) for k in psi_keys}):
                g = PromptGenerator(self.setting.num_features).to(dev)
                g.load_state_dict({n: rs.broadcast[f"psi.{cls}.{n}"].to(dev) for n in g.state_dict()})
                g.eval()
                psi_c[cls] = g
            st["psi_c"] = psi_c
        syn = None
        if "syn.x" in rs.broadcast:
            syn = (rs.broadcast["syn.x"].to(dev), rs.broadcast["syn.y"].to(dev))
        psi_c = st["psi_c"] if o.prompt_mode == "paper" else None
        if syn is not None and psi_c is not None:  # a class without a released psi_c gets none
            keep = torch.isin(syn[1], torch.tensor(sorted(psi_c), dtype=torch.long, device=dev))
            if not bool(keep.all()):
                psi_c = None
        return syn, psi_c

    def _psi_contribution(self, client: Client) -> dict[str, torch.Tensor]:
        """Round 0: pretrain the client's prompt generator; returns its class-rate-weighted ``psi`` blocks."""
        o = self.options
        st = client.state
        c = self.setting.num_classes
        dev = self.setting.device
        psi = init_fedlog(PromptGenerator(self.setting.num_features), st["perm_gen"]).to(dev)
        pretrain_prompt(
            psi,
            client.data,
            c,
            o.prompt_epochs,
            o.prompt_inits,
            o.prompt_lr,
            st["perm_gen"],
            o.hidden,
            o.out_dim,
            client.generator,
        )
        rho = st["rho"].float().to(dev)
        out = {
            f"psi.{n}": rho.view(-1, *([1] * v.dim()))
            * v.detach().clamp(-o.psi_bound, o.psi_bound).unsqueeze(0)
            for n, v in psi.state_dict().items()
        }
        out["psi.den"] = rho
        out["psi.holders"] = (st["rho"] > 0).long()
        return out

    def _upload(
        self, client: Client, correct: list[int], count: list[int], nc_acc: float, nc_models: int
    ) -> dict[str, Any]:
        """The ``main`` contribution: model, permuted synthetic nodes, holders, evaluation counters."""
        o = self.options
        st = client.state
        c, m = self.setting.num_classes, o.num_proto
        dev = self.setting.device
        net: FedLoGNet = st["net"]
        wk = 1 if o.weighting == "uniform" else client.num_train
        rho = st["rho"].float().to(dev)
        xh = st["xh"].detach().clamp(-o.x_bound, o.x_bound).view(c, m, -1)
        perm = torch.stack([torch.randperm(m, generator=st["perm_gen"]) for _ in range(c)]).to(dev)
        xh = torch.gather(xh, 1, perm.unsqueeze(-1).expand_as(xh))  # client-side slot permutation pi_k
        out: dict[str, Any] = {
            f"theta.{n}": wk * v.detach().clamp(-o.param_bound, o.param_bound)
            for n, v in net.state_dict().items()
        }
        out.update(
            {
                "theta.den": torch.tensor([wk], dtype=torch.int64),
                "xh.num": rho.view(c, 1, 1) * xh,
                "xh.den": rho,
                "holders": (st["rho"] > 0).long(),
                "eval.correct": torch.tensor(correct, dtype=torch.int64),
                "eval.count": torch.tensor(count, dtype=torch.int64),
                "eval.nc_acc": torch.tensor([nc_acc]),
                "eval.nc_models": torch.tensor([nc_models], dtype=torch.int64),
            }
        )
        return out

    def evaluate(
        self, clients: Sequence[Client], broadcast: Broadcast, rs: RoundState
    ) -> dict[int, torch.Tensor]:
        out = {}
        for cl in clients:
            st = cl.state
            if st.get("scores") is not None:  # the local model has not changed since its client step
                out[cl.id] = st["scores"]
                continue
            out[cl.id] = predict(
                st["net"],
                st["xh"],
                st["xt"],
                cl.data.x,
                cl.data.edge_index,
                self.setting.num_classes,
                self.options.tau,
            )
        return out
