"""The fused encoder's rounding bits: an AES-CTR keystream, unbiased, never a numpy generator."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from securefgl.errors import ConfigError, EncodingError
from securefgl.protocols._rounding import CHUNK, RoundingBits
from securefgl.protocols.encoding import BlockSpec, SumSchema, ring_reduce
from securefgl.protocols.messages import MaskedInput, decode


def _schema(n: int, step: float, *, dtype: torch.dtype = torch.float32, bound: float = 1.0) -> SumSchema:
    return SumSchema([BlockSpec("x", (n,), dtype=dtype, bound=bound)], max_clients=4, precision=step)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("frac", [0.3, 0.5, 0.9])
def test_keystream_rounding_is_unbiased(dtype: type, frac: float) -> None:
    step = 2.0**-10
    n = 3 * CHUNK + 17  # several chunks and a ragged tail
    s = _schema(n, step)
    value = (5 + frac) * step
    x = np.full(n, value, dtype=dtype)
    dec = s.decode(s.encode({"x": x}).data, 1)["x"].to(torch.float64).numpy()
    assert set(np.unique(dec)) == {5 * step, 6 * step}
    p = float(np.float64(dtype(value)) / step - 5)  # the fraction actually stored in dtype
    # mean of Bernoulli(p) * step; 5 standard deviations of the mean
    assert abs(dec.mean() / step - 5 - p) < 5 * math.sqrt(p * (1 - p) / n)


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    frac=st.floats(0.0, 1.0, exclude_max=True),
    whole=st.integers(-300, 300),
    f32=st.booleans(),
)
def test_rounded_values_are_the_two_neighbours_with_the_right_mean(
    seed: int, frac: float, whole: int, f32: bool
) -> None:
    step = 2.0**-8
    n = 20_000
    s = _schema(n, step, bound=2.0)
    dtype = np.float32 if f32 else np.float64
    x = np.full(n, (whole + frac) * step, dtype=dtype)
    y = np.float64(x[0]) / step
    enc = s.encode({"x": x}, RoundingBits.insecure_seeded(seed))
    got = s.decode(enc.data, 1)["x"].to(torch.float64).numpy() / step
    assert np.all((got == math.floor(y)) | (got == math.ceil(y)))  # error < one step
    p = y - math.floor(y)
    assert abs(got.mean() - y) <= 6 * math.sqrt(max(p * (1 - p), 1e-12) / n) + 1e-12


def test_insecure_seeded_bits_are_reproducible_and_default_keys_differ() -> None:
    s = _schema(1000, 2.0**-10)
    x = {"x": np.random.default_rng(0).uniform(-1, 1, 1000).astype(np.float32)}
    a = s.encode(x, RoundingBits.insecure_seeded(7, "c1")).data
    b = s.encode(x, RoundingBits.insecure_seeded(7, "c1")).data
    c = s.encode(x, RoundingBits.insecure_seeded(7, "c2")).data
    assert np.array_equal(a, b) and not np.array_equal(a, c)
    assert not np.array_equal(s.encode(x).data, s.encode(x).data)  # OS-keyed by default
    assert RoundingBits.insecure_seeded(7).insecure and not RoundingBits().insecure
    with pytest.raises(ConfigError):
        RoundingBits(b"short")
    with pytest.raises(ConfigError):
        RoundingBits.insecure_seeded(b"")


def test_numpy_generator_only_seeds_the_keystream() -> None:
    """A Generator (tests only) seeds an insecure AES-CTR stream: the bits never come from numpy."""
    s = _schema(100, 2.0**-10)
    x = {"x": np.full(100, 0.3 * 2.0**-10, dtype=np.float64)}
    a = s.encode(x, np.random.default_rng(3)).data
    g = np.random.default_rng(3)
    b = s.encode(x, RoundingBits.insecure_seeded(g.bytes(32), "numpy-generator")).data
    assert np.array_equal(a, b)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_encode_into_matches_encode_and_clips_through_the_slow_path(dtype: type) -> None:
    s = SumSchema(
        [BlockSpec("w", (CHUNK + 5,), bound=1.0), BlockSpec("n", (3,), kind="count", bound=4)],
        max_clients=8,
        precision=2.0**-12,
    )
    w = np.random.default_rng(1).uniform(-1.5, 1.5, CHUNK + 5).astype(dtype)
    contrib = {"w": w, "n": np.array([1, 2, 9])}
    enc = s.encode(contrib, RoundingBits.insecure_seeded(1))
    out = np.empty(s.length, dtype=np.uint32)
    clips = s.encode_into(contrib, out, RoundingBits.insecure_seeded(1))
    assert clips == enc.clip_counts and clips["n"] == 1 and clips["w"] == int(np.sum(np.abs(w) > 1))
    assert np.array_equal(ring_reduce(out.astype(np.uint64), s.ring_bits), enc.data)
    dec = s.decode(enc.data, 1)
    ref = np.clip(w.astype(np.float64), -1, 1)
    assert np.all(np.abs(dec["w"].to(torch.float64).numpy() - ref) <= s.error_bound(1)["w"])
    assert dec["n"].tolist() == [1, 2, 4]


def test_encode_into_checks_its_buffer_and_still_rejects_bad_values() -> None:
    s = _schema(10, 2.0**-10)
    bits = RoundingBits()
    with pytest.raises(EncodingError, match="contiguous"):
        s.encode_into({"x": np.zeros(10, np.float32)}, np.empty(11, np.uint32), bits)
    with pytest.raises(EncodingError, match="uint32 or uint64"):
        s.encode_into({"x": np.zeros(10, np.float32)}, np.empty(10, np.int32), bits)
    bad = np.zeros(10, np.float32)
    bad[7] = np.nan
    with pytest.raises(EncodingError, match="non-finite"):
        s.encode_into({"x": bad}, np.empty(10, np.uint32), bits)


def test_received_ring_vector_is_a_read_only_view() -> None:
    vec = np.arange(1000, dtype=np.uint32)
    msg = MaskedInput(session_id=bytes(32), complaints=(), ring_bits=28, vector=vec)
    back = decode(msg.to_bytes(), MaskedInput)
    assert np.array_equal(back.vector, vec) and not back.vector.flags.writeable


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_on_grid_chunks_are_encoded_exactly_without_drawing_bits(dtype: type) -> None:
    """Grid-rounded uploads: every chunk already integral after scaling is copied (no keystream drawn);
    a chunk with one off-grid value still rounds, so the stream advances by that chunk only."""
    step = 2.0**-10
    s = _schema(3 * CHUNK, step, dtype=torch.float32 if dtype is np.float32 else torch.float64)
    x = (np.random.default_rng(2).integers(-1000, 1000, 3 * CHUNK) * step).astype(dtype)
    bits = RoundingBits.insecure_seeded(3)
    out = np.empty(s.length, dtype=np.uint32)
    s.encode_into({"x": x}, out, bits)
    assert bits._blocks == 0
    assert np.array_equal(s.decode(ring_reduce(out.astype(np.uint64), s.ring_bits), 1)["x"].numpy(), x)
    x[CHUNK + 7] += step / 2
    s.encode_into({"x": x}, out, bits)
    word_bytes = 4 if dtype is np.float32 else 8  # rounding words as wide as the input's floats
    assert bits._blocks == CHUNK * word_bytes // 16  # one chunk drawn


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    exponent=st.integers(4, 26),
    bound=st.sampled_from([1.0, 8.0, 64.0]),
    n=st.integers(1, 2 * CHUNK + 5),
)
def test_on_grid_float32_into_64_bit_words_is_exact(seed: int, exponent: int, bound: float, n: int) -> None:
    """64-bit words (rings over 32 bits take them): on-grid float32 values become exactly their scaled integers,
    whether the scaled bound fits 32-bit words (cast through int32) or not (cast straight to int64)."""
    step = 2.0**-exponent
    s = SumSchema([BlockSpec("x", (n,), bound=bound)], max_clients=4, precision=step)
    rng = np.random.default_rng(seed)
    ints = rng.integers(-int(bound / step), int(bound / step) + 1, n)
    ints[: min(n, 3)] = [-int(bound / step), 0, int(bound / step)][: min(n, 3)]
    x = (ints * step).astype(np.float32)
    x[x == 0] = -0.0 if seed % 2 else 0.0
    exact = np.round(x.astype(np.float64) / step).astype(np.int64)  # float32 holds every grid value used here
    bits = RoundingBits.insecure_seeded(seed)
    out = np.empty(s.length, dtype=np.uint64)
    s.encode_into({"x": x}, out, bits)
    assert bits._blocks == 0
    assert np.array_equal(out.view(np.int64), exact)
