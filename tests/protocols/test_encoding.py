"""Tests for securefgl.protocols.encoding: fixed point over Z_(2^k), validation, clipping, release rules."""

from __future__ import annotations

import math
import time

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from securefgl.errors import (
    ConfigError,
    EncodingError,
    OverflowRiskError,
    ReleaseRefusedError,
    WithheldBlockError,
)
from securefgl.protocols.encoding import (
    BlockSpec,
    EncodedVector,
    SumSchema,
    centred_lift,
    default_rng,
    ring_add,
    ring_from_bytes,
    ring_from_signed,
    ring_mask,
    ring_neg,
    ring_reduce,
    ring_sub,
    ring_sum,
)

HSETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


# ----------------------------------------------------------------------------------------------------
# helpers / strategies
# ----------------------------------------------------------------------------------------------------


@st.composite
def schemas(draw: st.DrawFn, *, float64: bool = False) -> SumSchema:
    nblocks = draw(st.integers(1, 4))
    blocks = []
    for i in range(nblocks):
        ndim = draw(st.integers(0, 2))
        shape = tuple(draw(st.integers(0 if ndim else 1, 5)) for _ in range(ndim))
        kind = draw(st.sampled_from(["real", "count"]))
        if kind == "real":
            bound = draw(st.sampled_from([0.01, 0.5, 1.0, 3.0, 1000.0, 1e6]))
            choices = [None, torch.float64] + ([torch.float16] if bound <= 1000 else [])
            dtype = torch.float64 if float64 else draw(st.sampled_from(choices))
        else:
            bound = float(draw(st.sampled_from([1, 7, 1000, 2**20])))
            dtype = draw(st.sampled_from([None, torch.int32, torch.float64]))
        blocks.append(BlockSpec(f"b{i}", shape, kind=kind, bound=bound, dtype=dtype))
    max_clients = draw(st.integers(1, 60))
    if any(b.dtype == torch.float16 for b in blocks):
        max_clients = min(max_clients, 50)
    precision = 2.0 ** -draw(st.integers(2, 30)) * draw(st.sampled_from([1.0, 0.7]))
    return SumSchema(blocks, max_clients=max_clients, precision=precision)


def random_contribution(
    schema: SumSchema, rng: np.random.Generator, *, overshoot: float = 1.0
) -> dict[str, np.ndarray]:
    out = {}
    for b in schema.blocks:
        if b.kind == "real":
            out[b.name] = rng.uniform(-b.bound * overshoot, b.bound * overshoot, size=b.shape)
        else:
            hi = int(b.bound * overshoot)
            out[b.name] = rng.integers(0, hi + 1, size=b.shape, dtype=np.int64)
    return out


def float_sum_slack(schema: SumSchema, n: int) -> dict[str, float]:
    """Rounding error of the float64 reference sum itself (tiny): n * sum|x| * 2^-53."""
    return {b.name: n * n * b.bound * 2.0**-52 for b in schema.blocks}


def simple_schema(**kw: object) -> SumSchema:
    blocks = [
        BlockSpec("w", (3, 4), bound=2.0),
        BlockSpec("n", (2,), kind="count", bound=100),
    ]
    return SumSchema(blocks, max_clients=kw.pop("max_clients", 10), **kw)  # type: ignore[arg-type]


# ----------------------------------------------------------------------------------------------------
# ring helpers
# ----------------------------------------------------------------------------------------------------


@given(
    bits=st.integers(1, 64),
    a=st.lists(st.integers(0, 2**64 - 1), min_size=1, max_size=20),
    seed=st.integers(0, 2**32 - 1),
)
@HSETTINGS
def test_ring_ops_match_bigint_reference(bits: int, a: list[int], seed: int) -> None:
    rng = np.random.default_rng(seed)
    b = [int(v) for v in rng.integers(0, 2**63, size=len(a), dtype=np.int64)]
    m = 1 << bits
    A = np.array(a, dtype=np.uint64)
    B = np.array(b, dtype=np.uint64)
    assert ring_reduce(A, bits).tolist() == [x % m for x in a]
    assert ring_add(A, B, bits).tolist() == [(x + y) % m for x, y in zip(a, b, strict=True)]
    assert ring_sub(A, B, bits).tolist() == [(x - y) % m for x, y in zip(a, b, strict=True)]
    assert ring_neg(A, bits).tolist() == [(-x) % m for x in a]
    assert ring_sum([A, B, A], bits).tolist() == [(2 * x + y) % m for x, y in zip(a, b, strict=True)]
    lifted = centred_lift(A, bits).tolist()
    expect = [(x % m) - m if (x % m) >= m // 2 else (x % m) for x in a]
    assert lifted == expect
    assert int(ring_mask(bits)) == m - 1


def test_ring_ops_in_place_and_type_checks() -> None:
    a = np.array([5, 2**20 - 1], dtype=np.uint64)
    b = np.array([2**20 - 3, 7], dtype=np.uint64)
    out = ring_add(a, b, 20, out=a)
    assert out is a and a.tolist() == [2, 6]
    ring_neg(a, 20, out=a)
    assert a.tolist() == [2**20 - 2, 2**20 - 6]
    with pytest.raises(EncodingError, match="uint64"):
        ring_add(np.array([1], dtype=np.int64), b[:1], 20)
    with pytest.raises(ConfigError, match=r"\[1, 64\]"):
        ring_mask(65)
    with pytest.raises(ConfigError, match="length"):
        ring_sum([], 8)
    assert ring_sum([], 8, length=3).tolist() == [0, 0, 0]
    with pytest.raises(EncodingError, match="shape"):
        ring_sum([a, a[:1]], 20)


@given(bits=st.integers(1, 64), vals=st.lists(st.integers(-(2**62), 2**62), min_size=1, max_size=30))
@HSETTINGS
def test_signed_round_trip(bits: int, vals: list[int]) -> None:
    half = 1 << (bits - 1)
    vals = [v for v in vals if -half <= v < half] or [0]
    x = np.array(vals, dtype=np.int64)
    r = ring_from_signed(x, bits)
    assert r.dtype == np.uint64 and all(int(v) < (1 << bits) for v in r.tolist())
    assert centred_lift(r, bits).tolist() == vals


def test_ring_from_bytes_masks_words() -> None:
    buf = bytes(range(16))
    r = ring_from_bytes(buf, 12)
    words = np.frombuffer(buf, dtype="<u8")
    assert r.tolist() == [int(w) & 0xFFF for w in words]
    with pytest.raises(EncodingError, match="multiple of 8"):
        ring_from_bytes(b"1234567", 12)
    u = ring_from_bytes(np.random.default_rng(1).bytes(8 * 100_000), 5)
    counts = np.bincount(u.astype(np.int64), minlength=32)
    assert counts.min() > 2800 and counts.max() < 3450  # uniform over Z_32 (mean 3125)


# ----------------------------------------------------------------------------------------------------
# schema construction
# ----------------------------------------------------------------------------------------------------


def test_ring_bits_and_scales_follow_the_formula() -> None:
    s = simple_schema(max_clients=100, precision=2**-20)
    assert s.scales == {"w": 2.0**20, "n": 1.0}
    assert s.steps == {"w": 2.0**-20, "n": 1.0}
    assert s.max_encoded == {"w": 2**21, "n": 100}
    worst = 100 * 2**21
    assert s.ring_bits == 1 + worst.bit_length() == 29
    assert s.modulus == 2**29
    assert s.length == 14
    assert s.slices == {"w": slice(0, 12), "n": slice(12, 14)}
    # a non-power-of-two precision rounds the step down to the next power of two
    s2 = simple_schema(precision=1e-3)
    assert s2.steps["w"] == 2.0**-10 and s2.steps["w"] <= 1e-3 < 2 * s2.steps["w"]
    assert simple_schema(extra_bits=5).ring_bits == simple_schema().ring_bits + 5


def test_overflow_refused_with_numbers() -> None:
    blocks = [BlockSpec("w", (4,), bound=1.0)]
    with pytest.raises(OverflowRiskError) as exc:
        SumSchema(blocks, max_clients=1024, precision=2.0**-60)
    msg = str(exc.value)
    for part in [
        "'w'",
        "bound 1",
        "max_clients=1024",
        "72 bits",
        "precision=8.673617379884035e-19",
        str(2**70),
    ]:
        assert part in msg, (part, msg)
    # the exact boundary: (2^10 - 1) * 2^53 fits in 64 bits, 2^10 * 2^53 does not
    c = [BlockSpec("c", (2,), kind="count", bound=2**53)]
    assert SumSchema(c, max_clients=1023).ring_bits == 64
    with pytest.raises(OverflowRiskError, match="65 bits"):
        SumSchema(c, max_clients=1024)


def test_extreme_sums_decode_exactly_at_64_bits() -> None:
    n = 1023
    c = SumSchema([BlockSpec("c", (2,), kind="count", bound=2**53)], max_clients=n)
    enc = c.encode({"c": np.array([2**53, 0])}).data
    total = ring_sum([enc] * n, c.ring_bits)
    assert c.decode(total, n)["c"].tolist() == [n * 2**53, 0]
    r = SumSchema([BlockSpec("x", (2,), dtype=torch.float64)], max_clients=n, precision=2.0**-52)
    e = r.encode({"x": np.array([1.0, -1.0])}).data
    dec = r.decode(ring_sum([e] * n, r.ring_bits), n)["x"]
    assert dec.tolist() == [float(n), -float(n)]


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"name": ""}, "non-empty"),
        ({"shape": (2, -1)}, "non-negative"),
        ({"shape": "ab"}, "integers"),
        ({"kind": "float"}, r"\['real', 'count'\]"),
        ({"bound": 0.0}, "positive"),
        ({"bound": float("inf")}, "finite"),
        ({"bound": "1"}, "positive number"),
        ({"kind": "count", "bound": 2.5}, "whole number"),
        ({"kind": "count", "bound": 2.0**60}, "whole number"),
        ({"on_out_of_bound": "wrap"}, r"\['clip', 'reject'\]"),
        ({"min_contributors": 0}, ">= 1"),
        ({"counted_by": "c"}, "needs min_contributors"),
        ({"counted_by": "x", "min_contributors": 2}, "another"),
        ({"dtype": torch.int64}, "not valid for a real block"),
        ({"dp": 1}, "bool"),
    ],
)
def test_blockspec_validation(kwargs: dict, match: str) -> None:
    base = {"name": "x", "shape": (2, 3)}
    base.update(kwargs)
    with pytest.raises(ConfigError, match=match):
        BlockSpec(**base)


def test_blockspec_counted_by_needs_float_dtype_and_rows() -> None:
    with pytest.raises(ConfigError, match="floating"):
        BlockSpec("x", (3,), kind="count", bound=5, counted_by="c", min_contributors=2)
    with pytest.raises(ConfigError, match="at least one dimension"):
        BlockSpec("x", (), counted_by="c", min_contributors=2)
    spec = BlockSpec("x", [3, 2], counted_by="c", min_contributors=2)
    assert spec.shape == (3, 2) and spec.size == 6 and spec.out_dtype == torch.float32
    assert BlockSpec("k", (1,), kind="count", bound=3).out_dtype == torch.int64


@pytest.mark.parametrize(
    ("blocks", "kwargs", "match"),
    [
        ([], {}, "at least one block"),
        ([BlockSpec("a", (1,)), BlockSpec("a", (2,))], {}, "duplicate"),
        ([BlockSpec("a", (1,))], {"max_clients": 0}, "max_clients"),
        ([BlockSpec("a", (1,))], {"precision": 0.0}, "precision"),
        ([BlockSpec("a", (1,))], {"precision": 2.0**-70}, "precision"),
        ([BlockSpec("a", (1,))], {"min_contributors": 11}, r"\[1, max_clients=10\]"),
        ([BlockSpec("a", (1,))], {"extra_bits": -1}, "extra_bits"),
        ([BlockSpec("a", (1,), bound=1e4, dtype=torch.float16)], {}, "beyond the largest float16"),
        ([BlockSpec("a", (1,), kind="count", bound=100, dtype=torch.int8)], {}, "beyond the largest int8"),
        ([BlockSpec("a", (3,), counted_by="c", min_contributors=2)], {}, "not a block of this schema"),
        (
            [BlockSpec("a", (3,), counted_by="c", min_contributors=2), BlockSpec("c", (4,), kind="count")],
            {},
            r"shape \(3,\)",
        ),
        (
            [BlockSpec("a", (3,), counted_by="c", min_contributors=2), BlockSpec("c", (3,))],
            {},
            "count block",
        ),
    ],
)
def test_schema_validation(blocks: list, kwargs: dict, match: str) -> None:
    kwargs = {"max_clients": 10, **kwargs}
    with pytest.raises(ConfigError, match=match):
        SumSchema(blocks, **kwargs)


def test_schema_lookups_and_repr() -> None:
    s = simple_schema()
    assert s["w"].shape == (3, 4) and "n" in s and "z" not in s and len(s) == 2
    with pytest.raises(ConfigError, match=r"\['w', 'n'\]"):
        s["z"]
    assert "ring_bits=" in repr(s)


# ----------------------------------------------------------------------------------------------------
# fingerprint
# ----------------------------------------------------------------------------------------------------


def test_fingerprint_is_canonical_and_sensitive() -> None:
    s = simple_schema()
    fp = s.fingerprint()
    assert isinstance(fp, bytes) and len(fp) == 32
    assert simple_schema().fingerprint() == fp and simple_schema() == s and hash(simple_schema()) == hash(s)
    variants = [
        simple_schema(max_clients=11),
        simple_schema(precision=2**-21),
        simple_schema(min_contributors=2),
        simple_schema(extra_bits=1),
        SumSchema(
            [BlockSpec("n", (2,), kind="count", bound=100), BlockSpec("w", (3, 4), bound=2.0)], max_clients=10
        ),
        SumSchema(
            [BlockSpec("w", (3, 4), bound=2.5), BlockSpec("n", (2,), kind="count", bound=100)], max_clients=10
        ),
        SumSchema(
            [BlockSpec("w", (4, 3), bound=2.0), BlockSpec("n", (2,), kind="count", bound=100)], max_clients=10
        ),
        SumSchema(
            [BlockSpec("w", (3, 4), bound=2.0, dp=True), BlockSpec("n", (2,), kind="count", bound=100)],
            max_clients=10,
        ),
        SumSchema(
            [
                BlockSpec("w", (3, 4), bound=2.0, dtype=torch.float64),
                BlockSpec("n", (2,), kind="count", bound=100),
            ],
            max_clients=10,
        ),
        SumSchema(
            [
                BlockSpec("w", (3, 4), bound=2.0, min_contributors=3),
                BlockSpec("n", (2,), kind="count", bound=100),
            ],
            max_clients=10,
        ),
        SumSchema(
            [
                BlockSpec("w", (3, 4), bound=2.0, on_out_of_bound="reject"),
                BlockSpec("n", (2,), kind="count", bound=100),
            ],
            max_clients=10,
        ),
    ]
    fps = {v.fingerprint() for v in variants}
    assert fp not in fps and len(fps) == len(variants)


# ----------------------------------------------------------------------------------------------------
# pack / unpack / encode / decode
# ----------------------------------------------------------------------------------------------------


@given(schema=schemas(float64=True), seed=st.integers(0, 2**32 - 1))
@HSETTINGS
def test_pack_unpack_round_trip_exact(schema: SumSchema, seed: int) -> None:
    rng = np.random.default_rng(seed)
    contrib = random_contribution(schema, rng)
    flat, clips = schema.pack(contrib)
    assert flat.dtype == np.float64 and flat.shape == (schema.length,)
    assert clips == dict.fromkeys(schema.names, 0)
    back = schema.unpack(flat)
    for b in schema.blocks:
        assert back[b.name].dtype == b.out_dtype and tuple(back[b.name].shape) == b.shape
        np.testing.assert_array_equal(back[b.name].numpy(), np.asarray(contrib[b.name], dtype=np.float64))


@given(schema=schemas(), seed=st.integers(0, 2**32 - 1))
@HSETTINGS
def test_encode_decode_single_within_bound(schema: SumSchema, seed: int) -> None:
    rng = np.random.default_rng(seed)
    contrib = random_contribution(schema, rng)
    enc = schema.encode(contrib, rng)
    assert (
        isinstance(enc, EncodedVector) and enc.data.dtype == np.uint64 and enc.data.shape == (schema.length,)
    )
    assert int(enc.data.max(initial=0)) < schema.modulus
    dec = schema.decode(enc.data, 1)
    bound = schema.error_bound(1)
    for b in schema.blocks:
        ref = np.asarray(contrib[b.name], dtype=np.float64)
        got = dec[b.name].to(torch.float64).numpy()
        assert dec[b.name].dtype == b.out_dtype
        assert np.all(np.abs(got - ref) <= bound[b.name]), b


@given(schema=schemas(), seed=st.integers(0, 2**32 - 1), data=st.data())
@HSETTINGS
def test_sum_of_encodings_decodes_to_float_sum(schema: SumSchema, seed: int, data: st.DataObject) -> None:
    rng = np.random.default_rng(seed)
    n = data.draw(st.integers(1, schema.max_clients))
    contribs = [random_contribution(schema, rng, overshoot=1.3) for _ in range(n)]
    encs = [schema.encode(c, rng) for c in contribs]
    ring_total = ring_sum([e.data for e in encs], schema.ring_bits)
    # exact in the ring: no wrap-around (the signed integer sum equals the lifted ring sum)
    int_total = np.sum([centred_lift(e.data, schema.ring_bits) for e in encs], axis=0, dtype=np.int64)
    np.testing.assert_array_equal(centred_lift(ring_total, schema.ring_bits), int_total.reshape(-1))
    ref = np.sum([schema.pack(c)[0] for c in contribs], axis=0)
    dec = schema.decode(ring_total, n)
    bound = schema.error_bound(n)
    slack = float_sum_slack(schema, n)
    for b in schema.blocks:
        got = dec[b.name].to(torch.float64).numpy().reshape(-1)
        err = np.abs(got - ref[schema.slices[b.name]])
        assert np.all(err <= bound[b.name] + slack[b.name]), (b, err.max() if err.size else 0, bound[b.name])
    clip_total = {k: sum(e.clip_counts[k] for e in encs) for k in schema.names}
    pack_total = {k: sum(schema.pack(c)[1][k] for c in contribs) for k in schema.names}
    assert clip_total == pack_total


def test_count_blocks_are_exact_and_bounds_stated() -> None:
    s = simple_schema()
    rng = np.random.default_rng(0)
    encs = [s.encode({"w": np.zeros((3, 4)), "n": np.array([i, 2 * i])}, rng) for i in range(10)]
    dec = s.decode(ring_sum([e.data for e in encs], s.ring_bits), 10)
    assert dec["n"].dtype == torch.int64 and dec["n"].tolist() == [45, 90]
    eb = s.error_bound(10)
    assert eb["n"] == 0.0
    # real float32 output: 10 steps of quantisation + cast rounding of a magnitude up to 10 * bound
    assert eb["w"] == pytest.approx(10 * 2.0**-20 + 10 * 2.0 * 2.0**-24)
    assert s.error_std(4) == {"w": 2 * 2.0**-20 / 2, "n": 0.0}
    with pytest.raises(OverflowRiskError, match="max_clients=10"):
        s.error_bound(11)
    with pytest.raises(OverflowRiskError, match="max_clients=10"):
        s.decode(encs[0].data, 11)


def test_stochastic_rounding_is_unbiased_and_uses_the_generator() -> None:
    step = 2.0**-10
    s = SumSchema([BlockSpec("x", (200_000,), dtype=torch.float64)], max_clients=1, precision=step)
    value = 0.3 * step + 5 * step
    contrib = {"x": np.full(200_000, value)}
    enc = s.encode(contrib, np.random.default_rng(3))
    dec = s.decode(enc.data, 1)["x"].numpy()
    assert set(np.unique(dec)) == {5 * step, 6 * step}
    # mean of Bernoulli(0.3) * step: std of the mean = step * sqrt(0.21 / 2e5) ~ 1e-3 step
    assert abs(dec.mean() - value) < 5 * step * math.sqrt(0.21 / 200_000)
    again = s.encode(contrib, np.random.default_rng(3))
    np.testing.assert_array_equal(enc.data, again.data)  # explicit generator: reproducible
    a, b = s.encode(contrib).data, s.encode(contrib).data  # default: OS-seeded, differs
    assert not np.array_equal(a, b)
    assert isinstance(default_rng(), np.random.Generator)
    with pytest.raises(ConfigError, match="Generator"):
        s.encode(contrib, rng=np.random.RandomState(0))  # type: ignore[arg-type]


@given(schema=schemas(), seed=st.integers(0, 2**32 - 1), data=st.data())
@HSETTINGS
def test_round_to_grid_makes_the_ring_sum_equal_the_float_sum(
    schema: SumSchema, seed: int, data: st.DataObject
) -> None:
    """Grid-rounded uploads encode exactly, whatever the encoder's generator: ring sum == float64 sum."""
    rng = np.random.default_rng(seed)
    n = data.draw(st.integers(1, schema.max_clients))
    contribs = [schema.round_to_grid(random_contribution(schema, rng), rng) for _ in range(n)]
    for c in contribs:
        for b in schema.blocks:
            if b.kind == "real":
                v = c[b.name].numpy() * schema.scales[b.name]
                np.testing.assert_array_equal(v, np.round(v))
    encs = [schema.encode(c, np.random.default_rng(seed + 1 + i)) for i, c in enumerate(contribs)]
    dec = schema.decode(ring_sum([e.data for e in encs], schema.ring_bits), n)
    ref = np.sum([schema.pack(c)[0] for c in contribs], axis=0)
    for b in schema.blocks:
        want = torch.from_numpy(ref[schema.slices[b.name]].reshape(b.shape)).to(b.out_dtype)
        assert torch.equal(dec[b.name], want), b.name


def test_round_to_grid_is_unbiased_seeded_and_leaves_other_blocks() -> None:
    step = 2.0**-10
    s = SumSchema(
        [
            BlockSpec("x", (100_000,), dtype=torch.float64, bound=8.0),
            BlockSpec("d", (3,), bound=8.0, dp=True),
            BlockSpec("n", (2,), kind="count", bound=9),
        ],
        max_clients=2,
        precision=step,
    )
    value = 5.3 * step
    contrib = {"x": torch.full((100_000,), value), "d": np.array([0.1, 0.2, 0.3]), "n": np.array([1, 2])}
    out = s.round_to_grid(contrib, np.random.default_rng(1))
    x = out["x"].numpy()
    assert out["x"].dtype == torch.float64 and set(np.unique(x)) == {5 * step, 6 * step}
    assert abs(x.mean() - float(np.float32(value))) < 5 * step * math.sqrt(0.21 / 100_000)
    again = s.round_to_grid(contrib, np.random.default_rng(1))
    assert torch.equal(out["x"], again["x"])
    assert torch.equal(s.round_to_grid(out, np.random.default_rng(2))["x"], out["x"])  # idempotent
    assert out["n"] is contrib["n"] and not isinstance(out["d"], np.ndarray)
    kept = s.round_to_grid(contrib, np.random.default_rng(1), skip_dp=True)
    assert kept["d"] is contrib["d"]
    bad = {"x": torch.full((100_000,), float("nan")), "d": contrib["d"], "n": contrib["n"]}
    with pytest.raises(EncodingError, match="non-finite"):
        s.encode(s.round_to_grid(bad, np.random.default_rng(0)))


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_round_to_grid_draws_and_rounds_as_the_formula_says(dtype) -> None:
    """The rounding is ``floor(x / step) + (u < frac)`` with ``u = rng.random(n)`` per block in schema order, clamped
    to the bound's grid, out-of-bound values kept: bit for bit, also when the buffers it works in are reused by the
    next call (whose results must not touch the earlier ones)."""
    s = SumSchema(
        [BlockSpec("a", (3, 700), bound=2.0), BlockSpec("b", (1500,), bound=0.5)],
        max_clients=4,
        precision=2.0**-9,
    )
    gen = np.random.default_rng(7)
    contribs = [
        {"a": (gen.normal(0, 1.2, (3, 700))).astype(dtype), "b": gen.uniform(-0.6, 0.6, 1500).astype(dtype)}
        for _ in range(3)
    ]

    def formula(contrib, rng):
        out = {}
        for spec in s.blocks:
            x = np.asarray(contrib[spec.name]).reshape(-1).astype(np.float64)
            y = x * s.scales[spec.name]
            fl = np.floor(y)
            fl += rng.random(y.shape[0]) < (y - fl)
            top = math.floor(spec.bound * s.scales[spec.name])
            fl = np.clip(fl, -top, top) * s.steps[spec.name]
            outside = np.abs(x) > spec.bound
            fl[outside] = x[outside]
            out[spec.name] = fl.reshape(spec.shape)
        return out

    got = [s.round_to_grid(c, np.random.default_rng(i)) for i, c in enumerate(contribs)]
    for i, (c, g) in enumerate(zip(contribs, got, strict=True)):
        want = formula(c, np.random.default_rng(i))
        for name in ("a", "b"):
            np.testing.assert_array_equal(g[name].numpy(), want[name])
    assert any(np.abs(c["a"]).max() > 2.0 for c in contribs)  # out-of-bound values were exercised


def test_negative_values_and_values_on_the_grid_are_exact() -> None:
    s = SumSchema([BlockSpec("x", (5,), bound=4.0, dtype=torch.float64)], max_clients=3, precision=2**-8)
    x = np.array([-4.0, -1.5, 0.0, 0.25, 4.0])
    e = s.encode({"x": x})
    assert s.decode(e.data, 1)["x"].tolist() == x.tolist()
    assert s.decode(ring_sum([e.data] * 3, s.ring_bits), 3)["x"].tolist() == (3 * x).tolist()


def test_accepts_torch_dtypes_and_grad_tensors() -> None:
    s = SumSchema(
        [
            BlockSpec("h", (4,), dtype=torch.float64),
            BlockSpec("bf", (2,), dtype=torch.float64),
            BlockSpec("g", (3,), dtype=torch.float64),
            BlockSpec("i", (2,), dtype=torch.float64),
            BlockSpec("k", (3,), kind="count", bound=5),
            BlockSpec("flag", (2,), kind="count", bound=1),
            BlockSpec("fc", (2,), kind="count", bound=9),
            BlockSpec("scalar", ()),
        ],
        max_clients=2,
    )
    w = torch.tensor([0.5, -0.25, 0.125], requires_grad=True)
    contrib = {
        "h": torch.tensor([0.5, -0.5, 0.25, 0.0], dtype=torch.float16),
        "bf": torch.tensor([0.5, -1.0], dtype=torch.bfloat16),
        "g": w * 1.0,
        "i": np.array([1, -1], dtype=np.int32),
        "k": torch.tensor([1, 2, 5], dtype=torch.uint8),
        "flag": torch.tensor([True, False]),
        "fc": np.array([3.0, 9.0], dtype=np.float32),
        "scalar": 0.5,
    }
    flat, clips = s.pack(contrib)
    assert sum(clips.values()) == 0
    out = s.unpack(flat)
    assert out["g"].tolist() == [0.5, -0.25, 0.125] and out["k"].tolist() == [1, 2, 5]
    assert out["flag"].tolist() == [1, 0] and out["fc"].tolist() == [3, 9] and out["scalar"].item() == 0.5
    dec = s.decode(s.encode(contrib).data, 1)
    assert dec["h"].tolist() == [0.5, -0.5, 0.25, 0.0] and dec["i"].tolist() == [1.0, -1.0]


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_accepts_cuda_tensors() -> None:
    s = simple_schema()
    contrib = {"w": torch.ones(3, 4, device="cuda"), "n": torch.tensor([1, 2], device="cuda")}
    assert s.decode(s.encode(contrib).data, 1)["n"].tolist() == [1, 2]


# ----------------------------------------------------------------------------------------------------
# bad input
# ----------------------------------------------------------------------------------------------------


def good() -> dict[str, np.ndarray]:
    return {"w": np.zeros((3, 4)), "n": np.array([1, 2])}


@pytest.mark.parametrize("method", ["pack", "encode", "validate"])
@pytest.mark.parametrize(
    ("mutate", "match"),
    [
        (lambda c: c.pop("n"), r"missing \['n'\]"),
        (lambda c: c.update(extra=np.zeros(1)), r"unexpected \['extra'\]"),
        (
            lambda c: c.update(w=np.zeros((4, 3))),
            r"block 'w': expected shape \(3, 4\), received shape \(4, 3\)",
        ),
        (lambda c: c.update(w=np.zeros(12)), r"expected shape \(3, 4\), received shape \(12,\)"),
        (
            lambda c: c.update(w=np.zeros((3, 4), dtype=complex)),
            r"block 'w': expected a real .* received complex128",
        ),
        (lambda c: c.update(w=torch.zeros(3, 4, dtype=torch.complex64)), r"block 'w'.*complex64"),
        (lambda c: c.update(w=np.zeros((3, 4), dtype=bool)), r"block 'w'.*received bool"),
        (lambda c: c.update(w=np.full((3, 4), "a")), r"block 'w'.*received <U1"),
        (
            lambda c: c.update(w=[[0.0] * 4] * 3),
            r"block 'w': expected a torch.Tensor or numpy.ndarray, received list",
        ),
        (
            lambda c: c.update(n=np.array([1.5, 2.0])),
            r"block 'n': a count block expects whole numbers, received 1.5",
        ),
        (lambda c: c["w"].__setitem__((1, 2), np.nan), r"block 'w': 1 non-finite value.*nan at flat index 6"),
        (
            lambda c: c["w"].__setitem__((0, 0), -np.inf),
            r"block 'w': 1 non-finite value.*-inf at flat index 0",
        ),
        (lambda c: c.update(n=np.array([np.inf, 1.0])), r"block 'n': 1 non-finite"),
    ],
)
def test_bad_contributions_raise_encoding_error(method: str, mutate, match: str) -> None:
    s = simple_schema()
    c = good()
    mutate(c)
    with pytest.raises(EncodingError, match=match):
        getattr(s, method)(c)


def test_non_mapping_contribution() -> None:
    with pytest.raises(EncodingError, match="mapping"):
        simple_schema().pack([np.zeros((3, 4))])  # type: ignore[arg-type]


def test_encoding_error_is_a_protocol_error_with_nothing_sent() -> None:
    from securefgl.errors import ProtocolError

    c = good()
    c["w"][0, 0] = np.nan
    with pytest.raises(ProtocolError, match="nothing was sent"):
        simple_schema().encode(c)


def test_clipping_is_counted_per_block() -> None:
    s = simple_schema()
    c = {"w": np.array([[3.0, -2.5, 2.0, -2.0]] + [[0.0] * 4] * 2), "n": np.array([-3, 250])}
    flat, clips = s.pack(c)
    assert clips == {"w": 2, "n": 2}
    assert flat[:4].tolist() == [2.0, -2.0, 2.0, -2.0] and flat[12:].tolist() == [0.0, 100.0]
    enc = s.encode(c)
    assert enc.clip_counts == clips
    dec = s.decode(enc.data, 1)
    assert dec["n"].tolist() == [0, 100] and dec["w"][0].tolist() == [2.0, -2.0, 2.0, -2.0]
    # integer count dtypes that do not fit int64 are clipped before conversion
    big = {"w": np.zeros((3, 4)), "n": np.array([2**64 - 1, 4], dtype=np.uint64)}
    assert s.pack(big)[0][12:].tolist() == [100.0, 4.0]


def test_reject_mode_names_block_and_value() -> None:
    s = SumSchema(
        [
            BlockSpec("w", (3,), bound=1.0, on_out_of_bound="reject"),
            BlockSpec("k", (2,), kind="count", bound=3, on_out_of_bound="reject"),
        ],
        max_clients=5,
    )
    ok = {"w": np.array([1.0, -1.0, 0.0]), "k": np.array([0, 3])}
    assert s.validate(ok) == {"w": 0, "k": 0}
    with pytest.raises(
        EncodingError, match=r"block 'w': 1 value\(s\) outside the bound \[-1, 1\].*1.5 at flat index 2"
    ):
        s.encode({**ok, "w": np.array([1.0, -1.0, 1.5])})
    with pytest.raises(EncodingError, match=r"block 'k': 2 value\(s\) outside the bound \[0, 3\]"):
        s.pack({**ok, "k": np.array([-1, 4])})


# ----------------------------------------------------------------------------------------------------
# release rules
# ----------------------------------------------------------------------------------------------------


def release_schema() -> SumSchema:
    return SumSchema(
        [
            BlockSpec("w", (2,)),
            BlockSpec("cls_count", (3,), kind="count", bound=1),
            BlockSpec("cls_mean", (3, 2), counted_by="cls_count", min_contributors=2),
            BlockSpec("rare", (1,), min_contributors=4),
            BlockSpec("rare_count", (2,), kind="count", bound=1, min_contributors=4),
            BlockSpec("rare_rows", (2,), counted_by="rare_count", min_contributors=1),
        ],
        max_clients=10,
        min_contributors=2,
    )


def release_values() -> dict[str, torch.Tensor]:
    return {
        "w": torch.tensor([1.0, 2.0]),
        "cls_count": torch.tensor([3, 1, 0]),
        "cls_mean": torch.arange(6.0).reshape(3, 2),
        "rare": torch.tensor([7.0]),
        "rare_count": torch.tensor([1, 2]),
        "rare_rows": torch.tensor([5.0, 6.0]),
    }


def test_release_rules() -> None:
    s = release_schema()
    sums = s.release(release_values(), 3, {"w": 4}, {"w": 1e-6})
    assert sums.num_contributors == 3 and sums.clip_counts == {"w": 4} and sums.max_abs_error == {"w": 1e-6}
    assert sums["w"].tolist() == [1.0, 2.0] and sums["cls_count"].dtype == torch.int64
    # row-wise: rows with fewer than 2 contributors are NaN and flagged
    mean = sums["cls_mean"]
    assert mean[0].tolist() == [0.0, 1.0] and torch.isnan(mean[1:]).all()
    assert sums.withheld_rows("cls_mean").tolist() == [False, True, True]
    assert sums.withheld_rows("w") is None
    # whole block below its own minimum: withheld, raises on read, value not carried
    assert sums.is_withheld("rare") and "4" in sums.withheld["rare"]
    with pytest.raises(WithheldBlockError, match="rare"):
        sums["rare"]
    assert "rare" not in list(sums)
    # a row-wise block whose counting block is withheld is withheld as a whole
    assert sums.is_withheld("rare_rows") and "rare_count" in sums.withheld["rare_rows"]
    # with enough contributors everything is released
    full = s.release(release_values(), 4)
    assert not full.withheld and full["rare"].tolist() == [7.0]
    assert full.withheld_rows("rare_rows").tolist() == [False, False]


def test_release_refuses_below_schema_minimum_and_checks_values() -> None:
    s = release_schema()
    with pytest.raises(ReleaseRefusedError, match=r"1 contributor\(s\) refused.*min_contributors=2"):
        s.release(release_values(), 1)
    bad = release_values()
    bad.pop("w")
    with pytest.raises(EncodingError, match="expected"):
        s.release(bad, 3)
    bad = release_values()
    bad["w"] = torch.zeros(3)
    with pytest.raises(EncodingError, match=r"block 'w' has shape \(3,\), expected \(2,\)"):
        s.release(bad, 3)


def test_release_casts_numpy_to_declared_dtypes() -> None:
    s = simple_schema()
    sums = s.release({"w": np.ones((3, 4)), "n": np.array([1.0, 2.0])}, 2)
    assert sums["w"].dtype == torch.float32 and sums["n"].dtype == torch.int64


# ----------------------------------------------------------------------------------------------------
# vectorisation
# ----------------------------------------------------------------------------------------------------


def test_encode_one_million_elements_is_fast() -> None:
    s = SumSchema(
        [
            BlockSpec("a", (500_000,)),
            BlockSpec("b", (1000, 500)),
            BlockSpec("c", (10,), kind="count", bound=9),
        ],
        max_clients=1000,
    )
    rng = np.random.default_rng(0)
    contrib = {"a": torch.randn(500_000), "b": torch.randn(1000, 500), "c": torch.arange(10)}
    s.encode(contrib, rng)  # warm-up
    t0 = time.perf_counter()
    enc = s.encode(contrib, rng)
    t_enc = time.perf_counter() - t0
    t0 = time.perf_counter()
    s.decode(enc.data, 1)
    t_dec = time.perf_counter() - t0
    t0 = time.perf_counter()
    s.pack(contrib)
    t_pack = time.perf_counter() - t0
    # a Python loop over 1e6 elements takes ~0.5 s or more; vectorised code takes ~20 ms on 2 cores
    assert t_enc < 0.25 and t_dec < 0.25 and t_pack < 0.25, (t_enc, t_dec, t_pack)


def test_float_error_bound_model() -> None:
    s = simple_schema()
    fb = s.float_error_bound(10)
    assert fb["n"] == 0.0  # integer sums below 2**53 are exact in float64
    assert fb["w"] == pytest.approx(9 * 2.0**-53 * 10 * 2.0 + 10 * 2.0 * 2.0**-24)
    with pytest.raises(OverflowRiskError):
        s.float_error_bound(11)
    with pytest.raises(ConfigError, match=">= 0"):
        s.float_error_bound(-1)


def test_decoded_tensors_own_their_memory_and_uint32_words_decode_alike() -> None:
    """decode works in recycled buffers: its tensors must not alias them (a second decode leaves the first
    result intact), whatever the output dtype, and 32-bit ring words decode as their uint64 values."""
    schema = SumSchema(
        [
            BlockSpec("w", (3, 4), bound=4.0),
            BlockSpec("d", (5,), bound=4.0, dtype=torch.float64),
            BlockSpec("s", (), bound=4.0),
            BlockSpec("k", (2,), kind="count", bound=9),
        ],
        max_clients=4,
        precision=2.0**-8,
    )
    assert schema.ring_bits <= 32
    rng = np.random.default_rng(3)
    first_in = {
        "w": rng.uniform(-4, 4, (3, 4)),
        "d": rng.uniform(-4, 4, 5),
        "s": np.float64(1.5),
        "k": np.array([3, 9]),
    }
    second_in = {
        "w": rng.uniform(-4, 4, (3, 4)),
        "d": rng.uniform(-4, 4, 5),
        "s": np.float64(-2.0),
        "k": np.array([0, 1]),
    }
    ring1 = schema.encode(first_in, rng=np.random.default_rng(0)).data
    first = schema.decode(ring1, 1)
    snapshot = {k: v.clone() for k, v in first.items()}
    second = schema.decode(schema.encode(second_in, rng=np.random.default_rng(1)).data, 1)
    for name in schema.names:
        assert torch.equal(first[name], snapshot[name]), name
        assert first[name].dtype == schema[name].out_dtype and tuple(first[name].shape) == schema[name].shape
    assert first["s"].item() == 1.5 and second["s"].item() == -2.0
    assert first["k"].tolist() == [3, 9]
    as32 = schema.decode(ring1.astype(np.uint32), 1)
    assert all(torch.equal(as32[n], first[n]) for n in schema.names)
    with pytest.raises(EncodingError, match="uint32 for rings of at most 32 bits"):
        schema.decode(ring1.astype(np.int64), 1)
