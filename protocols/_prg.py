"""Hazmat: key derivation and mask expansion for the masking protocols (SecAgg, SecAgg+).

.. warning::
    Low-level building blocks. Use :class:`~securefgl.protocols.SecAgg` or
    :class:`~securefgl.protocols.SecAggPlus` unless you are building a protocol.

Every mask in securefgl is the keystream of a stream cipher from ``cryptography`` (AES-256-CTR by
default, ChaCha20 or AES-128-CTR as options) keyed by a full 256-bit key, written straight into a
preallocated numpy buffer with ``update_into`` (the "encryptor of zeros" trick). Each key is used for exactly
one stream. AES-128-CTR keys the cipher with the first 128 bits of the same derived key (a truncated HKDF
output is still pseudorandom): 128-bit security, the level of the X25519 key agreement the pairwise keys come
from, at about 1.4x AES-256's keystream rate, but with less margin against attacks on many keys at once (see
SECURITY.md), which is why it is not the default.
Keys for each purpose come from HKDF-SHA256 whose ``info`` binds the protocol version, the purpose, the
session id, the round, the ordered pair of parties and a label, so two purposes never share a stream:

.. math::
    k = \\mathrm{HKDF}_{\\mathrm{SHA256}}(\\text{secret},\\ \\mathit{info} =
        \\text{version} \\| \\text{purpose} \\| \\text{sid} \\| \\text{round} \\| (u, v) \\| \\text{label}),
    \\qquad m = \\mathrm{PRG}(k) \\bmod 2^{b}.

Masks live in the ring :math:`\\mathbb{Z}_{2^b}` with :math:`b \\le 64`. Because :math:`2^b` divides the
word size (:math:`2^{32}` for :math:`b \\le 32`, else :math:`2^{64}`), keeping the low :math:`b` bits of a
uniform word is uniform, and sums may wrap freely in the word and be reduced once at the end.

Unlike the most used Python implementation (Flower's ``pseudo_rand_gen``), the seed is never folded and
no numpy RNG is involved. Deterministic randomness exists only through
:class:`InsecureDeterministicRandom`, for tests and known-answer vectors.
"""

from __future__ import annotations

import hashlib
import itertools
import os
import struct
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from functools import lru_cache
from typing import Literal, get_args

import numpy as np
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from securefgl.errors import ConfigError
from securefgl.protocols._keystream import AES128_KEY_BYTES, BLOCK_BYTES
from securefgl.protocols._keystream import encryptor as _encryptor
from securefgl.protocols._split_planner import planner

__all__ = [
    "AES128_KEY_BYTES",
    "KEY_BYTES",
    "INFO_PREFIX",
    "MAX_BLOCKS_PER_KEY",
    "PRG_ALGORITHMS",
    "PrgAlgorithm",
    "RandomSource",
    "InsecureDeterministicRandom",
    "MaskExpander",
    "SPLIT_MIN_BYTES",
    "derive_key",
    "derive_keys",
    "expander_for",
    "hkdf_info",
    "hkdf_infos",
    "keystream_into",
    "piece_bounds",
    "ring_dtype",
    "run_claimed",
    "system_random",
    "zero_bytes",
]

#: Length of every secret, seed and derived key, in bytes (256 bits).
KEY_BYTES = 32
#: Versioned domain-separation prefix of every HKDF ``info`` string.
INFO_PREFIX = b"securefgl/protocols/v1"
#: A key may expand at most this many cipher blocks: ChaCha20's 32-bit block counter never wraps,
#: and AES-CTR keeps to the same bound (Google's ``AesCtrPrng`` caps a seed at 2^32 - 1 blocks).
MAX_BLOCKS_PER_KEY = 2**32

PrgAlgorithm = Literal["aes256-ctr", "aes128-ctr", "chacha20"]
PRG_ALGORITHMS: tuple[str, ...] = get_args(PrgAlgorithm)

#: A source of cryptographic random bytes: ``source(n) -> n bytes``. Production code uses
#: :func:`system_random` (the OS CSPRNG).
RandomSource = Callable[[int], bytes]


def system_random(n: int) -> bytes:
    """``n`` bytes from the operating system's CSPRNG (``os.urandom``)."""
    return os.urandom(n)


def _check_algorithm(algorithm: str) -> None:
    if algorithm not in BLOCK_BYTES:
        raise ConfigError(f"unknown PRG algorithm {algorithm!r}; valid: {list(PRG_ALGORITHMS)}")


_ZEROS = np.zeros(0, dtype=np.uint8)
_ZEROS_LOCK = threading.Lock()


def zero_bytes(nbytes: int) -> memoryview:
    """A read-only view of ``nbytes`` zero bytes, the input of every keystream ("encrypt zeros").

    One process-wide buffer, grown to the largest request and never written, so that expanding a mask
    allocates nothing: a fresh zero buffer costs a page fault per 4 KiB on first read, and freeing it
    hands the pages back to the kernel (a fresh expander per client and sum, zero and scratch buffers,
    cost ~0.7 ms of faults at d = 92,231 in a ten-mask micro-benchmark: as much as the ten expansions).
    """
    global _ZEROS
    zeros = _ZEROS
    if zeros.nbytes < nbytes:
        with _ZEROS_LOCK:
            if _ZEROS.nbytes < nbytes:
                grown = np.zeros(max(int(nbytes), 2 * _ZEROS.nbytes), dtype=np.uint8)
                grown.setflags(write=False)
                _ZEROS = grown
            zeros = _ZEROS
    return zeros.data[:nbytes]


def ring_dtype(ring_bits: int) -> np.dtype:
    """The machine word used for ring elements of ``ring_bits`` bits: uint32 up to 32 bits, else uint64.

    Args:
        ring_bits: :math:`b` in :math:`\\mathbb{Z}_{2^b}`, from 1 to 64.
    """
    if (
        isinstance(ring_bits, bool)
        or not isinstance(ring_bits, (int, np.integer))
        or not 1 <= ring_bits <= 64
    ):
        raise ConfigError(f"ring_bits must be an integer in [1, 64], got {ring_bits!r}")
    return np.dtype(np.uint32) if ring_bits <= 32 else np.dtype(np.uint64)


def _lp(data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + data


def hkdf_info(
    purpose: str,
    *,
    session_id: bytes = b"",
    round_index: int = 0,
    pair: tuple[int, int] | None = None,
    label: bytes | str = b"",
) -> bytes:
    """The HKDF ``info`` string for one purpose: injective (every field is length-prefixed or fixed-size).

    Args:
        purpose: what the key is for (``"pairwise-mask"``, ``"self-mask"``, ``"share-channel"``, ...).
        session_id: the session id every key of a session is bound to.
        round_index: the training round.
        pair: the ordered pair of parties ``(u, v)``, or ``None`` for a single-party key.
        label: block/chunk label (e.g. ``b"vector"``).
    """
    head, tail = _info_parts(purpose, bytes(session_id), int(round_index), label)
    return head + (b"\x00" if pair is None else _pair_bytes(pair)) + tail


def hkdf_infos(
    purpose: str,
    pairs: Sequence[tuple[int, int]],
    *,
    session_id: bytes = b"",
    round_index: int = 0,
    label: bytes | str = b"",
) -> list[bytes]:
    """:func:`hkdf_info` for many ``pairs`` of one purpose, session, round and label (the shared parts built
    once: the server derives every survivor's self-mask key in one go)."""
    head, tail = _info_parts(purpose, bytes(session_id), int(round_index), label)
    return [head + _pair_bytes(p) + tail for p in pairs]


@lru_cache(maxsize=1024)
def _info_parts(purpose: str, session_id: bytes, round_index: int, label: bytes | str) -> tuple[bytes, bytes]:
    """The parts of an ``info`` string before and after its pair field (public values, cached: a client of
    a 100-client sum derives about fifty keys of a handful of purposes, all with one session id)."""
    if not purpose or not isinstance(purpose, str):
        raise ConfigError(f"purpose must be a non-empty string, got {purpose!r}")
    if not 0 <= int(round_index) < 2**64:
        raise ConfigError(f"round_index must be in [0, 2^64), got {round_index!r}")
    if isinstance(label, str):
        label = label.encode()
    head = INFO_PREFIX + _lp(purpose.encode()) + _lp(bytes(session_id)) + struct.pack(">Q", int(round_index))
    return head, _lp(bytes(label))


def _pair_bytes(pair: tuple[int, int]) -> bytes:
    u, v = (int(pair[0]), int(pair[1]))
    if not (0 <= u < 2**64 and 0 <= v < 2**64):
        raise ConfigError(f"pair ids must be in [0, 2^64), got {pair!r}")
    return _PAIR.pack(1, u, v)


_PAIR = struct.Struct(">BQQ")
_SHA256 = hashes.SHA256()


def derive_key(
    secret: bytes | bytearray | memoryview,
    purpose: str,
    *,
    session_id: bytes = b"",
    round_index: int = 0,
    pair: tuple[int, int] | None = None,
    label: bytes | str = b"",
    length: int = KEY_BYTES,
) -> bytes:
    """HKDF-SHA256 (RFC 5869, no salt) of a full 256-bit ``secret`` with :func:`hkdf_info` as ``info``.

    Args:
        secret: input keying material: an X25519 shared secret or a 32-byte random seed.
        purpose, session_id, round_index, pair, label: see :func:`hkdf_info`.
        length: output length in bytes.

    Raises:
        ConfigError: ``secret`` shorter than 32 bytes (a folded or truncated seed).
    """
    info = hkdf_info(purpose, session_id=session_id, round_index=round_index, pair=pair, label=label)
    return _hkdf(secret, info, length)


def derive_keys(secrets: Sequence[bytes | bytearray | memoryview], infos: Sequence[bytes]) -> list[bytes]:
    """HKDF-SHA256 of ``secrets[i]`` with ``infos[i]`` (from :func:`hkdf_infos`): :func:`derive_key` for many
    keys of one purpose, session and round, the ``info`` strings built at once."""
    if len(secrets) != len(infos):
        raise ConfigError(f"{len(secrets)} secrets for {len(infos)} info strings")
    return [_hkdf(s, info, KEY_BYTES) for s, info in zip(secrets, infos, strict=True)]


def _hkdf(secret: bytes | bytearray | memoryview, info: bytes, length: int) -> bytes:
    if len(secret) < KEY_BYTES:
        raise ConfigError(f"secret must have at least {KEY_BYTES} bytes, got {len(secret)}")
    return HKDF(algorithm=_SHA256, length=length, salt=None, info=info).derive(bytes(secret))


def keystream_into(
    key: bytes,
    out: np.ndarray,
    *,
    algorithm: str = "aes256-ctr",
    start_block: int = 0,
) -> np.ndarray:
    """Write ``out.nbytes`` bytes of keystream of ``key`` into ``out``, starting at cipher block ``start_block``.

    AES-CTR uses a 128-bit big-endian counter block starting at ``start_block`` (NIST SP 800-38A; AES-128
    is keyed by the first 16 bytes of ``key``); ChaCha20 uses the RFC 8439 layout with block counter
    ``start_block`` and an all-zero nonce. All are safe only because each key expands exactly one stream.

    Args:
        key: 32-byte key (never reused across purposes: derive it with :func:`derive_key`).
        out: C-contiguous numpy array overwritten with keystream.
        algorithm: ``"aes256-ctr"`` (default), ``"aes128-ctr"`` or ``"chacha20"``.
        start_block: first cipher block (for chunked expansion).

    Raises:
        ConfigError: bad key length, unknown algorithm, non-contiguous ``out``, or a stream longer than
            :data:`MAX_BLOCKS_PER_KEY` blocks (ChaCha20's block counter would wrap).
    """
    _check_algorithm(algorithm)
    if len(key) != KEY_BYTES:
        raise ConfigError(f"PRG key must have {KEY_BYTES} bytes, got {len(key)}")
    if not out.flags.c_contiguous:
        raise ConfigError("keystream output buffer must be C-contiguous")
    nbytes = out.nbytes
    block = BLOCK_BYTES[algorithm]
    blocks = -(-nbytes // block)
    if start_block < 0 or start_block + blocks > MAX_BLOCKS_PER_KEY:
        raise ConfigError(
            f"keystream of {nbytes} bytes from block {start_block} exceeds {MAX_BLOCKS_PER_KEY} "
            f"{algorithm} blocks per key; split the vector into chunks with separate labels"
        )
    if nbytes == 0:
        return out
    enc = _encryptor(bytes(key), algorithm, int(start_block))
    view = out.reshape(-1).view(np.uint8)
    enc.update_into(zero_bytes(nbytes), view.data)
    return out


class MaskExpander:
    """Expands 256-bit keys into masks in :math:`\\mathbb{Z}_{2^b}^d`, reusing its buffers.

    One expander per thread: it owns a scratch buffer of the vector's size and reads the shared
    :func:`zero_bytes`, so no allocation happens per mask; :func:`expander_for` keeps one per thread
    and shape, so none happens per sum either. Accumulation wraps in the machine word (uint32 for :math:`b \\le 32`,
    else uint64); call :meth:`reduce` once at the end.

    Args:
        length: :math:`d`, the number of ring elements per mask.
        ring_bits: :math:`b`, from 1 to 64.
        algorithm: ``"aes256-ctr"`` (default), ``"aes128-ctr"`` or ``"chacha20"``.

    Shapes:
        masks and accumulators: :math:`(d,)`, dtype :attr:`dtype`.
    """

    def __init__(self, length: int, ring_bits: int, *, algorithm: str = "aes256-ctr") -> None:
        _check_algorithm(algorithm)
        if isinstance(length, bool) or not isinstance(length, (int, np.integer)) or length < 0:
            raise ConfigError(f"mask length must be a non-negative integer, got {length!r}")
        self.length = int(length)
        self.ring_bits = int(ring_bits)
        self.algorithm = algorithm
        self.dtype = ring_dtype(ring_bits)
        word_bits = 8 * self.dtype.itemsize
        self._mask = self.dtype.type((1 << self.ring_bits) - 1) if self.ring_bits < word_bits else None
        nbytes = self.length * self.dtype.itemsize
        blocks = -(-nbytes // BLOCK_BYTES[algorithm])
        if blocks > MAX_BLOCKS_PER_KEY:
            raise ConfigError(
                f"keystream of {nbytes} bytes exceeds {MAX_BLOCKS_PER_KEY} {algorithm} blocks per "
                "key; split the vector into chunks with separate labels"
            )
        self._scratch = np.empty(self.length, dtype=self.dtype)
        # buffers viewed once: add/subtract then cost one cipher setup, one update_into and one numpy op
        self._zeros_view = zero_bytes(nbytes)
        self._scratch_view = self._scratch.view(np.uint8).data

    def zeros(self) -> np.ndarray:
        """A fresh all-zero accumulator."""
        return np.zeros(self.length, dtype=self.dtype)

    def raw(self, key: bytes, out: np.ndarray | None = None) -> np.ndarray:
        """The unreduced keystream words of ``key`` (uniform in the machine word)."""
        if out is None:
            out = np.empty(self.length, dtype=self.dtype)
        self._check(out)
        return keystream_into(key, out, algorithm=self.algorithm)

    def expand(self, key: bytes, out: np.ndarray | None = None) -> np.ndarray:
        """The mask of ``key``: uniform in :math:`\\mathbb{Z}_{2^b}^d`."""
        return self.reduce(self.raw(key, out))

    def _stream(self, key: bytes) -> None:
        """The keystream of ``key`` into the scratch buffer (checks done once in ``__init__``)."""
        if len(key) != KEY_BYTES:
            raise ConfigError(f"PRG key must have {KEY_BYTES} bytes, got {len(key)}")
        if self.length:
            _encryptor(bytes(key), self.algorithm, 0).update_into(self._zeros_view, self._scratch_view)

    def keystream(self, key: bytes) -> np.ndarray:
        """The unreduced keystream words of ``key`` in this expander's scratch buffer, valid until the expander's
        next use: one stream for several accumulators (a pairwise mask is added by one party of the pair and
        subtracted by the other; :mod:`._secaggplus_precompute` expands it once for both)."""
        self._stream(key)
        return self._scratch

    def combine(
        self,
        acc: np.ndarray,
        add: Sequence[bytes] = (),
        subtract: Sequence[bytes] = (),
        *,
        workers: int = 1,
    ) -> None:
        """``acc += sum(PRG(k) for k in add) - sum(PRG(k) for k in subtract)`` with wrap-around (reduce later).

        With ``workers > 1`` the vector is cut into contiguous pieces on cipher-block boundaries, at most
        ``workers`` and none under :data:`SPLIT_MIN_BYTES`, and the pieces are combined at once in threads (the
        cipher and numpy release the GIL): each piece expands its part of every keystream from its first block
        into its part of the scratch buffer. Whether pieces shorter than
        :data:`~securefgl.protocols._split_planner.SPLIT_ALWAYS_BYTES` are worth it on this machine is learnt
        from the timings of earlier calls (:class:`~securefgl.protocols._split_planner.SplitPlanner`). The
        result is the serial one, bit for bit.
        """
        self._check(acc)
        keys = [bytes(k) for k in add] + [bytes(k) for k in subtract]
        if any(len(k) != KEY_BYTES for k in keys):
            raise ConfigError(
                f"PRG keys must have {KEY_BYTES} bytes, got lengths {sorted({len(k) for k in keys})}"
            )
        if not self.length or not keys:
            return
        unit = BLOCK_BYTES[self.algorithm] // self.dtype.itemsize  # pieces start on cipher blocks
        split = piece_bounds(self.length, self.dtype.itemsize, workers, unit)
        adds = len(add)

        def run(pieces: list[tuple[int, int]], lo: int, hi: int) -> None:
            part, part_adds = keys[lo:hi], min(max(adds - lo, 0), hi - lo)
            run_claimed(len(pieces), lambda i: self._combine_piece(acc, part, part_adds, *pieces[i]))

        planner().plan("combine", split, self.dtype.itemsize, len(keys)).execute(run)

    def _combine_piece(self, acc: np.ndarray, keys: list[bytes], adds: int, lo: int, hi: int) -> None:
        size = self.dtype.itemsize
        scratch, part = self._scratch[lo:hi], acc[lo:hi]
        zeros, out = self._zeros_view[lo * size : hi * size], scratch.view(np.uint8).data
        start = lo * size // BLOCK_BYTES[self.algorithm]
        for i, key in enumerate(keys):
            _encryptor(key, self.algorithm, start).update_into(zeros, out)
            (np.add if i < adds else np.subtract)(part, scratch, out=part)

    def add(self, acc: np.ndarray, key: bytes) -> None:
        """``acc += PRG(key)`` with wrap-around (reduce later)."""
        self._check(acc)
        self._stream(key)
        np.add(acc, self._scratch, out=acc)

    def subtract(self, acc: np.ndarray, key: bytes) -> None:
        """``acc -= PRG(key)`` with wrap-around (reduce later)."""
        self._check(acc)
        self._stream(key)
        np.subtract(acc, self._scratch, out=acc)

    def reduce(self, arr: np.ndarray) -> np.ndarray:
        """Reduce ``arr`` modulo :math:`2^b` in place and return it."""
        if self._mask is not None:
            np.bitwise_and(arr, self._mask, out=arr)
        return arr

    def _check(self, arr: np.ndarray) -> None:
        if arr.dtype != self.dtype or arr.shape != (self.length,):
            raise ConfigError(
                f"accumulator must have dtype {self.dtype} and shape ({self.length},), "
                f"got {arr.dtype} {arr.shape}"
            )

    def __repr__(self) -> str:
        return f"MaskExpander(length={self.length}, ring_bits={self.ring_bits}, algorithm={self.algorithm!r})"


#: Fewest bytes in a piece of a split :meth:`MaskExpander.combine`. Each keystream of a piece costs its thread
#: two hand-offs of the GIL (around the cipher and around the add), which a short piece does not repay. Two
#: threads on this project's 2-core virtual machine, 10 keys, in a loop, serial against split (ms): d = 92,231
#: in a 40-bit ring (369 KiB pieces) 1.01 against 0.58, in a 25-bit ring (uint32 words, 184 KiB pieces) 0.52
#: against 0.35; d = 1e6, 40-bit, 10 keys 11.2 against 6.0. Inside a 10-client SecAgg+ sum of d = 92,231 (a
#: pool thread woken from idle between clients) the masks of the whole sum took 10.9 against 8.3 ms at 37 bits
#: and 5.7 against 5.7 at 25 bits. On another day the same VM ran such pieces slower split than on one thread,
#: so a split of pieces under :data:`~securefgl.protocols._split_planner.SPLIT_ALWAYS_BYTES` is only taken where
#: the timings of earlier calls say it pays (:class:`~securefgl.protocols._split_planner.SplitPlanner`).
SPLIT_MIN_BYTES = 1 << 17

_POOLS: dict[int, ThreadPoolExecutor] = {}
_POOLS_LOCK = threading.Lock()


def _piece_pool(threads: int) -> ThreadPoolExecutor:
    """A process-wide pool of ``threads`` threads for the pieces of :meth:`MaskExpander.combine` (one per
    size, made on first use)."""
    with _POOLS_LOCK:
        pool = _POOLS.get(threads)
        if pool is None:
            pool = _POOLS[threads] = ThreadPoolExecutor(threads, thread_name_prefix="securefgl-prg")
        return pool


def piece_bounds(length: int, itemsize: int, workers: int, unit: int = 1) -> list[tuple[int, int]]:
    """``[lo, hi)`` word ranges cutting a vector of ``length`` words for ``workers`` threads: at most ``workers``
    pieces, none under :data:`SPLIT_MIN_BYTES` (the hand-offs would cost more than the second thread saves),
    each starting on a multiple of ``unit`` words."""
    count = max(1, min(int(workers), length * itemsize // SPLIT_MIN_BYTES))
    step = -(-length // count // unit) * unit
    bounds = [min(i * step, length) for i in range(count)] + [length]
    return list(zip(bounds[:-1], bounds[1:], strict=True))


def run_claimed(count: int, work: Callable[[int], None]) -> None:
    """``work(i)`` for ``i`` in ``range(count)``, on the caller's thread and ``count - 1`` pool threads.

    Pieces are claimed, not assigned: a pool thread slow to wake (an idle core of a virtual machine can take
    milliseconds) finds them all done by the caller, so a split is never much slower than serial. The first
    error of any piece is re-raised in the caller once every piece has finished.
    """
    if count <= 1:
        if count == 1:
            work(0)
        return
    claims = itertools.count()
    done = [threading.Event() for _ in range(count)]
    errors: list[BaseException] = []

    def drain() -> None:
        while (i := next(claims)) < count:
            try:
                work(i)
            except BaseException as exc:  # re-raised in the caller's thread below
                errors.append(exc)
            finally:
                done[i].set()

    pool = _piece_pool(count - 1)
    for _ in range(count - 1):
        pool.submit(drain)
    drain()
    for event in done:
        event.wait()
    if errors:
        raise errors[0]


def _forget_pools_in_child() -> None:
    """A forked child's copies of the pools have no threads (a task sent to one would wait forever) and its
    copy of the lock may be held by a thread that does not exist there: start both afresh."""
    global _POOLS_LOCK
    _POOLS.clear()
    _POOLS_LOCK = threading.Lock()


os.register_at_fork(after_in_child=_forget_pools_in_child)


_EXPANDERS = threading.local()
#: Expanders kept per thread by :func:`expander_for` (a run's sums have a handful of shapes).
EXPANDERS_PER_THREAD = 4


def expander_for(length: int, ring_bits: int, *, algorithm: str = "aes256-ctr") -> MaskExpander:
    """This thread's :class:`MaskExpander` for ``(length, ring_bits, algorithm)``, built on first use.

    Every masked sum expands its masks through one of these instead of a new expander, so a run
    allocates its scratch buffers once, not once per client and sum (each fresh buffer costs a page fault
    per 4 KiB on first write). The scratch holds the last keystream expanded in this thread; so did the
    freed buffer it replaces, until the allocator handed it out again. The least recently used shape
    is dropped beyond :data:`EXPANDERS_PER_THREAD`.
    """
    cache: dict[tuple[int, int, str], MaskExpander] | None = getattr(_EXPANDERS, "cache", None)
    if cache is None:
        cache = _EXPANDERS.cache = {}
    key = (int(length), int(ring_bits), algorithm)
    ex = cache.pop(key, None)
    if ex is None:
        ex = MaskExpander(length, ring_bits, algorithm=algorithm)
        while len(cache) >= EXPANDERS_PER_THREAD:
            cache.pop(next(iter(cache)))
    cache[key] = ex  # most recently used last
    return ex


class InsecureDeterministicRandom:
    """INSECURE: a reproducible byte source for tests and known-answer vectors only.

    Expands ``HKDF(seed, "insecure-seed", label)`` with AES-256-CTR. Anyone who knows the seed knows every
    key and mask drawn from it; never use it outside tests.

    Args:
        seed: seed material (bytes, or a non-negative int taken as 32 big-endian bytes).
        label: separates the streams of different parties using the same seed.
    """

    def __init__(self, seed: bytes | int, label: str = "") -> None:
        if isinstance(seed, int):
            seed = seed.to_bytes(32, "big", signed=False)
        if not isinstance(seed, (bytes, bytearray)) or not seed:
            raise ConfigError(f"insecure seed must be non-empty bytes or a non-negative int, got {seed!r}")
        material = hashlib.sha256(_lp(bytes(seed))).digest()
        key = derive_key(material, "insecure-seed", label=label)
        self._enc = Cipher(algorithms.AES(key), modes.CTR(bytes(16))).encryptor()

    def __call__(self, n: int) -> bytes:
        return self._enc.update(bytes(n))
