"""Hazmat: the SecAgg+ secret-sharing graph and its (degree, threshold) parameter finder.

.. warning::
    Low-level building block of :mod:`securefgl.protocols.secaggplus`.

SecAgg+ (Bell, Bonawitz, Gascón, Lepoint, Raykova, CCS 2020, https://eprint.iacr.org/2020/704) lets
each client share its secrets with, and mask against, only its neighbours in a random :math:`k`-regular
graph. As in Google's production implementation, the graph is a *Harary graph* with randomly permuted
labels: put the :math:`n` clients on a ring in a random order and connect each to the :math:`k/2`
clients before and after it; every client is also its own neighbour, so a neighbourhood has the odd size
:math:`k + 1`.

**Parameter finder.** Given :math:`n`, a fraction :math:`\\gamma` of corrupted clients and a fraction
:math:`\\delta` of dropouts, :func:`find_graph_parameters` returns the smallest even :math:`k` and a
threshold :math:`t` such that, with :math:`A = \\lfloor \\gamma n \\rfloor` corrupted and
:math:`D = \\lfloor \\delta n \\rfloor` dropped clients placed uniformly at random,

1. (security, :math:`2^{-\\sigma}` split over two events) the surviving honest clients stay connected:
   removing nodes disconnects a Harary graph only if two disjoint runs of :math:`k/2` consecutive ring
   positions are all removed, and a union bound over the :math:`n(n-k-1)/2` pairs of runs gives

   .. math::
       \\Pr[\\text{disconnected}] \\le \\frac{n(n-k-1)}{2}
       \\cdot \\frac{B!\\,(n-k)!}{(B-k)!\\,n!} < 2^{-(\\sigma+1)}, \\qquad B = A + D;

2. (security) no client has :math:`t` or more corrupted neighbours, except with probability
   :math:`2^{-(\\sigma+1)}/n` per client: with :math:`X \\sim \\mathrm{Hypergeometric}(n, A, k)`,
   :math:`t_1 = \\min\\{x : \\Pr[X > x] < 2^{-(\\sigma+1)}/n\\}`;
3. (correctness) every client keeps at least :math:`t` surviving neighbours, except with probability
   :math:`2^{-\\eta}/n`: with :math:`Y \\sim \\mathrm{Hypergeometric}(n, \\lceil (1-\\delta) n \\rceil, k)`,
   :math:`t_2 = \\min\\{y : \\Pr[Y \\le y] \\ge 2^{-\\eta}/n\\}`;

and :math:`t \\in (t_1, t_2]`; the finder returns :math:`t = \\max(t_1 + 1, 2)`. Against a
*semi-malicious* server (one that may lie about who dropped) :math:`2t - k` must also exceed the corrupted
neighbours, so :math:`t_1` is raised to :math:`\\lceil (t_1 + k - 1.25)/2 \\rceil`. The defaults are
Google's: :math:`\\sigma = 40`, :math:`\\eta = 20`. Probabilities are computed exactly in log space from
the hypergeometric probability mass function; the test suite checks the result against every row of
Google's published table (``fcp/secagg/server/graph_parameter_finder_test.cc``). When no :math:`k < n - 1`
works (small :math:`n`), the complete graph is used.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Literal, get_args

import numpy as np
from scipy.special import gammaln

from securefgl.errors import ConfigError
from securefgl.protocols._prg import derive_key, keystream_into

__all__ = [
    "Adversary",
    "ADVERSARIES",
    "GraphParameters",
    "SecretSharingGraph",
    "complete_graph_threshold",
    "find_graph_parameters",
    "harary_disconnection_log_probability",
    "hypergeometric_log_pmf",
    "security_threshold",
]

Adversary = Literal["curious", "semi-malicious", "none"]
ADVERSARIES: tuple[str, ...] = get_args(Adversary)

# Guards against floating-point error in floor(rate * n) moving a bound in the insecure direction.
_EPS = 1e-14


@dataclass(frozen=True)
class GraphParameters:
    """The neighbourhood graph of one session.

    Attributes:
        num_clients: :math:`n`.
        degree: :math:`k`, neighbours of each client *excluding itself* (even for Harary graphs;
            :math:`n - 1` for the complete graph).
        threshold: :math:`t`, shares needed to reconstruct a secret (a client holds a share of its own).
        complete: whether every client is a neighbour of every other.
    """

    num_clients: int
    degree: int
    threshold: int
    complete: bool

    @property
    def neighbourhood_size(self) -> int:
        """:math:`k + 1`: the share holders of each secret, including the owner."""
        return self.degree + 1


def _check_rates(dropout_rate: float, corrupt_rate: float, adversary: str) -> None:
    if adversary not in ADVERSARIES:
        raise ConfigError(f"unknown adversary {adversary!r}; valid: {list(ADVERSARIES)}")
    for name, val in (("dropout_rate", dropout_rate), ("corrupt_rate", corrupt_rate)):
        if not (isinstance(val, (int, float)) and 0.0 <= val < 1.0):
            raise ConfigError(f"{name} must be in [0, 1), got {val!r}")
    if adversary == "none" and corrupt_rate > 0:
        raise ConfigError(f"adversary='none' requires corrupt_rate=0, got {corrupt_rate}")
    if adversary in ("curious", "none") and corrupt_rate + dropout_rate > 0.9:
        raise ConfigError(
            f"against a curious server corrupt_rate + dropout_rate must be <= 0.9, "
            f"got {corrupt_rate} + {dropout_rate}"
        )
    if adversary == "semi-malicious" and corrupt_rate + 2 * dropout_rate > 0.9:
        raise ConfigError(
            f"against a semi-malicious server corrupt_rate + 2 * dropout_rate must be <= 0.9, "
            f"got {corrupt_rate} + 2 * {dropout_rate}"
        )


def hypergeometric_log_pmf(total: int, marked: int, draws: int) -> tuple[np.ndarray, np.ndarray]:
    """Support and natural-log pmf of the number of marked items in ``draws`` draws without replacement.

    Returns:
        ``(xs, log_pmf)``, both of shape :math:`(|\\mathrm{support}|,)`.
    """
    if not (0 <= marked <= total and 0 <= draws <= total):
        raise ConfigError(f"invalid hypergeometric parameters total={total}, marked={marked}, draws={draws}")
    lo, hi = max(0, draws + marked - total), min(draws, marked)
    xs = np.arange(lo, hi + 1)
    lg = gammaln
    log_choose_total = math.lgamma(total + 1) - math.lgamma(draws + 1) - math.lgamma(total - draws + 1)
    logp = (
        math.lgamma(marked + 1)
        - lg(xs + 1)
        - lg(marked - xs + 1)
        + math.lgamma(total - marked + 1)
        - lg(draws - xs + 1)
        - lg(total - marked - draws + xs + 1)
        - log_choose_total
    )
    return xs, logp


def _tail_sums(logp: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """P[X <= x_i] and P[X > x_i] for each support point.

    Both tails are accumulated from their own small end, so they keep full relative precision down to
    the smallest double (the thresholds compared against are about 2^-61).
    """
    pmf = np.exp(logp)
    lower = np.cumsum(pmf)
    upper = np.zeros_like(pmf)
    if pmf.size > 1:
        upper[:-1] = np.cumsum(pmf[::-1])[::-1][1:]
    return lower, upper


def harary_disconnection_log_probability(num_clients: int, degree: int, removed: int) -> float:
    """Union bound (natural log) on a random Harary graph being disconnected by ``removed`` random nodes."""
    n, k, b = num_clients, degree, removed
    if k > b:
        return -math.inf
    pairs = math.log(n) + math.log(max(n - k - 1, 1)) - math.log(2)
    return pairs + math.lgamma(b + 1) + math.lgamma(n - k + 1) - math.lgamma(n + 1) - math.lgamma(b - k + 1)


def _threshold_for_degree(
    n: int,
    k: int,
    corrupted: int,
    dropped: int,
    surviving: int,
    adversary: str,
    security_bits: float,
    correctness_bits: float,
) -> int | None:
    log_sec = -(security_bits + 1) * math.log(2)
    if harary_disconnection_log_probability(n, k, corrupted + dropped) >= log_sec:
        return None
    q_sec = 2.0 ** -(security_bits + 1) / n
    q_cor = 2.0**-correctness_bits / n
    # t1: smallest x with P[#corrupted neighbours > x] < 2^-(sigma+1) / n
    xs, logp = hypergeometric_log_pmf(n, corrupted, k)
    _, upper = _tail_sums(logp)
    ok = np.nonzero(upper < q_sec)[0]
    t1 = int(xs[ok[0]]) if ok.size else k
    # t2: smallest y with P[#surviving neighbours <= y] >= 2^-eta / n
    ys, logq = hypergeometric_log_pmf(n, surviving, k)
    lower, _ = _tail_sums(logq)
    reach = np.nonzero(lower >= q_cor)[0]
    t2 = int(ys[reach[0]]) if reach.size else k
    if adversary == "semi-malicious":
        t1 = math.ceil((t1 + k - 1.25) / 2)
    if t2 <= t1:
        return None
    return max(t1 + 1, 2)


def security_threshold(
    num_clients: int, degree: int, *, corrupt_rate: float, adversary: str, security_bits: float = 40.0
) -> int:
    """The smallest threshold that keeps a neighbourhood of ``degree + 1`` secure (bound 2 of the module
    docstring, with the semi-malicious adjustment), for an explicitly chosen degree: :math:`t_1 + 1`."""
    n, k = int(num_clients), int(degree)
    corrupted = math.floor((corrupt_rate + _EPS) * n)
    xs, logp = hypergeometric_log_pmf(n, corrupted, k)
    _, upper = _tail_sums(logp)
    ok = np.nonzero(upper < 2.0 ** -(security_bits + 1) / n)[0]
    t1 = int(xs[ok[0]]) if ok.size else k
    if adversary == "semi-malicious":
        t1 = math.ceil((t1 + k - 1.25) / 2)
    return max(t1 + 1, 2)


def complete_graph_threshold(
    num_clients: int, *, corrupt_rate: float = 0.0, adversary: str = "curious"
) -> int:
    """Default threshold on the complete graph: a majority, raised to stay above the corrupted clients.

    Curious server: :math:`t = \\max(\\lfloor n/2 \\rfloor + 1, \\lfloor \\gamma n \\rfloor + 1)`;
    semi-malicious: :math:`t > (n + \\gamma n)/2` as in Google's full-graph check. Never below 2 when
    :math:`n \\ge 2` (a threshold of 1 would put each secret in the clear in every share).
    """
    n = int(num_clients)
    if n < 1:
        raise ConfigError(f"num_clients must be >= 1, got {num_clients!r}")
    corrupted = math.floor((corrupt_rate + _EPS) * n)
    t = max(n // 2 + 1, corrupted + 1)
    if adversary == "semi-malicious":
        t = max(t, math.floor((n + corrupted) / 2) + 1)
    return min(max(t, min(2, n)), n)


def find_graph_parameters(
    num_clients: int,
    *,
    dropout_rate: float,
    corrupt_rate: float,
    adversary: str = "curious",
    security_bits: float = 40.0,
    correctness_bits: float = 20.0,
) -> GraphParameters:
    """The smallest Harary degree and its threshold for the stated threat model (module docstring).

    Args:
        num_clients: :math:`n`, the invited clients.
        dropout_rate: :math:`\\delta`, tolerated fraction of dropouts, in [0, 1).
        corrupt_rate: :math:`\\gamma`, fraction of clients colluding with the server, in [0, 1).
        adversary: ``"curious"`` (honest-but-curious server), ``"semi-malicious"`` or ``"none"``.
        security_bits: :math:`\\sigma` (default 40).
        correctness_bits: :math:`\\eta` (default 20).

    Returns:
        Harary parameters, or the complete graph with :func:`complete_graph_threshold` when no degree
        below :math:`n - 1` meets the bounds.

    Raises:
        ConfigError: rates out of range or infeasible (curious: :math:`\\gamma + \\delta \\le 0.9`;
            semi-malicious: :math:`\\gamma + 2\\delta \\le 0.9`).
    """
    if isinstance(num_clients, bool) or not isinstance(num_clients, (int, np.integer)) or num_clients < 1:
        raise ConfigError(f"num_clients must be a positive integer, got {num_clients!r}")
    _check_rates(dropout_rate, corrupt_rate, adversary)
    return _find_cached(
        int(num_clients),
        float(dropout_rate),
        float(corrupt_rate),
        adversary,
        float(security_bits),
        float(correctness_bits),
    )


@lru_cache(maxsize=256)
def _find_cached(
    n: int,
    dropout_rate: float,
    corrupt_rate: float,
    adversary: str,
    security_bits: float,
    correctness_bits: float,
) -> GraphParameters:
    corrupted = math.floor((corrupt_rate + _EPS) * n)
    dropped = math.floor((dropout_rate + _EPS) * n)
    surviving = math.ceil((1 - dropout_rate - _EPS) * n)

    def check(k: int) -> int | None:
        return _threshold_for_degree(
            n, k, corrupted, dropped, surviving, adversary, security_bits, correctness_bits
        )

    # Exact linear scan over even degrees, like Google's finder (results cached per argument tuple).
    for k in range(2, n - 1, 2):
        t = check(k)
        if t is not None:
            return GraphParameters(num_clients=n, degree=k, threshold=t, complete=False)
    return GraphParameters(
        num_clients=n,
        degree=n - 1,
        threshold=complete_graph_threshold(n, corrupt_rate=corrupt_rate, adversary=adversary),
        complete=True,
    )


class SecretSharingGraph:
    """A Harary graph over ``clients`` with labels permuted by a seed, or the complete graph.

    The permutation is derived from ``seed`` (in the protocols: from the session id, so no party chooses
    it): each client gets a 64-bit AES-CTR key and the ring order is the order of these keys.

    Args:
        clients: the client ids (any order; duplicates refused).
        degree: :math:`k`, neighbours excluding self; :math:`k \\ge n - 1` gives the complete graph.
            Must be even for a Harary graph.
        seed: 32-byte seed of the label permutation.
    """

    def __init__(self, clients: Iterable[int], degree: int, seed: bytes) -> None:
        ids = sorted(int(c) for c in clients)
        if len(set(ids)) != len(ids):
            raise ConfigError("graph clients must be distinct")
        n = len(ids)
        if degree < 0:
            raise ConfigError(f"degree must be >= 0, got {degree}")
        self.clients: tuple[int, ...] = tuple(ids)
        self.complete = degree >= n - 1
        self.degree = n - 1 if self.complete else int(degree)
        if not self.complete and self.degree % 2:
            raise ConfigError(
                f"a Harary graph needs an even degree (neighbours excluding self), got {degree}"
            )
        self._all = frozenset(ids)
        if self.complete:
            self._position: dict[int, int] = {c: i for i, c in enumerate(ids)}
            self._ring: tuple[int, ...] = self.clients
        else:
            words = np.empty(n, dtype=np.uint64)
            keystream_into(derive_key(seed, "harary-permutation", label=str(n)), words)
            order = np.argsort(words, kind="stable")
            self._ring = tuple(ids[int(i)] for i in order)
            self._position = {c: i for i, c in enumerate(self._ring)}
        self._neighbours: dict[int, tuple[int, ...]] = {}  # memo: the server asks for each client per stage

    @property
    def num_clients(self) -> int:
        return len(self.clients)

    def neighbours(self, client: int) -> tuple[int, ...]:
        """Sorted neighbours of ``client``, including itself."""
        if client not in self._position:
            raise ConfigError(f"client {client} is not in the graph")
        if self.complete:
            return self.clients
        got = self._neighbours.get(client)
        if got is None:
            n, half, pos = len(self._ring), self.degree // 2, self._position[client]
            got = self._neighbours[client] = tuple(
                sorted({self._ring[(pos + j) % n] for j in range(-half, half + 1)})
            )
        return got

    def are_neighbours(self, u: int, v: int) -> bool:
        if self.complete:
            return u in self._all and v in self._all
        n = len(self._ring)
        d = abs(self._position[u] - self._position[v])
        return min(d, n - d) <= self.degree // 2

    def ring_order(self) -> tuple[int, ...]:
        """The clients in ring order (public: derived from the session id)."""
        return self._ring

    def __repr__(self) -> str:
        kind = "complete" if self.complete else f"harary(k={self.degree})"
        return f"SecretSharingGraph(n={self.num_clients}, {kind})"


def neighbourhoods(graph: SecretSharingGraph, clients: Sequence[int]) -> dict[int, tuple[int, ...]]:
    """Neighbourhoods of ``clients`` (helper for servers)."""
    return {c: graph.neighbours(c) for c in clients}
