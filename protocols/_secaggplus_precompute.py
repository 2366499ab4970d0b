"""Hazmat: the pairwise masks of the next resumed use expanded ahead, in a worker process or a thread, in simulation.

.. warning::
    Low-level building block of :class:`~securefgl.protocols.SecAggPlus`; not a general-purpose API.

In a resumed use of a session (:mod:`._secaggplus_resume`; optimistic or not) a client's masked input is its
encoding plus its self mask (none in an optimistic use) plus
:math:`\\sum_{v > u} \\mathrm{PRG}(k_{uv}) - \\sum_{v < u} \\mathrm{PRG}(k_{uv})` over its neighbours, and every
key :math:`k_{uv}` is fixed by the session's secrets and the use id, which the server's ``resume`` request
(session id, use counter, round, ring, length, PRG, recipient, schema fingerprint) and the client's round context
fix. None of it depends on the input. A simulation that knows the next sum before its clients train
(:meth:`SecAggPlus.prepare <securefgl.protocols.SecAggPlus.prepare>`) can therefore expand every client's
pairwise mask sum while the clients train, on a core that training leaves idle; the client adds the ready sum to
its encoding and expands only its self mask (drawn from a fresh seed at the request, as before).

A client takes a precomputed sum only for exactly the use id and the key lists it derived itself from the
request it received (:meth:`MaskPrecompute.take`); anything else (another schema, a dropout that ended the
session, a different context) finds no match and expands its masks as usual, so the sums and the messages are
bit-identical with and without it. A pairwise key is the same for both clients of its pair, and the simulating
process holds both clients' sessions, so its stream is expanded once and added to one sum and subtracted from the
other: half the keystream of expanding every client's masks apart (what a deployed client does). No stream is
used for two different masks: a client that takes its sum does not expand its keys again, and one that does not
take it expands keys of another use id, whose precomputed sum is wiped unused. Every precomputed sum is wiped
(zeroed) once taken or discarded.

:func:`start_precompute` hands the expansion to the mask worker process (:class:`WorkerMaskPrecompute`,
:mod:`._mask_worker`) once it has started, and to a thread of this process (:class:`MaskPrecompute`) until then
or where none runs. The process is the default because a thread takes the interpreter's lock between every two
keystreams and numpy calls, thousands of times a round at 100 clients, which stalls the clients' training and
uploads on the main thread (see :mod:`._mask_worker` for the measurement); both give the same words.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from securefgl.protocols._mask_worker import MaskWorker, mask_worker
from securefgl.protocols._prg import expander_for, ring_dtype
from securefgl.protocols._secaggplus_resume import ClientSession, use_id_for
from securefgl.protocols._secaggplus_session import pair_keys
from securefgl.protocols.messages import ResumeRequest

__all__ = [
    "BACKEND",
    "MAX_PRECOMPUTED_BYTES",
    "MaskJob",
    "MaskPrecompute",
    "WorkerMaskPrecompute",
    "pairwise_jobs",
    "start_precompute",
    "warm_up",
]

#: Most bytes of mask sums expanded ahead at once (100 clients of FedAvg's GCN on Cora hold 74 MB); the clients
#: beyond it expand their masks when their request arrives, as without an announcement.
MAX_PRECOMPUTED_BYTES = 512 * 2**20
#: Where masks are expanded ahead: ``"auto"`` (the mask worker process where it runs, else a thread) or
#: ``"thread"``.
BACKEND = "auto"

logger = logging.getLogger(__name__)


def _capped(jobs: Mapping[int, MaskJob], length: int, ring_bits: int) -> dict[int, MaskJob]:
    """The first jobs whose sums fit in :data:`MAX_PRECOMPUTED_BYTES`."""
    size = max(1, length * ring_dtype(ring_bits).itemsize)
    return dict(list(jobs.items())[: MAX_PRECOMPUTED_BYTES // size])


@dataclass(frozen=True)
class MaskJob:
    """One client's mask sum of one use: the keys it adds and subtracts, bound to the use id."""

    use_id: bytes
    add: tuple[bytes, ...]
    subtract: tuple[bytes, ...]


class MaskPrecompute:
    """Expands the :class:`MaskJob` of every client (of the first :data:`MAX_PRECOMPUTED_BYTES` worth of them) on
    a background thread, client after client, while :meth:`take` lets a client whose sum is not ready work on it
    too.

    A pairwise key is the same for both parties of its pair (one adds its stream, the other subtracts it), so
    each key is expanded once, by whichever thread claims it first, and applied to the sum of every client whose
    job holds it: half the keystream of expanding every client's job on its own. The sums are the same words
    either way (the accumulation wraps in the machine word, and addition modulo :math:`2^{64}` or
    :math:`2^{32}` does not depend on the order).

    Args:
        jobs: client -> its job.
        length: the masked vector's length.
        ring_bits: the ring's bits.
        prg: the PRG algorithm.
    """

    def __init__(self, jobs: Mapping[int, MaskJob], length: int, ring_bits: int, prg: str) -> None:
        self.length, self.ring_bits, self.prg = int(length), int(ring_bits), prg
        self.jobs = _capped(jobs, self.length, self.ring_bits)
        #: key -> the clients whose job holds it, each with whether it adds (else subtracts) the key's stream
        self._users: dict[bytes, list[tuple[int, bool]]] = {}
        self._left: dict[int, int] = {}
        for c, job in self.jobs.items():
            for keys, adds in ((job.add, True), (job.subtract, False)):
                for k in keys:
                    self._users.setdefault(k, []).append((c, adds))
            self._left[c] = len(job.add) + len(job.subtract)
        self._lock = threading.Lock()
        self._claimed: set[bytes] = set()
        self._failed: set[int] = set()
        self._sums: dict[int, np.ndarray] = {}
        self._sum_locks = {c: threading.Lock() for c in self.jobs}
        self._done = {c: threading.Event() for c in self.jobs}
        for c, left in self._left.items():
            if not left:
                self._sums[c] = np.zeros(self.length, dtype=ring_dtype(self.ring_bits))
                self._done[c].set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="securefgl-mask-precompute", daemon=True)
        self._thread.start()

    def _claim(self, key: bytes) -> list[tuple[int, bool]] | None:
        """The users of ``key`` if this thread is the first to claim it, else ``None``."""
        with self._lock:
            if key in self._claimed:
                return None
            self._claimed.add(key)
            return self._users[key]

    def _apply(self, stream: np.ndarray, users: list[tuple[int, bool]]) -> None:
        """Add (or subtract) one key's stream to the sum of each of its users; a sum whose last key this was is
        ready."""
        for c, adds in users:
            with self._sum_locks[c]:
                if c in self._failed:
                    continue
                acc = self._sums.get(c)
                if acc is None:
                    acc = self._sums[c] = np.zeros(self.length, dtype=stream.dtype)
                (np.add if adds else np.subtract)(acc, stream, out=acc)
            with self._lock:
                self._left[c] -= 1
                if self._left[c] == 0:
                    self._done[c].set()

    def _fail(self, users: list[tuple[int, bool]]) -> None:
        """A key that could not be expanded: its users get no sum (they expand their own masks)."""
        for c, _ in users:
            with self._sum_locks[c]:
                self._failed.add(c)
                acc = self._sums.pop(c, None)
            if acc is not None:
                acc.fill(0)
            self._done[c].set()

    def _turn(self, client: int, stoppable: bool = False) -> None:
        """Expand every key of ``client``'s job that no thread has claimed yet (for all of its users); a
        ``stoppable`` turn (the background thread's) ends early once :meth:`discard` is called."""
        job = self.jobs[client]
        ex = expander_for(self.length, self.ring_bits, algorithm=self.prg)  # this thread's
        for key in (*job.add, *job.subtract):
            if stoppable and self._stop.is_set():
                return
            users = self._claim(key)
            if users is None:
                continue
            try:
                self._apply(ex.keystream(key), users)
            except BaseException:
                self._fail(users)
                raise

    def _run(self) -> None:
        try:
            for c in self.jobs:
                self._turn(c, stoppable=True)
        except Exception:  # e.g. out of memory: the clients left expand their own masks, as unannounced
            logger.warning("expanding masks ahead stopped; the clients expand their own", exc_info=True)

    def take(
        self, client: int, use_id: bytes, add: Sequence[bytes], subtract: Sequence[bytes]
    ) -> np.ndarray | None:
        """The mask sum of ``client`` for exactly this use id and these keys, or ``None`` (no such job, or its
        expansion failed: the caller expands its masks itself). The returned array is the caller's; wipe it after
        use."""
        job = self.jobs.get(client)
        if job is None or job != MaskJob(bytes(use_id), tuple(add), tuple(subtract)):
            return None
        if not self._done[client].is_set():
            try:
                self._turn(client)
            except Exception:  # its own keys failed: it expands its masks itself
                logger.warning(
                    "expanding masks ahead failed; client %s expands its own", client, exc_info=True
                )
        self._done[client].wait()
        with self._sum_locks[client]:
            return None if client in self._failed else self._sums.pop(client, None)

    def discard(self) -> None:
        """Stop the background thread and wipe every sum nobody took."""
        self._stop.set()
        self._thread.join()
        with self._lock:
            left = list(self._sums.values())
            self._sums.clear()
        for acc in left:
            acc.fill(0)


class WorkerMaskPrecompute:
    """The same as :class:`MaskPrecompute`, with the expansion in the mask worker process (:mod:`._mask_worker`),
    which takes nothing from the interpreter this process runs its clients in.

    A client whose row the worker has finished takes it (a view of the shared map: the caller adds it and wipes
    it, as the thread's sums); a row the worker does not finish (it stopped, or the task failed) is ``None``, and
    that client expands its masks itself.

    Args:
        jobs: client -> its job.
        length: the masked vector's length.
        ring_bits: the ring's bits.
        prg: the PRG algorithm.
        worker: the worker process.
    """

    def __init__(
        self, jobs: Mapping[int, MaskJob], length: int, ring_bits: int, prg: str, worker: MaskWorker
    ) -> None:
        word = ring_dtype(int(ring_bits))
        self.jobs = _capped(jobs, int(length), int(ring_bits))
        self._row = {c: r for r, c in enumerate(self.jobs)}
        self._taken: set[int] = set()
        self._worker = worker
        self.task = worker.start([(j.add, j.subtract) for j in self.jobs.values()], int(length), word, prg)
        #: After :meth:`discard`: how many streams the worker expanded, and whether it finished every row.
        self.expanded, self.finished = 0, False

    def take(
        self, client: int, use_id: bytes, add: Sequence[bytes], subtract: Sequence[bytes]
    ) -> np.ndarray | None:
        """As :meth:`MaskPrecompute.take`; the array is a row of the worker's map, valid until the next
        announcement."""
        job = self.jobs.get(client)
        if self.task is None or job is None or job != MaskJob(bytes(use_id), tuple(add), tuple(subtract)):
            return None
        row = self._row[client]
        if row in self._taken or not self._worker.wait_row(self.task, row):
            return None
        self._taken.add(row)
        taken: np.ndarray = self.task.rows[row]
        return taken

    def discard(self) -> None:
        """Stop the worker's task and wipe every row nobody took."""
        if self.task is None:
            return
        self._worker.cancel(self.task)
        self.expanded, self.finished = self.task.expanded, self.task.ok
        for r in range(len(self.jobs)):
            if r not in self._taken:
                self.task.rows[r].fill(0)
        self._worker.release(self.task)
        self.task = None


def warm_up() -> None:
    """Start the mask worker process ahead of the first announcement (it is ready in a fraction of a second, and
    :func:`start_precompute` uses a thread until it is)."""
    if BACKEND != "thread":
        mask_worker()


def start_precompute(
    jobs: Mapping[int, MaskJob], length: int, ring_bits: int, prg: str
) -> MaskPrecompute | WorkerMaskPrecompute:
    """Expand ``jobs`` ahead: in the mask worker process where one runs and has started
    (:func:`._mask_worker.mask_worker`; :data:`BACKEND` ``"auto"``), else on a thread of this process."""
    if BACKEND != "thread":
        worker = mask_worker()
        if worker is not None and worker.ready:
            return WorkerMaskPrecompute(jobs, length, ring_bits, prg, worker)
    return MaskPrecompute(jobs, length, ring_bits, prg)


def pairwise_jobs(
    request: ResumeRequest, sessions: Mapping[int, ClientSession], contexts: Mapping[int, bytes]
) -> dict[int, MaskJob]:
    """Every client's :class:`MaskJob` for the resumed use that ``request`` opens: the use id and the
    pairwise keys each client derives from it (:meth:`UseLifecycle._resume
    <securefgl.protocols._secaggplus_client_use.UseLifecycle._resume>`), its masks added for higher
    neighbours and subtracted for lower ones, in its neighbourhood's order (no recipient: no pad)."""
    jobs = {}
    for c, session in sessions.items():
        uid = use_id_for(request, contexts[c])
        keys = pair_keys(session.mask_prk, uid, request.round_index, c)
        peers = [v for v in session.neighbours if v != c]
        jobs[c] = MaskJob(uid, tuple(keys[v] for v in peers if v > c), tuple(keys[v] for v in peers if v < c))
    return jobs
