"""The audit's capture observes the engine's own run through its hooks: same training, plus the records."""

from __future__ import annotations

import pytest
import torch

from securefgl.attacks._capture import capture_run
from securefgl.config import RunConfig
from securefgl.engine.hooks import RunHooks
from securefgl.engine.runner import run_seed


def _config(protocol: str, rounds: int = 2, dropout: float = 0.0, max_failed_rounds: int = 5) -> RunConfig:
    return RunConfig.from_mapping(
        {
            "dataset": {"name": "csbm", "csbm": {"num_nodes": 200, "num_classes": 3, "num_features": 8}},
            "partition": {"method": "louvain", "clients": 3, "cache": False},
            "protocol": {"name": protocol, "dropout": dropout},
            "model": {"name": "gcn", "hidden": 8},
            "train": {"rounds": rounds, "local_epochs": 1, "max_failed_rounds": max_failed_rounds},
            "output": {"save": False},
            "device": "cpu",
        }
    )


@pytest.mark.parametrize("protocol", ["plaintext", "secagg"])
def test_capture_matches_the_engine(protocol):
    from securefgl.api import load_federated_graph

    cfg = _config(protocol)
    fg = load_federated_graph(cfg)
    ref = run_seed(cfg, fg, 0, torch.device("cpu"))
    progress: list[tuple[int, int]] = []
    cap = capture_run(cfg, fg, 0, on_round=lambda d, t: progress.append((d, t)))
    # the algorithm's sums only: the engine's evaluation-count sums are not uploads of the algorithm
    assert len(cap.records) == 2 and [r.round_index for r in cap.records] == [0, 1]
    assert all(r.key != "eval" for r in cap.records)
    assert cap.records[1].transcript.protocol == protocol and cap.records[1].released is not None
    assert set(cap.records[0].contributions) == {0, 1, 2}
    assert all(t.device.type == "cpu" for t in cap.records[0].broadcast.values())
    assert progress == [(1, 2), (2, 2)]
    assert cap.algorithm is not None and cap.setting is not None and cap.setting.num_clients == 3
    # the final metrics are the engine's selected round's, the same as a plain run of the same seed
    assert cap.result is not None and cap.result.final is not None
    final = ref.final.overall
    assert cap.metrics["test_acc"] == pytest.approx(final["test_acc"], abs=1e-9)
    assert cap.metrics["val_acc"] == pytest.approx(final["val_acc"], abs=1e-9)
    # the released model is the last broadcast, and round 1 started from round 0's result
    assert set(cap.final_broadcast) == set(cap.records[0].broadcast)
    assert any(
        not torch.equal(cap.records[0].broadcast[k], cap.records[1].broadcast[k]) for k in cap.final_broadcast
    )


def test_capture_passes_max_rounds_and_extra_hooks():
    from securefgl.api import load_federated_graph

    cfg = _config("plaintext", rounds=4)
    fg = load_federated_graph(cfg)
    seen: list[str] = []
    extra = RunHooks(on_aggregate=lambda ev: seen.append(ev.key))
    cap = capture_run(cfg, fg, 0, max_rounds=2, hooks=extra)
    assert [r.round_index for r in cap.records] == [0, 1]
    assert len(cap.result.rounds) == 2
    assert "eval" in seen  # the extra observer sees every sum, evaluation sums included
    assert len([k for k in seen if k != "eval"]) == len(cap.records)


def test_an_aborted_run_keeps_its_records_on_the_exception():
    from securefgl.api import load_federated_graph
    from securefgl.errors import ProtocolError

    # no client completes share_keys: the protocol aborts, and the first aborted round ends the run
    cfg = _config("secagg", dropout=0.9, max_failed_rounds=1)
    fg = load_federated_graph(cfg)
    with pytest.raises(ProtocolError) as info:
        capture_run(cfg, fg, 0)
    cap = info.value.captured
    assert cap.records and cap.records[-1].released is None
    assert cap.records[-1].error and cap.records[-1].error.startswith(type(info.value).__name__)
    assert set(cap.records[-1].contributions) == {0, 1, 2}
