"""Tests of securefgl.protocols.router with small byte-level parties (a three-stage counting protocol)."""

from __future__ import annotations

import struct
from collections.abc import Sequence

import pytest

from securefgl.errors import ConfigError, MalformedMessageError
from securefgl.protocols.base import SERVER, MessageRecord, Transcript
from securefgl.protocols.router import Outgoing, Router


class CountingClient:
    """Replies ``value + stage number`` to each request; raises on a request it cannot parse."""

    def __init__(self, party_id: int, value: int) -> None:
        self.party_id = party_id
        self.value = value
        self.received: list[bytes] = []

    def handle(self, payload: bytes) -> bytes | None:
        self.received.append(payload)
        if len(payload) != 4:
            raise MalformedMessageError("bad request", party=self.party_id)
        (stage,) = struct.unpack(">I", payload)
        if stage == 2:
            return None  # the last stage has no reply
        return struct.pack(">II", self.party_id, self.value + stage)


class SummingServer:
    stages = ("one", "two", "three")

    def __init__(self, clients: Sequence[int]) -> None:
        self.clients = tuple(clients)
        self.replies: dict[str, list[tuple[int, bytes]]] = {}

    def start(self) -> Outgoing:
        return Outgoing("one", dict.fromkeys(self.clients, struct.pack(">I", 0)))

    def handle(self, stage: str, replies: Sequence[tuple[int, bytes]]) -> Outgoing | None:
        self.replies[stage] = list(replies)
        nxt = {"one": "two", "two": "three"}.get(stage)
        if nxt is None:
            return None
        return Outgoing(nxt, dict.fromkeys(self.clients, struct.pack(">I", self.stages.index(nxt))))


def _run(n: int = 4, **kw: object) -> tuple[Transcript, SummingServer, dict[int, CountingClient]]:
    tr = Transcript(protocol="test", invited=tuple(range(n)))
    server = SummingServer(range(n))
    clients = {c: CountingClient(c, 10 * c) for c in range(n)}
    Router(tr, **kw).run(server, clients)  # type: ignore[arg-type]
    return tr, server, clients


def test_delivers_and_records_every_message() -> None:
    tr, server, clients = _run()
    assert [c for c, _ in server.replies["one"]] == [0, 1, 2, 3]
    assert server.replies["two"][2][1] == struct.pack(">II", 2, 21)
    assert server.replies["three"] == []
    # the server's view is exactly the bytes it received, in order, with sender and phase
    view = tr.view(SERVER)
    assert [(r.phase, r.sender) for r in view] == [("one", c) for c in range(4)] + [
        ("two", c) for c in range(4)
    ]
    assert all(
        r.payload == p for r, (_, p) in zip(view, server.replies["one"] + server.replies["two"], strict=True)
    )
    assert tr.bytes_sent[(0, "one")] == 8 and tr.bytes_received[(SERVER, "one")] == 32
    assert tr.bytes_sent[(SERVER, "three")] == 16 and tr.total_bytes_received(1) == 12
    assert len(tr.view(3)) == 3 and clients[3].received == [r.payload for r in tr.view(3)]
    assert set(tr.phase_seconds) == {"one", "two", "three"}
    assert (2, "two") in tr.party_seconds and (SERVER, "one") in tr.party_seconds


def test_record_views_off_keeps_counts_only() -> None:
    tr, _, _ = _run(record_views=False)
    assert tr.views == {} and tr.total_bytes_received(SERVER) == 64


@pytest.mark.parametrize("stage", ["one", "two", "three"])
def test_dropped_party_is_offline_from_its_stage_on(stage: str) -> None:
    tr, server, clients = _run(dropouts={1: stage})
    first = ("one", "two", "three").index(stage)
    assert len(clients[1].received) == first
    for s in ("one", "two")[first:]:
        assert 1 not in [c for c, _ in server.replies[s]]
    assert tr.dropped == {1: stage}
    assert all(r.sender != 1 for r in tr.view(SERVER) if r.phase in ("one", "two")[first:])


def test_client_error_becomes_an_exclusion() -> None:
    def garble_to_client_2(rec: MessageRecord) -> list[bytes]:
        return [rec.payload + b"!"] if rec.receiver == 2 and rec.phase == "two" else [rec.payload]

    tr, server, clients = _run(interceptor=garble_to_client_2)
    assert "MalformedMessageError" in tr.excluded[2]
    assert 2 not in [c for c, _ in server.replies["two"]] and len(clients[2].received) == 2  # offline after


def test_interceptor_can_drop_duplicate_and_replace() -> None:
    def fault(rec: MessageRecord) -> list[bytes]:
        if rec.sender == 0 and rec.phase == "one":
            return [rec.payload, rec.payload]  # duplicate
        if rec.sender == 1:
            return []  # lost
        if rec.sender == 3 and rec.phase == "two":
            return [b"forged"]
        return [rec.payload]

    tr, server, _ = _run(interceptor=fault)
    assert [c for c, _ in server.replies["one"]] == [0, 0, 2, 3]
    assert (3, b"forged") in server.replies["two"]
    assert 1 not in [r.sender for r in tr.view(SERVER)]
    assert [r.payload for r in tr.view(SERVER) if r.sender == 3 and r.phase == "two"] == [b"forged"]


def test_bad_dropout_plans_are_refused() -> None:
    with pytest.raises(ConfigError, match="unknown dropout stage"):
        _run(dropouts={0: "four"})
    with pytest.raises(ConfigError, match="not invited"):
        _run(dropouts={9: "one"})
