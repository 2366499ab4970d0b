r"""O-pFGL: one-shot personalised federated graph learning whose only upload is a secure sum.

Yan, Li, Xie, Zhang, Shen, Fang, Wu, *Towards Federated Graph Learning in One-shot Communication*
(O-pFGL), https://arxiv.org/abs/2411.11304. Spec: ``shared/specs/opfgl.md``.

One upload, one download. Client :math:`k` propagates its features,
:math:`X^{prop}_k = [X_k \| \tilde A_k X_k \| \dots \| \tilde A_k^h X_k]`, enlarges its labelled set with
reliable nodes (HRE, Eq. 7) and uploads, for every class :math:`c`, **sums only**:

.. math::
    a_k^c = N_k^c,\quad b_k^c = \sum_{i \in S_k^c} x_i^{prop},\quad
    q_k^c = \sum_{i \in S_k^c} x_i^{prop} \odot x_i^{prop},\quad
    e_k^c = 1[N_k^c \ge 2],\quad o_k^c = |V^c_{k,L}|

(zeros for a class it does not contribute). The protocol releases :math:`A, B, Q, M, O = \sum_k (a, b, q,
e, o)_k`; class rows with fewer than ``min_class_contributors`` contributing clients are withheld (the
release rule is applied row-wise, counted by the ``contrib`` block). The server step sees those sums and
nothing else:

.. math::
    \mu^c = B^c / A^c,\qquad s^{2,c} = \frac{Q^c - A^c (\mu^c)^2}{A^c - M^c},\qquad
    \lambda_c = \frac{A^c}{\sum_{c'} A^{c'}}

and optimises a pseudo-graph :math:`G' = (X', A', Y')` whose propagated class means (and stds) match
:math:`\mu^c` (and :math:`s^c`). :math:`G'` and a model-initialisation seed are broadcast. Each client then
trains :math:`M_G` on :math:`G'` (Stage 1, selected on local validation accuracy) and fine-tunes a copy on
its own graph with node-adaptive distillation toward the frozen :math:`M_G` (Stage 2):

.. math::
    L_{2nd} = \mathrm{CE}(V_L) + \frac{1}{N_k} \sum_i \gamma_i\,
        \mathrm{KL}\big(M_G(x_i) \,\|\, M_k(x_i)\big),\qquad
    \gamma_i = \mathrm{clamp}(\beta\, \tilde y_i^\top w_{dist}, \gamma_{min}, \gamma_{max}).

Variant A.5 (``generation="client"``): the sums are revealed to the clients only (run it under ``ckks``,
where the server adds ciphertexts it cannot read); every client regenerates :math:`G'` from the same
public seed, and the run checks that all clients obtained the same graph (SHA-256 of its bytes).

Shapes:
    Upload per client: ``count (C,)``, ``sum (C, D)``, ``sumsq (C, D)``, ``contrib (C,)``, ``orig (C,)``
    and ``clip (2,)`` (clipped and total feature entries, so that the run reports the clip rate from a
    sum) with ``D = (h+1) F``: ``C (2D + 3) + 2`` numbers. Download: ``x (n', F)``, ``edge_index (2, E')``,
    ``edge_weight (E',)``, ``y (n',)`` and two seeds.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import securefgl.algorithms.opfgl.schema as _schema
from securefgl.algorithms.base import Algorithm, CompatibilityProblem, Phase, RoundState, SumRequest
from securefgl.algorithms.opfgl.client import OPFGLClient
from securefgl.algorithms.opfgl.options import OPFGLOptions
from securefgl.algorithms.opfgl.server import OPFGLServer
from securefgl.algorithms.registry import register_algorithm
from securefgl.errors import ConfigError
from securefgl.protocols.registry import ProtocolSpec

__all__ = ["OPFGL"]


@register_algorithm
class OPFGL(OPFGLServer, OPFGLClient, Algorithm):
    """O-pFGL (Yan et al., https://arxiv.org/abs/2411.11304): see the module docstring for the math.

    The server half is :class:`~securefgl.algorithms.opfgl.server.OPFGLServer`, the client half
    :class:`~securefgl.algorithms.opfgl.client.OPFGLClient`; what is summed is declared in
    :mod:`securefgl.algorithms.opfgl.schema`.

    Args:
        setting: The public facts of the run.
        options: :class:`OPFGLOptions` or a mapping validated against it.
    """

    name: ClassVar[str] = "opfgl"
    Options: ClassVar[type] = OPFGLOptions

    # ------------------------------------------------------------------ structure ------------------------

    @classmethod
    def compatibility(
        cls, *, protocol: ProtocolSpec, model: str, dataset: str, options: Any, num_clients: int | None
    ) -> list[CompatibilityProblem]:
        problems: list[CompatibilityProblem] = []
        opts = options if isinstance(options, OPFGLOptions) else None
        if opts is None and isinstance(options, Mapping):
            try:
                from securefgl.algorithms.base import parse_options

                opts = parse_options(OPFGLOptions, options, where="algorithm.options (opfgl)")
            except ConfigError:
                opts = None  # reported by the registry
        if opts is not None and opts.generation == "client" and protocol.base != "ckks":
            problems.append(
                CompatibilityProblem(
                    f"O-pFGL variant A.5 (generation='client') reveals the summed statistics to the clients only; "
                    f"protocol {protocol!r} does not hide the sum from the relaying server",
                    "use protocol 'ckks', or generation='server'",
                    permanent=True,
                )
            )
        if num_clients is not None and opts is not None and num_clients < opts.min_class_contributors:
            problems.append(
                CompatibilityProblem(
                    f"min_class_contributors={opts.min_class_contributors} exceeds the {num_clients} clients: "
                    "every class would be withheld",
                    "lower min_class_contributors or add clients",
                    permanent=False,
                )
            )
        return problems

    def phases(self, train: Any) -> Sequence[Phase]:
        return (
            Phase("upload", kind="rounds", rounds=1, sample=False, evaluate=False),
            Phase("train", kind="local", evaluate=True),
        )

    # ------------------------------------------------------------------ the sum -------------------------

    def build_schema(self) -> Any:
        """The public :class:`SumSchema` of the one upload (bounds from public facts only)."""
        return _schema.build_schema(self.setting, self.options)

    def schema(self, rs: RoundState) -> Any:
        return _schema.schema(self.setting, self.options, rs)

    def requests(self, rs: RoundState) -> Sequence[SumRequest]:
        return _schema.requests(self.setting, self.options, rs)
