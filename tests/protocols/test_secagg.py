"""Tests of SecAgg (the complete-graph configuration of securefgl.protocols.secaggplus).

Real parties, real X25519 keys, real AEAD and PRG; faults are injected through the router's
interceptor or by a deviating server subclass, never by mocking a component.
"""

from __future__ import annotations

import hashlib
import importlib.util
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scipy import stats

from securefgl.errors import (
    ConfigError,
    OverflowRiskError,
    ReleaseRefusedError,
    RequestRefusedError,
    StageOrderError,
    ThresholdError,
)
from securefgl.protocols import get_protocol
from securefgl.protocols.base import SERVER, DropoutPlan, MessageRecord
from securefgl.protocols.encoding import BlockSpec, SumSchema
from securefgl.protocols.messages import (
    Abort,
    AdvertiseKeys,
    DeliverRequest,
    MaskedInput,
    ShareKeys,
    Unmask,
    UnmaskRequest,
    decode,
)
from securefgl.protocols.router import Outgoing
from securefgl.protocols.secagg import SecAgg
from securefgl.protocols.secaggplus import (
    SecAggPlus,
    SecAggPlusClient,
    SecAggPlusServer,
    Stage,
    resolve_graph,
)

_spec = importlib.util.spec_from_file_location(
    "vectors_loader", Path(__file__).resolve().parents[1] / "vectors" / "loader.py"
)
assert _spec is not None and _spec.loader is not None
_loader = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_loader)
load_vectors = _loader.load_vectors

STAGES = ("advertise_keys", "share_keys", "masked_input", "unmasking")


# -- helpers ---------------------------------------------------------------------------------------------


def grid_schema(max_clients: int = 64, **kw: Any) -> SumSchema:
    """A schema whose test inputs lie on the quantisation grid, so encodings are exact."""
    return SumSchema(
        [
            BlockSpec("w", (3, 2), bound=2.0),
            BlockSpec("b", (4,), bound=1.0),
            BlockSpec("n", (3,), kind="count", bound=7),
        ],
        max_clients=max_clients,
        precision=2.0**-10,
        **kw,
    )


def grid_contributions(
    schema: SumSchema, clients: list[int], seed: int = 0
) -> dict[int, dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    out = {}
    for c in clients:
        out[c] = {
            "w": rng.integers(-2048, 2049, (3, 2)) / 1024.0,  # multiples of 2^-10 within [-2, 2]
            "b": rng.integers(-1024, 1025, 4) / 1024.0,
            "n": rng.integers(0, 8, 3),
        }
    return out


def plain_sum(
    schema: SumSchema, contributions: Mapping[int, Mapping[str, Any]], clients: Any
) -> dict[str, np.ndarray]:
    flat = sum(schema.pack(contributions[c])[0] for c in clients)
    return {b.name: np.asarray(flat[schema.slices[b.name]]).reshape(b.shape) for b in schema.blocks}


def assert_exact(sums: Any, expected: Mapping[str, np.ndarray]) -> None:
    for name, val in expected.items():
        got = sums[name].double().numpy() if sums[name].is_floating_point() else sums[name].numpy()
        assert np.array_equal(got, val), (name, got, val)


def server_messages(tr: Any, phase: str) -> list[MessageRecord]:
    return [r for r in tr.view(SERVER) if r.phase == phase]


def run_until_unmask(
    proto: SecAggPlus, schema: SumSchema, contributions: Mapping[int, Any]
) -> tuple[SecAggPlusServer, dict[int, SecAggPlusClient], Outgoing]:
    """Drive real parties by hand up to the server's unmask requests (which are returned, not sent)."""
    clients = sorted(contributions)
    server = SecAggPlusServer(
        schema, clients, config=proto.config, protocol_name=proto.name, round_index=0, recipient=None
    )
    parties = {
        c: SecAggPlusClient(
            c, schema, contributions[c], config=proto.config, protocol_name=proto.name,
            round_index=0, recipient=None, context=b"",
        )
        for c in clients
    }  # fmt: skip
    out = server.start()
    while out.stage != Stage.UNMASKING.value:
        replies = [(c, parties[c].handle(p)) for c, p in out.messages.items()]
        nxt = server.handle(out.stage, [(c, r) for c, r in replies if r is not None])
        assert nxt is not None
        out = nxt
    return server, parties, out


def expected_outcome(n: int, t: int, plan: Mapping[int, str]) -> tuple[bool, set[int]]:
    """Complete graph: success iff at least t clients answer the unmask stage; the sum holds every
    client that sent its masked input."""
    before = {c for c, s in plan.items() if s != "unmasking"}
    survivors = set(range(n)) - before
    return n - len(plan) >= t, survivors


def looks_uniform(v: np.ndarray, bits: int) -> bool:
    """Chi-square of the top 6 bits and per-bit frequencies against the uniform distribution."""
    v = v.astype(np.uint64)
    top = (v >> np.uint64(bits - 6)).astype(np.int64)
    if stats.chisquare(np.bincount(top, minlength=64)).pvalue < 1e-6:
        return False
    ones = ((v[:, None] >> np.arange(bits, dtype=np.uint64)) & np.uint64(1)).sum(axis=0)
    z = (ones - v.size / 2) / np.sqrt(v.size / 4)
    return bool(np.all(np.abs(z) < 6))


# -- correctness -----------------------------------------------------------------------------------------


def test_sum_is_exact_in_the_ring_and_matches_plaintext() -> None:
    schema = grid_schema()
    contrib = grid_contributions(schema, list(range(7)))
    sums, tr = SecAgg().aggregate(schema, contrib, round_index=4, context=b"model")
    assert_exact(sums, plain_sum(schema, contrib, range(7)))
    assert sums.num_contributors == 7 and tr.survivors == tuple(range(7))
    assert sums["n"].dtype == torch.int64 and sums["w"].dtype == torch.float32
    assert tr.protocol == "secagg" and tr.round_index == 4 and len(tr.session_id) == 32
    assert tr.extra["graph"] == "complete" and tr.extra["threshold"] == 4


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    n=st.integers(2, 7),
    shapes=st.lists(st.tuples(st.integers(1, 5), st.integers(1, 4)), min_size=1, max_size=3),
    bound=st.sampled_from([0.5, 1.0, 3.0]),
    precision=st.sampled_from([2.0**-8, 2.0**-16, 2.0**-24]),
    seed=st.integers(0, 2**16),
)
def test_random_schemas_within_the_stated_error(
    n: int, shapes: list[tuple[int, int]], bound: float, precision: float, seed: int
) -> None:
    blocks = [BlockSpec(f"r{i}", s, bound=bound) for i, s in enumerate(shapes)]
    blocks.append(BlockSpec("cnt", (2,), kind="count", bound=100))
    schema = SumSchema(blocks, max_clients=32, precision=precision)
    rng = np.random.default_rng(seed)
    contrib = {
        c: {**{f"r{i}": rng.uniform(-1.5 * bound, 1.5 * bound, s) for i, s in enumerate(shapes)},
            "cnt": rng.integers(0, 101, 2)}
        for c in range(n)
    }  # fmt: skip
    sums, tr = SecAgg().aggregate(schema, contrib)
    exp = plain_sum(schema, contrib, range(n))
    for name, val in exp.items():
        err = np.abs(sums[name].double().numpy() - val).max()
        assert err <= sums.max_abs_error[name] + 1e-12, (name, err, sums.max_abs_error[name])
    assert np.array_equal(sums["cnt"].numpy(), exp["cnt"])
    # clip counts: only their sum is revealed, and it is exact
    clipped = {
        f"r{i}": sum(int((np.abs(contrib[c][f"r{i}"]) > bound).sum()) for c in range(n))
        for i in range(len(shapes))
    }
    assert {k: v for k, v in sums.clip_counts.items() if k != "cnt"} == clipped
    assert tr.clip_counts == sums.clip_counts


def test_exact_in_the_ring_for_arbitrary_reals() -> None:
    """With the insecure seed the clients' stochastic rounding is reproducible: the protocol's sum is
    exactly the decoded ring sum of the clients' own encodings, bit for bit."""
    schema = SumSchema(
        [BlockSpec("x", (50,), bound=1.0), BlockSpec("c", (3,), kind="count", bound=9)], max_clients=16
    )
    rng = np.random.default_rng(5)
    contrib = {c: {"x": rng.uniform(-1.3, 1.3, 50), "c": rng.integers(0, 10, 3)} for c in range(5)}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        proto = SecAgg(insecure_seed=11)
    sums, _ = proto.aggregate(schema, contrib, round_index=2)
    ring = np.zeros(schema.length, dtype=np.uint64)
    for c in range(5):
        ring += schema.encode(contrib[c], proto._random_for(c, 2)[1]).data
    ring &= np.uint64(schema.modulus - 1)
    expected = schema.decode(ring, 5)
    assert torch.equal(sums["x"], expected["x"]) and torch.equal(sums["c"], expected["c"])


def test_wide_ring_uses_64_bit_words() -> None:
    schema = SumSchema([BlockSpec("x", (6,), bound=4.0)], max_clients=1000, precision=2.0**-40)
    assert 32 < schema.ring_bits <= 64
    rng = np.random.default_rng(9)
    contrib = {c: {"x": rng.integers(-(2**41), 2**41, 6) / 2.0**40} for c in range(4)}
    sums, tr = SecAgg().aggregate(schema, contrib)
    assert np.array_equal(
        sums["x"].double().numpy(), sum(contrib[c]["x"] for c in range(4)).astype(np.float32)
    )
    (rec, *_) = server_messages(tr, "masked_input")
    assert decode(rec.payload, MaskedInput).vector.dtype == np.uint64


@pytest.mark.parametrize("prg", ["chacha20", "aes128-ctr"])
def test_every_prg_gives_the_same_sum(prg: str) -> None:
    schema = grid_schema()
    contrib = grid_contributions(schema, list(range(4)), seed=3)
    sums, _ = SecAgg(prg=prg).aggregate(schema, contrib)  # type: ignore[arg-type]
    assert_exact(sums, plain_sum(schema, contrib, range(4)))


def test_known_answer_transcript_vector() -> None:
    (v,) = load_vectors("secagg/secagg_insecure_seed.json")["vectors"]
    blocks = [
        BlockSpec(name, tuple(shape), kind=kind, bound=bound)
        for name, shape, kind, bound in v["schema"]["blocks"]
    ]
    schema = SumSchema(blocks, max_clients=v["schema"]["max_clients"])
    contrib = {
        int(c): {"w": torch.tensor(x["w"], dtype=torch.float64), "n": torch.tensor(x["n"])}
        for c, x in v["contributions"].items()
    }
    with pytest.warns(UserWarning, match="INSECURE"):
        proto = SecAgg(insecure_seed=v["insecure_seed"])
    sums, tr = proto.aggregate(schema, contrib, round_index=v["round_index"], context=v["context"].encode())
    assert tr.session_id.hex() == v["session_id"]
    got = {
        str(r.sender): hashlib.sha256(
            decode(r.payload, MaskedInput).vector.astype("<u8").tobytes()
        ).hexdigest()
        for r in server_messages(tr, "masked_input")
    }
    assert got == v["masked_input_sha256"]
    assert [float(x) for x in sums["w"]] == v["sum_w"] and [int(x) for x in sums["n"]] == v["sum_n"]


# -- dropouts --------------------------------------------------------------------------------------------


def _dropout_case(n: int, stage: str, count: int, seed: int) -> None:
    schema = grid_schema()
    contrib = grid_contributions(schema, list(range(n)), seed=seed)
    rng = np.random.default_rng(seed)
    plan = {int(c): stage for c in rng.choice(n, size=count, replace=False)}
    t = resolve_graph(SecAgg().config, n).threshold
    ok, survivors = expected_outcome(n, t, plan)
    if not ok:
        with pytest.raises(ThresholdError) as info:
            SecAgg().aggregate(schema, contrib, dropouts=DropoutPlan(plan))
        tr = info.value.transcript  # type: ignore[attr-defined]
        if stage != "unmasking":  # aborted before asking anyone for a share
            assert not server_messages(tr, "unmasking") and not any(
                r.phase == "unmasking" for r in tr.view(0)
            )
        return
    sums, tr = SecAgg().aggregate(schema, contrib, dropouts=DropoutPlan(plan))
    assert set(tr.survivors) == survivors and tr.dropped == plan
    assert_exact(sums, plain_sum(schema, contrib, sorted(survivors)))


@pytest.mark.parametrize("n", [3, 5, 10])
@pytest.mark.parametrize("stage", STAGES)
def test_every_dropout_count_down_to_the_threshold(n: int, stage: str) -> None:
    t = resolve_graph(SecAgg().config, n).threshold
    for count in range(0, n - t + 2):  # the last count is one below the threshold: abort
        _dropout_case(n, stage, count, seed=100 * n + count)


@pytest.mark.parametrize("stage", STAGES)
def test_n50_at_the_threshold_and_below_sampled(stage: str) -> None:
    t = resolve_graph(SecAgg().config, 50).threshold
    _dropout_case(50, stage, 50 - t, seed=7)
    if stage == "advertise_keys":  # below the threshold (the other stages: n = 3, 5, 10 and the slow sweep)
        _dropout_case(50, stage, 50 - t + 1, seed=8)


@pytest.mark.slow
@pytest.mark.parametrize("stage", STAGES)
def test_n50_every_dropout_count(stage: str) -> None:
    t = resolve_graph(SecAgg().config, 50).threshold
    for count in range(0, 50 - t + 2):
        _dropout_case(50, stage, count, seed=count)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(n=st.integers(3, 8), data=st.data())
def test_random_dropout_patterns(n: int, data: st.DataObject) -> None:
    plan = data.draw(st.dictionaries(st.integers(0, n - 1), st.sampled_from(STAGES), max_size=n))
    schema = grid_schema()
    contrib = grid_contributions(schema, list(range(n)), seed=n)
    t = resolve_graph(SecAgg().config, n).threshold
    ok, survivors = expected_outcome(n, t, plan)
    if not ok:
        with pytest.raises(ThresholdError):
            SecAgg().aggregate(schema, contrib, dropouts=DropoutPlan(plan))
        return
    sums, tr = SecAgg().aggregate(schema, contrib, dropouts=DropoutPlan(plan))
    assert set(tr.survivors) == survivors
    assert_exact(sums, plain_sum(schema, contrib, sorted(survivors)))


def test_random_dropout_plan_with_any_phase() -> None:
    schema = grid_schema()
    contrib = grid_contributions(schema, list(range(8)))
    plan = DropoutPlan.random(list(range(8)), 0.25, np.random.default_rng(1))
    sums, tr = SecAgg(rng=np.random.default_rng(2)).aggregate(schema, contrib, dropouts=plan)
    assert set(tr.dropped) == set(plan.at)
    assert_exact(sums, plain_sum(schema, contrib, sorted(tr.survivors)))


# -- privacy ---------------------------------------------------------------------------------------------


def test_masked_input_is_indistinguishable_from_uniform() -> None:
    """The server's view of a client's masked input (zero input) vs. uniform: chi-square on the top
    bits and per-bit frequencies. The same test rejects the unmasked encoding (a test that can fail)."""
    d = 30_000
    schema = SumSchema([BlockSpec("x", (d,), bound=1.0)], max_clients=16)
    contrib = {c: {"x": np.zeros(d)} for c in range(3)}
    contrib[0] = {"x": np.full(d, 0.75)}
    _, tr = SecAgg().aggregate(schema, contrib)
    bits = schema.ring_bits
    for rec in server_messages(tr, "masked_input"):
        y = decode(rec.payload, MaskedInput).vector[:d]
        assert looks_uniform(y, bits), rec.sender
    plain = schema.encode(contrib[0]).data
    assert not looks_uniform(plain, bits)
    assert not looks_uniform(schema.encode(contrib[1]).data, bits)


def test_server_view_holds_exactly_what_it_received() -> None:
    schema = grid_schema()
    contrib = grid_contributions(schema, list(range(5)))
    _, tr = SecAgg().aggregate(schema, contrib)
    view = tr.view(SERVER)
    assert {r.phase for r in view} == set(STAGES)
    for rec in view:
        msg = decode(rec.payload)
        assert rec.phase == msg.STAGE and rec.receiver == SERVER
    assert sum(r.size for r in view) == tr.total_bytes_received(SERVER)
    # no contribution value is visible in the clear: masked vectors differ from the encodings
    for rec in server_messages(tr, "masked_input"):
        y = decode(rec.payload, MaskedInput).vector[: schema.length].astype(np.uint64)
        assert not np.array_equal(y, schema.encode(contrib[rec.sender]).data)
    # per-party bytes and times are recorded for every stage
    assert all(tr.total_bytes_sent(c) > 0 for c in range(5))
    assert set(tr.phase_seconds) == set(STAGES)


def test_unmask_requests_name_each_clients_own_split() -> None:
    """Nobody dropped: on the complete graph every survivor is asked for the same split (encoded once,
    the same bytes); with a client dropped before its input, each request names exactly the survivors and
    the dropped client, and the sum is the survivors' exactly."""
    schema = grid_schema()
    contrib = grid_contributions(schema, list(range(6)))
    _, _, out = run_until_unmask(SecAgg(), schema, contrib)
    requests = {c: decode(p, UnmaskRequest) for c, p in out.messages.items()}
    assert set(requests) == set(range(6)) and len(set(out.messages.values())) == 1
    assert all(r.alive == tuple(range(6)) and r.dead == () for r in requests.values())
    plan = DropoutPlan({4: "masked_input"})
    sums, tr = SecAgg().aggregate(schema, contrib, dropouts=plan)
    asked = {c: [decode(r.payload) for r in tr.view(c) if r.phase == "unmasking"] for c in range(6)}
    assert asked[4] == [] and all(len(asked[c]) == 1 for c in (0, 1, 2, 3, 5))
    asked = {c: m[0] for c, m in asked.items() if m}
    assert all(m.alive == (0, 1, 2, 3, 5) and m.dead == (4,) for m in asked.values())
    assert_exact(sums, plain_sum(schema, contrib, [0, 1, 2, 3, 5]))


def test_curious_server_asking_for_both_share_kinds_is_refused() -> None:
    schema = grid_schema()
    contrib = grid_contributions(schema, list(range(5)))
    proto = SecAgg()
    server, parties, out = run_until_unmask(proto, schema, contrib)
    sid = server.state.session_id
    victim = 3
    # alive and dead at once: b-share and s_sk-share of client 3
    evil = UnmaskRequest(session_id=sid, alive=(0, 1, 2, 3, 4), dead=(victim,)).to_bytes()
    reply = decode(parties[0].handle(evil))
    assert isinstance(reply, Abort) and reply.reason == "RequestRefusedError"
    assert isinstance(parties[0].error, RequestRefusedError)
    assert parties[0].error.party == 0 and parties[0].error.phase == "unmasking"
    # a refused client has wiped its shares: a second, valid request gets nothing
    assert parties[0].handle(out.messages[0]) is None
    # the other refusals
    cases = {
        1: (
            UnmaskRequest(session_id=sid, alive=(0, 1, 1, 2, 3, 4), dead=()),
            RequestRefusedError,
        ),  # duplicate
        2: (
            UnmaskRequest(session_id=sid, alive=(0, 1, 2, 3, 4, 7), dead=()),
            RequestRefusedError,
        ),  # stranger
        3: (UnmaskRequest(session_id=sid, alive=(0, 1, 2, 4), dead=(3,)), RequestRefusedError),  # self dead
        4: (UnmaskRequest(session_id=sid, alive=(1, 4), dead=(0, 2, 3)), ThresholdError),  # < t alive
    }
    for c, (req, err) in cases.items():
        reply = decode(parties[c].handle(req.to_bytes()))
        assert isinstance(reply, Abort) and isinstance(parties[c].error, err), (c, reply)


def test_second_unmask_request_is_refused() -> None:
    schema = grid_schema()
    contrib = grid_contributions(schema, list(range(4)))
    server, parties, out = run_until_unmask(SecAgg(), schema, contrib)
    first = decode(parties[1].handle(out.messages[1]))
    assert isinstance(first, Unmask) and first.dead == ()
    # now ask for the mask-key share of client 2 (the other share kind): refused, nothing revealed
    again = UnmaskRequest(session_id=server.state.session_id, alive=(0, 1, 3), dead=(2,)).to_bytes()
    reply = decode(parties[1].handle(again))
    assert isinstance(reply, Abort) and reply.reason == "StageOrderError"
    assert isinstance(parties[1].refusals[0], StageOrderError)
    # and the client's secrets are gone
    st_ = parties[1].state
    assert not st_.seed_shares and not st_.key_shares and not any(st_.seed) and st_.mask_sk is None


def test_model_inconsistency_is_caught_by_an_honest_server() -> None:
    schema = grid_schema()
    contrib = grid_contributions(schema, list(range(6)))
    contexts = {c: b"model-A" for c in range(6)}
    contexts[4] = b"model-B"  # the server showed client 4 a different model
    sums, tr = SecAgg().aggregate(schema, contrib, context=contexts)
    assert tr.excluded[4].startswith("InconsistentViewError")
    assert tr.survivors == (0, 1, 2, 3, 5)
    assert_exact(sums, plain_sum(schema, contrib, [0, 1, 2, 3, 5]))


class _NoConsistencyCheckServer(SecAggPlusServer):
    """A deviating server that forwards shares between clients it showed different contexts."""

    def _consistent(self, client: int, msg: ShareKeys) -> bool:
        return True


class _DeviatingSecAgg(SecAgg):
    server_class = _NoConsistencyCheckServer


def test_model_inconsistency_is_caught_by_the_clients() -> None:
    schema = grid_schema()
    contrib = grid_contributions(schema, list(range(6)))
    contexts = {c: b"model-A" for c in range(6)}
    contexts[4] = b"model-B"
    sums, tr = _DeviatingSecAgg().aggregate(schema, contrib, context=contexts)
    # client 4 could authenticate nobody's shares: it aborts before sending its input ...
    assert tr.excluded[4].startswith("InconsistentViewError")
    sent = {r.sender: decode(r.payload) for r in server_messages(tr, "masked_input")}
    assert isinstance(sent.pop(4), Abort)
    # ... the others could not authenticate client 4's shares, did not mask with it and complained
    assert all(isinstance(m, MaskedInput) and m.complaints == (4,) for m in sent.values())
    assert_exact(sums, plain_sum(schema, contrib, [0, 1, 2, 3, 5]))


# -- misbehaving clients ---------------------------------------------------------------------------------


def _interceptor(kind: str, culprit: int, victim: int = 0):  # noqa: ANN202
    seen: dict[tuple[int, str], bytes] = {}

    def fault(rec: MessageRecord) -> list[bytes]:
        if rec.sender != culprit:
            return [rec.payload]
        seen[(rec.sender, rec.phase)] = rec.payload
        if kind == "garble" and rec.phase == "masked_input":
            p = bytearray(rec.payload)
            p[len(p) // 2] ^= 0xFF
            return [bytes(p[:-3])]  # truncated and flipped
        if kind == "replay" and rec.phase == "masked_input":
            return [seen[(culprit, "share_keys")]]  # an old message from the previous stage
        if kind == "two_inputs" and rec.phase == "masked_input":
            return [rec.payload, rec.payload]
        if kind == "degenerate_key" and rec.phase == "advertise_keys":
            return [AdvertiseKeys(bytes(32), bytes(31) + b"\x01").to_bytes()]  # low-order points
        if kind == "bad_share" and rec.phase == "share_keys":
            msg = decode(rec.payload, ShareKeys)
            env = tuple((d, (c[:-1] + bytes([c[-1] ^ 1])) if d == victim else c) for d, c in msg.envelopes)
            return [ShareKeys(msg.session_id, msg.seed_commitment, env).to_bytes()]
        if kind == "bad_unmask" and rec.phase == "unmasking":
            msg = decode(rec.payload, Unmask)
            seeds = msg.seed_shares.copy()
            seeds[:, 0] = (seeds[:, 0].astype(np.int64) + 1) % (2**31 - 1)
            return [Unmask(msg.session_id, msg.alive, seeds, msg.dead, msg.key_shares).to_bytes()]
        return [rec.payload]

    return fault


@pytest.mark.parametrize(
    ("kind", "reason"),
    [
        ("garble", "MalformedMessageError"),
        ("replay", "MalformedMessageError"),
        ("two_inputs", "StageOrderError"),
        ("degenerate_key", "InvalidMessage"),
    ],
)
def test_misbehaving_client_is_excluded_and_the_sum_stays_exact(kind: str, reason: str) -> None:
    schema = grid_schema()
    contrib = grid_contributions(schema, list(range(6)))
    sums, tr = SecAgg(interceptor=_interceptor(kind, culprit=2)).aggregate(schema, contrib)
    assert tr.excluded[2].startswith(reason), tr.excluded
    assert 2 not in tr.survivors and len(tr.survivors) == 5
    assert_exact(sums, plain_sum(schema, contrib, tr.survivors))


def test_one_bad_share_makes_its_receiver_leave_not_the_sender() -> None:
    """A single complaint cannot be checked: it excludes the complainer (client 0), and the sum over the
    others, the sender of the bad ciphertext included, stays exact."""
    schema = grid_schema()
    contrib = grid_contributions(schema, list(range(6)))
    sums, tr = SecAgg(interceptor=_interceptor("bad_share", culprit=2, victim=0)).aggregate(schema, contrib)
    assert tr.excluded[0].startswith("InvalidMessage") and "excludes the complainer" in tr.excluded[0]
    assert tr.survivors == (1, 2, 3, 4, 5)
    assert_exact(sums, plain_sum(schema, contrib, tr.survivors))


def test_copied_public_key_excludes_both_holders() -> None:
    schema = grid_schema()
    contrib = grid_contributions(schema, list(range(6)))
    first: dict[int, bytes] = {}

    def copy_keys(rec: MessageRecord) -> list[bytes]:
        if rec.phase == "advertise_keys" and rec.sender != SERVER:
            first.setdefault(rec.sender, rec.payload)
            if rec.sender == 4:
                return [first[1]]  # client 4 replays client 1's keys
        return [rec.payload]

    sums, tr = SecAgg(interceptor=copy_keys).aggregate(schema, contrib)
    assert "also advertised elsewhere" in tr.excluded[1] and "also advertised elsewhere" in tr.excluded[4]
    assert_exact(sums, plain_sum(schema, contrib, [0, 2, 3, 5]))


def test_bad_shares_at_unmasking_are_detected_and_routed_around() -> None:
    schema = grid_schema()
    contrib = grid_contributions(schema, list(range(7)))
    plan = DropoutPlan({5: "masked_input"})  # a dead client too, so both share kinds are reconstructed
    sums, tr = SecAgg(interceptor=_interceptor("bad_unmask", culprit=0)).aggregate(
        schema, contrib, dropouts=plan
    )
    assert tr.survivors == (0, 1, 2, 3, 4, 6)
    assert tr.extra.get("bad_shares")  # the commitments caught the corrupted shares
    assert_exact(sums, plain_sum(schema, contrib, tr.survivors))


def test_below_threshold_after_exclusions_aborts() -> None:
    schema = grid_schema()
    contrib = grid_contributions(schema, list(range(3)))

    def drop_two(rec: MessageRecord) -> list[bytes]:
        return [] if rec.sender in (1, 2) and rec.phase == "masked_input" else [rec.payload]

    with pytest.raises(ThresholdError, match="fewer than the threshold"):
        SecAgg(interceptor=drop_two).aggregate(schema, contrib)


# -- designated recipient --------------------------------------------------------------------------------


def test_designated_recipient_gets_the_sum_and_the_server_learns_nothing() -> None:
    schema = grid_schema()
    contrib = grid_contributions(schema, list(range(5)))
    sums, tr = SecAgg().aggregate(schema, contrib, recipient=3, dropouts=DropoutPlan({1: "unmasking"}))
    assert_exact(sums, plain_sum(schema, contrib, range(5)))
    assert tr.recipient == 3 and tr.extra["delivered_to"] == 3
    (deliver,) = [r for r in tr.view(3) if r.phase == "deliver"]
    msg = decode(deliver.payload, DeliverRequest)
    assert msg.survivors == (0, 1, 2, 3, 4)
    # what the server relayed is the sum under the recipient's pads, not the sum
    encoded = sum(schema.encode(contrib[c]).data for c in range(5)) & np.uint64(schema.modulus - 1)
    assert not np.array_equal(msg.vector[: schema.length].astype(np.uint64), encoded)
    assert not any(r.phase == "deliver" for r in tr.view(SERVER))


def test_recipient_blinded_total_is_uniform_to_the_server() -> None:
    d = 20_000
    schema = SumSchema([BlockSpec("x", (d,), bound=1.0)], max_clients=16)
    contrib = {c: {"x": np.zeros(d)} for c in range(4)}
    _, tr = SecAgg().aggregate(schema, contrib, recipient=0)
    (deliver,) = [r for r in tr.view(0) if r.phase == "deliver"]
    relayed = decode(deliver.payload, DeliverRequest).vector[:d]
    assert looks_uniform(relayed, schema.ring_bits)  # the server's unmasked total is still padded


def test_designated_recipient_dropping_loses_the_sum() -> None:
    schema = grid_schema()
    contrib = grid_contributions(schema, list(range(5)))
    with pytest.raises(ThresholdError, match="recipient 2"):
        SecAgg().aggregate(schema, contrib, recipient=2, dropouts=DropoutPlan({2: "deliver"}))
    with pytest.raises(ThresholdError, match="recipient 2"):
        SecAgg().aggregate(schema, contrib, recipient=2, dropouts=DropoutPlan({2: "masked_input"}))


# -- release rules and configuration ---------------------------------------------------------------------


def test_min_contributors_refuses_before_unmasking() -> None:
    schema = grid_schema(min_contributors=5)
    contrib = grid_contributions(schema, list(range(6)))
    with pytest.raises(ReleaseRefusedError) as info:
        SecAgg().aggregate(schema, contrib, dropouts=DropoutPlan({0: "masked_input", 1: "masked_input"}))
    assert not server_messages(info.value.transcript, "unmasking")  # type: ignore[attr-defined]


def test_block_release_rule_withholds_a_block() -> None:
    schema = SumSchema(
        [BlockSpec("a", (2,)), BlockSpec("cls", (2,), min_contributors=4)], max_clients=16, precision=2.0**-10
    )
    contrib = {c: {"a": np.ones(2) / 4, "cls": np.ones(2) / 8} for c in range(3)}
    sums, tr = SecAgg().aggregate(schema, contrib)
    assert sums.is_withheld("cls") and "cls" in tr.withheld
    assert torch.equal(sums["a"], torch.full((2,), 0.75))


def test_registry_and_configuration() -> None:
    assert isinstance(get_protocol("secagg"), SecAgg)
    p = get_protocol("secagg", threshold=0.75)
    assert p.parameters(8).threshold == 6 and p.parameters(8).complete
    assert SecAgg(threshold=6).parameters(10).threshold == 6
    with pytest.raises(ConfigError, match="insecure_low_threshold"):
        SecAgg(threshold=3).parameters(10)
    assert SecAgg(threshold=3, insecure_low_threshold=True).parameters(10).threshold == 3
    for bad in (dict(threshold=0), dict(threshold=1.5), dict(prg="rc4"), dict(workers=0)):
        with pytest.raises(ConfigError):
            SecAgg(**bad)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="threshold"):
        SecAgg(threshold=12).parameters(10)
    with pytest.raises(ConfigError, match=">= 2"):
        SecAgg(threshold=1).parameters(10)
    schema = grid_schema(max_clients=3)
    with pytest.raises(OverflowRiskError):
        SecAgg().aggregate(schema, grid_contributions(schema, list(range(4))))
    with pytest.raises(ConfigError, match="recipient"):
        SecAgg().aggregate(schema, grid_contributions(schema, [0, 1]), recipient=7)
    with pytest.raises(ConfigError, match="unknown dropout phase"):
        SecAgg().aggregate(schema, grid_contributions(schema, [0, 1]), dropouts=DropoutPlan({0: "input"}))
    assert "SecAgg(graph='complete'" in repr(SecAgg())


def test_bad_contribution_excludes_that_client() -> None:
    schema = grid_schema()
    contrib = grid_contributions(schema, list(range(5)))
    contrib[1] = {**contrib[1], "w": np.full((3, 2), np.nan)}
    sums, tr = SecAgg().aggregate(schema, contrib)
    assert tr.excluded[1] == "EncodingError (client abort): input-rejected-by-schema"
    assert_exact(sums, plain_sum(schema, contrib, [0, 2, 3, 4]))


def test_insecure_seed_warns_and_is_deterministic() -> None:
    schema = grid_schema()
    contrib = grid_contributions(schema, list(range(3)))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        a = SecAgg(insecure_seed=b"fixed").aggregate(schema, contrib)[1]
        b = SecAgg(insecure_seed=b"fixed").aggregate(schema, contrib)[1]
    assert any("INSECURE" in str(w.message) for w in caught)
    assert a.session_id == b.session_id
    c = SecAgg().aggregate(schema, contrib)[1]
    d = SecAgg().aggregate(schema, contrib)[1]
    assert c.session_id != d.session_id  # fresh keys from the OS CSPRNG every time


def test_secrets_are_wiped_after_unmasking() -> None:
    schema = grid_schema()
    contrib = grid_contributions(schema, list(range(4)))
    proto = SecAgg()
    server, parties, out = run_until_unmask(proto, schema, contrib)
    for c, p in out.messages.items():
        assert isinstance(decode(parties[c].handle(p)), Unmask)
        s = parties[c].state
        assert parties[c].stage == "done"
        assert not any(s.seed) and not any(s.mask_sk_raw) and not s.seed_shares and not s.mask_keys
        assert s.channel_sk is None and s.mask_sk is None and s.own_shares is None


def test_record_views_off() -> None:
    schema = grid_schema()
    contrib = grid_contributions(schema, list(range(3)))
    sums, tr = SecAgg(record_views=False).aggregate(schema, contrib)
    assert tr.views == {} and tr.total_bytes_received(SERVER) > 0
    assert_exact(sums, plain_sum(schema, contrib, range(3)))


def test_session_id_binds_round_and_context() -> None:
    schema = grid_schema()
    contrib = grid_contributions(schema, [0, 1, 2])
    seeds = dict(insecure_seed=b"s")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        base = SecAgg(**seeds).aggregate(schema, contrib, round_index=1)[1].session_id
        assert SecAgg(**seeds).aggregate(schema, contrib, round_index=2)[1].session_id != base
        assert SecAgg(**seeds).aggregate(schema, contrib, round_index=1, context=b"x")[1].session_id != base
        assert SecAgg(**seeds).aggregate(schema, contrib, round_index=1)[1].session_id == base


def test_key_agreement_uses_fresh_keys_per_client() -> None:
    schema = grid_schema()
    _, tr = SecAgg().aggregate(schema, grid_contributions(schema, list(range(4))))
    pks = [r.payload[4:] for r in server_messages(tr, "advertise_keys")]
    assert len(set(pks)) == 4 and all(len(p) == 64 for p in pks)
