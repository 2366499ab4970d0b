"""Hazmat: vector-sized work buffers recycled within a thread, so a secure sum does not pay page faults.

.. warning::
    Low-level building block of the masking protocols' codecs and stages; not a general-purpose API.

Every client's masked vector, its packed wire form, and the server's decoding of each upload are arrays
of the vector's size, built and dropped once per client and sum. A fresh array of a few hundred KiB
comes from ``mmap`` (or from heap pages the allocator handed back when the last sum freed its
arrays), so its first write costs a page fault per 4 KiB: at d = 92,231 and 40-bit rings, about 180
faults per array, and more than half of the server's upload stage on this project's VM (10 clients: 5.6-6.0
ms with fresh arrays, 2.1-2.2 ms recycled). :func:`recycled` hands out an array whose memory a previous call
already touched. A recycled array that sits idle for a round can still be paged out by a host that reclaims idle
memory (this VM does), which is why the server's running sum no longer unpacks uploads into vectors of their own
but into one small chunk buffer per thread (:class:`~securefgl.protocols._fields.PackedRing`).

A buffer is handed out again only when nothing refers to it but the pool: every numpy view, memoryview
or tensor made from an array keeps a reference to the array that owns the memory, so a buffer still
visible anywhere (a message kept by the caller, a slice of it) is never reused. The pool keeps at most
:data:`POOL_BYTES` per thread; beyond that, arrays are ordinary allocations.
"""

from __future__ import annotations

import sys
import threading

import numpy as np

__all__ = ["POOL_BYTES", "clear_pool", "recycled"]

#: Most bytes of buffers a thread keeps for reuse (a 100-client sum of 92,231 64-bit words holds 74 MB).
POOL_BYTES = 256 * 2**20
#: References to a buffer held only by the pool: its list entry and ``getrefcount``'s argument.
_POOL_ONLY = 2

_LOCAL = threading.local()


def _pool() -> tuple[dict[tuple[int, np.dtype], list[np.ndarray]], list[int]]:
    pool = getattr(_LOCAL, "pool", None)
    if pool is None:
        pool = _LOCAL.pool = ({}, [0])
    return pool


def recycled(count: int, dtype: np.dtype | type) -> np.ndarray:
    """A C-contiguous array of ``count`` elements of ``dtype`` with **arbitrary contents**: a buffer of this
    thread's pool that nothing else refers to any more, else a new one (kept in the pool while it has
    room). Callers overwrite every element."""
    dt = np.dtype(dtype)
    buffers, used = _pool()
    key = (int(count), dt)
    free = buffers.setdefault(key, [])
    for buf in free:
        if sys.getrefcount(buf) == _POOL_ONLY + 1:  # + 1: the loop variable
            return buf
    buf = np.empty(count, dtype=dt)
    if used[0] + buf.nbytes <= POOL_BYTES:
        free.append(buf)
        used[0] += buf.nbytes
    return buf


def clear_pool() -> None:
    """Drop this thread's buffers (the memory returns to the allocator once nothing else holds them)."""
    buffers, used = _pool()
    buffers.clear()
    used[0] = 0
