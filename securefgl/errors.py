"""The typed error hierarchy of securefgl.

Every failure a user can cause or an adversary can provoke has its own class, so callers can tell a
configuration mistake from a protocol abort from an attack. ``InvalidMessage`` deliberately carries no
detail: every authenticity failure looks the same to the sender of the bad message.
"""

from __future__ import annotations

__all__ = [
    "SecureFGLError",
    "ConfigError",
    "UnsupportedCombinationError",
    "DatasetNotFoundError",
    "PartitionError",
    "TrainingError",
    "NonFiniteError",
    "ProtocolError",
    "EncodingError",
    "OverflowRiskError",
    "MalformedMessageError",
    "StageOrderError",
    "ThresholdError",
    "ReleaseRefusedError",
    "WithheldBlockError",
    "InconsistentViewError",
    "InvalidMessage",
    "PrivacyBudgetError",
    "AttackNotApplicableError",
    "RequestRefusedError",
    "NothingToAttackError",
    "SuspiciousModelError",
]


class SecureFGLError(Exception):
    """Root of every error securefgl raises on purpose."""

    exit_code: int = 1


class ConfigError(SecureFGLError, ValueError):
    """A configuration value, key or name is invalid; the message names it and the valid choices."""

    exit_code = 2


class UnsupportedCombinationError(ConfigError):
    """An algorithm x protocol x model x dataset combination that is not supported."""

    exit_code = 3


class DatasetNotFoundError(SecureFGLError, FileNotFoundError):
    """A dataset's files are missing under the data root (offline) and cannot be downloaded."""

    exit_code = 4


class PartitionError(ConfigError):
    """A partition cannot be built with the requested parameters."""


class TrainingError(SecureFGLError, RuntimeError):
    """Training failed part-way; partial results stay on disk."""

    exit_code = 5


class NonFiniteError(TrainingError):
    """A loss or an upload became NaN/Inf; the message names the client and the round."""


class ProtocolError(SecureFGLError):
    """A secure-aggregation protocol could not complete, or a party misbehaved."""

    exit_code = 6

    def __init__(self, message: str, *, party: str | int | None = None, phase: str | None = None) -> None:
        self.party = party
        self.phase = phase
        where = []
        if party is not None:
            where.append(f"party {party}")
        if phase is not None:
            where.append(f"phase {phase}")
        prefix = f"[{', '.join(where)}] " if where else ""
        super().__init__(prefix + message)


class EncodingError(ProtocolError, ValueError):
    """A contribution does not fit its schema: wrong names, shapes, dtypes, NaN/Inf or out of bound."""


class OverflowRiskError(EncodingError):
    """The schema's bounds times the number of clients could wrap around the ring."""


class MalformedMessageError(ProtocolError):
    """A message is truncated, garbled, of the wrong version or of the wrong type."""


class StageOrderError(ProtocolError):
    """A party received a request that does not belong to its current stage (replay, reuse, skip)."""


class ThresholdError(ProtocolError):
    """Too few surviving clients: the protocol aborts and reveals nothing."""


class ReleaseRefusedError(ProtocolError):
    """A release rule (minimum contributors) refused to reveal a sum."""


class InconsistentViewError(ProtocolError):
    """Clients were shown different session parameters (e.g. different models or configurations)."""


class WithheldBlockError(SecureFGLError, KeyError):
    """A block of a Sums object was withheld by a release rule and has no value."""


class InvalidMessage(SecureFGLError):
    """A peer message failed authentication. Deliberately carries no detail."""

    exit_code = 6

    def __init__(self) -> None:
        super().__init__("invalid message")


class PrivacyBudgetError(ConfigError):
    """Differential-privacy parameters out of range, or a budget that cannot be met."""


class AttackNotApplicableError(ConfigError):
    """An attack does not apply to the chosen algorithm, protocol or view."""


class RequestRefusedError(ProtocolError):
    """An honest party refused a request that would reveal more than the protocol allows.

    Example: a server asking a SecAgg client for both the self-mask share and the mask-key share of the
    same peer, listing a peer as both alive and dead, or naming peers that are not its neighbours.
    """


class NothingToAttackError(AttackNotApplicableError):
    """The adversary's view holds nothing an attack can use (e.g. only ciphertexts it cannot open).

    Raised before the attack runs; reports show such a cell as "nothing to attack", never as a zero score.
    """


class SuspiciousModelError(RequestRefusedError):
    """A client refused the broadcast model: it breaks the update rule or fails the first-layer test."""
