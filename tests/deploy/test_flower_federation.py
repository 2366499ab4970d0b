"""A real local federation: SuperLink and SuperNodes as OS processes, TLS and SuperNode authentication on.

Fast suite: the federation starts, an unregistered SuperNode is refused by the SuperLink, and closing it (also
after a failure inside the ``with`` block) leaves no process behind. The full deployed run over Flower is slow
(Flower starts one ClientApp process per message) and is marked ``slow``.
"""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import pytest

from securefgl.deploy.launcher import LocalFederation
from securefgl.deploy.pki import make_node_keys

pytestmark = pytest.mark.skipif(shutil.which("flower-superlink") is None, reason="flwr is not installed")


def _alive(pids: set[int]) -> set[int]:
    out = set()
    for pid in pids:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (FileNotFoundError, IndexError):
            continue
        if state != "Z":
            out.add(pid)
    return out


def test_unregistered_supernode_is_refused_and_nothing_outlives_the_federation(tmp_path) -> None:
    seen: set[int] = set()
    with pytest.raises(RuntimeError, match="boom"), LocalFederation(tmp_path, tmp_path / "data", 1) as fed:
        fed.start()  # SuperLink with TLS and --enable-supernode-auth, node 0 registered and started
        intruder_keys = make_node_keys(tmp_path / "keys", "intruder")  # never registered
        intruder, *_ = fed.start_node(1, intruder_keys)
        deadline = time.monotonic() + 45
        log = fed.logs / "supernode-1.log"
        refused = False
        while time.monotonic() < deadline and not refused:
            time.sleep(0.5)
            text = log.read_text(errors="replace") if log.exists() else ""
            refused = intruder.poll() is not None and "Failed to activate SuperNode" in text
            seen |= fed.pids()
        assert refused, f"an unregistered SuperNode was not refused; log tail: {log.read_text()[-1500:]}"
        assert intruder.returncode != 0
        node_log = (fed.logs / "supernode-0.log").read_text(errors="replace")
        assert "SuperNode ID" in node_log  # the registered node was admitted
        raise RuntimeError("boom")  # a failure inside the block still shuts everything down
    time.sleep(0.5)
    assert not _alive(seen - {os.getpid()}), "processes outlived the federation"
