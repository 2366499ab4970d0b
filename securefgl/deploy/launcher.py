"""A whole federation on this machine: one SuperLink and N SuperNodes (each with its worker) as OS processes.

:class:`LocalFederation` makes throw-away TLS certificates and SuperNode keys (:mod:`securefgl.deploy.pki`),
starts ``flower-superlink`` with TLS and ``--enable-supernode-auth``, registers every SuperNode's public key with
``flwr supernode register``, starts each SuperNode (``flower-supernode`` with its key, TLS root certificate and
node config naming its worker's socket) beside its client worker, submits the app with ``flwr run`` and waits.
Every process starts in a process group of its own; :meth:`LocalFederation.close` (also on an exception or
Ctrl-C: it is a context manager) kills every group and waits for every process, so nothing outlives it.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from contextlib import suppress
from pathlib import Path
from typing import Any

import tomli_w

from securefgl.deploy.pki import (
    IdentityFiles,
    NodeKeys,
    TlsFiles,
    make_identity_keys,
    make_node_keys,
    make_tls,
)
from securefgl.errors import SecureFGLError

__all__ = ["DeploymentError", "LocalFederation", "STATUS_EVERY", "free_port"]

#: Seconds between ``flwr ls`` calls while a run's ServerApp is alive (see :meth:`LocalFederation.poll`).
STATUS_EVERY = 30.0


class DeploymentError(SecureFGLError, RuntimeError):
    """A process of the local federation failed to start, was refused, or the run failed."""


def _signs(protocol: str) -> bool:
    """Whether ``protocol``'s parties take identities (SecAgg and SecAgg+, with or without +dp)."""
    from securefgl.protocols.registry import parse_protocol

    return parse_protocol(protocol).base in ("secagg", "secagg+")


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_port(port: int, proc: subprocess.Popen, what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise DeploymentError(
                f"{what} exited with code {proc.returncode} before listening on port {port}"
            )
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.2)
    raise DeploymentError(f"{what} did not listen on port {port} within {timeout:.0f} s")


def _descendants(roots: set[int]) -> set[int]:
    """``roots`` and every process below them (Linux ``/proc``; other systems: ``roots`` only)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with suppress(OSError, ValueError, IndexError):
            fields = stat.read_text().rsplit(")", 1)[1].split()
            children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    out, todo = set(), list(roots)
    while todo:
        pid = todo.pop()
        if pid not in out:
            out.add(pid)
            todo.extend(children.get(pid, []))
    return out


class LocalFederation:
    """SuperLink + SuperNodes on localhost (see the module docstring).

    Args:
        workdir: Folder for certificates, keys, logs, Flower homes and the generated Flower project.
        data_dir: Folder of the exported client files (``client-<i>.pt``).
        num_clients: SuperNodes to start.
        warm: Fork each SuperNode's per-message ClientApp processes from a warm server that imported Flower
            once (:mod:`securefgl.deploy.warm`) instead of starting each from nothing. (default: ``True``)
    """

    def __init__(self, workdir: Path, data_dir: Path, num_clients: int, *, warm: bool = True) -> None:
        self.workdir, self.data_dir, self.n = Path(workdir), Path(data_dir), int(num_clients)
        self.warm = bool(warm)
        self.procs: list[subprocess.Popen] = []
        self.nodes: dict[int, tuple[subprocess.Popen, ...]] = {}
        self.logs = self.workdir / "logs"
        self.logs.mkdir(parents=True, exist_ok=True)
        # Flower 1.41 serves the Fleet, Control and Runtime APIs over one HTTPS port.
        self.port = free_port()
        self.tls: TlsFiles | None = None
        self.keys: dict[int, NodeKeys] = {}
        self.identities: IdentityFiles | None = None
        self._polled: dict[int, tuple[bool, float]] = {}  # run id -> (its ServerApp was seen, last flwr ls)

    # ------------------------------------------------------------------ processes ------------------------

    def _env(self, home: str) -> dict[str, str]:
        env = dict(os.environ)
        env["FLWR_HOME"] = str(self.workdir / home)
        env.setdefault("PYTHONUNBUFFERED", "1")
        env.setdefault("FLWR_SUPEREXEC_TASK_POLL_INTERVAL", f"{self.task_poll_interval:g}")
        return env

    @property
    def task_poll_interval(self) -> float:
        """Seconds between an idle SuperExec's polls for a task: 0.05 s per SuperNode (at most Flower's 1 s).

        Every SuperNode's SuperExec polls on its own, so on one machine their idle load grows with N: at a fixed
        0.05 s, 20 of them kept about 1.75 cores of a 2-core machine busy doing nothing, and the ServerApp
        never started. Scaling the interval with N keeps the machine's idle polling at about 20 requests a
        second while a task waits at most ``0.05 * N`` s to be picked up.
        """
        return min(1.0, 0.05 * max(1, self.n))

    def _spawn(self, args: list[str], log: str, env: dict[str, str]) -> subprocess.Popen:
        out = open(self.logs / log, "ab")  # noqa: SIM115 - owned by the child's lifetime
        proc = subprocess.Popen(
            args,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        out.close()
        self.procs.append(proc)
        return proc

    def _flwr(self, *args: str, timeout: float = 120.0) -> str:
        res = subprocess.run(
            ["flwr", *args], capture_output=True, text=True, env=self._env("flwr-cli"), timeout=timeout
        )
        if res.returncode != 0:
            raise DeploymentError(
                f"flwr {' '.join(args[:2])} failed ({res.returncode}): {(res.stdout + res.stderr)[-2000:]}"
            )
        return res.stdout

    def start(self) -> None:
        """Credentials, the SuperLink, key registration and every SuperNode."""
        self.tls = make_tls(self.workdir / "tls")
        self.identities = make_identity_keys(self.workdir / "identities", self.n)
        env = self._env("superlink")
        env["SECUREFGL_DATA"] = ""  # the server holds no dataset
        link = self._spawn(
            [
                "flower-superlink",
                "--ssl-ca-certfile",
                str(self.tls.ca_cert),
                "--ssl-certfile",
                str(self.tls.server_cert),
                "--ssl-keyfile",
                str(self.tls.server_key),
                "--enable-supernode-auth",
                "--port",
                str(self.port),
                "--host",
                "127.0.0.1",
            ],
            "superlink.log",
            env,
        )
        _wait_port(self.port, link, "flower-superlink")
        home = self.workdir / "flwr-cli"
        home.mkdir(exist_ok=True)
        (home / "config.toml").write_text(
            tomli_w.dumps(
                {
                    "superlink": {
                        "default": "local-tls",
                        "local-tls": {
                            "address": f"127.0.0.1:{self.port}",
                            "root-certificates": str(self.tls.ca_cert),
                        },
                    }
                }
            )
        )
        for i in range(self.n):
            self.keys[i] = make_node_keys(self.workdir / "keys", f"node-{i}")
            self._flwr("supernode", "register", str(self.keys[i].public), "local-tls")
        for i in range(self.n):
            self.start_node(i)

    def start_node(self, i: int, keys: NodeKeys | None = None) -> tuple[subprocess.Popen, ...]:
        """Start SuperNode ``i`` (with ``keys``, default its registered ones), its worker and, when ``warm``, its
        warm ClientApp server; return their processes, the SuperNode first."""
        assert self.tls is not None
        keys = keys or self.keys[i]
        sock = self.workdir / "sockets" / f"client-{i}.sock"
        sock.parent.mkdir(mode=0o700, exist_ok=True)
        env = self._env(f"node-{i}")
        warm_sock = self.workdir / "sockets" / f"clientapp-{i}.sock"
        if self.warm:
            from securefgl.deploy.warm import ENV_SOCKET, write_shim

            shim = write_shim(self.workdir / "bin", warm_sock)
            env["PATH"] = f"{shim.parent}{os.pathsep}{env.get('PATH', '')}"
            env[ENV_SOCKET] = str(warm_sock)
        node = self._spawn(
            [
                "flower-supernode",
                "--root-certificates",
                str(self.tls.ca_cert),
                "--superlink",
                f"127.0.0.1:{self.port}",
                "--auth-supernode-private-key",
                str(keys.private),
                "--port",
                str(free_port()),
                "--node-config",
                f'worker-socket="{sock}"',
                "--max-retries",
                "3",
            ],
            f"supernode-{i}.log",
            env,
        )
        worker = self._spawn(
            [
                sys.executable,
                "-m",
                "securefgl.deploy.worker",
                "--data",
                str(self.data_dir / f"client-{i}.pt"),
                "--socket",
                str(sock),
                "--watch-pid",
                str(node.pid),
                *self._identity_args(i),
            ],
            f"worker-{i}.log",
            self._env(f"node-{i}"),
        )
        procs = [node, worker]
        if self.warm:
            serve = ["serve", "--socket", str(warm_sock), "--watch-pid", str(node.pid)]
            procs.append(
                self._spawn([sys.executable, "-m", "securefgl.deploy.warm", *serve], f"warm-{i}.log", env)
            )
        self.nodes[i] = tuple(procs)
        return self.nodes[i]

    def _identity_args(self, i: int) -> list[str]:
        """Client ``i``'s identity key and the directory, as its organisation would configure them."""
        if self.identities is None or i not in self.identities.private:  # a node outside the federation
            return []
        return [
            "--identity-key",
            str(self.identities.private[i]),
            "--identities",
            str(self.identities.directory),
        ]

    def restart_node(self, i: int, timeout: float = 240.0) -> None:
        """Start SuperNode ``i`` again after it died, with its registered key, retrying until admitted.

        The SuperLink refuses to activate a node id it still believes online (until two missed heartbeats, about
        a minute in Flower 1.41), so a restarted SuperNode exits at first; an organisation's supervisor retries,
        and so does this.
        """
        log = self.logs / f"supernode-{i}.log"
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            offset = log.stat().st_size if log.exists() else 0
            node, *helpers = self.start_node(i)
            while node.poll() is None and time.monotonic() < deadline:
                with log.open("rb") as f:
                    f.seek(offset)
                    if b"SuperNode ID" in f.read():
                        return
                time.sleep(0.5)
            for helper in helpers:
                with suppress(ProcessLookupError):
                    os.killpg(helper.pid, signal.SIGKILL)
                helper.wait()
            time.sleep(5.0)
        raise DeploymentError(f"SuperNode {i} was not admitted again within {timeout:.0f} s")

    def kill_node(self, i: int) -> None:
        """SIGKILL SuperNode ``i``'s process group, its worker's and its warm server's (with the ClientApp
        processes in flight)."""
        for p in self.nodes[i]:
            with suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGKILL)

    # ------------------------------------------------------------------ the run -------------------------

    def write_app(self, config: dict[str, Any], output_dir: Path, stage_timeout: float) -> Path:
        """The Flower project ``flwr run`` submits (a pyproject.toml naming the apps and the run config).

        The server's protocol options name the identity directory (the server verifies the clients'
        signatures with it); each client reads the same directory from its own worker's configuration.
        """
        protocol = dict(config.get("protocol", {}))
        if self.identities is not None and _signs(str(protocol.get("name", "secagg"))):
            protocol["options"] = {
                **dict(protocol.get("options", {})),
                "identities": str(self.identities.directory),
            }
            config = {**config, "protocol": protocol}
        return self.write_project(
            {
                "serverapp": "securefgl.deploy.apps:server_app",
                "clientapp": "securefgl.deploy.client_app:client_app",
            },
            {
                "config": json.dumps(config),
                "output-dir": str(output_dir),
                "stage-timeout": float(stage_timeout),
                "clients": self.n,
            },
        )

    def write_project(
        self, components: dict[str, str], run_config: dict[str, Any], files: dict[str, str] | None = None
    ) -> Path:
        """A Flower project folder naming ``components``, with ``run_config`` and extra source ``files``."""
        app = self.workdir / "app"
        app.mkdir(exist_ok=True)
        project = {
            "build-system": {"requires": ["hatchling"], "build-backend": "hatchling.build"},
            "project": {
                "name": "securefgl-deploy",
                "version": "1.0.0",
                "description": "securefgl deployed run",
                "license": "Apache-2.0",
                "dependencies": [],
            },
            "tool": {
                "flwr": {"app": {"publisher": "securefgl", "components": components, "config": run_config}}
            },
        }
        (app / "pyproject.toml").write_text(tomli_w.dumps(project))
        for name, text in (files or {}).items():
            (app / name).write_text(text)
        return app

    def submit(self, app: Path) -> int:
        """``flwr run`` the app; return the run id."""
        out = self._flwr("run", str(app), "local-tls", "--format", "json")
        try:
            return int(json.loads(out)["run-id"])
        except (ValueError, KeyError) as exc:
            raise DeploymentError(f"flwr run gave no run id ({exc}): {out[-1000:]}") from None

    def status(self, run_id: int) -> str:
        """The run's status from ``flwr ls`` (``finished:completed`` on success)."""
        out = json.loads(self._flwr("ls", "local-tls", "--run-id", str(run_id), "--format", "json"))
        runs = out.get("runs", [])
        return str(runs[0].get("status", "")) if runs else ""

    def _server_app_running(self) -> bool:
        """Whether a ServerApp process runs below the SuperLink (read from ``/proc``: no subprocess)."""
        for pid in self.pids():
            with suppress(OSError):
                if b"flwr-serverapp" in Path(f"/proc/{pid}/cmdline").read_bytes():
                    return True
        return False

    def poll(self, run_id: int, every: float = STATUS_EVERY) -> str:
        """The run's status when it is worth asking, else ``""``: ``flwr ls`` every ``every`` seconds while
        the run's ServerApp process is starting or alive, and every 2 s once it has gone.

        Each ``flwr ls`` is a Python process that imports Flower's CLI (about 2 s of CPU here); asked every
        second, as before, it kept most of a core busy for the whole run, beside the SuperNodes it measured.
        """
        seen, last = self._polled.get(run_id, (False, time.monotonic()))
        running = self._server_app_running()
        seen |= running
        if time.monotonic() - last < (2.0 if seen and not running else every):
            self._polled[run_id] = (seen, last)
            return ""
        self._polled[run_id] = (seen, time.monotonic())
        return self.status(run_id)

    def wait(self, run_id: int, timeout: float) -> str:
        """Poll until the run finishes; return its status (``finished:completed`` on success)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            status = self.poll(run_id)
            if status.startswith("finished"):
                return status
            time.sleep(0.5)
        raise DeploymentError(f"run {run_id} did not finish within {timeout:.0f} s")

    # ------------------------------------------------------------------ shutdown ------------------------

    def pids(self) -> set[int]:
        """Every live process started here and all their descendants (from ``/proc``)."""
        return _descendants({p.pid for p in self.procs if p.poll() is None})

    def close(self) -> None:
        """Kill every process group started here (and any descendant that left it); reap every process."""
        strays = self.pids()
        for p in reversed(self.procs):
            with suppress(ProcessLookupError, PermissionError):
                os.killpg(p.pid, signal.SIGTERM)
        deadline = time.monotonic() + 5.0
        for p in self.procs:
            with suppress(subprocess.TimeoutExpired):
                p.wait(timeout=max(0.0, deadline - time.monotonic()))
        for p in self.procs:
            with suppress(ProcessLookupError, PermissionError):
                os.killpg(p.pid, signal.SIGKILL)
            with suppress(subprocess.TimeoutExpired):
                p.wait(timeout=5.0)
        for pid in strays:
            with suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)

    def __enter__(self) -> LocalFederation:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
