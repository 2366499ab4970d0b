r"""What FedSpray sums: the round's :class:`~securefgl.protocols.encoding.SumSchema` (spec §3).

Public: the client half builds its contributions to these blocks, the server half reads their sums, and the
engine asks :meth:`FedSpray.schema <securefgl.algorithms.fedspray.FedSpray.schema>` for them. One sum per
round:

==================  =================  ===========================================================
block               shape              per client
==================  =================  ===========================================================
``enc.<key>``       encoder parameter  :math:`N^{(k)} (\omega^{(k)} - \omega_{\mathrm{ref}})` (float64)
``enc.weight``      ``(1,)``           :math:`N^{(k)}` (count)
``proxy.sum``       ``(C, D)``         :math:`a^{(k)}_j (s^{(k)}_j - S_{r-1,j})`, rows released under the
                                       minimum-contributors rule
``proxy.weight``    ``(C,)``           :math:`a^{(k)}_j` (count with ``proxy_weight="count"``)
``proxy.clients``   ``(C,)``           :math:`[a^{(k)}_j > 0]` (count): the holders of each row
==================  =================  ===========================================================

The broadcast back is the encoder (``enc.<key>``) and the class proxies :math:`S` under :data:`PROXY_KEY`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from securefgl.algorithms.fedspray.encoder import encoder_shapes
from securefgl.protocols.encoding import BlockSpec, SumSchema

if TYPE_CHECKING:
    from securefgl.algorithms.base import Setting
    from securefgl.algorithms.fedspray.options import FedSprayOptions, Hyper

__all__ = ["PROXY_KEY", "round_schema"]

#: Broadcast key of the global class proxies :math:`S` ``(C, D)``; the encoder goes as ``enc.<key>``.
PROXY_KEY = "proxies"


def round_schema(setting: Setting, options: FedSprayOptions, hyper: Hyper) -> SumSchema:
    """The round's one sum (public): encoder numerators, weight, class-wise proxy blocks."""
    s, o, h = setting, options, hyper
    wbound = float(max(s.count_bound, 1))
    blocks = [
        BlockSpec(f"enc.{k}", shape, bound=wbound * h.encoder_clip, dtype=torch.float64)
        for k, shape in encoder_shapes(s.num_features, o.proxy_dim, s.num_classes).items()
    ]
    blocks.append(BlockSpec("enc.weight", (1,), kind="count", bound=wbound))
    abound = wbound if o.proxy_weight == "count" else 1.0
    rule: dict[str, Any] = {"min_contributors": o.proxy_min_clients, "counted_by": "proxy.clients"}
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
