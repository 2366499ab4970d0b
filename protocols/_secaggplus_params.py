"""The public parameters of SecAgg/SecAgg+: the stages, the configuration and the graph choice.

Re-exported by :mod:`securefgl.protocols.secaggplus` (see its docstring for the protocol). The degree
and threshold of a session come from :func:`resolve_graph`: the complete graph (SecAgg, or few clients),
an explicit Harary degree, or the parameter finder of :mod:`securefgl.protocols._harary`.
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass
from typing import Literal

from securefgl.errors import ConfigError
from securefgl.protocols._harary import (
    ADVERSARIES,
    GraphParameters,
    complete_graph_threshold,
    find_graph_parameters,
    security_threshold,
)
from securefgl.protocols._prg import PRG_ALGORITHMS, PrgAlgorithm
from securefgl.protocols._release import DEFAULT_MIN_CONTRIBUTORS, check_min_contributors

__all__ = ["SecAggPlusConfig", "Stage", "resolve_graph"]


class Stage(enum.StrEnum):
    """The stages of SecAgg/SecAgg+, in protocol order (values are the transcript phase names)."""

    ADVERTISE_KEYS = "advertise_keys"
    SHARE_KEYS = "share_keys"
    RESUME = "resume"
    MASKED_INPUT = "masked_input"
    CONSISTENCY_CHECK = "consistency_check"
    UNMASKING = "unmasking"
    DELIVER = "deliver"

    @classmethod
    def ordered(
        cls, *, recipient: bool, consistency: bool = False, resumed: bool = False, optimistic: bool = False
    ) -> tuple[str, ...]:
        """Stage names in order; ``consistency_check`` only with the consistency round, ``deliver``
        only in designated-recipient mode; a resumed use of a session (``resumed``) opens with
        ``resume`` (answered with the seed shares and the masked input) in place of ``advertise_keys``,
        ``share_keys`` and ``masked_input``; an optimistic resumed use (``optimistic``) is ``resume`` alone
        (then ``deliver``): nothing is unmasked."""
        skip = {cls.ADVERTISE_KEYS, cls.SHARE_KEYS, cls.MASKED_INPUT} if resumed else {cls.RESUME}
        if resumed and optimistic:
            skip |= {cls.CONSISTENCY_CHECK, cls.UNMASKING}
        if not consistency:
            skip.add(cls.CONSISTENCY_CHECK)
        if not recipient:
            skip.add(cls.DELIVER)
        return tuple(s.value for s in cls if s not in skip)


# ----------------------------------------------------------------------------------------------------
# configuration
# ----------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SecAggPlusConfig:
    """Validated, immutable configuration of SecAgg/SecAgg+ (public: bound into the session id).

    Args:
        graph: ``"harary"`` (SecAgg+) or ``"complete"`` (SecAgg). (default: ``"harary"``)
        degree: Harary degree :math:`k` (neighbours excluding self, even), or ``None`` to take it from
            the parameter finder. (default: ``None``)
        threshold: :math:`t`: an int, a fraction in (0, 1] of the neighbourhood size :math:`k+1`, or
            ``None`` (finder's value for Harary; a majority, at least above the corrupted clients, for
            the complete graph). (default: ``None``)
        dropout_rate: tolerated fraction of dropouts :math:`\\delta` for the finder. (default: ``0.1``)
        corrupt_rate: fraction :math:`\\gamma` of clients assumed to collude with the server.
            (default: ``0.05``)
        adversary: ``"curious"``, ``"semi-malicious"`` or ``"none"`` (finder's threat model).
            (default: ``"curious"``)
        prg: ``"aes256-ctr"``, ``"aes128-ctr"`` or ``"chacha20"`` (:mod:`~securefgl.protocols._prg`).
            (default: ``"aes256-ctr"``)
        security_bits: :math:`\\sigma` of the finder. (default: ``40``)
        correctness_bits: :math:`\\eta` of the finder. (default: ``20``)
        complete_below: with ``graph="harary"``, use the complete graph when fewer than this many
            clients are invited. Below about 30 clients the finder assumes
            :math:`\\lfloor \\gamma n \\rfloor \\le 1` corrupted clients and returns thresholds of 2-3 in
            neighbourhoods of 3-7, while the complete graph is still cheap. ``0`` always uses the finder.
            (default: ``32``)
        consistency_check: run the consistency round (signed survivor set, Bonawitz et al. 2017 §4)
            before unmasking; ``None``: on exactly when ``adversary="semi-malicious"`` (a server that
            may lie about who dropped). Needs identity keys (see :class:`SecAggPlus`). (default: ``None``)
        insecure_low_threshold: INSECURE: accept a threshold at or below half of the neighbourhood on
            the complete graph, or against a lying server, where a server that tells different clients
            different survivor sets collects both share kinds of a client. (default: ``False``)
        min_contributors: the fewest inputs a released sum may hold (the schema's rule applies too,
            where stricter); checked before anything is unmasked. (default: ``2``)
        session_uses: how many sums one key agreement may serve (:mod:`~securefgl.protocols._secaggplus_resume`).
            ``1``: every sum runs its own key agreement (Bonawitz et al.). Above 1, a session whose sum
            completed with every client alive is resumed for the next sum over the same clients: fresh
            per-use mask keys and self-mask seeds, no new key pairs, exchanges or mask-key shares. Any
            dropout ends it. (default: ``1``)
        optimistic_uses: resumed uses (not use 0, the key agreement) are *optimistic*: every client masks its
            input with its session neighbours only, with no self mask and no seed shares, and the server
            releases the sum of all members at once, one round trip a use; a missing or rejected input aborts
            the use (nothing is revealed: no share of anything is ever sent in such a use). Needs
            ``session_uses`` above 1 (:mod:`~securefgl.protocols._secaggplus_resume`). (default: ``False``)
    """

    graph: Literal["harary", "complete"] = "harary"
    degree: int | None = None
    threshold: int | float | None = None
    dropout_rate: float = 0.1
    corrupt_rate: float = 0.05
    adversary: Literal["curious", "semi-malicious", "none"] = "curious"
    prg: PrgAlgorithm = "aes256-ctr"
    security_bits: float = 40.0
    correctness_bits: float = 20.0
    complete_below: int = 32
    consistency_check: bool | None = None
    insecure_low_threshold: bool = False
    min_contributors: int = DEFAULT_MIN_CONTRIBUTORS
    session_uses: int = 1
    optimistic_uses: bool = False

    @property
    def consistency(self) -> bool:
        """Whether the consistency round runs (``consistency_check``, or its default)."""
        if self.consistency_check is None:
            return self.adversary == "semi-malicious"
        return self.consistency_check

    def __post_init__(self) -> None:
        if self.graph not in ("harary", "complete"):
            raise ConfigError(f"graph must be 'harary' or 'complete', got {self.graph!r}")
        if self.adversary not in ADVERSARIES:
            raise ConfigError(f"adversary must be one of {list(ADVERSARIES)}, got {self.adversary!r}")
        if self.prg not in PRG_ALGORITHMS:
            raise ConfigError(f"prg must be one of {list(PRG_ALGORITHMS)}, got {self.prg!r}")
        for name in ("dropout_rate", "corrupt_rate"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0.0 <= v < 1.0:
                raise ConfigError(f"{name} must be in [0, 1), got {v!r}")
        if self.degree is not None:
            if self.graph == "complete":
                raise ConfigError("degree is only meaningful with graph='harary'")
            if (
                isinstance(self.degree, bool)
                or not isinstance(self.degree, int)
                or self.degree < 2
                or self.degree % 2
            ):
                raise ConfigError(
                    f"degree must be an even integer >= 2 (neighbours excluding self), got {self.degree!r}"
                )
        t = self.threshold
        if t is not None:
            if isinstance(t, bool) or not isinstance(t, (int, float)):
                raise ConfigError(f"threshold must be an int, a fraction in (0, 1] or None, got {t!r}")
            if isinstance(t, float) and not 0.0 < t <= 1.0:
                raise ConfigError(f"a fractional threshold must be in (0, 1], got {t!r}")
            if isinstance(t, int) and t < 1:
                raise ConfigError(f"threshold must be >= 1, got {t!r}")
        if (
            isinstance(self.complete_below, bool)
            or not isinstance(self.complete_below, int)
            or self.complete_below < 0
        ):
            raise ConfigError(f"complete_below must be a non-negative integer, got {self.complete_below!r}")
        for name in ("security_bits", "correctness_bits"):
            v = getattr(self, name)
            if not isinstance(v, (int, float)) or v <= 0:
                raise ConfigError(f"{name} must be positive, got {v!r}")
        if self.consistency_check not in (None, True, False):
            raise ConfigError(
                f"consistency_check must be None, True or False, got {self.consistency_check!r}"
            )
        check_min_contributors(self.min_contributors)
        if (
            isinstance(self.session_uses, bool)
            or not isinstance(self.session_uses, int)
            or self.session_uses < 1
        ):
            raise ConfigError(
                f"session_uses must be an integer >= 1 (1: a key agreement per sum), got {self.session_uses!r}"
            )
        if not isinstance(self.optimistic_uses, bool):
            raise ConfigError(f"optimistic_uses must be a bool, got {self.optimistic_uses!r}")
        if self.optimistic_uses and self.session_uses < 2:
            raise ConfigError(
                f"optimistic_uses applies to resumed uses of a session: it needs session_uses >= 2, got "
                f"session_uses={self.session_uses}"
            )
        if not isinstance(self.insecure_low_threshold, bool):
            raise ConfigError(f"insecure_low_threshold must be a bool, got {self.insecure_low_threshold!r}")


def resolve_graph(config: SecAggPlusConfig, num_clients: int) -> GraphParameters:
    """The degree and threshold for ``num_clients`` invited clients under ``config`` (deterministic).

    Raises:
        ConfigError: a threshold outside ``[1, k+1]``, or below 2 with more than one client.
    """
    n = int(num_clients)
    if n < 1:
        raise ConfigError("need at least one client")
    if config.graph == "complete" or n < config.complete_below:
        base = GraphParameters(
            num_clients=n,
            degree=n - 1,
            threshold=complete_graph_threshold(
                n, corrupt_rate=config.corrupt_rate, adversary=config.adversary
            ),
            complete=True,
        )
    elif config.degree is not None:
        k = config.degree
        if k >= n - 1:
            t_c = complete_graph_threshold(n, corrupt_rate=config.corrupt_rate, adversary=config.adversary)
            base = GraphParameters(n, n - 1, t_c, True)
        else:
            t_sec = security_threshold(
                n,
                k,
                corrupt_rate=config.corrupt_rate,
                adversary=config.adversary,
                security_bits=config.security_bits,
            )
            if t_sec > k + 1:
                raise ConfigError(
                    f"degree {k} cannot be secure with n={n}, corrupt_rate={config.corrupt_rate} and "
                    f"adversary={config.adversary!r} (needs a threshold of {t_sec} > {k + 1} holders); "
                    "raise the degree or leave it to the parameter finder"
                )
            base = GraphParameters(n, k, max(2, k // 2 + 1, t_sec), False)
    else:
        base = find_graph_parameters(
            n,
            dropout_rate=config.dropout_rate,
            corrupt_rate=config.corrupt_rate,
            adversary=config.adversary,
            security_bits=config.security_bits,
            correctness_bits=config.correctness_bits,
        )
    size = base.neighbourhood_size
    t = config.threshold
    if t is None:
        threshold = base.threshold
    elif isinstance(t, float):
        threshold = max(1, math.ceil(t * size))
    else:
        threshold = int(t)
    if not 1 <= threshold <= size:
        raise ConfigError(
            f"threshold {threshold} must be in [1, {size}] (neighbourhood size incl. self) for n={n}"
        )
    if threshold < 2 and n > 1:
        raise ConfigError(
            f"threshold {threshold} would put every secret in the clear in each share; use >= 2 with {n} clients"
        )
    _check_split_safe(config, n, size, threshold, base.complete)
    return GraphParameters(n, base.degree, threshold, base.complete)


def _check_split_safe(config: SecAggPlusConfig, n: int, size: int, threshold: int, complete: bool) -> None:
    """Refuse a threshold at or below half of the neighbourhood where a lying server could collect
    :math:`t` self-mask-seed shares from one half and :math:`t` mask-key shares from the other."""
    lying = config.adversary == "semi-malicious"
    if config.insecure_low_threshold or n < 3 or 2 * threshold > size or not (complete or lying):
        return
    raise ConfigError(
        f"threshold {threshold} is at or below half of the {size} share holders (n={n}): a server that "
        "tells half of them a client survived and the other half it dropped collects both share kinds "
        f"and unmasks it; use a threshold >= {size // 2 + 1} or pass insecure_low_threshold=True"
    )
