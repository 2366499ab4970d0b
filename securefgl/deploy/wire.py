"""The frames a deployment carries in Flower messages: requests from the server, replies from a client.

A frame is a dict of tensors, numbers, strings and bytes serialised with ``torch.save`` and read back with
``torch.load(weights_only=True)`` (no pickled code crosses the wire). Every request names the run (a random
token drawn by the ServerApp for this run) and a sequence number; a client refuses a request of another run or
one it has already answered, and the server refuses a reply whose run, sequence number or client does not match
the request it sent: a message replayed from an earlier run is refused on both sides
(:class:`~securefgl.errors.MalformedMessageError`).
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from typing import Any

import torch

from securefgl.errors import MalformedMessageError

__all__ = ["KINDS", "STEP_PARTS", "VERSION", "Reply", "Request", "pack", "unpack"]

#: Frame format version.
VERSION = 2
#: The request kinds a client half answers.
KINDS = ("hello", "setup", "step", "finish")
#: What a ``step`` request may ask before its protocol stages, in the order given.
STEP_PARTS = ("eval", "train", "local")


def pack(frame: dict[str, Any]) -> bytes:
    """Serialise a frame."""
    buf = io.BytesIO()
    torch.save(frame, buf)
    return buf.getvalue()


def unpack(blob: bytes) -> dict[str, Any]:
    """Read a frame; raise :class:`MalformedMessageError` on anything but a versioned dict."""
    try:
        frame = torch.load(io.BytesIO(bytes(blob)), weights_only=True, map_location="cpu")
    except Exception as exc:
        raise MalformedMessageError(f"undecodable frame ({type(exc).__name__})") from None
    if not isinstance(frame, dict) or frame.get("v") != VERSION:
        raise MalformedMessageError(f"not a securefgl deployment frame of version {VERSION}")
    return frame


@dataclass(frozen=True)
class Request:
    """A request from the server: ``kind`` (one of :data:`KINDS`) and its body, bound to a run and a number."""

    run: str
    seq: int
    kind: str
    body: dict[str, Any]

    def to_bytes(self) -> bytes:
        return pack({"v": VERSION, "run": self.run, "seq": self.seq, "kind": self.kind, "body": self.body})

    @staticmethod
    def from_bytes(blob: bytes) -> Request:
        f = unpack(blob)
        if f.get("kind") not in KINDS or not isinstance(f.get("body"), dict):
            raise MalformedMessageError(f"unknown request kind {f.get('kind')!r}; valid: {', '.join(KINDS)}")
        return Request(str(f["run"]), int(f["seq"]), str(f["kind"]), f["body"])


@dataclass(frozen=True)
class Reply:
    """A client's reply to request ``seq`` of run ``run``; ``error`` set when the client refused or failed."""

    run: str
    seq: int
    client: int
    body: dict[str, Any]
    error: str | None = None

    def to_bytes(self) -> bytes:
        return pack(
            {
                "v": VERSION,
                "run": self.run,
                "seq": self.seq,
                "client": self.client,
                "body": self.body,
                "error": self.error,
            }
        )

    @staticmethod
    def from_bytes(blob: bytes) -> Reply:
        f = unpack(blob)
        return Reply(
            str(f["run"]), int(f["seq"]), int(f["client"]), dict(f.get("body") or {}), f.get("error")
        )

    def check(self, run: str, seq: int, client: int | None = None) -> None:
        """Refuse a reply that does not answer request ``seq`` of ``run`` (from ``client``, when given)."""
        if self.run != run or self.seq != seq or (client is not None and self.client != client):
            raise MalformedMessageError(
                f"reply for run {self.run!r} request {self.seq} from client {self.client} does not answer "
                f"request {seq} of run {run!r}"
                + (f" to client {client}" if client is not None else "")
                + ": refused (replayed or misrouted)"
            )
