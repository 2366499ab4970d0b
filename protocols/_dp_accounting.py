"""Privacy accounting of the distributed discrete Gaussian: pure functions (RDP, subsampling, epsilon).

Re-exported by :mod:`securefgl.protocols.dp`, whose docstring states the bounds: Kairouz, Liu and
Steinke (ICML 2021, Prop. 14 / Thm. 1) per round, Zhu and Wang (ICML 2019, Thm. 6) for Poisson client
sampling, and Opacus's ``get_privacy_spent`` (Balle et al. 2020) from RDP to :math:`(\\varepsilon,
\\delta)`.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from scipy.special import gammaln, logsumexp

from securefgl.errors import ConfigError, PrivacyBudgetError

__all__ = [
    "ADJACENCY",
    "DEFAULT_BETA",
    "OPACUS_DEFAULT_ALPHAS",
    "RDP_ORDERS_ALL_INT",
    "RDP_ORDERS_INT",
    "RDP_ORDERS_Q1",
    "SAMPLERS",
    "DDGBlock",
    "PrivacyLedger",
    "check_delta",
    "check_sample_rate",
    "ddg_epsilon",
    "ddg_round_rdp",
    "epsilon_from_rdp",
    "poisson_subsampled_rdp",
]

#: Opacus's default RDP orders (``opacus.accountants.RDPAccountant.DEFAULT_ALPHAS``; checked in the tests).
OPACUS_DEFAULT_ALPHAS: tuple[float, ...] = tuple(
    [1 + x / 10.0 for x in range(1, 100)] + [float(a) for a in range(12, 64)]
)
#: RDP orders used when every client takes part (q = 1): Opacus's defaults plus larger orders.
RDP_ORDERS_Q1: tuple[float, ...] = OPACUS_DEFAULT_ALPHAS + (
    64.0,
    80.0,
    96.0,
    128.0,
    192.0,
    256.0,
)
#: Integer RDP orders used with client sampling (the Zhu-Wang bound needs integer orders).
RDP_ORDERS_INT: tuple[float, ...] = tuple(float(a) for a in range(2, 64)) + (
    64.0,
    80.0,
    96.0,
    128.0,
    192.0,
    256.0,
)
#: Every integer order from 2 to the largest of :data:`RDP_ORDERS_INT` (the grid a round's RDP is tabulated on).
RDP_ORDERS_ALL_INT = np.arange(2, int(max(RDP_ORDERS_INT)) + 1, dtype=np.float64)

#: Client samplers the accountant knows, and the adjacency each analysis uses.
SAMPLERS: tuple[str, ...] = ("server", "poisson")
ADJACENCY: dict[str, str] = {
    "server": "zero-out of one client's contribution (sensitivity = clip norm); no amplification",
    "poisson": "add/remove of one client (Poisson subsampling, as Opacus's RDP accountant)",
}


@dataclass
class PrivacyLedger:
    """Accumulated privacy loss: per-round unsampled RDP, and per-client unsampled RDP."""

    rounds_q1: dict[int, np.ndarray] = field(default_factory=dict)
    rounds_int: dict[int, np.ndarray] = field(default_factory=dict)
    clients_q1: dict[int, np.ndarray] = field(default_factory=dict)


#: Default conditional-rounding parameter :math:`\\beta = e^{-1/2}`.
DEFAULT_BETA = math.exp(-0.5)


@dataclass(frozen=True)
class DDGBlock:
    """Public DDG parameters of one noised block, in grid units.

    Args:
        dim: :math:`d`, number of elements.
        clip: :math:`c = C/\\gamma`, the L2 clip norm in grid units.
        sigma: :math:`\\sigma`, the per-client discrete Gaussian scale in grid units.
        beta: the conditional-rounding parameter :math:`\\beta \\in [0, 1)` (0: no conditioning).
    """

    dim: int
    clip: float
    sigma: float
    beta: float = DEFAULT_BETA

    def sensitivity_sq(self) -> float:
        """:math:`\\Delta^2`: the L2 sensitivity bound after conditional rounding (Kairouz et al. Thm. 1)."""
        c, d = float(self.clip), float(self.dim)
        det = (c + math.sqrt(d)) ** 2
        if self.beta <= 0:
            return det
        prob = c * c + d / 4.0 + math.sqrt(2.0 * math.log(1.0 / self.beta)) * (c + math.sqrt(d) / 2.0)
        return min(det, prob)

    def tau(self, max_shares: int) -> float:
        """:math:`\\tau = 10 \\sum_{k=1}^{N-1} e^{-2\\pi^2\\sigma^2 k/(k+1)}` for ``max_shares`` = :math:`N`."""
        n = int(max_shares)
        if n <= 1:
            return 0.0
        k = np.arange(1, n, dtype=np.float64)
        return float(10.0 * np.exp(-2.0 * math.pi**2 * self.sigma**2 * k / (k + 1.0)).sum())


def ddg_round_rdp(
    blocks: Sequence[DDGBlock],
    orders: Sequence[float] | np.ndarray,
    *,
    min_shares: int,
    max_shares: int,
) -> np.ndarray:
    """RDP of one round of the distributed discrete Gaussian, summed over blocks (no subsampling).

    Kairouz et al. 2021, Prop. 14 with Thm. 1 (the L1 variant of the bound is omitted: a minimum of
    valid bounds stays valid). Valid for any number of noise shares in ``[min_shares, max_shares]``.

    Args:
        blocks: the noised blocks.
        orders: RDP orders :math:`\\alpha > 1`.
        min_shares: :math:`m`, the fewest noise shares a released sum can hold.
        max_shares: :math:`N`, the most (``schema.max_clients``).

    Returns:
        ``(len(orders),)`` float64 RDP values.
    """
    a = np.asarray(orders, dtype=np.float64)
    total = np.zeros_like(a)
    for b in blocks:
        if b.dim == 0:
            continue
        if b.sigma <= 0:
            return np.full_like(a, np.inf)
        s2 = b.sensitivity_sq() / (min_shares * b.sigma**2)
        tau = b.tau(max_shares)
        t1 = a * s2 / 2.0 + tau * b.dim
        t2 = a / 2.0 * (math.sqrt(s2) + tau * math.sqrt(b.dim)) ** 2
        total += np.minimum(t1, t2)
    return total


def poisson_subsampled_rdp(base: np.ndarray, orders: Sequence[float], q: float) -> np.ndarray:
    """General upper bound on the RDP of a Poisson-subsampled mechanism (Zhu and Wang, ICML 2019, Thm. 6).

    .. math::

        \\varepsilon'(\\alpha) \\le \\frac{1}{\\alpha - 1}\\log\\Big((1-q)^{\\alpha-1}(\\alpha q - q + 1)
        + \\tbinom{\\alpha}{2} q^2 (1-q)^{\\alpha-2} e^{\\varepsilon(2)}
        + 3 \\sum_{l=3}^{\\alpha} \\tbinom{\\alpha}{l} q^l (1-q)^{\\alpha-l} e^{(l-1)\\varepsilon(l)}\\Big),

    and never more than the unsampled :math:`\\varepsilon(\\alpha)`.

    Args:
        base: the unsampled RDP at *every* integer order :math:`2, \\dots, \\max(\\text{orders})`
            (``base[l - 2]`` is :math:`\\varepsilon(l)`).
        orders: integer orders to evaluate.
        q: sampling probability in :math:`(0, 1]`.

    Returns:
        ``(len(orders),)`` float64.
    """
    orders_i = [int(o) for o in orders]
    if any(o != float(x) or o < 2 for o, x in zip(orders_i, orders, strict=True)):
        raise ConfigError(f"Poisson-subsampled RDP needs integer orders >= 2, got {list(orders)}")
    if q >= 1.0:
        return np.array([base[o - 2] for o in orders_i], dtype=np.float64)
    if q <= 0.0:
        return np.zeros(len(orders_i), dtype=np.float64)
    logq, log1q = math.log(q), math.log1p(-q)
    out = np.empty(len(orders_i), dtype=np.float64)
    for i, a in enumerate(orders_i):
        first = (a - 1) * log1q + math.log(a * q - q + 1.0)
        ls = np.arange(2, a + 1, dtype=np.float64)
        logcomb = gammaln(a + 1.0) - gammaln(ls + 1.0) - gammaln(a - ls + 1.0)
        eps_l = base[ls.astype(np.int64) - 2]
        terms = logcomb + ls * logq + (a - ls) * log1q + (ls - 1.0) * eps_l
        weights = np.full(terms.shape, 3.0)
        weights[0] = 1.0  # the l = 2 term has coefficient 1
        val = logsumexp(np.concatenate(([first], terms)), b=np.concatenate(([1.0], weights))) / (a - 1)
        out[i] = min(val, base[a - 2])
    return out


def epsilon_from_rdp(orders: Sequence[float], rdp: np.ndarray, delta: float) -> tuple[float, float, bool]:
    """(epsilon, best order, whether the best order is at the edge of the grid) via Opacus."""
    # Imported here: importing opacus takes seconds (it pulls in its whole training stack).
    from opacus.accountants.analysis.rdp import get_privacy_spent

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        eps, best = get_privacy_spent(orders=list(orders), rdp=list(rdp), delta=delta)
    edge = any("Optimal order" in str(w.message) for w in caught)
    return float(eps), float(best), edge


def ddg_epsilon(
    blocks: Sequence[DDGBlock],
    *,
    rounds: int,
    sample_rate: float,
    delta: float,
    min_shares: int,
    max_shares: int,
) -> float:
    """Epsilon at ``delta`` of ``rounds`` identical DDG rounds with client sampling rate ``sample_rate``.

    Args:
        blocks, min_shares, max_shares: see :func:`ddg_round_rdp`.
        rounds: number of rounds.
        sample_rate: Poisson client-sampling probability :math:`q \\in (0, 1]`.
        delta: target delta.
    """
    check_delta(delta)
    check_sample_rate(sample_rate)
    if sample_rate >= 1.0:
        orders: tuple[float, ...] = RDP_ORDERS_Q1
        rdp = ddg_round_rdp(blocks, orders, min_shares=min_shares, max_shares=max_shares)
    else:
        orders = RDP_ORDERS_INT
        ints = np.arange(2, int(max(orders)) + 1, dtype=np.float64)
        base = ddg_round_rdp(blocks, ints, min_shares=min_shares, max_shares=max_shares)
        rdp = poisson_subsampled_rdp(base, orders, sample_rate)
    return epsilon_from_rdp(orders, rdp * int(rounds), delta)[0]


def check_delta(delta: Any) -> float:
    if (
        isinstance(delta, bool)
        or not isinstance(delta, (int, float, np.floating))
        or not 0.0 < float(delta) < 1.0
    ):
        raise PrivacyBudgetError(f"delta must be a number in (0, 1), got {delta!r}")
    return float(delta)


def check_sample_rate(q: Any) -> float:
    if isinstance(q, bool) or not isinstance(q, (int, float, np.floating)) or not 0.0 < float(q) <= 1.0:
        raise PrivacyBudgetError(f"sample_rate must be a number in (0, 1], got {q!r}")
    return float(q)
