r"""What FedAvg sums: one block per model parameter tensor and a count (public; both halves use it).

``upload="weights"``: ``w.<param>`` :math:`= n_k\,\mathrm{clip}_B(w_k)` (bound :math:`n_{\max} B`) and the
count ``n`` :math:`= n_k`. ``upload="delta"`` (DP-FedAvg): ``d.<param>`` :math:`= \mathrm{clip}_B(w_k) - w`
(bound :math:`2B`, marked for DP) and ``n`` :math:`= 1`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from securefgl.protocols.encoding import BlockSpec, SumSchema
from securefgl.protocols.registry import ProtocolSpec

__all__ = ["count_bound", "model_schema", "uses_delta"]


def uses_delta(options: Any, protocol: ProtocolSpec) -> bool:
    """Whether clients upload DP-FedAvg deltas (see ``upload``; ``"auto"``: under a ``+dp`` protocol).

    Options without ``upload`` (subclasses such as AdaFGL) upload weights.
    """
    upload = getattr(options, "upload", "weights")  # subclasses without the option upload weights
    if upload == "auto":
        return protocol.dp
    return upload == "delta"


def count_bound(options: Any, node_count_bound: int, *, delta: bool) -> int:
    """The public bound of one client's weight :math:`n_k` (1 when uniform or uploading deltas)."""
    return 1 if options.weighting == "uniform" or delta else node_count_bound


def model_schema(
    broadcast: Mapping[str, torch.Tensor],
    *,
    param_bound: float,
    count_bound: int,
    delta: bool,
    max_clients: int,
) -> SumSchema:
    """The round's sum for the model ``broadcast`` (parameter name -> tensor).

    Args:
        broadcast: The global model the clients start from (names and shapes are public).
        param_bound: :math:`B`, the public clip range of every parameter.
        count_bound: The bound of one client's weight (:func:`count_bound`); unused with ``delta``.
        delta: DP-FedAvg deltas (``d.<param>``, marked ``dp``) instead of weighted weights (``w.<param>``).
        max_clients: The most clients that contribute to the sum.
    """
    if delta:
        blocks = [
            BlockSpec(f"d.{n}", tuple(v.shape), bound=2 * param_bound, dp=True) for n, v in broadcast.items()
        ]
        blocks.append(BlockSpec("n", (1,), kind="count", bound=1))
        return SumSchema(blocks, max_clients=max_clients)
    bound = count_bound * param_bound
    blocks = [BlockSpec(f"w.{n}", tuple(v.shape), bound=bound) for n, v in broadcast.items()]
    blocks.append(BlockSpec("n", (1,), kind="count", bound=count_bound))
    return SumSchema(blocks, max_clients=max_clients)
