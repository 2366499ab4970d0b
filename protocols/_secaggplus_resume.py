"""Resumed SecAgg/SecAgg+ sessions: one key agreement serving several sums (hazmat).

A SecAgg+ sum costs two X25519 key pairs, about :math:`2k` exchanges and a Shamir sharing of the mask key
per client before any vector moves; in a simulated round of 100 clients this set-up is about half of the
secure round. With ``session_uses = m > 1`` (:class:`~securefgl.protocols._secaggplus_params.SecAggPlusConfig`)
a session whose sum completed with every client alive is *resumed* for the next sum over the same clients:

- **Use 0** is an ordinary session (advertise, share keys, masked input, unmask). Each party keeps, instead
  of wiping, what the next use needs: the key table and graph (public), and, per client, its channel key,
  its raw X25519 secrets with its neighbours and its neighbours' mask-key shares.
- **Use** :math:`j \\ge 1` opens with one ``resume`` stage in place of ``advertise_keys`` and ``share_keys``:
  the server sends :class:`~securefgl.protocols.messages.ResumeRequest` (session id, :math:`j`, this sum's
  public parameters); every client checks them, derives the *use id*

  .. math::
      \\mathrm{uid}_j = \\mathrm{SHA256}(\\text{"use"}, \\text{ResumeRequest}_j, \\mathrm{SHA256}(\\text{context}_j)),

  draws a **fresh self-mask seed** :math:`b_u^{(j)}`, Shamir-shares it among its neighbours (AEAD over
  use 0's channel, with :math:`\\mathrm{uid}_j` in the associated data) and commits to it. From there the use runs the ordinary
  stages with :math:`\\mathrm{uid}_j` as its session id: every pairwise mask key
  :math:`k_{uv}^{(j)} = \\mathrm{HKDF}(\\mathrm{X25519}(s_u, s_v), \\mathrm{uid}_j, r, (u, v))` is fresh, so no
  mask is ever applied to two inputs. A client that drops during a use is unmasked, as in use 0, from the
  mask-key shares its neighbours hold since use 0.

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

What a resumed use saves: key generation, every X25519 exchange, the mask-key sharing and one round trip.
What it keeps: per-use HKDF derivations, the seed sharing (one Shamir secret instead of two), the masking
and the unmasking.
"""

from __future__ import annotations

import hashlib
import struct
from dataclasses import dataclass, field

import numpy as np
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey

from securefgl.protocols import _shamir
from securefgl.protocols._channel import PeerChannel
from securefgl.protocols._harary import GraphParameters, SecretSharingGraph
from securefgl.protocols._secaggplus_session import SHARE_PLAINTEXT, wipe
from securefgl.protocols.messages import AdvertiseRequest, ResumeRequest

__all__ = ["SEED_SHARE_BYTES", "ClientSession", "ServerSession", "use_id_for"]

_DOMAIN = b"securefgl/secagg/v1/use"
#: Plaintext size of a resumed use's share envelope: ``(src, dst)`` and one share (the seed's).
SEED_SHARE_BYTES = SHARE_PLAINTEXT.size + _shamir.LIMBS * 4


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
