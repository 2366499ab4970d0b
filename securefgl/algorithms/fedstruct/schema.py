"""What FedStruct sums: the directory, the designated-recipient setup blocks and the FedSGD gradients.

Aliakbari et al., *FedStruct*, https://arxiv.org/abs/2402.19163; spec ``shared/specs/fedstruct.md``. Public:
both halves and the server use it. Every bound comes from public facts only (the run's
:class:`~securefgl.algorithms.base.Setting` and the options).

* ``directory`` (1 round): ``owner (n,)`` (``cid + 1`` at each client's global ids) and, for degree
  features, ``degree (n,)``;
* ``setup``: the ``abar`` request of receiver ``round mod K``, ``B (n_i, n)`` (:func:`setup_schema`),
  revealed to that receiver only;
* ``train``: ``g.<name>`` for every broadcast tensor whose gradient is uploaded (:func:`uploads`), ``U``
  ``(n, C)`` in the U-form, and ``count (1,)``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import torch

from securefgl.algorithms.base import RoundState, Setting, SumRequest
from securefgl.protocols.encoding import BlockSpec, SumSchema

if TYPE_CHECKING:
    from securefgl.algorithms.fedstruct.options import FedStructOptions

__all__ = ["SETUP_KEY", "requests", "setup_schema", "uploads"]

#: Request key of the setup sums (one receiver per round).
SETUP_KEY = "abar"


def setup_schema(n_receiver: int, n: int, *, max_clients: int, bound: float, precision: float = 2.0**-32):
    """The schema of one receiver's sum: one real block ``B`` of shape ``(n_receiver, n)`` in float64.

    Entries of :math:`B_{ik}` lie in :math:`[0, \\max \\text{degree}]`; ``bound`` must be a public upper
    bound of that (the node-count bound is always one).
    """
    from securefgl.protocols.encoding import BlockSpec, SumSchema

    return SumSchema(
        [BlockSpec("B", (n_receiver, n), bound=float(bound), dtype=torch.float64)],
        max_clients=max_clients,
        precision=precision,
    )


def uploads(options: FedStructOptions, name: str) -> bool:
    """Whether the gradient of broadcast tensor ``name`` is uploaded directly (else via ``U``)."""
    if options.u_form:
        return name.startswith("theta.f.")
    return name.startswith("theta.") or (name == "S" and options.nsf == "h2v")


def requests(setting: Setting, options: FedStructOptions, rs: RoundState) -> Sequence[SumRequest]:
    """The sums of round ``rs``: the directory, one receiver's setup block, or the training gradients."""
    k, n = setting.num_clients, setting.num_nodes
    if rs.phase == "directory":
        blocks = [BlockSpec("owner", (n,), kind="count", bound=k)]
        if options.nsf == "degree":
            blocks.append(BlockSpec("degree", (n,), kind="count", bound=n))
        return (SumRequest("main", SumSchema(blocks, max_clients=k)),)
    if rs.phase == "setup":
        receiver = rs.round % k
        n_i = int((rs.broadcast["owner"] == receiver).sum())
        schema = setup_schema(n_i, n, max_clients=k, bound=float(setting.count_bound))
        return (SumRequest(SETUP_KEY, schema, recipient=receiver),)
    blocks = [
        BlockSpec(f"g.{name}", tuple(v.shape), bound=options.grad_bound)
        for name, v in rs.broadcast.items()
        if uploads(options, name)
    ]
    if options.u_form:
        blocks.append(BlockSpec("U", (n, setting.num_classes), bound=options.grad_bound))
    blocks.append(BlockSpec("count", (1,), kind="count", bound=setting.count_bound))
    return (SumRequest("main", SumSchema(blocks, max_clients=k, precision=2.0**-24)),)
