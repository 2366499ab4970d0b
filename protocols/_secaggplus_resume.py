"""Resumed SecAgg/SecAgg+ sessions: one key agreement serving several sums (hazmat).

A SecAgg+ sum costs two X25519 key pairs, about :math:`2k` exchanges and a Shamir sharing of the mask key
per client before any vector moves; in a simulated round of 100 clients this set-up is about half of the
secure round. With ``session_uses = m > 1`` (:class:`~securefgl.protocols._secaggplus_params.SecAggPlusConfig`)
a session whose sum completed with every client alive is *resumed* for the next sum over the same clients:

- **Use 0** is an ordinary session (advertise, share keys, masked input, unmask). Each party keeps, instead
  of wiping, what the next use needs: the key table and graph (public), and, per client, its channel key,
  its share channels, the HKDF-Extract of its mask-key secrets with its neighbours, and its neighbours'
  mask-key shares.
- **Use** :math:`j \\ge 1` is two stages, ``resume`` and ``unmasking`` (with ``consistency_check`` between
  them against a lying server, and ``deliver`` after them in designated-recipient mode). The server sends
  :class:`~securefgl.protocols.messages.ResumeRequest` (session id, :math:`j`, this sum's public parameters);
  every client checks them, derives the *use id*

  .. math::
      \\mathrm{uid}_j = \\mathrm{SHA256}(\\text{"use"}, \\text{ResumeRequest}_j, \\mathrm{SHA256}(\\text{context}_j)),

  draws a **fresh self-mask seed** :math:`b_u^{(j)}`, Shamir-shares it among its neighbours (AEAD over
  use 0's channel, with :math:`\\mathrm{uid}_j` in the associated data), commits to it, and answers at once
  with :class:`ResumedInput`: the commitment, the seed-share ciphertexts and its input masked with its self
  mask and with **every** neighbour of the session (all of them completed the previous use), under pairwise
  keys :math:`k_{uv}^{(j)} = \\mathrm{HKDF}(\\mathrm{X25519}(s_u, s_v), \\mathrm{uid}_j, r, (u, v))` that are
  fresh per use, so no mask is ever applied to two inputs. The server forwards the seed shares with the
  unmask requests (:class:`ResumedUnmaskRequest`); a member that sent nothing is dropped *after* sharing: its
  neighbours masked with it, and its mask key is reconstructed, as in use 0, from the shares they hold since
  use 0. A seed share that fails authentication makes its receiver refuse to unmask (it reveals nothing);
  the seed still has its other holders, and the sum aborts cleanly if fewer than :math:`t` answer.

Why this is as safe as a fresh session:

- **No mask repeats.** Each client keeps a use counter and answers a ``ResumeRequest`` only for a use above
  the last one it answered (it commits the counter before replying), and below ``session_uses``. A server that
  replays a use, or sends two requests for one use, is refused, so :math:`y_u^{(j)} - y_u^{(j')}` never
  cancels a pairwise mask. Different contexts or parameters give different use ids.
- **The self mask is fresh per use.** The server learns :math:`b_u^{(j)}` of every survivor at each use's
  unmasking, exactly as in a fresh session, and never a seed it could apply to another use.
- **A revealed mask key ends the session.** The server reconstructs a client's mask key :math:`s_u` only when
  ``u`` is declared dropped; from then on it could remove :math:`u`'s pairwise masks in every later use. So a
  client continues only after a use in which its unmask request listed *every* neighbour alive and none
  dropped (it was asked for no mask-key share, and none of its peers' keys was requested from it); otherwise
  it wipes the session. With the consistency round, that list is the certified survivor set, so a lying
  server cannot show one client "all alive" while collecting a peer's key from others. The server likewise
  starts a fresh session after any dropout, exclusion or rejected reply.

**Optimistic uses** (``optimistic_uses=True``): use :math:`j \\ge 1` is the ``resume`` stage alone (then
``deliver`` to a designated recipient). Each client answers with :class:`OptimisticInput`, its input masked
with every neighbour under the use's pairwise keys and nothing else (no self mask, no seed, no shares), and
finishes the use; the server releases the sum only if every member's input arrived (the pairwise masks then
cancel) and aborts the use otherwise, revealing nothing: no share of anything is sent in such a use, and a
client that sent its input answers no further request, so a lying server has no recovery to abuse. The
session id binds the mode (:func:`~securefgl.protocols._secaggplus_session.session_id_for`), so clients
configured differently never share a session. The price is dropout tolerance within a use.

What a resumed use saves: key generation, every X25519 exchange, the mask-key sharing and two of the four
round trips (a deployed sum costs one Flower step per round trip). What it keeps: per-use key expansion, the
seed sharing (one Shamir secret instead of two), the masking and the unmasking. What it gives up: the
complaint round before the input, so a client that sends its neighbours garbled seed shares makes the sum
abort when fewer than :math:`t` holders remain, instead of being excluded; the next sum then runs a fresh key
agreement, whose complaint round excludes it.
"""

from __future__ import annotations

import hashlib
import struct
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey

from securefgl.protocols import _shamir
from securefgl.protocols._channel import PeerChannel
from securefgl.protocols._consistency import SignatureList
from securefgl.protocols._fields import U8, Envelopes, Field, Fixed, IdList, Int, RingVector
from securefgl.protocols._harary import GraphParameters, SecretSharingGraph
from securefgl.protocols._secaggplus_session import SHARE_PLAINTEXT, wipe
from securefgl.protocols.messages import AdvertiseRequest, Message, ResumeRequest

__all__ = [
    "SEED_SHARE_BYTES",
    "ClientSession",
    "OptimisticInput",
    "ResumedInput",
    "ResumedUnmaskRequest",
    "ServerSession",
    "use_id_for",
]

_DOMAIN = b"securefgl/secagg/v1/use"
#: Plaintext size of a resumed use's share envelope: ``(src, dst)`` and one share (the seed's).
SEED_SHARE_BYTES = SHARE_PLAINTEXT.size + _shamir.LIMBS * 4


_BYTES32 = Fixed(32)


@dataclass(frozen=True, eq=False)
class ResumedInput(Message):
    """Client -> server, stage ``resume``: the use id it computed, a commitment to its fresh self-mask seed,
    one AEAD ciphertext of its seed share per neighbour, and its masked vector (masked with every neighbour of
    the session)."""

    TYPE: ClassVar[int] = 11
    STAGE: ClassVar[str] = "resume"
    session_id: bytes
    seed_commitment: bytes
    envelopes: tuple[tuple[int, bytes], ...]
    ring_bits: int
    vector: np.ndarray
    FIELDS: ClassVar[dict[str, Field]] = {
        "session_id": _BYTES32,
        "seed_commitment": _BYTES32,
        "envelopes": Envelopes(),
        "ring_bits": Int(U8, 64),
        "vector": RingVector(),
    }


@dataclass(frozen=True, eq=False)
class OptimisticInput(Message):
    """Client -> server, stage ``resume`` of an optimistic use (``optimistic_uses``): the use id it computed
    and its vector masked with every neighbour of the session, without a self mask and without seed shares."""

    TYPE: ClassVar[int] = 13
    STAGE: ClassVar[str] = "resume"
    session_id: bytes
    ring_bits: int
    vector: np.ndarray
    FIELDS: ClassVar[dict[str, Field]] = {
        "session_id": _BYTES32,
        "ring_bits": Int(U8, 64),
        "vector": RingVector(),
    }


@dataclass(frozen=True, eq=False)
class ResumedUnmaskRequest(Message):
    """Server -> survivor, stage ``unmasking`` of a resumed use: its neighbours split into alive and dead, the
    seed-share ciphertexts its alive neighbours sent it, and, after a consistency round, the survivor set and
    a quorum of signatures on it (both empty without one)."""

    TYPE: ClassVar[int] = 12
    STAGE: ClassVar[str] = "unmasking"
    session_id: bytes
    alive: tuple[int, ...]
    dead: tuple[int, ...]
    envelopes: tuple[tuple[int, bytes], ...]
    survivors: tuple[int, ...]
    signatures: tuple[tuple[int, bytes], ...]
    FIELDS: ClassVar[dict[str, Field]] = {
        "session_id": _BYTES32,
        "alive": IdList(),
        "dead": IdList(),
        "envelopes": Envelopes(),
        "survivors": IdList(),
        "signatures": SignatureList(),
    }


def use_id_for(request: ResumeRequest, context: bytes) -> bytes:
    """The use id of a resumed use: SHA-256 of the request (session id, use, parameters) and the context
    digest. It takes the session id's place in every key derivation and message of the use."""
    h = hashlib.sha256(_DOMAIN)
    body = request.to_bytes()
    h.update(struct.pack(">I", len(body)) + body)
    h.update(hashlib.sha256(bytes(context)).digest())
    return h.digest()


@dataclass
class ClientSession:
    """What a client keeps between the uses of a session (secrets; :meth:`wipe` erases them).

    Attributes:
        party_id: the client.
        session_id: the session id of use 0 (resume requests name it).
        use: the last use this client answered (its monotone counter).
        request: use 0's advertise request (the invited clients, hence the share positions).
        params: the graph degree and threshold.
        keys: client -> (channel public key, mask public key), the session's key table.
        neighbours: this client's neighbourhood (itself included).
        channel_sk: its channel private key (recipient pads and delivered sums).
        channels: neighbour -> the share channel of use 0 (each use binds its messages to its use id).
        mask_prk: neighbour -> HKDF-Extract of the mask keys' X25519 secret (each use's pairwise mask key
            is expanded from it).
        key_shares: neighbour -> this client's share of that neighbour's mask key.
        own_key_share: its own share of its mask key.
    """

    party_id: int
    session_id: bytes
    use: int
    request: AdvertiseRequest
    params: GraphParameters
    keys: dict[int, tuple[bytes, bytes]]
    neighbours: tuple[int, ...]
    channel_sk: X25519PrivateKey | None
    channels: dict[int, PeerChannel] = field(default_factory=dict)
    mask_prk: dict[int, bytes] = field(default_factory=dict)
    key_shares: dict[int, np.ndarray] = field(default_factory=dict)
    own_key_share: np.ndarray | None = None

    def wipe(self) -> None:
        """Best-effort erasure (the share arrays are zeroed; key objects and bytes can only be dropped)."""
        wipe(self.own_key_share, *self.key_shares.values())
        self.key_shares.clear()
        self.channels.clear()
        self.mask_prk.clear()
        self.channel_sk = None
        self.own_key_share = None


@dataclass(frozen=True)
class ServerSession:
    """What the server keeps between the uses of a session (public values only).

    Attributes:
        session_id: the session id of use 0.
        use: the last use that completed.
        members: the clients of the session (every one of them completed every use so far).
        keys: the key table.
        graph: the secret-sharing graph.
        params: the graph degree and threshold.
        key_signatures: the identity signatures on the advertised keys (with a directory).
    """

    session_id: bytes
    use: int
    members: tuple[int, ...]
    keys: dict[int, tuple[bytes, bytes]]
    graph: SecretSharingGraph
    params: GraphParameters
    key_signatures: dict[int, bytes] = field(default_factory=dict)
