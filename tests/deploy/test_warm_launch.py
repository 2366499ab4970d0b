"""Warm ClientApp launches (:mod:`securefgl.deploy.warm`): the shim hands each launch to a server that forks the
real ``flwr-clientapp`` with the launch's arguments, and falls back to the real command when no server answers."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from securefgl.deploy.warm import COMMAND, ENV_SOCKET, write_shim

pytestmark = pytest.mark.skipif(shutil.which(COMMAND) is None, reason="flwr is not installed")


def _recorder(tmp_path: Path) -> tuple[Path, Path]:
    """A stand-in for the real command that records its arguments and working directory."""
    out = tmp_path / "recorded.json"
    script = tmp_path / "real-clientapp"
    script.write_text(
        f"#!{sys.executable}\nimport json, os, sys\n"
        f"open({str(out)!r}, 'w').write(json.dumps({{'argv': sys.argv[1:], 'cwd': os.getcwd()}}))\n"
    )
    script.chmod(0o755)
    return script, out


def _wait_for(predicate, timeout: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.1)
    return False


def _server(tmp_path: Path, watch_pid: int) -> tuple[subprocess.Popen, Path, Path]:
    sock, log = tmp_path / "warm.sock", tmp_path / "warm.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "securefgl.deploy.warm",
                "serve",
                "--socket",
                str(sock),
                "--watch-pid",
                str(watch_pid),
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    assert _wait_for(lambda: "ClientApp launches on" in log.read_text()), log.read_text()
    return proc, sock, log


def test_the_shim_runs_the_real_command_when_no_server_answers(tmp_path) -> None:
    real, recorded = _recorder(tmp_path)
    shim = write_shim(tmp_path / "bin", tmp_path / "nobody.sock", real=str(real), patience=0.3)
    env = {k: v for k, v in os.environ.items() if k != ENV_SOCKET}
    res = subprocess.run([str(shim), "--token", "t0k3n", "--insecure"], cwd=tmp_path, env=env, timeout=30)
    assert res.returncode == 0
    got = json.loads(recorded.read_text())
    assert got == {"argv": ["--token", "t0k3n", "--insecure"], "cwd": str(tmp_path)}


def test_the_server_forks_flwr_clientapp_per_launch_and_refuses_malformed_requests(tmp_path) -> None:
    real, recorded = _recorder(tmp_path)
    proc, sock, log = _server(tmp_path, os.getpid())
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:  # not a launch: refused, server lives on
            s.connect(str(sock))
            s.sendall(b'["not", "an", "object"]\n')
        assert _wait_for(lambda: "refused a launch" in log.read_text()), log.read_text()
        assert oct(sock.stat().st_mode & 0o777) == oct(0o600)
        shim = write_shim(tmp_path / "bin", sock, real=str(real))
        env = {**os.environ, ENV_SOCKET: str(sock)}
        t0 = time.monotonic()
        res = subprocess.run([str(shim), "--help"], cwd=tmp_path, env=env, timeout=30)
        handed_over = time.monotonic() - t0
        assert res.returncode == 0
        # The forked child ran Flower's real entry point under its own name: its usage went to the server's log.
        assert _wait_for(lambda: f"usage: {COMMAND}" in log.read_text()), log.read_text()
        assert "--runtime-api-address" in log.read_text()
        assert not recorded.exists(), "the shim fell back to the real command although the server answered"
        assert handed_over < 5.0
        assert proc.poll() is None
    finally:
        proc.kill()
        proc.wait()


def test_the_server_exits_when_its_supernode_is_gone(tmp_path) -> None:
    node = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    proc, _, _ = _server(tmp_path, node.pid)
    try:
        node.kill()
        node.wait()
        proc.wait(timeout=10)
    finally:
        proc.kill()
        proc.wait()
    assert proc.returncode == 0
