"""``on_round_start``: called before every round and local phase, with the phase a progress display names."""

from __future__ import annotations

import pytest
import torch

from securefgl.engine.hooks import RoundEvent, RoundStartEvent, RunHooks
from securefgl.engine.runner import run_seed


@pytest.mark.parametrize("name", ["fedavg", "opfgl"])
def test_round_start_precedes_every_round(name, toy_config, toy_graph) -> None:
    events: list[tuple[str, object]] = []
    hooks = RunHooks(
        on_round_start=lambda ev: events.append(("start", ev)),
        on_round=lambda ev: events.append(("end", ev)),
    )
    run_seed(toy_config(name), toy_graph(name), 0, torch.device("cpu"), hooks=hooks)
    kinds = [k for k, _ in events]
    assert kinds == ["start", "end"] * (len(events) // 2) and kinds
    for (_, start), (_, end) in zip(events[::2], events[1::2], strict=True):
        assert isinstance(start, RoundStartEvent) and isinstance(end, RoundEvent)
        assert start.phase == end.record.phase and start.round == end.record.round
        assert start.done == end.done - 1 and start.total == end.total
        assert 0 <= start.round < start.num_rounds
    phases = [ev.phase for k, ev in events if k == "start"]
    assert phases == (["train"] * 4 if name == "fedavg" else ["upload", "train"])
