"""The mask worker process (securefgl.protocols._mask_worker): a real process, real keys, a real shared map."""

from __future__ import annotations

import os
import time
from pathlib import Path

import numpy as np
import pytest

import securefgl.protocols._mask_worker as mw
from securefgl.protocols._prg import expander_for
from securefgl.protocols._secaggplus_precompute import (
    MaskJob,
    MaskPrecompute,
    WorkerMaskPrecompute,
    start_precompute,
)

pytestmark = pytest.mark.skipif(os.name != "posix", reason="the mask worker runs on POSIX systems")


def _ready(worker: mw.MaskWorker) -> mw.MaskWorker:
    deadline = time.monotonic() + 30
    while not worker.ready:
        assert worker.alive and time.monotonic() < deadline, "the mask worker did not greet"
        time.sleep(0.01)
    return worker


@pytest.fixture
def worker():
    """A worker of its own (not the process-wide one), stopped after the test."""
    w = _ready(mw.MaskWorker())
    yield w
    w.stop()


def _ring_jobs(n: int, degree: int, use: bytes = b"use") -> dict[int, MaskJob]:
    """Each client paired with its ``degree`` nearest on a ring, as SecAgg+'s graph pairs them."""
    keys: dict[frozenset[int], bytes] = {}
    jobs = {}
    for c in range(n):
        add, sub = [], []
        for j in range(1, degree // 2 + 1):
            for v in ((c + j) % n, (c - j) % n):
                k = keys.setdefault(frozenset((c, v)), os.urandom(32))
                (add if v > c else sub).append(k)
        jobs[c] = MaskJob(use, tuple(add), tuple(sub))
    return jobs


@pytest.mark.parametrize("prg", mw.ALGORITHMS)
@pytest.mark.parametrize("bits", [20, 40])
def test_rows_are_each_clients_own_mask_sum(worker, prg, bits):
    length, jobs = 3001, _ring_jobs(9, 4)
    pre = WorkerMaskPrecompute(jobs, length, bits, prg, worker)
    ex = expander_for(length, bits, algorithm=prg)
    for c, job in jobs.items():
        got = pre.take(c, job.use_id, job.add, job.subtract)
        want = ex.zeros()
        ex.combine(want, job.add, job.subtract)
        assert got is not None and np.array_equal(ex.reduce(got.copy()), ex.reduce(want))
        got.fill(0)  # as a client wipes what it took
        assert pre.take(c, job.use_id, job.add, job.subtract) is None  # taken once
    pre.discard()
    assert pre.finished and pre.expanded == 9 * 4 // 2  # one stream per pair


def test_announcements_in_flight_together_keep_their_own_rows(worker):
    """Protocol objects in one process announce before any of their clients take, the later ones while the first is
    expanding: each gets its own sums (a map serves one task at a time, tasks queue in the worker), and a released
    map serves the next task."""
    length = 4000
    ex = expander_for(length, 32)
    first = WorkerMaskPrecompute(_ring_jobs(60, 16), 60_000, 32, "aes256-ctr", worker)  # busy a while
    second = WorkerMaskPrecompute(_ring_jobs(6, 2), length, 32, "aes256-ctr", worker)
    third = WorkerMaskPrecompute(_ring_jobs(6, 4), length, 32, "aes256-ctr", worker)
    assert first.task is not None and second.task is not None and third.task is not None
    assert len({id(p.task.map) for p in (first, second, third)}) == 3
    first_ex = expander_for(60_000, 32)
    for c, job in first.jobs.items():
        want = first_ex.zeros()
        first_ex.combine(want, job.add, job.subtract)
        got = first.take(c, job.use_id, job.add, job.subtract)
        assert got is not None and np.array_equal(first_ex.reduce(got.copy()), first_ex.reduce(want))
    for pre in (third, second):
        for c, job in pre.jobs.items():
            want = ex.zeros()
            ex.combine(want, job.add, job.subtract)
            got = pre.take(c, job.use_id, job.add, job.subtract)
            assert got is not None and np.array_equal(ex.reduce(got.copy()), ex.reduce(want))
    maps = [p.task.map for p in (first, second, third) if p.task is not None]
    for pre in (first, second, third):
        pre.discard()
        assert pre.finished
    again = WorkerMaskPrecompute(_ring_jobs(6, 2), length, 32, "aes256-ctr", worker)
    assert again.task is not None and any(
        again.task.map is m for m in maps
    )  # an idle map reused, no new file
    assert len(worker._maps) == 3
    again.discard()


def test_cancelled_task_stops_and_leaves_nothing(worker):
    jobs = _ring_jobs(60, 16)
    pre = WorkerMaskPrecompute(jobs, 200_000, 32, "aes256-ctr", worker)
    task = pre.task
    pre.discard()  # at once: the worker stops between two keys
    assert task is not None and task.ended and not pre.finished
    assert pre.expanded < 60 * 16 // 2
    assert not task.rows[:60].any()  # rows nobody took are wiped
    assert pre.take(0, b"use", jobs[0].add, jobs[0].subtract) is None
    again = WorkerMaskPrecompute(_ring_jobs(5, 2), 1000, 32, "aes256-ctr", worker)  # the worker goes on
    job = again.jobs[3]
    assert again.take(3, job.use_id, job.add, job.subtract) is not None
    again.discard()


def test_the_map_is_private_and_unlinked_once_the_worker_has_it(worker):
    jobs = _ring_jobs(4, 2)
    pre = WorkerMaskPrecompute(jobs, 1000, 32, "aes256-ctr", worker)
    assert pre.task is not None
    path = Path(pre.task.map.path)
    assert (path.stat().st_mode & 0o777) == 0o600
    job = jobs[0]
    assert pre.take(0, job.use_id, job.add, job.subtract) is not None
    assert not path.exists()
    pre.discard()


def test_a_dead_worker_leaves_the_clients_their_own_masks(worker, caplog):
    jobs = _ring_jobs(40, 16)
    pre = WorkerMaskPrecompute(jobs, 100_000, 32, "aes256-ctr", worker)
    worker._proc.kill()
    worker._proc.wait()
    missed = sum(pre.take(c, j.use_id, j.add, j.subtract) is None for c, j in jobs.items())
    assert missed > 0 and not worker.alive  # rows it reported before dying are still good
    assert "mask worker process stopped" in caplog.text
    assert worker.start([((b"k" * 32,), ())], 10, np.dtype(np.uint32), "aes256-ctr") is None
    pre.discard()


def test_a_dead_process_wide_worker_falls_back_to_a_thread(worker, monkeypatch):
    worker.stop()
    monkeypatch.setattr(mw, "_WORKER", worker)
    monkeypatch.setattr(mw, "_WORKER_FAILED", False)
    jobs = _ring_jobs(4, 2)
    pre = start_precompute(jobs, 1000, 32, "aes256-ctr")
    assert isinstance(pre, MaskPrecompute)
    job = jobs[1]
    assert pre.take(1, job.use_id, job.add, job.subtract) is not None
    pre.discard()
    assert mw.mask_worker() is None  # not restarted in this process


def test_a_garbled_task_fails_alone(worker):
    mw._write_frame(worker._in, b"T" + mw._TASK.pack(999, 4, 0, 10, 3))  # rows announced, none sent
    jobs = _ring_jobs(5, 2)
    pre = WorkerMaskPrecompute(jobs, 1000, 32, "aes256-ctr", worker)
    assert all(pre.take(c, j.use_id, j.add, j.subtract) is not None for c, j in jobs.items())
    pre.discard()
    assert pre.finished and worker.alive


@pytest.mark.skipif(not Path("/proc/self/maps").exists(), reason="reads /proc")
def test_the_worker_does_not_load_torch(worker):
    maps = Path(f"/proc/{worker._proc.pid}/maps").read_text()
    assert "numpy" in maps and "torch" not in maps
