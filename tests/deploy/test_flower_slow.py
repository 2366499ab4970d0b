"""Deployed runs over real Flower processes (slow: Flower starts one ClientApp process per message).

- ``securefgl deploy`` (5 SuperNodes, TLS, SuperNode auth, secagg+) gives bit-identical metrics to ``securefgl
  run`` with the same config and seed.
- SIGKILL of one SuperNode (and its worker) when it receives the masked-input request: the round completes over
  the survivors, the run finishes, and the node restarted with its registered key rejoins at a later round.
- Ctrl-C (SIGINT) of ``securefgl deploy`` while the federation runs leaves no process behind.
"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from securefgl.deploy.launcher import LocalFederation, _descendants

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("flower-superlink") is None, reason="flwr is not installed"),
]

SAME = [
    "--set",
    "train.batched=false",
    "--set",
    "model.dropout=0.0",
    "--set",
    "device=cpu",
    "--set",
    "threads=1",
]


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-c", "from securefgl.cli import main; main()", *args]


def _alive(pids: set[int]) -> set[int]:
    out = set()
    for pid in pids:
        try:
            if Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z":
                out.add(pid)
        except (FileNotFoundError, IndexError):
            continue
    return out


def test_deploy_fedavg_cora_is_bit_identical_to_run(cora_root, tmp_path) -> None:
    common = [
        "--clients",
        "5",
        "--protocol",
        "secagg+",
        "--dataset",
        "cora",
        "--root",
        cora_root,
        "--rounds",
        "2",
    ]
    subprocess.run(_cli("run", *common, *SAME, "--output", str(tmp_path / "sim"), "--quiet"), check=True)
    # A simulated round carries the previous round's evaluation counts in its training sum; a deployed one runs
    # them as a sum of their own inside its Flower steps. The same run with the rider off sends what the
    # deployment sends.
    apart = ["--set", "train.eval_in_next_sum=false", "--output", str(tmp_path / "apart"), "--quiet"]
    subprocess.run(_cli("run", *common, *SAME, *apart), check=True)
    subprocess.run(
        _cli("deploy", *common, *SAME, "--output", str(tmp_path / "dep"), "--workdir", str(tmp_path / "w")),
        check=True,
        timeout=1500,
    )
    sim, apart, dep = (
        json.loads((tmp_path / name / "metrics.json").read_text())["seeds"][0]
        for name in ("sim", "apart", "dep")
    )
    for other in (sim, apart):
        assert dep["final"]["overall"] == other["final"]["overall"]
        assert [r["metrics"] for r in dep["rounds"]] == [r["metrics"] for r in other["rounds"]]
    # `securefgl deploy` gives the clients identities, so each signs its advertised keys (Ed25519: 64 bytes per
    # client per sum); the simulated run has none. Every other byte of the uploads is the same.
    signatures = 64 * 5
    assert [r["bytes_up"] - signatures for r in dep["rounds"]] == [r["bytes_up"] for r in apart["rounds"]]
    assert [r["eval_bytes_up"] - signatures for r in dep["rounds"]] == [
        r["eval_bytes_up"] for r in apart["rounds"]
    ]
    # with the rider, round 1's evaluation costs round 2's training sum a few bytes instead of a sum of its own
    assert sim["rounds"][0]["bytes_up"] == apart["rounds"][0]["bytes_up"]
    assert (
        0
        < sim["rounds"][1]["bytes_up"] - apart["rounds"][1]["bytes_up"]
        < apart["rounds"][0]["eval_bytes_up"]
    )


@pytest.mark.parametrize("stage", ["masked_input", "unmasking"])
def test_sigkill_during_a_stage_is_a_dropout_and_the_node_rejoins(cora_root, tmp_path, stage) -> None:
    from securefgl.api import load_federated_graph
    from securefgl.config import RunConfig, to_dict
    from securefgl.deploy.export import export_clients

    cfg = RunConfig.from_mapping(
        {
            "dataset": {"name": "cora", "root": cora_root},
            "partition": {"clients": 5},
            "protocol": {"name": "secagg+"},
            "train": {"rounds": 3, "batched": False},
            "model": {"dropout": 0.0},
            "output": {"plot": False},
            "device": "cpu",
        }
    )
    export_clients(load_federated_graph(cfg), tmp_path / "data")
    with LocalFederation(tmp_path / "w", tmp_path / "data", 5) as fed:
        fed.start()
        run_id = fed.submit(fed.write_app(to_dict(cfg), tmp_path / "out", stage_timeout=90))
        log = fed.logs / "worker-3.log"
        deadline = time.monotonic() + 900
        while f"main:{stage}" not in (log.read_text() if log.exists() else ""):
            assert time.monotonic() < deadline, f"node 3 never reached {stage}"
            time.sleep(0.2)
        fed.kill_node(3)  # SIGKILL: the SuperNode and its worker
        fed.restart_node(3)  # the organisation restarts it with its registered key (retrying until admitted)
        assert fed.wait(run_id, 1500) == "finished:completed"
    seed = json.loads((tmp_path / "out" / "metrics.json").read_text())["seeds"][0]
    rounds = seed["rounds"]
    assert len(rounds) == 3 and seed["final"] is not None
    assert "3" in {str(k) for k in rounds[0]["dropped"]}
    assert any(3 in r["clients"] for r in rounds[1:]), "the restarted node never rejoined"
    assert "rejoined" in (tmp_path / "out" / "progress.log").read_text()


def test_ctrl_c_of_deploy_leaves_no_process(cora_root, tmp_path) -> None:
    proc = subprocess.Popen(
        _cli(
            "deploy",
            "--clients",
            "3",
            "--dataset",
            "cora",
            "--root",
            cora_root,
            "--rounds",
            "5",
            "--output",
            str(tmp_path / "o"),
            "--workdir",
            str(tmp_path / "w"),
        ),
        stderr=subprocess.PIPE,
        text=True,
    )
    seen: set[int] = set()
    assert proc.stderr is not None
    for line in proc.stderr:
        seen |= _descendants({proc.pid})
        if "SuperNodes up" in line:
            break
    time.sleep(5)
    seen |= _descendants({proc.pid})
    proc.send_signal(signal.SIGINT)
    proc.communicate(timeout=60)
    time.sleep(1)
    assert len(seen) > 5  # superlink, supernodes, workers, ...
    assert not _alive(seen), "processes outlived `securefgl deploy` after Ctrl-C"
