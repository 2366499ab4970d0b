"""What O-pFGL sums: the one upload's public :class:`~securefgl.protocols.encoding.SumSchema` and its request.

Both halves use it: the clients round their real blocks to the schema's grid, the server (and, under variant
A.5, the recipient client) reads the released sum of the ``stats`` request. Every bound comes from public
facts only (the run's :class:`~securefgl.algorithms.base.Setting` and the options).

Paper: Yan et al., *Towards Federated Graph Learning in One-shot Communication* (O-pFGL),
https://arxiv.org/abs/2411.11304
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import torch

from securefgl.algorithms.base import RoundState, Setting, SumRequest

if TYPE_CHECKING:
    from securefgl.algorithms.opfgl.options import OPFGLOptions

__all__ = ["BLOCKS", "STATS", "build_schema", "requests", "schema"]

#: Block names of the upload, in packing order.
BLOCKS = ("count", "sum", "sumsq", "contrib", "orig", "clip")
#: Request key of the statistics sum.
STATS = "stats"


def build_schema(setting: Setting, options: OPFGLOptions) -> Any:
    """The public :class:`SumSchema` of the one upload (bounds from public facts only)."""
    from securefgl.protocols.encoding import BlockSpec, SumSchema

    s = setting
    o = options
    c = s.num_classes
    d = (o.hops + 1) * s.num_features
    nb = float(s.count_bound)
    rule = dict(min_contributors=o.min_class_contributors, counted_by="contrib")
    blocks = [
        BlockSpec("count", (c,), kind="count", bound=nb, dtype=torch.float64, **rule),
        BlockSpec("sum", (c, d), bound=nb * o.feature_bound, dtype=torch.float64, **rule),
        BlockSpec("sumsq", (c, d), bound=nb * o.feature_bound**2, dtype=torch.float64, **rule),
        BlockSpec("contrib", (c,), kind="count", bound=1.0),
        BlockSpec("orig", (c,), kind="count", bound=nb, dtype=torch.float64, **rule),
        BlockSpec("clip", (2,), kind="count", bound=nb * d),
    ]
    max_clients = s.max_clients_per_round or s.num_clients
    return SumSchema(blocks, max_clients=max_clients, precision=o.precision)


def schema(setting: Setting, options: OPFGLOptions, rs: RoundState) -> Any:
    """The round's one server-bound schema (``None`` under variant A.5, where the server gets no sum)."""
    return build_schema(setting, options) if options.generation == "server" else None


def requests(setting: Setting, options: OPFGLOptions, rs: RoundState) -> Sequence[SumRequest]:
    """The round's one request: the ``stats`` sum, server-bound, or relayed to every client under A.5."""
    if options.generation == "server":
        return (SumRequest(STATS, build_schema(setting, options)),)
    # A.5: the sum is revealed to the clients only (under CKKS the server only adds ciphertexts): the
    # server relays the recipient's released sum to every participant, into each client's own inbox.
    return (SumRequest(STATS, build_schema(setting, options), recipient=min(rs.clients), relay=True),)
