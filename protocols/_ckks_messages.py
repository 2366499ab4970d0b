"""The CKKS protocol's messages (wire codes ``0x50``-``0x57`` of :mod:`securefgl.protocols.messages`) and
the wire form of released sums.

The message classes are re-exported by :mod:`securefgl.protocols.ckks`.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass
from typing import Any, ClassVar, TypeVar

import numpy as np
import torch

from securefgl.errors import MalformedMessageError
from securefgl.protocols._channel import PUBLIC_KEY_BYTES
from securefgl.protocols.base import Sums
from securefgl.protocols.encoding import SumSchema
from securefgl.protocols.messages import (
    Blob,
    Envelopes,
    Field,
    Fixed,
    IdList,
    Int,
    Message,
    OptionalId,
    Text,
    decode,
)

__all__ = [
    "U8",
    "CKKSAdvertise",
    "CKKSAdvertiseRequest",
    "CKKSKeys",
    "CKKSKeysRequest",
    "CKKSRelease",
    "CKKSSumRequest",
    "CKKSUpload",
    "CKKSUploadRequest",
    "M",
    "decode_as",
    "sums_from_fields",
    "sums_to_fields",
    "sums_to_wire",
]


M = TypeVar("M", bound=Message)

_BIG = 1 << 30  # largest single blob (a context or a ciphertext) accepted
U8 = struct.Struct(">B")
_U32S = struct.Struct(">I")
_U64S = struct.Struct(">Q")
_ID: Field = Int(_U32S, 2**32 - 2)
_SID: Field = Fixed(32)


@dataclass(frozen=True, eq=False)
class CKKSAdvertiseRequest(Message):
    """Server -> client, stage ``advertise``: the public parameters of the session."""

    TYPE: ClassVar[int] = 0x50
    STAGE: ClassVar[str] = "advertise"
    protocol: str
    round_index: int
    invited: tuple[int, ...]
    recipient: int | None
    length: int
    schema_fingerprint: bytes
    params: str
    FIELDS: ClassVar[dict[str, Field]] = {
        "protocol": Text(64),
        "round_index": Int(_U64S, 2**64 - 1),
        "invited": IdList(),
        "recipient": OptionalId(),
        "length": Int(_U64S, 2**64 - 1),
        "schema_fingerprint": Blob(1024),
        "params": Text(1024),
    }


@dataclass(frozen=True, eq=False)
class CKKSAdvertise(Message):
    """Client -> server, stage ``advertise``: the client's X25519 channel key."""

    TYPE: ClassVar[int] = 0x51
    STAGE: ClassVar[str] = "advertise"
    public_key: bytes
    FIELDS: ClassVar[dict[str, Field]] = {"public_key": Fixed(PUBLIC_KEY_BYTES)}


@dataclass(frozen=True, eq=False)
class CKKSKeysRequest(Message):
    """Server -> client, stage ``keys``: the roster of channel keys, the key generator and the key holders."""

    TYPE: ClassVar[int] = 0x52
    STAGE: ClassVar[str] = "keys"
    roster: tuple[tuple[int, bytes], ...]
    generator: int
    holders: tuple[int, ...]
    FIELDS: ClassVar[dict[str, Field]] = {
        "roster": Envelopes(PUBLIC_KEY_BYTES),
        "generator": _ID,
        "holders": IdList(),
    }


@dataclass(frozen=True, eq=False)
class CKKSKeys(Message):
    """Generator -> server, stage ``keys``: the public context, and one sealed key message per peer."""

    TYPE: ClassVar[int] = 0x53
    STAGE: ClassVar[str] = "keys"
    session_id: bytes
    public_context: bytes
    sealed: tuple[tuple[int, bytes], ...]
    FIELDS: ClassVar[dict[str, Field]] = {
        "session_id": _SID,
        "public_context": Blob(_BIG),
        "sealed": Envelopes(_BIG),
    }


@dataclass(frozen=True, eq=False)
class CKKSUploadRequest(Message):
    """Server -> client, stage ``upload``: the generator's session id and the sealed key for this client."""

    TYPE: ClassVar[int] = 0x54
    STAGE: ClassVar[str] = "upload"
    session_id: bytes
    sealed: bytes
    FIELDS: ClassVar[dict[str, Field]] = {"session_id": _SID, "sealed": Blob(_BIG)}


@dataclass(frozen=True, eq=False)
class CKKSUpload(Message):
    """Client -> server, stage ``upload``: the serialised ciphertexts, ``(chunk index, bytes)``."""

    TYPE: ClassVar[int] = 0x55
    STAGE: ClassVar[str] = "upload"
    session_id: bytes
    ciphertexts: tuple[tuple[int, bytes], ...]
    FIELDS: ClassVar[dict[str, Field]] = {"session_id": _SID, "ciphertexts": Envelopes(_BIG)}


@dataclass(frozen=True, eq=False)
class CKKSSumRequest(Message):
    """Server -> decryptor, stage ``release``: the summed ciphertexts and who is in the sum."""

    TYPE: ClassVar[int] = 0x56
    STAGE: ClassVar[str] = "release"
    session_id: bytes
    contributors: tuple[int, ...]
    ciphertexts: tuple[tuple[int, bytes], ...]
    FIELDS: ClassVar[dict[str, Field]] = {
        "session_id": _SID,
        "contributors": IdList(),
        "ciphertexts": Envelopes(_BIG),
    }


@dataclass(frozen=True, eq=False)
class CKKSRelease(Message):
    """Decryptor -> server, stage ``release``: the released (rounded, rule-checked) sums only."""

    TYPE: ClassVar[int] = 0x57
    STAGE: ClassVar[str] = "release"
    session_id: bytes
    header: bytes
    arrays: tuple[tuple[int, bytes], ...]
    FIELDS: ClassVar[dict[str, Field]] = {
        "session_id": _SID,
        "header": Blob(1 << 24),
        "arrays": Envelopes(_BIG),
    }


def decode_as(payload: bytes, expected: type[M], party: str | int, phase: str) -> M:
    try:
        return decode(payload, expected)
    except MalformedMessageError as exc:
        raise MalformedMessageError(str(exc), party=party, phase=phase) from exc


# ----------------------------------------------------------------------------------------------------
# Released sums on the wire
# ----------------------------------------------------------------------------------------------------


def sums_to_fields(sums: Sums) -> list[bytes]:
    header: dict[str, Any] = {
        "n": sums.num_contributors,
        "withheld": sums.withheld,
        "clip": sums.clip_counts,
        "err": sums.max_abs_error,
        "blocks": [],
        "rows": [],
    }
    fields: list[bytes] = []
    for name in sums:
        t = sums[name].detach().cpu()
        wire = t.float() if t.dtype == torch.bfloat16 else t
        arr = wire.numpy()
        header["blocks"].append([name, str(t.dtype).removeprefix("torch."), arr.dtype.str, list(t.shape)])
        fields.append(np.ascontiguousarray(arr).tobytes())
    for name in sums:
        mask = sums.withheld_rows(name)
        if mask is not None:
            header["rows"].append(name)
            fields.append(mask.numpy().astype(np.bool_).tobytes())
    return [json.dumps(header, sort_keys=True).encode(), *fields]


def sums_from_fields(fields: list[bytes], schema: SumSchema) -> Sums:
    header = json.loads(fields[0])
    values: dict[str, torch.Tensor] = {}
    pos = 1
    for name, tdtype, npdtype, shape in header["blocks"]:
        if name not in schema:
            raise ValueError(f"unknown block {name!r}")
        arr = np.frombuffer(fields[pos], dtype=np.dtype(npdtype)).reshape(shape)
        values[name] = torch.from_numpy(arr.copy()).to(getattr(torch, tdtype))
        pos += 1
    rows: dict[str, torch.Tensor] = {}
    for name in header["rows"]:
        rows[name] = torch.from_numpy(np.frombuffer(fields[pos], dtype=np.bool_).copy())
        pos += 1
    return Sums(
        values,
        num_contributors=int(header["n"]),
        withheld=header["withheld"],
        withheld_rows=rows,
        clip_counts={k: int(v) for k, v in header["clip"].items()},
        max_abs_error={k: float(v) for k, v in header["err"].items()},
    )


def sums_to_wire(sums: Sums) -> tuple[bytes, tuple[tuple[int, bytes], ...]]:
    fields = sums_to_fields(sums)
    return fields[0], tuple(enumerate(fields[1:]))
