"""Toy federations for the engine's contract tests: every registered algorithm, a few seconds each."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from securefgl.config import RunConfig, build
from securefgl.data import make_csbm, partition_graph

#: Per algorithm: options that keep a 3-client toy run fast, and the partition it needs.
FAST: dict[str, dict] = {
    "opfgl": {"condense_loops": 20, "max_iters": 20, "eval_every": 10, "patience": 2},
    "fedspray": {"proxy_dim": 8},
    "adafgl": {"epochs": 3, "hidden": 8},
    "gap": {"noise": "insecure-seeded"},  # reproducible DP noise: the runs compared must draw the same
}
PARTITION = {"fedlog": "fedlog"}


@pytest.fixture
def toy_config() -> Callable[..., RunConfig]:
    """``toy_config(name, patience=None, **train)``: a 4-round plaintext run of ``name`` evaluated every round
    (``train`` overrides further ``[train]`` settings)."""

    def make(name: str, patience: int | None = None, **train: Any) -> RunConfig:
        return build(
            RunConfig,
            {
                "protocol": {"name": "plaintext"},
                "algorithm": {"name": name, "options": FAST.get(name, {})},
                "model": {"name": "gcn", "hidden": 8, "layers": 2, "dropout": 0.5},
                "train": {
                    "rounds": 4,
                    "local_epochs": 1,
                    "lr": 0.05,
                    "eval_every": 1,
                    "patience": patience,
                    **train,
                },
                "device": "cpu",
            },
        )

    return make


@pytest.fixture
def toy_graph():
    """``toy_graph(name)``: a 240-node CSBM split among 3 clients the way ``name`` needs."""

    def make(name: str):
        data = make_csbm(num_nodes=240, num_classes=3, num_features=8, avg_degree=6.0, seed=3)
        return partition_graph(data, PARTITION.get(name, "random"), 3, seed=0, cache=False)

    return make
