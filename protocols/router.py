"""The in-process transport of the interactive protocols: delivers bytes, records them, drops parties.

Parties never hold references to each other. A protocol is a *server endpoint* that emits one batch of
requests per stage and consumes the replies, and *client endpoints* that turn one request into at most
one reply; both consume and produce ``bytes`` only, so the same party objects run unchanged over a
network transport (a Flower ``Message`` or a socket carries the bytes instead of this router)::

    requests = server.start()                         # Outgoing(stage, {client: bytes})
    while requests is not None:
        replies = [(c, client_c.handle(bytes)) ...]   # delivered through the router
        requests = server.handle(stage, replies)      # next stage, or None when finished

The router is the network of a simulation. It

- records every delivered message in the :class:`~securefgl.protocols.base.Transcript` (bytes sent and
  received per party and stage, and, unless ``record_views=False``, the exact payload in the receiver's
  view: ``transcript.views[SERVER]`` is byte for byte what the server received);
- times every party's work per stage;
- drops clients as a :class:`~securefgl.protocols.base.DropoutPlan` says: a client dropped at stage ``s``
  neither receives nor sends anything from stage ``s`` on;
- turns a client that raises a :class:`~securefgl.errors.ProtocolError` into an aborted client (recorded
  in ``transcript.excluded`` and offline from then on), the in-process equivalent of a crashed peer;
- optionally passes every message through an ``interceptor`` that may drop, replace, garble or duplicate
  it: the hook for network faults and misbehaving parties in tests.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol as TypingProtocol

from securefgl.errors import ConfigError, InvalidMessage, ProtocolError
from securefgl.protocols.base import SERVER, MessageRecord, Transcript

__all__ = ["ClientEndpoint", "Interceptor", "Outgoing", "Router", "ServerEndpoint"]

#: ``interceptor(record) -> payloads to deliver instead`` (``[]`` drops the message, two payloads
#: duplicate it). ``record.payload`` is what the sender sent.
Interceptor = Callable[[MessageRecord], Sequence[bytes]]


class ClientEndpoint(TypingProtocol):
    """A client party: one request in, at most one reply out, bytes only."""

    party_id: int

    def handle(self, payload: bytes) -> bytes | None:
        """Process one request from the server and return the reply (``None``: nothing to send)."""
        ...


@dataclass(frozen=True)
class Outgoing:
    """One stage's requests from the server: ``{client: payload}``."""

    stage: str
    messages: Mapping[int, bytes]


class ServerEndpoint(TypingProtocol):
    """A server party: emits the requests of each stage and consumes the replies."""

    stages: tuple[str, ...]

    def start(self) -> Outgoing:
        """The requests of the first stage."""
        ...

    def handle(self, stage: str, replies: Sequence[tuple[int, bytes]]) -> Outgoing | None:
        """Consume the replies of ``stage`` (in arrival order, duplicates included); return the next
        stage's requests, or ``None`` when the protocol has finished."""
        ...


class Router:
    """Runs one server endpoint and its client endpoints in process.

    Args:
        transcript: where deliveries, times, dropouts and client aborts are recorded.
        dropouts: ``{client: stage}``: the client is offline from that stage on (validated against the
            server's stages when :meth:`run` starts).
        record_views: keep every payload in the receivers' views (turn off in benchmarks to save memory;
            byte counts are always kept).
        interceptor: optional fault-injection hook (see :data:`Interceptor`).
    """

    def __init__(
        self,
        transcript: Transcript,
        *,
        dropouts: Mapping[int, str] | None = None,
        record_views: bool = True,
        interceptor: Interceptor | None = None,
    ) -> None:
        self.transcript = transcript
        self.dropouts = dict(dropouts or {})
        self.record_views = bool(record_views)
        self.interceptor = interceptor
        self.offline: set[int] = set()

    def _deliver(self, stage: str, sender: str | int, receiver: str | int, payload: bytes) -> list[bytes]:
        payloads: Sequence[bytes] = [payload]
        if self.interceptor is not None:
            payloads = list(self.interceptor(MessageRecord(stage, sender, receiver, payload)))
        for p in payloads:
            self.transcript.record(
                MessageRecord(stage, sender, receiver, bytes(p)), keep_payload=self.record_views
            )
        return [bytes(p) for p in payloads]

    def _go_offline(self, stage: str, stage_index: dict[str, int]) -> None:
        for client, at in self.dropouts.items():
            if client not in self.offline and stage_index[at] <= stage_index[stage]:
                self.offline.add(client)
                self.transcript.dropped.setdefault(client, at)

    def run(self, server: ServerEndpoint, clients: Mapping[int, ClientEndpoint]) -> None:
        """Drive the protocol to completion (server errors such as ThresholdError propagate)."""
        stages = tuple(server.stages)
        stage_index = {s: i for i, s in enumerate(stages)}
        bad = {c: s for c, s in self.dropouts.items() if s not in stage_index}
        if bad:
            raise ConfigError(f"unknown dropout stage(s) {bad}; valid: {list(stages)}")
        unknown = sorted(set(self.dropouts) - set(clients))
        if unknown:
            raise ConfigError(f"dropout plan names clients {unknown} that are not invited")
        t0 = time.perf_counter()
        outgoing: Outgoing | None = server.start()
        self.transcript.add_time(stages[0], time.perf_counter() - t0, SERVER)
        while outgoing is not None:
            stage = outgoing.stage
            if stage not in stage_index:
                raise ConfigError(f"server emitted unknown stage {stage!r}; valid: {list(stages)}")
            self._go_offline(stage, stage_index)
            replies: list[tuple[int, bytes]] = []
            for client, payload in outgoing.messages.items():
                if client in self.offline or client not in clients:
                    continue
                for request in self._deliver(stage, SERVER, client, payload):
                    if client in self.offline:
                        break
                    t = time.perf_counter()
                    try:
                        reply = clients[client].handle(request)
                    except (ProtocolError, InvalidMessage) as exc:
                        self.offline.add(client)
                        self.transcript.excluded.setdefault(client, f"{type(exc).__name__}: {exc}")
                        reply = None
                    finally:
                        self.transcript.add_time(stage, time.perf_counter() - t, client)
                    if reply is not None:
                        replies.extend((client, r) for r in self._deliver(stage, client, SERVER, reply))
            t = time.perf_counter()
            outgoing = server.handle(stage, replies)
            self.transcript.add_time(stage, time.perf_counter() - t, SERVER)
