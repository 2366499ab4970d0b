"""Warm ClientApp launches: Flower's per-message ``flwr-clientapp`` process forked from a process that has
already imported Flower, instead of started from nothing.

Flower 1.41's SuperExec runs ``flwr-clientapp --clientappio-api-address ... --token ...`` (found on its
``PATH``) for every message a SuperNode receives; the process imports Flower's client runtime (about 1 s of CPU
here, 3 s on a loaded machine) before it relays one frame to the organisation's worker. With N clients that is
N seconds of CPU per protocol step, on a machine that runs all of them. This module removes it, as Flower's own
Kubernetes executor does with its warm pools, without changing what runs:

* :func:`serve` (``python -m securefgl.deploy.warm serve --socket S``) imports Flower's ``flwr-clientapp``
  entry point and this project's ClientApp once, then waits on a Unix socket (mode 0600). For each launch it
  forks; the child takes the launch's arguments, environment and working directory and runs exactly
  ``flwr-clientapp`` with them (one task, one process, then it exits), so each message still runs in a process
  of its own, with nothing from an earlier message in it. The server is single-threaded when it forks.
* :func:`write_shim` writes an executable named ``flwr-clientapp`` that hands its arguments to that socket (a
  Python started with ``-IS``: about 0.05 s) and, when nothing answers within ``patience`` seconds, executes
  the real ``flwr-clientapp`` instead: a SuperNode whose warm server is gone still works, only slower. Put its
  folder first on the SuperNode's ``PATH``.

Every forked ClientApp stays in the server's process group, so killing that group (as
:meth:`~securefgl.deploy.launcher.LocalFederation.kill_node` does) kills the messages in flight with it.
"""

from __future__ import annotations

import argparse
import json
import os
import select
import shutil
import signal
import socket
import stat
import sys
from contextlib import suppress
from pathlib import Path
from typing import Any

from securefgl.deploy.worker import alive, listen_private

__all__ = ["COMMAND", "ENV_SOCKET", "main", "serve", "write_shim"]

#: The command Flower's SuperExec runs for a ClientApp task (``flwr.supercore.constant.TASK_TYPE_TO_COMMAND``).
COMMAND = "flwr-clientapp"
#: Environment variable naming the warm server's socket for the shim.
ENV_SOCKET = "SECUREFGL_WARM_CLIENTAPP"
#: The most bytes a launch request may have (arguments and environment).
MAX_REQUEST = 1 << 20


def _read_request(conn: socket.socket) -> dict[str, Any]:
    buf = b""
    while not buf.endswith(b"\n"):
        chunk = conn.recv(65536)
        if not chunk:
            raise ConnectionError("launcher closed before the end of its request")
        buf += chunk
        if len(buf) > MAX_REQUEST:
            raise ValueError(f"launch request over {MAX_REQUEST} bytes")
    req = json.loads(buf)
    if not isinstance(req, dict):
        raise ValueError("launch request is not a JSON object")
    argv, env, cwd = req.get("argv"), req.get("env"), req.get("cwd")
    if not (isinstance(argv, list) and all(isinstance(a, str) for a in argv)):
        raise ValueError("launch request without a list of string arguments")
    if not (isinstance(env, dict) and all(isinstance(k, str) and isinstance(v, str) for k, v in env.items())):
        raise ValueError("launch request without a string environment")
    if not isinstance(cwd, str):
        raise ValueError("launch request without a working directory")
    return {"argv": argv, "env": env, "cwd": cwd}


def _run_child(req: dict[str, Any]) -> None:
    """In the forked child: become ``flwr-clientapp ARGS`` and exit with its code (never returns)."""
    code = 1
    try:
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.environ.clear()
        os.environ.update(req["env"])
        os.chdir(req["cwd"])
        sys.argv = [COMMAND, *req["argv"]]
        from flwr.supernode.cli.flwr_clientapp import flwr_clientapp

        flwr_clientapp()
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException as exc:  # noqa: BLE001 - the child must never return into the server's loop
        print(f"[securefgl warm] ClientApp failed: {exc!r}", file=sys.stderr, flush=True)
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def serve(path: str, watch_pid: int | None = None, preload: tuple[str, ...] = ()) -> None:
    """Import Flower's ClientApp runtime (and the modules in ``preload``), then fork one ``flwr-clientapp`` per
    request on the Unix socket ``path`` until killed, or until ``watch_pid`` is gone."""
    import importlib

    import flwr.supernode.cli.flwr_clientapp  # noqa: F401 - the import this server exists to do once

    for name in ("securefgl.deploy.client_app", *preload):
        importlib.import_module(name)
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # children are reaped by the kernel
    srv = listen_private(path, backlog=64)
    print(f"[securefgl warm] ClientApp launches on {path}", file=sys.stderr, flush=True)
    while watch_pid is None or alive(watch_pid):
        ready, _, _ = select.select([srv], [], [], 0.5)
        if not ready:
            continue
        conn, _ = srv.accept()
        with conn:
            try:
                conn.settimeout(10.0)
                req = _read_request(conn)
            except (OSError, ValueError, ConnectionError) as exc:
                print(f"[securefgl warm] refused a launch: {exc}", file=sys.stderr, flush=True)
                continue
            pid = os.fork()
            if pid == 0:
                srv.close()
                conn.close()
                _run_child(req)
            with suppress(OSError):  # the shim went away meanwhile; the ClientApp runs all the same
                conn.sendall(f"{pid}\n".encode())


_SHIM = """#!{python} -IS
# securefgl warm ClientApp launch (securefgl.deploy.warm): hand this launch to the warm server, or run {real}.
import json, os, socket, sys, time
path = os.environ.get({env!r}, {default!r})
request = json.dumps({{"argv": sys.argv[1:], "env": dict(os.environ), "cwd": os.getcwd()}}).encode() + b"\\n"
deadline = time.monotonic() + {patience!r}
while True:
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(10.0)
            s.connect(path)
            s.sendall(request)
            if s.recv(64).strip().isdigit():
                sys.exit(0)
    except OSError:
        pass
    if time.monotonic() > deadline:
        break
    time.sleep(0.1)
os.execv({real!r}, [{real!r}, *sys.argv[1:]])
"""


def write_shim(
    folder: Path, socket_path: str | Path, *, real: str | None = None, patience: float = 10.0
) -> Path:
    """Write ``folder/flwr-clientapp``, the launcher that hands each launch to the warm server at
    ``socket_path`` (or the one named by ``$SECUREFGL_WARM_CLIENTAPP`` when set) and falls back to ``real``
    (default: the ``flwr-clientapp`` on ``PATH`` outside ``folder``).

    Raises:
        FileNotFoundError: No real ``flwr-clientapp`` to fall back to.
    """
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    if real is None:
        dirs = [
            d
            for d in os.environ.get("PATH", "").split(os.pathsep)
            if d and Path(d).resolve() != folder.resolve()
        ]
        real = shutil.which(COMMAND, path=os.pathsep.join(dirs))
        if real is None:
            raise FileNotFoundError(f"no {COMMAND} on PATH to fall back to (is flwr installed?)")
    shim = folder / COMMAND
    shim.write_text(
        _SHIM.format(
            python=sys.executable, real=str(real), env=ENV_SOCKET, default=str(socket_path), patience=patience
        )
    )
    shim.chmod(shim.stat().st_mode | stat.S_IXUSR | stat.S_IRUSR)
    return shim


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(
        prog="python -m securefgl.deploy.warm",
        description="Warm ClientApp launches for a Flower SuperNode: 'serve' imports Flower's ClientApp runtime once "
        f"and forks one {COMMAND} per message (each in its own process, as Flower runs it); 'shim' writes the "
        f"{COMMAND} that hands each launch to that server. Start the SuperNode with the shim's folder first on "
        "its PATH.",
    )
    sub = p.add_subparsers(dest="verb", required=True)
    s = sub.add_parser("serve", help="import Flower's ClientApp once and fork one per launch")
    s.add_argument("--socket", required=True, help="Unix socket path the shim connects to")
    s.add_argument(
        "--watch-pid", type=int, default=None, help="exit when this process (the SuperNode) is gone"
    )
    w = sub.add_parser("shim", help=f"write the {COMMAND} shim to put first on the SuperNode's PATH")
    w.add_argument("--socket", required=True, help="the warm server's socket")
    w.add_argument("--out", required=True, type=Path, help="folder for the shim")
    args = p.parse_args(argv)
    if args.verb == "serve":
        serve(args.socket, args.watch_pid)
    else:
        print(write_shim(args.out, args.socket))


if __name__ == "__main__":
    main()
