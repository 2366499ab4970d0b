"""Pairwise masks of an announced resumed use expanded ahead (``SecAggPlus.prepare``): the same inputs, or unused.

Real parties over the in-process router with real X25519 keys; the insecure seed only makes two protocol objects'
keys equal, so their messages can be compared byte for byte.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import securefgl
import securefgl.protocols._secaggplus_precompute as precompute
from securefgl.protocols._mask_worker import mask_worker
from securefgl.protocols._prg import ring_dtype
from securefgl.protocols._secaggplus_precompute import MaskPrecompute, WorkerMaskPrecompute
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


def _ready_worker():
    """The mask worker process, started and ready (it is on every POSIX machine)."""
    import time

    worker = mask_worker()
    assert worker is not None, "the mask worker process did not start"
    deadline = time.monotonic() + 30
    while not worker.ready:
        assert time.monotonic() < deadline, "the mask worker process did not greet"
        time.sleep(0.01)
    return worker


@pytest.fixture(params=["thread", "worker"])
def backend(request, monkeypatch) -> str:
    """Masks expanded ahead on a thread, or in the mask worker process."""
    monkeypatch.setattr(precompute, "BACKEND", "thread" if request.param == "thread" else "auto")
    if request.param == "worker":
        _ready_worker()
    return request.param


@pytest.fixture
def thread_backend(monkeypatch) -> None:
    """For the tests of the thread's own workings."""
    monkeypatch.setattr(precompute, "BACKEND", "thread")


@pytest.fixture
def takes(monkeypatch) -> list[bool]:
    """Every client's ``take``: whether it got a precomputed mask sum (from either backend)."""
    got: list[bool] = []
    for cls in (MaskPrecompute, WorkerMaskPrecompute):
        take = cls.take

        def counting(self, *args, _take=take, **kwargs):
            out = _take(self, *args, **kwargs)
            got.append(out is not None)
            return out

        monkeypatch.setattr(cls, "take", counting)
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
def test_announced_uses_send_the_same_masked_inputs(optimistic, takes, backend):
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
def test_an_announcement_that_does_not_match_is_not_taken_and_is_wiped(
    change, takes, monkeypatch, thread_backend
):
    expanded: list[np.ndarray] = []
    apply = MaskPrecompute._apply

    def recording(self, stream, users):
        apply(self, stream, users)
        expanded.extend(self._sums[c] for c, _ in users if c in self._sums)

    monkeypatch.setattr(MaskPrecompute, "_apply", recording)
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


def test_a_run_announces_its_training_sums_and_is_the_plaintext_run(takes, backend):
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


def test_at_most_the_byte_cap_is_expanded_ahead(takes, monkeypatch, backend):
    """Beyond ``MAX_PRECOMPUTED_BYTES`` the clients expand their own masks, with the same inputs."""
    vector_bytes = ClipLayout(SCHEMA).length * ring_dtype(SCHEMA.ring_bits).itemsize
    monkeypatch.setattr(precompute, "MAX_PRECOMPUTED_BYTES", 5 * vector_bytes + 1)  # five clients' sums
    _key_agreement_then_one_announced_use()
    assert takes.count(True) == 5 and takes.count(False) == N - 5


def test_a_failed_expansion_ahead_leaves_the_client_to_expand_its_own(
    takes, monkeypatch, caplog, thread_backend
):
    """The background thread failing (here: out of memory on its first key) costs no sum: the two clients of that
    key's pair expand their own masks, the others' keys are expanded when they ask, and the failure is logged."""
    import threading

    from securefgl.protocols._prg import MaskExpander

    keystream = MaskExpander.keystream

    def failing(self, key):
        if threading.current_thread().name == "securefgl-mask-precompute":
            raise MemoryError("no room for one more mask stream")
        return keystream(self, key)

    monkeypatch.setattr(MaskExpander, "keystream", failing)
    _key_agreement_then_one_announced_use()
    assert takes.count(False) == 2 and takes.count(True) == N - 2
    assert "expanding masks ahead stopped" in caplog.text


def test_each_pairwise_key_is_expanded_once_for_both_clients_of_its_pair(takes, monkeypatch, thread_backend):
    """The two clients of a pair hold the same key: its stream is expanded once, added to one sum and subtracted
    from the other, and the inputs are those of expanding every client's masks apart (compared above)."""
    from securefgl.protocols._prg import MaskExpander

    streams: list[bytes] = []
    keystream = MaskExpander.keystream

    def counting(self, key):
        streams.append(bytes(key))
        return keystream(self, key)

    import securefgl.protocols.secaggplus as secaggplus

    jobs: list[dict] = []
    pairwise_jobs = secaggplus.pairwise_jobs

    def recording_jobs(*args, **kwargs):
        jobs.append(pairwise_jobs(*args, **kwargs))
        return jobs[-1]

    monkeypatch.setattr(MaskExpander, "keystream", counting)
    monkeypatch.setattr(secaggplus, "pairwise_jobs", recording_jobs)
    _key_agreement_then_one_announced_use()
    assert takes and all(takes) and len(jobs) == 1
    held = [k for job in jobs[0].values() for k in (*job.add, *job.subtract)]
    assert len(held) == 2 * len(set(held))  # every key is held by the two clients of its pair ...
    assert sorted(streams) == sorted(set(held))  # ... and expanded once


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("where", ["thread", "worker"])
def test_shared_streams_give_every_client_its_own_mask_sum(seed, where):
    """Random jobs whose keys are shared by pairs (or held by one client only, as a partner beyond the byte cap),
    taken in a random order while the background thread works: each sum equals the client's own ``combine``."""
    import os

    from securefgl.protocols._prg import expander_for
    from securefgl.protocols._secaggplus_precompute import MaskJob

    rng = np.random.default_rng(seed)
    n, length, bits = 12, 5000, 37
    keys = {}
    for u in range(n):
        for v in range(u + 1, n):
            if rng.random() < 0.4:
                keys[u, v] = os.urandom(32)
    lone = {u: [os.urandom(32) for _ in range(int(rng.integers(0, 3)))] for u in range(n)}
    jobs = {
        u: MaskJob(
            b"use",
            tuple(k for (a, b), k in keys.items() if a == u) + tuple(lone[u]),
            tuple(k for (a, b), k in keys.items() if b == u),
        )
        for u in range(n)
    }
    if where == "thread":
        pre = MaskPrecompute(jobs, length, bits, "aes256-ctr")
    else:
        pre = WorkerMaskPrecompute(jobs, length, bits, "aes256-ctr", _ready_worker())
    ex = expander_for(length, bits)
    for u in rng.permutation(n):
        job = jobs[int(u)]
        got = pre.take(int(u), job.use_id, job.add, job.subtract)
        want = ex.zeros()
        ex.combine(want, job.add, job.subtract)
        assert got is not None and np.array_equal(ex.reduce(got.copy()), ex.reduce(want))
    assert pre.take(0, b"another use", jobs[0].add, jobs[0].subtract) is None
    pre.discard()
    if where == "worker":  # every key once: the shared ones for both clients of their pair
        assert pre.finished and pre.expanded == len(keys) + sum(len(v) for v in lone.values())
