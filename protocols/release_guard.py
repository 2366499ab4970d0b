r"""A release rule against differencing: refuse sums of one statistic over nearly the same participants.

Secure aggregation reveals the sum over the participants and nothing else, but *two* sums of the same
statistic over participant sets :math:`A` and :math:`B` reveal the sum over the symmetric difference:
with :math:`B = A \setminus \{k\}`, :math:`S(A) - S(B) = x_k`, client :math:`k`'s input in the clear.
This happens without any deviation from the protocol when a one-shot statistic (O-pFGL's class statistics,
FedStruct's setup sums) is aggregated again after a dropout, and it is the simplest form of the gradient
disaggregation of Lam et al. (ICML 2021, https://arxiv.org/abs/2106.06089). The minimum-contributors rule
does not help: both sums are large.

:class:`ReleaseGuard` wraps any protocol (as :class:`~securefgl.protocols.dp.DistributedDP` does) and keeps,
per *statistic*, the participant sets it released. A statistic is identified by what makes two sums
comparable: the schema fingerprint, the round context each client was shown (the broadcast hash the engine
binds into sessions) and the recipient; the round index is left out on purpose, so that a retry under a new
round index is still the same statistic. Two rules:

* ``mode="difference"`` (default): refuse a release over :math:`S` if an earlier release of the same statistic
  over :math:`P` has :math:`0 < |S \triangle P| < m` (``min_difference``). Any difference of two released
  sums then covers at least :math:`m` clients.
* ``mode="fixed"``: the first release fixes the participant set of the statistic for the session; every later
  release must have exactly that set (a retry that lost a client is refused; the statistic is all or
  nothing).

The check runs twice: on the invited set before anything is sent (clients can verify it: the invited list is
part of every session's parameters) and on the surviving set the protocol reports before the sum is
returned; a refused sum raises :class:`~securefgl.errors.ReleaseRefusedError` and nothing is returned.

Security:
    In this in-process simulation the second check runs after the inner protocol has finished, so the
    refused sum is discarded by the wrapper. A deployment must enforce the rule where the survivor set is
    fixed, before unmasking: SecAgg clients refuse the unmask request (as they refuse alive/dead overlaps),
    and a CKKS decryptor refuses the decryption. Against an honest-but-curious server, the wrapper's
    refusal is what the honest protocol does. The guard's state is per protocol object (per run session);
    statistics are matched only within it. Not protected: a statistic that changes between releases (e.g.
    FedAvg rounds on different models: a different context, so a different statistic); use DP for those.

Args:
    base: The protocol to wrap.
    min_difference: :math:`m`, the fewest clients two released sums of one statistic may differ by.
        (default: ``2``)
    mode: ``"difference"`` or ``"fixed"``. (default: ``"difference"``)
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import ClassVar, Literal

from securefgl.errors import ConfigError, ReleaseRefusedError
from securefgl.protocols.base import Contribution, DropoutPlan, Protocol, Sums, Transcript
from securefgl.protocols.encoding import SumSchema

__all__ = ["ReleaseGuard", "statistic_key"]


def _context_digest(context: bytes | Mapping[int, bytes]) -> bytes:
    h = hashlib.sha256(b"securefgl/release-guard/context/v1")
    if isinstance(context, (bytes, bytearray, memoryview)):
        h.update(b"\x00" + hashlib.sha256(bytes(context)).digest())
    elif isinstance(context, Mapping):
        h.update(b"\x01")
        for c in sorted(context):
            h.update(int(c).to_bytes(8, "big") + hashlib.sha256(bytes(context[c])).digest())
    else:
        raise ConfigError(
            f"context must be bytes or a mapping of client -> bytes, got {type(context).__name__}"
        )
    return h.digest()


def statistic_key(schema: SumSchema, context: bytes | Mapping[int, bytes], recipient: int | None) -> bytes:
    """What identifies one statistic: the schema fingerprint, the round context and the recipient."""
    h = hashlib.sha256(b"securefgl/release-guard/statistic/v1")
    h.update(schema.fingerprint())
    h.update(_context_digest(context))
    h.update(b"server" if recipient is None else int(recipient).to_bytes(8, "big"))
    return h.digest()


class ReleaseGuard(Protocol):
    """Wrap ``base`` so that no two released sums of one statistic differ by fewer than ``m`` clients.

    See the module docstring for the rule, its scope and where a deployment enforces it.

    .. math::
        \\text{release } S(A) \\text{ only if } \\forall P \\in \\mathcal H_{\\text{stat}}:\\;
        |A \\,\\triangle\\, P| = 0 \\;\\lor\\; |A \\,\\triangle\\, P| \\ge m
        \\quad(\\text{``fixed'': } A = P_0).

    Args:
        base: The protocol to wrap.
        min_difference: :math:`m`. (default: ``2``)
        mode: ``"difference"`` or ``"fixed"``. (default: ``"difference"``)

    Raises:
        ConfigError: ``base`` is not a protocol, ``min_difference < 2``, or an unknown mode.
    """

    name: ClassVar[str] = "release-guard"

    def __init__(
        self, base: Protocol, *, min_difference: int = 2, mode: Literal["difference", "fixed"] = "difference"
    ) -> None:
        if not isinstance(base, Protocol):
            raise ConfigError(f"ReleaseGuard wraps a Protocol instance, got {type(base).__name__}")
        if isinstance(min_difference, bool) or not isinstance(min_difference, int) or min_difference < 2:
            raise ConfigError(
                f"min_difference must be an integer >= 2 (1 would allow isolating a client), got {min_difference!r}"
            )
        if mode not in ("difference", "fixed"):
            raise ConfigError(f"mode must be 'difference' or 'fixed', got {mode!r}")
        self.base = base
        self.min_difference = int(min_difference)
        self.mode = mode
        self._history: dict[bytes, list[frozenset[int]]] = {}

    @property
    def reveals_individual_inputs(self) -> bool:  # type: ignore[override]
        return bool(getattr(self.base, "reveals_individual_inputs", False))

    @property
    def label(self) -> str:
        return f"{getattr(self.base, 'label', getattr(self.base, 'name', type(self.base).__name__))}+guard"

    def released_sets(
        self, schema: SumSchema, context: bytes | Mapping[int, bytes] = b"", recipient: int | None = None
    ) -> list[frozenset[int]]:
        """The participant sets released so far for one statistic."""
        return list(self._history.get(statistic_key(schema, context, recipient), []))

    def _violation(self, key: bytes, members: frozenset[int]) -> str | None:
        past = self._history.get(key, [])
        if not past:
            return None
        if self.mode == "fixed":
            fixed = past[0]
            if members != fixed:
                missing = sorted(fixed - members)
                extra = sorted(members - fixed)
                return (
                    f"the statistic's participant set is fixed for this session to {len(fixed)} clients; this sum "
                    f"lacks {missing[:10]} and adds {extra[:10]}"
                )
            return None
        for p in past:
            d = len(members ^ p)
            if 0 < d < self.min_difference:
                return (
                    f"an earlier sum of the same statistic was released over a participant set that differs from "
                    f"this one by {d} client(s) ({sorted(members ^ p)[:10]}), fewer than min_difference="
                    f"{self.min_difference}: their difference would reveal those clients' inputs"
                )
        return None

    def aggregate(
        self,
        schema: SumSchema,
        contributions: Mapping[int, Contribution],
        *,
        dropouts: DropoutPlan | None = None,
        round_index: int = 0,
        recipient: int | None = None,
        context: bytes | Mapping[int, bytes] = b"",
    ) -> tuple[Sums, Transcript]:
        """Aggregate with ``base`` unless the release rule refuses it.

        Raises:
            ReleaseRefusedError: the invited or the surviving set violates the rule (nothing is returned).
            Whatever ``base`` raises.
        """
        if not isinstance(schema, SumSchema):
            raise ConfigError(f"schema must be a SumSchema, got {type(schema).__name__}")
        key = statistic_key(schema, context, recipient)
        invited = frozenset(int(c) for c in contributions)
        why = self._violation(key, invited)
        if why is not None:
            raise ReleaseRefusedError(f"invited set refused: {why}", phase="invite")
        sums, transcript = self.base.aggregate(
            schema,
            contributions,
            dropouts=dropouts,
            round_index=round_index,
            recipient=recipient,
            context=context,
        )
        survivors = frozenset(int(c) for c in transcript.survivors) if transcript.survivors else invited
        why = self._violation(key, survivors)
        transcript.extra["release_guard"] = {
            "mode": self.mode,
            "min_difference": self.min_difference,
            "refused": why is not None,
        }
        if why is not None:
            err = ReleaseRefusedError(f"release refused: {why}", phase="release")
            err.transcript = transcript  # type: ignore[attr-defined]
            raise err
        self._history.setdefault(key, []).append(survivors)
        return sums, transcript

    def __repr__(self) -> str:
        return f"ReleaseGuard({self.base!r}, min_difference={self.min_difference}, mode={self.mode!r})"
