"""Tests for securefgl.protocols.plaintext: the insecure baseline over the real router and messages."""

from __future__ import annotations

import contextlib

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from securefgl.errors import (
    ConfigError,
    MalformedMessageError,
    OverflowRiskError,
    ReleaseRefusedError,
    ThresholdError,
    WithheldBlockError,
)
from securefgl.protocols import SERVER, BlockSpec, DropoutPlan, SumSchema, get_protocol
from securefgl.protocols.base import MessageRecord, Transcript
from securefgl.protocols.messages import WIRE_VERSION, decode
from securefgl.protocols.plaintext import (
    STAGES,
    PlainClient,
    PlainDeliver,
    PlainInput,
    PlainInputRequest,
    PlainServer,
    PlaintextAggregation,
)
from securefgl.protocols.router import Router

HSETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def schema(max_clients: int = 20, **kw: object) -> SumSchema:
    return SumSchema(
        [
            BlockSpec("w", (3, 4), bound=2.0, dtype=torch.float64),
            BlockSpec("n", (2,), kind="count", bound=50),
            BlockSpec("b", (5,)),
        ],
        max_clients=max_clients,
        **kw,  # type: ignore[arg-type]
    )


def contributions(s: SumSchema, n: int, seed: int = 0, overshoot: float = 1.2) -> dict[int, dict]:
    rng = np.random.default_rng(seed)
    out = {}
    for c in range(n):
        out[c] = {
            "w": rng.uniform(-2 * overshoot, 2 * overshoot, (3, 4)),
            "n": rng.integers(0, 60, 2),
            "b": torch.from_numpy(rng.uniform(-1, 1, 5).astype(np.float32)),
        }
    return out


def reference(s: SumSchema, contribs: dict[int, dict], members) -> np.ndarray:
    total = np.zeros(s.length)
    for c in sorted(members):
        total += s.pack(contribs[c])[0]
    return total


def check_sums(s: SumSchema, sums, ref: np.ndarray) -> None:
    bound = sums.max_abs_error
    for b in s.blocks:
        got = sums[b.name].to(torch.float64).numpy().reshape(-1)
        assert np.all(np.abs(got - ref[s.slices[b.name]]) <= bound[b.name]), b.name


# ----------------------------------------------------------------------------------------------------
# correctness
# ----------------------------------------------------------------------------------------------------


def test_sum_equals_float64_sum_of_clipped_inputs() -> None:
    s = schema()
    contribs = contributions(s, 7)
    proto = get_protocol("plaintext")
    assert isinstance(proto, PlaintextAggregation) and proto.reveals_individual_inputs
    sums, tr = proto.aggregate(s, contribs, round_index=3)
    ref = reference(s, contribs, contribs)
    # float64 block: bitwise the float64 sum in client order; counts exact; float32 within the bound
    np.testing.assert_array_equal(sums["w"].numpy().reshape(-1), ref[s.slices["w"]])
    assert sums["n"].dtype == torch.int64 and sums["n"].tolist() == ref[s.slices["n"]].astype(int).tolist()
    check_sums(s, sums, ref)
    assert sums.max_abs_error["n"] == 0.0 and 0 < sums.max_abs_error["b"] < 1e-5
    assert sums.num_contributors == 7 and tr.survivors == tuple(range(7)) and not tr.dropped
    clipped = sum(s.pack(c)[1]["w"] for c in contribs.values())
    assert clipped > 0 and tr.clip_counts["w"] == clipped == sums.clip_counts["w"]
    assert tr.clip_counts["n"] == sum(s.pack(c)[1]["n"] for c in contribs.values())
    assert tr.protocol == "plaintext" and tr.round_index == 3 and len(tr.session_id) == 32
    assert tr.recipient == SERVER and tr.extra["server_sees_individual_inputs"] is True


@given(
    n=st.integers(1, 12),
    seed=st.integers(0, 2**31),
    drop=st.lists(st.booleans(), min_size=12, max_size=12),
)
@HSETTINGS
def test_random_dropouts_sum_the_rest(n: int, seed: int, drop: list[bool]) -> None:
    s = schema()
    contribs = contributions(s, n, seed)
    plan = {c: "input" for c in range(n) if drop[c]}
    alive = [c for c in range(n) if c not in plan]
    proto = PlaintextAggregation()
    if not alive:
        with pytest.raises(ReleaseRefusedError, match="0 contributor"):
            proto.aggregate(s, contribs, dropouts=DropoutPlan(plan))
        return
    sums, tr = proto.aggregate(s, contribs, dropouts=DropoutPlan(plan))
    assert tr.survivors == tuple(alive) and tr.dropped == plan and sums.num_contributors == len(alive)
    check_sums(s, sums, reference(s, contribs, alive))
    for c in plan:
        assert tr.total_bytes_sent(c) == 0 and tr.total_bytes_received(c) == 0


def test_any_phase_dropout_resolution_is_explicit() -> None:
    s = schema()
    contribs = contributions(s, 6)
    plan = DropoutPlan.random(list(contribs), 0.5, np.random.default_rng(1))
    proto = PlaintextAggregation(rng=np.random.default_rng(2))
    sums, tr = proto.aggregate(s, contribs, dropouts=plan)
    # "any" resolves to input or deliver; deliver never runs without a recipient, so those still count
    dropped_at_input = [c for c, p in tr.dropped.items() if p == "input"]
    assert set(tr.survivors) == set(contribs) - set(dropped_at_input)
    with pytest.raises(ConfigError, match="unknown dropout phase 'unmask'"):
        proto.aggregate(s, contribs, dropouts=DropoutPlan({0: "unmask"}))
    with pytest.raises(ConfigError, match="not invited"):
        proto.aggregate(s, contribs, dropouts=DropoutPlan({99: "input"}))


# ----------------------------------------------------------------------------------------------------
# transcript
# ----------------------------------------------------------------------------------------------------


def test_transcript_has_the_servers_view_and_real_byte_counts() -> None:
    s = schema()
    contribs = contributions(s, 4)
    sums, tr = PlaintextAggregation().aggregate(s, contribs)
    view = tr.view(SERVER)
    assert [m.sender for m in view] == [0, 1, 2, 3] and all(m.phase == "input" for m in view)
    for m in view:
        msg = decode(m.payload, PlainInput)
        # the server sees each individual clipped vector: that is what "insecure" means here
        np.testing.assert_array_equal(msg.vector.view(np.float64), s.pack(contribs[m.sender])[0])
        assert tr.bytes_sent[(m.sender, "input")] == len(m.payload)
        assert tr.bytes_received[(m.sender, "input")] == len(tr.view(m.sender)[0].payload)
    assert tr.total_bytes_received(SERVER) == sum(len(m.payload) for m in view)
    # a float64 vector of 19 elements plus the framing
    assert tr.bytes_sent[(0, "input")] > 8 * s.length
    assert tr.phase_seconds["input"] > 0
    assert {(0, "input"), (SERVER, "input")} <= set(tr.party_seconds)
    summary = tr.summary()
    assert summary["bytes_up"]["0"] == tr.bytes_sent[(0, "input")] and summary["survivors"] == [0, 1, 2, 3]


def test_record_views_off_keeps_byte_counts() -> None:
    s = schema()
    _, tr = PlaintextAggregation(record_views=False).aggregate(s, contributions(s, 3))
    assert tr.views == {} and tr.total_bytes_received(SERVER) > 3 * 8 * s.length


# ----------------------------------------------------------------------------------------------------
# designated recipient
# ----------------------------------------------------------------------------------------------------


def test_designated_recipient_gets_the_sum() -> None:
    s = schema()
    contribs = contributions(s, 5)
    sums, tr = PlaintextAggregation().aggregate(s, contribs, recipient=2, dropouts=DropoutPlan({4: "input"}))
    check_sums(s, sums, reference(s, contribs, [0, 1, 2, 3]))
    assert sums.num_contributors == 4 and tr.recipient == 2 and tr.extra["delivered_to"] == 2
    delivered = [m for m in tr.view(2) if m.phase == "deliver"]
    assert len(delivered) == 1 and decode(delivered[0].payload, PlainDeliver).survivors == (0, 1, 2, 3)
    # documented: the plaintext server still saw every input
    assert len(tr.view(SERVER)) == 4


def test_recipient_dropout_and_bad_recipient() -> None:
    s = schema()
    contribs = contributions(s, 4)
    with pytest.raises(ThresholdError, match="designated recipient 1 dropped out") as exc:
        PlaintextAggregation().aggregate(s, contribs, recipient=1, dropouts=DropoutPlan({1: "deliver"}))
    assert exc.value.party == 1 and exc.value.phase == "deliver"
    with pytest.raises(ConfigError, match="recipient 9 is not an invited client"):
        PlaintextAggregation().aggregate(s, contribs, recipient=9)


# ----------------------------------------------------------------------------------------------------
# release rules through the protocol
# ----------------------------------------------------------------------------------------------------


def test_release_rules_apply() -> None:
    s = SumSchema(
        [
            BlockSpec("has", (3,), kind="count", bound=1),
            BlockSpec("stat", (3, 2), counted_by="has", min_contributors=2),
            BlockSpec("rare", (1,), min_contributors=3),
        ],
        max_clients=5,
        min_contributors=2,
    )
    contribs = {
        0: {"has": np.array([1, 1, 0]), "stat": np.ones((3, 2)), "rare": np.ones(1)},
        1: {"has": np.array([1, 0, 0]), "stat": np.ones((3, 2)), "rare": np.ones(1)},
    }
    sums, tr = PlaintextAggregation().aggregate(s, contribs)
    assert sums["stat"][0].tolist() == [2.0, 2.0] and torch.isnan(sums["stat"][1:]).all()
    assert sums.withheld_rows("stat").tolist() == [False, True, True]
    with pytest.raises(WithheldBlockError):
        sums["rare"]
    assert "rare" in tr.withheld
    with pytest.raises(ReleaseRefusedError, match="min_contributors=2"):
        PlaintextAggregation().aggregate(s, contribs, dropouts=DropoutPlan({1: "input"}))


# ----------------------------------------------------------------------------------------------------
# bad input and faults
# ----------------------------------------------------------------------------------------------------


def test_bad_local_input_excludes_that_client_only() -> None:
    s = schema()
    contribs = contributions(s, 4)
    contribs[1]["w"][0, 0] = np.nan
    contribs[2]["b"] = torch.zeros(6)
    sums, tr = PlaintextAggregation().aggregate(s, contribs)
    assert tr.survivors == (0, 3) and set(tr.excluded) == {1, 2}
    assert "EncodingError: [party 1, phase input] block 'w': 1 non-finite" in tr.excluded[1]
    assert "[party 2, phase input] block 'b': expected shape (5,), received shape (6,)" in tr.excluded[2]
    assert not [m for m in tr.view(SERVER) if m.sender in (1, 2)]  # nothing was sent
    check_sums(s, sums, reference(s, contribs, [0, 3]))


def test_argument_validation() -> None:
    s = schema(max_clients=3)
    proto = PlaintextAggregation()
    with pytest.raises(OverflowRiskError, match="max_clients=3"):
        proto.aggregate(s, contributions(s, 4))
    with pytest.raises(ConfigError, match="non-empty mapping"):
        proto.aggregate(s, {})
    with pytest.raises(ConfigError, match="client ids must be integers"):
        proto.aggregate(s, {-1: contributions(s, 1)[0]})
    with pytest.raises(ConfigError, match="SumSchema"):
        proto.aggregate("schema", contributions(s, 1))  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="missing for clients"):
        proto.aggregate(s, contributions(s, 2), context={0: b"a"})


def test_context_mismatch_is_excluded() -> None:
    s = schema()
    contribs = contributions(s, 4)
    ctx = {0: b"model-A", 1: b"model-A", 2: b"model-B", 3: b"model-A"}
    sums, tr = PlaintextAggregation().aggregate(s, contribs, context=ctx)
    assert tr.survivors == (0, 1, 3) and "different round context" in tr.excluded[2]
    check_sums(s, sums, reference(s, contribs, [0, 1, 3]))


def run_with(s: SumSchema, contribs: dict, interceptor, *, recipient=None):
    tr = Transcript(protocol="plaintext", invited=tuple(contribs))
    server = PlainServer(s, tuple(contribs), 0, recipient, tr)
    parties = {c: PlainClient(c, s, contribs[c], 0, b"") for c in contribs}
    Router(tr, interceptor=interceptor).run(server, parties)
    return server, parties, tr


def _tamper(target: int, how):
    def interceptor(rec: MessageRecord):
        if rec.sender == target and rec.receiver == SERVER:
            return how(rec.payload)
        return [rec.payload]

    return interceptor


def _out_of_bound(payload: bytes) -> list[bytes]:
    msg = decode(payload, PlainInput)
    x = msg.vector.view(np.float64).copy()
    x[0] = 1e9
    return [PlainInput(msg.session_id, msg.context_digest, msg.clip_counts, 64, x.view(np.uint64)).to_bytes()]


def _nan(payload: bytes) -> list[bytes]:
    msg = decode(payload, PlainInput)
    x = msg.vector.view(np.float64).copy()
    x[3] = np.nan
    return [PlainInput(msg.session_id, msg.context_digest, msg.clip_counts, 64, x.view(np.uint64)).to_bytes()]


def _other_session(payload: bytes) -> list[bytes]:
    msg = decode(payload, PlainInput)
    return [PlainInput(bytes(32), msg.context_digest, msg.clip_counts, 64, msg.vector).to_bytes()]


def _short(payload: bytes) -> list[bytes]:
    msg = decode(payload, PlainInput)
    return [PlainInput(msg.session_id, msg.context_digest, msg.clip_counts, 64, msg.vector[:-1]).to_bytes()]


def _noncount(payload: bytes) -> list[bytes]:
    msg = decode(payload, PlainInput)
    x = msg.vector.view(np.float64).copy()
    x[12] = 0.5  # block "n" is a count
    return [PlainInput(msg.session_id, msg.context_digest, msg.clip_counts, 64, x.view(np.uint64)).to_bytes()]


@pytest.mark.parametrize(
    ("how", "error", "match"),
    [
        (lambda p: [p[:-5]], "MalformedMessageError", "exceed the message"),
        (lambda p: [p[:20]], "MalformedMessageError", "truncated"),
        (lambda p: [p + b"\x00"], "MalformedMessageError", "trailing"),
        (lambda p: [b"XX" + p[2:]], "MalformedMessageError", "magic"),
        (lambda p: [p[:2] + b"\x07" + p[3:]], "MalformedMessageError", "version"),
        (lambda p: [p, p], "StageOrderError", "sent 2 inputs"),
        (_out_of_bound, "EncodingError", "block 'w' exceeds its bound 2"),
        (_nan, "EncodingError", "non-finite"),
        (_noncount, "EncodingError", "block 'n' is not a count"),
        (_short, "EncodingError", "length 18, expected 19"),
        (_other_session, "InconsistentViewError", "another session"),
    ],
)
def test_misbehaving_client_is_excluded_and_the_rest_is_exact(how, error: str, match: str) -> None:
    s = schema()
    contribs = contributions(s, 4)
    server, _, tr = run_with(s, contribs, _tamper(2, how))
    assert server.survivors == (0, 1, 3)
    assert tr.excluded[2].startswith(f"{error}: [party 2, phase input]") and match in tr.excluded[2]
    np.testing.assert_array_equal(server.total, reference(s, contribs, [0, 1, 3]))


def test_client_refuses_a_request_for_another_schema_or_a_replay() -> None:
    s = schema()
    other = schema(precision=2**-10)
    contribs = contributions(s, 3)

    def swap_schema(rec: MessageRecord):
        if rec.receiver == 1 and rec.phase == "input":
            req = decode(rec.payload, PlainInputRequest)
            fake = PlainInputRequest(
                req.protocol, req.round_index, req.invited, req.recipient, req.length, other.fingerprint()
            )
            return [fake.to_bytes()]
        return [rec.payload]

    server, _, tr = run_with(s, contribs, swap_schema)
    assert server.survivors == (0, 2) and "InconsistentViewError: [party 1, phase input]" in tr.excluded[1]

    def replay(rec: MessageRecord):
        return [rec.payload, rec.payload] if rec.receiver == 0 and rec.phase == "input" else [rec.payload]

    server, _, tr = run_with(s, contribs, replay)
    # the first request is answered, the replay is refused: the client is then treated as aborted,
    # but its already-sent input is valid and counted
    assert "StageOrderError" in tr.excluded[0] and server.survivors == (0, 1, 2)

    c = PlainClient(0, s, contribs[0], 0, b"")
    with pytest.raises(MalformedMessageError, match=r"\[party 0, phase input\]"):
        c.handle(b"garbage")


def test_recipient_rejects_garbled_delivery() -> None:
    s = schema()
    contribs = contributions(s, 3)

    def garble(rec: MessageRecord):
        return [rec.payload[:-3]] if rec.phase == "deliver" else [rec.payload]

    _, parties, tr = run_with(s, contribs, garble, recipient=0)
    assert parties[0].received is None and "MalformedMessageError: [party 0, phase deliver]" in tr.excluded[0]


# ----------------------------------------------------------------------------------------------------
# messages
# ----------------------------------------------------------------------------------------------------


def test_messages_round_trip() -> None:
    req = PlainInputRequest("plaintext", 5, (0, 3, 9), None, 19, bytes(range(32)))
    assert decode(req.to_bytes(), PlainInputRequest) == req
    inp = PlainInput(bytes(32), bytes(32), (1, 0, 2), 64, np.arange(19, dtype=np.float64).view(np.uint64))
    back = decode(inp.to_bytes(), PlainInput)
    assert back == inp and back.vector.view(np.float64).tolist() == list(range(19))
    deliver = PlainDeliver(bytes(32), (0, 1), (0, 0, 0), 64, np.zeros(19, dtype=np.uint64))
    assert decode(deliver.to_bytes()) == deliver
    with pytest.raises(MalformedMessageError, match="unexpected message PlainDeliver"):
        decode(deliver.to_bytes(), PlainInput)


@given(data=st.binary(max_size=300))
@HSETTINGS
def test_decoders_raise_only_typed_errors(data: bytes) -> None:
    for expected in (PlainInputRequest, PlainInput, PlainDeliver):
        for payload in (data, b"SF" + bytes([WIRE_VERSION, expected.TYPE]) + data):
            with contextlib.suppress(MalformedMessageError):
                decode(payload, expected)


def test_stages_are_public() -> None:
    assert PlaintextAggregation.stages == STAGES == ("input", "deliver")
    assert PlaintextAggregation.input_phase == "input"
