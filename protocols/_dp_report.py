"""What the distributed DP wrapper reports: :class:`PrivacyReport` and :class:`PrivateSums`.

Both are re-exported by :mod:`securefgl.protocols.dp`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import torch

from securefgl.protocols.base import Sums

__all__ = ["PrivacyReport", "PrivateSums"]


@dataclass(frozen=True)
class PrivacyReport:
    """The privacy guarantee after a sum, for the transcript and the run report.

    Attributes:
        unit: the privacy unit (``"client"``: one client's whole contribution per round).
        mechanism: the noise mechanism.
        accountant: how epsilon was computed.
        epsilon: epsilon at ``delta`` over every round so far, with amplification by ``sample_rate``.
        delta: the delta.
        epsilon_participation_visible: the largest epsilon of any single client over the sums it took
            part in, without amplification (the guarantee against a party that sees who took part, e.g.
            the server).
        rounds: distinct rounds accounted so far.
        sample_rate: the configured client-sampling probability.
        sampler: who samples the clients (``"server"``: no amplification; ``"poisson"``: each client
            decides with its own randomness, amplified by ``sample_rate``).
        adjacency: the neighbouring relation the guarantee is stated for (zero-out or add/remove of one
            client).
        amplified: whether ``epsilon`` includes amplification by subsampling.
        noise_multiplier: :math:`z`.
        min_contributors: :math:`m`, the fewest noise shares in a released sum.
        noise_std: block -> standard deviation of the total noise of one element of a released sum with
            exactly :math:`m` contributors (value units).
        clip_norm: block -> L2 clip norm.
        best_order: the RDP order that gave ``epsilon``.
        order_at_edge: whether that order is the edge of the grid (the bound could be tighter).
        inner_threshold: the inner masking protocol's Shamir threshold :math:`t` for this cohort, if it
            has one: a server that deviates from the protocol could unmask a sum of as few as :math:`t`
            inputs, so the noise floor holds against it only when :math:`t \\ge m`.
    """

    unit: str
    mechanism: str
    accountant: str
    epsilon: float
    delta: float
    epsilon_participation_visible: float
    rounds: int
    sample_rate: float
    noise_multiplier: float
    min_contributors: int
    noise_std: dict[str, float]
    clip_norm: dict[str, float]
    best_order: float
    order_at_edge: bool
    inner_threshold: int | None = None
    sampler: str = "server"
    adjacency: str = ""
    amplified: bool = False

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready copy."""
        return dataclasses.asdict(self)


class PrivateSums(Sums):
    """:class:`~securefgl.protocols.base.Sums` that also carry the :class:`PrivacyReport` (``.privacy``)."""

    def __init__(self, *args: Any, privacy: PrivacyReport, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.privacy = privacy

    @classmethod
    def wrap(cls, sums: Sums, privacy: PrivacyReport) -> PrivateSums:
        """Re-wrap a ``Sums`` with a privacy report."""
        values = {k: sums[k] for k in sums}
        rows = {k: m for k in sums if (m := sums.withheld_rows(k)) is not None}
        return cls(
            values,
            num_contributors=sums.num_contributors,
            withheld=sums.withheld,
            withheld_rows=rows,
            clip_counts=sums.clip_counts,
            max_abs_error=sums.max_abs_error,
            privacy=privacy,
        )

    def to(self, device: torch.device | str) -> PrivateSums:
        return PrivateSums.wrap(super().to(device), self.privacy)

    def __repr__(self) -> str:
        p = self.privacy
        return f"{super().__repr__()[:-1]}; epsilon={p.epsilon:.4g} at delta={p.delta:g})"
