"""The server contract, for every registered algorithm: the same sums give the same server.

A run is recorded through the engine's hooks. Then a second client population is built whose uploads differ
client by client but sum to the same vectors (every sum's contributions are handed to the protocol in
reversed client order), the real plaintext protocol sums them, and a fresh :class:`FederationServer` is fed
those sums and nothing else. It must reproduce every broadcast of the run and every server decision: the
phase's best round (``improved`` at each evaluation) and the early stop under ``train.patience``.
"""

from __future__ import annotations

import pytest
import torch

from securefgl.algorithms.registry import available_algorithms, create_algorithm, get_algorithm
from securefgl.engine.evaluation import evaluation_schema
from securefgl.engine.hooks import RunHooks
from securefgl.engine.runner import make_setting, run_seed, start_seed
from securefgl.engine.server import FederationServer
from securefgl.protocols.registry import get_protocol

#: The built-in algorithms (tests register toy ones of their own, e.g. the documentation's "tiny-fedavg").
ALGORITHMS = [a for a in available_algorithms() if get_algorithm(a).__module__.startswith("securefgl.")]


def _reversed_population(contributions: dict) -> dict:
    """The same multiset of uploads, handed to other clients: each client's vector changes, the sum does not."""
    ids = sorted(contributions)
    return {cid: contributions[src] for cid, src in zip(ids, reversed(ids), strict=True)}


@pytest.mark.parametrize("patience", [None, 1])
@pytest.mark.parametrize("name", ALGORITHMS)
def test_same_sums_give_the_same_broadcasts_and_decisions(
    name: str, patience: int | None, toy_config, toy_graph
) -> None:
    config = toy_config(name, patience)
    fg = toy_graph(name)
    aggregates, evaluations, rounds = [], [], []
    phases = []
    hooks = RunHooks(
        on_start=lambda ev: phases.extend(ev.phases),
        on_aggregate=aggregates.append,
        on_evaluate=evaluations.append,
        on_round=rounds.append,
    )
    result = run_seed(config, fg, 0, torch.device("cpu"), hooks=hooks)

    # The replay: a fresh server with the same public start, fed the other population's sums only.
    setting = make_setting(config, fg, "cpu")
    algorithm = create_algorithm(name, setting, config.algorithm.options)
    _, state, broadcast, _ = start_seed(algorithm, fg, 0, torch.device("cpu"))
    server = FederationServer(
        algorithm, state, broadcast, evaluation_schema(setting.count_bound, fg.num_clients), patience
    )
    plain = get_protocol("plaintext")
    pending = list(aggregates)
    decisions = []
    phase_of = {p.name: p for p in phases}
    current = None
    for ev in rounds:
        phase = phase_of[ev.record.phase]
        if phase is not current:
            server.start_phase(phase)
            current = phase
        mine = [
            a for a in pending if a.rs.global_round == ev.record.global_round and a.rs.phase == phase.name
        ]
        pending = [a for a in pending if a not in mine]
        train_sums, eval_sums = {}, None
        for a in mine:
            moved = _reversed_population(dict(a.contributions))
            if len(moved) > 1:
                assert any(moved[c] is not a.contributions[c] for c in moved)
            sums, _ = plain.aggregate(a.schema, moved, round_index=a.rs.global_round)
            for block in a.schema.names:  # a different population, the very same released sum
                assert torch.equal(sums[block], a.sums[block]), (a.key, block)
            if a.is_evaluation:
                eval_sums = (sums, a.rs)
            elif a.recipient is None:
                train_sums[a.key] = (sums, a.rs)
        if train_sums:
            rs = next(iter(train_sums.values()))[1]
            server.step({k: s for k, (s, _) in train_sums.items()}, list(algorithm.requests(rs)), rs)
        if eval_sums is not None:
            overall, improved = server.evaluated(*eval_sums, select=phase.kind != "local")
            decisions.append((overall, improved))
        assert sorted(server.broadcast) == sorted(ev.broadcast)
        for k in ev.broadcast:
            assert torch.equal(server.broadcast[k], ev.broadcast[k]), (name, ev.record.global_round, k)
        if phase.kind == "rounds" and phase.evaluate and server.should_stop:
            assert result.stopped_early.get(phase.name) == ev.record.round
    assert not pending
    assert len(decisions) == len(evaluations)
    for (overall, improved), ev in zip(decisions, evaluations, strict=True):
        assert improved == ev.improved
        assert overall == pytest.approx(dict(ev.overall), nan_ok=True)
    if patience is None:
        assert not result.stopped_early
