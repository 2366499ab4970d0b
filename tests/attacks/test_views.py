"""Adversary views: built from transcripts only, and unable to reach anything else."""

from __future__ import annotations

import gc

import pytest
import torch

from securefgl.attacks.views import (
    AggregationRecord,
    GraphKnowledge,
    PublicInfo,
    client_view,
    collusion_view,
    server_view,
)
from securefgl.errors import ConfigError, NothingToAttackError
from securefgl.protocols.encoding import BlockSpec, SumSchema
from securefgl.protocols.registry import get_protocol

SCHEMA = SumSchema(
    [BlockSpec("v", (6,), bound=4.0), BlockSpec("n", (1,), kind="count", bound=50)], max_clients=5
)
PUBLIC = PublicInfo("fedavg", num_features=3, num_classes=2, num_clients=4)


def _contributions(seed: int = 0) -> dict[int, dict[str, torch.Tensor]]:
    g = torch.Generator().manual_seed(seed)
    return {
        c: {"v": (torch.rand(6, generator=g) * 6 - 3).double(), "n": torch.tensor([c + 1])} for c in range(4)
    }


def _record(protocol: str, contributions, **kw) -> AggregationRecord:
    sums, tr = get_protocol(protocol).aggregate(SCHEMA, contributions, **kw)
    return AggregationRecord("main", "train", 0, SCHEMA, {"w": torch.zeros(2)}, tr, sums, None, contributions)


def _reachable(root: object, limit: int = 200_000) -> list[object]:
    seen: dict[int, object] = {}
    stack = [root]
    while stack and len(seen) < limit:
        o = stack.pop()
        if id(o) in seen or isinstance(o, (type, type(gc))):
            continue
        seen[id(o)] = o
        stack.extend(gc.get_referents(o))
    return list(seen.values())


@pytest.mark.parametrize("protocol", ["plaintext", "secagg"])
def test_view_cannot_reach_contributions_or_transcript(protocol):
    contribs = _contributions()
    rec = _record(protocol, contribs)
    secret_ids = {id(t) for c in contribs.values() for t in c.values()} | {id(contribs), id(rec.transcript)}
    secret_ids |= {id(rec.transcript.views)} | {id(m) for m in rec.transcript.views.get(1, [])}
    for view in (
        server_view([rec], PUBLIC),
        client_view([rec], PUBLIC, 2),
        collusion_view([rec], PUBLIC, [1]),
    ):
        reach = _reachable(view)
        assert not any(id(o) in secret_ids for o in reach)
        assert not any(isinstance(o, AggregationRecord) for o in reach)
    # the colluder's own input is in its view as a copy, other clients' inputs are not
    col = collusion_view([rec], PUBLIC, [1])
    own = col.observations[0].own_inputs
    assert (
        set(own) == {1} and torch.equal(own[1]["v"], contribs[1]["v"]) and own[1]["v"] is not contribs[1]["v"]
    )


def test_plaintext_server_view_holds_exact_inputs():
    contribs = _contributions(1)
    view = server_view([_record("plaintext", contribs)], PUBLIC)
    ins = view.individual_inputs(view.observations[0])
    assert set(ins) == set(contribs)
    for c, x in ins.items():
        assert x.kind == "plaintext" and x.exact
        assert torch.allclose(x.values["v"], contribs[c]["v"].double(), atol=1e-12)
        assert float(x.values["n"][0]) == c + 1
    total = view.released_sum(view.observations[0])
    assert torch.allclose(total["v"].double(), sum(c["v"] for c in contribs.values()), atol=1e-5)


def test_secagg_masked_vectors_do_not_depend_on_the_input():
    a, b = _contributions(2), _contributions(3)
    b[0] = {"v": torch.zeros(6, dtype=torch.float64), "n": torch.tensor([1])}
    views = [server_view([_record("secagg", x)], PUBLIC) for x in (a, b)]
    got = [v.individual_inputs(v.observations[0]) for v in views]
    for g in got:
        assert all(x.kind == "masked" and not x.exact for x in g.values())
    # decoded masked vectors are uniform over the whole ring (decoded range +-half_range), whatever the input (b[0]
    # is all zeros): each entry lies beyond twice the block's bound of 4 with probability 1 - 8 / half_range = 3/4.
    # Pooled over both views' 48 entries, fewer than 16 beyond it has probability 1.5e-9 (binomial tail), where
    # unmasked inputs (all within the bound) would give none.
    half_range = 2.0 ** (SCHEMA.ring_bits - 1) / SCHEMA.scales["v"]
    assert half_range == 32.0
    entries = torch.cat([x.values["v"] for g in got for x in g.values()])
    assert entries.numel() == 48 and int((entries.abs() > 2 * 4.0).sum()) >= 16
    assert float(entries.abs().max()) <= half_range
    assert not torch.allclose(got[0][0].values["v"], a[0]["v"])


def test_client_view_has_no_individual_inputs_and_no_server_sum():
    view = client_view([_record("secagg", _contributions())], PUBLIC, 2)
    obs = view.observations[0]
    with pytest.raises(NothingToAttackError, match="client"):
        view.individual_inputs(obs)
    with pytest.raises(NothingToAttackError, match="no sum was released"):
        view.released_sum(obs)
    assert set(obs.own_inputs) == {2}
    assert all(m.receiver == 2 for m in obs.received) and all(m.sender == 2 for m in obs.sent)


def test_ckks_view_holds_only_ciphertexts():
    view = server_view([_record("ckks", _contributions())], PUBLIC)
    with pytest.raises(NothingToAttackError, match="CKKS ciphertext"):
        view.individual_inputs(view.observations[0])
    assert view.released_sum(view.observations[0]).num_contributors == 4


def test_view_builders_validate():
    rec = _record("plaintext", _contributions())
    with pytest.raises(NothingToAttackError):
        server_view([], PUBLIC)
    with pytest.raises(ConfigError, match="took part in no aggregation"):
        client_view([rec], PUBLIC, 17)
    with pytest.raises(ConfigError, match="distinct"):
        collusion_view([rec], PUBLIC, [1, 1])
    with pytest.raises(ConfigError, match="record_views"):
        sums, tr = get_protocol("plaintext", record_views=False).aggregate(SCHEMA, _contributions())
        server_view([AggregationRecord("main", "t", 0, SCHEMA, {}, tr, sums)], PUBLIC)
    with pytest.raises(ConfigError, match="outside"):
        GraphKnowledge(0, 3, torch.tensor([[0, 5], [1, 0]]), torch.tensor([0]))


def test_a_resumed_sessions_masked_inputs_are_in_the_server_view():
    """With resumed SecAgg+ sessions the inputs travel in the ``resume`` stage: the server's view still holds
    every client's masked vector (uniform, nothing like the input)."""
    proto = get_protocol("secagg", session_uses=3)
    proto.aggregate(SCHEMA, _contributions(4))
    sums, tr = proto.aggregate(SCHEMA, _contributions(5))
    assert tr.extra["session_use"] == 1
    rec = AggregationRecord(
        "main", "train", 0, SCHEMA, {"w": torch.zeros(2)}, tr, sums, None, _contributions(5)
    )
    view = server_view([rec], PUBLIC)
    got = view.individual_inputs(view.observations[0])
    assert set(got) == set(range(4)) and all(x.kind == "masked" and not x.exact for x in got.values())
