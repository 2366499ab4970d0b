"""Raw floors of the protocol benchmarks: the PRG floor and plain numpy summation (see
:mod:`securefgl.benchmarking`, which re-exports these functions)."""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

import numpy as np

__all__ = ["plaintext_sum_seconds", "prg_floor_samples", "prg_floor_seconds"]


def prg_floor_samples(
    num_streams: int,
    length: int,
    ring_bits: int,
    *,
    algorithm: str = "aes256-ctr",
    repeats: int = 1,
    threads: int = 1,
) -> list[float]:
    """Seconds of ``repeats`` timings (after one untimed warm-up) of expanding ``num_streams``
    keystreams of ``length`` ring words and adding them up.

    The fastest way ``cryptography`` offers: one cipher per fresh 256-bit key, ``update_into`` a
    preallocated buffer (uint32 words for rings of at most 32 bits, else uint64, as the masking
    protocols use), a wrapping numpy add into an accumulator, one final reduction. Nothing else. With
    ``threads > 1`` the vector is cut into that many contiguous pieces on cipher-block boundaries, each
    expanded and added in its own thread of a pool started before the timing (the cipher and numpy release
    the GIL): the floor of a protocol that uses that many threads.
    """
    from securefgl.protocols._keystream import BLOCK_BYTES, encryptor  # the protocols' own cipher setup

    dtype = np.dtype(np.uint32) if ring_bits <= 32 else np.dtype(np.uint64)
    zeros = np.zeros(length * dtype.itemsize, dtype=np.uint8)
    buf = np.empty(length, dtype=dtype)
    acc = np.zeros(length, dtype=dtype)
    mask = dtype.type((1 << ring_bits) - 1) if ring_bits < 8 * dtype.itemsize else None
    keys = [os.urandom(32) for _ in range(max(int(num_streams), 0))]
    block = BLOCK_BYTES[algorithm]
    unit = block // dtype.itemsize
    count = max(1, min(int(threads), length // unit))
    step = -(-length // count // unit) * unit
    bounds = [min(i * step, length) for i in range(count)] + [length]

    def piece(lo: int, hi: int) -> None:
        out, part = buf[lo:hi].view(np.uint8), acc[lo:hi]
        src, start = zeros[lo * dtype.itemsize : hi * dtype.itemsize], lo * dtype.itemsize // block
        for key in keys:
            encryptor(key, algorithm, start).update_into(src, out)
            np.add(part, buf[lo:hi], out=part)

    pool = ThreadPoolExecutor(count - 1) if count > 1 else None

    def once() -> float:
        t0 = time.perf_counter()
        jobs = (
            [pool.submit(piece, lo, hi) for lo, hi in zip(bounds[1:-1], bounds[2:], strict=True)]
            if pool
            else []
        )
        piece(bounds[0], bounds[1])
        for job in jobs:
            job.result()
        if mask is not None:
            np.bitwise_and(acc, mask, out=acc)
        return time.perf_counter() - t0

    try:
        once()
        return [once() for _ in range(max(int(repeats), 1))]
    finally:
        if pool is not None:
            pool.shutdown()


def prg_floor_seconds(
    num_streams: int,
    length: int,
    ring_bits: int,
    *,
    algorithm: str = "aes256-ctr",
    repeats: int = 1,
    threads: int = 1,
) -> float:
    """The minimum of :func:`prg_floor_samples` (the raw PRG floor, one warm-up then ``repeats``)."""
    samples = prg_floor_samples(
        num_streams, length, ring_bits, algorithm=algorithm, repeats=repeats, threads=threads
    )
    return min(samples)


def plaintext_sum_seconds(vectors: Sequence[np.ndarray], *, repeats: int = 1) -> float:
    """Seconds for numpy to add ``vectors`` (float64) into one accumulator: the server's floor (a)."""
    if not vectors:
        return 0.0

    def once() -> float:
        t0 = time.perf_counter()
        acc = np.array(vectors[0], dtype=np.float64, copy=True)
        for v in vectors[1:]:
            np.add(acc, v, out=acc)
        return time.perf_counter() - t0

    once()
    return min(once() for _ in range(repeats))
