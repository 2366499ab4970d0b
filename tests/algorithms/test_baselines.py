"""The baselines: Centralized and FedAvg reach sane accuracy on Cora; FedProx, Local, FedAvg+FT behave."""

from __future__ import annotations

import math

import pytest
import torch

import securefgl
from securefgl.algorithms.base import Client, RoundState, Setting
from securefgl.algorithms.registry import create_algorithm, get_algorithm
from securefgl.config import RunConfig
from securefgl.data import make_csbm, partition_graph
from securefgl.errors import ConfigError


def cora(**sections):
    cfg = {
        "dataset": {"name": "Cora"},
        "partition": {"method": "louvain", "clients": 10},
        "protocol": {"name": "plaintext"},
        "output": {"save": False},
    }
    for k, v in sections.items():
        cfg[k] = {**cfg.get(k, {}), **v}
    return cfg


def test_centralized_gcn_on_cora_public_split(data_root):
    # Kipf & Welling's setting: public split (140 labels), lr 0.01, weight decay 5e-4, dropout 0.5, 200 epochs.
    res = securefgl.run(
        cora(
            algorithm={"name": "centralized"},
            partition={"method": "metis", "split": "public"},
            train={"rounds": 20, "local_epochs": 10, "weight_decay": 5e-4, "eval_every": 2},
        )
    )
    s = res.seeds[0]
    assert s.final.overall["test_acc_pooled"] > 0.78
    assert s.final.overall["test_acc"] > 0.78


def test_fedavg_on_cora_louvain(data_root):
    res = securefgl.run(cora(train={"rounds": 15}))
    s = res.seeds[0]
    assert s.final.overall["val_acc"] > 0.75
    assert s.final.overall["test_acc"] > 0.72
    assert s.bytes_up > 15 * 10 * 4 * 92_000  # every client uploads the whole model each round


@pytest.mark.slow
def test_fedavg_secagg_equals_plaintext_on_cora_three_seeds(data_root):
    plain = securefgl.run(cora(train={"rounds": 10}), seeds=[0, 1, 2])
    secure = securefgl.run(cora(protocol={"name": "secagg"}, train={"rounds": 10}), seeds=[0, 1, 2])
    for a, b in zip(plain.seeds, secure.seeds, strict=True):
        assert abs(a.final.overall["test_acc"] - b.final.overall["test_acc"]) <= 0.002


def _setup(algorithm: str, options=None, **train):
    data = make_csbm(num_nodes=400, num_classes=3, num_features=8, avg_degree=6.0, seed=0)
    fg = partition_graph(data, "louvain", 4, seed=0, cache=False)
    cfg = RunConfig.from_mapping(
        {"partition": {"clients": 4, "cache": False}, "model": {"hidden": 8, "dropout": 0.0}, "train": train}
    )
    setting = Setting(8, 3, 4, fg.num_nodes, fg.num_nodes, cfg.model, cfg.train, max_clients_per_round=4)
    alg = create_algorithm(algorithm, setting, options)
    ws: dict = {}
    clients = [Client(i, d, torch.Generator().manual_seed(i), workspace=ws) for i, d in enumerate(fg.clients)]
    return alg, clients


def test_fedavg_uploads_weighted_numerator_and_count():
    alg, clients = _setup("fedavg", local_epochs=1)
    server = alg.init_server(torch.Generator().manual_seed(0))
    bc = alg.initial_broadcast(server)
    rs = RoundState("train", 0, 0, tuple(c.id for c in clients), bc)
    schema = alg.schema(rs)
    out = alg.client_steps(clients, rs)
    for c in clients:
        n = c.num_train
        assert int(out[c.id]["n"][0]) == n
        for name in bc:
            w = out[c.id][f"w.{name}"] / max(n, 1)
            assert w.shape == bc[name].shape and bool(w.abs().max() <= 16.0)
        schema.validate(out[c.id])  # the contribution fits its declared schema
    uniform, clients_u = _setup("fedavg", {"weighting": "uniform"}, local_epochs=1)
    outu = uniform.client_steps(clients_u, rs)
    assert all(int(outu[c.id]["n"][0]) == 1 for c in clients_u)


def _csbm_run(**sections):
    base = {
        "dataset": {"name": "csbm", "csbm": {"num_nodes": 500, "num_classes": 3, "num_features": 8}},
        "partition": {"clients": 4, "cache": False},
        "protocol": {"name": "plaintext"},
        "train": {"rounds": 3},
        "output": {"save": False},
    }
    for k, v in sections.items():
        base[k] = {**base.get(k, {}), **v}
    return securefgl.run(base).seeds[0]


def test_fedprox_with_zero_mu_is_fedavg_and_positive_mu_differs():
    fedavg = _csbm_run()
    prox0 = _csbm_run(algorithm={"name": "fedprox", "options": {"mu": 0.0}})
    prox1 = _csbm_run(algorithm={"name": "fedprox", "options": {"mu": 1.0}})
    assert [r.loss for r in fedavg.rounds] == [r.loss for r in prox0.rounds]
    assert [r.loss for r in fedavg.rounds] != [r.loss for r in prox1.rounds]
    with pytest.raises(ConfigError, match="mu"):
        get_algorithm("fedprox")(None, {"mu": -1.0})


def test_fedavg_finetune_adds_a_local_phase():
    s = _csbm_run(algorithm={"name": "fedavg", "options": {"finetune_epochs": 5}}, train={"rounds": 2})
    assert [r.phase for r in s.rounds] == ["train", "train", "finetune"]
    assert s.final.phase == "finetune"
    assert s.rounds[-1].total_up == 0


def test_fedprox_finetune_keeps_its_proximal_term_towards_the_global_model():
    """Fine-tuning under FedProx pulls towards the last global model (it used to fail without a centre)."""
    run = {"train": {"rounds": 2}}
    loose = _csbm_run(algorithm={"name": "fedprox", "options": {"mu": 0.01, "finetune_epochs": 5}}, **run)
    tight = _csbm_run(algorithm={"name": "fedprox", "options": {"mu": 100.0, "finetune_epochs": 5}}, **run)
    assert [r.phase for r in loose.rounds] == ["train", "train", "finetune"]
    assert loose.final.phase == "finetune" and math.isfinite(loose.rounds[-1].loss)
    assert loose.rounds[-1].loss != tight.rounds[-1].loss


def test_local_models_differ_per_client():
    alg, clients = _setup("local", local_epochs=2)
    rs = RoundState("train", 0, 0, tuple(c.id for c in clients), {})
    assert alg.requests(rs) == ()
    alg.client_steps(clients, rs)
    ids, params = clients[0].workspace["local_params"]
    assert ids == tuple(c.id for c in clients)
    first = next(iter(params.values()))
    assert not torch.allclose(first[0], first[1])
    scores = alg.evaluate(clients, {}, rs)
    assert all(scores[c.id].shape == (c.num_nodes, 3) for c in clients)


def test_registry_refuses_silent_overwrite_and_lists_valid_names():
    from securefgl.algorithms import Algorithm, available_algorithms, register_algorithm

    assert {"fedavg", "fedprox", "local", "centralized"} <= set(available_algorithms())
    assert get_algorithm("FedAvg") is get_algorithm("fedavg")

    class Impostor(Algorithm):
        name = "fedavg"

    with pytest.raises(ConfigError, match="already registered"):
        register_algorithm(Impostor)
    assert get_algorithm("fedavg").__name__ == "FedAvg"
    with pytest.raises(ConfigError, match=r"unknown algorithm 'fedavgg'; valid choices: .*fedavg"):
        get_algorithm("fedavgg")

    class Nameless(Algorithm):
        pass

    with pytest.raises(ConfigError, match="no `name`"):
        register_algorithm(Nameless)


def test_phases_declare_the_shape_of_a_run():
    from securefgl.algorithms import Phase

    alg, _ = _setup("fedavg", {"finetune_epochs": 2}, rounds=7)
    phases = alg.phases(alg.setting.train)
    assert [(p.name, p.kind, p.rounds) for p in phases] == [
        ("train", "rounds", 7),
        ("finetune", "local", None),
    ]
    with pytest.raises(ConfigError, match="kind"):
        Phase("x", kind="sometimes")


def test_the_worked_example_in_the_algorithm_docstring_runs_under_secagg():
    import re

    import securefgl.algorithms.base as base

    code = re.search(r"\.\. code-block:: python\n\n(.*?)\n    # securefgl\.run", base.__doc__, re.S).group(1)
    namespace: dict = {}
    exec(compile("\n".join(line[4:] for line in code.splitlines()), "worked-example", "exec"), namespace)
    res = securefgl.run(
        {
            "dataset": {"name": "csbm", "csbm": {"num_nodes": 400, "num_classes": 3, "num_features": 8}},
            "partition": {"clients": 4, "cache": False},
            "algorithm": {"name": "tiny-fedavg"},
            "protocol": {"name": "secagg"},
            "train": {"rounds": 3},
            "output": {"save": False},
        }
    )
    assert res.seeds[0].final.overall["test_acc"] > 0.4
    assert res.seeds[0].bytes_up > 0


def test_fedavg_delta_upload_is_uniform_fedavg_and_marks_dp_blocks():
    """DP-FedAvg's delta form: w + mean(clip(w_k) - w) = mean(clip(w_k)), i.e. uniform FedAvg."""
    uniform = _csbm_run(algorithm={"name": "fedavg", "options": {"weighting": "uniform"}})
    delta = _csbm_run(algorithm={"name": "fedavg", "options": {"upload": "delta"}})
    for a, b in zip(uniform.rounds, delta.rounds, strict=True):
        assert abs(a.loss - b.loss) < 1e-4
    alg, clients = _setup("fedavg", {"upload": "delta"}, local_epochs=1)
    server = alg.init_server(torch.Generator().manual_seed(0))
    bc = alg.initial_broadcast(server)
    rs = RoundState("train", 0, 0, tuple(c.id for c in clients), bc)
    schema = alg.schema(rs)
    assert all(b.dp for b in schema.blocks if b.name.startswith("d.")) and not schema["n"].dp
    out = alg.client_steps(clients, rs)
    for c in clients:
        schema.validate(out[c.id])
        assert int(out[c.id]["n"][0]) == 1


def test_fedavg_under_a_dp_protocol_adds_noise_and_refuses_weight_uploads():
    dp = {"dp_min_contributors": 3, "dp_clip_norm": 1.0, "dp_insecure_seed": 0}
    loose = _csbm_run(protocol={"name": "plaintext+dp", "options": {**dp, "dp_noise_multiplier": 1e-3}})
    tight = _csbm_run(protocol={"name": "plaintext+dp", "options": {**dp, "dp_noise_multiplier": 5.0}})
    clean = _csbm_run(algorithm={"name": "fedavg", "options": {"upload": "delta"}})
    assert abs(loose.final.overall["test_acc"] - clean.final.overall["test_acc"]) < 0.05
    assert [r.loss for r in tight.rounds] != [r.loss for r in clean.rounds]
    # the guarantee is reported: a larger noise multiplier spends less epsilon; no DP, no figure
    assert 0 < tight.summary()["dp_epsilon"] < loose.summary()["dp_epsilon"]
    assert tight.rounds[-1].privacy["delta"] == tight.summary()["dp_delta"]
    assert "dp_epsilon" not in clean.summary()
    with pytest.raises(ConfigError, match="upload='weights' marks none"):
        _csbm_run(
            algorithm={"name": "fedavg", "options": {"upload": "weights"}},
            protocol={"name": "plaintext+dp", "options": {**dp, "dp_noise_multiplier": 1.0}},
        )
