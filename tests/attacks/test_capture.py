"""The audit's capture drives the engine's own round loop: same training, plus the records."""

from __future__ import annotations

import pytest

from securefgl.attacks._capture import capture_run
from securefgl.engine.config import RunConfig
from securefgl.engine.runner import run_seed


@pytest.mark.parametrize("protocol", ["plaintext", "secagg"])
def test_capture_matches_the_engine(protocol):
    from securefgl.api import load_federated_graph

    cfg = RunConfig.from_mapping(
        {
            "dataset": {"name": "csbm", "csbm": {"num_nodes": 200, "num_classes": 3, "num_features": 8}},
            "partition": {"method": "louvain", "clients": 3, "cache": False},
            "protocol": {"name": protocol},
            "model": {"name": "gcn", "hidden": 8},
            "train": {"rounds": 2, "local_epochs": 1},
            "output": {"save": False},
            "device": "cpu",
        }
    )
    fg = load_federated_graph(cfg)
    ref = run_seed(cfg, fg, 0, __import__("torch").device("cpu"))
    cap = capture_run(cfg, fg, 0)
    assert len(cap.records) == 2 and [r.round_index for r in cap.records] == [0, 1]
    assert cap.records[1].transcript.protocol == protocol and cap.records[1].released is not None
    assert set(cap.records[0].contributions) == {0, 1, 2}
    last = ref.evals[-1].overall
    assert cap.metrics["test_acc"] == pytest.approx(last["test_acc"], abs=1e-9)
    assert cap.metrics["val_acc"] == pytest.approx(last["val_acc"], abs=1e-9)
