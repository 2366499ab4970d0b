"""Hazmat: the consistency-check round of SecAgg/SecAgg+ against a lying server (Bonawitz et al.
2017, §4, malicious-server variant) and the signed key advertisement.

.. warning::
    Low-level building block of :mod:`securefgl.protocols.secaggplus`.

After the masked inputs, the server sends every survivor the survivor set :math:`U_3`
(:class:`ConsistencyRequest`). Each client checks it (sorted, unique, contains itself, at least
:math:`t` clients, all of them advertised keys), signs ``(session id, round, U_3)`` with its long-term
Ed25519 identity key and replies (:class:`ConsistencySignature`); it signs at most one set per session.
The server forwards the set with the signatures it collected (:class:`CertifiedUnmaskRequest`) and a
client answers only if at least :func:`quorum` distinct survivors signed exactly that set, and if the
``alive``/``dead`` lists it is asked about are its own neighbours split by that set.

Why a quorum, not just :math:`t` signatures: honest clients sign one set each, so two different
sets can both collect :math:`q` signatures only if :math:`2q - |U_1|` signers signed both, i.e. are
corrupted. With :math:`q > (|U_1| + \\gamma n)/2` no two survivor sets can be certified, so a server
that tells some clients "u survived" and others "u dropped" (the split attack) is refused by every
client that was shown a set without a quorum, and at most one set has one. On the complete graph with
the default majority threshold :math:`q = t` (Bonawitz et al. use :math:`t` signatures); on a Harary
graph :math:`q` exceeds :math:`t`, which costs :math:`O(n)` signature checks per client instead of
:math:`O(\\log n)`. Google's ``fcp/secagg`` has no consistency round; Flower has none either.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from securefgl.errors import MalformedMessageError
from securefgl.protocols._fields import _Reader
from securefgl.protocols._identity import SIGNATURE_BYTES, IdentityDirectory, survivors_statement
from securefgl.protocols.messages import (
    U32,
    Field,
    Fixed,
    IdList,
    KeyTable,
    Message,
)

__all__ = [
    "CertifiedUnmaskRequest",
    "ConsistencyRequest",
    "ConsistencySignature",
    "SignatureList",
    "SignedAdvertiseKeys",
    "SignedShareKeysRequest",
    "certified_signers",
    "quorum",
]

_U32_MAX = 2**32 - 1
_SIG = Fixed(SIGNATURE_BYTES)
_BYTES32 = Fixed(32)


class SignatureList(Field):
    """Tuple of ``(client_id, 64-byte Ed25519 signature)``."""

    _ROW = struct.Struct(f">I{SIGNATURE_BYTES}s")

    def check(self, value: Any, name: str, msg: Any) -> tuple[tuple[int, bytes], ...]:
        rows = []
        for cid, sig in value:
            if isinstance(cid, bool) or not isinstance(cid, int) or not 0 <= cid < _U32_MAX:
                raise MalformedMessageError(f"field {name!r}: client id {cid!r} out of range")
            rows.append((cid, _SIG.check(sig, name, msg)))
        return tuple(rows)

    def put(self, value: tuple[tuple[int, bytes], ...], out: list[bytes | memoryview], msg: Any) -> None:
        out.append(U32.pack(len(value)) + b"".join(self._ROW.pack(*row) for row in value))

    def get(self, r: _Reader, got: Mapping[str, Any], name: str) -> tuple[tuple[int, bytes], ...]:
        n = r.count(self._ROW.size, name)
        rows = tuple((int(c), bytes(s)) for c, s in self._ROW.iter_unpack(r.take(n * self._ROW.size)))
        if any(c == _U32_MAX for c, _ in rows):
            raise MalformedMessageError(f"field {name!r} contains the reserved id {_U32_MAX}")
        return rows


@dataclass(frozen=True, eq=False)
class SignedAdvertiseKeys(Message):
    """Client -> server, ``advertise_keys`` with identities: both public keys and the client's
    signature of :func:`~securefgl.protocols._identity.advertise_statement`."""

    TYPE: ClassVar[int] = 16
    STAGE: ClassVar[str] = "advertise_keys"
    channel_pk: bytes
    mask_pk: bytes
    signature: bytes
    FIELDS: ClassVar[dict[str, Field]] = {"channel_pk": _BYTES32, "mask_pk": _BYTES32, "signature": _SIG}


@dataclass(frozen=True, eq=False)
class SignedShareKeysRequest(Message):
    """Server -> client, ``share_keys`` with identities: the key table and each row's signature."""

    TYPE: ClassVar[int] = 17
    STAGE: ClassVar[str] = "share_keys"
    keys: tuple[tuple[int, bytes, bytes], ...]
    signatures: tuple[tuple[int, bytes], ...]
    FIELDS: ClassVar[dict[str, Field]] = {"keys": KeyTable(), "signatures": SignatureList()}


@dataclass(frozen=True, eq=False)
class ConsistencyRequest(Message):
    """Server -> survivor, stage ``consistency_check``: the survivor set :math:`U_3` to sign."""

    TYPE: ClassVar[int] = 18
    STAGE: ClassVar[str] = "consistency_check"
    session_id: bytes
    survivors: tuple[int, ...]
    FIELDS: ClassVar[dict[str, Field]] = {"session_id": _BYTES32, "survivors": IdList()}


@dataclass(frozen=True, eq=False)
class ConsistencySignature(Message):
    """Survivor -> server, stage ``consistency_check``: its signature of ``(sid, round, U_3)``."""

    TYPE: ClassVar[int] = 19
    STAGE: ClassVar[str] = "consistency_check"
    session_id: bytes
    signature: bytes
    FIELDS: ClassVar[dict[str, Field]] = {"session_id": _BYTES32, "signature": _SIG}


@dataclass(frozen=True, eq=False)
class CertifiedUnmaskRequest(Message):
    """Server -> signer, stage ``unmasking`` after a consistency round: the survivor set, the
    signatures collected on it, and the split of the client's neighbours into alive and dead."""

    TYPE: ClassVar[int] = 20
    STAGE: ClassVar[str] = "unmasking"
    session_id: bytes
    survivors: tuple[int, ...]
    signatures: tuple[tuple[int, bytes], ...]
    alive: tuple[int, ...]
    dead: tuple[int, ...]
    FIELDS: ClassVar[dict[str, Field]] = {
        "session_id": _BYTES32,
        "survivors": IdList(),
        "signatures": SignatureList(),
        "alive": IdList(),
        "dead": IdList(),
    }


def quorum(advertised: int, threshold: int, corrupt_rate: float) -> int:
    """Signatures needed on a survivor set: :math:`\\max(t, \\lfloor (|U_1| + \\lfloor \\gamma n
    \\rfloor)/2 \\rfloor + 1)` (module docstring), with :math:`|U_1|` the clients that advertised keys."""
    corrupted = math.floor((corrupt_rate + 1e-14) * advertised)
    return max(int(threshold), (advertised + corrupted) // 2 + 1)


def certified_signers(
    directory: IdentityDirectory,
    session_id: bytes,
    round_index: int,
    survivors: Sequence[int],
    signatures: Sequence[tuple[int, bytes]],
    *,
    enough: int | None = None,
) -> set[int]:
    """The distinct survivors whose signature of ``(session_id, round_index, survivors)`` verifies,
    checked in order; with ``enough``, checking stops once that many verified (a quorum needs no more)."""
    statement = survivors_statement(session_id, round_index, survivors)
    members = set(survivors)
    out: set[int] = set()
    for c, sig in signatures:
        if enough is not None and len(out) >= enough:
            break
        if c in members and c not in out and directory.verify(c, statement, sig):
            out.add(c)
    return out
