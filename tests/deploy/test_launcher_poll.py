"""How the local federation watches a run without loading the machine it measures.

``LocalFederation.poll`` asks ``flwr ls`` (a Python process of about 2 s of CPU) only every ``every`` seconds
while the run's ServerApp process starts or runs, and soon after that process has gone; here the ServerApp is a
real child process whose command line names ``flwr-serverapp``, and ``status`` is counted instead of spawning the
CLI (the rate-limiting is what is tested; the CLI call itself runs in the deployment tests).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

from securefgl.deploy.launcher import LocalFederation


class CountingFederation(LocalFederation):
    def __init__(self, workdir: Path, n: int) -> None:
        super().__init__(workdir, workdir / "data", n)
        self.asked: list[float] = []

    def status(self, run_id: int) -> str:
        self.asked.append(time.monotonic())
        return "running" if self._server_app_running() else "finished:completed"


def test_status_is_asked_rarely_while_the_server_app_runs_and_soon_after_it_ends(tmp_path: Path) -> None:
    with CountingFederation(tmp_path, 3) as fed:
        app = fed._spawn(
            [sys.executable, "-c", "import time; time.sleep(60)", "flwr-serverapp"], "app.log", {}
        )
        deadline = time.monotonic() + 10
        while not fed._server_app_running() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert fed._server_app_running()
        t0 = time.monotonic()
        while time.monotonic() - t0 < 1.5:
            assert fed.poll(7, every=30.0) == ""  # alive: no flwr ls for 30 s
            time.sleep(0.1)
        assert fed.asked == []
        app.kill()
        app.wait()
        t1, status = time.monotonic(), ""
        while not status and time.monotonic() - t1 < 10:
            status = fed.poll(7, every=30.0)
            time.sleep(0.1)
        assert status == "finished:completed" and len(fed.asked) == 1
        assert fed.asked[0] - t1 <= 3.0  # picked up within the 2 s of a gone ServerApp, not the 30 s


@pytest.mark.parametrize(("n", "interval"), [(1, 0.05), (5, 0.25), (10, 0.5), (20, 1.0), (50, 1.0)])
def test_idle_superexec_polling_scales_with_the_number_of_supernodes(
    tmp_path: Path, n: int, interval: float
) -> None:
    fed = LocalFederation(tmp_path, tmp_path / "data", n)
    assert fed.task_poll_interval == pytest.approx(interval)
    assert float(fed._env("x")["FLWR_SUPEREXEC_TASK_POLL_INTERVAL"]) == pytest.approx(interval)
