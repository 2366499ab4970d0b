"""Pairwise masks of an announced resumed use expanded ahead (``SecAggPlus.prepare``): the same inputs, or unused.

Real parties over the in-process router with real X25519 keys; the insecure seed only makes two protocol objects'
keys equal, so their messages can be compared byte for byte.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import securefgl
from securefgl.protocols._prg import ring_dtype
from securefgl.protocols._secaggplus_precompute import MaskPrecompute
from securefgl.protocols._secaggplus_resume import OptimisticInput, ResumedInput
from securefgl.protocols.encoding import BlockSpec, SumSchema
from securefgl.protocols.messages import decode
from securefgl.protocols.secaggplus import ClipLayout, SecAggPlus

SCHEMA = SumSchema(
    [BlockSpec("w", (3000,), bound=4.0), BlockSpec("n", (1,), kind="count", bound=50)],
    max_clients=64,
    precision=2.0**-10,
)
N = 40


def _contributions(seed: int) -> dict[int, dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    return {
        c: {"w": np.round(rng.uniform(-4, 4, 3000) * 2**10) / 2**10, "n": np.array([3])} for c in range(N)
    }


def _protocol(optimistic_uses: bool = True) -> SecAggPlus:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the insecure seed's warning: tests only
        return SecAggPlus(insecure_seed=11, session_uses=10, optimistic_uses=optimistic_uses)


@pytest.fixture
def takes(monkeypatch) -> list[bool]:
    """Every client's ``take``: whether it got a precomputed mask sum."""
    got: list[bool] = []
    take = MaskPrecompute.take

    def counting(self, *args, **kwargs):
        out = take(self, *args, **kwargs)
        got.append(out is not None)
        return out

    monkeypatch.setattr(MaskPrecompute, "take", counting)
    return got


def _inputs(tr) -> dict[int, bytes]:
    """Each client's masked vector as the server received it (messages of resumed uses also carry sealed seed
    shares, whose nonces are fresh from the OS)."""
    out = {}
    for m in tr.view("server"):
        msg = decode(m.payload)
        if isinstance(msg, (OptimisticInput, ResumedInput)):
            out[m.sender] = msg.vector.tobytes()
    return out


@pytest.mark.parametrize("optimistic", [True, False])
def test_announced_uses_send_the_same_masked_inputs(optimistic, takes):
    plain, prepared = _protocol(optimistic_uses=optimistic), _protocol(optimistic_uses=optimistic)
    for use in range(4):
        contributions, context = _contributions(use), b"model %d" % use
        started = prepared.prepare(SCHEMA, list(contributions), round_index=use, context=context)
        assert started == (use > 0)  # use 0 is the key agreement: nothing to expand ahead
        a, tr_a = plain.aggregate(SCHEMA, contributions, round_index=use, context=context)
        b, tr_b = prepared.aggregate(SCHEMA, contributions, round_index=use, context=context)
        assert np.array_equal(a["w"].numpy(), b["w"].numpy())
        assert np.array_equal(a["w"].numpy(), sum(c["w"] for c in contributions.values()))
        if use > 0:
            assert tr_b.extra["session_use"] == use and tr_b.extra["optimistic_use"] == optimistic
            assert len(_inputs(tr_b)) == N and _inputs(tr_a) == _inputs(tr_b)
    assert takes == [True] * (3 * N)


@pytest.mark.parametrize("change", ["context", "schema", "round"])
def test_an_announcement_that_does_not_match_is_not_taken_and_is_wiped(change, takes, monkeypatch):
    expanded: list[np.ndarray] = []
    expand = MaskPrecompute._expand

    def recording(self, client, workers):
        expand(self, client, workers)
        expanded.append(self._sums[client])

    monkeypatch.setattr(MaskPrecompute, "_expand", recording)
    proto = _protocol()
    proto.aggregate(SCHEMA, _contributions(0), round_index=0, context=b"model 0")
    other = SumSchema(
        [BlockSpec("w", (3000,), bound=2.0), BlockSpec("n", (1,), kind="count", bound=50)],
        max_clients=64,
        precision=2.0**-10,
    )
    announced = {
        "context": (SCHEMA, 1, b"another model"),
        "schema": (other, 1, b"model 1"),
        "round": (SCHEMA, 2, b"model 1"),
    }[change]
    assert proto.prepare(announced[0], list(range(N)), round_index=announced[1], context=announced[2])
    contributions = _contributions(1)
    sums, tr = proto.aggregate(SCHEMA, contributions, round_index=1, context=b"model 1")
    assert tr.extra["optimistic_use"]
    assert np.array_equal(sums["w"].numpy(), sum(c["w"] for c in contributions.values()))
    assert takes == [False] * N  # every client expanded its own masks
    assert expanded and all(not a.any() for a in expanded)  # what was expanded ahead is wiped


@pytest.mark.parametrize("case", ["fresh", "recipient", "other clients", "last use"])
def test_prepare_starts_nothing_without_a_resumed_use_to_come(case):
    options = {
        "fresh": {"session_uses": 1, "optimistic_uses": False},
        "last use": {"session_uses": 2, "optimistic_uses": True},
    }.get(case, {"session_uses": 10, "optimistic_uses": True})
    proto = SecAggPlus(**options)
    recipient = 0 if case == "recipient" else None
    proto.aggregate(SCHEMA, _contributions(0), round_index=0, recipient=recipient)
    if case == "last use":  # use 1 of 2 is the session's last: the sum after it agrees on fresh keys
        assert proto.prepare(SCHEMA, list(range(N)), round_index=1)
        proto.aggregate(SCHEMA, _contributions(1), round_index=1)
    clients = list(range(N - 1)) if case == "other clients" else list(range(N))
    assert not proto.prepare(SCHEMA, clients, round_index=2, recipient=recipient)
    assert proto._precomputed is None


def test_a_run_announces_its_training_sums_and_is_the_plaintext_run(takes):
    """Engine level: the engine announces each round's training sum before its clients train; the optimistic
    uses take every mask sum expanded ahead and the run trains and scores as the plaintext run."""
    cfg = {
        "dataset": {"name": "csbm", "csbm": {"num_nodes": 400, "num_classes": 3, "num_features": 8}},
        "partition": {"method": "louvain", "clients": 5, "cache": False},
        "model": {"hidden": 8},
        "train": {"rounds": 4, "local_epochs": 1},
        "output": {"save": False},
    }
    plain = securefgl.run({**cfg, "protocol": {"name": "plaintext"}}).seeds[0]
    options = {"session_uses": 10, "optimistic_uses": True}
    optimistic = securefgl.run({**cfg, "protocol": {"name": "secagg+", "options": options}}).seeds[0]
    assert [r.metrics for r in optimistic.rounds] == [r.metrics for r in plain.rounds]
    assert [r.loss for r in optimistic.rounds] == [r.loss for r in plain.rounds]
    assert takes and all(takes)  # rounds 2-4: every client of every optimistic use
    assert len(takes) == 3 * 5


def _key_agreement_then_one_announced_use() -> None:
    """Two sums over the same clients, announced to one of two equally seeded protocols: the same inputs."""
    plain, prepared = _protocol(), _protocol()
    for use in range(2):
        contributions = _contributions(use)
        prepared.prepare(SCHEMA, list(contributions), round_index=use)
        a, tr_a = plain.aggregate(SCHEMA, contributions, round_index=use)
        b, tr_b = prepared.aggregate(SCHEMA, contributions, round_index=use)
        assert _inputs(tr_a) == _inputs(tr_b) and np.array_equal(a["w"].numpy(), b["w"].numpy())


def test_at_most_the_byte_cap_is_expanded_ahead(takes, monkeypatch):
    """Beyond ``MAX_PRECOMPUTED_BYTES`` the clients expand their own masks, with the same inputs."""
    import securefgl.protocols._secaggplus_precompute as precompute

    vector_bytes = ClipLayout(SCHEMA).length * ring_dtype(SCHEMA.ring_bits).itemsize
    monkeypatch.setattr(precompute, "MAX_PRECOMPUTED_BYTES", 5 * vector_bytes + 1)  # five clients' sums
    _key_agreement_then_one_announced_use()
    assert takes.count(True) == 5 and takes.count(False) == N - 5


def test_a_failed_expansion_ahead_leaves_the_client_to_expand_its_own(takes, monkeypatch, caplog):
    """The background thread failing (here: out of memory on its first client) costs no sum: that client
    expands its own masks, the others are expanded when they ask, and the failure is logged."""
    import threading

    from securefgl.protocols._prg import MaskExpander

    combine = MaskExpander.combine

    def failing(self, *args, **kwargs):
        if threading.current_thread().name == "securefgl-mask-precompute":
            raise MemoryError("no room for one more mask sum")
        return combine(self, *args, **kwargs)

    monkeypatch.setattr(MaskExpander, "combine", failing)
    _key_agreement_then_one_announced_use()
    assert takes.count(False) == 1 and takes.count(True) == N - 1
    assert "expanding masks ahead stopped" in caplog.text
