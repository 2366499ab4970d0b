r"""FedSpray: federated graph learning with structure proxy alignment, with the server seeing only sums.

Fu, Chen, Zhang, Chen and Li, "Federated Graph Learning with Structure Proxy Alignment", KDD 2024,
https://doi.org/10.1145/3637528.3671717 (spec: ``shared/specs/fedspray.md``).

Every client keeps a **personalised GNN** :math:`f(\cdot;\theta^{(k)})` (GCN, SGC or GraphSAGE; never
uploaded) and shares a light **feature-structure encoder** :math:`g(\cdot;\omega)`, :math:`\omega =
(W_e, b_e, W_p, b_p, W_q, b_q)`, and **class structure proxies** :math:`S \in R^{C \times D}`:

.. math::

    e_i = \mathrm{ReLU}(x_i W_e + b_e), \qquad
    p_i = \mathrm{softmax}\big((e_i + s_i) W_p + b_p\big), \qquad
    q_i = \mathrm{softmax}(e_i W_q + b_q),

with :math:`s_i = S_{y_i}` for a labelled node and :math:`s_i = q_i^\top S` (the projector-weighted mix)
otherwise. A round, per client (spec §2.3, §2.5):

* **Phase 1** (teacher :math:`p` from the broadcast encoder, fixed), :math:`E` Adam steps on
  :math:`\theta^{(k)}` of :math:`L_G = \frac{1}{|V_L|}\sum_{V_L} \mathrm{CE}(y_i, \hat y_i) + \lambda_1
  \frac{1}{|R|}\sum_{R} \mathrm{KL}(p_i \| \hat y_i)`, :math:`R` all nodes (``kd_conf_threshold=0``) or the
  labelled and confident ones.
* **Phase 2** (teacher :math:`\hat y` from the GNN, fixed), :math:`E` Adam steps on the local encoder and
  the labelled nodes' proxies of :math:`L_F = \frac{1}{|V_L|}\sum_{V_L} \mathrm{CE}(y_i, q_i) + \lambda_2
  \frac{1}{|V_L|}\sum_{V_L} \mathrm{KL}(\hat y_i \| p_i)`; then :math:`S^{(k)}_j` is the mean proxy of
  the client's labelled class-:math:`j` nodes.

**Secure-aggregation rewrite** (spec §3). One contribution per client per round, numerators and
denominators of the two weighted averages (Eqs. 14-15), here with the broadcast values subtracted
(``upload="delta"``, exact because the weights are normalised):

.. math::

    \Big[\, N^{(k)} (\omega^{(k)} - \omega_{\mathrm{ref}}) \;\Big\|\; N^{(k)} \;\Big\|\;
    \big(a^{(k)}_j (s^{(k)}_j - S_{r-1,j})\big)_j \;\Big\|\; a^{(k)} \;\Big\|\;
    \big([a^{(k)}_j > 0]\big)_j \,\Big]

and the server, from the released sums only,

.. math::

    \omega_r = \omega_{\mathrm{ref}} + \frac{\sum_k N^{(k)}(\omega^{(k)} - \omega_{\mathrm{ref}})}{\sum_k N^{(k)}},
    \qquad
    S_{r,j} = S_{r-1,j} + \frac{\sum_k a^{(k)}_j (s^{(k)}_j - S_{r-1,j})}{\sum_k a^{(k)}_j}.

:math:`N^{(k)}` is the number of labelled nodes (0 for a client without any: it then weighs nothing) and
:math:`a^{(k)}_j` the fraction of them in class :math:`j`. The class-wise blocks are released row by row
under the minimum-contributors rule, counted by the summed indicator :math:`\sum_k [a^{(k)}_j > 0]`: a
class held by fewer than ``proxy_min_clients`` contributing clients (in particular by none) keeps its
previous proxy. The server never reads a client's label distribution, weight or proxy in the clear.

Spec §7 decisions that change results are options (defaults follow the paper; the preset
``fedspray-code`` in :mod:`securefgl.algorithms.fedspray_presets` switches to the official code's
behaviour): ``proxy_mode``, ``kd_conf_threshold``, ``projector_init``, ``gnn_init``, ``lambda1``,
``reset_optimizers`` (the rounds are ``train.rounds``).

Shapes:
    ``F`` features, ``C`` classes, ``D`` = ``proxy_dim``, ``K`` clients, ``N_k`` nodes of client ``k``.
    Upload per client: ``F*D + D + 2*(D*C + C)`` encoder numbers, 1 weight, ``C*D + C`` proxy numbers,
    ``C`` indicators. Broadcast: the encoder and ``S`` ``(C, D)``.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import torch

from securefgl.algorithms._fedspray_core import (
    ClientState,
    Hyper,
    client_uploads,
    gnn_logits,
    local_update,
    server_update,
    stack_states,
    unstack_states,
)
from securefgl.algorithms._fedspray_models import (
    ENCODER_KEYS,
    ClientPack,
    encoder_shapes,
    init_encoder,
    pack_clients,
    to_math_layout,
    uniform01_like,
)
from securefgl.algorithms.base import (
    Algorithm,
    Broadcast,
    Client,
    CompatibilityProblem,
    RoundState,
    Setting,
)
from securefgl.algorithms.registry import register_algorithm
from securefgl.errors import ConfigError, TrainingError
from securefgl.protocols.base import Sums
from securefgl.protocols.encoding import BlockSpec, SumSchema

__all__ = ["FedSpray", "FedSprayOptions"]

log = logging.getLogger(__name__)

_STATE = "fedspray"
_PACK = "fedspray_pack"
_PROXY_KEY = "proxies"


@dataclass(frozen=True)
class FedSprayOptions:
    """Options of :class:`FedSpray` (``[algorithm.options]``); defaults follow the paper.

    The GNN is the run's model (``[model]``: ``gcn``, ``sgc`` or ``sage``, its ``hidden``, ``layers``,
    ``dropout`` and SGC's ``K``); it trains with ``train.lr``, ``train.local_epochs`` (E, per phase) and
    ``train.weight_decay`` using Adam.

    Args:
        lambda1: Weight :math:`\\lambda_1` of the GNN's distillation loss (paper 5; the code passes 1).
            (default: ``5.0``)
        lambda2: Weight :math:`\\lambda_2` of the encoder's distillation loss. (default: ``1.0``)
        proxy_dim: ``D``, the proxy and embedding width. (default: ``64``)
        encoder_lr: Adam learning rate of the encoder; ``None`` means ``train.lr``. (default: ``None``)
        proxy_lr: Adam learning rate of the per-node proxies. (default: ``0.02``)
        kd_conf_threshold: Unlabelled nodes take part in the GNN's distillation only if their projector
            confidence :math:`\\max_c q_{ic}` exceeds this; 0 keeps every node (paper), the code uses 0.7.
            (default: ``0.0``)
        proxy_mode: ``"paper_reset"``: labelled nodes start each round from their class's global proxy
            (Alg. 1, line 4); ``"code_persistent"``: they keep their locally learnt proxies across rounds
            (the official code). (default: ``"paper_reset"``)
        projector_init: ``"global_q"``: the local projector starts from the global projector;
            ``"global_p_quirk"``: from the global *classifier*, as the official code does.
            (default: ``"global_q"``)
        gnn_init: ``"glorot"``: the run's model initialisation (Glorot weights, zero biases, as every
            securefgl model); ``"uniform01"``: every GNN parameter from :math:`U[0,1)` (the official code).
            (default: ``"glorot"``)
        reset_optimizers: Re-create the three Adam states every round (the code keeps them).
            (default: ``False``)
        encoder_weight: :math:`N^{(k)}`: number of labelled nodes (``"train"``, code) or of nodes
            (``"nodes"``, paper); a client without labelled nodes always weighs 0. (default: ``"train"``)
        proxy_weight: :math:`a^{(k)}_j`: class fraction (``"ratio"``, paper and code) or class count
            (``"count"``) of the labelled nodes. (default: ``"ratio"``)
        proxy_min_clients: Release rule of the class-wise blocks: a class's proxy row is released only if at
            least this many contributing clients hold the class. (default: ``1``)
        upload: ``"delta"`` sends weighted differences to the broadcast values (small, tight bounds);
            ``"raw"`` the weighted values themselves. (default: ``"delta"``)
        encoder_clip: Public bound on each uploaded (unweighted) encoder number; ``None``: 1 for deltas,
            16 for raw values. (default: ``None``)
        proxy_clip: Public bound on each uploaded (unweighted) proxy number. (default: ``64.0``)
        proxy_init: Initial value of the per-node proxies. (default: ``0.1``)
        precision: Quantisation step of the sums (passed to the schema). (default: ``2**-20``)
    """

    lambda1: float = 5.0
    lambda2: float = 1.0
    proxy_dim: int = 64
    encoder_lr: float | None = None
    proxy_lr: float = 0.02
    kd_conf_threshold: float = 0.0
    proxy_mode: Literal["paper_reset", "code_persistent"] = "paper_reset"
    projector_init: Literal["global_q", "global_p_quirk"] = "global_q"
    gnn_init: Literal["glorot", "uniform01"] = "glorot"
    reset_optimizers: bool = False
    encoder_weight: Literal["train", "nodes"] = "train"
    proxy_weight: Literal["ratio", "count"] = "ratio"
    proxy_min_clients: int = 1
    upload: Literal["delta", "raw"] = "delta"
    encoder_clip: float | None = None
    proxy_clip: float = 64.0
    proxy_init: float = 0.1
    precision: float = 2.0**-20

    def __post_init__(self) -> None:
        for name in ("lambda1", "lambda2", "kd_conf_threshold"):
            v = getattr(self, name)
            if not (math.isfinite(v) and v >= 0):
                raise ConfigError(f"algorithm.options.{name} must be a finite number >= 0, got {v!r}")
        if self.kd_conf_threshold >= 1:
            raise ConfigError(
                f"algorithm.options.kd_conf_threshold must be in [0, 1), got {self.kd_conf_threshold!r}"
            )
        if self.proxy_dim < 1:
            raise ConfigError(f"algorithm.options.proxy_dim must be >= 1, got {self.proxy_dim}")
        for name in ("encoder_lr", "proxy_lr", "encoder_clip", "proxy_clip", "precision"):
            v = getattr(self, name)
            if v is not None and not (math.isfinite(v) and v > 0):
                raise ConfigError(f"algorithm.options.{name} must be a positive finite number, got {v!r}")
        if not math.isfinite(self.proxy_init):
            raise ConfigError(f"algorithm.options.proxy_init must be finite, got {self.proxy_init!r}")
        if self.proxy_min_clients < 1:
            raise ConfigError(
                f"algorithm.options.proxy_min_clients must be >= 1, got {self.proxy_min_clients}"
            )


@register_algorithm
class FedSpray(Algorithm):
    """FedSpray (see the module docstring for the method, the sums and the options)."""

    name = "fedspray"
    Options = FedSprayOptions
    supported_models = frozenset({"gcn", "sgc", "sage"})
    batched = True

    def __init__(self, setting: Setting, options: Any = None) -> None:
        super().__init__(setting, options)
        if setting.train.optimizer != "adam":
            raise ConfigError(
                f"fedspray trains with Adam (persistent moments, spec §2.6); train.optimizer="
                f"{setting.train.optimizer!r} is not supported; valid: 'adam'"
            )
        spec = setting.model
        if spec.name not in self.supported_models:
            raise ConfigError(
                f"fedspray trains a GCN, SGC or GraphSAGE; model.name={spec.name!r}; valid: gcn, sgc, sage"
            )
        opts: FedSprayOptions = self.options
        fam = spec.family_options()
        self.hyper = Hyper(
            gnn=spec.name,
            layers=spec.layers,
            hops=int(getattr(fam, "K", 2)) if fam is not None else 2,
            dropout=spec.dropout,
            weight_decay=setting.train.weight_decay,
            lambda1=opts.lambda1,
            lambda2=opts.lambda2,
            epochs=setting.train.local_epochs,
            lr=setting.train.lr,
            encoder_lr=opts.encoder_lr if opts.encoder_lr is not None else setting.train.lr,
            proxy_lr=opts.proxy_lr,
            kd_conf_threshold=opts.kd_conf_threshold,
            proxy_mode=opts.proxy_mode,
            projector_init=opts.projector_init,
            reset_optimizers=opts.reset_optimizers,
            encoder_weight=opts.encoder_weight,
            proxy_weight=opts.proxy_weight,
            upload=opts.upload,
            encoder_clip=opts.encoder_clip or (1.0 if opts.upload == "delta" else 16.0),
            proxy_clip=opts.proxy_clip,
            proxy_init=opts.proxy_init,
        )

    @classmethod
    def compatibility(
        cls, *, protocol: str, model: str, dataset: str, options: Any, num_clients: int | None
    ) -> list[CompatibilityProblem]:
        problems = []
        opts = options if isinstance(options, Mapping) else {}
        m = opts.get("proxy_min_clients", 1)
        if num_clients is not None and isinstance(m, int) and m > num_clients:
            problems.append(
                CompatibilityProblem(
                    f"fedspray proxy_min_clients={m} exceeds the {num_clients} clients: no class proxy could "
                    "ever be released",
                    f"use proxy_min_clients <= {num_clients}",
                    True,
                )
            )
        return problems

    # ------------------------------------------------------------------ client side ----------------------

    def init_client(self, client: Client) -> None:
        from securefgl.training.local_training import seed_from

        gen = seed_from(client.generator)
        model = self.setting.make_model(generator=gen)
        gnn = {n: p.detach().clone() for n, p in model.named_parameters()}
        if self.options.gnn_init == "uniform01":
            gnn = uniform01_like(gnn, gen)
        f, c, d = self.setting.num_features, self.setting.num_classes, self.options.proxy_dim
        dev = client.device
        enc = {k: torch.zeros(s, device=dev) for k, s in encoder_shapes(f, d, c).items()}
        proxy = torch.full((client.num_nodes, d), float(self.options.proxy_init), device=dev)
        client.state[_STATE] = ClientState({k: v.to(dev) for k, v in gnn.items()}, enc, proxy)
        if client.num_train == 0:
            log.warning(
                "fedspray: client %d has no labelled nodes; it contributes zero weight to the encoder and "
                "proxy averages (it still trains its GNN on distillation targets)",
                client.id,
            )

    def _pack(self, clients: Sequence[Client]) -> ClientPack:
        ws = clients[0].workspace
        ids = tuple(c.id for c in clients)
        cached = ws.get(_PACK)
        if cached is None or cached[0] != ids:
            cached = (ids, pack_clients([c.data for c in clients], num_classes=self.setting.num_classes))
            ws[_PACK] = cached
        return cached[1]

    def schema(self, rs: RoundState) -> SumSchema:
        """The round's one sum (public): encoder numerators, weight, class-wise proxy blocks."""
        s, o, h = self.setting, self.options, self.hyper
        wbound = float(max(s.count_bound, 1))
        blocks = [
            BlockSpec(f"enc.{k}", shape, bound=wbound * h.encoder_clip, dtype=torch.float64)
            for k, shape in encoder_shapes(s.num_features, o.proxy_dim, s.num_classes).items()
        ]
        blocks.append(BlockSpec("enc.weight", (1,), kind="count", bound=wbound))
        abound = wbound if o.proxy_weight == "count" else 1.0
        rule = {"min_contributors": o.proxy_min_clients, "counted_by": "proxy.clients"}
        blocks.append(
            BlockSpec(
                "proxy.sum",
                (s.num_classes, o.proxy_dim),
                bound=abound * o.proxy_clip,
                dtype=torch.float64,
                **rule,
            )
        )
        if o.proxy_weight == "count":
            blocks.append(
                BlockSpec(
                    "proxy.weight", (s.num_classes,), kind="count", bound=abound, dtype=torch.float64, **rule
                )
            )
        else:
            blocks.append(BlockSpec("proxy.weight", (s.num_classes,), bound=1.0, dtype=torch.float64, **rule))
        blocks.append(BlockSpec("proxy.clients", (s.num_classes,), kind="count", bound=1))
        return SumSchema(
            blocks, max_clients=max(s.max_clients_per_round, s.num_clients, 1), precision=o.precision
        )

    def client_steps(self, clients: Sequence[Client], rs: RoundState) -> dict[int, Any]:
        from securefgl.training.local_training import workspace_generator

        pack = self._pack(clients)
        enc, proxies = _unpack_broadcast(rs.broadcast)
        states = [c.state[_STATE] for c in clients]
        stacked = stack_states(states, pack, self.hyper)
        result = local_update(pack, stacked, enc, proxies, self.hyper, workspace_generator(clients))
        unstack_states(stacked, states, pack)
        for i, c in enumerate(clients):
            c.record_loss(float(result.gnn_loss[i]))
        uploads, notes = client_uploads(
            result, pack, [c.id for c in clients], enc, proxies, self.hyper, round_index=rs.global_round
        )
        if any(notes["clipped_elements"].values()):
            log.warning(
                "fedspray round %d: clipped upload elements %s", rs.global_round, notes["clipped_elements"]
            )
        return uploads

    def client_step(self, client: Client, rs: RoundState) -> Any:
        """One client alone (the reference path): the batched step with a batch of one."""
        return self.client_steps([client], rs)[client.id]

    # ------------------------------------------------------------------ server side ----------------------

    def init_server(self, generator: torch.Generator) -> dict[str, Any]:
        """Public initial state: a random encoder and :math:`S_0[j] = 0.01\\, j\\, \\mathbf 1` (the code's)."""
        s, d = self.setting, self.options.proxy_dim
        enc = init_encoder(s.num_features, d, s.num_classes, generator=generator)
        proxies = (
            0.01 * torch.arange(s.num_classes, dtype=torch.float32)[:, None].expand(s.num_classes, d).clone()
        )
        return {"enc": enc, _PROXY_KEY: proxies, "reports": []}

    def initial_broadcast(self, server: dict[str, Any]) -> Broadcast:
        return _broadcast(server, self.setting.device)

    def server_step(
        self, server: dict[str, Any], sums: Sums | Mapping[str, Sums], rs: RoundState
    ) -> Broadcast:
        """Eqs. 14-15 from the released sums only (see :func:`server_update`)."""
        if not isinstance(sums, Sums):
            raise TrainingError(
                f"fedspray's server step takes the released Sums only, got {type(sums).__name__}"
            )
        enc, proxies, report = server_update(sums, server["enc"], server[_PROXY_KEY], self.hyper)
        server["enc"], server[_PROXY_KEY] = enc, proxies
        entry = {"round": rs.global_round, **report.as_dict()}
        server["reports"].append(entry)
        if report.absent_classes:
            log.warning(
                "fedspray round %d: no contributing client holds class(es) %s; their proxies keep the previous value",
                rs.global_round,
                report.absent_classes,
            )
        if report.withheld_classes:
            log.warning(
                "fedspray round %d: class proxy row(s) %s withheld (fewer than %d holders); previous values kept",
                rs.global_round,
                report.withheld_classes,
                self.options.proxy_min_clients,
            )
        if report.encoder_kept:
            log.warning(
                "fedspray round %d: no labelled node among the contributors; encoder kept", rs.global_round
            )
        return _broadcast(server, self.setting.device)

    def run_report(self, server: dict[str, Any]) -> dict[str, Any]:
        """Per-class counts of rounds in which the proxy was absent / withheld (from the sums only)."""
        absent: dict[int, int] = {}
        withheld: dict[int, int] = {}
        for r in server["reports"]:
            for j in r["absent_classes"]:
                absent[j] = absent.get(j, 0) + 1
            for j in r["withheld_classes"]:
                withheld[j] = withheld.get(j, 0) + 1
        return {
            "rounds": len(server["reports"]),
            "absent_class_rounds": {str(k): v for k, v in sorted(absent.items())},
            "withheld_class_rounds": {str(k): v for k, v in sorted(withheld.items())},
            "encoder_kept_rounds": sum(1 for r in server["reports"] if r["encoder_kept"]),
        }

    # ------------------------------------------------------------------ evaluation -----------------------

    def evaluate(
        self, clients: Sequence[Client], broadcast: Broadcast, rs: RoundState
    ) -> dict[int, torch.Tensor]:
        """Every client's personalised GNN (eval mode) on its own graph."""
        pack = self._pack(clients)
        keys = list(clients[0].state[_STATE].gnn)
        params = {k: to_math_layout(k, torch.stack([c.state[_STATE].gnn[k] for c in clients])) for k in keys}
        with torch.no_grad():
            out = gnn_logits(pack, params, self.hyper)
        return {c.id: out[s:e] for c, (s, e) in zip(clients, pack.segments(), strict=True)}


def _broadcast(server: Mapping[str, Any], device: torch.device) -> dict[str, torch.Tensor]:
    out = {f"enc.{k}": server["enc"][k].to(device) for k in ENCODER_KEYS}
    out[_PROXY_KEY] = server[_PROXY_KEY].to(device)
    return out


def _unpack_broadcast(broadcast: Broadcast) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
    missing = [k for k in (*(f"enc.{k}" for k in ENCODER_KEYS), _PROXY_KEY) if k not in broadcast]
    if missing:
        raise TrainingError(f"fedspray broadcast lacks {missing}; got {sorted(broadcast)}")
    return {k: broadcast[f"enc.{k}"] for k in ENCODER_KEYS}, broadcast[_PROXY_KEY]
