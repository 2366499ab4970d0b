"""What both parties of a SecAgg/SecAgg+ session derive alike (hazmat).

The session id and graph, the HKDF-derived mask and pad keys, the seed commitment, the layout of the
clip counts inside the masked vector, and the release of an unmasked ring sum. Re-exported (the public
names) by :mod:`securefgl.protocols.secaggplus`, whose docstring gives the construction.
"""

from __future__ import annotations

import hashlib
import hmac
import struct
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey

from securefgl.errors import ReleaseRefusedError
from securefgl.protocols import _shamir
from securefgl.protocols._harary import SecretSharingGraph
from securefgl.protocols._prg import KEY_BYTES, RandomSource, derive_key, derive_keys, hkdf_info, hkdf_infos
from securefgl.protocols._release import check_sum_range, refuse_small_sum
from securefgl.protocols.base import Sums
from securefgl.protocols.encoding import SumSchema
from securefgl.protocols.messages import AdvertiseRequest

__all__ = [
    "SHARE_BYTES",
    "SHARE_PLAINTEXT",
    "ClipLayout",
    "commitment",
    "hkdf_extract",
    "key_is_usable",
    "pad_key",
    "pair_key",
    "pair_keys",
    "private_key",
    "release_ring",
    "self_key",
    "self_keys",
    "session_graph",
    "session_id_for",
    "wipe",
]


_DOMAIN = b"securefgl/secagg/v1"
SHARE_PLAINTEXT = struct.Struct(">II")
SHARE_BYTES = SHARE_PLAINTEXT.size + 2 * _shamir.LIMBS * 4


class ClipLayout:
    """Per-block clip counts appended to the masked vector as limbs that cannot wrap the ring.

    A count :math:`c \\le` block size is split into limbs of :math:`L = b - \\operatorname{bitlen}(N)`
    bits (:math:`N` = ``max_clients``), so a sum of :math:`N` limbs stays below :math:`2^b` and the
    total clip count of each block is recovered exactly while each client's own count stays masked.
    """

    def __init__(self, schema: SumSchema) -> None:
        self.ring_bits = schema.ring_bits
        self.limb_bits = max(1, schema.ring_bits - int(schema.max_clients).bit_length())
        self.names = schema.names
        self.limbs = {b.name: max(1, -(-int(b.size).bit_length() // self.limb_bits)) for b in schema.blocks}
        self.offset = schema.length
        self.extra = sum(self.limbs.values())
        self.length = schema.length + self.extra

    def encode(self, counts: Mapping[str, int]) -> np.ndarray:
        out = np.zeros(self.extra, dtype=np.uint64)
        i, mask = 0, (1 << self.limb_bits) - 1
        for name in self.names:
            c = int(counts.get(name, 0))
            for j in range(self.limbs[name]):
                out[i] = (c >> (j * self.limb_bits)) & mask
                i += 1
        return out

    def decode(self, limbs: np.ndarray, num_contributors: int | None = None) -> dict[str, int]:
        """Per-block clip counts from the summed limbs; with ``num_contributors`` each limb sum must be
        at most :math:`n (2^L - 1)` (honest limbs are below :math:`2^L`).

        Raises:
            ReleaseRefusedError: a limb sum beyond its maximum (a forged count).
        """
        if num_contributors is not None and limbs.size:
            top = num_contributors * ((1 << self.limb_bits) - 1)
            if int(np.max(limbs)) > top:
                raise ReleaseRefusedError(
                    f"a clip-count limb sums to more than n * (2^{self.limb_bits} - 1) = {top}: some input "
                    "carried forged counts; nothing is released",
                    phase="release",
                )
        out: dict[str, int] = {}
        i = 0
        for name in self.names:
            total = 0
            for j in range(self.limbs[name]):
                total += int(limbs[i]) << (j * self.limb_bits)
                i += 1
            out[name] = total
        return out


def _lp(b: bytes) -> bytes:
    return struct.pack(">I", len(b)) + b


def session_id_for(
    request: AdvertiseRequest,
    keys: Sequence[tuple[int, bytes, bytes]],
    context: bytes,
    *,
    optimistic: bool = False,
) -> bytes:
    """The session id: SHA-256 of the public parameters, the context digest and every advertised key.

    A session whose resumed uses are optimistic (``optimistic_uses``) has another domain, so clients
    configured differently compute different ids and never share a session: a member that sent an input
    without a self mask must never have peers that would answer a request for its mask-key shares.
    """
    h = hashlib.sha256(_DOMAIN + (b"/session/optimistic-uses" if optimistic else b"/session"))
    h.update(_lp(request.to_bytes()))
    h.update(hashlib.sha256(bytes(context)).digest())
    h.update(struct.pack(">I", len(keys)))
    for cid, cpk, spk in keys:
        h.update(struct.pack(">I", cid) + cpk + spk)
    return h.digest()


def session_graph(session_id: bytes, clients: Sequence[int], degree: int) -> SecretSharingGraph:
    """The secret-sharing graph of a session (its label permutation is derived from the session id)."""
    return SecretSharingGraph(clients, degree, derive_key(session_id, "graph-seed", session_id=session_id))


def pair_key(shared: bytes, sid: bytes, round_index: int, u: int, v: int) -> bytes:
    """The pairwise mask key :math:`k_{uv}` from the X25519 secret of ``u`` and ``v`` (order-free)."""
    a, b = (u, v) if u < v else (v, u)
    return derive_key(
        shared, "pairwise-mask", session_id=sid, round_index=round_index, pair=(a, b), label=b"vector"
    )


def hkdf_extract(shared: bytes) -> bytes:
    """HKDF-Extract (RFC 5869, no salt: ``HashLen`` zero bytes) of an X25519 secret: the pseudorandom key
    from which :func:`pair_keys` expands a resumed use's mask keys, kept instead of the secret."""
    return hmac.digest(bytes(KEY_BYTES), bytes(shared), "sha256")


def pair_keys(prks: Mapping[int, bytes], sid: bytes, round_index: int, u: int) -> dict[int, bytes]:
    """:func:`pair_key` of ``u`` with every neighbour, from the neighbours' :func:`hkdf_extract` keys:
    bit-identical to ``pair_key(shared_v, sid, round_index, u, v)`` (HKDF is Extract then Expand), at one
    HKDF-Expand (one HMAC) per neighbour and one ``info`` prefix per call."""
    info = hkdf_info("pairwise-mask", session_id=sid, round_index=round_index, pair=(0, 0), label=b"vector")
    head, tail = info[: -(16 + 4 + 6)], info[-(4 + 6) :]  # ... | 0x01 | u64 a | u64 b | lp(b"vector")
    out = {}
    for v, prk in prks.items():
        a, b = (u, v) if u < v else (v, u)
        out[v] = hmac.digest(prk, head + struct.pack(">QQ", a, b) + tail + b"\x01", "sha256")
    return out


def self_key(seed: bytes | bytearray, sid: bytes, round_index: int, u: int) -> bytes:
    """The self-mask key of ``u`` from its seed :math:`b_u`."""
    return derive_key(
        seed, "self-mask", session_id=sid, round_index=round_index, pair=(u, u), label=b"vector"
    )


def self_keys(seeds: Sequence[bytes], sid: bytes, round_index: int, owners: Sequence[int]) -> list[bytes]:
    """:func:`self_key` of every ``owners[i]`` from ``seeds[i]`` (the server's mask removal: one batch)."""
    pairs = [(u, u) for u in owners]
    return derive_keys(
        seeds, hkdf_infos("self-mask", pairs, session_id=sid, round_index=round_index, label=b"vector")
    )


def pad_key(shared: bytes, sid: bytes, round_index: int, u: int, r: int) -> bytes:
    """The recipient pad key :math:`p_{ur}` from the channel X25519 secret of ``u`` and recipient ``r``."""
    return derive_key(
        shared, "recipient-pad", session_id=sid, round_index=round_index, pair=(u, r), label=b"vector"
    )


def commitment(sid: bytes, u: int, seed: bytes | bytearray) -> bytes:
    """SHA-256 commitment of ``u`` to its self-mask seed, checked against reconstructions."""
    return hashlib.sha256(_DOMAIN + b"/seed-commitment" + sid + struct.pack(">Q", u) + bytes(seed)).digest()


def private_key(random: RandomSource) -> X25519PrivateKey:
    """A fresh X25519 private key from ``random``."""
    return X25519PrivateKey.from_private_bytes(random(KEY_BYTES))


#: The private key every :func:`key_is_usable` probe exchanges with (drawn once per process from the OS
#: CSPRNG; the shared secrets it yields are discarded).
_PROBE_KEY = X25519PrivateKey.generate()


def key_is_usable(pk: bytes) -> bool:
    """Whether a public key gives a non-degenerate X25519 exchange (not a low-order point).

    One probe key serves every check: a clamped X25519 scalar is a multiple of 8 below :math:`2^{255}`, so
    it is never a multiple of the large prime order of the curve's or its twist's main subgroup, and the
    exchange yields the all-zero secret (``ValueError``) exactly when the point's order divides 8, whichever
    scalar probes it (a fresh key per check cost a key generation, 20 us, per advertised key).
    """
    try:
        _PROBE_KEY.exchange(X25519PublicKey.from_public_bytes(pk))
    except ValueError:
        return False
    return True


def wipe(*arrays: Any) -> None:
    """Best-effort zeroing of writeable numpy arrays and bytearrays (other arguments are ignored)."""
    for a in arrays:
        if isinstance(a, np.ndarray) and a.flags.writeable:
            a.fill(0)
        elif isinstance(a, bytearray):
            a[:] = bytes(len(a))


def release_ring(
    schema: SumSchema, layout: ClipLayout, ring: np.ndarray, n: int, phase: str, min_contributors: int = 1
) -> Sums:
    """Decode an unmasked ring sum of ``n`` inputs (values and clip-count limbs), check it is a sum that
    ``n`` in-bound inputs can produce, and apply the release rules (at least ``min_contributors`` and
    the schema's own minimum)."""
    refuse_small_sum(n, min_contributors, schema.min_contributors, phase)
    clips = layout.decode(ring[layout.offset :], n)
    values = schema.decode(ring[: layout.offset], n)
    errors = schema.error_bound(n)
    check_sum_range(schema.blocks, values, n, errors, clips, phase)
    return schema.release(values, n, clips, errors)
