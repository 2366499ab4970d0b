"""An evaluation carried in the next round's training sum: the same sums as two protocol runs, in one."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch_geometric.data import Data

from securefgl.algorithms.registry import available_algorithms, get_algorithm
from securefgl.engine.eval_rider import RIDER_BLOCK, EvalRider
from securefgl.engine.evaluation import evaluation_contribution, evaluation_schema
from securefgl.engine.hooks import RunHooks
from securefgl.engine.metrics import client_metrics
from securefgl.engine.runner import run_seed
from securefgl.protocols.encoding import BlockSpec, SumSchema
from securefgl.protocols.registry import get_protocol


def _training_schema(n: int, bound: float = 1.0, **kwargs) -> SumSchema:
    return SumSchema(
        [BlockSpec("w", (50,), bound=bound), BlockSpec("n", (1,), kind="count", bound=300)],
        max_clients=n,
        **kwargs,
    )


def _uploads(n: int, seed: int, num_classes: int = 2):
    """``n`` clients' training uploads and their evaluation uploads (from real metrics of random scores)."""
    g = torch.Generator().manual_seed(seed)
    train, evals = {}, {}
    for k in range(n):
        size = int(torch.randint(5, 300, (1,), generator=g))
        y = torch.randint(0, num_classes, (size,), generator=g)
        masks = torch.rand(3, size, generator=g)
        data = Data(
            y=y, train_mask=masks[0] < 0.3, val_mask=masks[1] < 0.3, test_mask=masks[2] < 0.4, num_nodes=size
        )
        metrics = client_metrics(k, torch.randn(size, num_classes, generator=g) * 3, data, num_classes)
        evals[k] = evaluation_contribution(metrics)
        train[k] = {"w": torch.rand(50, generator=g) * 2 - 1, "n": torch.tensor([size])}
    return train, evals


def _equal(a, b) -> None:
    assert list(a) == list(b)
    for name in a:
        assert torch.equal(a[name], b[name]), name
    assert a.num_contributors == b.num_contributors


def test_the_rider_keeps_the_training_ring_and_refuses_what_cannot_carry_it() -> None:
    evaluation = evaluation_schema(count_bound=3_000, max_clients=100, num_classes=2)
    train = _training_schema(100)
    rider = EvalRider.fit(train, evaluation)
    assert rider is not None
    assert rider.combined.ring_bits == train.ring_bits and evaluation.ring_bits == 64
    assert rider.limbs * rider.limb_bits >= evaluation.ring_bits
    assert rider.combined.length == train.length + evaluation.length * rider.limbs
    # DP noise headroom, a name clash, or a training sum of fewer clients than the evaluation's: no rider
    assert EvalRider.fit(_training_schema(100, extra_bits=4), evaluation) is None
    clash = SumSchema([BlockSpec(RIDER_BLOCK, (3,))], max_clients=100)
    assert EvalRider.fit(clash, evaluation) is None
    assert EvalRider.fit(_training_schema(10), evaluation) is None
    # a ring too narrow for limbs of MIN_LIMB_BITS
    tiny = SumSchema([BlockSpec("c", (2,), kind="count", bound=3)], max_clients=100)
    assert EvalRider.fit(tiny, evaluation) is None


@pytest.mark.parametrize("protocol", ["plaintext", "secagg", "secagg+", "ckks"])
def test_one_run_releases_both_sums_exactly(protocol: str) -> None:
    n = 6
    evaluation = evaluation_schema(count_bound=300, max_clients=n, num_classes=2)
    train = _training_schema(n)
    rider = EvalRider.fit(train, evaluation)
    assert rider is not None
    uploads, evals = _uploads(n, seed=1)
    rng = np.random.default_rng(0)  # on the grid first, as the engine uploads: every encoding is exact
    uploads = {c: train.round_to_grid(u, rng) for c, u in uploads.items()}
    evals = {c: evaluation.round_to_grid(e, rng) for c, e in evals.items()}
    proto = get_protocol(protocol)
    both, transcript = proto.aggregate(
        rider.combined, {c: rider.attach(uploads[c], evals[c]) for c in uploads}
    )
    training, evaluated = rider.split(both)
    alone_train, _ = proto.aggregate(train, uploads)
    alone_eval, _ = proto.aggregate(evaluation, evals)
    _equal(training, alone_train)
    _equal(evaluated, alone_eval)
    assert RIDER_BLOCK not in training and transcript.survivors == tuple(range(n))


@settings(max_examples=40, deadline=None)
@given(st.integers(2, 40), st.integers(0, 2**31), st.sampled_from([0.5, 4.0, 1000.0]))
def test_limbs_rebuild_the_evaluation_ring_sum_for_any_uploads(n: int, seed: int, bound: float) -> None:
    """Whatever the clients' counts and the training ring's width, the limb sums give back the evaluation
    schema's ring sum (plaintext protocol: the ring arithmetic alone)."""
    evaluation = evaluation_schema(count_bound=300, max_clients=n, num_classes=2)
    train = _training_schema(n, bound=bound)
    rider = EvalRider.fit(train, evaluation)
    assert rider is not None
    uploads, evals = _uploads(n, seed)
    evals = {c: evaluation.round_to_grid(e, np.random.default_rng(seed)) for c, e in evals.items()}
    proto = get_protocol("plaintext")
    both, _ = proto.aggregate(rider.combined, {c: rider.attach(uploads[c], evals[c]) for c in uploads})
    _, evaluated = rider.split(both)
    _equal(evaluated, proto.aggregate(evaluation, evals)[0])


ALGORITHMS = [a for a in available_algorithms() if get_algorithm(a).__module__.startswith("securefgl.")]
#: Toy runs over ten seconds each under secagg: the slow selection runs them.
SLOW = {"fedlog", "gap"}
#: Algorithms whose rounds release a server-bound sum of every client: their evaluations ride in it.
RIDES = {"adafgl", "fedavg", "fedlog", "fedprox", "fedspray", "fedstruct", "gap"}


def _secagg(config, **train):
    return dataclasses.replace(
        config,
        protocol=dataclasses.replace(config.protocol, name="secagg"),
        train=dataclasses.replace(config.train, **train),
    )


def _run(config, fg):
    events = []
    result = run_seed(config, fg, 0, torch.device("cpu"), hooks=RunHooks(on_aggregate=events.append))
    return result, events


def test_a_run_with_riders_equals_one_with_separate_evaluation_sums(toy_config, toy_graph) -> None:
    config, fg = toy_config("fedavg"), toy_graph("fedavg")
    fused, fused_events = _run(_secagg(config), fg)
    alone, alone_events = _run(_secagg(config, eval_in_next_sum=False), fg)
    assert [e.overall for e in fused.evals] == [e.overall for e in alone.evals]
    assert [r.loss for r in fused.rounds] == [r.loss for r in alone.rounds]
    assert fused.final is not None and alone.final is not None
    assert fused.final.overall == alone.final.overall and fused.final.round == alone.final.round
    rounds = config.train.rounds
    # one protocol run per round, and the last round's evaluation alone; before, two per round
    assert len({id(e.transcript) for e in fused_events}) == rounds + 1
    assert len({id(e.transcript) for e in alone_events}) == 2 * rounds
    carried = [e for e in fused_events if e.carried]
    assert [e.rs.round for e in carried] == list(range(rounds - 1))
    # each carried evaluation is reported with its own schema, uploads and sums, as it would have run alone
    for fe, ae in zip(
        [e for e in fused_events if e.is_evaluation],
        [e for e in alone_events if e.is_evaluation],
        strict=True,
    ):
        assert fe.schema == ae.schema and fe.rs.round == ae.rs.round
        _equal(fe.sums, ae.sums)
    assert all(RIDER_BLOCK not in e.schema and RIDER_BLOCK not in e.sums for e in fused_events)


def test_riders_with_evaluations_every_other_round(toy_config, toy_graph) -> None:
    """``eval_every=2`` over 5 rounds: rounds 2 and 4 are evaluated (the 4th in round 5's sum), round 5 alone."""
    config, fg = toy_config("fedavg"), toy_graph("fedavg")
    fused, events = _run(_secagg(config, eval_every=2, rounds=5), fg)
    alone, _ = _run(_secagg(config, eval_every=2, rounds=5, eval_in_next_sum=False), fg)
    assert [e.round for e in fused.evals] == [e.round for e in alone.evals] == [1, 3, 4]
    assert [e.overall for e in fused.evals] == [e.overall for e in alone.evals]
    assert [e.rs.round for e in events if e.carried] == [1, 3]
    assert [r.metrics is not None for r in fused.rounds] == [False, True, False, True, True]


@pytest.mark.parametrize("train", [{"patience": 2}, {"eval_in_next_sum": False}, {"clients_per_round": 2}])
def test_evaluations_run_alone_where_they_cannot_ride(train, toy_config, toy_graph) -> None:
    config = _secagg(toy_config("fedavg"), **train)
    _, events = _run(config, toy_graph("fedavg"))
    assert not any(e.carried for e in events)
    assert sum(e.is_evaluation for e in events) >= 1


@pytest.mark.parametrize(
    "name", [pytest.param(a, marks=pytest.mark.slow) if a in SLOW else a for a in ALGORITHMS]
)
def test_every_algorithm_gives_the_same_run_with_riders(name, toy_config, toy_graph) -> None:
    """Several sums a round (FedSpray, FedStruct, AdaFGL, ...): the evaluation rides in the first server-bound
    sum of every client, and the run is the one with separate evaluation sums."""
    config, fg = toy_config(name), toy_graph(name)
    fused, fused_events = _run(_secagg(config), fg)
    alone, _ = _run(_secagg(config, eval_in_next_sum=False), fg)
    assert [e.overall for e in fused.evals] == [e.overall for e in alone.evals]
    assert [r.loss for r in fused.rounds] == pytest.approx([r.loss for r in alone.rounds], nan_ok=True)
    assert (fused.final is None) == (alone.final is None)
    if fused.final is not None and alone.final is not None:
        assert fused.final.overall == alone.final.overall
    carried = sum(e.carried for e in fused_events)
    assert carried > 0 if name in RIDES else carried == 0
