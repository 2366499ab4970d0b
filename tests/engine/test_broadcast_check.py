"""``train.check_broadcast``: clients replay the public server step and refuse any other broadcast.

An honest run is unchanged by the check for every registered algorithm (the replay is bit-exact), and a
server that sends a crafted model (the imprint bins of Fowl et al. 2022, built by the audit's own attack code)
is refused before any client trains on it, whether it crafts the first broadcast or a later one.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

import securefgl.engine.runner as runner_module
from securefgl.algorithms.registry import available_algorithms, get_algorithm
from securefgl.attacks.imprint import bin_edges, craft_imprint, imprint_layout
from securefgl.engine.broadcast_check import compare_broadcasts
from securefgl.engine.runner import run_seed
from securefgl.engine.server import FederationServer
from securefgl.errors import ConfigError, SuspiciousModelError

ALGORITHMS = [a for a in available_algorithms() if get_algorithm(a).__module__.startswith("securefgl.")]
#: Toy runs over ten seconds each (FedLoG's generator, GAP's DP-SGD): the slow selection replays them.
SLOW = {"fedlog", "gap"}
CASES = [pytest.param(a, marks=pytest.mark.slow) if a in SLOW else a for a in ALGORITHMS]


def _with_check(config, on: bool = True):
    return dataclasses.replace(config, train=dataclasses.replace(config.train, check_broadcast=on))


@pytest.mark.parametrize("name", CASES)
def test_an_honest_run_passes_every_check_and_is_unchanged(name, toy_config, toy_graph) -> None:
    config, fg = toy_config(name), toy_graph(name)
    plain = run_seed(config, fg, 0, torch.device("cpu"))
    checked = run_seed(_with_check(config), fg, 0, torch.device("cpu"))
    assert checked.final is not None and plain.final is not None
    assert checked.final.overall == plain.final.overall
    assert [r.loss for r in checked.rounds] == pytest.approx([r.loss for r in plain.rounds], nan_ok=True)
    uses_sums = get_algorithm(name).uses_protocol
    assert checked.report["broadcasts_checked"] >= (len(checked.rounds) if uses_sums else 1)
    assert "broadcasts_checked" not in plain.report


def _crafted(broadcast, model, fg):
    """The imprint-bin model of the audit's attack, made from the honest broadcast."""
    layout = imprint_layout(model)
    gen = torch.Generator().manual_seed(0)
    a = torch.randn(layout.num_features, generator=gen, dtype=torch.float64)
    a, edges = bin_edges(fg.clients[0].x, a, layout.hidden, 1, 1.0)
    return craft_imprint(layout, broadcast, a, edges[0], 3, 0.05)


@pytest.mark.parametrize("when", ["first", "later"])
def test_a_crafted_broadcast_is_refused_before_training(when, toy_config, toy_graph, monkeypatch) -> None:
    config, fg = toy_config("fedavg"), toy_graph("fedavg")
    config = dataclasses.replace(config, model=dataclasses.replace(config.model, dropout=0.0))
    trained: list[int] = []

    class MaliciousServer(FederationServer):
        def __init__(self, algorithm, state, broadcast, *args, **kwargs) -> None:
            self.model = algorithm.setting.make_model()
            if when == "first":
                broadcast = _crafted(broadcast, self.model, fg)
            super().__init__(algorithm, state, broadcast, *args, **kwargs)

        def step(self, sums, requests, rs):
            honest = super().step(sums, requests, rs)
            if when == "later" and rs.round == 1:
                self.broadcast = _crafted(honest, self.model, fg)
            return self.broadcast

    monkeypatch.setattr(runner_module, "FederationServer", MaliciousServer)
    hooks = runner_module.RunHooks(on_round=lambda ev: trained.append(ev.record.round))
    # Without the check the crafted model is trained on (this is what the audit's attack exploits) ...
    unchecked = run_seed(config, fg, 0, torch.device("cpu"), hooks=hooks)
    assert len(unchecked.rounds) == config.train.rounds
    # ... with it, every client refuses it, before its data touches the crafted model.
    trained.clear()
    with pytest.raises(SuspiciousModelError, match="differs from the algorithm's update") as info:
        run_seed(_with_check(config), fg, 0, torch.device("cpu"), hooks=hooks)
    if when == "first":
        assert "round 1" in str(info.value) and trained == []
    else:  # the crafted model is the evaluation broadcast of round 2 and the training broadcast of round 3;
        # its evaluation is scored at the start of round 3 (and would ride in its sum), so round 2 is kept
        # (without metrics) and round 3 never trains
        assert "round 2" in str(info.value) and trained == [0, 1]


def test_compare_broadcasts_names_what_differs() -> None:
    w = {"w": torch.ones(2, 2), "meta": {"k": 1}}
    compare_broadcasts(w, {"w": torch.ones(2, 2), "meta": {"k": 1}})
    with pytest.raises(SuspiciousModelError, match="'w' differs"):
        compare_broadcasts({"w": torch.ones(2, 2) + 1e-7, "meta": {"k": 1}}, w)
    with pytest.raises(SuspiciousModelError, match="unexpected \\['x'\\]"):
        compare_broadcasts({**w, "x": torch.zeros(1)}, w)
    with pytest.raises(SuspiciousModelError, match="reshaped"):
        compare_broadcasts({"w": torch.ones(4), "meta": {"k": 1}}, w)
    with pytest.raises(SuspiciousModelError, match="'w' differs"):
        compare_broadcasts({"w": torch.full((2, 2), float("nan")), "meta": {"k": 1}}, w)


def test_check_broadcast_must_be_a_bool(toy_config) -> None:
    with pytest.raises(ConfigError, match="train.check_broadcast must be true or false, got 'yes'"):
        dataclasses.replace(toy_config("fedavg").train, check_broadcast="yes")
