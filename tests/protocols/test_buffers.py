"""Recycled work buffers: a buffer is reused only when nothing but the pool refers to it."""

from __future__ import annotations

import threading

import numpy as np
import pytest
import torch

from securefgl.protocols import _buffers
from securefgl.protocols import messages as m
from securefgl.protocols._buffers import clear_pool, recycled


@pytest.fixture(autouse=True)
def _fresh_pool() -> None:
    clear_pool()


def test_a_dropped_buffer_is_handed_out_again() -> None:
    a = recycled(1000, np.uint64)
    a_id = id(a)
    del a
    b = recycled(1000, np.uint64)
    assert id(b) == a_id and b.shape == (1000,) and b.dtype == np.uint64 and b.flags.c_contiguous


@pytest.mark.parametrize(
    "keep",
    [
        lambda a: a,
        lambda a: a[10:20],
        lambda a: a.view(np.uint8),
        lambda a: a.data,
        lambda a: torch.from_numpy(a),
        lambda a: {"message": a},
    ],
    ids=["array", "slice", "view", "memoryview", "tensor", "container"],
)
def test_a_buffer_still_referenced_anywhere_is_never_reused(keep: object) -> None:
    a = recycled(1000, np.uint64)
    address = a.__array_interface__["data"][0]
    held = keep(a)  # type: ignore[operator]
    del a
    b = recycled(1000, np.uint64)
    assert b.__array_interface__["data"][0] != address
    del b, held
    assert recycled(1000, np.uint64).__array_interface__["data"][0] == address  # free again: reused


def test_shapes_and_dtypes_do_not_share_buffers() -> None:
    a = recycled(100, np.uint64)
    a_id = id(a)
    del a
    assert id(recycled(100, np.uint32)) != a_id
    assert id(recycled(101, np.uint64)) != a_id
    assert id(recycled(100, np.uint64)) == a_id


def test_the_pool_keeps_at_most_pool_bytes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_buffers, "POOL_BYTES", 8 * 1000 * 2)
    kept = [recycled(1000, np.uint64) for _ in range(3)]
    ids = [id(k) for k in kept]
    del kept
    again = [recycled(1000, np.uint64) for _ in range(3)]
    assert [id(a) for a in again[:2]] == ids[:2]  # the first two were pooled
    assert id(again[2]) not in ids[:2]


def test_threads_have_their_own_pools() -> None:
    a = recycled(1000, np.uint64)
    a_id = id(a)
    del a
    seen: list[int] = []
    t = threading.Thread(target=lambda: seen.append(id(recycled(1000, np.uint64))))
    t.start()
    t.join()
    assert seen[0] != a_id


def test_a_kept_message_keeps_its_vector_while_later_ones_decode() -> None:
    """Packed (40-bit) vectors decode into recycled buffers: a message the caller keeps is not overwritten
    by the next decoding, and a dropped one's buffer is reused."""
    rng = np.random.default_rng(0)
    v1, v2 = (rng.integers(0, 2**40, 5000, dtype=np.uint64) for _ in range(2))
    wire1, wire2 = (m.MaskedInput(bytes(32), (), 40, v).to_bytes() for v in (v1, v2))
    first = m.decode(wire1, m.MaskedInput)
    second = m.decode(wire2, m.MaskedInput)
    assert np.array_equal(first.vector, v1) and np.array_equal(second.vector, v2)
    reused = id(second.vector)
    del second
    third = m.decode(wire1, m.MaskedInput)
    assert id(third.vector) == reused and np.array_equal(third.vector, v1)
    assert np.array_equal(first.vector, v1)
