"""Tests of securefgl.protocols.messages: round trips, framing checks, and fuzzed decoders."""

from __future__ import annotations

import contextlib
import os
import struct

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from securefgl.errors import MalformedMessageError
from securefgl.protocols import messages as m
from securefgl.protocols._fields import PackedRing
from securefgl.protocols._shamir import LIMBS, PRIME


def _examples() -> list[m.Message]:
    r = np.random.default_rng(0)
    return [
        m.AdvertiseRequest("secagg+", 7, (1, 4, 9), 4, 3, 31, 100, "aes256-ctr", None, os.urandom(32)),
        m.AdvertiseRequest("secagg", 0, (0,), 0, 1, 64, 0, "chacha20", 0, b""),
        m.AdvertiseKeys(os.urandom(32), os.urandom(32)),
        m.ShareKeysRequest(((1, os.urandom(32), os.urandom(32)), (2, os.urandom(32), os.urandom(32)))),
        m.ShareKeys(os.urandom(32), os.urandom(32), ((2, os.urandom(108)), (5, b""))),
        m.MaskedInputRequest(os.urandom(32), ((1, os.urandom(108)),)),
        m.MaskedInput(os.urandom(32), (3,), 20, r.integers(0, 2**20, 17, dtype=np.uint64).astype(np.uint32)),
        m.MaskedInput(os.urandom(32), (), 45, r.integers(0, 2**45, 9, dtype=np.uint64)),
        m.MaskedInput(os.urandom(32), (), 64, np.array([0, 2**64 - 1], dtype=np.uint64)),
        m.MaskedInput(os.urandom(32), (), 8, np.zeros(0, dtype=np.uint32)),
        m.UnmaskRequest(os.urandom(32), (1, 2, 3), (4,)),
        m.Unmask(
            os.urandom(32),
            (1, 2),
            r.integers(0, PRIME, (2, LIMBS)).astype(np.uint32),
            (4,),
            r.integers(0, PRIME, (1, LIMBS)).astype(np.uint32),
        ),
        m.DeliverRequest(os.urandom(32), (1, 2), 33, r.integers(0, 2**33, 5, dtype=np.uint64)),
        m.Abort("ThresholdError", "only 2 clients"),
    ]


EXAMPLES = _examples()


@pytest.mark.parametrize("msg", EXAMPLES, ids=lambda x: type(x).__name__)
def test_round_trip(msg: m.Message) -> None:
    data = m.encode(msg)
    assert data[:2] == m.MAGIC and data[2] == m.WIRE_VERSION and data[3] == msg.TYPE
    back = m.decode(data)
    assert type(back) is type(msg) and back == msg and back.to_bytes() == data
    assert m.decode(data, type(msg)) == msg


def test_vectors_use_the_minimal_width() -> None:
    v = np.arange(1000, dtype=np.uint32)
    sizes = {bits: len(m.MaskedInput(bytes(32), (), bits, v).to_bytes()) for bits in (10, 17, 24, 25, 32)}
    header = sizes[10] - 2 * 1000
    assert sizes == {
        10: header + 2000,
        17: header + 3000,
        24: header + 3000,
        25: header + 4000,
        32: header + 4000,
    }


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"SF",
        b"XX\x02\x02" + bytes(64),  # bad magic
        b"SF\x01\x02" + bytes(64),  # the previous wire version (ring vectors not padded)
        b"SF\x03\x02" + bytes(64),  # unsupported version
        b"SF\x02\x63",  # unknown type
        m.AdvertiseKeys(bytes(32), bytes(32)).to_bytes()[:-1],  # truncated
        m.AdvertiseKeys(bytes(32), bytes(32)).to_bytes() + b"\x00",  # trailing byte
    ],
)
def test_bad_framing_is_malformed(data: bytes) -> None:
    with pytest.raises(MalformedMessageError):
        m.decode(data)


def test_wrong_type_for_the_stage() -> None:
    with pytest.raises(MalformedMessageError, match="unexpected message AdvertiseKeys"):
        m.decode(m.AdvertiseKeys(bytes(32), bytes(32)).to_bytes(), m.MaskedInput)


def test_forged_counts_do_not_allocate() -> None:
    # an id list claiming 2^32 - 1 entries in a short message
    body = m.UnmaskRequest(bytes(32), (), ()).to_bytes()
    forged = body[: 4 + 32] + struct.pack(">I", 2**32 - 1) + body[4 + 36 :]
    with pytest.raises(MalformedMessageError, match="count"):
        m.decode(forged)
    # a vector claiming 2^64 - 1 elements
    vec = m.MaskedInput(bytes(32), (), 32, np.arange(3, dtype=np.uint32)).to_bytes()
    at = 4 + 32 + 4 + 1
    forged = vec[:at] + struct.pack(">Q", 2**64 - 1) + vec[at + 8 :]
    with pytest.raises(MalformedMessageError, match="exceed"):
        m.decode(forged)


def test_out_of_range_values_are_malformed() -> None:
    vec = m.MaskedInput(bytes(32), (), 20, np.array([2**20 - 1], dtype=np.uint32)).to_bytes()
    bad = vec[:-1] + bytes([vec[-1] | 0x10])  # sets bit 20 of the 3-byte element
    with pytest.raises(MalformedMessageError, match=">= 2\\^20"):
        m.decode(bad)
    sh = m.Unmask(bytes(32), (1,), np.zeros((1, LIMBS), dtype=np.uint32), (), np.zeros((0, LIMBS), np.uint32))
    raw = bytearray(sh.to_bytes())
    off = 4 + 32 + 4 + 4 + 8  # header, sid, alive list (1 id), matrix shape
    raw[off : off + 4] = struct.pack("<I", PRIME)
    with pytest.raises(MalformedMessageError, match="values"):
        m.decode(bytes(raw))
    with pytest.raises(MalformedMessageError, match="invalid|UTF-8"):
        m.decode(b"SF\x02\x0f" + struct.pack(">H", 2) + b"\xff\xfe" + struct.pack(">H", 0))


def test_reserved_ids_and_truncated_headers_are_malformed() -> None:
    body = bytearray(m.UnmaskRequest(bytes(32), (7, 9), ()).to_bytes())
    body[4 + 32 + 4 + 4 : 4 + 32 + 4 + 8] = struct.pack(">I", 2**32 - 1)  # the second alive id
    with pytest.raises(MalformedMessageError, match="reserved id"):
        m.decode(bytes(body))
    sh = m.Unmask(bytes(32), (1,), np.zeros((1, LIMBS), dtype=np.uint32), (), np.zeros((0, LIMBS), np.uint32))
    cut = sh.to_bytes()[: 4 + 32 + 8 + 6]  # inside the share matrix's (rows, cols) header
    with pytest.raises(MalformedMessageError, match="truncated message: need 8 bytes"):
        m.decode(cut)


def test_construction_validates() -> None:
    with pytest.raises(MalformedMessageError, match="32 bytes"):
        m.AdvertiseKeys(b"short", bytes(32))
    with pytest.raises(MalformedMessageError, match="2\\^8"):
        m.MaskedInput(bytes(32), (), 8, np.array([256], dtype=np.uint32))
    with pytest.raises(MalformedMessageError, match="integer"):
        m.UnmaskRequest(bytes(32), (-1,), ())
    with pytest.raises(MalformedMessageError):
        m.encode(object())  # type: ignore[arg-type]


def test_decoded_fields_are_what_construction_makes() -> None:
    """decode skips the checks its decoders already guarantee (Field.DECODE_CHECKED), so every decoded field
    must have exactly the type and value the constructor's check would give it."""
    for msg in EXAMPLES:
        back = m.decode(m.encode(msg))
        for name, field in type(msg).FIELDS.items():
            value = getattr(back, name)
            rechecked = field.check(value, name, back)
            assert type(rechecked) is type(value), (type(msg).__name__, name)
            if isinstance(value, np.ndarray):
                assert rechecked.dtype == value.dtype and np.array_equal(rechecked, value)
            else:
                assert rechecked == value


def test_id_lists_take_the_fast_path_only_for_plain_ints_in_range() -> None:
    ids = m.IdList()
    assert ids.check((0, 5, 2**32 - 2), "x", None) == (0, 5, 2**32 - 2)
    assert ids.check([np.uint32(3)], "x", None) == (3,)  # not a tuple of ints: checked one by one
    for bad in ((True,), (-1,), (2**32 - 1,), (1, 2.0)):
        with pytest.raises(MalformedMessageError, match="integer in"):
            ids.check(bad, "x", None)


def test_every_message_type_is_registered_once() -> None:
    types = m.message_types()
    for cls in (m.AdvertiseRequest, m.AdvertiseKeys, m.ShareKeysRequest, m.ShareKeys, m.MaskedInputRequest,
                m.MaskedInput, m.UnmaskRequest, m.Unmask, m.DeliverRequest, m.Abort):  # fmt: skip
        assert types[cls.TYPE] is cls


# -- fuzzing: the decoder raises MalformedMessageError and nothing else ---------------------------------


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=300))
def test_fuzz_random_bytes(data: bytes) -> None:
    with contextlib.suppress(MalformedMessageError):
        m.decode(data)


@settings(max_examples=300, deadline=None)
@given(
    idx=st.integers(0, len(EXAMPLES) - 1),
    body=st.binary(max_size=200),
)
def test_fuzz_valid_header_random_body(idx: int, body: bytes) -> None:
    header = m.encode(EXAMPLES[idx])[:4]
    with contextlib.suppress(MalformedMessageError):
        m.decode(header + body)


@settings(max_examples=400, deadline=None)
@given(
    idx=st.integers(0, len(EXAMPLES) - 1),
    edits=st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)), min_size=1, max_size=6),
    cut=st.one_of(st.none(), st.integers(0, 10_000)),
)
def test_fuzz_mutated_valid_messages(idx: int, edits: list[tuple[int, int]], cut: int | None) -> None:
    data = bytearray(m.encode(EXAMPLES[idx]))
    for pos, val in edits:
        data[pos % len(data)] = val
    if cut is not None:
        data = data[: cut % (len(data) + 1)]
    try:
        out = m.decode(bytes(data))
    except MalformedMessageError:
        return
    # whatever decodes is a well-formed message that re-encodes to the same bytes
    assert m.encode(out) == bytes(data)


@settings(max_examples=60, deadline=None)
@given(bits=st.integers(1, 64), n=st.integers(0, 300), seed=st.integers(0, 2**32 - 1))
def test_ring_vectors_round_trip_at_every_width(bits: int, n: int, seed: int) -> None:
    """Packed widths (not a whole word) are written and read byte by byte: the decoded words equal the
    sent ones, bytes above the width are zero, and the wire holds exactly ``ceil(bits/8)`` bytes each."""
    v = np.random.default_rng(seed).integers(0, 2**bits, n, dtype=np.uint64, endpoint=False)
    v = v.astype(np.uint32) if bits <= 32 else v
    msg = m.MaskedInput(bytes(32), (), bits, v)
    data = msg.to_bytes()
    width = -(-bits // 8)
    assert len(data) == len(m.MaskedInput(bytes(32), (), bits, v[:0]).to_bytes()) + n * width
    # the wire: each element's low ``width`` bytes, little-endian, element after element
    low_bytes = np.frombuffer(v.astype("<u8").tobytes(), np.uint8).reshape(n, 8)[:, :width]
    assert data[len(data) - n * width :] == low_bytes.tobytes()
    back = m.decode(data, m.MaskedInput).vector
    assert back.dtype == (np.uint32 if bits <= 32 else np.uint64)
    assert np.array_equal(back.astype(np.uint64), v.astype(np.uint64))


@pytest.mark.parametrize("complaints", [(), (3,), (3, 5), (3, 5, 7)])
def test_ring_vector_elements_start_on_an_eight_byte_boundary(complaints: tuple[int, ...]) -> None:
    """Whatever precedes it, a ring vector's elements start 8-aligned in the message (so the decoded view is
    aligned and numpy sums it with its vector loops); the padding is zero, and nonzero padding is malformed."""
    v = np.arange(1, 11, dtype=np.uint32)
    data = m.MaskedInput(bytes(32), complaints, 28, v).to_bytes()
    start = len(data) - v.nbytes
    assert start % 8 == 0 and data[start:] == v.astype("<u4").tobytes()
    pad = start - (4 + 32 + 4 + 4 * len(complaints) + 1 + 8)
    assert 0 <= pad < 8 and data[start - pad : start] == bytes(pad)
    back = m.decode(bytes(data), m.MaskedInput).vector
    assert np.array_equal(back, v) and back.flags.aligned
    if pad:
        bad = bytearray(data)
        bad[start - 1] = 1
        with pytest.raises(MalformedMessageError, match="nonzero padding"):
            m.decode(bytes(bad), m.MaskedInput)


def test_ring_check_false_hands_the_range_check_to_the_caller() -> None:
    """``decode(..., ring_check=False)`` (the server's running sum checks while it adds) skips only the ring
    vector's element range: the out-of-range element comes back as sent, every other check still applies."""
    data = bytearray(m.MaskedInput(bytes(32), (), 20, np.array([1, 2**20 - 1], dtype=np.uint32)).to_bytes())
    data[-1] |= 0x10  # bit 20 of the last element (3-byte wide ring)
    with pytest.raises(MalformedMessageError, match=">= 2\\^20"):
        m.decode(bytes(data), m.MaskedInput)
    back = m.decode(bytes(data), m.MaskedInput, ring_check=False).vector
    assert isinstance(back, PackedRing) and back.shape == (2,)  # narrower than its word: left packed
    assert back.unpack().tolist() == [1, 2**20 - 1 + 2**20]
    whole = m.MaskedInput(bytes(32), (), 32, np.array([1, 2**32 - 1], dtype=np.uint32)).to_bytes()
    view = m.decode(whole, m.MaskedInput, ring_check=False).vector  # whole words: a view of the bytes
    assert isinstance(view, np.ndarray) and view.tolist() == [1, 2**32 - 1] and not view.flags.writeable
    with pytest.raises(MalformedMessageError, match="trailing"):
        m.decode(bytes(data) + b"\x00", m.MaskedInput, ring_check=False)
