"""Tests for the split planner: one thread or a split, learnt from the timings of real calls."""

from __future__ import annotations

import os

import numpy as np
import pytest

from securefgl.protocols import _prg
from securefgl.protocols._prg import MaskExpander, piece_bounds
from securefgl.protocols._split_planner import (
    EXPLORE_EVERY,
    FEW_UNITS,
    SPLIT_ALWAYS_BYTES,
    WARMUP,
    PlanKey,
    SplitPlan,
    SplitPlanner,
    planner,
)

SPLIT = [(0, 50_000), (50_000, 100_000)]  # two pieces of 200 KB of uint32 words: plannable
WHOLE = [(0, 100_000)]
KEY: PlanKey = ("combine", 100_000, 4, 2, True)  # 100 keys: not a "few units" call


def _feed(plan: SplitPlan, split_time: float, one_time: float) -> list[bool]:
    """Report every part of ``plan`` as taking the given time per unit of its choice; its parts' choices."""
    for *_, split in plan.parts:
        plan._planner.record(plan._key, split, split_time if split else one_time)  # type: ignore[union-attr]
    return [split for *_, split in plan.parts]


def test_a_call_of_many_units_is_timed_both_ways_while_warming_up() -> None:
    """The server's sum happens once a round: half its keys run split and half on one thread (alternating
    which half first), so three sums warm the planner up."""
    p = SplitPlanner()
    for call in range(WARMUP):
        plan = p.plan("combine", SPLIT, 4, 100)
        assert [(b, lo, hi) for b, lo, hi, _ in plan.parts] == (
            [(SPLIT, 0, 50), (WHOLE, 50, 100)] if call % 2 == 0 else [(WHOLE, 0, 50), (SPLIT, 50, 100)]
        )
        _feed(plan, split_time=2.0, one_time=1.0)
    assert p.preferred(KEY) is False
    later = [_feed(p.plan("combine", SPLIT, 4, 100), 2.0, 1.0)[0] for _ in range(2 * EXPLORE_EVERY)]
    assert 1 <= later.count(True) <= 3  # the split is tried now and then, not taken
    assert all(len(p.plan("combine", SPLIT, 4, 100).parts) == 1 for _ in range(3))


def test_single_units_alternate_and_a_change_of_machine_is_noticed() -> None:
    p = SplitPlanner()
    choices = [_feed(p.plan("sum", SPLIT, 4, 1), split_time=1.0, one_time=3.0)[0] for _ in range(2 * WARMUP)]
    assert choices == [True, False] * WARMUP
    key = ("sum", 100_000, 4, 2, False)
    assert p.preferred(key) is True
    for _ in range(6 * EXPLORE_EVERY):  # the split slows down (the machine got loaded)
        _feed(p.plan("sum", SPLIT, 4, 1), split_time=5.0, one_time=3.0)
    assert p.preferred(key) is False


def test_what_is_not_planned() -> None:
    p = SplitPlanner()
    assert p.plan("combine", [(0, 10)], 4, 3).parts == [([(0, 10)], 0, 3, False)]
    long_pieces = [(0, SPLIT_ALWAYS_BYTES // 4), (SPLIT_ALWAYS_BYTES // 4, SPLIT_ALWAYS_BYTES // 2)]
    assert all(p.plan("combine", long_pieces, 4, 3).parts == [(long_pieces, 0, 3, True)] for _ in range(9))
    p.enabled = False
    assert all(p.plan("combine", SPLIT, 4, 100).parts == [(SPLIT, 0, 100, True)] for _ in range(9))
    assert p.preferred(KEY) is None and not p._records


def test_kinds_shapes_and_call_sizes_are_timed_apart() -> None:
    p = SplitPlanner()
    for _ in range(WARMUP):
        _feed(p.plan("combine", SPLIT, 4, 100), split_time=2.0, one_time=1.0)
    assert p.preferred(KEY) is False
    assert p.preferred(("combine", 100_000, 4, 2, False)) is None  # a call of fewer than FEW_UNITS keys
    assert p.preferred(("sum", 100_000, 4, 2, True)) is None  # another kind
    _feed(p.plan("combine", SPLIT, 4, FEW_UNITS), 2.0, 1.0)
    assert p.preferred(KEY) is False  # FEW_UNITS keys or more share the server's timings
    p.reset()
    assert p.preferred(KEY) is None


def test_execute_times_each_part_per_unit_and_skips_empty_parts() -> None:
    p = SplitPlanner()
    seen: list[tuple[list[tuple[int, int]], int, int]] = []
    p.plan("combine", SPLIT, 4, 1).execute(lambda b, lo, hi: seen.append((b, lo, hi)))
    p.plan("combine", SPLIT, 4, 0).execute(lambda b, lo, hi: seen.append((b, lo, hi)))
    assert seen == [(SPLIT, 0, 1), (WHOLE, 0, 0)]
    rec = p._records[("combine", 100_000, 4, 2, False)]
    assert len(rec.timings[True]) == 1 and not rec.timings[False]  # the empty call recorded nothing


@pytest.mark.parametrize("adds", [0, 3, 5, 9])
def test_combine_over_planned_parts_is_the_serial_sum(adds: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Whatever the planner chooses (half the keys each way while warming up, one range once it has learnt
    the split is slower), ``combine`` gives the serial sum, the adds and subtracts split correctly between
    the parts; the real calls' timings reach the planner."""
    fresh = SplitPlanner()
    monkeypatch.setattr(_prg, "planner", lambda: fresh)
    ex = MaskExpander(100_000, 28)
    keys = [os.urandom(32) for _ in range(9)]
    ref = ex.zeros()
    for i, k in enumerate(keys):
        (ex.add if i < adds else ex.subtract)(ref, k)
    ranges: list[tuple[int, int, int]] = []
    real = MaskExpander._combine_piece

    def spy(self: MaskExpander, acc: np.ndarray, ks: list[bytes], n_add: int, lo: int, hi: int) -> None:
        ranges.append((len(ks), lo, hi))
        real(self, acc, ks, n_add, lo, hi)

    monkeypatch.setattr(MaskExpander, "_combine_piece", spy)
    split = piece_bounds(100_000, 4, 2, 4)
    assert len(split) == 2
    for _ in range(WARMUP):
        acc = ex.zeros()
        ex.combine(acc, keys[:adds], keys[adds:], workers=2)
        assert np.array_equal(acc, ref)
    key = ("combine", 100_000, 4, 2, True)
    assert fresh.preferred(key) is not None  # both ways timed in every call
    assert sorted(ranges) == sorted(
        [(4, lo, hi) for lo, hi in split] * 2
        + [(5, 0, 100_000)] * 2
        + [(4, 0, 100_000)]
        + [(5, lo, hi) for lo, hi in split]
    )
    for _ in range(WARMUP):
        fresh.record(key, True, 1.0)  # now the split looks slow
    ranges.clear()
    acc = ex.zeros()
    ex.combine(acc, keys[:adds], keys[adds:], workers=2)
    assert ranges == [(9, 0, 100_000)] and np.array_equal(acc, ref)


def test_the_process_wide_planner_is_shared() -> None:
    assert planner() is planner() and isinstance(planner(), SplitPlanner) and planner().enabled
