"""Hazmat: authenticated peer-to-peer channels relayed by the server (X25519 + HKDF + AEAD).

.. warning::
    Low-level building block for protocol implementers (used by the CKKS key distribution; written so
    that the SecAgg share channel can adopt it). Algorithms never use it.

Two clients :math:`u, v` that advertised X25519 public keys through the server agree on a shared secret
and derive one key per *direction* and purpose, bound to the session id:

.. math::
    k_{u \\to v} = \\mathrm{HKDF}_{\\mathrm{SHA256}}\\big(\\mathrm{X25519}(sk_u, pk_v),\\ \\mathit{info} =
        \\text{version} \\| \\text{"p2p/"purpose} \\| \\text{sid} \\| \\text{round} \\| (u, v)\\big)

A message is ``nonce (12 random bytes) || ChaCha20-Poly1305(k_{u->v}, nonce, plaintext, ad)`` with
associated data ``version || purpose || sid || round || u || v``, so a ciphertext cannot be replayed into
another session, round, purpose or direction, nor attributed to another sender. Every failure
(truncated blob, wrong key, wrong associated data, low-order peer key) raises the single detail-free
:class:`~securefgl.errors.InvalidMessage`, checked before anything is decoded. Replays *within* a session
(the same blob delivered twice) are the receiving state machine's job. A channel that serves several uses
of one session (a resumed SecAgg+ session) binds each message to its use with ``bind`` (the use id), which
the associated data carries, so a ciphertext of one use does not open in another.

Authentication is only as good as the binding of public keys to client ids: the server relays the keys,
so an honest-but-curious server is harmless, but a malicious server without a PKI can sit in the middle
(as in Bonawitz et al. 2017 without signatures).
"""

from __future__ import annotations

import os
import struct

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from cryptography.hazmat.primitives.ciphers.aead import ChaCha20Poly1305

from securefgl.errors import ConfigError, InvalidMessage
from securefgl.protocols._prg import INFO_PREFIX, KEY_BYTES, derive_key

__all__ = ["NONCE_BYTES", "PUBLIC_KEY_BYTES", "TAG_BYTES", "ChannelKeys", "PeerChannel"]

PUBLIC_KEY_BYTES = 32
NONCE_BYTES = 12
TAG_BYTES = 16


class ChannelKeys:
    """One party's X25519 key pair for peer channels (private key from the OS CSPRNG).

    Args:
        private_bytes: INSECURE, tests only: a fixed 32-byte private key. (default: fresh random key)
    """

    def __init__(self, *, private_bytes: bytes | None = None) -> None:
        if private_bytes is None:
            self._sk = X25519PrivateKey.generate()
        else:
            if len(private_bytes) != KEY_BYTES:
                raise ConfigError(f"an X25519 private key has {KEY_BYTES} bytes, got {len(private_bytes)}")
            self._sk = X25519PrivateKey.from_private_bytes(bytes(private_bytes))
        self.public_bytes: bytes = self._sk.public_key().public_bytes_raw()

    def channel(
        self, me: int, peer: int, peer_public: bytes, *, session_id: bytes, round_index: int, purpose: str
    ) -> PeerChannel:
        """The channel between ``me`` and ``peer`` for one purpose in one session.

        Raises:
            InvalidMessage: ``peer_public`` is not a valid X25519 key or gives a low-order shared secret.
        """
        try:
            if len(peer_public) != PUBLIC_KEY_BYTES:
                raise ValueError("bad length")
            shared = self._sk.exchange(X25519PublicKey.from_public_bytes(bytes(peer_public)))
        except ValueError:
            raise InvalidMessage() from None
        return PeerChannel(shared, me, peer, session_id=session_id, round_index=round_index, purpose=purpose)


class PeerChannel:
    """Seals messages from ``me`` to ``peer`` and opens messages from ``peer`` to ``me``.

    Args:
        shared: the 32-byte X25519 shared secret.
        me, peer: client ids (distinct).
        session_id: the session id every key is bound to.
        round_index: the round.
        purpose: what the channel carries (e.g. ``"ckks-key"``, ``"secagg-shares"``).
    """

    def __init__(
        self, shared: bytes, me: int, peer: int, *, session_id: bytes, round_index: int, purpose: str
    ) -> None:
        if me == peer:
            raise ConfigError(f"a peer channel needs two distinct parties, got {me} twice")
        if not purpose:
            raise ConfigError("a peer channel needs a purpose label")
        self.me, self.peer = int(me), int(peer)
        self._sid = bytes(session_id)
        self._round = int(round_index)
        self._purpose = purpose
        p = purpose.encode()
        # the associated data's fixed part, built once (a share channel seals and opens dozens per sum)
        self._ad_head = (
            INFO_PREFIX + struct.pack(">I", len(p)) + p + struct.pack(">I", len(self._sid)) + self._sid
        )
        info = f"p2p/{purpose}"
        self._send = ChaCha20Poly1305(
            derive_key(shared, info, session_id=self._sid, round_index=self._round, pair=(self.me, self.peer))
        )
        self._recv = ChaCha20Poly1305(
            derive_key(shared, info, session_id=self._sid, round_index=self._round, pair=(self.peer, self.me))
        )

    def _ad(self, src: int, dst: int, bind: bytes) -> bytes:
        ad = self._ad_head + struct.pack(">QQQ", self._round, src, dst)
        return ad + struct.pack(">I", len(bind)) + bind if bind else ad

    def seal(self, plaintext: bytes, *, bind: bytes = b"") -> bytes:
        """``nonce || AEAD ciphertext`` of ``plaintext`` from ``me`` to ``peer`` (fresh random nonce),
        bound to ``bind`` (e.g. a use id; empty: the session alone)."""
        nonce = os.urandom(NONCE_BYTES)
        return nonce + self._send.encrypt(nonce, bytes(plaintext), self._ad(self.me, self.peer, bind))

    def open(self, blob: bytes, *, bind: bytes = b"") -> bytes:
        """The plaintext of a message from ``peer`` to ``me`` sealed with the same ``bind``.

        Raises:
            InvalidMessage: any authentication failure (no detail).
        """
        if len(blob) < NONCE_BYTES + TAG_BYTES:
            raise InvalidMessage()
        try:
            return self._recv.decrypt(
                bytes(blob[:NONCE_BYTES]), bytes(blob[NONCE_BYTES:]), self._ad(self.peer, self.me, bind)
            )
        except InvalidTag:
            raise InvalidMessage() from None
