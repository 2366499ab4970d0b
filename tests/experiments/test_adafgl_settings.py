"""The settings of AdaFGL's Table II cells (securefgl.experiments.adafgl)."""

from __future__ import annotations

import pytest

from securefgl.errors import ConfigError
from securefgl.experiments.adafgl import PARTITIONS, SPLITS, partition_params, run_config


def test_table_one_ratios() -> None:
    # spec §5.1: homophilous transductive 20/40/40, heterophilous transductive 60/20/20
    hetero = (0.6, 0.2, 0.2)
    expected = {
        "cora": (0.2, 0.4, 0.4),
        "citeseer": (0.2, 0.4, 0.4),
        "chameleon": hetero,
        "squirrel": hetero,
        "actor": hetero,
    }
    assert dict(SPLITS) == expected
    assert all(sum(r) == pytest.approx(1.0) for r in SPLITS.values())


def test_partition_params_of_the_two_schemes() -> None:
    assert PARTITIONS == ("louvain", "structure-noniid")
    assert partition_params("louvain") == {"assign": "greedy"}
    assert partition_params("structure-noniid") == {"p_homo": 0.5, "rho": 0.5, "anchor": "uniform"}
    assert partition_params("structure-noniid", injection="code") == {
        "p_homo": 0.5,
        "pair_rate": 0.001,
        "isolated_rate": 0.5,
    }
    assert partition_params("louvain", injection="code") == {"assign": "greedy"}
    with pytest.raises(ConfigError, match="unknown injection 'paper'; valid: text, code"):
        partition_params("structure-noniid", injection="paper")
    a = partition_params("louvain")
    a["assign"] = "other"
    assert partition_params("louvain") == {"assign": "greedy"}, "each call returns a fresh dict"


def test_an_unknown_scheme_lists_the_valid_ones() -> None:
    with pytest.raises(ConfigError, match="unknown split 'metis'; valid: louvain, structure-noniid"):
        partition_params("metis")
    with pytest.raises(ConfigError, match="unknown split"):
        run_config("cora", "metis", "plaintext")


def test_run_config_defaults_are_the_reproduction_cell() -> None:
    cfg = run_config("chameleon", "structure-noniid", "secagg")
    assert cfg.partition.method == "structure-noniid"
    assert cfg.partition.clients == 10 and cfg.partition.seed == 0
    assert tuple(cfg.partition.split) == (0.6, 0.2, 0.2)
    assert cfg.partition.params == {"p_homo": 0.5, "rho": 0.5, "anchor": "uniform"}
    assert cfg.protocol.name == "secagg"
    assert cfg.algorithm.name == "adafgl" and cfg.algorithm.options == {}
    assert (cfg.model.name, cfg.model.hidden, cfg.model.layers, cfg.model.dropout) == ("gcn", 64, 2, 0.5)
    t = cfg.train
    assert (t.rounds, t.local_epochs, t.lr, t.weight_decay) == (100, 5, 0.01, 0.0)
    assert (t.optimizer_state, t.eval_every) == ("reset", 1)
    assert cfg.device == "cpu" and cfg.dataset.root is None


def test_run_config_takes_every_override() -> None:
    cfg = run_config(
        "cora",
        "louvain",
        "plaintext",
        {"alpha": 0.3},
        clients=5,
        ratios=[0.5, 0.25, 0.25],
        root="/data",
        rounds=7,
        local_epochs=2,
        weight_decay=5e-4,
        optimizer_state="persistent",
        eval_every=3,
        device="cpu",
    )
    assert cfg.algorithm.options == {"alpha": 0.3}
    assert cfg.partition.clients == 5 and tuple(cfg.partition.split) == (0.5, 0.25, 0.25)
    assert cfg.dataset.root == "/data"
    t = cfg.train
    assert (t.rounds, t.local_epochs, t.weight_decay, t.optimizer_state, t.eval_every) == (
        7,
        2,
        5e-4,
        "persistent",
        3,
    )


def test_run_config_needs_ratios_for_a_dataset_without_a_table_one_split() -> None:
    with pytest.raises(ConfigError, match="no Table I split for 'pubmed'.*cora, citeseer, chameleon"):
        run_config("pubmed", "louvain", "plaintext")
    cfg = run_config("pubmed", "louvain", "plaintext", ratios=(0.2, 0.4, 0.4))
    assert tuple(cfg.partition.split) == (0.2, 0.4, 0.4)
