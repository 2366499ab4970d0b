"""Attacks of issue #20 items 2, 3 and 5, run against the real protocols; each must fail.

Item 1 (the split attack of a lying server) has its own module, ``test_split_attack.py``; item 4 (DP
accounting against the sampler) is at the end of this module.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pytest
import torch

from securefgl.errors import ReleaseRefusedError, ThresholdError
from securefgl.protocols import get_protocol
from securefgl.protocols._abort import ABORT_CODES
from securefgl.protocols._secaggplus_session import ClipLayout
from securefgl.protocols.base import SERVER, DropoutPlan, MessageRecord
from securefgl.protocols.dp import DistributedDP
from securefgl.protocols.encoding import BlockSpec, SumSchema
from securefgl.protocols.messages import Abort, MaskedInput, ShareKeys, Unmask, decode
from securefgl.protocols.plaintext import PlaintextAggregation
from securefgl.protocols.secagg import SecAgg
from securefgl.protocols.secaggplus import SecAggPlus, SecAggPlusClient

SCHEMA = SumSchema(
    [
        BlockSpec("w", (8,), bound=1.0, on_out_of_bound="reject"),
        BlockSpec("n", (4,), kind="count", bound=5, on_out_of_bound="reject"),
    ],
    max_clients=64,
    precision=2.0**-10,
)

SCHEMA_DP = SumSchema(
    [BlockSpec("w", (8,), bound=1.0, dp=True), BlockSpec("n", (4,), kind="count", bound=5)],
    max_clients=64,
    precision=2.0**-10,
)


def contributions(n: int, seed: int = 0) -> dict[int, dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    return {
        c: {"w": rng.integers(-1024, 1025, 8) / 1024.0, "n": rng.integers(0, 6, 4).astype(np.float64)}
        for c in range(n)
    }


def exact_sum(contrib: Mapping[int, Mapping[str, np.ndarray]], clients: Any) -> dict[str, np.ndarray]:
    return {k: sum(np.asarray(contrib[c][k], dtype=np.float64) for c in clients) for k in ("w", "n")}


def assert_sum(sums: Any, expected: Mapping[str, np.ndarray]) -> None:
    for k, v in expected.items():
        np.testing.assert_allclose(sums[k].double().numpy(), v, atol=1e-9)


def _ckks() -> Any:
    pytest.importorskip("tenseal")
    return get_protocol("ckks")


# -- item 2: no protocol releases a one-client sum ------------------------------------------------------


@pytest.mark.parametrize("name", ["secagg", "secagg+", "ckks", "secagg+dp"])
def test_a_single_input_is_never_released(name: str) -> None:
    """Three invited, two drop before their input: a 'sum' of one input is refused, naming the count."""
    if name == "ckks":
        proto, stage = _ckks(), "upload"
    elif name == "secagg+dp":
        proto = get_protocol(name, dp_min_contributors=1, dp_clip_norm=1.0, dp_noise_multiplier=1.0)
        stage = "masked_input"
    else:
        proto, stage = get_protocol(name), "masked_input"
    assert getattr(proto, "base", proto).min_contributors == 2
    schema = SCHEMA_DP if name.endswith("+dp") else SCHEMA
    with pytest.raises(ReleaseRefusedError, match=r"a sum of 1 input\(s\) is refused: at least 2"):
        proto.aggregate(schema, contributions(1))
    if name != "secagg+dp":  # (DP's own floor is 1 here; the inner protocol still refuses above)
        contrib = contributions(3)
        plan = DropoutPlan({1: stage, 2: stage})
        with pytest.raises((ReleaseRefusedError, ThresholdError), match=r"1 "):
            proto.aggregate(SCHEMA, contrib, dropouts=plan)


def test_secagg_refuses_one_survivor_before_unmasking_even_with_threshold_one_below() -> None:
    contrib = contributions(3)
    proto = SecAgg(threshold=2)
    plan = DropoutPlan({1: "masked_input", 2: "masked_input"})
    with pytest.raises(ThresholdError, match="1 masked inputs survive"):
        proto.aggregate(SCHEMA, contrib, dropouts=plan)


def test_the_schema_rule_applies_where_stricter() -> None:
    strict = SumSchema(SCHEMA.blocks, max_clients=64, precision=2.0**-10, min_contributors=4)
    with pytest.raises(ReleaseRefusedError, match=r"a sum of 3 input\(s\) is refused: at least 4"):
        SecAgg().aggregate(strict, contributions(3))


def test_plaintext_keeps_one_client_sums_and_honours_an_explicit_minimum() -> None:
    """Plaintext shows every input to the server anyway (Local/Centralized runs have one client)."""
    sums, _ = PlaintextAggregation().aggregate(SCHEMA, contributions(1))
    assert sums.num_contributors == 1
    with pytest.raises(ReleaseRefusedError, match=r"a sum of 1 input\(s\) is refused: at least 2"):
        PlaintextAggregation(min_contributors=2).aggregate(SCHEMA, contributions(1))


def test_min_contributors_one_is_an_explicit_opt_out() -> None:
    sums, _ = SecAgg(min_contributors=1).aggregate(SCHEMA, contributions(1))
    assert sums.num_contributors == 1


# -- item 3: aborts carry a reason code, never a value ---------------------------------------------------

SECRET = 0.718281828
BAD_INPUTS: dict[str, tuple[str, Any]] = {
    "out_of_bound_reject": ("w", np.array([0.0, 0.0, 0.0, 0.0, 0.0, 1.0 + SECRET, 0.0, 0.0])),
    "nan": ("w", np.array([0.0, 0.0, 0.0, np.nan, 0.0, 0.0, 0.0, 0.0])),
    "inf": ("w", np.array([0.0, 0.0, 0.0, 0.0, 0.0, 0.0, -np.inf, 0.0])),
    "non_integral_count": ("n", np.array([0.0, 0.0, 2.0 + SECRET, 0.0])),
    "negative_count": ("n", np.array([0.0, -3.0, 0.0, 0.0])),
    "wrong_shape": ("w", np.zeros(9)),
}


@pytest.mark.parametrize("protocol", ["secagg", "secagg+", "ckks", "plaintext"])
@pytest.mark.parametrize("case", list(BAD_INPUTS))
def test_no_client_value_or_index_reaches_the_server(protocol: str, case: str, caplog: Any) -> None:
    proto = _ckks() if protocol == "ckks" else get_protocol(protocol)
    contrib = contributions(5)
    block, value = BAD_INPUTS[case]
    contrib[2] = {**contrib[2], block: value}
    sums, tr = proto.aggregate(SCHEMA, contrib)
    assert 2 not in tr.survivors
    codes = {code for _, code in ABORT_CODES}
    input_phase = {"ckks": "upload", "plaintext": "input"}.get(protocol, "masked_input")
    for rec in tr.view(SERVER):
        if rec.sender != 2 or (rec.phase != input_phase and not isinstance(decode(rec.payload), Abort)):
            continue  # its key advertisement, sent before it encoded anything
        msg = decode(rec.payload)
        assert isinstance(msg, Abort), f"{protocol} client 2 sent {type(msg).__name__} after a bad input"
        assert msg.reason == "EncodingError" and msg.detail in codes
        assert not any(ch.isdigit() for ch in msg.reason + msg.detail)
    if protocol.startswith("secagg"):
        assert tr.excluded[2] == "EncodingError (client abort): input-rejected-by-schema"
        assert any("client 2 aborted" in r.getMessage() for r in caplog.records)  # the client's own log
    text = "".join(str(v) for v in tr.view(SERVER))
    assert str(SECRET)[2:8] not in text


# -- item 5a: bad shares anywhere among the holders are routed around -------------------------------------


def _corrupt_unmask(culprits: set[int]) -> Any:
    def fault(rec: MessageRecord) -> list[bytes]:
        if rec.sender in culprits and rec.phase == "unmasking":
            m = decode(rec.payload, Unmask)
            seeds = (m.seed_shares.astype(np.int64) + 1) % (2**31 - 1)
            keys = (m.key_shares.astype(np.int64) + 1) % (2**31 - 1)
            return [Unmask(m.session_id, m.alive, seeds, m.dead, keys).to_bytes()]
        return [rec.payload]

    return fault


def test_corrupted_holders_0_and_4_of_7_are_routed_around() -> None:
    """n=7, t=4, one dropout: six holders answer, 0 and 4 lie; no window of four consecutive holders
    is clean, but {1, 2, 3, 6} is."""
    contrib = contributions(7)
    proto = SecAgg(interceptor=_corrupt_unmask({0, 4}))
    assert proto.parameters(7).threshold == 4
    sums, tr = proto.aggregate(SCHEMA, contrib, dropouts=DropoutPlan({5: "masked_input"}))
    assert tr.survivors == (0, 1, 2, 3, 4, 6) and tr.extra["bad_shares"]
    assert_sum(sums, exact_sum(contrib, tr.survivors))


def test_too_many_corrupted_holders_abort_with_the_right_counts() -> None:
    contrib = contributions(7)
    proto = SecAgg(interceptor=_corrupt_unmask({0, 2, 4}))
    with pytest.raises(ThresholdError, match=r"among the 6 holders that answered .* at least 4 good shares"):
        proto.aggregate(SCHEMA, contrib, dropouts=DropoutPlan({5: "masked_input"}))


# -- item 5b: complaints cannot exclude chosen peers --------------------------------------------------------


def test_one_client_cannot_exclude_chosen_peers_by_complaining() -> None:
    contrib = contributions(9)

    def accuse(rec: MessageRecord) -> list[bytes]:
        if rec.sender == 2 and rec.phase == "masked_input":
            m = decode(rec.payload, MaskedInput)
            return [MaskedInput(m.session_id, (0, 1, 3), m.ring_bits, m.vector).to_bytes()]
        return [rec.payload]

    sums, tr = SecAgg(interceptor=accuse).aggregate(SCHEMA, contrib)
    assert tr.survivors == (0, 1, 3, 4, 5, 6, 7, 8)  # the accused stay; the complainer leaves
    assert "excludes the complainer" in tr.excluded[2]
    assert_sum(sums, exact_sum(contrib, tr.survivors))


def _garble_to(culprit: int, victims: int, seen: list[int]) -> Any:
    def fault(rec: MessageRecord) -> list[bytes]:
        if rec.sender == culprit and rec.phase == "share_keys":
            m = decode(rec.payload, ShareKeys)
            env = []
            for i, (d, c) in enumerate(m.envelopes):
                if i < victims:
                    seen.append(d)
                    c = c[:-1] + bytes([c[-1] ^ 1])
                env.append((d, c))
            return [ShareKeys(m.session_id, m.seed_commitment, tuple(env)).to_bytes()]
        return [rec.payload]

    return fault


def test_a_complaint_shared_by_t_clients_excludes_the_accused() -> None:
    """A sender garbles its shares to t = 4 of its 8 neighbours: t complainers cannot all be corrupted
    (fewer than t collude), so the sender leaves and the complainers stay."""
    contrib = contributions(30)
    victims: list[int] = []
    proto = SecAggPlus(degree=8, threshold=4, complete_below=0, interceptor=_garble_to(7, 4, victims))
    sums, tr = proto.aggregate(SCHEMA, contrib)
    assert 7 not in tr.survivors and set(victims) <= set(tr.survivors) and len(tr.survivors) == 29
    assert_sum(sums, exact_sum(contrib, tr.survivors))


def test_garbling_to_fewer_than_t_clients_makes_only_those_leave() -> None:
    contrib = contributions(9)
    victims: list[int] = []
    sums, tr = SecAgg(interceptor=_garble_to(4, 2, victims)).aggregate(SCHEMA, contrib)
    assert 4 in tr.survivors and not set(victims) & set(tr.survivors) and len(tr.survivors) == 7
    assert_sum(sums, exact_sum(contrib, tr.survivors))


# -- item 5c: a malicious client cannot push the sum outside n * bound, nor forge counts ------------------


class _Forging:
    """A schema proxy for a malicious client: its encoding adds ``offset`` ring units to element 0, or
    sets every clip-count limb to its maximum."""

    def __init__(self, schema: SumSchema, *, offset: int = 0) -> None:
        self._schema, self._offset = schema, offset

    def __getattr__(self, name: str) -> Any:
        return getattr(self._schema, name)

    def encode(self, contribution: Any, rng: Any = None) -> Any:
        enc = self._schema.encode(contribution, rng)
        enc.data[0] = (int(enc.data[0]) + self._offset) % (1 << self._schema.ring_bits)
        return enc

    def encode_into(self, contribution: Any, out: np.ndarray, bits: Any) -> dict[str, int]:
        clips = self._schema.encode_into(contribution, out, bits)
        out[0] = (int(out[0]) + self._offset) % (1 << self._schema.ring_bits)
        return clips


def _malicious(offset: int = 0, forge_counts: bool = False) -> type[SecAggPlus]:
    class Malicious(SecAggPlusClient):
        def __init__(self, party_id: int, schema: SumSchema, *args: Any, **kw: Any) -> None:
            super().__init__(party_id, schema, *args, **kw)
            if party_id == 0:
                self.schema = _Forging(schema, offset=offset)  # type: ignore[assignment]
                if forge_counts:
                    layout = self.layout
                    top = (1 << layout.limb_bits) - 1
                    layout.encode = lambda counts: np.full(layout.extra, top, dtype=np.uint64)  # type: ignore[method-assign]

    class Proto(SecAgg):
        client_class = Malicious

    return Proto


def test_a_sum_beyond_n_times_the_bound_is_refused() -> None:
    contrib = contributions(5)
    one = int(SCHEMA.encode({"w": np.ones(8), "n": np.zeros(4)}).data[0])  # ring units of 1.0
    with pytest.raises(
        ReleaseRefusedError, match=r"block 'w': 1 element\(s\) of the decoded sum exceed n \* bound"
    ):
        _malicious(offset=int(13.5 * one))().aggregate(SCHEMA, contrib)


def test_forged_clip_count_limbs_are_refused() -> None:
    contrib = contributions(5)
    assert ClipLayout(SCHEMA).limb_bits > 3
    with pytest.raises(ReleaseRefusedError, match="clip count"):
        _malicious(forge_counts=True)().aggregate(SCHEMA, contrib)


def test_a_shift_within_the_bounds_is_not_detected() -> None:
    """Documented limit (SECURITY.md): a malicious client that stays inside n * bound moves the sum."""
    contrib = {c: {"w": np.zeros(8), "n": np.zeros(4)} for c in range(5)}
    one = int(SCHEMA.encode({"w": np.ones(8), "n": np.zeros(4)}).data[0])
    sums, _ = _malicious(offset=3 * one)().aggregate(SCHEMA, contrib)
    assert float(sums["w"][0]) == pytest.approx(3.0)  # one client's 'input' of 3 with bound 1


# -- item 5d: plaintext+dp reveals every input --------------------------------------------------------------


def test_dp_wrapper_reports_what_its_inner_protocol_reveals() -> None:
    kw = dict(dp_min_contributors=2, dp_clip_norm=1.0, dp_noise_multiplier=1.0)
    assert get_protocol("plaintext+dp", **kw).reveals_individual_inputs is True
    assert get_protocol("secagg+dp", **kw).reveals_individual_inputs is False


# -- item 4: DP accounting matches the sampler ------------------------------------------------------------


def _reported_epsilon(sampler: str, q: float, rounds: int, z: float) -> Any:
    schema = SumSchema([BlockSpec("w", (4,), bound=1.0, dp=True)], max_clients=10, precision=2**-16)
    p = DistributedDP(
        PlaintextAggregation(),
        min_contributors=2,
        clip_norm=1.0,
        noise_multiplier=z,
        sample_rate=q,
        sampler=sampler,
        insecure_seed=1,
    )
    zeros = {c: {"w": torch.zeros(4)} for c in range(2)}
    for r in range(rounds):
        p.aggregate(schema, zeros, round_index=r)
    return p.privacy_report()


def _opacus(z: float, q: float, rounds: int) -> float:
    from opacus.accountants import RDPAccountant

    acc = RDPAccountant()
    acc.history = [(z, q, rounds)]
    return float(acc.get_epsilon(1e-5))


def test_a_server_drawn_cohort_is_accounted_without_amplification() -> None:
    """z=1.1, 50 rounds, q=0.1 drawn by the server: Opacus at q=1 (49.93), not the amplified 6.48."""
    rep = _reported_epsilon("server", 0.1, 50, 1.1)
    assert rep.epsilon == pytest.approx(_opacus(1.1, 1.0, 50), rel=1e-9)
    assert rep.epsilon == pytest.approx(49.93, abs=0.01)
    assert not rep.amplified and rep.sampler == "server" and rep.adjacency.startswith("zero-out")


def test_client_poisson_sampling_is_amplified_and_no_tighter_than_opacus() -> None:
    """Each client's own coin (Poisson, add/remove adjacency): Opacus's sampled-Gaussian RDP is the
    matching accountant; ours (the general Zhu-Wang bound on the discrete Gaussian) is at least as
    large and close to it."""
    rep = _reported_epsilon("poisson", 0.1, 50, 1.1)
    ref = _opacus(1.1, 0.1, 50)
    assert ref <= rep.epsilon < 1.4 * ref
    assert rep.amplified and rep.adjacency.startswith("add/remove")


def test_unknown_sampler_is_refused() -> None:
    with pytest.raises(Exception, match="sampler must be one of"):
        DistributedDP(
            PlaintextAggregation(), min_contributors=2, clip_norm=1.0, noise_multiplier=1.0, sampler="x"
        )


# -- out-of-ring elements: the batched range check of the server's running sum ---------------------------


@pytest.mark.parametrize("protocol", ["secagg", "secagg+"])
def test_an_upload_with_an_element_outside_the_ring_is_excluded(protocol: str) -> None:
    """The server decodes masked inputs without the per-message range check and makes it in the pass that
    sums (``RunningSum.add_all``): an upload with one element at or above 2^bits is still excluded as
    malformed, and the sum is the other clients' exactly."""
    contrib = contributions(9)

    def widen(rec: MessageRecord) -> list[bytes]:
        if rec.sender == 3 and rec.phase == "masked_input":
            m = decode(rec.payload, MaskedInput)
            assert m.ring_bits < 32 and m.vector.dtype == np.uint32
            raw = bytearray(rec.payload)
            raw[-1] = 0xFF  # the last element's top byte: at least 2^24 * 255 >= 2^bits
            return [bytes(raw)]
        return [rec.payload]

    proto = SecAgg(interceptor=widen) if protocol == "secagg" else SecAggPlus(interceptor=widen)
    sums, tr = proto.aggregate(SCHEMA, contrib)
    assert 3 not in tr.survivors and "elements >= 2^" in tr.excluded[3]
    assert_sum(sums, exact_sum(contrib, tr.survivors))


@pytest.mark.parametrize("bad_at", [0, 69_999])
def test_running_sum_takes_back_the_pieces_of_a_vector_outside_the_ring(
    bad_at: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Split over two pieces, a vector bad in one piece only is not summed at all (the piece that passed is
    subtracted again); the others are, and the result equals the serial sum of the good vectors."""
    from types import SimpleNamespace

    from securefgl.protocols._secaggplus_unmask import RunningSum
    from securefgl.protocols._split_planner import planner

    monkeypatch.setattr(planner(), "enabled", False)  # workers=2 always splits
    rng = np.random.default_rng(0)
    vecs = {c: rng.integers(0, 2**28, 70_000, dtype=np.uint32) for c in range(4)}
    vecs[2][bad_at] = 2**28
    for workers in (1, 2):
        running = RunningSum(70_000, 28)
        msgs = {c: SimpleNamespace(vector=v, ring_bits=28) for c, v in vecs.items()}
        assert running.add_all(msgs, workers) == [2]
        expected = (vecs[0].astype(np.uint64) + vecs[1] + vecs[3]).astype(np.uint32)
        assert np.array_equal(running.total, expected) and set(running.vectors) == {0, 1, 3}


@pytest.mark.parametrize("bad_at", [None, 0, 20_000, 69_999])
def test_running_sum_of_packed_uploads_unpacks_checks_and_takes_back_in_chunks(
    bad_at: int | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """44-bit rings travel as 6 bytes per element and stay packed until the running sum unpacks them chunk by
    chunk: the sum equals that of the unpacked vectors, a vector with one element at or above 2^44 (in the first
    chunk, inside a later one, or among the last elements, whose 8-byte word would run past the message) is
    excluded with everything of it already added taken back, and a non-survivor is removed by ``total_of``."""
    from types import SimpleNamespace

    from securefgl.protocols import _secaggplus_unmask
    from securefgl.protocols._fields import PackedRing, _pack_narrow
    from securefgl.protocols._secaggplus_unmask import RunningSum

    monkeypatch.setattr(_secaggplus_unmask, "UNPACK_CHUNK", 16384)  # several chunks per piece of 35,000
    monkeypatch.setattr(_secaggplus_unmask.planner(), "enabled", False)  # workers=2 always splits

    rng = np.random.default_rng(1)
    n, bits = 70_000, 44
    vecs = {c: rng.integers(0, 2**bits, n, dtype=np.uint64) for c in range(4)}
    if bad_at is not None:
        vecs[2][bad_at] = 2**bits + 5
    packed = {}
    for c, v in vecs.items():
        raw = np.empty(n * 6, dtype=np.uint8)
        _pack_narrow(v, 6, raw)
        packed[c] = PackedRing(memoryview(raw.tobytes()), 6, n, np.dtype(np.uint64))
        assert np.array_equal(packed[c].unpack(), v)
        lo, hi = sorted(rng.integers(0, n + 1, 2).tolist())
        assert np.array_equal(packed[c].unpack_into(lo, hi, np.empty(n, np.uint64)), v[lo:hi])
    good = [c for c in vecs if c != 2 or bad_at is None]
    for workers in (1, 2):
        running = RunningSum(n, bits)
        msgs = {c: SimpleNamespace(vector=p, ring_bits=bits) for c, p in packed.items()}
        assert running.add_all(msgs, workers) == ([] if bad_at is None else [2])
        mask = np.uint64(2**bits - 1)
        assert np.array_equal(running.total & mask, sum(vecs[c] for c in good) & mask)
        assert set(running.vectors) == set(good)
        total = running.total_of([c for c in good if c != 0])
        assert np.array_equal(total & mask, sum(vecs[c] for c in good if c != 0) & mask)


@pytest.mark.parametrize("packed", [False, True])
@pytest.mark.parametrize("bad", [(), (1,), (7,), (0, 9)])
def test_running_sum_split_by_vectors_excludes_bad_vectors_of_either_half(
    packed: bool, bad: tuple[int, ...], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A vector too short to split by elements is summed with its uploads halved between two threads (the second
    into an accumulator of its own): the total equals the serial sum of the good vectors, and a vector with an
    element outside the ring is excluded whichever half it falls in, its chunks already added taken back."""
    from types import SimpleNamespace

    from securefgl.protocols import _secaggplus_unmask
    from securefgl.protocols._fields import PackedRing, _pack_narrow
    from securefgl.protocols._prg import piece_bounds
    from securefgl.protocols._secaggplus_unmask import ITEM_SPLIT_MIN, ITEM_SPLIT_MIN_BYTES, RunningSum

    monkeypatch.setattr(_secaggplus_unmask, "UNPACK_CHUNK", 1024)  # a packed upload's first chunks pass first
    n, bits, count = 20_000, 44 if packed else 28, 10
    dtype = np.uint64 if packed else np.uint32
    size = np.dtype(dtype).itemsize
    assert (
        len(piece_bounds(n, size, 2)) == 1
        and n * size >= ITEM_SPLIT_MIN_BYTES
        and count >= 2 * ITEM_SPLIT_MIN
    )
    rng = np.random.default_rng(2)
    vecs = {c: rng.integers(0, 2**bits, n, dtype=dtype) for c in range(count)}
    for c in bad:
        vecs[c][n - 1] = 2**bits + 1
    vectors: dict[int, object] = dict(vecs)
    if packed:
        for c, v in vecs.items():
            raw = np.empty(n * 6, dtype=np.uint8)
            _pack_narrow(v, 6, raw)
            vectors[c] = PackedRing(memoryview(raw.tobytes()), 6, n, np.dtype(np.uint64))
    good = [c for c in vecs if c not in bad]
    mask = dtype(2**bits - 1)
    for workers in (1, 2):
        running = RunningSum(n, bits)
        msgs = {c: SimpleNamespace(vector=v, ring_bits=bits) for c, v in vectors.items()}
        assert running.add_all(msgs, workers) == sorted(bad)
        expected = np.zeros(n, dtype=dtype)
        for c in good:
            expected += vecs[c]
        assert np.array_equal(running.total & mask, expected & mask) and set(running.vectors) == set(good)


#: The encodings of Curve25519's points of order 1, 2, 4 and 8 and their non-canonical forms (u + p), as
#: little-endian u-coordinates (the list libsodium refuses).
_P25519 = 2**255 - 19
_SMALL_ORDER = [
    0,
    1,
    325606250916557431795983626356110631294008115727848805560023387167927233504,
    39382357235489614581723060781553021112529911719440698176882885853963445705823,
    _P25519 - 1,
    _P25519,
    _P25519 + 1,
]


def test_key_is_usable_refuses_exactly_the_low_order_points_as_a_fresh_key_would() -> None:
    from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey

    from securefgl.protocols._secaggplus_session import key_is_usable

    def fresh_key_says(pk: bytes) -> bool:
        try:
            X25519PrivateKey.generate().exchange(X25519PublicKey.from_public_bytes(pk))
        except ValueError:
            return False
        return True

    small = [u.to_bytes(32, "little") for u in _SMALL_ORDER]
    honest = [X25519PrivateKey.generate().public_key().public_bytes_raw() for _ in range(50)]
    assert [key_is_usable(pk) for pk in small] == [False] * len(small)
    assert all(key_is_usable(pk) for pk in honest)
    for pk in small + honest:
        assert key_is_usable(pk) == fresh_key_says(pk)
