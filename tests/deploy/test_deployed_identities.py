"""SecAgg's PKI in a deployment: each client signs with its own Ed25519 key and trusts its own directory.

Under ``adversary="semi-malicious"`` the protocol signs the advertised keys and runs the consistency round
(Bonawitz et al. 2017, §4), which needs every client's identity. The deployed halves get them the way an
organisation would configure them (``--identity-key``, ``--identities`` of the worker, files made by
:func:`~securefgl.deploy.pki.make_identity_keys`), never from the server's run config.
"""

from __future__ import annotations

import pytest
import torch
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

import securefgl
from securefgl.api import load_federated_graph
from securefgl.config import RunConfig
from securefgl.deploy.client import ClientHalf
from securefgl.deploy.export import export_clients, load_client_file
from securefgl.deploy.parties import client_protocol_options
from securefgl.deploy.pki import load_identity_key, make_identity_keys
from securefgl.deploy.server import DeployedRun, LoopbackTransport
from securefgl.deploy.wire import Request
from securefgl.errors import ConfigError
from securefgl.protocols.secaggplus import IdentityDirectory


def _config(data_root: str, identities: str | None = None) -> RunConfig:
    options: dict = {"adversary": "semi-malicious"}
    if identities is not None:
        options["identities"] = identities
    return RunConfig.from_mapping(
        {
            "dataset": {"name": "cora", "root": data_root},
            "partition": {"clients": 4},
            "protocol": {"name": "secagg+", "options": options},
            "train": {"rounds": 2, "batched": False},
            "model": {"dropout": 0.0},
            "output": {"save": False},
            "device": "cpu",
        }
    )


def test_signed_deployment_runs_the_consistency_round_and_matches_the_simulation(cora_root, tmp_path) -> None:
    torch.set_num_threads(1)
    ids = make_identity_keys(tmp_path / "ids", 4)
    assert oct(ids.private[0].stat().st_mode & 0o777) == "0o600"
    directory = IdentityDirectory.from_file(ids.directory)
    config = _config(cora_root, str(ids.directory))
    export_clients(load_federated_graph(config), tmp_path / "data")
    halves = {
        i: ClientHalf(
            load_client_file(tmp_path / "data" / f"client-{i}.pt"),
            identity=load_identity_key(ids.private[i]),
            directory=directory,
        )
        for i in range(4)
    }
    transport = LoopbackTransport(halves)
    got = DeployedRun(config, 0, transport).execute()
    # The simulation draws per-session identities itself; the sums, hence every metric, are the same.
    ref = securefgl.run(_config(cora_root)).seeds[0]
    assert [r.metrics for r in got.rounds] == [r.metrics for r in ref.rounds]
    assert got.final is not None and got.final.overall == ref.final.overall
    stages = {s["stage"] for _, b in transport.sent for s in Request.from_bytes(b).body.get("stages", [])}
    assert "consistency_check" in stages


def test_a_client_without_identity_refuses_a_run_that_needs_one(cora_root, tmp_path) -> None:
    config = _config(cora_root)
    export_clients(load_federated_graph(config), tmp_path)
    halves = {i: ClientHalf(load_client_file(tmp_path / f"client-{i}.pt")) for i in range(4)}
    # Every client refuses, in its own words: the run needs identities its worker was not given.
    with pytest.raises(ConfigError, match="refused the run's setup.*--identity-key and --identities"):
        DeployedRun(config, 0, LoopbackTransport(halves)).execute()


def test_the_server_cannot_choose_whose_keys_a_client_trusts(tmp_path) -> None:
    opts = {"adversary": "semi-malicious", "identities": str(tmp_path / "server.json"), "threshold": 3}
    assert client_protocol_options(opts) == {"adversary": "semi-malicious", "threshold": 3}


def test_identity_key_files_are_checked(tmp_path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        load_identity_key(tmp_path / "missing.pem")
    other = tmp_path / "p384.pem"
    other.write_bytes(
        ec.generate_private_key(ec.SECP384R1()).private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    with pytest.raises(ConfigError, match="not an Ed25519 key"):
        load_identity_key(other)


@pytest.mark.parametrize(
    ("name", "signed"), [("secagg+", True), ("secagg+dp", True), ("plaintext", False), ("ckks", False)]
)
def test_the_launcher_names_the_directory_only_for_protocols_that_sign(tmp_path, name, signed) -> None:
    import json
    import tomllib

    from securefgl.deploy.launcher import LocalFederation

    fed = LocalFederation(tmp_path, tmp_path / "data", 2)
    fed.identities = make_identity_keys(tmp_path / "ids", 2)
    app = fed.write_app({"protocol": {"name": name, "options": {"threshold": 2}}}, tmp_path / "out", 60.0)
    config = json.loads(
        tomllib.loads((app / "pyproject.toml").read_text())["tool"]["flwr"]["app"]["config"]["config"]
    )
    expected = {"threshold": 2, **({"identities": str(fed.identities.directory)} if signed else {})}
    assert config["protocol"]["options"] == expected
