"""A client half given a batch of one client reaches no other client's tensors or state.

For every registered algorithm, the clients are started as a deployment lays them out (``start_seed(...,
isolated=True)``: every client a batch of one). Client 0's first-round upload and its evaluation scores must be
bit-identical whether the other clients hold their real data or garbage (NaN features, shifted labels, NaN
evaluation sets): if client 0's half could read another client's data, the NaN would reach its output.
"""

from __future__ import annotations

import copy

import pytest
import torch

from securefgl.algorithms.base import RoundState
from securefgl.algorithms.registry import available_algorithms, create_algorithm, get_algorithm
from securefgl.engine.runner import make_setting, start_seed

#: The built-in algorithms (tests register toy ones of their own).
ALGORITHMS = [a for a in available_algorithms() if get_algorithm(a).__module__.startswith("securefgl.")]


def _poison_others(fg, keep: int):
    """A copy of ``fg`` in which every client but ``keep`` holds garbage of the same shapes."""
    out = copy.copy(fg)
    clients = []
    for i, d in enumerate(fg.clients):
        if i != keep:
            d = d.clone()
            d.x = torch.full_like(d.x, float("nan"))
            d.y = (d.y + 1) % fg.num_classes
        clients.append(d)
    out.clients = clients
    if fg.client_eval is not None:
        out.client_eval = [
            sets
            if i == keep
            else {
                k: torch.full_like(v, float("nan")) if v.is_floating_point() else v for k, v in sets.items()
            }
            for i, sets in enumerate(fg.client_eval)
        ]
    return out


def _equal(a, b) -> bool:
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.shape == b.shape and bool(torch.equal(a, b))
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_equal(a[k], b[k]) for k in a)
    return a == b


def _client_zero(config, name: str, fg):
    algorithm = create_algorithm(name, make_setting(config, fg, "cpu"), config.algorithm.options)
    clients, _, broadcast, _ = start_seed(algorithm, fg, 0, torch.device("cpu"), isolated=True)
    phase = algorithm.phases(config.train)[0]
    rs = RoundState(phase.name, 0, 0, tuple(c.id for c in clients), broadcast, 2)
    if phase.kind == "local":
        algorithm.personalize_clients([clients[0]], broadcast, phase)
        upload = None
    else:
        upload = algorithm.client_steps([clients[0]], rs)
    scores = algorithm.evaluate([clients[0]], broadcast, rs) if phase.evaluate else None
    return upload, scores, clients


@pytest.mark.parametrize("name", ALGORITHMS)
def test_a_batch_of_one_cannot_reach_other_clients(name: str, toy_config, toy_graph) -> None:
    config = toy_config(name)
    fg = toy_graph(name)
    if name == "fedlog":
        from securefgl.algorithms.fedlog import attach_generalization_sets

        fg = attach_generalization_sets(fg, hops=1)
    upload, scores, clients = _client_zero(config, name, fg)
    poisoned_upload, poisoned_scores, poisoned = _client_zero(config, name, _poison_others(fg, keep=0))
    assert bool(torch.isnan(poisoned[1].data.x).all())  # the garbage really is there
    assert poisoned[0].workspace is not poisoned[1].workspace  # a batch of one: its own workspace
    assert _equal(upload, poisoned_upload)
    assert _equal(scores, poisoned_scores)
