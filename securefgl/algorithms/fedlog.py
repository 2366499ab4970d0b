r"""FedLoG (Kim et al., ICLR 2025), https://arxiv.org/abs/2503.03995, with the server seeing sums only.

"Subgraph Federated Learning for Local Generalization": each client trains a GraphSAGE embedder with a
head-degree and a tail-degree prototype branch (:math:`m` learnable synthetic nodes per class and branch,
:math:`X^H_k, X^T_k \in \mathbb{R}^{Cm\times F}`), mixed per node by :math:`\alpha_v=\sigma(\deg v-(\tau+1))`.
The server turns the clients' head-branch synthetic nodes into *global synthetic data* weighted by class rate,
and every client additionally fits that data (feature scaling :math:`\lambda_{k,c}` and class-wise prompt
generators :math:`\psi_c`) so that it generalises to classes and nodes it never saw. Spec:
``shared/specs/fedlog.md``.

Client :math:`k`, round :math:`r` (one local epoch of mini-batches :math:`B`):

.. math::
    L = \underbrace{\tfrac{1}{|B|}\textstyle\sum_{v\in B}\big[\alpha_v\,\mathrm{CE}_H(v)+(1-\alpha_v)\,
    \mathrm{CE}_T(v)\big]}_{L_{pred}} + \beta\,\tfrac12(\lVert X^H_k\rVert_F+\lVert X^T_k\rVert_F)
    + \gamma\,L_{syn}(\hat X,\tilde y),\qquad
    \hat x_{c,j} = \tilde x_{c,j} + \lambda_{k,c}(\bar x - \tilde x_{c,j})

Server (Eq. 4 and the model average), written as ratios of sums (spec §3):

.. math::
    \theta = \frac{\sum_k a_k\,\mathrm{clip}(\theta_k)}{\sum_k a_k},\qquad
    \tilde X[c] = \frac{\sum_k \rho_{k,c}\,\pi_{k,c}(X^H_k[c])}{\sum_k \rho_{k,c}},\qquad
    \psi_c = \frac{\sum_k \rho_{k,c}\,\psi_k}{\sum_k \rho_{k,c}}

with :math:`\rho_{k,c}` the share of class :math:`c` among client :math:`k`'s training labels,
:math:`a_k = 1` (``weighting="uniform"``, the code) or :math:`n_k`, and :math:`\pi_{k,c}` a fresh random
permutation of the :math:`m` slots drawn *by the client*. One secure sum per round carries the numerators,
the denominators, the per-class holder counts :math:`\sum_k 1[\rho_{k,c}>0]` and the evaluation counters; the
prompt generators are summed once (round 0). Class rows of :math:`\tilde X` and :math:`\psi_c` are released
row-wise under the minimum-contributors rule (``min_holders``); a class held by nobody, or by fewer than
``min_holders`` clients, gets no synthetic nodes and is listed in the run report.

Privacy (spec §3, §6): the server learns :math:`\theta`, :math:`\tilde X`, :math:`\sum_k\rho_{k,c}`,
:math:`\psi_c` and pooled metrics. :math:`X^T_k`, :math:`\lambda_k` and the optimiser state never leave the
client; no client reads another client's synthetic nodes. With ``min_holders=1`` (paper behaviour) a class
held by one client releases that client's permuted :math:`\rho X^H_k[c]` (spec §3 item 3); raise
``min_holders`` to withhold it (at the cost of Missing-Class accuracy).

Evaluation (spec §1.2): the engine's metrics are the local models' Seen-Graph val/test accuracy. FedLoG's
generalisation metrics (Seen Graph, Unseen Node, Missing Class pooled; New Client mean over local models) are
summed securely as integer counters in each round's upload; the server's history and the best-round pick (by
pooled Seen-Graph val accuracy, later rounds win ties) are in ``run_report``. Attach the test sets with
:func:`attach_generalization_sets`: they go to ``FederatedGraph.client_eval``, which the engine hands to each
client as ``Client.eval_data``; only the evaluation counters read them, never the training steps.

Args:
    num_proto: ``m``, synthetic nodes per class and branch. (default: ``20``)
    tau: Tail-degree threshold. (default: ``3``)
    beta: Norm-regulariser weight. (default: ``1.0``)
    gamma: ``L_syn`` weight. (default: ``1.0``)
    lr: Adam learning rate of the model and the synthetic nodes. (default: ``0.001``)
    weight_decay: Model weight decay. (default: ``5e-4``)
    batch_size: Training nodes per step. (default: ``64``)
    hidden: Embedder hidden width. (default: ``128``)
    out_dim: Embedding width. (default: ``64``)
    dropout: Embedder dropout. (default: ``0.5``)
    classifier_mode: ``"paper"`` (Eqs. 8-10, per-query mean over all :math:`Cm` prototypes; costs
        :math:`O(N C m D^2)` per forward, so training refines only the mini-batch rows) or ``"released"`` (the
        official code's behaviour: :math:`\tilde h = \mathrm{LN}(h)`, which the spec says likely produced the
        published numbers). (default: ``"paper"``)
    prompt_mode: ``"paper"`` (pretrained :math:`\psi_k` -> secure :math:`\psi_c`, eval mode) or ``"none"``
        (the w/o-PG ablation). (default: ``"paper"``)
    prompt_epochs: Prompt-generator pretraining epochs. (default: ``100``)
    prompt_inits: ``T`` random GNN initialisations of the gradient-matching loss. (default: ``20``)
    prompt_lr: Prompt-generator learning rate. (default: ``0.01``)
    warmup_epochs: Round-0 cross-entropy warm-up of the embedder with a throw-away linear head, before the
        first local epoch, at most this many epochs, early-stopped on the client's val accuracy (spec §2.5).
        A code-only step [C], not in the paper, so off by default (``0``). The spec recommends it on, to match
        the code (``100``), but the tables reproduced in ``examples/reproduce_fedlog.py`` were measured
        without it, and a diagnosis run of 100 rounds on Cora with K=3 showed that it speeds up the start but
        does not improve the 100-round result. (default: ``0``)
    warmup_patience: Epochs without a val-accuracy improvement before the warm-up stops (the code's 10,
        there on test accuracy). (default: ``10``)
    lambda_step: Per-step change of :math:`\lambda_{k,c}`. (default: ``0.001``)
    lambda_threshold: Synthetic class accuracy above which :math:`\lambda_{k,c}` grows. (default: ``0.8``)
    weighting: ``"uniform"`` (the code) or ``"train"`` (by train-node count) model averaging.
    min_holders: Minimum number of clients holding a class for its synthetic rows to be released.
        (default: ``1``)
    param_bound: Public clip range of model parameters. (default: ``8.0``)
    x_bound: Public clip range of synthetic features. (default: ``1.0``)
    psi_bound: Public clip range of prompt-generator parameters. (default: ``8.0``)

Shapes:
    Upload per client and round: the model's parameters, ``xh.num`` ``(C, m, F)``, ``xh.den`` and
    ``holders`` ``(C,)``, counters ``(4,)``; once: ``psi.*`` ``(C, *param)``. Download: the model,
    ``syn.x`` ``(C' m, F)`` and ``syn.y`` ``(C' m,)`` for the ``C'`` released classes; once: :math:`\psi_c`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import torch

from securefgl.algorithms._fedlog_client import (
    eval_counters,
    local_epoch,
    predict,
    pretrain_prompt,
    warmup_embedder,
)
from securefgl.algorithms._fedlog_eval import attach_generalization_sets, best_round
from securefgl.algorithms._fedlog_model import FedLoGNet, PromptGenerator, degree_alpha, init_fedlog
from securefgl.algorithms.base import (
    Algorithm,
    Broadcast,
    Client,
    Phase,
    RoundState,
    SumRequest,
)
from securefgl.algorithms.registry import register_algorithm
from securefgl.errors import ConfigError
from securefgl.protocols.base import Sums
from securefgl.protocols.encoding import BlockSpec, SumSchema
from securefgl.training.local_training import seed_from

__all__ = ["FedLoG", "attach_generalization_sets", "best_round"]

_EVAL_NAMES = ("seen_val", "seen_test", "unseen_node", "missing_class")


@register_algorithm
class FedLoG(Algorithm):
    """FedLoG with secure class-rate-weighted global synthetic data (see the module docstring)."""

    name = "fedlog"

    @dataclass(frozen=True)
    class Options:
        num_proto: int = 20
        tau: float = 3.0
        beta: float = 1.0
        gamma: float = 1.0
        lr: float = 0.001
        weight_decay: float = 5e-4
        batch_size: int = 64
        hidden: int = 128
        out_dim: int = 64
        dropout: float = 0.5
        classifier_mode: Literal["paper", "released"] = "paper"
        prompt_mode: Literal["paper", "none"] = "paper"
        prompt_epochs: int = 100
        prompt_inits: int = 20
        prompt_lr: float = 0.01
        warmup_epochs: int = 0
        warmup_patience: int = 10
        lambda_step: float = 0.001
        lambda_threshold: float = 0.8
        weighting: Literal["uniform", "train"] = "uniform"
        min_holders: int = 1
        param_bound: float = 8.0
        x_bound: float = 1.0
        psi_bound: float = 8.0

        def __post_init__(self) -> None:
            checks = {
                "num_proto": self.num_proto >= 1,
                "tau": self.tau >= 0,
                "beta": self.beta >= 0,
                "gamma": self.gamma >= 0,
                "lr": self.lr > 0,
                "weight_decay": self.weight_decay >= 0,
                "batch_size": self.batch_size >= 1,
                "hidden": self.hidden >= 1,
                "out_dim": self.out_dim >= 1,
                "dropout": 0 <= self.dropout < 1,
                "prompt_epochs": self.prompt_epochs >= 0,
                "prompt_inits": self.prompt_inits >= 0,
                "prompt_lr": self.prompt_lr > 0,
                "warmup_epochs": self.warmup_epochs >= 0,
                "warmup_patience": self.warmup_patience >= 1,
                "lambda_step": 0 <= self.lambda_step <= 1,
                "lambda_threshold": 0 <= self.lambda_threshold <= 1,
                "min_holders": self.min_holders >= 1,
                "param_bound": self.param_bound > 0,
                "x_bound": self.x_bound > 0,
                "psi_bound": self.psi_bound > 0,
            }
            bad = [k for k, ok in checks.items() if not ok]
            if bad:
                raise ConfigError(
                    f"algorithm.options.{bad[0]}={getattr(self, bad[0])!r} is out of range "
                    "(num_proto/batch_size/hidden/out_dim/min_holders/warmup_patience >= 1, "
                    "dropout in [0, 1), lambda_* in [0, 1], lr/prompt_lr/bounds > 0, the rest >= 0)"
                )
            if self.classifier_mode not in ("paper", "released"):
                raise ConfigError(
                    f"algorithm.options.classifier_mode={self.classifier_mode!r}; valid: 'paper', 'released'"
                )
            if self.prompt_mode not in ("paper", "none"):
                raise ConfigError(
                    f"algorithm.options.prompt_mode={self.prompt_mode!r}; valid: 'paper', 'none'"
                )
            if self.weighting not in ("uniform", "train"):
                raise ConfigError(
                    f"algorithm.options.weighting={self.weighting!r}; valid: 'uniform', 'train'"
                )

    # ------------------------------------------------------------------ helpers ---------------------------

    def _net(self, generator: torch.Generator) -> FedLoGNet:
        o = self.options
        net = FedLoGNet(self.setting.num_features, o.hidden, o.out_dim, o.dropout, o.classifier_mode)
        return init_fedlog(net, generator).to(self.setting.device)

    def _weight_bound(self) -> int:
        return 1 if self.options.weighting == "uniform" else self.setting.count_bound

    def _max_clients(self, rs: RoundState) -> int:
        return max(self.setting.max_clients_per_round, len(rs.clients), 1)

    def phases(self, train: Any) -> Sequence[Phase]:
        return (Phase("train", kind="rounds", rounds=train.rounds, sample=False),)

    # ------------------------------------------------------------------ server ----------------------------

    def init_server(self, generator: torch.Generator) -> dict[str, Any]:
        net = self._net(generator)
        return {
            "theta": {n: p.detach().clone() for n, p in net.state_dict().items()},
            "history": [],
            "classes": {},
        }

    def initial_broadcast(self, server: dict[str, Any]) -> Broadcast:
        return {f"theta.{n}": v for n, v in server["theta"].items()}

    def _theta_names(self) -> list[tuple[str, tuple[int, ...]]]:
        net = FedLoGNet(
            self.setting.num_features,
            self.options.hidden,
            self.options.out_dim,
            0.0,
            self.options.classifier_mode,
        )
        return [(n, tuple(v.shape)) for n, v in net.state_dict().items()]

    def requests(self, rs: RoundState) -> Sequence[SumRequest]:
        c, m, f = self.setting.num_classes, self.options.num_proto, self.setting.num_features
        k = self._max_clients(rs)
        mh = self.options.min_holders
        wb = self._weight_bound()
        blocks = [
            BlockSpec(f"theta.{n}", s, bound=wb * self.options.param_bound) for n, s in self._theta_names()
        ]
        blocks += [
            BlockSpec("theta.den", (1,), kind="count", bound=wb),
            BlockSpec(
                "xh.num", (c, m, f), bound=self.options.x_bound, min_contributors=mh, counted_by="holders"
            ),
            BlockSpec("xh.den", (c,), bound=1.0, min_contributors=mh, counted_by="holders"),
            BlockSpec("holders", (c,), kind="count", bound=1),
            BlockSpec("eval.correct", (4,), kind="count", bound=self.setting.count_bound),
            BlockSpec("eval.count", (4,), kind="count", bound=self.setting.count_bound),
            BlockSpec("eval.nc_acc", (1,), bound=1.0),
            BlockSpec("eval.nc_models", (1,), kind="count", bound=1),
        ]
        out = [SumRequest("main", SumSchema(blocks, max_clients=k))]
        if rs.round == 0 and self.options.prompt_mode == "paper":
            psi = PromptGenerator(f)
            pblocks = [
                BlockSpec(
                    f"psi.{n}",
                    (c, *v.shape),
                    bound=self.options.psi_bound,
                    min_contributors=mh,
                    counted_by="psi.holders",
                )
                for n, v in psi.state_dict().items()
            ]
            pblocks += [
                BlockSpec("psi.den", (c,), bound=1.0, min_contributors=mh, counted_by="psi.holders"),
                BlockSpec("psi.holders", (c,), kind="count", bound=1),
            ]
            out.append(SumRequest("psi", SumSchema(pblocks, max_clients=k)))
        return out

    def server_step(
        self, server: dict[str, Any], sums: Sums | Mapping[str, Sums], rs: RoundState
    ) -> Broadcast:
        main = sums["main"] if not isinstance(sums, Sums) else sums
        psi_sums = None if isinstance(sums, Sums) else sums.get("psi")
        den = float(main["theta.den"][0])
        if den > 0:
            server["theta"] = {n: (main[f"theta.{n}"].double() / den).float() for n in server["theta"]}
        out: dict[str, torch.Tensor] = {f"theta.{n}": v for n, v in server["theta"].items()}

        c_all = self.setting.num_classes
        holders = main["holders"].round().long()
        withheld = main.withheld_rows("xh.num")
        withheld = torch.zeros(c_all, dtype=torch.bool) if withheld is None else withheld.cpu().bool()
        xden = main["xh.den"]
        ok = [c for c in range(c_all) if not withheld[c] and int(holders[c]) > 0 and float(xden[c]) > 0]
        server["classes"] = {
            "absent": [c for c in range(c_all) if int(holders[c]) == 0],
            "withheld": [c for c in range(c_all) if int(holders[c]) > 0 and bool(withheld[c])],
            "synthetic": ok,
        }
        if ok:
            num = main["xh.num"][ok].double()
            syn = num / xden[ok].double().view(-1, 1, 1)
            m = syn.shape[1]
            out["syn.x"] = syn.reshape(len(ok) * m, -1).float()
            out["syn.y"] = torch.tensor(ok, dtype=torch.long).repeat_interleave(m)
        if psi_sums is not None:
            pden = psi_sums["psi.den"]
            prow = psi_sums.withheld_rows("psi.den")
            for c in range(c_all):
                if float(pden[c]) > 0 and not (prow is not None and bool(prow[c])):
                    for n in PromptGenerator(1).state_dict():
                        out[f"psi.{c}.{n}"] = (psi_sums[f"psi.{n}"][c].double() / float(pden[c])).float()

        cnt = main["eval.count"].double()
        cor = main["eval.correct"].double()
        rec: dict[str, Any] = {"round": rs.round}
        for i, name in enumerate(_EVAL_NAMES):
            rec[name] = float(cor[i] / cnt[i]) if cnt[i] > 0 else None
            rec[f"{name}_n"] = int(cnt[i])
        nm = int(main["eval.nc_models"][0])
        rec["new_client"] = float(main["eval.nc_acc"][0]) / nm if nm > 0 else None
        server["history"].append(rec)
        return out

    def run_report(self, server: Any) -> dict[str, Any]:
        hist = server["history"]
        return {
            "fedlog": {
                "best": best_round(hist),
                "last": hist[-1] if hist else None,
                "classes": server["classes"],
                "history": hist,
            }
        }

    # ------------------------------------------------------------------ clients ---------------------------

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
            net=self._net(gen),
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
        c, m = self.setting.num_classes, o.num_proto
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

        psi_contrib = None
        if rs.round == 0 and o.prompt_mode == "paper":
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
            psi_contrib = {
                f"psi.{n}": rho.view(-1, *([1] * v.dim()))
                * v.detach().clamp(-o.psi_bound, o.psi_bound).unsqueeze(0)
                for n, v in psi.state_dict().items()
            }
            psi_contrib["psi.den"] = rho
            psi_contrib["psi.holders"] = (st["rho"] > 0).long()

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
        if psi_contrib is None:
            return out
        return {"main": out, "psi": psi_contrib}

    # ------------------------------------------------------------------ evaluation ------------------------

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
