r"""The client-side defence against crafted models: check the broadcast before training on it.

A client that receives a model can refuse it before its data ever touches it. Two checks:

* **Update rule** (:func:`check_update_rule`): the broadcast must be what the algorithm's public server step
  makes of the previous released sum (FedAvg: :math:`w_{t+1} = \sum_k n_k w_k / \sum_k n_k`), and the first
  broadcast must be the architecture's initialisation from the public seed. A server that follows the
  protocol cannot send anything else, so *every* crafted model is refused, imprint bins and trap weights
  alike. It needs what the client checks against: the released sum of every round (the protocol's output,
  given to the clients as well as to the server) and a public initialisation seed.
* **First-layer sanity test** (:func:`first_layer_sanity`), when the client cannot replay the server step:
  refuse a first layer whose rows are near-parallel (imprint bins share one measurement vector) or whose
  units are silent on the client's own inputs (trap weights fire for a small fraction of inputs; an honest
  ReLU unit fires for a sizeable share). It is a heuristic: a server that sets only a few units as traps,
  keeping the others honest, passes it (measured in ``benchmarks/attacks.py``).

Both raise :class:`SuspiciousModelError` (a :class:`~securefgl.errors.RequestRefusedError`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from securefgl.attacks.imprint import imprint_layout
from securefgl.errors import ConfigError, SuspiciousModelError

__all__ = [
    "BroadcastCheck",
    "SanityReport",
    "SuspiciousModelError",
    "check_update_rule",
    "first_layer_sanity",
]


@dataclass(frozen=True)
class SanityReport:
    """What :func:`first_layer_sanity` measured on one broadcast.

    Args:
        parallel_fraction: Fraction of first-layer rows with another row at cosine above ``row_cosine``.
        silent_fraction: Fraction of units that fire for at most ``silent_count`` of the client's inputs (0
            when the client has fewer than ``min_inputs`` inputs).
        passed: Whether both fractions are within the thresholds.
        reason: Why it failed (empty when it passed).
    """

    parallel_fraction: float
    silent_fraction: float
    passed: bool
    reason: str


@dataclass(frozen=True)
class BroadcastCheck:
    """Thresholds of the first-layer sanity test.

    Args:
        row_cosine: Rows closer than this cosine count as parallel. (default: ``0.95``)
        max_parallel: Largest allowed fraction of parallel rows. (default: ``0.05``)
        silent_count: A unit firing for at most this many of the client's inputs is silent. (default: ``1``)
        max_silent: Largest allowed fraction of silent units. (default: ``0.25``)
        min_inputs: The silence test runs only on a client with at least this many inputs (an honest unit
            fires for about half of them; on a handful of inputs silence means nothing). (default: ``10``)
    """

    row_cosine: float = 0.95
    max_parallel: float = 0.05
    silent_count: int = 1
    max_silent: float = 0.25
    min_inputs: int = 10

    def __post_init__(self) -> None:
        if not (0 < self.row_cosine <= 1 and 0 <= self.max_parallel <= 1 and 0 <= self.max_silent <= 1):
            raise ConfigError("row_cosine must be in (0, 1], max_parallel and max_silent in [0, 1]")
        if self.silent_count < 0:
            raise ConfigError(f"silent_count must be >= 0, got {self.silent_count}")


def first_layer_sanity(
    model: torch.nn.Module,
    params: Mapping[str, Tensor],
    inputs: Tensor,
    check: BroadcastCheck | None = None,
) -> SanityReport:
    """Measure the broadcast's first layer against ``check`` on the client's own first-layer ``inputs``.

    Args:
        model: The public architecture (two-layer MLP or GCN).
        params: The received parameters.
        inputs: The client's first-layer inputs ``(n, F)`` (its features, or :math:`\\hat A X` for a GCN).
        check: The thresholds (default: :class:`BroadcastCheck`).
    """
    chk = check or BroadcastCheck()
    lay = imprint_layout(model)
    w = params[lay.first_weight].detach().double().cpu()
    b = params[lay.first_bias].detach().double().cpu()
    wn = F.normalize(w, dim=1, eps=1e-30)
    cos = wn @ wn.T
    cos.fill_diagonal_(0.0)
    parallel = float((cos.abs() > chk.row_cosine).any(dim=1).double().mean())
    silent = 0.0
    if inputs.shape[0] >= chk.min_inputs:
        fires = ((inputs.double().cpu() @ w.T + b) > 0).sum(dim=0)
        silent = float((fires <= chk.silent_count).double().mean())
    why = []
    if parallel > chk.max_parallel:
        why.append(f"{parallel:.0%} of first-layer rows are near-parallel (> {chk.max_parallel:.0%} allowed)")
    if silent > chk.max_silent:
        why.append(
            f"{silent:.0%} of first-layer units fire for <= {chk.silent_count} of this client's inputs "
            f"(> {chk.max_silent:.0%} allowed)"
        )
    return SanityReport(parallel, silent, not why, "; ".join(why))


def check_update_rule(
    received: Mapping[str, Tensor], expected: Mapping[str, Tensor], *, atol: float = 1e-5
) -> None:
    """Refuse ``received`` unless it equals ``expected`` (the public server step of the last released sum).

    Raises:
        SuspiciousModelError: a parameter is missing, reshaped, or differs by more than ``atol``.
    """
    for name, e in expected.items():
        if name not in received or tuple(received[name].shape) != tuple(e.shape):
            raise SuspiciousModelError(f"broadcast parameter {name!r} is missing or reshaped")
        diff = float((received[name].detach().double().cpu() - e.detach().double().cpu()).abs().max())
        if diff > atol:
            raise SuspiciousModelError(
                f"broadcast parameter {name!r} differs from the algorithm's update of the last released sum "
                f"by {diff:.3g} > {atol:g}"
            )
