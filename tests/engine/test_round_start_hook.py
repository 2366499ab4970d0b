"""``on_round_start``: called before every round and local phase, with the phase a progress display names;
``on_round`` after the round and its evaluation (a fused evaluation is in with the next round's sums)."""

from __future__ import annotations

import pytest
import torch

from securefgl.engine.hooks import RoundEvent, RoundStartEvent, RunHooks
from securefgl.engine.runner import run_seed


def _events(config, graph) -> list[tuple[str, object]]:
    events: list[tuple[str, object]] = []
    hooks = RunHooks(
        on_round_start=lambda ev: events.append(("start", ev)),
        on_round=lambda ev: events.append(("end", ev)),
    )
    run_seed(config, graph, 0, torch.device("cpu"), hooks=hooks)
    return events


@pytest.mark.parametrize("name", ["fedavg", "opfgl"])
def test_round_start_precedes_every_round(name, toy_config, toy_graph) -> None:
    events = _events(toy_config(name, eval_in_next_sum=False), toy_graph(name))
    kinds = [k for k, _ in events]
    assert kinds == ["start", "end"] * (len(events) // 2) and kinds
    for (_, start), (_, end) in zip(events[::2], events[1::2], strict=True):
        assert isinstance(start, RoundStartEvent) and isinstance(end, RoundEvent)
        assert start.phase == end.record.phase and start.round == end.record.round
        assert start.done == end.done - 1 and start.total == end.total
        assert 0 <= start.round < start.num_rounds
    phases = [ev.phase for k, ev in events if k == "start"]
    assert phases == (["train"] * 4 if name == "fedavg" else ["upload", "train"])


def test_fused_evaluation_reports_a_round_after_the_next_one_starts(toy_config, toy_graph) -> None:
    """With the evaluation in the next round's sum, round r is reported (with its metrics) once round r+1's
    sums are in: start 0, start 1, end 0, start 2, end 1, ..., end 3; every round once, in order."""
    events = _events(toy_config("fedavg"), toy_graph("fedavg"))
    order = [(k, ev.round if k == "start" else ev.record.round) for k, ev in events]
    assert order == [("start", 0), ("start", 1), ("end", 0), ("start", 2), ("end", 1), ("start", 3)] + [
        ("end", 2),
        ("end", 3),
    ]
    ends = [ev for k, ev in events if k == "end"]
    assert [ev.done for ev in ends] == [1, 2, 3, 4]
    assert all(ev.record.metrics for ev in ends)
