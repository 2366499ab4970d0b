"""A client organisation's long-lived process: its data file, its :class:`ClientHalf`, a local socket.

Flower starts a fresh ClientApp process for every message a SuperNode receives. The client's state between
protocol stages (its model, its optimiser, the secret keys and Shamir shares of the sums in flight) must stay on
the client's machine and in memory; this worker holds it. The ClientApp (:mod:`securefgl.deploy.apps`) forwards
each message's frame to the worker over a Unix socket named in the SuperNode's node config (``worker-socket``)
and returns the worker's reply. The socket is created with mode 0600 in a folder only the organisation can read.

Run it beside the SuperNode::

    python -m securefgl.deploy.worker --data client-3.pt --socket /run/org3/securefgl.sock [--watch-pid PID]

With ``--watch-pid`` it exits when that process (the SuperNode) is gone, so a killed SuperNode leaves nothing.
"""

from __future__ import annotations

import argparse
import os
import socket
import struct
import sys
import threading
import time
from pathlib import Path

__all__ = ["alive", "call_worker", "listen_private", "main", "serve"]

_HEADER = struct.Struct(">Q")


def _recv_exact(conn: socket.socket, n: int) -> bytes:
    chunks, got = [], 0
    while got < n:
        chunk = conn.recv(min(n - got, 1 << 20))
        if not chunk:
            raise ConnectionError(f"peer closed after {got} of {n} bytes")
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def _send_frame(conn: socket.socket, blob: bytes) -> None:
    conn.sendall(_HEADER.pack(len(blob)) + blob)


def _recv_frame(conn: socket.socket) -> bytes:
    (n,) = _HEADER.unpack(_recv_exact(conn, _HEADER.size))
    return _recv_exact(conn, n)


def call_worker(path: str, blob: bytes, timeout: float = 600.0) -> bytes:
    """Send one frame to the worker at ``path`` and return its reply."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.settimeout(timeout)
        conn.connect(path)
        _send_frame(conn, blob)
        return _recv_frame(conn)


def listen_private(path: str, backlog: int = 8) -> socket.socket:
    """A Unix socket listening at ``path`` (an old one there is replaced), mode 0600 from its creation."""
    if os.path.exists(path):
        os.unlink(path)
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old = os.umask(0o177)
    try:
        srv.bind(path)
    finally:
        os.umask(old)
    srv.listen(backlog)
    return srv


def alive(pid: int) -> bool:
    """Whether process ``pid`` exists and is not a zombie (Linux ``/proc``)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        return stat.rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, IndexError):
        return False


def _watch(pid: int) -> None:
    while alive(pid):
        time.sleep(0.5)
    os._exit(0)


def _peek(half: object, request: bytes) -> tuple[str, str]:
    """``(kind, what)`` of a request frame, for the log: a step's parts and its sums' stages, e.g.
    ``("step", "eval+train main:advertise_keys eval:advertise_keys")`` (``("?", "")`` when undecodable)."""
    from securefgl.deploy.wire import Request
    from securefgl.errors import MalformedMessageError

    try:
        req = Request.from_bytes(request)
    except MalformedMessageError:
        return "?", ""
    parts = "+".join(str(p.get("kind")) for p in req.body.get("parts", []))
    stages = [f"{s.get('key')}:{s.get('stage')}" for s in req.body.get("stages", [])]
    return req.kind, " ".join([parts, *stages] if parts else stages)


def serve(
    data: str,
    path: str,
    device: str = "cpu",
    identity_key: str | None = None,
    identities: str | None = None,
) -> None:
    """Load the client file (and its identity key and directory) and answer frames on the Unix socket
    ``path`` until killed."""
    import torch

    from securefgl.deploy.client import ClientHalf
    from securefgl.deploy.export import load_client_file
    from securefgl.deploy.pki import load_identity_key
    from securefgl.protocols.secaggplus import IdentityDirectory

    torch.set_num_threads(1)
    key = load_identity_key(identity_key) if identity_key else None
    directory = IdentityDirectory.from_file(identities) if identities else None
    half = ClientHalf(load_client_file(data), device, identity=key, directory=directory)
    srv = listen_private(path)
    print(f"[securefgl worker] client {half.id} ready on {path}", file=sys.stderr, flush=True)
    while True:
        conn, _ = srv.accept()
        with conn:
            try:
                request = _recv_frame(conn)
                kind, stage = _peek(half, request)
                print(f"[securefgl worker] request {kind} {stage}".rstrip(), file=sys.stderr, flush=True)
                _send_frame(conn, half.handle(request))
            except (ConnectionError, OSError) as exc:
                print(f"[securefgl worker] dropped a connection: {exc}", file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description="securefgl client worker (one organisation's client half)")
    p.add_argument("--data", required=True, help="this client's data file (securefgl partition --export)")
    p.add_argument("--socket", required=True, help="Unix socket path the ClientApp connects to")
    p.add_argument("--device", default="cpu")
    p.add_argument(
        "--watch-pid", type=int, default=None, help="exit when this process (the SuperNode) is gone"
    )
    p.add_argument(
        "--identity-key", default=None, help="this client's Ed25519 identity key (PEM; SecAgg signatures)"
    )
    p.add_argument(
        "--identities",
        default=None,
        help="the federation's identity directory (JSON of every client's public key), from your own configuration",
    )
    args = p.parse_args(argv)
    if args.watch_pid is not None:
        threading.Thread(target=_watch, args=(args.watch_pid,), daemon=True).start()
    serve(args.data, args.socket, args.device, args.identity_key, args.identities)


if __name__ == "__main__":
    main()
