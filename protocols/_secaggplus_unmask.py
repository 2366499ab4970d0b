"""The SecAgg/SecAgg+ server's state and its secret reconstruction (hazmat).

Split from :mod:`securefgl.protocols._secaggplus_server` (re-exported there): what the server holds during a
session (its state and the running sum of masked inputs), who leaves the sum over complaints, how it rebuilds
the survivors' self-mask seeds and the dropped clients' mask keys from the unmask replies (verifying every
secret against its commitment or advertised public key and routing around corrupted shares by trying holder
subsets), and how it removes the masks.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey

from securefgl.errors import InvalidMessage, ProtocolError, ThresholdError
from securefgl.protocols import _shamir
from securefgl.protocols._buffers import recycled
from securefgl.protocols._fields import PackedRing
from securefgl.protocols._harary import GraphParameters, SecretSharingGraph
from securefgl.protocols._prg import expander_for, piece_bounds, ring_dtype, run_claimed
from securefgl.protocols._secaggplus_params import SecAggPlusConfig, Stage
from securefgl.protocols._secaggplus_session import (
    ClipLayout,
    commitment,
    pair_key,
    release_ring,
    self_keys,
    wipe,
)
from securefgl.protocols._split_planner import planner
from securefgl.protocols.base import SERVER, Sums
from securefgl.protocols.encoding import SumSchema
from securefgl.protocols.messages import DeliverRequest, Unmask
from securefgl.protocols.router import Outgoing

__all__ = ["MAX_HOLDER_SUBSETS", "Reconstruction", "RunningSum", "SecAggPlusServerState"]


@dataclass
class SecAggPlusServerState:
    """What the server holds during one session (public values and the masked sum only).

    Attributes:
        excluded: client -> reason, for clients excluded as misbehaving (``"ErrorClass: message"``).
        keys: client -> (channel public key, mask public key), for the clients that advertised (U1).
        session_id: the session id (the one most clients computed).
        graph: the secret-sharing graph over U1.
        u1, u2, u3: clients that advertised keys, shared them, and whose masked input was accepted.
        dead: U2 minus U3 (dropped or excluded after sharing).
        commitments: client -> commitment to its self-mask seed.
        envelopes: recipient -> {sender: share ciphertext} (relayed, then cleared).
        senders: client -> the neighbours whose ciphertexts were forwarded to it.
        complaints: client -> the senders whose ciphertexts it could not authenticate.
        masked_with: survivor -> the peers it masked against.
        requested: survivor -> the peers (and itself) its unmask request names, ``(alive, dead)``.
        total: the running sum of accepted masked inputs (then the unmasked sum).
        result: the released sums (server mode).
        delivered: whether the sum was relayed to the designated recipient.
        bad_shares: client -> note, where a reconstruction had to route around corrupted shares.
        unmask_seconds: wall time of the unmasking steps, and process CPU time (all threads) of mask
            removal and of the whole step.
        unmask_rejected: responder -> reason, for unmask replies that were ignored.
    """

    excluded: dict[int, str] = field(default_factory=dict)
    keys: dict[int, tuple[bytes, bytes]] = field(default_factory=dict)
    session_id: bytes = b""
    graph: SecretSharingGraph | None = None
    u1: tuple[int, ...] = ()
    u2: tuple[int, ...] = ()
    u3: tuple[int, ...] = ()
    dead: tuple[int, ...] = ()
    commitments: dict[int, bytes] = field(default_factory=dict)
    envelopes: dict[int, dict[int, bytes]] = field(default_factory=dict)
    senders: dict[int, tuple[int, ...]] = field(default_factory=dict)
    complaints: dict[int, tuple[int, ...]] = field(default_factory=dict)
    masked_with: dict[int, frozenset[int]] = field(default_factory=dict)
    requested: dict[int, tuple[tuple[int, ...], tuple[int, ...]]] = field(default_factory=dict)
    total: np.ndarray | None = None
    result: Sums | None = None
    delivered: bool = False
    bad_shares: dict[int, str] = field(default_factory=dict)
    unmask_seconds: dict[str, float] = field(default_factory=dict)
    unmask_rejected: dict[int, str] = field(default_factory=dict)
    key_signatures: dict[int, bytes] = field(default_factory=dict)
    u4: tuple[int, ...] = ()
    survivor_signatures: dict[int, bytes] = field(default_factory=dict)
    consistency_seconds: float = 0.0


#: Most holder subsets tried per secret when corrupted shares must be routed around.
MAX_HOLDER_SUBSETS = 20_000


class Reconstruction:
    """Mixin of :class:`~securefgl.protocols._secaggplus_server.SecAggPlusServer`: secret reconstruction, mask
    removal and the release of the unmasked sum."""

    params: GraphParameters
    x: dict[int, int]
    state: SecAggPlusServerState
    layout: ClipLayout
    schema: SumSchema
    config: SecAggPlusConfig
    round_index: int
    workers: int
    recipient: int | None

    def _exclude(self, client: int, err: ProtocolError | InvalidMessage | str) -> None:
        text = err if isinstance(err, str) else f"{type(err).__name__}: {err}"
        self.state.excluded.setdefault(client, text)

    def _judge_complaints(self, accused: Mapping[int, set[int]], accepted: set[int]) -> set[int]:
        """Who leaves the sum over complaints. The server cannot check a complaint (that needs the
        channel key), so it relies on the threshold assumption: fewer than ``t`` clients collude. A
        client accused by at least ``t`` others is excluded (one accuser at least is honest); a
        complaint shared by fewer than ``t`` clients excludes the complainers, never the accused, so
        colluding clients can exclude only themselves. A sender that garbles its shares to fewer than
        ``t`` neighbours makes those neighbours leave (as in Bonawitz et al., where a client aborts on a
        share it cannot decrypt)."""
        t = self.params.threshold
        removed: set[int] = set()
        for v, by in sorted(accused.items()):
            if len(by) >= t:
                if v in accepted:
                    self._exclude(
                        v, f"InvalidMessage: its share ciphertexts failed authentication at {len(by)} clients"
                    )
                removed.add(v)
                continue
            for c in sorted(by):
                removed.add(c)
                self._exclude(
                    c,
                    f"InvalidMessage: complained about client {v} with {len(by)} complainer(s), fewer than "
                    f"the threshold {t} that makes a complaint count; an unconfirmed complaint excludes the complainer",
                )
        return removed

    def _verify(self, kind: str, owner: int, secret: np.ndarray) -> bool:
        if kind == "seed":
            return commitment(self.state.session_id, owner, secret.tobytes()) == self.state.commitments.get(
                owner
            )
        try:
            pk = X25519PrivateKey.from_private_bytes(secret.tobytes()).public_key().public_bytes_raw()
        except ValueError:
            return False
        return pk == self.state.keys[owner][1]

    def _reconstruct_kind(
        self, good: Mapping[int, Unmask], kind: str, owners: Sequence[int], phase: str
    ) -> dict[int, np.ndarray]:
        """Reconstruct the seeds (``kind="seed"``) or mask keys (``"key"``) of ``owners`` from the
        accepted unmask replies.

        Fast path: at least ``t`` responders that returned the same owner list (the complete graph)
        give a ``(t, owners, limbs)`` array straight from their share matrices, reconstructed with one
        cached Lagrange computation. Everything else (SecAgg+ neighbourhoods, verification failures)
        goes through :meth:`_reconstruct_all`.
        """
        t = self.params.threshold
        out: dict[int, np.ndarray] = {}
        remaining = set(owners)
        if not remaining:
            return out
        groups: dict[tuple[int, ...], list[int]] = {}
        for c, msg in good.items():
            groups.setdefault(msg.alive if kind == "seed" else msg.dead, []).append(c)
        for ids, responders in groups.items():
            if len(responders) < t:  # SecAgg+: every responder's neighbourhood differs
                continue
            todo = [i for i, o in enumerate(ids) if o in remaining]
            if len(todo) < 2:
                continue
            chosen = sorted(responders, key=lambda w: self.x[w])[:t]
            shares = np.stack(
                [(good[w].seed_shares if kind == "seed" else good[w].key_shares)[todo] for w in chosen]
            )
            secrets, valid = _shamir.reconstruct([self.x[w] for w in chosen], shares)
            for j, i in enumerate(todo):
                o = ids[i]
                if valid[j] and self._verify(kind, o, secrets[j]):
                    out[o] = secrets[j].copy()
                    remaining.discard(o)
            wipe(secrets, shares)
        if remaining:
            out.update(self._reconstruct_all(good, kind, remaining, phase))
        return out

    def _reconstruct_all(
        self, good: Mapping[int, Unmask], kind: str, owners: set[int], phase: str
    ) -> dict[int, np.ndarray]:
        """Reconstruct every owner's secret from ``threshold`` holders; verify each against its
        commitment (seeds) or advertised public key (mask keys), retrying other holder subsets on a
        mismatch. Every owner is interpolated in one vectorised batch, each row with its own holder set."""
        t = self.params.threshold
        # Every reply's share rows stacked once into one table, with each row's owner, holder and holder's x.
        mats: list[np.ndarray] = []
        row_owner: list[Sequence[int]] = []
        holders_x: list[tuple[int, int, int]] = []  # (holder, its x, rows it sent)
        for c, msg in good.items():
            ids, mat = (msg.alive, msg.seed_shares) if kind == "seed" else (msg.dead, msg.key_shares)
            mats.append(mat)
            row_owner.append(ids)
            holders_x.append((c, self.x[c], len(ids)))
        table = np.concatenate(mats) if mats else np.zeros((0, _shamir.LIMBS), dtype=np.uint32)
        try:
            per = np.array(holders_x, dtype=np.int64).reshape(-1, 3)
            holder_of, x_of = np.repeat(per[:, 0], per[:, 2]), np.repeat(per[:, 1], per[:, 2])
            owner_of = np.fromiter(itertools.chain.from_iterable(row_owner), np.int64, len(holder_of))
            wanted = sorted(owners)
            rows = np.flatnonzero(np.isin(owner_of, wanted))
            # each owner's rows together, lowest x first: the first t of an owner are its chosen holders
            rows = rows[np.lexsort((x_of[rows], owner_of[rows]))]
            found, first, count = np.unique(owner_of[rows], return_index=True, return_counts=True)
            holders = dict(zip(found.tolist(), count.tolist(), strict=True))
            for owner in wanted:
                if holders.get(owner, 0) < t:
                    raise ThresholdError(
                        f"only {holders.get(owner, 0)} share holders answered for the {kind} of client {owner}, "
                        f"fewer than the threshold {t}",
                        party=SERVER,
                        phase=phase,
                    )
            out: dict[int, np.ndarray] = {}
            retry: list[int] = []
            # One vectorised interpolation for every owner: each row carries its own holder set, so owners of
            # different neighbourhoods (SecAgg+) and owners sharing a holder set cost one pass together.
            if len(found):
                index = rows[first[:, None] + np.arange(t)]  # (G, t) rows of each owner's chosen holders
                shares = table[index]  # (G, t, L)
                secrets, valid = _shamir.reconstruct_many(x_of[index], shares)
                for i, o in enumerate(found.tolist()):
                    if valid[i] and self._verify(kind, o, secrets[i]):
                        out[o] = secrets[i].copy()
                    else:
                        retry.append(o)
                wipe(secrets, shares)
            for o in retry:
                i = int(np.searchsorted(found, o))
                mine = rows[first[i] : first[i] + count[i]]
                out[o] = self._search_subsets(
                    {int(holder_of[r]): table[r] for r in mine.tolist()}, kind, o, phase
                )
            return out
        finally:
            wipe(table)

    def _search_subsets(self, hs: Mapping[int, np.ndarray], kind: str, owner: int, phase: str) -> np.ndarray:
        """Try ``t``-subsets of the holders until one reconstructs a secret that verifies against the
        commitment (seeds) or public key (mask keys): any ``t`` good shares do, wherever they sit."""
        t = self.params.threshold
        ranked = sorted(hs, key=lambda w: self.x[w])
        tried = 0
        for sub in itertools.combinations(ranked, t):
            tried += 1
            if tried > MAX_HOLDER_SUBSETS:
                break
            sec, valid = _shamir.reconstruct(
                [self.x[w] for w in sub], np.stack([hs[w] for w in sub])[:, None, :]
            )
            if valid[0] and self._verify(kind, owner, sec[0]):
                self.state.bad_shares[owner] = (
                    f"{kind} reconstructed from holders {list(sub)} after {tried} subset(s); "
                    f"{len(ranked)} holders answered"
                )
                found: np.ndarray = sec[0].copy()
                return found
            wipe(sec)
        raise ThresholdError(
            f"no {t} shares of the {kind} of client {owner} verify among the {len(ranked)} holders that "
            f"answered ({min(tried, MAX_HOLDER_SUBSETS)} subsets of {t} tried); at least {t} good shares are needed",
            party=SERVER,
            phase=phase,
        )

    def _masked_with_dead(self, v: int) -> list[int]:
        """Survivors whose masked input carries a pairwise mask with the dropped client ``v``."""
        return [u for u in self.state.u3 if v in self.state.masked_with.get(u, ())]

    def _remove_masks(
        self, total: np.ndarray, seeds: Mapping[int, np.ndarray], keys: Mapping[int, np.ndarray]
    ) -> None:
        """total -= sum of self masks of survivors, and -/+ the pairwise masks between survivors and the
        dropped (one PRG expansion each), the vector split over ``workers`` threads
        (:meth:`~securefgl.protocols._prg.MaskExpander.combine`)."""
        sid, r = self.state.session_id, self.round_index
        minus = self_keys([seeds[u].tobytes() for u in self.state.u3], sid, r, self.state.u3)
        plus: list[bytes] = []
        for v, secret in keys.items():
            sk = X25519PrivateKey.from_private_bytes(secret.tobytes())
            for u in self._masked_with_dead(v):
                key = pair_key(
                    sk.exchange(X25519PublicKey.from_public_bytes(self.state.keys[u][1])), sid, r, u, v
                )
                (minus if v > u else plus).append(key)  # y_u holds +PRG(k_uv) when v > u: remove it
        ex = expander_for(self.layout.length, self.schema.ring_bits, algorithm=self.config.prg)
        ex.combine(total, plus, minus, workers=self.workers)

    def _release(self, total: np.ndarray, ph: str) -> Outgoing | None:
        """The unmasked sum: released to the server, or sent to the designated recipient (still padded)."""
        if self.recipient is None:
            self.state.result = release_ring(
                self.schema, self.layout, total, len(self.state.u3), ph, self.config.min_contributors
            )
            return None
        deliver = DeliverRequest(
            session_id=self.state.session_id,
            survivors=self.state.u3,
            ring_bits=self.schema.ring_bits,
            vector=total,
        )
        return Outgoing(Stage.DELIVER.value, {self.recipient: deliver.to_bytes()})


#: Elements of a packed upload unpacked at a time while summing (256-512 KiB: the buffer stays in L2; a
#: 100,000-element upload split over two threads is one chunk per piece, a million-element one eight).
UNPACK_CHUNK = 65536
#: Vectors each of two threads must have before a sum that is not split by elements is split by vectors.
ITEM_SPLIT_MIN = 4
#: Bytes a vector must have before its sum is split by vectors (below, the hand-off costs more than it saves:
#: the small sums of a round's evaluation counts stay on one thread).
ITEM_SPLIT_MIN_BYTES = 1 << 16


class RunningSum:
    """:math:`\\sum_u y_u` wrapping in the ring's machine word, in one preallocated accumulator.

    The masked vectors of a stage (read-only views of the message bytes, or the bytes themselves when the ring's
    elements are packed narrower than their word: :class:`~securefgl.protocols._fields.PackedRing`; no copy)
    are range-checked and added in one batch (:meth:`add_all`), the vector cut into pieces that the protocol's
    worker threads claim where that pays on this machine
    (:class:`~securefgl.protocols._split_planner.SplitPlanner`), else (vectors of :data:`ITEM_SPLIT_MIN_BYTES` or
    more) the vectors halved between two threads, the second summing into an accumulator of its own that is added
    once at the end (one hand-off instead of two per vector: at 100 uploads of 100,000 words 5.4 against 6.3 ms on
    this project's VM, 2026-12-06). Each piece of
    each vector is (unpacked in chunks into a small buffer and) checked right before it is added, while it is in
    cache. :meth:`total_of` then removes the vectors of clients that did not end up among the survivors (rare:
    malformed replies, complaints).
    """

    def __init__(self, length: int, ring_bits: int) -> None:
        self.length = length
        self.ring_bits = ring_bits
        self.dtype = ring_dtype(ring_bits)
        self.total = recycled(length, self.dtype)
        self.total.fill(0)
        self.vectors: dict[int, np.ndarray | PackedRing] = {}

    def add_all(self, messages: Mapping[int, Any], workers: int = 1) -> list[int]:
        """Add the ``vector`` of every message that has one of this sum's length and ring; return the clients
        whose vector has an element :math:`\\ge 2^{bits}` (not added: the caller excludes them).

        Every element is used only modulo :math:`2^{bits}`, so the check changes no sum; it keeps the wire
        strict (one encoding per vector), as :func:`~securefgl.protocols.messages.decode` does by default.
        """
        items = [
            (c, vec)
            for c, msg in messages.items()
            if isinstance(vec := getattr(msg, "vector", None), (np.ndarray, PackedRing))
            and vec.shape == (self.length,)
            and msg.ring_bits == self.ring_bits
        ]
        if not items:
            return []
        limit = (1 << self.ring_bits) if self.ring_bits < 8 * self.dtype.itemsize else None
        bad: set[int] = set()

        def add_range(acc: np.ndarray, lo: int, hi: int, first: int, end: int) -> set[int]:
            """Items ``first`` to ``end - 1``, elements ``lo`` to ``hi - 1``, checked and added into ``acc``; the
            items with an element out of the ring (their chunks already added taken back) are returned."""
            out_of_range: set[int] = set()
            scratch = recycled(UNPACK_CHUNK, self.dtype)  # this thread's: the chunks of packed uploads
            for j in range(first, end):
                vec = items[j][1]
                a = lo
                while a < hi:
                    if isinstance(vec, PackedRing):
                        b = min(a + UNPACK_CHUNK, hi)
                        v = vec.unpack_into(a, b, scratch)
                    else:
                        b = hi
                        v = vec[a:b]
                    if limit is not None and v.size and int(v.max()) >= limit:
                        out_of_range.add(j)
                        _take_back(acc, vec, lo, a)  # the chunks of this piece already added
                        break
                    part = acc[a:b]
                    np.add(part, v, out=part, dtype=self.dtype, casting="unsafe")
                    a = b
            return out_of_range

        def run(bounds: list[tuple[int, int]], first: int, end: int) -> None:
            """Items ``first`` to ``end - 1``: each piece of ``bounds`` on the thread that claims it, or, when the
            vector is not split (one range) and there are worker threads, the items halved between two threads,
            the second adding its half into an accumulator of its own (one hand-off instead of one per vector)."""
            if (
                len(bounds) == 1
                and workers > 1
                and end - first >= 2 * ITEM_SPLIT_MIN
                and self.length * self.dtype.itemsize >= ITEM_SPLIT_MIN_BYTES
            ):
                lo, hi = bounds[0]
                mid = (first + end) // 2
                found: list[set[int]] = [set(), set()]
                side: list[np.ndarray] = []

                def half(i: int) -> None:
                    if i == 0:
                        found[0] = add_range(self.total, lo, hi, first, mid)
                    else:
                        acc = recycled(self.length, self.dtype)
                        acc.fill(0)
                        side.append(acc)
                        found[1] = add_range(acc, lo, hi, mid, end)

                run_claimed(2, half)
                np.add(self.total, side[0], out=self.total)
                bad.update(found[0] | found[1])
                return
            out_of_range: list[set[int]] = [set() for _ in bounds]

            def piece(i: int) -> None:
                lo, hi = bounds[i]
                out_of_range[i] = add_range(self.total, lo, hi, first, end)

            run_claimed(len(bounds), piece)
            found_any = set().union(*out_of_range)
            for j in found_any:  # take back the pieces of a bad vector that passed
                for (lo, hi), skipped in zip(bounds, out_of_range, strict=True):
                    if j not in skipped:
                        _take_back(self.total, items[j][1], lo, hi)
            bad.update(found_any)

        split = piece_bounds(self.length, self.dtype.itemsize, workers)
        planner().plan("sum", split, self.dtype.itemsize, len(items)).execute(run)
        for j, (c, vec) in enumerate(items):
            if j not in bad:
                self.vectors[c] = vec
        return sorted(items[j][0] for j in bad)

    def total_of(self, survivors: Sequence[int]) -> np.ndarray:
        """The sum of exactly the ``survivors``' vectors (each of which was added)."""
        keep = set(survivors)
        for c, vec in self.vectors.items():
            if c not in keep:
                _take_back(self.total, vec, 0, self.length)
        missing = keep - set(self.vectors)
        if missing:  # pragma: no cover - survivors are accepted, hence well-formed, hence added
            raise ProtocolError(f"survivors {sorted(missing)} have no summed input")
        self.vectors.clear()
        return self.total


def _take_back(acc: np.ndarray, vec: np.ndarray | PackedRing, lo: int, hi: int) -> None:
    """Subtract elements ``lo`` to ``hi - 1`` of an added vector from ``acc`` (unpacked in chunks if packed)."""
    if not isinstance(vec, PackedRing):
        part = acc[lo:hi]
        np.subtract(part, vec[lo:hi], out=part, dtype=acc.dtype, casting="unsafe")
        return
    scratch = recycled(UNPACK_CHUNK, acc.dtype)
    for a, b in _chunks(lo, hi):
        part = acc[a:b]
        np.subtract(part, vec.unpack_into(a, b, scratch), out=part, dtype=acc.dtype, casting="unsafe")


def _chunks(lo: int, hi: int) -> list[tuple[int, int]]:
    """``[lo, hi)`` cut into ranges of at most :data:`UNPACK_CHUNK` elements."""
    return [(a, min(a + UNPACK_CHUNK, hi)) for a in range(lo, hi, UNPACK_CHUNK)]
