"""Every protocol in a deployment: ``plaintext`` and ``ckks`` give the simulation's numbers to the bit, and
under ``+dp`` each client noises its own upload while the server accounts, as in the simulation.

The DP noise comes from each client's own OS randomness, so a ``+dp`` run's numbers are not the simulation's to
the bit; its privacy statement (epsilon, noise multiplier, rounds, minimum contributors) is, because it depends on
the public configuration and on how many sums were released only.
"""

from __future__ import annotations

import math

import pytest
import torch

import securefgl
from securefgl.api import load_federated_graph
from securefgl.config import RunConfig
from securefgl.deploy.client import ClientHalf
from securefgl.deploy.export import export_clients, load_client_file
from securefgl.deploy.parties import check_deployable
from securefgl.deploy.server import DeployedRun, LoopbackTransport
from securefgl.errors import UnsupportedCombinationError

DP = {"dp_min_contributors": 3, "dp_clip_norm": 1.0, "dp_epsilon": 8.0}


def _config(data_root: str, name: str = "secagg+dp", options: dict | None = None) -> RunConfig:
    return RunConfig.from_mapping(
        {
            "dataset": {"name": "cora", "root": data_root},
            "partition": {"clients": 4},
            "protocol": {"name": name, "options": dict(DP if options is None else options)},
            "train": {"rounds": 2, "batched": False},
            "model": {"dropout": 0.0},
            "output": {"save": False},
            "device": "cpu",
        }
    )


def _halves(config: RunConfig, folder) -> dict[int, ClientHalf]:
    export_clients(load_federated_graph(config), folder)
    return {i: ClientHalf(load_client_file(folder / f"client-{i}.pt")) for i in range(4)}


def test_deployed_secagg_plus_dp_gives_the_simulations_privacy_statement(cora_root, tmp_path) -> None:
    torch.set_num_threads(1)
    config = _config(cora_root)
    got = DeployedRun(config, 0, LoopbackTransport(_halves(config, tmp_path))).execute()
    ref = securefgl.run(config).seeds[0]
    keys = ("epsilon", "delta", "noise_multiplier", "rounds", "min_contributors", "sample_rate", "accountant")
    for g, r in zip(got.rounds, ref.rounds, strict=True):
        assert g.privacy is not None and r.privacy is not None
        assert {k: g.privacy[k] for k in keys} == {k: r.privacy[k] for k in keys}
    assert got.rounds[-1].privacy["epsilon"] <= 8.0 * (1 + 1e-6)
    assert got.final is not None and math.isfinite(got.final.overall["test_acc"])
    # Noise was added: the noised model is not the plain secagg+ model of the same seed.
    plain = DeployedRun(
        _config(cora_root, "secagg+", {}), 0, LoopbackTransport(_halves(config, tmp_path / "p"))
    )
    assert [r.loss for r in plain.execute().rounds][1:] != [r.loss for r in got.rounds][1:]


def test_too_few_invited_clients_for_the_noise_are_refused_before_anything_is_sent(
    cora_root, tmp_path
) -> None:
    config = _config(cora_root, options={**DP, "dp_min_contributors": 5})
    got = DeployedRun(config, 0, LoopbackTransport(_halves(config, tmp_path))).execute()
    aborted = [why for r in got.rounds for why in r.excluded.values()]
    assert aborted and all("min_contributors=5" in why for why in aborted)


@pytest.mark.parametrize("name", ["plaintext", "ckks"])
def test_deployed_plaintext_and_ckks_are_bit_identical_to_the_simulation(cora_root, tmp_path, name) -> None:
    torch.set_num_threads(1)
    config = _config(cora_root, name, {})
    got = DeployedRun(config, 0, LoopbackTransport(_halves(config, tmp_path))).execute()
    ref = securefgl.run(config).seeds[0]
    assert [r.metrics for r in got.rounds] == [r.metrics for r in ref.rounds]
    assert [r.loss for r in got.rounds] == [r.loss for r in ref.rounds]
    assert got.final is not None and got.final.overall == ref.final.overall


def test_an_unknown_protocol_is_refused_with_the_deployable_list() -> None:
    with pytest.raises(
        UnsupportedCombinationError, match="secagg, secagg\\+, ckks, plaintext, each optionally with \\+dp"
    ):
        check_deployable("threshold-ckks")
