r"""FedStruct-B (Aliakbari et al. 2024), https://arxiv.org/abs/2402.19163: decoupled learning over
interconnected subgraphs, with the multi-hop matrix computed privately.

Spec: ``shared/specs/fedstruct.md`` (§2.4-2.8, §3.4). Client :math:`i` predicts

.. math::
    \hat Y_i = \mathrm{softmax}\big(\bar A^{(i)} f_{\theta_f}(X_i) + \bar A_{[i]}\, g_{\theta_s}(S)\big),

with :math:`\bar A^{(i)}` the ``L``-hop matrix of its local graph and :math:`\bar A_{[i]}` its rows of the
``L_s``-hop matrix of the global graph (row-normalised :math:`\hat A = \tilde D^{-1}(A + I)`, pure power by
default). The run has three phases:

1. ``directory`` (1 round, server-bound sum): each client adds ``cid + 1`` at its nodes' global ids (and, for
   degree features, its nodes' global degrees). The server learns the node -> client map (and degrees),
   nothing about edges, and broadcasts it with the initial model.
2. ``setup`` (``(L_s - 1) K`` rounds): round ``(l - 2) K + i`` sums :math:`B^{(l)}_{ik} = \tilde A_{ik}
   P^{(l-1)}_{[k]}` over every client :math:`k` for receiver :math:`i` only (``SumRequest(recipient=i)``:
   designated-recipient secure aggregation, the server relays masked blocks); one receiver at a time.
   See :mod:`securefgl.algorithms._fedstruct_setup`.
3. ``train`` (FedSGD, eq. 8): each round every client uploads the gradients of the summed cross-entropy over
   its training nodes with respect to :math:`\theta_f, \theta_s` and (Hop2Vec) :math:`S`, plus its
   train-node count; the server divides the sums (:math:`\nabla L = \frac{1}{|\tilde V|}\sum_i \nabla L_i`)
   and takes one Adam step (lr and weight decay from ``train``), then broadcasts :math:`\theta, S`.

Clients need their inter-client edges: pass ``attach_cross_edges(fg)`` to the run (a client without them
raises :class:`~securefgl.errors.PartitionError`).

Args:
    num_hops: ``L`` of the local feature branch. (default: ``2``)
    num_hops_s: ``L_s`` of the structure branch (1: local, no setup sums). (default: ``10``)
    beta: :math:`\beta_1..\beta_{L_s}`, or ``None`` for the pure power. (default: ``None``)
    nsf: Node structure features: ``"h2v"`` (Hop2Vec, learnable, FedStruct-B default), ``"degree"`` (one-hot
        global degree, summed once by the protocol), or the task-agnostic ``"node2vec"`` / ``"gdv"``
        (graphlet degree vectors), which need the global graph and so run as **FedStruct-A**: the server is
        given the federation's edge set (:attr:`~securefgl.algorithms.base.Setting.public_edge_index`),
        computes :math:`S` once (:mod:`securefgl.algorithms._fedstruct_nsf`) and broadcasts it. With the
        decoupled GCN, A and B give the same predictions for the same :math:`\bar A` and :math:`S` (spec
        §7 items 14-15), so :math:`\bar A_{[i]}` still comes from the private setup. (default: ``"h2v"``)
    n2v_epochs: Node2Vec training epochs (the authors': 50). (default: ``50``)
    gdv_graphlet_size: Largest graphlet of the GDV: ``5`` (73 orbits, the authors') or ``4`` (15).
        (default: ``5``)
    d_s: Structure-feature width. (default: ``256``)
    hidden_f / hidden_s: Hidden widths of ``f`` and ``g``. (default: ``(64,)``, ``(256,)``)
    dropout: Dropout in ``f`` and ``g``. (default: ``0.7``)
    dropout_s: Dropout in ``g`` only, ``None`` for ``dropout``. (default: ``None``)
    u_form: Upload :math:`U_i = \bar A_{[i]}^\top \partial L_i / \partial Z_i` (``n x C``) instead of the
        gradients of :math:`\theta_s` and ``S`` (spec §3.1 S7): the server back-propagates the summed
        :math:`U` through :math:`g_{\theta_s}(S)`, which it holds. Exact only without dropout in ``g``, so it
        requires ``dropout_s = 0``. (default: ``False``)
    h2v_std: Std of the Hop2Vec initialisation. (default: ``0.05``)
    prune_p: Keep the top ``p n_i`` entries of each aggregated power (``None``: dense). (default: ``None``)
    grad_bound: Public clip bound of each gradient element of a client's summed loss. (default: ``1e4``)
    setup_max_bytes / setup_max_memory: Dense setup budget; over it the run is refused with the estimate.
        (default: 64 GiB, 4 GiB)

Shapes:
    Setup upload per client and receiver ``i``: ``(n_i, n)``; train upload per client: the parameters of
    ``f`` and ``g`` plus ``S`` ``(n, d_s)`` (Hop2Vec) plus ``count`` ``(1,)``.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, get_args

import torch
import torch.nn.functional as F
from torch.func import functional_call

from securefgl.algorithms._fedstruct_model import DecoupledGCN, degree_onehot
from securefgl.algorithms._fedstruct_nsf import graphlet_degree_vectors, node2vec_features
from securefgl.algorithms._fedstruct_setup import (
    SetupTooLargeError,
    SingleContributorWarning,
    StructureView,
    _betas,
    attach_cross_edges,
    check_setup_budget,
    local_abar,
    prune_top,
    setup_schema,
)
from securefgl.algorithms.base import Algorithm, Broadcast, Client, Phase, RoundState, SumRequest
from securefgl.algorithms.registry import register_algorithm
from securefgl.errors import ConfigError, TrainingError
from securefgl.protocols.base import Sums
from securefgl.protocols.encoding import BlockSpec, SumSchema

__all__ = ["FedStruct", "SetupTooLargeError", "SingleContributorWarning", "attach_cross_edges"]

_SETUP_KEY = "abar"
#: Structure features that need the whole graph, so only FedStruct-A (server knows E) can compute them.
_GLOBAL_NSF = ("node2vec", "gdv")
#: Every structure-feature option (``Options.nsf``).
NSF = Literal["h2v", "degree", "node2vec", "gdv"]


@register_algorithm
class FedStruct(Algorithm):
    """FedStruct-B with the decoupled GCN and FedSGD (see the module docstring)."""

    name = "fedstruct"
    #: Clients need their inter-client edges (``attach_cross_edges(fg)`` before the run; see the report).
    needs_cross_edges = True

    @dataclass(frozen=True)
    class Options:
        num_hops: int = 2
        num_hops_s: int = 10
        beta: tuple[float, ...] | None = None
        nsf: NSF = "h2v"
        d_s: int = 256
        n2v_epochs: int = 50
        gdv_graphlet_size: int = 5
        hidden_f: tuple[int, ...] = (64,)
        hidden_s: tuple[int, ...] = (256,)
        dropout: float = 0.7
        dropout_s: float | None = None
        u_form: bool = False
        h2v_std: float = 0.05
        prune_p: int | None = None
        grad_bound: float = 1e4
        setup_max_bytes: float = 64 * 2.0**30
        setup_max_memory: float = 4 * 2.0**30

        def __post_init__(self) -> None:
            if self.num_hops < 1 or self.num_hops_s < 1:
                raise ConfigError(
                    f"algorithm.options.num_hops and num_hops_s must be >= 1, got {self.num_hops}, {self.num_hops_s}"
                )
            if self.nsf not in get_args(NSF):
                raise ConfigError(
                    f"algorithm.options.nsf must be one of {', '.join(map(repr, get_args(NSF)))}, got {self.nsf!r}"
                )
            if self.n2v_epochs < 1 or self.gdv_graphlet_size not in (4, 5):
                raise ConfigError(
                    f"algorithm.options: need n2v_epochs >= 1 and gdv_graphlet_size in (4, 5); got "
                    f"n2v_epochs={self.n2v_epochs}, gdv_graphlet_size={self.gdv_graphlet_size}"
                )
            if self.beta is not None and len(self.beta) != self.num_hops_s:
                raise ConfigError(
                    f"algorithm.options.beta needs num_hops_s={self.num_hops_s} entries, got {list(self.beta)}"
                )
            if (
                self.d_s < 1
                or not 0.0 <= self.dropout < 1.0
                or not self.h2v_std > 0
                or not self.grad_bound > 0
            ):
                raise ConfigError(
                    f"algorithm.options: need d_s >= 1, dropout in [0, 1), h2v_std > 0, grad_bound > 0; got "
                    f"d_s={self.d_s}, dropout={self.dropout}, h2v_std={self.h2v_std}, grad_bound={self.grad_bound}"
                )
            ds = self.dropout if self.dropout_s is None else self.dropout_s
            if not 0.0 <= ds < 1.0:
                raise ConfigError(f"algorithm.options.dropout_s must be in [0, 1), got {self.dropout_s}")
            if self.u_form and ds != 0.0:
                raise ConfigError(
                    f"algorithm.options.u_form needs no dropout in g (the server recomputes g(S)); got "
                    f"dropout_s={ds}: set dropout_s=0 or u_form=false"
                )
            if self.prune_p is not None and self.prune_p < 1:
                raise ConfigError(f"algorithm.options.prune_p must be >= 1 or None, got {self.prune_p}")

    # ------------------------------------------------------------------ structure ------------------------

    @classmethod
    def server_knows_edges(cls, options: Any) -> bool:
        """FedStruct-A (``nsf`` ``"node2vec"`` or ``"gdv"``): the server knows the global edge set."""
        nsf = options.get("nsf", "h2v") if isinstance(options, Mapping) else getattr(options, "nsf", "h2v")
        return nsf in _GLOBAL_NSF

    @property
    def variant(self) -> str:
        """``"A"`` (server knows the edges) or ``"B"`` (it does not; the default)."""
        return "A" if self.options.nsf in _GLOBAL_NSF else "B"

    def phases(self, train: Any) -> Sequence[Phase]:
        o = self.options
        k, n = self.setting.num_clients, self.setting.num_nodes
        check_setup_budget(
            [math.ceil(n / k)] * k,
            n,
            o.num_hops_s,
            max_bytes=o.setup_max_bytes,
            max_memory=o.setup_max_memory,
            pruned=o.prune_p is not None,
        )
        out = [Phase("directory", rounds=1, sample=False, evaluate=False)]
        if o.num_hops_s > 1:
            out.append(Phase("setup", rounds=(o.num_hops_s - 1) * k, sample=False, evaluate=False))
        out.append(Phase("train", rounds=train.rounds))
        return tuple(out)

    @property
    def feature_width(self) -> int:
        """Width of :math:`S`: ``d_s``, or the GDV's orbit count (73 or 15)."""
        o = self.options
        if o.nsf == "gdv":
            return 73 if o.gdv_graphlet_size == 5 else 15
        return o.d_s

    def _model(self, generator: torch.Generator | None = None) -> DecoupledGCN:
        o = self.options
        return DecoupledGCN(
            self.setting.num_features,
            self.setting.num_classes,
            self.feature_width,
            o.hidden_f,
            o.hidden_s,
            o.dropout,
            dropout_s=o.dropout_s,
            generator=generator,
        )

    # ------------------------------------------------------------------ server ---------------------------

    def init_server(self, generator: torch.Generator) -> dict[str, Any]:
        model = self._model(generator)
        params = {f"theta.{k}": v.detach().clone() for k, v in model.named_parameters()}
        if self.options.nsf == "h2v":
            # Hop2Vec rows are random noise: drawing them at the server is equivalent to each owner drawing
            # its rows and broadcasting them (Alg. 5), and reveals nothing.
            params["S"] = (
                torch.randn(self.setting.num_nodes, self.options.d_s, generator=generator)
                * self.options.h2v_std
            )
        for p in params.values():
            p.requires_grad_(True)
        opt = torch.optim.Adam(
            list(params.values()), lr=self.setting.train.lr, weight_decay=self.setting.train.weight_decay
        )
        public = {}
        if self.variant == "A":
            public["S"] = self._global_features(generator)
        return {"params": params, "opt": opt, "public": public, "last_grad": None, "num_train": None}

    def _global_features(self, generator: torch.Generator) -> torch.Tensor:
        """FedStruct-A: :math:`S = Q_{NSF}(E)` from the server's public edge set, ``(n, feature_width)``."""
        o, edges = self.options, self.setting.public_edge_index
        if edges is None:
            raise ConfigError(
                f"fedstruct: nsf={o.nsf!r} is FedStruct-A and needs the global edge set at the server "
                "(Setting.public_edge_index, filled by the engine); use nsf='h2v' or 'degree' for FedStruct-B"
            )
        n = self.setting.num_nodes
        if o.nsf == "node2vec":
            return node2vec_features(edges.cpu(), n, dim=o.d_s, epochs=o.n2v_epochs, generator=generator)
        return graphlet_degree_vectors(edges.cpu(), n, graphlet_size=o.gdv_graphlet_size)

    def _broadcast(self, server: dict[str, Any]) -> Broadcast:
        out = {k: v.detach().clone() for k, v in server["params"].items()}
        out.update(server["public"])
        return out

    def requests(self, rs: RoundState) -> Sequence[SumRequest]:
        k, n = self.setting.num_clients, self.setting.num_nodes
        if rs.phase == "directory":
            blocks = [BlockSpec("owner", (n,), kind="count", bound=k)]
            if self.options.nsf == "degree":
                blocks.append(BlockSpec("degree", (n,), kind="count", bound=n))
            return (SumRequest("main", SumSchema(blocks, max_clients=k)),)
        if rs.phase == "setup":
            receiver = rs.round % k
            n_i = int((rs.broadcast["owner"] == receiver).sum())
            schema = setup_schema(n_i, n, max_clients=k, bound=float(self.setting.count_bound))
            return (SumRequest(_SETUP_KEY, schema, recipient=receiver),)
        blocks = [
            BlockSpec(f"g.{name}", tuple(v.shape), bound=self.options.grad_bound)
            for name, v in rs.broadcast.items()
            if self._uploads(name)
        ]
        if self.options.u_form:
            blocks.append(BlockSpec("U", (n, self.setting.num_classes), bound=self.options.grad_bound))
        blocks.append(BlockSpec("count", (1,), kind="count", bound=self.setting.count_bound))
        return (SumRequest("main", SumSchema(blocks, max_clients=k, precision=2.0**-24)),)

    def _uploads(self, name: str) -> bool:
        """Whether the gradient of broadcast tensor ``name`` is uploaded directly (else via ``U``)."""
        if self.options.u_form:
            return name.startswith("theta.f.")
        return name.startswith("theta.") or (name == "S" and self.options.nsf == "h2v")

    def server_step(self, server: dict[str, Any], sums: Sums, rs: RoundState) -> Broadcast:
        if rs.phase == "directory":
            owner = sums["owner"].long() - 1
            server["public"]["owner"] = owner
            if self.options.nsf == "degree":
                server["public"]["S"] = degree_onehot(sums["degree"], self.options.d_s)
            return self._broadcast(server)
        count = float(sums["count"][0])
        server["num_train"] = count
        if count <= 0:
            return self._broadcast(server)
        grads = {}
        params = server["params"]
        for name, p in params.items():
            if self._uploads(name):
                grads[name] = sums[f"g.{name}"].to(p.dtype) / count
        if self.options.u_form:
            # dL/dG = U / |V~| with G = g(S): back-propagate through g at the server (spec §3.1, S7)
            model = self._model()
            inner = {k[len("theta.g.") :]: v for k, v in params.items() if k.startswith("theta.g.")}
            s = params["S"] if "S" in params else server["public"]["S"]
            g_out = functional_call(model.g, inner, (s,))
            names = [k for k in params if k.startswith("theta.g.") or k == "S"]
            vjp = torch.autograd.grad(g_out, [params[k] for k in names], sums["U"].to(g_out.dtype) / count)
            grads.update(dict(zip(names, vjp, strict=True)))
        for name, p in params.items():
            p.grad = grads[name]
        server["last_grad"] = grads
        server["opt"].step()
        server["opt"].zero_grad(set_to_none=True)
        return self._broadcast(server)

    # ------------------------------------------------------------------ clients --------------------------

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
        sums = client.inbox.pop(_SETUP_KEY, None)
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
        model = self._model().to(client.device).train()
        params = {
            k: v.detach().to(client.device).clone().requires_grad_(self._uploads(k))
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
        names = [k for k in params if self._uploads(k)]
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
            model = self._model().to(c.device).eval()
            params = {k: v.to(c.device) for k, v in broadcast.items() if k.startswith("theta.") or k == "S"}
            with torch.no_grad():
                out[c.id] = self._forward(c, broadcast, params, model)
        return out

    def run_report(self, server: dict[str, Any]) -> dict[str, Any]:
        return {"num_train": server["num_train"], "variant": self.variant, "nsf": self.options.nsf}
