"""FedStruct's server half: the model, Hop2Vec or FedStruct-A features, the directory and one Adam step per sum.

The server holds :math:`\theta_f, \theta_s` (and, with Hop2Vec, :math:`S`) and the optimiser; it learns the
directory (node -> client) and, for degree features, the global degrees from the ``directory`` sum, relays
the setup sums without reading them, and in ``train`` divides the summed gradients by the summed
train-node count (:math:`\nabla L = \frac{1}{|\tilde V|}\\sum_i \nabla L_i`) and takes one Adam step. In
the U-form it back-propagates the summed :math:`U` through :math:`g_{\theta_s}(S)`, which it holds.
FedStruct-A features (Node2Vec, GDV) come from the public edge set (:mod:`~securefgl.algorithms.fedstruct._nsf`).
This module imports no client-side module, nor ``securefgl.training``, ``securefgl.data`` or
``securefgl.engine``.

Aliakbari et al., *FedStruct*, https://arxiv.org/abs/2402.19163; spec ``shared/specs/fedstruct.md``.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.func import functional_call

from securefgl.algorithms.base import Broadcast, RoundState, Setting
from securefgl.algorithms.fedstruct._nsf import graphlet_degree_vectors, node2vec_features
from securefgl.algorithms.fedstruct.model import decoupled_gcn, degree_onehot
from securefgl.algorithms.fedstruct.options import FedStructOptions, variant
from securefgl.algorithms.fedstruct.schema import uploads
from securefgl.errors import ConfigError
from securefgl.protocols.base import Sums

__all__ = ["FedStructServer"]


class FedStructServer:
    """The server-side methods of :class:`~securefgl.algorithms.fedstruct.FedStruct` (a mixin: no state of its own).

    The server state (``init_server``) holds the parameters, the Adam optimiser, the public tensors
    (directory, degree or FedStruct-A features), the last gradient and the last summed train-node count.
    """

    setting: Setting
    options: FedStructOptions

    def init_server(self, generator: torch.Generator) -> dict[str, Any]:
        model = decoupled_gcn(self.setting, self.options, generator)
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
        if variant(self.options) == "A":
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
            if uploads(self.options, name):
                grads[name] = sums[f"g.{name}"].to(p.dtype) / count
        if self.options.u_form:
            # dL/dG = U / |V~| with G = g(S): back-propagate through g at the server (spec §3.1, S7)
            model = decoupled_gcn(self.setting, self.options)
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

    def run_report(self, server: dict[str, Any]) -> dict[str, Any]:
        return {"num_train": server["num_train"], "variant": variant(self.options), "nsf": self.options.nsf}
