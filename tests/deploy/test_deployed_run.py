"""The deployed run's two halves (server loop, client halves from exported files), over the in-process transport.

The frames are the ones Flower carries; here they are handed over in process, so the test is fast. The same
halves run over real SuperLink/SuperNode processes in ``test_flower_deploy.py``.
"""

from __future__ import annotations

import pytest
import torch

import securefgl
from securefgl.api import load_federated_graph
from securefgl.config import RunConfig, to_dict
from securefgl.deploy.client import ClientHalf
from securefgl.deploy.export import export_clients, load_client_file
from securefgl.deploy.server import DeployedRun, LoopbackTransport
from securefgl.deploy.wire import Reply, Request
from securefgl.errors import MalformedMessageError


def _config(data_root: str, clients: int = 5, rounds: int = 2, protocol: str = "secagg+") -> RunConfig:
    # The simulation trains its clients as one batch sharing a dropout generator; a deployment trains each client
    # alone. Without dropout and with sequential training both compute the same thing to the bit.
    return RunConfig.from_mapping(
        {
            "dataset": {"name": "cora", "root": data_root},
            "partition": {"clients": clients},
            "protocol": {"name": protocol},
            "train": {"rounds": rounds, "batched": False},
            "model": {"dropout": 0.0},
            "output": {"save": False},
            "device": "cpu",
        }
    )


def _halves(config: RunConfig, folder) -> dict[int, ClientHalf]:
    export_clients(load_federated_graph(config), folder)
    return {
        i: ClientHalf(load_client_file(folder / f"client-{i}.pt")) for i in range(config.partition.clients)
    }


def test_deployed_fedavg_is_bit_identical_to_securefgl_run(cora_root, tmp_path) -> None:
    torch.set_num_threads(1)
    config = _config(cora_root)
    ref = securefgl.run(config).seeds[0]
    got = DeployedRun(config, 0, LoopbackTransport(_halves(config, tmp_path))).execute()
    assert [r.metrics for r in got.rounds] == [r.metrics for r in ref.rounds]
    assert [r.loss for r in got.rounds] == [r.loss for r in ref.rounds]
    assert got.final is not None and got.final.overall == ref.final.overall


def test_client_file_holds_only_its_own_nodes(cora_root, tmp_path) -> None:
    config = _config(cora_root, clients=3)
    fg = load_federated_graph(config)
    export_clients(fg, tmp_path)
    for i in range(3):
        f = load_client_file(tmp_path / f"client-{i}.pt")
        assert f.client_id == i and f.data.num_nodes == fg.clients[i].num_nodes
        assert torch.equal(f.data.global_id, fg.clients[i].global_id)
        assert bool((f.data.fs_cross_owner != i).all())  # its cross edges lead to other owners only


def test_replayed_messages_are_refused_on_both_sides(cora_root, tmp_path) -> None:
    config = _config(cora_root, clients=3, rounds=1)
    halves = _halves(config, tmp_path)
    first = LoopbackTransport(halves)
    DeployedRun(config, 0, first).execute()
    old_request = next(
        b
        for c, b in first.sent
        if c == 0 and any(p["kind"] == "train" for p in Request.from_bytes(b).body.get("parts", []))
    )
    old_reply = next(b for c, b in first.received if c == 0 and Reply.from_bytes(b).seq > 2)
    second = DeployedRun(config, 0, LoopbackTransport(halves))
    second.execute()
    # a reply of the first run does not answer any request of the second
    with pytest.raises(MalformedMessageError, match="replayed"):
        Reply.from_bytes(old_reply).check(second.run_id, Reply.from_bytes(old_reply).seq, 0)
    # a request of the first run is refused by a client now in the second run
    answer = Reply.from_bytes(halves[0].handle(old_request))
    assert answer.error is not None and "refused" in answer.error


class _DyingTransport(LoopbackTransport):
    """Clients go silent (as a killed process does) when they receive a request of ``stage`` in round 0."""

    def __init__(self, halves, victims: set[int], stage: str) -> None:
        super().__init__(halves)
        self.victims, self.stage = victims, stage
        self.inputs: dict[int, dict] = {}
        self.killed = False
        self.main_stages: list[str] = []  # the stages of sum "main" requested, in order
        for c, half in self.halves.items():
            half._stage = self._recording_stage(c, half._stage)

    def _recording_stage(self, c, stage_fn):
        """Keep client ``c``'s round-0 input of sum "main" as its party starts (it leaves ``pending`` then)."""

        def stage(s):
            if s["key"] == "main" and s.get("first") and c not in self.inputs:
                self.inputs[c] = dict(self.halves[c].pending["main"].contribution)
            return stage_fn(s)

        return stage

    def exchange(self, requests, timeout=None):
        for blob in requests.values():
            req = Request.from_bytes(blob)
            stages = [s["stage"] for s in req.body.get("stages", []) if s["key"] == "main"]
            if stages and stages[0] not in self.main_stages[-1:]:
                self.main_stages.append(stages[0])
            if not self.killed and self.stage in stages:
                self.down |= self.victims
                self.killed = True
        return super().exchange(requests, timeout)


class _Recording(DeployedRun):
    def _close(self, run, record):
        sums = super()._close(run, record)
        if run.key == "main":
            self.released = getattr(self, "released", []) + [(tuple(run.participants), sums)]
        return sums


@pytest.mark.parametrize("stage", ["masked_input", "unmasking"])
def test_one_of_five_dropping_leaves_the_exact_sum_of_the_survivors(cora_root, tmp_path, stage) -> None:
    config = _config(cora_root, clients=5, rounds=2)
    transport = _DyingTransport(_halves(config, tmp_path), {3}, stage)
    run = _Recording(config, 0, transport)
    result = run.execute()
    assert len(result.rounds) == 2 and result.final is not None  # the run finished
    assert 3 in result.rounds[0].dropped and 3 not in result.rounds[1].clients
    _, sums = run.released[0]
    survivors = [0, 1, 2, 4] if stage == "masked_input" else [0, 1, 2, 3, 4]
    schema = next(iter(run.algorithm.requests(_round0(run)))).schema
    for block in schema.blocks:
        expected = sum(torch.as_tensor(transport.inputs[c][block.name]).double() for c in survivors)
        got = torch.as_tensor(sums[block.name]).double()
        assert float((got - expected).abs().max()) <= sums.max_abs_error.get(block.name, 1e-6), block.name


def _round0(run):
    from securefgl.algorithms.base import RoundState

    return RoundState("train", 0, 0, tuple(range(run.k_all)), run.server.broadcast, 1)


def test_two_of_three_dropping_aborts_the_round_cleanly_and_the_run_goes_on(cora_root, tmp_path) -> None:
    config = _config(cora_root, clients=3, rounds=2)
    transport = _DyingTransport(_halves(config, tmp_path), {1, 2}, "masked_input")
    run = _Recording(config, 0, transport)
    result = run.execute()
    first = result.rounds[0]
    reasons = " ".join(first.excluded.values())
    assert "ThresholdError" in reasons or "ReleaseRefusedError" in reasons  # typed, recorded
    assert not getattr(run, "released", [])  # nothing released to the server in the aborted round
    assert len(result.rounds) == 2  # the run went on to the next round


def test_the_server_half_runs_without_the_dataset(cora_root, tmp_path, monkeypatch) -> None:
    config = _config(cora_root, clients=3, rounds=1)
    halves = _halves(config, tmp_path)  # the clients' files exist; from here on no party may load the dataset

    def refuse(*args, **kwargs):
        raise AssertionError("the server half tried to load the dataset")

    import securefgl.api
    import securefgl.data

    monkeypatch.setenv("SECUREFGL_DATA", "")
    monkeypatch.setattr(securefgl.data, "load_dataset", refuse)
    monkeypatch.setattr(securefgl.data, "partition_graph", refuse)
    monkeypatch.setattr(securefgl.api, "load_federated_graph", refuse)
    result = DeployedRun(config, 0, LoopbackTransport(halves)).execute()
    assert result.final is not None


@pytest.mark.slow
@pytest.mark.parametrize("algorithm", ["fedstruct", "opfgl", "fedspray"])
def test_other_algorithms_deployed_are_bit_identical(cora_root, tmp_path, algorithm) -> None:
    # FedStruct's setup sends designated-recipient sums (cross-client products) through the server; O-pFGL has a
    # one-shot upload and a local phase; FedSpray trains its clients one by one under train.batched=false (its
    # batched step over five clients rounds differently in the 8th digit of a loss).
    from securefgl.config import to_dict

    raw = to_dict(_config(cora_root))
    raw["algorithm"] = {"name": algorithm}
    config = RunConfig.from_mapping(raw)
    ref = securefgl.run(config).seeds[0]
    got = DeployedRun(config, 0, LoopbackTransport(_halves(config, tmp_path))).execute()
    assert [r.metrics for r in got.rounds] == [r.metrics for r in ref.rounds]
    assert got.final is not None and got.final.overall == ref.final.overall


@pytest.mark.parametrize("extra", [{}, {"blend_alpha": 0.05, "blend_holdout": 0.5}])
def test_deployed_adafgl_blend_is_bit_identical(cora_root, tmp_path, extra) -> None:
    """AdaFGL's blend phase (its last secure sum picks the extractor's weight; with ``blend_alpha`` a second count
    vector, with ``blend_holdout`` counts on held-out nodes) deployed gives the simulation's run."""
    raw = to_dict(_config(cora_root))
    options = {"blend": "select", "epochs": 5, "dropout": 0.0, **extra}
    raw["algorithm"] = {"name": "adafgl", "options": options}
    config = RunConfig.from_mapping(raw)
    ref = securefgl.run(config).seeds[0]
    got = DeployedRun(config, 0, LoopbackTransport(_halves(config, tmp_path))).execute()
    assert [r.phase for r in got.rounds] == [r.phase for r in ref.rounds] and got.rounds[-1].phase == "blend"
    assert [r.metrics for r in got.rounds] == [r.metrics for r in ref.rounds]
    assert got.report["adafgl_blend"] == ref.report["adafgl_blend"]
    assert got.final is not None and got.final.overall == ref.final.overall


class _CountingTransport(LoopbackTransport):
    """Counts the exchanges (one Flower message per client each) and the step kinds of each."""

    def __init__(self, halves) -> None:
        super().__init__(halves)
        self.exchanges = 0

    def exchange(self, requests, timeout=None):
        self.exchanges += 1
        return super().exchange(requests, timeout)


@pytest.mark.parametrize(("protocol", "per_round"), [("secagg+", 4), ("plaintext", 1)])
def test_a_round_costs_the_protocol_stages_and_nothing_more(cora_root, tmp_path, protocol, per_round) -> None:
    """Training, the first stage of the sum and the evaluation of the last broadcast share one step: a secagg+
    round is its four stages (advertise, share, masked input, unmask), a plaintext round its one upload."""
    config = _config(cora_root, clients=3, rounds=3, protocol=protocol)
    transport = _CountingTransport(_halves(config, tmp_path))
    result = DeployedRun(config, 0, transport).execute()
    assert len(result.evals) == 3  # every round is evaluated
    # hello + setup + rounds * per_round + the last round's evaluation (per_round steps) + finish
    assert transport.exchanges == 2 + 3 * per_round + per_round + 1


@pytest.mark.parametrize(
    ("options", "steps"),
    [({"session_uses": 100}, 2), ({"session_uses": 100, "optimistic_uses": True}, 1)],
    ids=["resumed", "optimistic"],
)
def test_resumed_sessions_cut_a_deployed_round_to_two_steps_or_one(
    cora_root, tmp_path, options, steps
) -> None:
    """With ``session_uses``, a sum after its key agreement is two steps: the resume request (answered with the
    seed shares and the masked input, alongside training) and unmasking; with ``optimistic_uses`` as well it is
    one, as a plaintext round (the resume request answered with the input masked under the use's pairwise keys
    alone). The training and evaluation sums each agree on keys once (rounds 1 and 2); the metrics stay
    bit-identical to the simulation."""
    base = _config(cora_root, clients=3, rounds=4)
    config = RunConfig.from_mapping({**to_dict(base), "protocol": {"name": "secagg+", "options": options}})
    transport = _CountingTransport(_halves(config, tmp_path))
    got = DeployedRun(config, 0, transport).execute()
    # hello + setup + round 1 (4) + round 2 (the evaluation sum's key agreement, 4) + rounds 3-4 (`steps` each)
    # + the last round's evaluation (`steps`) + finish
    assert transport.exchanges == 2 + 4 + 4 + 3 * steps + 1
    ref = securefgl.run(config).seeds[0]
    assert [r.metrics for r in got.rounds] == [r.metrics for r in ref.rounds]
    assert [r.loss for r in got.rounds] == [r.loss for r in ref.rounds]


def test_a_dropout_in_an_optimistic_use_aborts_that_sum_and_the_next_agrees_on_fresh_keys(
    cora_root, tmp_path
) -> None:
    """All members or nothing: a client silent in a resumed optimistic sum aborts that round's sum with a typed
    error and no release; the run goes on with the survivors, whose next sum agrees on keys afresh."""
    base = _config(cora_root, clients=5, rounds=4)
    options = {"session_uses": 100, "optimistic_uses": True}
    config = RunConfig.from_mapping({**to_dict(base), "protocol": {"name": "secagg+", "options": options}})
    transport = _DyingTransport(_halves(config, tmp_path), {3}, "resume")
    run = _Recording(config, 0, transport)
    result = run.execute()
    assert len(result.rounds) == 4 and result.final is not None  # the run finished
    assert 3 in result.rounds[1].dropped and "ThresholdError" in " ".join(result.rounds[1].excluded.values())
    assert [p for p, _ in run.released] == [(0, 1, 2, 3, 4), (0, 1, 2, 4), (0, 1, 2, 4)]  # round 1: nothing
    agreement = ["advertise_keys", "share_keys", "masked_input", "unmasking"]
    assert transport.main_stages == [*agreement, "resume", *agreement, "resume"]  # round 2 agrees afresh
