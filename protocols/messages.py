"""Versioned, typed, validated wire messages of the masking protocols (SecAgg, SecAgg+).

Every message is a frozen dataclass with a fixed field schema and a compact binary framing::

    magic "SF" (2 bytes) | wire version (1 byte) | message type (1 byte) | fields...

Integers are big-endian (``u8``/``u32``/``u64``); byte strings and lists are length-prefixed; ring
vectors carry their bit width and element count, zero padding to an 8-byte boundary of the message, then
the elements as little-endian integers of ``ceil(bits / 8)`` bytes each; Shamir share matrices carry their
shape, then ``uint32`` little-endian words.
:func:`decode` checks the magic, the version, the type (against what the receiver expects), every length
against the bytes actually present (so a forged count cannot make the receiver allocate), every value
range (ring elements below :math:`2^{b}`, shares below the field prime), and that no byte is left over.
It raises :class:`~securefgl.errors.MalformedMessageError` and nothing else for any bad input.

The field codecs live in :mod:`securefgl.protocols._fields` (re-exported here).

Messages carry no authentication of their own: the masking protocols authenticate what matters
(shares are AEAD-encrypted end to end; everything else is bound into the session id).
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any, ClassVar, TypeVar, cast, overload

import numpy as np

from securefgl.errors import MalformedMessageError
from securefgl.protocols._fields import (
    _U32_MAX,
    U8,
    U16,
    U32,
    U64,
    Blob,
    Envelopes,
    Field,
    Fixed,
    IdList,
    Int,
    KeyTable,
    OptionalId,
    RingVector,
    ShareMatrix,
    Text,
    _Reader,
)

__all__ = [
    "MAGIC",
    "WIRE_VERSION",
    "Message",
    "AdvertiseRequest",
    "AdvertiseKeys",
    "ShareKeysRequest",
    "ShareKeys",
    "MaskedInputRequest",
    "MaskedInput",
    "UnmaskRequest",
    "Unmask",
    "DeliverRequest",
    "ResumeRequest",
    "Abort",
    "U8",
    "U16",
    "U32",
    "U64",
    "Field",
    "Int",
    "OptionalId",
    "Fixed",
    "Blob",
    "Text",
    "IdList",
    "KeyTable",
    "Envelopes",
    "RingVector",
    "ShareMatrix",
    "decode",
    "encode",
    "message_types",
]

MAGIC = b"SF"
#: 2: ring vectors' elements are padded to an 8-byte boundary of the message (:class:`RingVector`).
WIRE_VERSION = 2
_HEADER = struct.Struct(">2sBB")
M = TypeVar("M", bound="Message")
M2 = TypeVar("M2", bound="Message")


_REGISTRY: dict[int, type[Message]] = {}


@dataclass(frozen=True, eq=False)
class Message:
    """Base class: subclasses set ``TYPE`` (wire code), ``STAGE`` (protocol phase) and ``FIELDS``.

    Values are validated and normalised at construction; two messages are equal when their encodings
    are.
    """

    TYPE: ClassVar[int] = 0
    STAGE: ClassVar[str] = ""
    FIELDS: ClassVar[dict[str, Field]] = {}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if cls.TYPE:
            if cls.TYPE in _REGISTRY:
                raise TypeError(f"message type {cls.TYPE} registered twice")
            _REGISTRY[cls.TYPE] = cls

    def __post_init__(self) -> None:
        for name, field, _, _ in _wire_fields(type(self)):
            object.__setattr__(self, name, field.check(getattr(self, name), name, self))

    @classmethod
    def _decoded(cls: type[M], values: Mapping[str, Any], ring_check: bool = True) -> M:
        """An instance from decoded values, checking (in field order) only the fields whose decoder does not
        already guarantee what ``check`` would (see :attr:`Field.DECODE_CHECKED`), and ring vectors' element
        range only with ``ring_check``."""
        msg = object.__new__(cls)
        for name, field, checked, ring in _wire_fields(cls):
            value = values[name]
            trusted = checked or (ring and not ring_check)
            object.__setattr__(msg, name, value if trusted else field.check(value, name, msg))
        return msg

    def to_bytes(self) -> bytes:
        """The wire encoding of this message."""
        out: list[bytes | memoryview] = [_HEADER.pack(MAGIC, WIRE_VERSION, self.TYPE)]
        for name, field, _, _ in _wire_fields(type(self)):
            field.put(getattr(self, name), out, self)
        return b"".join(out)

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and self.to_bytes() == other.to_bytes()

    def __hash__(self) -> int:
        return hash(self.to_bytes())


_BYTES32 = Fixed(32)
_ID = Int(U32, _U32_MAX - 1)


@dataclass(frozen=True, eq=False)
class AdvertiseRequest(Message):
    """Server -> client, stage ``advertise_keys``: the public parameters of the session."""

    TYPE: ClassVar[int] = 1
    STAGE: ClassVar[str] = "advertise_keys"
    protocol: str
    round_index: int
    invited: tuple[int, ...]
    degree: int
    threshold: int
    ring_bits: int
    length: int
    prg: str
    recipient: int | None
    schema_fingerprint: bytes
    FIELDS: ClassVar[dict[str, Field]] = {
        "protocol": Text(64),
        "round_index": Int(U64, 2**64 - 1),
        "invited": IdList(),
        "degree": Int(U32, _U32_MAX),
        "threshold": Int(U32, _U32_MAX),
        "ring_bits": Int(U8, 64),
        "length": Int(U64, 2**64 - 1),
        "prg": Text(32),
        "recipient": OptionalId(),
        "schema_fingerprint": Blob(1024),
    }


@dataclass(frozen=True, eq=False)
class AdvertiseKeys(Message):
    """Client -> server, stage ``advertise_keys``: the two X25519 public keys (channel, mask)."""

    TYPE: ClassVar[int] = 2
    STAGE: ClassVar[str] = "advertise_keys"
    channel_pk: bytes
    mask_pk: bytes
    FIELDS: ClassVar[dict[str, Field]] = {"channel_pk": _BYTES32, "mask_pk": _BYTES32}


@dataclass(frozen=True, eq=False)
class ShareKeysRequest(Message):
    """Server -> client, stage ``share_keys``: every advertised key pair, sorted by client id."""

    TYPE: ClassVar[int] = 3
    STAGE: ClassVar[str] = "share_keys"
    keys: tuple[tuple[int, bytes, bytes], ...]
    FIELDS: ClassVar[dict[str, Field]] = {"keys": KeyTable()}


@dataclass(frozen=True, eq=False)
class ShareKeys(Message):
    """Client -> server, stage ``share_keys``: the session id it computed, a commitment to its self-mask
    seed, and one AEAD ciphertext of shares per neighbour (``(recipient, ciphertext)``)."""

    TYPE: ClassVar[int] = 4
    STAGE: ClassVar[str] = "share_keys"
    session_id: bytes
    seed_commitment: bytes
    envelopes: tuple[tuple[int, bytes], ...]
    FIELDS: ClassVar[dict[str, Field]] = {
        "session_id": _BYTES32,
        "seed_commitment": _BYTES32,
        "envelopes": Envelopes(),
    }


@dataclass(frozen=True, eq=False)
class MaskedInputRequest(Message):
    """Server -> client, stage ``masked_input``: the ciphertexts addressed to it (``(sender, ciphertext)``)."""

    TYPE: ClassVar[int] = 5
    STAGE: ClassVar[str] = "masked_input"
    session_id: bytes
    envelopes: tuple[tuple[int, bytes], ...]
    FIELDS: ClassVar[dict[str, Field]] = {"session_id": _BYTES32, "envelopes": Envelopes()}


@dataclass(frozen=True, eq=False)
class MaskedInput(Message):
    """Client -> server, stage ``masked_input``: the masked vector, and the neighbours whose share
    ciphertext failed authentication (``complaints``)."""

    TYPE: ClassVar[int] = 6
    STAGE: ClassVar[str] = "masked_input"
    session_id: bytes
    complaints: tuple[int, ...]
    ring_bits: int
    vector: np.ndarray
    FIELDS: ClassVar[dict[str, Field]] = {
        "session_id": _BYTES32,
        "complaints": IdList(),
        "ring_bits": Int(U8, 64),
        "vector": RingVector(),
    }


@dataclass(frozen=True, eq=False)
class UnmaskRequest(Message):
    """Server -> client, stage ``unmasking``: which of its neighbours survived and which dropped."""

    TYPE: ClassVar[int] = 7
    STAGE: ClassVar[str] = "unmasking"
    session_id: bytes
    alive: tuple[int, ...]
    dead: tuple[int, ...]
    FIELDS: ClassVar[dict[str, Field]] = {"session_id": _BYTES32, "alive": IdList(), "dead": IdList()}


@dataclass(frozen=True, eq=False)
class Unmask(Message):
    """Client -> server, stage ``unmasking``: self-mask-seed shares of the survivors and mask-key shares
    of the dropped, row ``i`` belonging to ``alive[i]`` (resp. ``dead[i]``)."""

    TYPE: ClassVar[int] = 8
    STAGE: ClassVar[str] = "unmasking"
    session_id: bytes
    alive: tuple[int, ...]
    seed_shares: np.ndarray
    dead: tuple[int, ...]
    key_shares: np.ndarray
    FIELDS: ClassVar[dict[str, Field]] = {
        "session_id": _BYTES32,
        "alive": IdList(),
        "seed_shares": ShareMatrix(),
        "dead": IdList(),
        "key_shares": ShareMatrix(),
    }


@dataclass(frozen=True, eq=False)
class DeliverRequest(Message):
    """Server -> designated recipient, stage ``deliver``: the unmasked sum, still under the recipient's
    pads, and the clients whose inputs it contains."""

    TYPE: ClassVar[int] = 9
    STAGE: ClassVar[str] = "deliver"
    session_id: bytes
    survivors: tuple[int, ...]
    ring_bits: int
    vector: np.ndarray
    FIELDS: ClassVar[dict[str, Field]] = {
        "session_id": _BYTES32,
        "survivors": IdList(),
        "ring_bits": Int(U8, 64),
        "vector": RingVector(),
    }


@dataclass(frozen=True, eq=False)
class ResumeRequest(Message):
    """Server -> client, stage ``resume``: the next use of an agreed session, with this sum's public
    parameters (the clients, graph and keys are the session's)."""

    TYPE: ClassVar[int] = 10
    STAGE: ClassVar[str] = "resume"
    session_id: bytes
    use: int
    protocol: str
    round_index: int
    ring_bits: int
    length: int
    prg: str
    recipient: int | None
    schema_fingerprint: bytes
    FIELDS: ClassVar[dict[str, Field]] = {
        "session_id": _BYTES32,
        "use": Int(U32, _U32_MAX),
        "protocol": Text(64),
        "round_index": Int(U64, 2**64 - 1),
        "ring_bits": Int(U8, 64),
        "length": Int(U64, 2**64 - 1),
        "prg": Text(32),
        "recipient": OptionalId(),
        "schema_fingerprint": Blob(1024),
    }


@dataclass(frozen=True, eq=False)
class Abort(Message):
    """Client -> server, any stage: the client aborted; ``reason`` is the error class name."""

    TYPE: ClassVar[int] = 15
    STAGE: ClassVar[str] = ""
    reason: str
    detail: str
    FIELDS: ClassVar[dict[str, Field]] = {"reason": Text(128), "detail": Text(4096)}


def message_types() -> dict[int, type[Message]]:
    """Wire code -> message class, for every registered message."""
    return dict(_REGISTRY)


_FIELD_NAMES: dict[type[Message], tuple[str, ...]] = {}
_WIRE_FIELDS: dict[type[Message], tuple[tuple[str, Field, bool, bool], ...]] = {}


def _wire_fields(cls: type[Message]) -> tuple[tuple[str, Field, bool, bool], ...]:
    """``(name, field, field.DECODE_CHECKED, is a ring vector)`` in wire order, once per class (the decoder's
    loop: the server decodes one message per client per stage)."""
    got = _WIRE_FIELDS.get(cls)
    if got is None:
        got = _WIRE_FIELDS[cls] = tuple(
            (
                name,
                cls.FIELDS[name],
                cls.FIELDS[name].DECODE_CHECKED,
                isinstance(cls.FIELDS[name], RingVector),
            )
            for name in _field_names(cls)
        )
    return got


def _field_names(cls: type[Message]) -> tuple[str, ...]:
    """A message class's field names in wire order (``dataclasses.fields`` once per class)."""
    names = _FIELD_NAMES.get(cls)
    if names is None:
        names = _FIELD_NAMES[cls] = tuple(f.name for f in fields(cls))
    return names


def encode(message: Message) -> bytes:
    """The wire bytes of ``message``."""
    if not isinstance(message, Message) or not message.TYPE:
        raise MalformedMessageError(f"cannot encode {type(message).__name__}: not a registered message")
    return message.to_bytes()


@overload
def decode(data: bytes | bytearray | memoryview, expected: type[M], *, ring_check: bool = True) -> M: ...


@overload
def decode(
    data: bytes | bytearray | memoryview, expected: tuple[type[M], type[M2]], *, ring_check: bool = True
) -> M | M2: ...


@overload
def decode(
    data: bytes | bytearray | memoryview,
    expected: tuple[type[Message], ...] | None = None,
    *,
    ring_check: bool = True,
) -> Message: ...


def decode(
    data: bytes | bytearray | memoryview,
    expected: type[Message] | tuple[type[Message], ...] | None = None,
    *,
    ring_check: bool = True,
) -> Message:
    """Parse and validate one message.

    Args:
        data: the received bytes.
        expected: the message class (or classes) the receiver accepts in its current stage.
        ring_check: check that every ring vector element is below :math:`2^{bits}`. ``False`` hands that
            check to the caller, which must make it before using the vector (the server's
            :meth:`~securefgl.protocols._secaggplus_unmask.RunningSum.add_all` does, in the pass that sums),
            and leaves ring vectors whose elements are narrower than their word packed
            (:class:`~securefgl.protocols._fields.PackedRing`: the running sum unpacks them piece by piece).

    Raises:
        MalformedMessageError: bad magic, unsupported version, unknown or unexpected type, truncation,
            trailing bytes, or a value out of range. Never any other exception.
    """
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise MalformedMessageError(f"a message must be bytes, got {type(data).__name__}")
    r = _Reader(memoryview(data if isinstance(data, bytes) else bytes(data)))
    try:
        magic, version, code = r.unpack(_HEADER)
        if magic != MAGIC:
            raise MalformedMessageError(f"bad magic {bytes(magic)!r}, expected {MAGIC!r}")
        if version != WIRE_VERSION:
            raise MalformedMessageError(
                f"unsupported wire version {version}; this build speaks {WIRE_VERSION}"
            )
        cls = _REGISTRY.get(code)
        if cls is None:
            raise MalformedMessageError(f"unknown message type {code}; valid: {sorted(_REGISTRY)}")
        if expected is not None:
            allowed = expected if isinstance(expected, tuple) else (expected,)
            if cls not in allowed:
                names = [c.__name__ for c in allowed]
                raise MalformedMessageError(f"unexpected message {cls.__name__}; expected one of {names}")
        got: dict[str, Any] = {}
        for name, field, _, ring in _wire_fields(cls):
            if (
                ring and not ring_check
            ):  # narrow elements stay packed for the caller that checks and sums them
                got[name] = cast(RingVector, field).get_packed(r, got, name)
            else:
                got[name] = field.get(r, got, name)
        if r.end != r.pos:
            raise MalformedMessageError(f"{r.end - r.pos} trailing bytes after {cls.__name__}")
        return cls._decoded(got, ring_check)
    except MalformedMessageError:
        raise
    except (struct.error, ValueError, TypeError, OverflowError, IndexError) as exc:  # defensive: typed only
        raise MalformedMessageError(f"undecodable message: {exc}") from exc
