"""The run loop end to end on a small synthetic graph, with the real plaintext and SecAgg protocols."""

from __future__ import annotations

import json
from importlib.metadata import version

import pytest
import torch

import securefgl
from securefgl.algorithms.base import Setting
from securefgl.algorithms.baselines.fedavg import FedAvg
from securefgl.algorithms.registry import check_combination, find_problems, register_algorithm
from securefgl.config import RunConfig, load_run_config
from securefgl.errors import ConfigError, NonFiniteError, TrainingError, UnsupportedCombinationError
from securefgl.protocols.base import Sums
from securefgl.training.device import resolve_device


def small(tmp_path=None, **sections):
    cfg = {
        "dataset": {
            "name": "csbm",
            "csbm": {"num_nodes": 600, "num_classes": 3, "num_features": 16, "avg_degree": 8.0},
        },
        "partition": {"method": "louvain", "clients": 5, "cache": False},
        "protocol": {"name": "plaintext"},
        "model": {"hidden": 16},
        "train": {"rounds": 4, "local_epochs": 2},
        "output": {"save": tmp_path is not None, "dir": str(tmp_path) if tmp_path else None},
    }
    for k, v in sections.items():
        cfg[k] = {**cfg.get(k, {}), **v} if isinstance(v, dict) else v
    return cfg


def test_results_folder(tmp_path):
    out = tmp_path / "run"
    res = securefgl.run(small(out), seeds=[0, 1])
    assert res.output_dir == out
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["status"] == "ok"
    assert [s["seed"] for s in metrics["seeds"]] == [0, 1]
    rounds = metrics["seeds"][0]["rounds"]
    assert len(rounds) == 4 and all(r["metrics"]["test_acc"] is not None for r in rounds)
    assert rounds[0]["bytes_up"] > 0 and rounds[0]["bytes_down"] > 0
    assert set(rounds[0]["bytes_up_per_client"]) == {str(i) for i in range(5)}
    assert set(metrics["summary"]["test_acc"]) == {"mean", "std"}
    assert metrics["libraries"]["torch"] == version("torch")  # seeded figures move with the libraries
    lines = (out / "clients.csv").read_text().strip().splitlines()
    assert len(lines) == 1 + 2 * 5 and lines[0].startswith("seed,client,num_nodes")
    assert (out / "plot.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    again = load_run_config(out / "config.toml")
    assert again == res.config
    mean, std = res.metric("test_acc")
    assert 0.0 <= mean <= 1.0 and std >= 0.0
    assert res.seeds[0].summary()["test_acc"] != res.seeds[1].summary()["test_acc"] or std == 0.0


def test_grid_upload_makes_every_protocol_give_the_same_run():
    """Uploads rounded onto the grid by the clients: plaintext, SecAgg and SecAgg+ runs agree to the bit."""
    runs = {
        p: securefgl.run(small(), protocol={"name": p}, train={"rounds": 4}).seeds[0]
        for p in ("plaintext", "secagg", "secagg+")
    }
    ref = runs["plaintext"]
    for name, other in runs.items():
        assert [r.loss for r in other.rounds] == [r.loss for r in ref.rounds], name
        assert [r.metrics for r in other.rounds] == [r.metrics for r in ref.rounds], name
    assert len({r.loss for r in ref.rounds}) > 1  # it trained


def test_secagg_matches_plaintext_without_grid_upload():
    """Left to the protocol's own (OS-seeded) rounding, SecAgg still gives the plaintext accuracy within
    quantisation error: <= 0.2 points."""
    no_grid = {"grid_upload": False}
    plain = securefgl.run(small(), protocol=no_grid, train={"rounds": 6})
    secure = securefgl.run(small(), protocol={"name": "secagg", **no_grid}, train={"rounds": 6})
    for a, b in zip(plain.seeds[0].rounds, secure.seeds[0].rounds, strict=True):
        assert abs(a.metrics["val_acc"] - b.metrics["val_acc"]) <= 0.002
        assert abs(a.metrics["test_acc"] - b.metrics["test_acc"]) <= 0.002
    assert secure.seeds[0].crypto_seconds > 0
    assert abs(plain.metric("test_acc")[0] - secure.metric("test_acc")[0]) <= 0.002


@register_algorithm(force=True)
class _NaNAtRound2(FedAvg):
    """FedAvg whose client 1 reports a NaN loss in round 2 (a real algorithm run, not a mock)."""

    name = "test-nan-fedavg"

    def client_steps(self, clients, rs):
        out = super().client_steps(clients, rs)
        if rs.round == 2:
            for c in clients:
                if c.id == 1:
                    c.record_loss(float("nan"))
        return out


def test_nan_loss_names_client_and_round_and_leaves_partial_metrics(tmp_path):
    with pytest.raises(NonFiniteError, match=r"client 1 .* round 2") as info:
        securefgl.run(small(tmp_path), algorithm={"name": "test-nan-fedavg"})
    assert isinstance(info.value, TrainingError)
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    assert metrics["status"] == "failed" and "client 1" in metrics["error"]
    assert len(metrics["seeds"][0]["rounds"]) == 2  # rounds 0 and 1 completed and were written


@register_algorithm(force=True)
class _InfUploadAtRound1(FedAvg):
    """FedAvg whose client 0 uploads one infinite weight in round 1, with a finite loss."""

    name = "test-inf-upload-fedavg"

    def client_steps(self, clients, rs):
        out = super().client_steps(clients, rs)
        if rs.round == 1:
            upload = dict(out[0])
            name = next(k for k, v in upload.items() if torch.as_tensor(v).is_floating_point())
            bad = torch.as_tensor(upload[name]).clone()
            bad.view(-1)[3] = float("-inf")
            upload[name] = bad
            out = {**out, 0: upload}
        return out


def test_a_non_finite_upload_names_the_block_client_and_round():
    with pytest.raises(NonFiniteError, match=r"upload block '.+' of client 0 is not finite in round 1"):
        securefgl.run(small(), algorithm={"name": "test-inf-upload-fedavg"})


@register_algorithm(force=True)
class _Stasher(FedAvg):
    name = "test-stash-fedavg"

    def client_step(self, client, rs):  # pragma: no cover - replaced below
        raise AssertionError

    def client_steps(self, clients, rs):
        self.last_clients = clients  # the engine must refuse this: the server side could read it
        return super().client_steps(clients, rs)


def test_algorithm_is_sealed_during_a_run():
    with pytest.raises(TrainingError, match="last_clients"):
        securefgl.run(small(), algorithm={"name": "test-stash-fedavg"})


@register_algorithm(force=True)
class _SumsOnly(FedAvg):
    name = "test-sums-only"

    def server_step(self, server, sums, rs):
        server.setdefault("seen", []).append(type(sums).__name__)
        return super().server_step(server, sums, rs)

    def run_report(self, server):
        return {"seen": server["seen"]}


def test_server_step_receives_only_sums():
    res = securefgl.run(small(), algorithm={"name": "test-sums-only"}, protocol={"name": "secagg"})
    assert res.seeds[0].report["seen"] == [Sums.__name__] * 4


def test_client_sampling_is_seeded_and_counted():
    cfg = small(train={"rounds": 5, "clients_per_round": 3})
    a = securefgl.run(cfg).seeds[0].rounds
    b = securefgl.run(cfg).seeds[0].rounds
    c = securefgl.run(cfg, seeds=[7]).seeds[0].rounds
    assert all(len(r.clients) == 3 for r in a)
    assert [r.clients for r in a] == [r.clients for r in b]
    assert [r.clients for r in a] != [r.clients for r in c]
    assert all(set(r.bytes_up) == set(r.clients) for r in a)


def test_early_stopping_and_best_round():
    res = securefgl.run(small(train={"rounds": 30, "lr": 1e-7, "patience": 2}))
    s = res.seeds[0]
    assert s.stopped_early == {"train": 2}
    assert len(s.rounds) == 3
    assert s.final is not None and s.final.round == 0


def test_dropouts_are_recovered_and_counted():
    res = securefgl.run(small(protocol={"name": "secagg", "dropout": 0.4}, train={"rounds": 3}))
    s = res.seeds[0]
    assert s.num_dropped == 3 * 2
    assert all(len(r.dropped) == 2 for r in s.rounds)
    assert s.final.overall["test_acc"] > 0.4  # 3 classes: chance is 1/3


def test_local_and_centralized_do_not_communicate():
    for name in ("local", "centralized"):
        s = securefgl.run(small(algorithm={"name": name})).seeds[0]
        assert s.bytes_up == 0 and s.bytes_down == 0
        assert s.final.overall["test_acc"] > 0.5


def test_unsupported_combination_lists_every_problem_before_loading_data():
    with pytest.raises(UnsupportedCombinationError) as info:
        check_combination("fedavgg", "secaggg", "gcnn", "Cora", dropout=1.5)
    text = str(info.value)
    for needle in (
        "unknown algorithm 'fedavgg'",
        "unknown protocol 'secaggg'",
        "unknown model 'gcnn'",
        "dropout",
    ):
        assert needle in text
    assert "fedavg" in text and "secagg" in text and "gcn" in text  # valid choices are named
    assert len(info.value.problems) == 4
    problems = find_problems("local", "secagg", "gcn", "Cora", dropout=0.2)
    assert len(problems) == 1 and "never communicates" in problems[0].reason
    assert find_problems("adafgl", "secagg+dp", "gcn", "Cora")[0].remedy.startswith("use protocol 'secagg'")
    assert find_problems("fedavg", "secagg+dp", "gcn", "Cora") == []  # DP-FedAvg deltas
    (weights,) = find_problems("fedavg", "secagg+dp", "gcn", "Cora", options={"upload": "weights"})
    assert "marks none" in weights.reason


def test_config_errors():
    with pytest.raises(ConfigError, match="more clients per round"):
        RunConfig.from_mapping(small(train={"clients_per_round": 6}))
    with pytest.raises(ConfigError, match="unknown device 'tpu'"):
        RunConfig.from_mapping(small(device="tpu"))
    with pytest.raises(ConfigError, match="unknown key 'train.roundz'"):
        RunConfig.from_mapping(small(train={"roundz": 3}))
    with pytest.raises(ConfigError, match="unknown key .*mu"):
        RunConfig.from_mapping(small(algorithm={"name": "fedavg", "options": {"mu": 0.1}}))
    assert resolve_device("cpu") == torch.device("cpu")
    if not torch.cuda.is_available():
        with pytest.raises(ConfigError, match="CUDA is not available"):
            resolve_device("cuda:0")


def test_fedavg_server_step_divides_numerator_by_denominator():
    cfg = RunConfig.from_mapping(small())
    setting = Setting(16, 3, 5, 600, 600, cfg.model, cfg.train)
    alg = FedAvg(setting)
    server = alg.init_server(torch.Generator().manual_seed(0))
    shapes = {n: v.shape for n, v in server["params"].items()}
    num = {f"w.{n}": torch.full(s, 6.0) for n, s in shapes.items()}
    sums = Sums({**num, "n": torch.tensor([4])}, num_contributors=2)
    out = alg.server_step(server, sums, None)
    assert all(torch.allclose(v, torch.full_like(v, 1.5)) for v in out.values())
