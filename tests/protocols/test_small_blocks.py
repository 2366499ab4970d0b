"""The small blocks' batch encodes exactly as the per-block path, or leaves the contribution to it."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from securefgl.errors import EncodingError
from securefgl.protocols._rounding import RoundingBits
from securefgl.protocols._small_blocks import MAX_SMALL_BLOCK, SmallBlocks
from securefgl.protocols.encoding import BlockSpec, SumSchema

# values a block may hold: on the grid, off it, out of bound, not finite, negative counts, whole floats
_VALUES = st.sampled_from(
    [0.0, 1.0, 3.0, -2.0, 0.5, 0.25, 2.0**-20, 3 * 2.0**-21, 7.0, -7.0, 1e9, np.nan, np.inf]
)
_DTYPES = st.sampled_from(["f64", "f32", "i64", "bool", "np-f64", "np-i32", "f16", "grad"])


def _value(kind: str, dtype: str, raw: list[float]) -> object:
    a = np.asarray(raw, dtype=np.float64)
    if dtype in ("i64", "np-i32", "bool"):
        a = np.nan_to_num(a, nan=0.0, posinf=9.0, neginf=-9.0).astype(np.int64)
    if dtype == "bool":
        return torch.from_numpy(a != 0)
    if dtype == "np-f64":
        return a
    if dtype == "np-i32":
        return a.astype(np.int32)
    t = torch.from_numpy(a)
    if dtype == "f32":
        return t.float()
    if dtype == "f16":
        return t.half()
    if dtype == "grad":
        return t.clone().requires_grad_(True)
    return t


@st.composite
def _case(draw: st.DrawFn) -> tuple[SumSchema, dict[str, object]]:
    n = draw(st.integers(1, 6))
    blocks, contribution = [], {}
    for i in range(n):
        kind = draw(st.sampled_from(["real", "count"]))
        size = draw(st.sampled_from([1, 3, 8]))
        bound = draw(st.sampled_from([4.0, 8.0, 100.0]))
        oob = draw(st.sampled_from(["clip", "reject"]))
        blocks.append(BlockSpec(f"b{i}", (size,), kind=kind, bound=bound, on_out_of_bound=oob))
        raw = draw(st.lists(_VALUES, min_size=size, max_size=size))
        contribution[f"b{i}"] = _value(kind, draw(_DTYPES), raw)
    if draw(st.booleans()):  # a large block beside them, encoded the per-block way
        blocks.append(BlockSpec("big", (MAX_SMALL_BLOCK + 1,), bound=1.0))
        contribution["big"] = torch.full((MAX_SMALL_BLOCK + 1,), 0.3)
    precision = draw(st.sampled_from([2.0**-20, 2.0**-8, 1.0]))
    return SumSchema(blocks, max_clients=draw(st.sampled_from([2, 1000])), precision=precision), contribution


def _encode(schema: SumSchema, contribution: dict[str, object], *, batch: bool) -> tuple[object, ...]:
    word = np.uint32 if schema.ring_bits <= 32 else np.uint64
    if not batch:  # the per-block path alone: no block in the batch
        schema._small[8 * np.dtype(word).itemsize] = SmallBlocks([], {}, {}, 64)
    out = np.zeros(schema.length, dtype=word)
    try:
        clips = schema.encode_into(contribution, out, RoundingBits.insecure_seeded(7))
    except EncodingError as exc:
        return ("error", str(exc))
    return ("ok", out.tobytes(), clips)


@settings(max_examples=300, deadline=None)
@given(case=_case())
def test_batch_encodes_as_the_per_block_path(case: tuple[SumSchema, dict[str, object]]) -> None:
    schema, contribution = case
    with_batch = _encode(schema, contribution, batch=True)
    rebuilt = SumSchema(schema.blocks, max_clients=schema.max_clients, precision=schema.precision)
    assert with_batch == _encode(rebuilt, contribution, batch=False)


def test_batch_takes_on_grid_blocks_and_refuses_the_rest() -> None:
    blocks = [
        BlockSpec("bias", (3,), bound=4.0),
        BlockSpec("n", (1,), kind="count", bound=50.0),
        BlockSpec("w", (MAX_SMALL_BLOCK + 1,), bound=4.0),
    ]
    schema = SumSchema(blocks, max_clients=10, precision=2.0**-4)
    small = schema._small_blocks(64)
    assert small.names == {"bias", "n"}  # the large block stays per block
    words = np.zeros(schema.length, dtype=np.int64)
    on_grid = {
        "bias": torch.tensor([0.5, -1.25, 4.0]),
        "n": torch.tensor([7]),
        "w": torch.zeros(MAX_SMALL_BLOCK + 1),
    }
    assert small.encode_into(on_grid, words)
    assert words[:4].tolist() == [8, -20, 64, 7]
    for name, bad in [
        ("bias", torch.tensor([0.5, 0.01, 0.0])),  # off the grid: needs rounding bits
        ("bias", torch.tensor([0.5, 5.0, 0.0])),  # out of bound: clipped or refused per block
        ("bias", torch.tensor([np.nan, 0.0, 0.0])),
        ("n", torch.tensor([-1])),
        ("n", torch.tensor([0.5])),
        ("n", torch.tensor([[7]])),  # wrong shape
        ("bias", [0.5, 0.0, 0.0]),  # not an array
    ]:
        words[:] = -1
        assert not small.encode_into({**on_grid, name: bad}, words)
        assert (words == -1).all()  # nothing written


@pytest.mark.parametrize("word_bits", [32, 64])
def test_blocks_whose_words_could_be_inexact_stay_per_block(word_bits: int) -> None:
    blocks = [
        BlockSpec("fits", (2,), bound=1.0),
        BlockSpec("coarse", (2,), bound=1.0),  # scale below 1: every value needs rounding
        BlockSpec("huge", (2,), bound=2.0**40),  # bound * scale beyond a signed 32-bit word
    ]
    schema = SumSchema(blocks, max_clients=2, precision=2.0**-10)
    small = SmallBlocks(blocks, schema.slices, {"fits": 2.0**10, "coarse": 0.5, "huge": 2.0**10}, word_bits)
    expected = {"fits"} if word_bits == 32 else {"fits", "huge"}
    assert small.names == expected
