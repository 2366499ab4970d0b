"""Hazmat: whether a vector's mask expansion or running sum is worth splitting over threads, learnt by timing.

The masking protocols cut a long vector into pieces that worker threads claim
(:func:`~securefgl.protocols._prg.piece_bounds`, :func:`~securefgl.protocols._prg.run_claimed`). Each piece
costs its thread two hand-offs of the GIL per key or summed vector (around the cipher's ``update_into`` and
around the numpy operation), so a split pays only when the pieces are long enough to repay them, and where
that point lies depends on the machine, not the code: on this project's 2-core virtual machine, 100 keys over
a vector of 100,000 ``uint32`` words took 10.1-11.0 ms on one thread and 14.8-14.9 ms split in two (the split
0.68-0.74x as fast) on 2026-12-05, where the measurements behind
:data:`~securefgl.protocols._prg.SPLIT_MIN_BYTES` (an earlier day, the same machine type) had split 184 KiB
pieces 1.5x faster than one thread; that day 738 KiB vectors were level and 1.2 MiB ones split 1.56x faster.

A fixed threshold is therefore wrong somewhere. :class:`SplitPlanner` decides per kind of work and shape from
the wall time of the real calls: while it warms up, a call of several keys or vectors runs half of them each
way (a call of one alternates), until each way has :data:`WARMUP` timings; then it takes the faster by the
median of each one's last :data:`WINDOW` timings (per key or vector, so calls of different sizes compare),
trying the other one every :data:`EXPLORE_EVERY` decisions so that a change of load or machine is noticed.
Only pieces shorter than :data:`SPLIT_ALWAYS_BYTES` are planned: longer ones always split (their hand-offs are
a small part of the work). Either way the result is the same bit for bit; only the time differs.
"""

from __future__ import annotations

import os
import statistics
import threading
import time
from collections import deque
from collections.abc import Callable

__all__ = [
    "EXPLORE_EVERY",
    "FEW_UNITS",
    "PlanKey",
    "SPLIT_ALWAYS_BYTES",
    "WARMUP",
    "WINDOW",
    "SplitPlan",
    "SplitPlanner",
    "planner",
]

#: Pieces of at least this many bytes always split: at 2 MiB per piece two threads expanded 100 keys 1.9x as
#: fast as one on this project's VM, and the hand-offs are a small part of such work on any machine.
SPLIT_ALWAYS_BYTES = 1 << 20
#: Timings of each choice gathered (alternating) before the planner prefers one.
WARMUP = 3
#: The last timings of each choice that its median is taken over.
WINDOW = 5
#: Every this many decisions after the warm-up, the choice that is not preferred is tried once.
EXPLORE_EVERY = 25
#: Calls of fewer keys or vectors than this are timed apart from larger ones.
FEW_UNITS = 8


#: A kind of work at one shape: (kind, words, bytes per word, pieces of the split, FEW_UNITS or more units).
PlanKey = tuple[str, int, int, int, bool]


class _Record:
    """The timings and decisions of one kind of work at one shape."""

    __slots__ = ("decisions", "timings")

    def __init__(self) -> None:
        self.timings: dict[bool, deque[float]] = {False: deque(maxlen=WINDOW), True: deque(maxlen=WINDOW)}
        self.decisions = 0

    def warm(self) -> bool:
        """Whether each choice has :data:`WARMUP` timings."""
        return min(len(t) for t in self.timings.values()) >= WARMUP

    def preferred(self) -> bool | None:
        """The faster choice by median (``True``: split), or ``None`` while warming up."""
        if not self.warm():
            return None
        return statistics.median(self.timings[True]) < statistics.median(self.timings[False])


class SplitPlan:
    """One call's plan: one or two parts, each a share of the call's units (keys expanded, vectors summed) run
    over its own word ranges and timed.

    While the planner warms up, a call of two or more units runs half of them split and half on one thread
    (which half goes first alternates), so a sum made once per round (the server's) is timed both ways at once.

    Attributes:
        parts: ``(bounds, lo, hi, split)``: run units ``lo`` to ``hi - 1`` over the ``[lo, hi)`` word ranges
            ``bounds`` (for :func:`~securefgl.protocols._prg.run_claimed`); ``split`` says whether those are the
            split ranges.
    """

    __slots__ = ("_key", "_planner", "parts")

    def __init__(
        self,
        parts: list[tuple[list[tuple[int, int]], int, int, bool]],
        planner: SplitPlanner | None,
        key: PlanKey | None,
    ) -> None:
        self.parts = parts
        self._planner = planner
        self._key = key

    def execute(self, work: Callable[[list[tuple[int, int]], int, int], None]) -> None:
        """``work(bounds, lo, hi)`` for every part, timing each and reporting its time per unit."""
        for bounds, lo, hi, split in self.parts:
            start = time.perf_counter()
            work(bounds, lo, hi)
            if self._planner is not None and self._key is not None and hi > lo:
                self._planner.record(self._key, split, (time.perf_counter() - start) / (hi - lo))


class SplitPlanner:
    """Chooses between one thread and a split for each kind of work and shape, from timings of real calls.

    Thread-safe: the masking protocols' clients, server and background expansion share one planner
    (:func:`planner`).
    """

    def __init__(self) -> None:
        self._records: dict[PlanKey, _Record] = {}
        self._lock = threading.Lock()
        #: Whether decisions are learnt; when false every plannable split is taken (tests of the split path).
        self.enabled = True

    def plan(self, kind: str, split: list[tuple[int, int]], itemsize: int, units: int) -> SplitPlan:
        """How to run ``units`` keys or vectors of ``kind`` work: over ``split`` (the pieces from
        :func:`~securefgl.protocols._prg.piece_bounds`), over the whole vector in one range, or half each way.

        Args:
            kind: the work (``"combine"``, ``"sum"``): kinds are timed apart.
            split: the pieces a split would use; one piece means nothing to decide.
            itemsize: bytes per word, to tell long pieces (always split) from plannable ones.
            units: keys expanded or vectors summed by this call. Calls of fewer than
                :data:`FEW_UNITS` are timed apart from larger ones (the hand-off to a sleeping thread is a
                fixed cost that few units repay less).
        """
        units = max(int(units), 0)
        if len(split) < 2:
            return SplitPlan([(split, 0, units, False)], None, None)
        longest = max(hi - lo for lo, hi in split)
        if longest * itemsize >= SPLIT_ALWAYS_BYTES or not self.enabled:
            return SplitPlan([(split, 0, units, True)], None, None)
        whole = [(split[0][0], split[-1][1])]
        key = (kind, whole[0][1] - whole[0][0], itemsize, len(split), units >= FEW_UNITS)
        with self._lock:
            rec = self._records.get(key)
            if rec is None:
                rec = self._records[key] = _Record()
            rec.decisions += 1
            if not rec.warm() and units >= 2:
                half = units // 2
                first, second = (split, whole) if rec.decisions % 2 else (whole, split)
                return SplitPlan(
                    [(first, 0, half, first is split), (second, half, units, second is split)], self, key
                )
            use_split = self._choose(rec)
        return SplitPlan([(split if use_split else whole, 0, units, use_split)], self, key)

    def record(self, key: PlanKey, split: bool, seconds_per_unit: float) -> None:
        """Add one run's time per unit of work to the timings of its choice."""
        with self._lock:
            rec = self._records.get(key)
            if rec is not None:
                rec.timings[split].append(seconds_per_unit)

    def preferred(self, key: PlanKey) -> bool | None:
        """The choice the planner prefers for ``key`` (``True``: split), or ``None`` while it is warming up."""
        with self._lock:
            rec = self._records.get(key)
            return None if rec is None else rec.preferred()

    @staticmethod
    def _choose(rec: _Record) -> bool:
        best = rec.preferred()
        if best is None:  # single units while warming up: alternate, the split first
            return len(rec.timings[True]) <= len(rec.timings[False])
        return (not best) if rec.decisions % EXPLORE_EVERY == 0 else best

    def summary(self) -> list[dict[str, object]]:
        """What has been learnt, one row per kind of work and shape (for benchmark reports): the median time
        per key or vector of each choice in microseconds, and the choice taken now."""
        with self._lock:
            items = [
                (key, list(rec.timings[False]), list(rec.timings[True]), rec.preferred())
                for key, rec in self._records.items()
            ]
        rows: list[dict[str, object]] = []
        for (kind, words, itemsize, pieces, many), one, split, best in items:
            rows.append(
                {
                    "kind": kind,
                    "words": words,
                    "word_bytes": itemsize,
                    "pieces": pieces,
                    "units": f">= {FEW_UNITS}" if many else f"< {FEW_UNITS}",
                    "one_thread_us": round(1e6 * statistics.median(one), 1) if one else None,
                    "split_us": round(1e6 * statistics.median(split), 1) if split else None,
                    "choice": "warming up" if best is None else ("split" if best else "one thread"),
                }
            )
        return rows

    def reset(self) -> None:
        """Forget every timing."""
        with self._lock:
            self._records.clear()


_PLANNER = SplitPlanner()


def _new_lock_in_child() -> None:
    """A forked child's copy of the lock may be held by a thread that does not exist there."""
    _PLANNER._lock = threading.Lock()


os.register_at_fork(after_in_child=_new_lock_in_child)


def planner() -> SplitPlanner:
    """The process-wide planner the masking protocols consult."""
    return _PLANNER
