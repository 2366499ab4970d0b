r"""Privacy accounting of a DP pipeline with Opacus's RDP accountant, and calibration to a target epsilon.

A pipeline is a list of :class:`Mechanism` parts, each a (sub)sampled Gaussian mechanism run ``steps`` times
with sampling rate ``q`` and noise multiplier ``z`` (noise standard deviation over sensitivity). GAP's are:

=====================  ==============================  =====================  =========================
part                   what is noised                  sampling rate          steps
=====================  ==============================  =====================  =========================
encoder DP-SGD         clipped per-node gradients      Poisson ``q``          rounds x local steps
aggregation            every neighbourhood sum         1                      hops ``K``
classifier DP-SGD      clipped per-node gradients      Poisson ``q``          rounds x local steps
=====================  ==============================  =====================  =========================

Rényi DP composes additively (Mironov 2017); the sampled Gaussian's RDP is Opacus's
``compute_rdp`` (Mironov, Talwar and Zhang 2019) and the conversion to :math:`(\varepsilon, \delta)` is
Opacus's ``get_privacy_spent`` (Balle et al. 2020), over Opacus's default orders, so the epsilon equals
``opacus.accountants.RDPAccountant`` with the same history to the last bit. One noise multiplier is shared by
all parts (each part's ``scale`` multiplies it) and found by bisection so that the composed epsilon meets the
target.

In a federation every node belongs to exactly one client and each client runs the pipeline on its own nodes,
so the guarantee of one node is that of its client's pipeline (parallel composition); all clients use the same
public ``q``, steps and noise, so one statement covers every node.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from securefgl.errors import ConfigError, PrivacyBudgetError

__all__ = [
    "ACCOUNTANT",
    "DEFAULT_ORDERS",
    "Mechanism",
    "PrivacyStatement",
    "calibrate_noise_multiplier",
    "composed_epsilon",
]

#: Opacus's default RDP orders (``RDPAccountant.DEFAULT_ALPHAS``).
DEFAULT_ORDERS: tuple[float, ...] = tuple([1 + x / 10.0 for x in range(1, 100)] + list(range(12, 64)))

#: How the epsilon of a statement was computed.
ACCOUNTANT = "opacus RDP (sampled Gaussian, Mironov et al. 2019; RDP to (eps, delta): Balle et al. 2020)"


@dataclass(frozen=True)
class Mechanism:
    """One part of a pipeline: a Gaussian mechanism, Poisson-subsampled at ``sample_rate``, run ``steps`` times.

    Args:
        name: What it noises (shown in the statement).
        sample_rate: Poisson sampling rate ``q`` in ``(0, 1]`` (1: every record every step).
        steps: How many times it runs (``0``: not at all).
        scale: This part's noise multiplier over the pipeline's shared one. (default: ``1.0``)
    """

    name: str
    sample_rate: float
    steps: int
    scale: float = 1.0

    def __post_init__(self) -> None:
        if not 0.0 < self.sample_rate <= 1.0:
            raise ConfigError(
                f"mechanism {self.name!r}: sample_rate must be in (0, 1], got {self.sample_rate}"
            )
        if self.steps < 0:
            raise ConfigError(f"mechanism {self.name!r}: steps must be >= 0, got {self.steps}")
        if not self.scale > 0:
            raise ConfigError(f"mechanism {self.name!r}: scale must be > 0, got {self.scale}")


def _check_delta(delta: float) -> None:
    if not 0.0 < delta < 1.0:
        raise ConfigError(f"delta must be in (0, 1), got {delta}")


def composed_epsilon(noise_multiplier: float, parts: Sequence[Mechanism], delta: float) -> float:
    """The epsilon at ``delta`` of all ``parts`` composed, with shared noise multiplier ``noise_multiplier``.

    Returns 0 when no part runs; ``inf`` when ``noise_multiplier`` is 0 and something runs.
    """
    _check_delta(delta)
    active = [p for p in parts if p.steps > 0]
    if not active:
        return 0.0
    if noise_multiplier <= 0:
        return math.inf
    # Imported here: importing opacus takes about a second.
    from opacus.accountants.analysis.rdp import compute_rdp, get_privacy_spent

    rdp = None
    for p in active:
        r = compute_rdp(
            q=p.sample_rate,
            noise_multiplier=noise_multiplier * p.scale,
            steps=p.steps,
            orders=list(DEFAULT_ORDERS),
        )
        rdp = r if rdp is None else rdp + r
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "optimal order is the largest alpha": still a valid upper bound
        eps, _ = get_privacy_spent(orders=list(DEFAULT_ORDERS), rdp=rdp, delta=delta)
    return float(eps)


def calibrate_noise_multiplier(
    target_epsilon: float, parts: Sequence[Mechanism], delta: float, *, tolerance: float = 1e-3
) -> float:
    """The smallest shared noise multiplier whose composed epsilon is at most ``target_epsilon``.

    Bisection on a log scale to a relative ``tolerance`` of the multiplier; the returned multiplier always meets
    the target (it is the upper end of the final bracket).

    Raises:
        PrivacyBudgetError: ``target_epsilon`` is not a positive finite number.
    """
    if not (isinstance(target_epsilon, int | float) and math.isfinite(target_epsilon) and target_epsilon > 0):
        raise PrivacyBudgetError(f"target epsilon must be a positive finite number, got {target_epsilon!r}")
    _check_delta(delta)
    if not any(p.steps > 0 for p in parts):
        return 0.0
    lo, hi = 1e-3, 1.0
    while composed_epsilon(hi, parts, delta) > target_epsilon:
        lo, hi = hi, hi * 2
        if hi > 1e7:
            raise PrivacyBudgetError(f"no noise multiplier up to 1e7 reaches epsilon {target_epsilon}")
    while hi / lo > 1 + tolerance:
        mid = math.sqrt(lo * hi)
        if composed_epsilon(mid, parts, delta) > target_epsilon:
            lo = mid
        else:
            hi = mid
    return hi


@dataclass(frozen=True)
class PrivacyStatement:
    """What a run guarantees, about whom, under which assumptions: printed, saved and in ``--json``.

    Args:
        unit: ``"node"``, ``"edge"``, ``"client"`` or ``"none"``.
        epsilon: Spent epsilon (``inf``: no guarantee; 0: the unit is never used).
        delta: The delta the epsilon is stated at.
        accountant: How epsilon was computed.
        noise_multiplier: The shared noise multiplier (0: no noise).
        mechanisms: The composed parts (name, sampling rate, steps, noise multiplier).
        assumptions: What the guarantee takes for granted (degree bound, sampling, what is not covered).
    """

    unit: str
    epsilon: float
    delta: float
    accountant: str = ACCOUNTANT
    noise_multiplier: float = 0.0
    mechanisms: tuple[dict[str, Any], ...] = ()
    assumptions: tuple[str, ...] = field(default_factory=tuple)

    @classmethod
    def build(
        cls,
        unit: str,
        parts: Sequence[Mechanism],
        *,
        noise_multiplier: float,
        delta: float,
        assumptions: Sequence[str] = (),
    ) -> PrivacyStatement:
        """The statement of ``parts`` run with ``noise_multiplier`` (epsilon computed here)."""
        eps = composed_epsilon(noise_multiplier, parts, delta)
        mech = tuple(
            {
                "name": p.name,
                "sample_rate": p.sample_rate,
                "steps": p.steps,
                "noise_multiplier": noise_multiplier * p.scale,
            }
            for p in parts
        )
        return cls(unit, eps, delta, ACCOUNTANT, noise_multiplier, mech, tuple(assumptions))

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (``epsilon`` ``None`` when infinite)."""
        return {
            "unit": self.unit,
            "epsilon": self.epsilon if math.isfinite(self.epsilon) else None,
            "delta": self.delta,
            "accountant": self.accountant,
            "noise_multiplier": self.noise_multiplier,
            "mechanisms": [dict(m) for m in self.mechanisms],
            "assumptions": list(self.assumptions),
        }

    def describe(self) -> str:
        """One human-readable paragraph: the guarantee, then the assumptions."""
        eps = "infinite (no guarantee)" if not math.isfinite(self.epsilon) else f"{self.epsilon:.3g}"
        lines = [f"{self.unit}-level DP: epsilon {eps} at delta {self.delta:g} ({self.accountant})"]
        for m in self.mechanisms:
            lines.append(
                f"  - {m['name']}: {m['steps']} step(s), sampling rate {m['sample_rate']:g}, "
                f"noise multiplier {m['noise_multiplier']:.4g}"
            )
        lines += [f"  * {a}" for a in self.assumptions]
        return "\n".join(lines)
