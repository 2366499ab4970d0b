"""Hazmat: a worker process that expands the pairwise mask sums of an announced use, in simulation.

.. warning::
    Low-level building block of :mod:`._secaggplus_precompute`; not a general-purpose API.

Expanding every client's pairwise masks ahead on a thread of the simulating process
(:class:`~._secaggplus_precompute.MaskPrecompute`) takes the interpreter's lock between every two keystreams and
numpy calls: a few thousand hand-offs a round at 100 clients, each one stalling whatever the main thread is
doing. Measured on this project's 2-core VM, a plaintext FedAvg round on Cora with 100 clients took 0.54 s
alone, 0.75-0.78 s beside a thread expanding one announcement's masks after another, and 0.57-0.61 s beside a
process doing the same (which got through twice as many announcements). This module runs that work in a
process of its own:

- the worker is this file run as a script (``python _mask_worker.py``), so it imports the standard library,
  numpy and ``cryptography`` only (:mod:`._keystream`, its one sibling), not the package and torch: it is ready
  in a fraction of a second;
- the simulating process sends it each announcement's jobs (per client, the 32-byte keys it adds and
  subtracts) over a pipe to its standard input, framed as ``u32 length || payload``; the worker expands each
  key's stream once, adds it to one client's row and subtracts it from the other's in a shared memory map, and
  reports each finished row (``D``) and the end of the task (``E``, with the number of streams expanded) on its
  standard output;
- the map is a file the parent creates with mode 0600 in ``/dev/shm`` (or the temporary directory) and unlinks
  as soon as the worker has mapped it; the keys travel only through the pipe between the two processes. A map
  serves one announcement at a time (two protocol objects in one process never share rows) and is then kept for
  the next one (37 MB for 100 clients of FedAvg's GCN on Cora, at most
  :data:`~._secaggplus_precompute.MAX_PRECOMPUTED_BYTES`) until the process exits;
- :meth:`MaskWorker.cancel` stops a task between two keys and waits for its end, so nothing writes a row
  afterwards; a worker that exits or breaks its framing is closed, and its unfinished rows are reported as not
  done (the clients expand their own masks, as without an announcement).

The rows are the same words as the thread's sums: the same :func:`._keystream.encryptor`, the same wrapping
adds in the ring's machine word, whose result does not depend on the order.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import mmap
import os
import select
import struct
import subprocess
import sys
import tempfile
import threading
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["ALGORITHMS", "MaskWorker", "WorkerTask", "mask_worker"]

logger = logging.getLogger(__name__)

#: The PRG algorithms the worker expands, by their index on the wire.
ALGORITHMS = ("aes256-ctr", "aes128-ctr", "chacha20")
_KEY = 32
_LEN = struct.Struct(">I")
_TASK = struct.Struct(">IBBQI")  # task id, word bytes, algorithm, length, rows
_ROW = struct.Struct(">HH")  # keys added, keys subtracted
_DONE = struct.Struct(">II")  # task id, row
_END = struct.Struct(">IBI")  # task id, status, streams expanded
_ID = struct.Struct(">I")
_OK, _CANCELLED, _FAILED = 0, 1, 2
_SHM_DIR = "/dev/shm"


def _read_exact(fd: int, n: int) -> bytes | None:
    parts, got = [], 0
    while got < n:
        chunk = os.read(fd, n - got)
        if not chunk:
            return None
        parts.append(chunk)
        got += len(chunk)
    return b"".join(parts)


def _read_frame(fd: int) -> bytes | None:
    """One ``u32 length || payload`` frame from ``fd``, or ``None`` at the end of the stream."""
    head = _read_exact(fd, _LEN.size)
    if head is None:
        return None
    (n,) = _LEN.unpack(head)
    return _read_exact(fd, n) if n else b""


def _write_frame(fd: int, payload: bytes) -> None:
    data = memoryview(_LEN.pack(len(payload)) + payload)
    while data:
        data = data[os.write(fd, data) :]


# -- the worker process ---------------------------------------------------------------------------------


def _rows_view(mm: mmap.mmap, rows: int, length: int, word: np.dtype[Any]) -> np.ndarray:
    return np.frombuffer(mm, dtype=word, count=rows * length).reshape(rows, length)


def serve(stdin: int, stdout: int, encryptor: Callable[[bytes, str, int], Any]) -> None:
    """The worker's loop: read tasks from ``stdin`` until it closes, expand them, report on ``stdout``."""
    maps: dict[str, mmap.mmap] = {}
    pending: deque[bytes] = deque()  # tasks that arrived while another was expanding
    _write_frame(stdout, b"R")
    frame = _read_frame(stdin)
    while frame is not None:
        if frame[:1] == b"F":
            maps.pop(frame[1:].decode(), None)  # unmapped once nothing refers to it
        elif frame[:1] == b"T":  # anything else is a cancel for a task that already ended
            task_id = _ID.unpack_from(frame, 1)[0]
            try:
                status, expanded = _expand(frame, maps, pending, stdin, stdout, encryptor)
            except Exception as exc:  # noqa: BLE001 - reported to the parent, whose clients expand their own
                print(f"securefgl mask worker: task {task_id} failed: {exc!r}", file=sys.stderr)
                status, expanded = _FAILED, 0
            _write_frame(stdout, b"E" + _END.pack(task_id, status, expanded))
        frame = pending.popleft() if pending else _read_frame(stdin)


def _expand(
    frame: bytes,
    maps: dict[str, mmap.mmap],
    pending: deque[bytes],
    stdin: int,
    stdout: int,
    encryptor: Callable[[bytes, str, int], Any],
) -> tuple[int, int]:
    """Expand one task into its rows: ``(status, streams expanded)``; tasks that arrive meanwhile go to
    ``pending``."""
    task_id, word_bytes, algo, length, rows = _TASK.unpack_from(frame, 1)
    pos = 1 + _TASK.size
    (plen,) = struct.unpack_from(">H", frame, pos)
    path = frame[pos + 2 : pos + 2 + plen].decode()
    pos += 2 + plen
    jobs: list[list[tuple[bytes, bool]]] = []
    for _ in range(rows):
        n_add, n_sub = _ROW.unpack_from(frame, pos)
        pos += _ROW.size
        keys = [frame[pos + i * _KEY : pos + (i + 1) * _KEY] for i in range(n_add + n_sub)]
        pos += (n_add + n_sub) * _KEY
        jobs.append([(k, i < n_add) for i, k in enumerate(keys)])
    word = np.dtype(f"u{word_bytes}")
    mm = maps.get(path)
    if mm is None:
        with open(path, "r+b") as fh:
            mm = maps[path] = mmap.mmap(fh.fileno(), 0)
    view = _rows_view(mm, rows, length, word)
    users: dict[bytes, list[tuple[int, bool]]] = {}
    left = [len(job) for job in jobs]
    for r, job in enumerate(jobs):
        view[r].fill(0)
        for k, adds in job:
            users.setdefault(k, []).append((r, adds))
        if not job:
            _write_frame(stdout, b"D" + _DONE.pack(task_id, r))
    scratch = np.empty(length, dtype=word)
    out = scratch.view(np.uint8).data
    zeros = bytes(scratch.nbytes)
    algorithm = ALGORITHMS[algo]
    expanded = 0
    for job in jobs:
        for k, _ in job:
            stream_users = users.pop(k, None)
            if stream_users is None:
                continue  # expanded already, for the other client of its pair
            if select.select([stdin], [], [], 0)[0]:
                nxt = _read_frame(stdin)
                if nxt is None:
                    sys.exit(0)  # the parent is gone
                if nxt[:1] == b"C" and _ID.unpack_from(nxt, 1)[0] == task_id:
                    view.fill(0)
                    return _CANCELLED, expanded
                if nxt[:1] == b"F":
                    maps.pop(nxt[1:].decode(), None)  # never this task's: the parent forgets only idle maps
                elif nxt[:1] == b"T":
                    pending.append(nxt)
            if length:
                encryptor(k, algorithm, 0).update_into(zeros, out)
            expanded += 1
            for r, adds in stream_users:
                (np.add if adds else np.subtract)(view[r], scratch, out=view[r])
                left[r] -= 1
                if left[r] == 0:
                    _write_frame(stdout, b"D" + _DONE.pack(task_id, r))
    return _OK, expanded


# -- the simulating process's side ----------------------------------------------------------------------


@dataclass(eq=False)
class _Map:
    """A shared file-backed map the worker writes rows into; ``busy`` while a task's rows in it are in use."""

    mm: mmap.mmap
    path: str
    unlinked: bool = False
    busy: bool = True


@dataclass
class WorkerTask:
    """One announcement's expansion in the worker: its rows, which are done, and how it ended."""

    task_id: int
    rows: np.ndarray
    map: _Map
    done: set[int] = field(default_factory=set)
    ended: bool = False
    status: int | None = None
    expanded: int = 0

    @property
    def ok(self) -> bool:
        """Whether the task ended with every row expanded."""
        return self.ended and self.status == _OK


class MaskWorker:
    """The worker process and the shared map it writes into; see the module docstring.

    Build it with :func:`mask_worker` (one per simulating process). Thread-safe: one lock around the pipes.
    """

    def __init__(self) -> None:
        self._proc = subprocess.Popen(
            [sys.executable, str(Path(__file__).resolve())],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            bufsize=0,
            close_fds=True,
        )
        assert self._proc.stdin is not None and self._proc.stdout is not None
        self._in, self._out = self._proc.stdin.fileno(), self._proc.stdout.fileno()
        self._lock = threading.Lock()
        self._ready = False
        self.alive = True
        self._next_id = 0
        self._tasks: dict[int, WorkerTask] = {}
        self._maps: list[_Map] = []

    @property
    def ready(self) -> bool:
        """Whether the worker has started (reads its greeting if it is waiting, without blocking)."""
        with self._lock:
            while self.alive and not self._ready and select.select([self._out], [], [], 0)[0]:
                self._pump()
            return self.alive and self._ready

    def _close(self, why: str) -> None:
        if self.alive:
            logger.warning("the mask worker process stopped (%s); clients expand their own masks", why)
        self.alive = False
        for task in self._tasks.values():
            task.ended = True
        self._tasks.clear()
        with contextlib.suppress(OSError):
            self._proc.stdin.close()  # type: ignore[union-attr]
        self._proc.kill()
        self._proc.wait()
        self._drop_maps()

    def _drop_maps(self) -> None:
        for m in self._maps:
            self._unlink(m)
        self._maps.clear()  # numpy views of a map keep it mapped until they are gone

    @staticmethod
    def _unlink(m: _Map) -> None:
        if not m.unlinked:
            Path(m.path).unlink(missing_ok=True)
            m.unlinked = True

    def _pump(self) -> None:
        """Read one message from the worker (blocking) and record it; any failure closes the worker."""
        frame = _read_frame(self._out)
        if frame is None:
            self._close(f"exit status {self._proc.poll()}")
            return
        kind = frame[:1]
        if kind == b"R":
            self._ready = True
            return
        if kind == b"D" and len(frame) == 1 + _DONE.size:
            task_id, row = _DONE.unpack_from(frame, 1)
            if (task := self._tasks.get(task_id)) is not None:
                self._unlink(task.map)  # the worker reports a row only once it has mapped the file
                task.done.add(row)
            return
        if kind == b"E" and len(frame) == 1 + _END.size:
            task_id, status, expanded = _END.unpack_from(frame, 1)
            if (task := self._tasks.pop(task_id, None)) is not None:
                if status != _FAILED:  # a task that did not fail had mapped its file
                    self._unlink(task.map)
                task.ended, task.status, task.expanded = True, status, expanded
            return
        self._close(f"an unexpected message {frame[:16]!r}")

    def _acquire(self, size: int) -> _Map:
        """An idle map of at least ``size`` bytes, else a new one (idle maps too small for it are forgotten, by
        the worker too). A map serves one task at a time, so two announcements in flight (two protocol objects in
        one process) never share rows."""
        for m in self._maps:
            if not m.busy and len(m.mm) >= size:
                m.busy = True
                return m
        for m in [m for m in self._maps if not m.busy]:
            self._maps.remove(m)
            self._unlink(m)
            with contextlib.suppress(OSError):
                _write_frame(self._in, b"F" + m.path.encode())
        base = _SHM_DIR if os.path.isdir(_SHM_DIR) else None
        fd, path = tempfile.mkstemp(prefix="securefgl-masks-", dir=base)  # mode 0600
        try:
            os.ftruncate(fd, size)
            m = _Map(mmap.mmap(fd, size), path)
        finally:
            os.close(fd)
        self._maps.append(m)
        return m

    def start(
        self,
        jobs: Sequence[tuple[Sequence[bytes], Sequence[bytes]]],
        length: int,
        word: np.dtype[Any],
        prg: str,
    ) -> WorkerTask | None:
        """Send one announcement's jobs (per row: the keys added, the keys subtracted); ``None`` if the worker
        is gone."""
        with self._lock:
            if not self.alive:
                return None
            word = np.dtype(word)
            m = self._acquire(max(1, len(jobs) * int(length) * word.itemsize))
            self._next_id += 1
            task = WorkerTask(self._next_id, _rows_view(m.mm, len(jobs), int(length), word), m)
            path = m.path.encode()
            parts = [
                b"T",
                _TASK.pack(task.task_id, word.itemsize, ALGORITHMS.index(prg), int(length), len(jobs)),
            ]
            parts.append(struct.pack(">H", len(path)) + path)
            for add, sub in jobs:
                parts.append(_ROW.pack(len(add), len(sub)))
                parts.extend(bytes(k) for k in (*add, *sub))
            self._tasks[task.task_id] = task
            try:
                _write_frame(self._in, b"".join(parts))
            except OSError as exc:
                self._close(f"the pipe broke ({exc})")
                return None
            return task

    def wait_row(self, task: WorkerTask, row: int) -> bool:
        """Wait until ``row`` of ``task`` is expanded (``True``) or the task ends without it (``False``)."""
        with self._lock:
            while row not in task.done and not task.ended and self.alive:
                self._pump()
            return row in task.done

    def cancel(self, task: WorkerTask) -> None:
        """Stop ``task`` between two keys and wait for its end: nothing writes its rows afterwards."""
        with self._lock:
            if task.ended or not self.alive:
                return
            try:
                _write_frame(self._in, b"C" + _ID.pack(task.task_id))
            except OSError as exc:
                self._close(f"the pipe broke ({exc})")
                return
            while not task.ended and self.alive:
                self._pump()

    def release(self, task: WorkerTask) -> None:
        """``task``'s rows are no longer in use (call after :meth:`cancel`): its map can serve the next task."""
        with self._lock:
            task.map.busy = False

    def stop(self) -> None:
        """End the worker (it exits when its standard input closes)."""
        with self._lock:
            if self.alive:
                self.alive = False
                with contextlib.suppress(OSError):
                    self._proc.stdin.close()  # type: ignore[union-attr]
                try:
                    self._proc.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    self._proc.kill()
                    self._proc.wait()
            self._drop_maps()


_WORKER: MaskWorker | None = None
_WORKER_FAILED = False
_WORKER_LOCK = threading.Lock()


def mask_worker() -> MaskWorker | None:
    """This process's mask worker, started on first use; ``None`` where none can run (not POSIX, or it failed:
    the thread backend is used instead)."""
    global _WORKER, _WORKER_FAILED
    with _WORKER_LOCK:
        if _WORKER is not None and not _WORKER.alive:
            _WORKER, _WORKER_FAILED = None, True
        if _WORKER is None and not _WORKER_FAILED and os.name == "posix":
            try:
                _WORKER = MaskWorker()
            except OSError as exc:
                logger.warning("no mask worker process (%s); masks are expanded on a thread", exc)
                _WORKER_FAILED = True
            else:
                atexit.register(_WORKER.stop)
        return _WORKER


if __name__ == "__main__":  # the worker: this directory is sys.path[0]; import nothing of the package
    from _keystream import encryptor  # type: ignore[import-not-found]  # run as a script: a top-level module

    serve(sys.stdin.fileno(), sys.stdout.fileno(), encryptor)
