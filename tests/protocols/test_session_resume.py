"""Resumed SecAgg/SecAgg+ sessions (``session_uses > 1``): one key agreement, several exact sums.

Everything runs the real parties over the in-process router with real X25519 keys; faults are injected by
the router's interceptor or by feeding a client a request it must refuse.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import securefgl
from securefgl.errors import ConfigError, InvalidMessage, ThresholdError
from securefgl.protocols import get_protocol
from securefgl.protocols._channel import PeerChannel
from securefgl.protocols._secaggplus_resume import OptimisticInput, ResumedInput, use_id_for
from securefgl.protocols._secaggplus_session import hkdf_extract, pair_key, pair_keys
from securefgl.protocols.base import SERVER, DropoutPlan, MessageRecord
from securefgl.protocols.encoding import BlockSpec, SumSchema
from securefgl.protocols.messages import Abort, MaskedInput, ResumeRequest, decode
from securefgl.protocols.secaggplus import ClipLayout, SecAggPlus, SecAggPlusClient, SecAggPlusServer

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
    assert (
        np.abs(np.asarray(sums["w"], dtype=np.float64) - w).max()
        <= SCHEMA.error_bound(len(contributions))["w"]
    )
    assert np.array_equal(np.asarray(sums["n"]).astype(np.int64), n)


def _phases(tr) -> set[str]:
    return {phase for (_, phase) in tr.bytes_sent}


@pytest.mark.parametrize(
    ("name", "n", "options"),
    [("secagg", 7, {}), ("secagg+", 40, {}), ("secagg+", 40, {"adversary": "semi-malicious"})],
)
def test_resumed_uses_are_exact_and_skip_the_key_agreement(name, n, options):
    proto = get_protocol(name, session_uses=3, **options)
    uses, up = [], []
    for i in range(5):
        contributions = _contributions(n, i)
        sums, tr = proto.aggregate(SCHEMA, contributions, round_index=i // 2, context=b"model %d" % i)
        _check_sum(sums, contributions)
        uses.append(tr.extra["session_use"])
        up.append(tr.total_bytes_sent(0))
        if tr.extra["session_use"] == 0:
            assert {"advertise_keys", "share_keys"} <= _phases(tr) and "resume" not in _phases(tr)
        else:
            assert "resume" in _phases(tr) and not {"advertise_keys", "share_keys"} & _phases(tr)
    assert uses == [0, 1, 2, 0, 1]  # session_uses=3: a fresh key agreement every third sum
    assert up[1] < up[0]  # no public keys, and one share per neighbour instead of two


def test_every_use_has_its_own_id_and_masks():
    """Identical inputs in two uses give unrelated masked vectors; the use ids differ with the use and the
    context, so every key derived from them (pairwise masks, channels, self mask) differs too."""
    proto = SecAggPlus(graph="complete", session_uses=4)
    contributions = _contributions(6, 0)
    masked, ids = [], []
    for _ in range(2):
        _, tr = proto.aggregate(SCHEMA, contributions, round_index=0)
        ids.append(tr.session_id)
        (mine,) = [m for m in tr.view(SERVER) if m.sender == 0 and m.phase in ("masked_input", "resume")]
        masked.append(decode(mine.payload, (MaskedInput, ResumedInput)).vector.astype(np.int64))
    assert ids[0] != ids[1]
    assert np.mean(masked[0] != masked[1]) > 0.95
    req = ResumeRequest(
        session_id=bytes(32),
        use=1,
        protocol="secagg",
        round_index=0,
        ring_bits=32,
        length=10,
        prg="aes256-ctr",
        recipient=None,
        schema_fingerprint=b"f",
    )
    later = ResumeRequest(**{**{k: getattr(req, k) for k in req.FIELDS}, "use": 2})
    assert len({use_id_for(req, b""), use_id_for(req, b"other model"), use_id_for(later, b"")}) == 3


def _kept(proto: SecAggPlus, n: int):
    proto.aggregate(SCHEMA, _contributions(n, 0), round_index=0)
    return proto._sessions[(tuple(range(n)), None)]


def _resume_request(kept, use: int, round_index: int = 1) -> ResumeRequest:
    return ResumeRequest(
        session_id=kept.server.session_id,
        use=use,
        protocol="secagg",
        round_index=round_index,
        ring_bits=SCHEMA.ring_bits,
        length=ClipLayout(SCHEMA).length,
        prg="aes256-ctr",
        recipient=None,
        schema_fingerprint=SCHEMA.fingerprint(),
    )


def _client(proto: SecAggPlus, session, round_index: int = 1) -> SecAggPlusClient:
    return SecAggPlusClient(
        0,
        SCHEMA,
        _contributions(5, 1)[0],
        config=proto.config,
        protocol_name="secagg",
        round_index=round_index,
        recipient=None,
        context=b"",
        session=session,
    )


def test_a_client_answers_each_use_once():
    """The use counter: a replayed use, a use below the last one or one past session_uses is refused, and a
    refusal wipes the session (a server that tried to reuse masks gets no further use of it)."""
    proto = get_protocol("secagg", session_uses=4)
    kept = _kept(proto, 5)
    session = kept.clients[0]
    first = _client(proto, session).handle(_resume_request(kept, 2).to_bytes())
    assert isinstance(decode(first, (ResumedInput, Abort)), ResumedInput) and session.use == 2
    for use in (2, 1, 4):
        again = _client(proto, session).handle(_resume_request(kept, use).to_bytes())
        reply = decode(again, (ResumedInput, Abort))
        assert isinstance(reply, Abort) and reply.reason == "RequestRefusedError"
        assert session.key_shares == {} and session.mask_prk == {}  # wiped on the first refusal


def test_a_resume_request_with_other_parameters_is_refused_and_ends_the_session():
    proto = get_protocol("secagg", session_uses=4)
    kept = _kept(proto, 5)
    session = kept.clients[0]
    client = _client(proto, session, round_index=2)
    reply = decode(client.handle(_resume_request(kept, 1).to_bytes()), Abort)
    assert reply.reason == "InconsistentViewError" and "round 1 != 2" in str(client.error)
    assert session.key_shares == {} and session.channel_sk is None and client.session is None


def test_a_dropout_in_a_resumed_use_is_unmasked_and_ends_the_session():
    """Client 3's reply to the resume request of use 1 is lost: its neighbours masked with it, so its pairwise
    masks are removed with the mask-key shares they hold since use 0; the sum over the others is exact, and
    the next sum agrees on fresh keys."""

    def silence(record: MessageRecord):
        return [] if record.sender == 3 and record.phase == "resume" else [record.payload]

    n = 40
    proto = SecAggPlus(session_uses=5)
    proto.aggregate(SCHEMA, _contributions(n, 0))
    proto.interceptor = silence
    contributions = _contributions(n, 1)
    sums, tr = proto.aggregate(SCHEMA, contributions, round_index=1)
    assert tr.extra["session_use"] == 1 and 3 not in tr.survivors and tr.extra["dead_after_sharing"] == [3]
    _check_sum(sums, {c: v for c, v in contributions.items() if c != 3})
    proto.interceptor = None
    _, tr = proto.aggregate(SCHEMA, _contributions(n, 2), round_index=2)
    assert tr.extra["session_use"] == 0


def test_a_planned_dropout_starts_a_fresh_session():
    proto = SecAggPlus(graph="complete", session_uses=5)
    proto.aggregate(SCHEMA, _contributions(6, 0))
    contributions = _contributions(6, 1)
    sums, tr = proto.aggregate(SCHEMA, contributions, dropouts=DropoutPlan({2: "masked_input"}))
    assert tr.extra["session_use"] == 0
    _check_sum(sums, {c: v for c, v in contributions.items() if c != 2})


def test_designated_recipient_sums_resume():
    proto = SecAggPlus(graph="complete", session_uses=3)
    for i in range(3):
        contributions = _contributions(6, i)
        sums, tr = proto.aggregate(SCHEMA, contributions, recipient=4, round_index=i)
        _check_sum(sums, contributions)
        assert tr.extra["session_use"] == i and tr.extra["delivered_to"] == 4


def test_session_uses_is_validated_and_a_session_fits_only_its_clients():
    with pytest.raises(ConfigError, match="session_uses must be an integer >= 1"):
        get_protocol("secagg+", session_uses=0)
    proto = SecAggPlus(graph="complete", session_uses=2)
    kept = _kept(proto, 5)
    with pytest.raises(ConfigError, match="cannot resume"):
        SecAggPlusServer(
            SCHEMA,
            range(6),
            config=proto.config,
            protocol_name="secagg+",
            round_index=1,
            recipient=None,
            session=kept.server,
        )
    with pytest.raises(ConfigError, match="cannot resume the session of client 0"):
        SecAggPlusClient(
            1,
            SCHEMA,
            {},
            config=proto.config,
            protocol_name="secagg+",
            round_index=1,
            recipient=None,
            context=b"",
            session=kept.clients[0],
        )


#: A small engine run (uploads on the grid: every protocol trains the same model).
RUN_CONFIG = {
    "dataset": {"name": "csbm", "csbm": {"num_nodes": 400, "num_classes": 3, "num_features": 8}},
    "partition": {"method": "louvain", "clients": 5, "cache": False},
    "model": {"hidden": 8},
    "train": {"rounds": 3, "local_epochs": 1},
    "output": {"save": False},
}


def test_a_run_with_resumed_sessions_is_the_plaintext_run():
    """Engine level: uploads on the grid, so a SecAgg+ run whose training and evaluation sums share one key
    agreement per ten sums trains and scores exactly as the plaintext run."""
    cfg = RUN_CONFIG
    plain = securefgl.run({**cfg, "protocol": {"name": "plaintext"}}).seeds[0]
    fresh = securefgl.run({**cfg, "protocol": {"name": "secagg+"}}).seeds[0]
    options = {"session_uses": 10}
    resumed = securefgl.run({**cfg, "protocol": {"name": "secagg+", "options": options}}).seeds[0]
    assert [r.metrics for r in resumed.rounds] == [r.metrics for r in plain.rounds]
    assert [r.loss for r in resumed.rounds] == [r.loss for r in plain.rounds]
    # the first round's training sum agrees on keys either way; every later sum is a resumed use
    up = [
        (sum(f.bytes_up.values()), sum(r.bytes_up.values()))
        for f, r in zip(fresh.rounds, resumed.rounds, strict=True)
    ]
    assert up[0][0] == up[0][1] and all(r < f for f, r in up[1:])


def test_expanded_pair_keys_equal_hkdf_of_the_shared_secret():
    """A resumed use expands its mask keys from kept HKDF-Extract keys: bit-identical to the full HKDF
    the server uses when it unmasks a dropped client."""
    rng = np.random.default_rng(3)
    shared = {v: rng.bytes(32) for v in (0, 2, 9, 2**40)}
    sid = rng.bytes(32)
    got = pair_keys({v: hkdf_extract(s) for v, s in shared.items()}, sid, 12, 7)
    assert got == {v: pair_key(s, sid, 12, 7, v) for v, s in shared.items()}


def test_a_share_sealed_for_one_use_does_not_open_in_another():
    rng = np.random.default_rng(4)
    secret, sid = rng.bytes(32), rng.bytes(32)
    alice = PeerChannel(secret, 1, 2, session_id=sid, round_index=0, purpose="secagg-shares")
    bob = PeerChannel(secret, 2, 1, session_id=sid, round_index=0, purpose="secagg-shares")
    blob = alice.seal(b"share", bind=b"use 1")
    assert bob.open(blob, bind=b"use 1") == b"share"
    for other in (b"use 2", b""):
        with pytest.raises(InvalidMessage):
            bob.open(blob, bind=other)


def test_a_forged_seed_share_makes_its_receiver_refuse_and_the_others_still_unmask():
    """Client 5 garbles its seed-share ciphertext to client 0 in use 1: client 0 cannot open it and answers no
    unmask request (it reveals nothing); every seed keeps enough other holders, so the sum is exact, and the
    session ends."""

    def garble(record: MessageRecord):
        if record.sender != 5 or record.phase != "resume":
            return [record.payload]
        msg = decode(record.payload, ResumedInput)
        env = tuple((d, blob[:-1] + bytes([blob[-1] ^ 1]) if d == 0 else blob) for d, blob in msg.envelopes)
        fields = {k: getattr(msg, k) for k in msg.FIELDS}
        return [ResumedInput(**{**fields, "envelopes": env}).to_bytes()]

    proto = SecAggPlus(graph="complete", session_uses=5)
    proto.aggregate(SCHEMA, _contributions(8, 0))
    proto.interceptor = garble
    contributions = _contributions(8, 1)
    sums, tr = proto.aggregate(SCHEMA, contributions, round_index=1)
    assert tr.extra["session_use"] == 1 and "InconsistentViewError" in tr.excluded[0]
    _check_sum(sums, contributions)  # client 0's input is in the sum: only its unmask answer is missing
    proto.interceptor = None
    assert proto.aggregate(SCHEMA, _contributions(8, 2))[1].extra["session_use"] == 0


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.sets(st.integers(0, 6), max_size=4), st.integers(0, 2**31))
def test_any_silence_in_a_resumed_use_gives_the_survivors_sum_or_a_clean_abort(silent, seed):
    """Clients that never answer a resume request are dropped after sharing (use 0's key shares unmask their
    pairwise masks): the sum over the others is exact while ``t`` = 4 of 7 survive, else nothing is released;
    either way the next sum agrees on fresh keys unless nobody was silent."""

    def drop(record: MessageRecord):
        return [] if record.sender in silent and record.phase == "resume" else [record.payload]

    proto = SecAggPlus(graph="complete", session_uses=5)
    proto.aggregate(SCHEMA, _contributions(7, seed))
    proto.interceptor = drop
    contributions = _contributions(7, seed + 1)
    if 7 - len(silent) >= proto.parameters(7).threshold:
        sums, tr = proto.aggregate(SCHEMA, contributions, round_index=1)
        assert tr.extra["session_use"] == 1 and set(tr.survivors) == set(range(7)) - silent
        _check_sum(sums, {c: v for c, v in contributions.items() if c not in silent})
    else:
        with pytest.raises(ThresholdError):
            proto.aggregate(SCHEMA, contributions, round_index=1)
    proto.interceptor = None
    expected = 2 if not silent else 0
    assert (
        proto.aggregate(SCHEMA, _contributions(7, seed + 2), round_index=2)[1].extra["session_use"]
        == expected
    )


# -- optimistic uses (optimistic_uses): one round trip a sum, no self masks, all members or nothing -------


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
    cfg = RUN_CONFIG
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
