"""FedSpray's public combination: the registered :class:`FedSpray` = server half + client half.

Part of :mod:`securefgl.algorithms.fedspray`: the server-side steps are in
:mod:`~securefgl.algorithms.fedspray.server`, the client-side steps in
:mod:`~securefgl.algorithms.fedspray.client`, what is summed in :mod:`~securefgl.algorithms.fedspray.schema`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from securefgl.algorithms.base import Algorithm, CompatibilityProblem, RoundState, Setting
from securefgl.algorithms.fedspray.client import FedSprayClient
from securefgl.algorithms.fedspray.options import FedSprayOptions, Hyper
from securefgl.algorithms.fedspray.schema import round_schema
from securefgl.algorithms.fedspray.server import FedSprayServer
from securefgl.algorithms.registry import register_algorithm
from securefgl.errors import ConfigError
from securefgl.protocols.encoding import SumSchema
from securefgl.protocols.registry import ProtocolSpec

__all__ = ["FedSpray"]


@register_algorithm
class FedSpray(FedSprayServer, FedSprayClient, Algorithm):
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
      \frac{1}{|R|}\sum_{R} \mathrm{KL}(p_i \| \hat y_i)`, :math:`R` all nodes (``kd_conf_threshold=0``) or
      the labelled and confident ones.
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

        \omega_r = \omega_{\mathrm{ref}} + \frac{\sum_k N^{(k)}(\omega^{(k)} - \omega_{\mathrm{ref}})}{\sum_k
        N^{(k)}}, \qquad S_{r,j} = S_{r-1,j} + \frac{\sum_k a^{(k)}_j (s^{(k)}_j - S_{r-1,j})}{\sum_k
        a^{(k)}_j}.

    :math:`N^{(k)}` is the number of labelled nodes (0 for a client without any: it then weighs nothing) and
    :math:`a^{(k)}_j` the fraction of them in class :math:`j`. The class-wise blocks are released row by row
    under the minimum-contributors rule, counted by the summed indicator :math:`\sum_k [a^{(k)}_j > 0]`: a
    class held by fewer than ``proxy_min_clients`` contributing clients (in particular by none) keeps its
    previous proxy. The server never reads a client's label distribution, weight or proxy in the clear.

    Spec §7 decisions that change results are options (defaults follow the paper; the preset
    ``fedspray-code`` in :mod:`securefgl.algorithms.fedspray.presets` switches to the official code's
    behaviour): ``proxy_mode``, ``kd_conf_threshold``, ``projector_init``, ``gnn_init``, ``lambda1``,
    ``reset_optimizers`` (the rounds are ``train.rounds``).

    Args:
        setting: The public facts of the run (:class:`~securefgl.algorithms.base.Setting`).
        options: A :class:`FedSprayOptions` or a mapping validated against it (every option and its default is
            documented there). (default: ``None``, the defaults)

    Shapes:
        ``F`` features, ``C`` classes, ``D`` = ``proxy_dim``, ``K`` clients, ``N_k`` nodes of client ``k``.
        Upload per client: ``F*D + D + 2*(D*C + C)`` encoder numbers, 1 weight, ``C*D + C`` proxy numbers,
        ``C`` indicators. Broadcast: the encoder and ``S`` ``(C, D)``.
    """

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
        cls, *, protocol: ProtocolSpec, model: str, dataset: str, options: Any, num_clients: int | None
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

    def schema(self, rs: RoundState) -> SumSchema:
        """The round's one sum (public): encoder numerators, weight, class-wise proxy blocks."""
        return round_schema(self.setting, self.options, self.hyper)
