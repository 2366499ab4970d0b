"""Tests of SecAgg+ (securefgl.protocols.secaggplus) on random Harary graphs.

The outcome of every dropout pattern is predicted from the session's graph (rebuilt from the session id
in the transcript) and checked against what the protocol did.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from securefgl.errors import ConfigError, RequestRefusedError, ThresholdError
from securefgl.protocols import get_protocol
from securefgl.protocols._harary import GraphParameters
from securefgl.protocols.base import SERVER, DropoutPlan, MessageRecord
from securefgl.protocols.encoding import BlockSpec, SumSchema
from securefgl.protocols.messages import Abort, MaskedInputRequest, ShareKeys, Unmask, UnmaskRequest, decode
from securefgl.protocols.secaggplus import (
    SecAggPlus,
    SecAggPlusClient,
    SecAggPlusServer,
    Stage,
    resolve_graph,
    session_graph,
)

STAGES = ("advertise_keys", "share_keys", "masked_input", "unmasking")


def schema_and_contributions(n: int, seed: int = 0) -> tuple[SumSchema, dict[int, dict[str, np.ndarray]]]:
    schema = SumSchema(
        [BlockSpec("w", (5,), bound=1.0), BlockSpec("n", (2,), kind="count", bound=9)],
        max_clients=256,
        precision=2.0**-12,
    )
    rng = np.random.default_rng(seed)
    contrib = {c: {"w": rng.integers(-4096, 4097, 5) / 4096.0, "n": rng.integers(0, 10, 2)} for c in range(n)}
    return schema, contrib


def plain(contrib: Mapping[int, Mapping[str, np.ndarray]], clients: Any) -> dict[str, np.ndarray]:
    clients = list(clients)
    return {k: sum(np.asarray(contrib[c][k], dtype=np.float64) for c in clients) for k in ("w", "n")}


def check_sum(sums: Any, contrib: Mapping[int, Any], clients: Any) -> None:
    exp = plain(contrib, clients)
    assert np.array_equal(sums["w"].double().numpy(), exp["w"])
    assert np.array_equal(sums["n"].numpy(), exp["n"])


def predict(
    n: int, params: GraphParameters, plan: Mapping[int, str], session_id: bytes
) -> tuple[bool, set[int]]:
    """What SecAgg+ must do with this dropout plan on this session's graph."""
    t = params.threshold
    u1 = [c for c in range(n) if plan.get(c) != "advertise_keys"]
    if len(u1) < t:
        return False, set()
    assert session_id, "the session id exists once keys were shared"
    g = session_graph(session_id, u1, params.degree)
    nb = {c: set(g.neighbours(c)) for c in u1}
    u2 = {c for c in u1 if plan.get(c) not in ("advertise_keys", "share_keys")}
    if any(len(nb[c] & u2) < t for c in u2):
        return False, set()
    u3 = {c for c in u2 if plan.get(c) != "masked_input"}
    dead = u2 - u3
    if len(u3) < t or any(len(nb[u] & u3) < t for u in u3):
        return False, set()
    if any(nb[v] & u3 and len(nb[v] & u3) < t for v in dead):
        return False, set()
    responders = {c for c in u3 if plan.get(c) != "unmasking"}
    if any(len(nb[u] & responders) < t for u in u3):
        return False, set()
    if any(nb[v] & u3 and len(nb[v] & responders) < t for v in dead):
        return False, set()
    return True, u3


def run_and_check(proto: SecAggPlus, n: int, plan: Mapping[int, str], seed: int = 0) -> bool:
    schema, contrib = schema_and_contributions(n, seed)
    params = proto.parameters(n)
    try:
        sums, tr = proto.aggregate(schema, contrib, dropouts=DropoutPlan(dict(plan)))
    except ThresholdError as exc:
        tr = exc.transcript  # type: ignore[attr-defined]
        ok, _ = predict(n, params, plan, tr.session_id)
        assert not ok, f"aborted although the graph allowed the plan {plan}: {exc}"
        return False
    ok, survivors = predict(n, params, plan, tr.session_id)
    assert ok, f"succeeded although the graph forbids the plan {plan}"
    assert set(tr.survivors) == survivors
    check_sum(sums, contrib, sorted(survivors))
    return True


# -- parameters and graph --------------------------------------------------------------------------------


def test_parameters_come_from_the_finder_and_small_n_uses_the_complete_graph() -> None:
    p = SecAggPlus()
    assert p.parameters(10).complete and p.parameters(31).complete
    big = p.parameters(50)
    assert not big.complete and big.degree % 2 == 0 and big.degree < 49
    assert p.parameters(500) == GraphParameters(500, 32, 17, False)  # finder at 10 % dropout, 5 % corrupt
    assert SecAggPlus(complete_below=0).parameters(10) == GraphParameters(10, 2, 2, False)
    assert SecAggPlus(adversary="semi-malicious").parameters(1000).threshold > p.parameters(1000).threshold
    assert SecAggPlus(degree=6, threshold=0.75).parameters(40) == GraphParameters(40, 6, 6, False)
    assert SecAggPlus(degree=6).parameters(40).threshold == 4  # a majority of the 7-neighbourhood
    with pytest.raises(ConfigError, match="even"):
        SecAggPlus(degree=5)
    with pytest.raises(ConfigError, match="complete_below"):
        SecAggPlus(complete_below=-1)
    assert isinstance(get_protocol("SecAgg_Plus"), SecAggPlus)


def test_harary_run_shares_and_masks_only_with_neighbours() -> None:
    n = 40
    proto = SecAggPlus()
    params = proto.parameters(n)
    k = params.degree
    schema, contrib = schema_and_contributions(n)
    sums, tr = proto.aggregate(schema, contrib)
    check_sum(sums, contrib, range(n))
    assert tr.extra["graph"] == "harary" and tr.extra["degree"] == k
    g = session_graph(tr.session_id, range(n), k)
    for rec in tr.view(SERVER):
        if rec.phase == "share_keys":
            msg = decode(rec.payload, ShareKeys)
            assert {d for d, _ in msg.envelopes} == set(g.neighbours(rec.sender)) - {rec.sender}
    for c in (0, 17):
        (req,) = [r for r in tr.view(c) if r.phase == "masked_input"]
        assert len(decode(req.payload, MaskedInputRequest).envelopes) == k
    # the client does k + 1 mask expansions, not n
    assert tr.extra["client_masked_input_seconds"]["expansions"]["max"] == k + 1


def test_client_cost_does_not_grow_with_n_at_fixed_degree() -> None:
    up = {}
    for n in (24, 72):
        schema, contrib = schema_and_contributions(n)
        _, tr = SecAggPlus(degree=6, complete_below=0).aggregate(schema, contrib)
        up[n] = {ph: tr.bytes_sent[(3, ph)] for ph in ("share_keys", "masked_input", "unmasking")}
    assert up[24] == up[72]  # uploads are O(k + d), independent of n


# -- dropouts --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("stage", STAGES)
def test_n50_dropouts_sampled(stage: str) -> None:
    proto = SecAggPlus()
    t = proto.parameters(50).threshold
    rng = np.random.default_rng(hash(stage) % 2**32)
    outcomes = []
    for count in (3, 10, 50 - t + 1):
        plan = {int(c): stage for c in rng.choice(50, size=count, replace=False)}
        outcomes.append(run_and_check(proto, 50, plan, seed=count))
    assert outcomes[0] and not outcomes[-1]


@pytest.mark.slow
@pytest.mark.parametrize("stage", STAGES)
def test_n50_every_dropout_count(stage: str) -> None:
    proto = SecAggPlus()
    t = proto.parameters(50).threshold
    rng = np.random.default_rng(0)
    outcomes = []
    for count in range(0, 50 - t + 2):
        plan = {int(c): stage for c in rng.choice(50, size=count, replace=False)}
        outcomes.append(run_and_check(proto, 50, plan, seed=count))
    assert outcomes[0] and not outcomes[-1]


@pytest.mark.parametrize("n", [3, 5, 10])
@pytest.mark.parametrize("stage", STAGES)
def test_small_n_harary_every_count(n: int, stage: str) -> None:
    proto = SecAggPlus(complete_below=0, dropout_rate=0.3, corrupt_rate=0.0)
    t = proto.parameters(n).threshold
    rng = np.random.default_rng(n)
    for count in range(0, n - t + 2):
        plan = {int(c): stage for c in rng.choice(n, size=count, replace=False)}
        run_and_check(proto, n, plan, seed=count)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(n=st.integers(8, 20), data=st.data())
def test_random_dropout_patterns_on_harary_graphs(n: int, data: st.DataObject) -> None:
    plan = data.draw(st.dictionaries(st.integers(0, n - 1), st.sampled_from(STAGES), max_size=n // 2))
    run_and_check(SecAggPlus(degree=4, threshold=3, complete_below=0), n, plan, seed=n)


# -- refusals and faults ---------------------------------------------------------------------------------


def test_unmask_request_naming_a_non_neighbour_is_refused() -> None:
    n = 20
    proto = SecAggPlus(degree=4, threshold=3, complete_below=0)
    schema, contrib = schema_and_contributions(n)
    server = SecAggPlusServer(
        schema, range(n), config=proto.config, protocol_name=proto.name, round_index=0, recipient=None
    )
    parties = {
        c: SecAggPlusClient(c, schema, contrib[c], config=proto.config, protocol_name=proto.name,
                            round_index=0, recipient=None, context=b"")
        for c in range(n)
    }  # fmt: skip
    out = server.start()
    while out.stage != Stage.UNMASKING.value:
        replies = [(c, parties[c].handle(p)) for c, p in out.messages.items()]
        out = server.handle(out.stage, [(c, r) for c, r in replies if r is not None])  # type: ignore[assignment]
    assert server.state.graph is not None
    nb = server.state.graph.neighbours(0)
    stranger = next(c for c in range(n) if c not in nb)
    req = decode(out.messages[0], UnmaskRequest)
    evil = UnmaskRequest(req.session_id, req.alive, (stranger,)).to_bytes()  # the s_sk share of a stranger
    reply = decode(parties[0].handle(evil))
    assert isinstance(reply, Abort) and isinstance(parties[0].error, RequestRefusedError)
    # an honest request to another client is answered with exactly its neighbours' shares
    ok = decode(parties[1].handle(out.messages[1]), Unmask)
    assert set(ok.alive) == set(server.state.graph.neighbours(1))


def test_bad_share_in_a_harary_neighbourhood_excludes_its_receiver() -> None:
    n = 30
    proto_kw = dict(degree=8, threshold=4, complete_below=0)
    schema, contrib = schema_and_contributions(n)
    culprit = 5

    def fault(rec: MessageRecord) -> list[bytes]:
        if rec.sender == culprit and rec.phase == "share_keys":
            msg = decode(rec.payload, ShareKeys)
            d0, c0 = msg.envelopes[0]
            env = ((d0, c0[:-1] + bytes([c0[-1] ^ 0x80])), *msg.envelopes[1:])
            return [ShareKeys(msg.session_id, msg.seed_commitment, env).to_bytes()]
        return [rec.payload]

    victim: list[int] = []

    def fault_and_note(rec: MessageRecord) -> list[bytes]:
        if rec.sender == culprit and rec.phase == "share_keys":
            victim.append(decode(rec.payload, ShareKeys).envelopes[0][0])
        return fault(rec)

    sums, tr = SecAggPlus(interceptor=fault_and_note, **proto_kw).aggregate(schema, contrib)
    assert tr.excluded[victim[0]].startswith("InvalidMessage")  # one complaint: the complainer leaves
    assert culprit in tr.survivors and victim[0] not in tr.survivors and len(tr.survivors) == n - 1
    check_sum(sums, contrib, tr.survivors)


def test_designated_recipient_on_a_harary_graph() -> None:
    n = 30
    schema, contrib = schema_and_contributions(n)
    proto = SecAggPlus(degree=6, threshold=4, complete_below=0)
    sums, tr = proto.aggregate(schema, contrib, recipient=11, dropouts=DropoutPlan({3: "masked_input"}))
    survivors = [c for c in range(n) if c != 3]
    check_sum(sums, contrib, survivors)
    assert tr.survivors == tuple(survivors)
    g = session_graph(tr.session_id, range(n), 6)
    assert len(g.neighbours(11)) == 7  # the recipient is a neighbour of only 6 clients, yet unpads all


def _first_reply(server_proto: SecAggPlus, client_proto: SecAggPlus, n: int) -> Any:
    """Client 0's decoded reply to the advertisement of a server configured as ``server_proto``."""
    schema, contrib = schema_and_contributions(n)
    server = SecAggPlusServer(
        schema,
        range(n),
        config=server_proto.config,
        protocol_name=server_proto.name,
        round_index=0,
        recipient=None,
    )
    client = SecAggPlusClient(
        0,
        schema,
        contrib[0],
        config=client_proto.config,
        protocol_name=server_proto.name,
        round_index=0,
        recipient=None,
        context=b"",
    )
    return decode(client.handle(server.start().messages[0]))


def test_resolve_graph_is_what_clients_check() -> None:
    """A server announcing other (degree, threshold) than the clients' own config is refused."""
    proto, weak = SecAggPlus(), SecAggPlus(threshold=2, insecure_low_threshold=True)
    reply = _first_reply(proto, weak, 20)
    assert isinstance(reply, Abort) and reply.reason == "InconsistentViewError"
    assert resolve_graph(proto.config, 20) != resolve_graph(weak.config, 20)


def test_a_server_announcing_a_weaker_prg_is_refused(caplog: pytest.LogCaptureFixture) -> None:
    """Clients configured for AES-256-CTR refuse a session whose server announces AES-128-CTR."""
    reply = _first_reply(SecAggPlus(prg="aes128-ctr"), SecAggPlus(), 6)
    assert isinstance(reply, Abort) and reply.reason == "InconsistentViewError"
    assert "prg 'aes128-ctr' != 'aes256-ctr'" in caplog.text  # the reason stays in the client's log


def test_server_is_single_use_and_stage_ordered() -> None:
    from securefgl.errors import StageOrderError

    schema, _ = schema_and_contributions(4)
    proto = SecAggPlus()
    server = SecAggPlusServer(
        schema, range(4), config=proto.config, protocol_name=proto.name, round_index=0, recipient=None
    )
    server.start()
    with pytest.raises(StageOrderError):
        server.start()
    with pytest.raises(StageOrderError, match="awaiting 'advertise_keys'"):
        server.handle("masked_input", [])


@pytest.mark.parametrize("recipient", [None, 4])
@pytest.mark.parametrize("min_bytes", [1, 1 << 40])
def test_masks_are_expanded_alike_split_over_threads_and_in_line(
    monkeypatch: pytest.MonkeyPatch, min_bytes: int, recipient: int | None
) -> None:
    """With pieces forced down to a cipher block every mask (clients' inputs, the server's removal of self
    masks and of dropped clients' pairwise masks, a designated recipient's pads) is expanded split over
    threads, with pieces forced above the vector none is: both give the survivors' exact sum (two dropped
    after sharing keys)."""
    from securefgl.protocols import _prg

    monkeypatch.setattr(_prg, "SPLIT_MIN_BYTES", min_bytes)
    schema, contrib = schema_and_contributions(12, seed=3)
    proto = SecAggPlus(workers=3)
    plan = DropoutPlan({2: "masked_input", 7: "masked_input"})
    sums, tr = proto.aggregate(schema, contrib, dropouts=plan, recipient=recipient)
    assert sorted(tr.survivors) == [c for c in range(12) if c not in (2, 7)]
    check_sum(sums, contrib, tr.survivors)
