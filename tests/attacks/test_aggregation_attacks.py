"""Attacks on secure aggregation: model inconsistency, minimum cohort, disaggregation."""

from __future__ import annotations

import pytest
import torch

from securefgl.algorithms.base import Client, RoundState, Setting
from securefgl.algorithms.registry import create_algorithm
from securefgl.attacks.aggregation_attacks import (
    dead_first_layer,
    disaggregation_attack,
    minimum_cohort_attack,
    model_inconsistency_attack,
)
from securefgl.config import TrainConfig
from securefgl.data import make_csbm, partition_graph
from securefgl.errors import AttackNotApplicableError
from securefgl.nn.registry import ModelSpec, build_model
from securefgl.protocols.encoding import BlockSpec, SumSchema
from securefgl.protocols.registry import get_protocol
from securefgl.protocols.release_guard import ReleaseGuard


@pytest.fixture(scope="module")
def fedavg_round():
    data = make_csbm(num_nodes=240, num_classes=3, num_features=8, avg_degree=6.0, seed=0)
    fg = partition_graph(data, "louvain", 4, seed=0, cache=False)
    spec = ModelSpec("mlp", hidden=16, dropout=0.0)
    setting = Setting(
        fg.num_features,
        fg.num_classes,
        4,
        fg.num_nodes,
        fg.num_nodes,
        spec,
        TrainConfig(local_epochs=1, optimizer="sgd", lr=0.1),
        max_clients_per_round=4,
    )
    alg = create_algorithm("fedavg", setting, {})
    ws = {"generator": torch.Generator().manual_seed(0)}
    clients = [Client(i, c, torch.Generator().manual_seed(i), workspace=ws) for i, c in enumerate(fg.clients)]
    for c in clients:
        alg.init_client(c)
    broadcast = alg.initial_broadcast(alg.init_server(torch.Generator().manual_seed(0)))

    def train(ids, bc):
        if not ids:
            return {}
        return alg.client_steps([clients[i] for i in ids], RoundState("train", 0, 0, tuple(ids), dict(bc), 1))

    def schema_for(bc):
        return alg.schema(RoundState("train", 0, 0, (0, 1, 2, 3), dict(bc), 1))

    return alg, train, schema_for, build_model(spec, fg.num_features, fg.num_classes), broadcast


@pytest.mark.parametrize("protocol", ["plaintext", "secagg"])
def test_model_inconsistency_is_caught_by_session_binding(fedavg_round, protocol):
    _, train, schema_for, model, broadcast = fedavg_round
    caught = model_inconsistency_attack(
        get_protocol(protocol), schema_for, train, model, broadcast, [0, 1, 2, 3], 2, bind_context=True
    )
    assert not caught.target_in_sum and "InconsistentViewError" in caught.refused
    assert 2 in caught.excluded
    unbound = model_inconsistency_attack(
        get_protocol(protocol), schema_for, train, model, broadcast, [0, 1, 2, 3], 2, bind_context=False
    )
    assert unbound.target_in_sum and unbound.isolation_error < 1e-5  # isolated exactly without the binding
    assert unbound.baseline_error > 1.0  # an honest round mixes everybody


def test_dead_first_layer_needs_a_hidden_relu():
    with pytest.raises(AttackNotApplicableError, match="hidden ReLU"):
        dead_first_layer(build_model("sgc", 4, 2), {})


SCHEMA = SumSchema([BlockSpec("v", (3,), bound=4.0)], max_clients=5)
STRICT = SumSchema([BlockSpec("v", (3,), bound=4.0)], max_clients=5, min_contributors=3)
INPUTS = {c: {"v": torch.tensor([0.5 * c, -0.1 * c, 1.0])} for c in range(5)}


@pytest.mark.parametrize("protocol", ["plaintext", "secagg"])
def test_minimum_cohort(protocol):
    ok, why, cos = minimum_cohort_attack(get_protocol(protocol), SCHEMA, INPUTS, 3)
    if protocol == "plaintext":
        assert ok and cos == pytest.approx(1.0)
    else:  # a secure protocol's own default refuses a "sum" of one input (min_contributors=2)
        assert not ok and "ReleaseRefusedError" in why
        ok, _, cos = minimum_cohort_attack(get_protocol(protocol, min_contributors=1), SCHEMA, INPUTS, 3)
        assert ok and cos == pytest.approx(1.0)  # the explicit opt-out releases it
    ok, why, _ = minimum_cohort_attack(get_protocol(protocol), STRICT, INPUTS, 3)
    assert not ok and "ReleaseRefusedError" in why


def test_disaggregation_pairwise_guard_is_not_enough_fixed_is():
    sets = [[0, 1], [0, 2], [1, 2], [0, 1, 2, 3, 4], [2, 3], [3, 4], [2, 4]]
    plain = disaggregation_attack(get_protocol("secagg"), SCHEMA, INPUTS, sets)
    assert plain.identifiable == [0, 1, 2, 3, 4] and max(plain.errors.values()) < 1e-4
    diff = disaggregation_attack(
        ReleaseGuard(get_protocol("secagg"), mode="difference"), SCHEMA, INPUTS, sets
    )
    assert 0 in diff.identifiable  # pairwise differences >= 2, yet (S01 + S02 - S12) / 2 = x0
    fixed = disaggregation_attack(ReleaseGuard(get_protocol("secagg"), mode="fixed"), SCHEMA, INPUTS, sets)
    assert fixed.identifiable == [] and len(fixed.released) == 1
