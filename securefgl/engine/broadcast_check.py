r"""The clients' check of every broadcast: replay the public server step, refuse anything else.

A server that follows the protocol can only send what the algorithm's server step makes of the released sums,
starting from the initialisation every party can rebuild from the public run seed. A client that keeps that
replica (the released sums are the protocol's output, given to the clients as well as to the server) refuses
any other broadcast before its data touches it: a crafted model (the imprint bins of Fowl et al. 2022, the
trap weights of Boenisch et al. 2023, :mod:`securefgl.attacks.imprint`) is stopped whatever its shape, because
it is not the update of the last sum. What it does not stop: a server that crafts its *first* broadcast when
the initialisation seed is not public (here it is: the run seed), and attacks that need no crafted model
(inversion of an honest sum, :mod:`securefgl.attacks.analytic_inversion`).

**What the check trusts: the released sums the clients replay.** In this engine the sums reach the clients
from the protocol's release, not from the server's word. A server that deviates from SecAgg/SecAgg+ can also
report a false sum (it computes the sum, and no client of these protocols can verify it), and for FedAvg any
model is the server step of *some* sum: against such a server the check needs verifiable aggregation, which
is not built. It is sound where the sum reaches the clients authentically: a client decryptor (CKKS, which
can send the sum on its authenticated peer channels), an aggregation service run apart from the party that
updates the model, or any protocol whose released sum the clients can check.

Cost: one server step per round on each client (the server's own cost, small beside training) and the
released sums on the downlink. In the simulation every client's replica is the same object's state (they
would all compute the same thing), so one replica stands for all of them.

Enabled by ``train.check_broadcast=true``; a refusal raises :class:`~securefgl.errors.SuspiciousModelError`
and ends the run, as an honest client would stop taking part.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch

from securefgl.algorithms.base import Algorithm, Broadcast, Phase, RoundState, SumRequest
from securefgl.engine.server import FederationServer
from securefgl.errors import SuspiciousModelError
from securefgl.protocols.base import Sums

__all__ = ["BroadcastVerifier", "compare_broadcasts"]


def compare_broadcasts(
    received: Mapping[str, Any], expected: Mapping[str, Any], *, atol: float = 0.0
) -> None:
    """Refuse ``received`` unless it holds exactly the entries of ``expected`` with the same values.

    Tensors must have the same shape and differ by at most ``atol`` (``0``: bit-identical, as a replay on the
    same released sums is); other entries must compare equal.

    Raises:
        SuspiciousModelError: an entry is missing, extra, reshaped or different.
    """
    missing = sorted(set(expected) - set(received))
    extra = sorted(set(received) - set(expected))
    if missing or extra:
        raise SuspiciousModelError(
            f"the broadcast's entries differ from the replayed server step: missing {missing[:4]}, "
            f"unexpected {extra[:4]}"
        )
    for name, e in expected.items():
        r = received[name]
        if isinstance(e, torch.Tensor):
            if not isinstance(r, torch.Tensor) or tuple(r.shape) != tuple(e.shape):
                raise SuspiciousModelError(f"broadcast entry {name!r} is missing or reshaped")
            if r.numel() == 0:
                continue
            diff = float((r.detach().double().cpu() - e.detach().double().cpu()).abs().max())
            if not diff <= atol:  # NaN differs too
                raise SuspiciousModelError(
                    f"broadcast entry {name!r} differs from the algorithm's update of the released sums by "
                    f"{diff:.3g} (allowed {atol:g}): refused before training"
                )
        elif isinstance(e, Mapping) and isinstance(r, Mapping):
            compare_broadcasts(r, e, atol=atol)
        elif r != e:
            raise SuspiciousModelError(f"broadcast entry {name!r} differs from the replayed server step")


class BroadcastVerifier:
    """A client's replica of the server: public initial state, fed the released sums, compared each round.

    Args:
        algorithm: The algorithm; only its server-side methods are called, as on the server.
        state: The server state the client rebuilt itself (``algorithm.init_server`` from the public seed).
        eval_schema: The evaluation sums' schema.
        patience: ``train.patience`` (the replica follows the same best-round rule).
        atol: Largest allowed difference (default ``0``: the replay is deterministic).
    """

    def __init__(
        self,
        algorithm: Algorithm,
        state: Any,
        eval_schema: Any,
        patience: int | None = None,
        *,
        atol: float = 0.0,
    ) -> None:
        self.replica = FederationServer(
            algorithm, state, algorithm.initial_broadcast(state), eval_schema, patience
        )
        self.atol = atol
        self.checked = 0

    def verify(self, received: Broadcast, where: str) -> None:
        """Refuse ``received`` unless it is the replica's broadcast; ``where`` names the round in the error."""
        try:
            compare_broadcasts(received, self.replica.broadcast, atol=self.atol)
        except SuspiciousModelError as exc:
            raise SuspiciousModelError(f"{where}: {exc}") from None
        self.checked += 1

    def start_phase(self, phase: Phase) -> None:
        self.replica.start_phase(phase)

    def step(self, sums: Mapping[str, Sums], requests: Sequence[SumRequest], rs: RoundState) -> None:
        self.replica.step(sums, requests, rs)

    def evaluated(self, sums: Sums, rs: RoundState, *, select: bool = True) -> None:
        self.replica.evaluated(sums, rs, select=select)
