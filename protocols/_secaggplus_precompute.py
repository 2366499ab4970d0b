"""Hazmat: the pairwise masks of the next resumed use expanded ahead, on a background thread, in simulation.

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
bit-identical with and without it. Each key still expands exactly one stream that is used: a client that takes
its sum does not expand its keys again, and one that does not take it expands keys of another use id, whose
precomputed sum is wiped unused. Every precomputed sum is wiped (zeroed) once taken or discarded.
"""

from __future__ import annotations

import itertools
import logging
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from securefgl.protocols._prg import expander_for, ring_dtype
from securefgl.protocols._secaggplus_resume import ClientSession, use_id_for
from securefgl.protocols._secaggplus_session import pair_keys
from securefgl.protocols.messages import ResumeRequest

__all__ = ["MAX_PRECOMPUTED_BYTES", "MaskJob", "MaskPrecompute", "pairwise_jobs"]

#: Most bytes of mask sums expanded ahead at once (100 clients of FedAvg's GCN on Cora hold 74 MB); the clients
#: beyond it expand their masks when their request arrives, as without an announcement.
MAX_PRECOMPUTED_BYTES = 512 * 2**20

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class MaskJob:
    """One client's mask sum of one use: the keys it adds and subtracts, bound to the use id."""

    use_id: bytes
    add: tuple[bytes, ...]
    subtract: tuple[bytes, ...]


class MaskPrecompute:
    """Expands the :class:`MaskJob` of every client (of the first :data:`MAX_PRECOMPUTED_BYTES` worth of them),
    claimed one by one by a background thread and by :meth:`take` (a client whose sum nobody has started expands
    it itself, on the protocol's workers).

    Args:
        jobs: client -> its job.
        length: the masked vector's length.
        ring_bits: the ring's bits.
        prg: the PRG algorithm.
        workers: threads a client that expands its own sum in :meth:`take` splits it over.
    """

    def __init__(
        self, jobs: Mapping[int, MaskJob], length: int, ring_bits: int, prg: str, workers: int = 1
    ) -> None:
        self.length, self.ring_bits, self.prg, self.workers = int(length), int(ring_bits), prg, int(workers)
        size = max(1, self.length * ring_dtype(self.ring_bits).itemsize)
        self.jobs = dict(list(jobs.items())[: MAX_PRECOMPUTED_BYTES // size])
        self._order = list(self.jobs)
        self._next = itertools.count()
        self._lock = threading.Lock()
        self._claimed: set[int] = set()
        self._done = {c: threading.Event() for c in self.jobs}
        self._sums: dict[int, np.ndarray] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="securefgl-mask-precompute", daemon=True)
        self._thread.start()

    def _claim(self, client: int | None = None) -> int | None:
        """Claim ``client`` (or the next unclaimed client); ``None`` if it is (they are all) taken."""
        with self._lock:
            if client is not None:
                if client in self._claimed:
                    return None
                self._claimed.add(client)
                return client
            while (i := next(self._next)) < len(self._order):
                c = self._order[i]
                if c not in self._claimed:
                    self._claimed.add(c)
                    return c
            return None

    def _expand(self, client: int, workers: int) -> None:
        try:
            job = self.jobs[client]
            ex = expander_for(self.length, self.ring_bits, algorithm=self.prg)
            acc = np.zeros(self.length, dtype=ex.dtype)
            ex.combine(acc, job.add, job.subtract, workers=workers)
            self._sums[client] = acc
        finally:  # a failed expansion leaves no sum: the client expands its own masks
            self._done[client].set()

    def _run(self) -> None:
        try:
            while not self._stop.is_set() and (c := self._claim()) is not None:
                self._expand(c, 1)  # one thread: the other cores train
        except Exception:  # e.g. out of memory: the clients left expand their own masks, as unannounced
            logger.warning("expanding masks ahead stopped; the clients expand their own", exc_info=True)

    def take(
        self, client: int, use_id: bytes, add: Sequence[bytes], subtract: Sequence[bytes]
    ) -> np.ndarray | None:
        """The mask sum of ``client`` for exactly this use id and these keys, or ``None`` (no such job: the
        caller expands its masks itself). The returned array is the caller's; wipe it after use."""
        job = self.jobs.get(client)
        if job is None or job != MaskJob(bytes(use_id), tuple(add), tuple(subtract)):
            return None
        if self._claim(client) is not None:
            self._expand(client, self.workers)
        self._done[client].wait()
        with self._lock:
            return self._sums.pop(client, None)

    def discard(self) -> None:
        """Stop the background thread and wipe every sum nobody took."""
        self._stop.set()
        self._thread.join()
        with self._lock:
            left = list(self._sums.values())
            self._sums.clear()
        for acc in left:
            acc.fill(0)


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
