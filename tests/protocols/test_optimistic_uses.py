"""Optimistic resumed uses (``optimistic_uses``): one round trip a sum, no self masks, all members or nothing."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import securefgl
from securefgl.errors import ConfigError, ThresholdError
from securefgl.protocols import get_protocol
from securefgl.protocols._secaggplus_resume import OptimisticInput, ResumedInput
from securefgl.protocols._secaggplus_session import ClipLayout
from securefgl.protocols.base import SERVER, MessageRecord
from securefgl.protocols.encoding import BlockSpec, SumSchema
from securefgl.protocols.messages import Abort, ResumeRequest, decode
from securefgl.protocols.secaggplus import SecAggPlus, SecAggPlusClient

SCHEMA = SumSchema(
    [BlockSpec("w", (64,), bound=1.0), BlockSpec("n", (2,), kind="count", bound=9)],
    max_clients=256,
    precision=2.0**-12,
)


def _contributions(n: int, seed: int) -> dict[int, dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    return {c: {"w": rng.uniform(-1, 1, 64), "n": rng.integers(0, 10, 2).astype(np.int64)} for c in range(n)}


def _check_sum(sums, contributions) -> None:
    w = sum(c["w"] for c in contributions.values())
    n = sum(c["n"] for c in contributions.values())
    bound = SCHEMA.error_bound(len(contributions))["w"]
    assert np.abs(np.asarray(sums["w"], dtype=np.float64) - w).max() <= bound
    assert np.array_equal(np.asarray(sums["n"]).astype(np.int64), n)


def _phases(tr) -> set[str]:
    return {phase for (_, phase) in tr.bytes_sent}


@pytest.mark.parametrize(
    ("name", "n", "options", "recipient"),
    [
        ("secagg", 7, {}, None),
        ("secagg+", 40, {}, None),
        ("secagg+", 40, {"adversary": "semi-malicious"}, None),
        ("secagg", 6, {}, 4),
    ],
)
def test_optimistic_uses_are_exact_one_round_trip_sums(name, n, options, recipient):
    """After use 0 (a full key agreement) every use is the resume stage alone (then the delivery to a
    designated recipient): exact sums, each client sending its masked vector and nothing else."""
    proto = get_protocol(name, session_uses=4, optimistic_uses=True, **options)
    uses, up = [], []
    for i in range(5):
        contributions = _contributions(n, i)
        sums, tr = proto.aggregate(SCHEMA, contributions, round_index=i, recipient=recipient)
        _check_sum(sums, contributions)
        uses.append(tr.extra["session_use"])
        up.append(tr.total_bytes_sent(0))
        if tr.extra["session_use"] > 0:
            assert tr.extra["optimistic_use"]
            assert _phases(tr) == ({"resume"} if recipient is None else {"resume", "deliver"})
            for m in tr.view(SERVER):
                if m.sender != SERVER:
                    assert isinstance(decode(m.payload, (OptimisticInput,)), OptimisticInput)
    assert uses == [0, 1, 2, 3, 0]
    layout = ClipLayout(SCHEMA)
    vector_bytes = layout.length * -(-SCHEMA.ring_bits // 8)
    assert up[1] < vector_bytes + 100 < up[0]  # the vector, a use id and framing: no shares, no commitment


def test_a_missing_input_aborts_the_use_and_nothing_is_asked_of_anyone():
    """Client 3's input is lost: its neighbours' masks with it cannot be removed without revealing its keys,
    so the server releases nothing, sends no further request, and the next sum agrees on fresh keys."""

    def silence(record: MessageRecord):
        return [] if record.sender == 3 and record.phase == "resume" else [record.payload]

    proto = SecAggPlus(session_uses=5, optimistic_uses=True)
    proto.aggregate(SCHEMA, _contributions(12, 0))
    proto.interceptor = silence
    with pytest.raises(
        ThresholdError, match=r"optimistic use: no valid input from client\(s\) \[3\]"
    ) as info:
        proto.aggregate(SCHEMA, _contributions(12, 1), round_index=1)
    tr = info.value.transcript
    assert _phases(tr) == {"resume"}  # no unmask request went out
    proto.interceptor = None
    contributions = _contributions(12, 2)
    sums, tr = proto.aggregate(SCHEMA, contributions, round_index=2)
    assert tr.extra["session_use"] == 0
    _check_sum(sums, contributions)


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.sets(st.integers(0, 6), max_size=3), st.integers(0, 2**31))
def test_an_optimistic_use_releases_all_inputs_or_nothing(silent, seed):
    def drop(record: MessageRecord):
        return [] if record.sender in silent and record.phase == "resume" else [record.payload]

    proto = SecAggPlus(graph="complete", session_uses=5, optimistic_uses=True)
    proto.aggregate(SCHEMA, _contributions(7, seed))
    proto.interceptor = drop
    contributions = _contributions(7, seed + 1)
    if silent:
        with pytest.raises(ThresholdError):
            proto.aggregate(SCHEMA, contributions, round_index=1)
    else:
        sums, tr = proto.aggregate(SCHEMA, contributions, round_index=1)
        assert tr.extra["session_use"] == 1 and tr.survivors == tuple(range(7))
        _check_sum(sums, contributions)


def test_a_client_of_an_optimistic_use_answers_nothing_after_its_input():
    """A server that asks for unmasking after an optimistic input (to remove a 'dropped' client's masks with
    keys its peers would reveal) is refused: the client finished with its input."""
    proto = SecAggPlus(graph="complete", session_uses=4, optimistic_uses=True)
    proto.aggregate(SCHEMA, _contributions(5, 0))
    kept = proto._sessions[(tuple(range(5)), None)]
    client = SecAggPlusClient(
        0,
        SCHEMA,
        _contributions(5, 1)[0],
        config=proto.config,
        protocol_name="secagg",
        round_index=1,
        recipient=None,
        context=b"",
        session=kept.clients[0],
    )
    req = ResumeRequest(
        session_id=kept.server.session_id,
        use=1,
        protocol="secagg",
        round_index=1,
        ring_bits=SCHEMA.ring_bits,
        length=ClipLayout(SCHEMA).length,
        prg="aes256-ctr",
        recipient=None,
        schema_fingerprint=SCHEMA.fingerprint(),
    )
    reply = decode(client.handle(req.to_bytes()), (OptimisticInput, ResumedInput, Abort))
    assert isinstance(reply, OptimisticInput) and client.stage == "done"
    assert client.session is not None and client.session.use == 1  # kept for the next use
    again = decode(client.handle(req.to_bytes()), Abort)
    assert again.reason == "StageOrderError"


def test_clients_configured_differently_never_share_a_session():
    """The session id binds the mode: a client with optimistic uses computes another id than one without, so
    at use 0 the server's vote excludes it before any input (a member whose input carries no self mask must
    never have peers that would reveal its mask-key shares)."""
    proto = SecAggPlus(graph="complete", session_uses=4)
    odd = SecAggPlus(graph="complete", session_uses=4, optimistic_uses=True)
    contributions = _contributions(6, 0)
    parties = proto._clients(
        SCHEMA, contributions, tuple(range(6)), 0, None, {c: b"" for c in range(6)}, (None, None), None
    )
    parties[5] = odd._clients(
        SCHEMA, contributions, tuple(range(6)), 0, None, {c: b"" for c in range(6)}, (None, None), None
    )[5]
    server = proto.server_class(
        SCHEMA, tuple(range(6)), config=proto.config, protocol_name=proto.name, round_index=0, recipient=None
    )
    from securefgl.protocols.base import Transcript
    from securefgl.protocols.router import Router

    tr = Transcript(protocol=proto.name, round_index=0, invited=tuple(range(6)), recipient=SERVER)
    Router(tr).run(server, parties)
    assert 5 not in server.state.u2 and "different session id" in server.state.excluded[5]
    assert "masked_input" not in {phase for (c, phase) in tr.bytes_sent if c == 5}


def test_optimistic_uses_need_resumed_sessions():
    with pytest.raises(ConfigError, match="optimistic_uses .* needs session_uses >= 2, got session_uses=1"):
        get_protocol("secagg+", optimistic_uses=True)
    with pytest.raises(ConfigError, match="optimistic_uses must be a bool"):
        get_protocol("secagg+", session_uses=2, optimistic_uses="yes")


def test_a_run_with_optimistic_uses_is_the_plaintext_run():
    """Engine level: uploads on the grid, so a run whose sums after the first key agreement are optimistic
    uses trains and scores exactly as the plaintext run, with less uploaded per round."""
    cfg = {
        "dataset": {"name": "csbm", "csbm": {"num_nodes": 400, "num_classes": 3, "num_features": 8}},
        "partition": {"method": "louvain", "clients": 5, "cache": False},
        "model": {"hidden": 8},
        "train": {"rounds": 3, "local_epochs": 1},
        "output": {"save": False},
    }
    plain = securefgl.run({**cfg, "protocol": {"name": "plaintext"}}).seeds[0]
    resumed = securefgl.run({**cfg, "protocol": {"name": "secagg+", "options": {"session_uses": 10}}}).seeds[
        0
    ]
    options = {"session_uses": 10, "optimistic_uses": True}
    optimistic = securefgl.run({**cfg, "protocol": {"name": "secagg+", "options": options}}).seeds[0]
    assert [r.metrics for r in optimistic.rounds] == [r.metrics for r in plain.rounds]
    assert [r.loss for r in optimistic.rounds] == [r.loss for r in plain.rounds]
    up = [
        (sum(a.bytes_up.values()), sum(b.bytes_up.values()))
        for a, b in zip(resumed.rounds, optimistic.rounds, strict=True)
    ]
    assert up[0][0] == up[0][1] and all(b < a for a, b in up[1:])
