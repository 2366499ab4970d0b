"""The contract every protocol implements: contributions in, ``Sums`` and a ``Transcript`` out.

An algorithm's client step produces a *contribution* (a dict of named tensors declared by a
:class:`~securefgl.protocols.encoding.SumSchema`); a protocol computes the sum of the contributions of the
participating clients and returns it as :class:`Sums`, together with a :class:`Transcript` of what every
party saw. The server step of an algorithm receives the ``Sums`` only.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
import torch

from securefgl.errors import ConfigError
from securefgl.protocols.sums import Sums

if TYPE_CHECKING:
    from securefgl.protocols.encoding import SumSchema

__all__ = [
    "Contribution",
    "DropoutPlan",
    "MessageRecord",
    "Protocol",
    "Sums",
    "Transcript",
    "SERVER",
]

#: Party name of the server in transcripts and routers. Clients are named by their integer id.
SERVER = "server"

Contribution = Mapping[str, "torch.Tensor | np.ndarray"]


@dataclass(frozen=True)
class MessageRecord:
    """One message as a party received it: the exact bytes, and where it came from."""

    phase: str
    sender: str | int
    receiver: str | int
    payload: bytes

    @property
    def size(self) -> int:
        return len(self.payload)


@dataclass
class Transcript:
    """What happened in one aggregation: every party's view, bytes, times, dropouts and clipping.

    ``views[party]`` holds the messages that party *received*, byte for byte, when ``record_views`` was
    on (the default). ``views[SERVER]`` is the honest-but-curious server's whole view: the attack harness
    reads it and nothing else.
    """

    protocol: str
    round_index: int = 0
    session_id: bytes = b""
    invited: tuple[int, ...] = ()
    survivors: tuple[int, ...] = ()
    dropped: dict[int, str] = field(default_factory=dict)
    excluded: dict[int, str] = field(default_factory=dict)
    recipient: str | int = SERVER
    views: dict[str | int, list[MessageRecord]] = field(default_factory=dict)
    bytes_sent: dict[tuple[str | int, str], int] = field(default_factory=dict)
    bytes_received: dict[tuple[str | int, str], int] = field(default_factory=dict)
    phase_seconds: dict[str, float] = field(default_factory=dict)
    party_seconds: dict[tuple[str | int, str], float] = field(default_factory=dict)
    clip_counts: dict[str, int] = field(default_factory=dict)
    withheld: dict[str, str] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)

    def record(self, message: MessageRecord, *, keep_payload: bool = True) -> None:
        """Count a delivered message and, if ``keep_payload``, append it to the receiver's view."""
        self.bytes_sent[(message.sender, message.phase)] = (
            self.bytes_sent.get((message.sender, message.phase), 0) + message.size
        )
        self.bytes_received[(message.receiver, message.phase)] = (
            self.bytes_received.get((message.receiver, message.phase), 0) + message.size
        )
        if keep_payload:
            self.views.setdefault(message.receiver, []).append(message)

    def add_time(self, phase: str, seconds: float, party: str | int | None = None) -> None:
        """Add wall time to a phase (and to one party's share of it)."""
        self.phase_seconds[phase] = self.phase_seconds.get(phase, 0.0) + seconds
        if party is not None:
            self.party_seconds[(party, phase)] = self.party_seconds.get((party, phase), 0.0) + seconds

    def total_bytes_sent(self, party: str | int) -> int:
        return sum(v for (p, _), v in self.bytes_sent.items() if p == party)

    def total_bytes_received(self, party: str | int) -> int:
        return sum(v for (p, _), v in self.bytes_received.items() if p == party)

    @property
    def total_seconds(self) -> float:
        return float(sum(self.phase_seconds.values()))

    def view(self, party: str | int) -> list[MessageRecord]:
        """The messages ``party`` received (empty if views were not recorded)."""
        return list(self.views.get(party, []))

    def summary(self) -> dict[str, Any]:
        """A JSON-friendly summary (no payloads)."""
        return {
            "protocol": self.protocol,
            "round": self.round_index,
            "session_id": self.session_id.hex(),
            "invited": list(self.invited),
            "survivors": list(self.survivors),
            "dropped": {str(k): v for k, v in self.dropped.items()},
            "excluded": {str(k): v for k, v in self.excluded.items()},
            "bytes_up": {str(p): self.total_bytes_sent(p) for p in self.invited},
            "bytes_down": {str(p): self.total_bytes_received(p) for p in self.invited},
            "server_bytes_received": self.total_bytes_received(SERVER),
            "phase_seconds": dict(self.phase_seconds),
            "clip_counts": dict(self.clip_counts),
            "withheld": dict(self.withheld),
            **{k: v for k, v in self.extra.items() if isinstance(v, (int, float, str, bool, list, dict))},
        }


@dataclass(frozen=True)
class DropoutPlan:
    """Which clients drop out, and before which phase: ``{client: phase_name}``.

    A client listed with phase ``p`` sends nothing from phase ``p`` on (it may have sent earlier
    messages). Phase names are the protocol's ``Stage`` values; ``"any"`` picks one uniformly per client
    when the plan is resolved by :meth:`resolve`.
    """

    at: Mapping[int, str] = field(default_factory=dict)

    @staticmethod
    def none() -> DropoutPlan:
        return DropoutPlan({})

    @staticmethod
    def random(
        clients: Sequence[int], fraction: float, rng: np.random.Generator, phase: str = "any"
    ) -> DropoutPlan:
        """Drop ``round(fraction * len(clients))`` clients chosen with ``rng``, at ``phase``."""
        if not 0.0 <= fraction < 1.0:
            raise ConfigError(f"dropout fraction must be in [0, 1), got {fraction!r}")
        k = int(round(fraction * len(clients)))
        chosen: np.ndarray | list[int] = (
            rng.choice(np.asarray(list(clients)), size=k, replace=False) if k else []
        )
        return DropoutPlan({int(c): phase for c in chosen})

    def resolve(self, phases: Sequence[str], rng: np.random.Generator) -> dict[int, str]:
        """Map every ``"any"`` entry to a concrete phase drawn with ``rng``; validate the others."""
        out: dict[int, str] = {}
        for client, phase in sorted(self.at.items()):
            if phase == "any":
                phase = str(phases[int(rng.integers(len(phases)))])
            elif phase not in phases:
                raise ConfigError(
                    f"unknown dropout phase {phase!r} for client {client}; valid: {list(phases)}"
                )
            out[int(client)] = phase
        return out


class Protocol(ABC):
    """A way of computing the sum of client contributions.

    Subclasses are registered by ``name`` in :mod:`securefgl.protocols.registry`. ``aggregate`` must
    return the same sums (up to ``Sums.max_abs_error``) whatever the protocol, and must never raise for a
    client that drops out or misbehaves: that client is recorded in the transcript and left out. It
    raises :class:`~securefgl.errors.ThresholdError` when too few clients survive, revealing nothing.
    """

    name: ClassVar[str]
    #: Whether the server sees individual contributions (only the plaintext baseline).
    reveals_individual_inputs: ClassVar[bool] = False

    @abstractmethod
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
        """Sum ``contributions`` (client id -> named tensors) as declared by ``schema``.

        Args:
            schema: the blocks, bounds and release rules of this sum.
            contributions: every invited client's contribution.
            dropouts: clients that drop out, and before which phase.
            round_index: bound into the session id.
            recipient: if given, the sum is revealed to this client only (designated-recipient mode);
                the server only relays.
            context: the public round context each client was shown (e.g. a hash of the broadcast
                model). One value for everybody, or one per client; clients that were shown different
                contexts cannot complete a session together.
        """

    def prepare(
        self,
        schema: SumSchema,
        clients: Sequence[int],
        *,
        round_index: int = 0,
        recipient: int | None = None,
        context: bytes | Mapping[int, bytes] = b"",
    ) -> bool:
        """Announce the next :meth:`aggregate` call's public parameters before the contributions exist (a
        simulation's engine calls it before its clients train), so the protocol may start work that depends
        on them only. A hint: the sum is the same whether it is called or not, and a call that does not match
        the next sum changes nothing but wasted work. Returns whether work started (here: never)."""
        return False

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class Stopwatch:
    """Tiny helper: ``with Stopwatch() as sw: ...; sw.seconds``."""

    def __enter__(self) -> Stopwatch:
        self._t0 = time.perf_counter()
        self.seconds = 0.0
        return self

    def __exit__(self, *exc: object) -> None:
        self.seconds = time.perf_counter() - self._t0
