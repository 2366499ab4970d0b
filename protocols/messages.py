"""Versioned, typed, validated wire messages of the masking protocols (SecAgg, SecAgg+).

Every message is a frozen dataclass with a fixed field schema and a compact binary framing::

    magic "SF" (2 bytes) | wire version (1 byte) | message type (1 byte) | fields...

Integers are big-endian (``u8``/``u32``/``u64``); byte strings and lists are length-prefixed; ring
vectors carry their bit width and element count, then the elements as little-endian integers of
``ceil(bits / 8)`` bytes each; Shamir share matrices carry their shape, then ``uint32`` little-endian words.
:func:`decode` checks the magic, the version, the type (against what the receiver expects), every length
against the bytes actually present (so a forged count cannot make the receiver allocate), every value
range (ring elements below :math:`2^{b}`, shares below the field prime), and that no byte is left over.
It raises :class:`~securefgl.errors.MalformedMessageError` and nothing else for any bad input.

Messages carry no authentication of their own: the masking protocols authenticate what matters
(shares are AEAD-encrypted end to end; everything else is bound into the session id).
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any, ClassVar, TypeVar, overload

import numpy as np

from securefgl.errors import MalformedMessageError
from securefgl.protocols._shamir import PRIME

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
WIRE_VERSION = 1
_HEADER = struct.Struct(">2sBB")
_U32_MAX = 2**32 - 1
_NONE_U32 = 2**32 - 1  # encodes "no recipient"

M = TypeVar("M", bound="Message")
M2 = TypeVar("M2", bound="Message")


class _Reader:
    """Bounds-checked cursor over a received message."""

    __slots__ = ("buf", "pos")

    def __init__(self, buf: memoryview) -> None:
        self.buf = buf
        self.pos = 0

    @property
    def remaining(self) -> int:
        return len(self.buf) - self.pos

    def take(self, n: int) -> memoryview:
        if n < 0 or n > self.remaining:
            raise MalformedMessageError(
                f"truncated message: need {n} bytes at offset {self.pos}, have {self.remaining}"
            )
        out = self.buf[self.pos : self.pos + n]
        self.pos += n
        return out

    def unpack(self, fmt: struct.Struct) -> tuple[Any, ...]:
        return fmt.unpack(self.take(fmt.size))

    def count(self, item_bytes: int, what: str) -> int:
        (n,) = self.unpack(U32)
        if n * item_bytes > self.remaining:
            raise MalformedMessageError(
                f"{what}: count {n} needs {n * item_bytes} bytes but only {self.remaining} remain"
            )
        return int(n)


#: Big-endian unsigned integer layouts, for :class:`Int` fields.
U8 = struct.Struct(">B")
U16 = struct.Struct(">H")
U32 = struct.Struct(">I")
U64 = struct.Struct(">Q")


def _int_in(value: Any, lo: int, hi: int, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or not lo <= int(value) <= hi:
        raise MalformedMessageError(f"field {name!r} must be an integer in [{lo}, {hi}], got {value!r}")
    return int(value)


class Field:
    """Codec of one field: ``check`` (at construction), ``put`` (encode), ``get`` (decode).

    ``DECODE_CHECKED`` is true when ``get`` already returns exactly what ``check`` would (same type, same
    bounds): :func:`decode` then does not check the value a second time. Fields whose ``get`` leaves a bound
    to ``check`` (an :class:`Int` below its maximum, a :class:`RingVector`'s range) keep it false.
    """

    DECODE_CHECKED: ClassVar[bool] = False

    def check(self, value: Any, name: str, msg: Any) -> Any:
        raise NotImplementedError

    def put(self, value: Any, out: list[bytes | memoryview], msg: Any) -> None:
        raise NotImplementedError

    def get(self, r: _Reader, got: Mapping[str, Any], name: str) -> Any:
        raise NotImplementedError


class Int(Field):
    """An unsigned integer in ``[0, hi]``, packed with ``fmt`` (one of :data:`U8` ... :data:`U64`)."""

    def __init__(self, fmt: struct.Struct, hi: int) -> None:
        self.fmt, self.hi = fmt, hi

    def check(self, value: Any, name: str, msg: Any) -> int:
        return _int_in(value, 0, self.hi, name)

    def put(self, value: int, out: list[bytes | memoryview], msg: Any) -> None:
        out.append(self.fmt.pack(value))

    def get(self, r: _Reader, got: Mapping[str, Any], name: str) -> int:
        return int(r.unpack(self.fmt)[0])


class OptionalId(Field):
    """A client id or ``None`` (encoded as 2^32 - 1)."""

    DECODE_CHECKED: ClassVar[bool] = True

    def check(self, value: Any, name: str, msg: Any) -> int | None:
        return None if value is None else _int_in(value, 0, _U32_MAX - 1, name)

    def put(self, value: int | None, out: list[bytes | memoryview], msg: Any) -> None:
        out.append(U32.pack(_NONE_U32 if value is None else value))

    def get(self, r: _Reader, got: Mapping[str, Any], name: str) -> int | None:
        (v,) = r.unpack(U32)
        return None if v == _NONE_U32 else int(v)


class Fixed(Field):
    """A byte string of exactly ``size`` bytes (keys, digests, session ids)."""

    DECODE_CHECKED: ClassVar[bool] = True

    def __init__(self, size: int) -> None:
        self.size = size

    def check(self, value: Any, name: str, msg: Any) -> bytes:
        if not isinstance(value, (bytes, bytearray, memoryview)) or len(value) != self.size:
            raise MalformedMessageError(
                f"field {name!r} must be {self.size} bytes, got {type(value).__name__}"
            )
        return bytes(value)

    def put(self, value: bytes, out: list[bytes | memoryview], msg: Any) -> None:
        out.append(value)

    def get(self, r: _Reader, got: Mapping[str, Any], name: str) -> bytes:
        return bytes(r.take(self.size))


class Blob(Field):
    """A length-prefixed (u32) byte string of at most ``max_len`` bytes."""

    DECODE_CHECKED: ClassVar[bool] = True

    def __init__(self, max_len: int = 1 << 16) -> None:
        self.max_len = max_len

    def check(self, value: Any, name: str, msg: Any) -> bytes:
        if not isinstance(value, (bytes, bytearray, memoryview)) or len(value) > self.max_len:
            raise MalformedMessageError(f"field {name!r} must be bytes of at most {self.max_len} bytes")
        return bytes(value)

    def put(self, value: bytes, out: list[bytes | memoryview], msg: Any) -> None:
        out.append(U32.pack(len(value)) + value)

    def get(self, r: _Reader, got: Mapping[str, Any], name: str) -> bytes:
        n = r.count(1, name)
        if n > self.max_len:
            raise MalformedMessageError(f"field {name!r}: {n} bytes exceed the limit {self.max_len}")
        return bytes(r.take(n))


class Text(Field):
    """A length-prefixed (u16) UTF-8 string of at most ``max_len`` encoded bytes."""

    DECODE_CHECKED: ClassVar[bool] = True

    def __init__(self, max_len: int = 4096) -> None:
        self.max_len = max_len

    def check(self, value: Any, name: str, msg: Any) -> str:
        if not isinstance(value, str) or len(value.encode("utf-8", "surrogatepass")) > self.max_len:
            raise MalformedMessageError(f"field {name!r} must be a str of at most {self.max_len} UTF-8 bytes")
        return value

    def put(self, value: str, out: list[bytes | memoryview], msg: Any) -> None:
        raw = value.encode("utf-8", "replace")
        out.append(U16.pack(len(raw)) + raw)

    def get(self, r: _Reader, got: Mapping[str, Any], name: str) -> str:
        (n,) = r.unpack(U16)
        if n > self.max_len:
            raise MalformedMessageError(f"field {name!r}: {n} bytes exceed the limit {self.max_len}")
        try:
            return bytes(r.take(n)).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise MalformedMessageError(f"field {name!r} is not valid UTF-8") from exc


class IdList(Field):
    """A tuple of client ids (u32). Order and duplicates are kept: receivers judge them."""

    DECODE_CHECKED: ClassVar[bool] = True

    def check(self, value: Any, name: str, msg: Any) -> tuple[int, ...]:
        # fast path (C-level loops) for what callers build: a tuple of plain ints in range
        if (
            type(value) is tuple
            and set(map(type, value)) <= {int}
            and (not value or (min(value) >= 0 and max(value) <= _U32_MAX - 1))
        ):
            return value
        return tuple(_int_in(v, 0, _U32_MAX - 1, name) for v in value)

    def put(self, value: tuple[int, ...], out: list[bytes | memoryview], msg: Any) -> None:
        out.append(U32.pack(len(value)) + np.asarray(value, dtype=">u4").tobytes())

    def get(self, r: _Reader, got: Mapping[str, Any], name: str) -> tuple[int, ...]:
        n = r.count(4, name)
        ids = np.frombuffer(r.take(4 * n), dtype=">u4")
        if n and int(ids.max()) == _NONE_U32:
            raise MalformedMessageError(f"field {name!r} contains the reserved id {_NONE_U32}")
        return tuple(int(v) for v in ids)


class KeyTable(Field):
    """Tuple of ``(client_id, channel_pk, mask_pk)`` with 32-byte X25519 public keys."""

    DECODE_CHECKED: ClassVar[bool] = True

    _ROW = struct.Struct(">I32s32s")

    def check(self, value: Any, name: str, msg: Any) -> tuple[tuple[int, bytes, bytes], ...]:
        rows = []
        for row in value:
            cid, cpk, spk = row
            rows.append(
                (
                    _int_in(cid, 0, _U32_MAX - 1, name),
                    Fixed(32).check(cpk, name, msg),
                    Fixed(32).check(spk, name, msg),
                )
            )
        return tuple(rows)

    def put(
        self, value: tuple[tuple[int, bytes, bytes], ...], out: list[bytes | memoryview], msg: Any
    ) -> None:
        out.append(U32.pack(len(value)) + b"".join(self._ROW.pack(*row) for row in value))

    def get(self, r: _Reader, got: Mapping[str, Any], name: str) -> tuple[tuple[int, bytes, bytes], ...]:
        n = r.count(self._ROW.size, name)
        rows = tuple(
            (int(c), bytes(a), bytes(b)) for c, a, b in self._ROW.iter_unpack(r.take(n * self._ROW.size))
        )
        if any(c == _NONE_U32 for c, _, _ in rows):
            raise MalformedMessageError(f"field {name!r} contains the reserved id {_NONE_U32}")
        return rows


class Envelopes(Field):
    """Tuple of ``(peer_id, ciphertext)``: shares encrypted for (or from) one peer each."""

    DECODE_CHECKED: ClassVar[bool] = True

    def __init__(self, max_len: int = 1 << 16) -> None:
        self.max_len = max_len

    def check(self, value: Any, name: str, msg: Any) -> tuple[tuple[int, bytes], ...]:
        return tuple(
            (_int_in(p, 0, _U32_MAX - 1, name), Blob(self.max_len).check(c, name, msg)) for p, c in value
        )

    def put(self, value: tuple[tuple[int, bytes], ...], out: list[bytes | memoryview], msg: Any) -> None:
        out.append(U32.pack(len(value)))
        out.extend(U32.pack(p) + U32.pack(len(c)) + c for p, c in value)

    def get(self, r: _Reader, got: Mapping[str, Any], name: str) -> tuple[tuple[int, bytes], ...]:
        n = r.count(8, name)
        blob = Blob(self.max_len)
        rows = []
        for _ in range(n):
            (peer,) = r.unpack(U32)
            if peer == _NONE_U32:
                raise MalformedMessageError(f"field {name!r} contains the reserved id {_NONE_U32}")
            rows.append((int(peer), blob.get(r, got, name)))
        return tuple(rows)


class RingVector(Field):
    """A vector of ring elements of ``bits`` bits (``bits`` is the message's ``ring_bits`` field).

    Wire form: ``u64 count`` then ``count`` little-endian integers of ``ceil(bits/8)`` bytes. Decoded as
    uint32 when ``bits <= 32``, else uint64; every element must be below :math:`2^{bits}`. When the width
    is a whole word (32 or 64 bits) the decoded array is a read-only view of the message
    bytes, not a copy; copy it before writing to it.
    """

    def __init__(self, bits_field: str = "ring_bits") -> None:
        self.bits_field = bits_field

    @staticmethod
    def _dtype(bits: int) -> np.dtype:
        return np.dtype("<u4") if bits <= 32 else np.dtype("<u8")

    def check(self, value: Any, name: str, msg: Any) -> np.ndarray:
        bits = getattr(msg, self.bits_field)
        if not isinstance(value, np.ndarray) or value.ndim != 1 or value.dtype.kind != "u":
            raise MalformedMessageError(f"field {name!r} must be a 1-D unsigned integer array")
        if value.size and bits < 8 * value.dtype.itemsize and int(value.max()) >> bits:
            raise MalformedMessageError(f"field {name!r} has elements >= 2^{bits}")
        return value

    def put(self, value: np.ndarray, out: list[bytes | memoryview], msg: Any) -> None:
        bits = getattr(msg, self.bits_field)
        width = -(-bits // 8)
        out.append(U64.pack(value.size))
        arr = np.ascontiguousarray(value.astype(self._dtype(bits), copy=False))
        if width == arr.dtype.itemsize:
            # bytes.join reads the buffer directly: one copy into the message, not two
            out.append(arr.tobytes() if not arr.dtype.isnative else arr.data.cast("B"))
        else:
            out.append(arr.view(np.uint8).reshape(-1, arr.dtype.itemsize)[:, :width].tobytes())

    def get(self, r: _Reader, got: Mapping[str, Any], name: str) -> np.ndarray:
        bits = got[self.bits_field]
        if not 1 <= bits <= 64:
            raise MalformedMessageError(f"field {self.bits_field!r} must be in [1, 64], got {bits}")
        width = -(-bits // 8)
        (count,) = r.unpack(U64)
        if count * width > r.remaining:
            raise MalformedMessageError(
                f"field {name!r}: {count} elements of {width} bytes exceed the message"
            )
        raw = r.take(count * width)
        dtype = self._dtype(bits)
        if width == dtype.itemsize:
            # a read-only view of the received bytes (no copy; the server sums it in place)
            arr = np.frombuffer(raw, dtype=dtype)
            if not arr.dtype.isnative:  # pragma: no cover - big-endian hosts only
                arr = arr.astype(dtype.newbyteorder("="))
        else:
            buf = np.zeros((count, dtype.itemsize), dtype=np.uint8)
            buf[:, :width] = np.frombuffer(raw, dtype=np.uint8).reshape(count, width)
            arr = buf.view(dtype).reshape(count).astype(dtype.newbyteorder("="), copy=False)
        return arr  # the range check (elements < 2^bits) runs once, in ``check``, on construction


class ShareMatrix(Field):
    """A ``(rows, limbs)`` matrix of Shamir share limbs, each below the field prime."""

    DECODE_CHECKED: ClassVar[bool] = True

    def check(self, value: Any, name: str, msg: Any) -> np.ndarray:
        if not isinstance(value, np.ndarray) or value.ndim != 2 or value.dtype.kind not in "ui":
            raise MalformedMessageError(f"field {name!r} must be a 2-D integer array")
        if value.size and (int(value.min()) < 0 or int(value.max()) >= PRIME):
            raise MalformedMessageError(f"field {name!r} has values outside [0, {PRIME})")
        return value.astype(np.uint32)

    def put(self, value: np.ndarray, out: list[bytes | memoryview], msg: Any) -> None:
        out.append(U32.pack(value.shape[0]) + U32.pack(value.shape[1]))
        out.append(np.ascontiguousarray(value, dtype="<u4").tobytes())

    def get(self, r: _Reader, got: Mapping[str, Any], name: str) -> np.ndarray:
        rows, cols = r.unpack(U32)[0], r.unpack(U32)[0]
        if rows * cols * 4 > r.remaining:
            raise MalformedMessageError(f"field {name!r}: a {rows}x{cols} matrix exceeds the message")
        arr = np.frombuffer(r.take(rows * cols * 4), dtype="<u4").astype(np.uint32).reshape(rows, cols)
        if arr.size and int(arr.max()) >= PRIME:
            raise MalformedMessageError(f"field {name!r} has values >= {PRIME}")
        return arr


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
        for f in fields(self):
            object.__setattr__(self, f.name, self.FIELDS[f.name].check(getattr(self, f.name), f.name, self))

    @classmethod
    def _decoded(cls: type[M], values: Mapping[str, Any]) -> M:
        """An instance from decoded values, checking (in field order) only the fields whose decoder does not
        already guarantee what ``check`` would (see :attr:`Field.DECODE_CHECKED`)."""
        msg = object.__new__(cls)
        for name in _field_names(cls):
            field = cls.FIELDS[name]
            value = values[name]
            object.__setattr__(msg, name, value if field.DECODE_CHECKED else field.check(value, name, msg))
        return msg

    def to_bytes(self) -> bytes:
        """The wire encoding of this message."""
        out: list[bytes | memoryview] = [_HEADER.pack(MAGIC, WIRE_VERSION, self.TYPE)]
        for f in fields(self):
            self.FIELDS[f.name].put(getattr(self, f.name), out, self)
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
def decode(data: bytes | bytearray | memoryview, expected: type[M]) -> M: ...


@overload
def decode(data: bytes | bytearray | memoryview, expected: tuple[type[M], type[M2]]) -> M | M2: ...


@overload
def decode(
    data: bytes | bytearray | memoryview, expected: tuple[type[Message], ...] | None = None
) -> Message: ...


def decode(
    data: bytes | bytearray | memoryview,
    expected: type[Message] | tuple[type[Message], ...] | None = None,
) -> Message:
    """Parse and validate one message.

    Args:
        data: the received bytes.
        expected: the message class (or classes) the receiver accepts in its current stage.

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
        for name in _field_names(cls):
            got[name] = cls.FIELDS[name].get(r, got, name)
        if r.remaining:
            raise MalformedMessageError(f"{r.remaining} trailing bytes after {cls.__name__}")
        return cls._decoded(got)
    except MalformedMessageError:
        raise
    except (struct.error, ValueError, TypeError, OverflowError, IndexError) as exc:  # defensive: typed only
        raise MalformedMessageError(f"undecodable message: {exc}") from exc
