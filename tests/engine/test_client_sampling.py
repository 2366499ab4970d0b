"""Client sampling (``train.client_sampling``): the server's fixed-size draw and the clients' own Poisson
coins, and the DP accountant told which one ran."""

from __future__ import annotations

import pytest

import securefgl
from securefgl.config import RunConfig, build
from securefgl.engine.run_protocol import build_run_protocol
from securefgl.errors import ConfigError


def _config(sampling: str, protocol: str = "plaintext", rounds: int = 12) -> dict:
    dp = (
        {"dp_min_contributors": 2, "dp_epsilon": 8.0, "dp_clip_norm": 1.0} if protocol.endswith("+dp") else {}
    )
    return {
        "dataset": {
            "name": "csbm",
            "csbm": {"num_nodes": 300, "num_classes": 3, "num_features": 8, "avg_degree": 6.0},
        },
        "partition": {"method": "random", "clients": 6, "cache": False},
        "protocol": {"name": protocol, "options": dp},
        "model": {"hidden": 8},
        "train": {
            "rounds": rounds,
            "local_epochs": 1,
            "clients_per_round": 3,
            "client_sampling": sampling,
            "eval_every": rounds,
        },
        "output": {"save": False},
    }


def _cohorts(res) -> list[list[int]]:
    return [sorted(r.clients) for r in res.seeds[0].rounds]


def test_fixed_sampler_draws_exactly_the_cohort_size():
    res = securefgl.run(_config("fixed"), seeds=[0])
    cohorts = _cohorts(res)
    assert len(cohorts) == 12 and all(len(c) == 3 for c in cohorts)


def test_poisson_cohorts_vary_in_size_and_repeat_with_the_seed():
    a = _cohorts(securefgl.run(_config("poisson"), seeds=[0]))
    b = _cohorts(securefgl.run(_config("poisson"), seeds=[0]))
    c = _cohorts(securefgl.run(_config("poisson"), seeds=[1]))
    assert a == b  # the clients' coins come from the run seed: reproducible
    assert a != c
    sizes = {len(x) for x in a}
    assert len(sizes) > 1, f"12 Poisson rounds with q=0.5 gave one cohort size only: {sizes}"
    assert all(set(x) <= set(range(6)) for x in a)


def test_dp_accountant_amplifies_only_for_the_clients_own_coins():
    fixed = build(RunConfig, _config("fixed", "secagg+dp"))
    poisson = build(RunConfig, _config("poisson", "secagg+dp"))
    dp_fixed, dp_poisson = build_run_protocol(fixed, 3, 6), build_run_protocol(poisson, 3, 6)
    assert dp_fixed.sampler == "server" and dp_poisson.sampler == "poisson"
    assert dp_fixed.accounting_rate == 1.0  # a cohort the server draws is never reported as amplified
    assert dp_poisson.accounting_rate == 0.5


def test_a_library_run_with_rounds_below_the_smallest_released_sum_is_refused_before_training():
    config = _config("fixed", "secagg+")
    config["train"]["clients_per_round"] = 1
    with pytest.raises(ConfigError, match="fewer than 2 inputs .* 1 client"):
        securefgl.run(config, seeds=[0])
    assert build_run_protocol(build(RunConfig, config), 2, 6).min_contributors == 2
