"""The split attack of a lying server against SecAgg/SecAgg+ (issue #20, item 1), and the defences.

The server tells half of a target's neighbours "the target survived" and the other half "the target
dropped": each half's unmask request is self-consistent, so it answers, and the server collects
:math:`t` shares of the self-mask seed :math:`b_u` from one half and :math:`t` shares of the mask key
:math:`s_u` from the other, then removes every mask of the target's masked input. The attack is
scripted against the real client state machines (real X25519/Ed25519 keys, real AEAD shares); the
server side is an honest :class:`SecAggPlusServer` up to the masked inputs, then the script below.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pytest
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from hypothesis import given, settings
from hypothesis import strategies as st

from securefgl.errors import ConfigError
from securefgl.protocols import _shamir
from securefgl.protocols._consistency import (
    CertifiedUnmaskRequest,
    ConsistencyRequest,
    ConsistencySignature,
    SignedShareKeysRequest,
    quorum,
)
from securefgl.protocols._identity import IdentityDirectory, generate_identities, survivors_statement
from securefgl.protocols._prg import MaskExpander
from securefgl.protocols._secaggplus_session import pair_key, self_key
from securefgl.protocols.encoding import BlockSpec, SumSchema
from securefgl.protocols.messages import Abort, MaskedInput, Unmask, UnmaskRequest, decode
from securefgl.protocols.secagg import SecAgg
from securefgl.protocols.secaggplus import SecAggPlus, SecAggPlusClient, SecAggPlusServer, Stage

SCHEMA = SumSchema([BlockSpec("w", (6,), bound=4.0)], max_clients=200)


class Session:
    """An honest run up to the masked inputs, with the parties exposed to the attacking script."""

    def __init__(self, proto: SecAggPlus, n: int, *, seed: int = 0, identities: Any = None) -> None:
        rng = np.random.default_rng(seed)
        self.contrib = {c: {"w": rng.uniform(-4, 4, 6).astype(np.float32)} for c in range(n)}
        keys, directory = identities if identities is not None else generate_identities(range(n))
        signed = proto.config.consistency
        self.server = SecAggPlusServer(
            SCHEMA,
            range(n),
            config=proto.config,
            protocol_name=proto.name,
            round_index=7,
            recipient=None,
            directory=directory if signed else None,
        )
        self.clients = {
            c: SecAggPlusClient(
                c,
                SCHEMA,
                self.contrib[c],
                config=proto.config,
                protocol_name=proto.name,
                round_index=7,
                recipient=None,
                context=b"model",
                identity=keys[c] if signed else None,
                directory=directory if signed else None,
            )
            for c in range(n)
        }
        self.keys, self.directory = keys, directory
        self.masked: dict[int, np.ndarray] = {}
        out = self.server.start()
        while out.stage != Stage.MASKED_INPUT.value:
            out = self._relay(out.stage, out.messages)
        self.next = self._relay(out.stage, out.messages)  # consistency or unmask requests
        self.state = self.server.state

    def _relay(self, stage: str, messages: Mapping[int, bytes]) -> Any:
        replies = [(c, r) for c, p in messages.items() if (r := self.clients[c].handle(p)) is not None]
        if stage == Stage.MASKED_INPUT.value:
            self.masked = {c: decode(r, MaskedInput).vector for c, r in replies}
        return self.server.handle(stage, replies)

    def split(self, target: int) -> tuple[list[int], list[int]]:
        """The target's neighbours (without it) in two halves."""
        assert self.state.graph is not None
        nbrs = [v for v in self.state.graph.neighbours(target) if v != target]
        return nbrs[: len(nbrs) // 2], nbrs[len(nbrs) // 2 :]

    def lists(self, w: int, dropped: set[int]) -> tuple[tuple[int, ...], tuple[int, ...]]:
        peers = set(self.state.masked_with[w]) | {w}
        return tuple(sorted(peers - dropped)), tuple(sorted(peers & dropped))


def recover_input(s: Session, target: int, seed_shares: dict[int, Any], key_shares: dict[int, Any]) -> Any:
    """The server's last step: reconstruct b_u and s_u, strip every mask off y_u, decode x_u."""
    t = s.server.params.threshold
    x = s.server.x
    got = []
    for shares in (seed_shares, key_shares):
        holders = sorted(shares)[:t]
        sec, valid = _shamir.reconstruct(
            [x[w] for w in holders], np.stack([shares[w] for w in holders])[:, None, :]
        )
        assert valid[0]
        got.append(sec[0].tobytes())
    seed, mask_sk = got
    assert s.server._verify("seed", target, np.frombuffer(seed, dtype=np.uint32))
    sid, r = s.state.session_id, s.server.round_index
    ex = MaskExpander(s.server.layout.length, SCHEMA.ring_bits, algorithm=s.server.config.prg)
    y = s.masked[target].astype(ex.dtype, copy=True)
    ex.subtract(y, self_key(seed, sid, r, target))
    sk = X25519PrivateKey.from_private_bytes(mask_sk)
    for v in s.state.masked_with[target]:
        k = pair_key(sk.exchange(X25519PublicKey.from_public_bytes(s.state.keys[v][1])), sid, r, target, v)
        (ex.subtract if v > target else ex.add)(y, k)
    ex.reduce(y)
    return SCHEMA.decode(y[: SCHEMA.length].astype(np.uint64), 1)["w"].numpy()


def split_attack_without_consistency(s: Session, target: int) -> tuple[dict[int, Any], dict[int, Any]]:
    """Half the target's neighbours are told it survived, the other half that it dropped."""
    alive_half, dead_half = s.split(target)
    seed_shares: dict[int, Any] = {}
    key_shares: dict[int, Any] = {}
    for w in s.state.u3:
        alive, dead = s.lists(w, {target} if w in dead_half else set())
        reply = decode(s.clients[w].handle(UnmaskRequest(s.state.session_id, alive, dead).to_bytes()))
        if not isinstance(reply, Unmask):
            continue
        if target in reply.alive:
            seed_shares[w] = reply.seed_shares[reply.alive.index(target)]
        if target in reply.dead:
            key_shares[w] = reply.key_shares[reply.dead.index(target)]
    return seed_shares, key_shares


@pytest.mark.parametrize(
    ("proto", "n"),
    [
        (SecAggPlus(), 40),
        (SecAggPlus(), 100),
        (SecAgg(threshold=4, insecure_low_threshold=True), 9),
    ],
    ids=["secagg+-n40-k8-t3", "secagg+-n100-k16-t6", "secagg-n9-t4-insecure"],
)
def test_split_attack_recovers_the_input_without_the_consistency_round(proto: SecAggPlus, n: int) -> None:
    """The pinned, documented risk: a curious-model configuration trusts the server's survivor lists."""
    s = Session(proto, n)
    p = s.server.params
    assert 2 * p.threshold <= p.degree + 1  # the condition the attack needs
    target = s.state.u3[n // 2]
    seeds, keys = split_attack_without_consistency(s, target)
    assert len(seeds) >= p.threshold and len(keys) >= p.threshold
    assert not set(seeds) & set(keys)  # no single client revealed both kinds
    np.testing.assert_allclose(recover_input(s, target, seeds, keys), s.contrib[target]["w"], atol=1e-5)


@pytest.mark.parametrize(("n", "k", "t"), [(40, 8, 3), (100, 16, 6)])
def test_split_attack_fails_with_the_consistency_round(n: int, k: int, t: int) -> None:
    """Same parameters, consistency round on: each half signs its own set, neither reaches the quorum,
    and every client refuses the unmask request; no share of either kind leaves any client."""
    proto = SecAggPlus(consistency_check=True)
    s = Session(proto, n)
    assert (s.server.params.degree, s.server.params.threshold) == (k, t)
    assert s.next.stage == Stage.CONSISTENCY_CHECK.value
    target = s.state.u3[n // 2]
    u3 = s.state.u3
    without = tuple(c for c in u3 if c != target)
    group_b = set(u3[n // 2 + 1 :])  # told "target dropped"; the target itself is in group A
    sigs: dict[tuple[int, ...], list[tuple[int, bytes]]] = {u3: [], without: []}
    for w in u3:
        shown = without if w in group_b else u3
        reply = decode(s.clients[w].handle(ConsistencyRequest(s.state.session_id, shown).to_bytes()))
        assert isinstance(reply, ConsistencySignature)
        sigs[shown].append((w, reply.signature))
    q = quorum(n, t, proto.config.corrupt_rate)
    assert max(len(v) for v in sigs.values()) < q
    for w in u3:
        shown = without if w in group_b else u3
        alive, dead = s.lists(w, set(u3) - set(shown))
        req = CertifiedUnmaskRequest(s.state.session_id, shown, tuple(sorted(sigs[shown])), alive, dead)
        reply = decode(s.clients[w].handle(req.to_bytes()))
        assert isinstance(reply, Abort) and reply.reason == "RequestRefusedError", reply
        assert s.clients[w].stage == "aborted"


def test_semi_malicious_parameters_defeat_the_split_by_counting() -> None:
    """Against a lying server the finder picks t > (k+1)/2: the halves cannot both reach t, even with
    the consistency round switched off."""
    for n in (40, 100, 1000):
        p = SecAggPlus(adversary="semi-malicious").parameters(n)
        assert 2 * p.threshold > p.degree + 1, p
    proto = SecAggPlus(adversary="semi-malicious", consistency_check=False)
    s = Session(proto, 40)
    target = s.state.u3[20]
    seeds, keys = split_attack_without_consistency(s, target)
    assert min(len(seeds), len(keys)) < s.server.params.threshold


def test_explicit_degree_keeps_the_adversary_and_corrupt_rate() -> None:
    lying = SecAggPlus(degree=8, adversary="semi-malicious", corrupt_rate=0.05).parameters(100)
    curious = SecAggPlus(degree=8).parameters(100)
    assert 2 * lying.threshold > lying.degree + 1 and lying.threshold > curious.threshold
    with pytest.raises(ConfigError, match="insecure_low_threshold"):
        SecAggPlus(degree=8, threshold=4, adversary="semi-malicious").parameters(100)
    with pytest.raises(ConfigError, match="insecure_low_threshold"):
        SecAgg(threshold=4).parameters(9)
    assert SecAgg(threshold=5).parameters(9).threshold == 5


def test_consistency_round_is_on_by_default_against_a_lying_server_and_sums_exactly() -> None:
    proto = SecAgg(adversary="semi-malicious")
    assert proto.config.consistency and not SecAgg().config.consistency
    s = Session(proto, 9)
    out = s.next
    while out is not None:
        out = s._relay(out.stage, out.messages)
    got = s.state.result["w"].numpy()
    np.testing.assert_allclose(got, sum(c["w"] for c in s.contrib.values()), atol=1e-4)
    assert s.state.u4 == s.state.u3


def _to_unmask(s: Session) -> dict[int, bytes]:
    """Run the honest consistency round; return the honest unmask requests."""
    out = s._relay(s.next.stage, s.next.messages)
    assert out.stage == Stage.UNMASKING.value
    return dict(out.messages)


def test_forged_signatures_are_refused() -> None:
    proto = SecAgg(adversary="semi-malicious")
    s = Session(proto, 9)
    honest = _to_unmask(s)
    for w, payload in honest.items():
        req = decode(payload, CertifiedUnmaskRequest)
        forged = tuple((c, bytes(64) if c % 2 else sig[::-1]) for c, sig in req.signatures)
        bad = CertifiedUnmaskRequest(req.session_id, req.survivors, forged, req.alive, req.dead)
        reply = decode(s.clients[w].handle(bad.to_bytes()))
        assert isinstance(reply, Abort) and reply.reason == "RequestRefusedError"


def test_signature_by_an_outsider_key_does_not_count() -> None:
    """The server signs for clients with keys of its own: the directory says whose keys count."""
    proto = SecAgg(adversary="semi-malicious")
    s = Session(proto, 9)
    honest = _to_unmask(s)
    mine, _ = generate_identities(range(9))
    w = s.state.u3[0]
    req = decode(honest[w], CertifiedUnmaskRequest)
    stmt = survivors_statement(req.session_id, 7, req.survivors)
    fake = tuple((c, mine[c].sign(stmt)) for c in req.survivors)
    reply = decode(
        s.clients[w].handle(
            CertifiedUnmaskRequest(req.session_id, req.survivors, fake, req.alive, req.dead).to_bytes()
        )
    )
    assert isinstance(reply, Abort) and reply.reason == "RequestRefusedError"


def test_survivor_set_below_threshold_is_refused() -> None:
    proto = SecAgg(adversary="semi-malicious")
    s = Session(proto, 9)
    t = s.server.params.threshold
    w = s.state.u3[0]
    short = tuple(s.state.u3[: t - 1])
    reply = decode(s.clients[w].handle(ConsistencyRequest(s.state.session_id, short).to_bytes()))
    assert isinstance(reply, Abort) and reply.reason == "ThresholdError"


def test_survivor_set_without_the_client_is_refused() -> None:
    s = Session(SecAgg(adversary="semi-malicious"), 9)
    w = s.state.u3[0]
    others = tuple(c for c in s.state.u3 if c != w)
    reply = decode(s.clients[w].handle(ConsistencyRequest(s.state.session_id, others).to_bytes()))
    assert isinstance(reply, Abort) and reply.reason == "RequestRefusedError"


def test_signatures_replayed_from_another_session_are_refused() -> None:
    """Same identities, same clients and survivor set, next round: the old certificate is worthless."""
    ids = generate_identities(range(9))
    proto = SecAgg(adversary="semi-malicious")
    old = Session(proto, 9, identities=ids)
    old_req = decode(next(iter(_to_unmask(old).values())), CertifiedUnmaskRequest)
    new = Session(proto, 9, seed=1, identities=ids)
    for c in new.state.u3:  # they sign the new set, but the server forwards the old signatures
        new.clients[c].handle(ConsistencyRequest(new.state.session_id, new.state.u3).to_bytes())
    w = new.state.u3[0]
    alive, dead = new.lists(w, set())
    replay = CertifiedUnmaskRequest(new.state.session_id, new.state.u3, old_req.signatures, alive, dead)
    reply = decode(new.clients[w].handle(replay.to_bytes()))
    assert old_req.survivors == new.state.u3
    assert isinstance(reply, Abort) and reply.reason == "RequestRefusedError"


def test_substituted_advertised_keys_are_refused() -> None:
    """The server swaps one client's mask key for its own: the signed advertisement does not verify."""
    proto = SecAgg(adversary="semi-malicious")
    keys, directory = generate_identities(range(5))
    cfg = proto.config
    server = SecAggPlusServer(
        SCHEMA,
        range(5),
        config=cfg,
        protocol_name=proto.name,
        round_index=0,
        recipient=None,
        directory=directory,
    )
    clients = {
        c: SecAggPlusClient(
            c,
            SCHEMA,
            {"w": np.zeros(6, np.float32)},
            config=cfg,
            protocol_name=proto.name,
            round_index=0,
            recipient=None,
            context=b"",
            identity=keys[c],
            directory=directory,
        )
        for c in range(5)
    }
    out = server.start()
    replies = [(c, clients[c].handle(p)) for c, p in out.messages.items()]
    out = server.handle(out.stage, [(c, r) for c, r in replies if r is not None])
    req = decode(out.messages[0], SignedShareKeysRequest)
    evil = X25519PrivateKey.generate().public_key().public_bytes_raw()
    table = tuple((c, cpk, evil if c == 3 else spk) for c, cpk, spk in req.keys)
    for c in (0, 1, 2, 4):
        reply = decode(clients[c].handle(SignedShareKeysRequest(table, req.signatures).to_bytes()))
        assert isinstance(reply, Abort) and reply.reason == "InconsistentViewError"


def test_identity_directory_file_round_trip(tmp_path: Any) -> None:
    keys, directory = generate_identities(range(4))
    path = tmp_path / "identities.json"
    directory.write(path)
    again = IdentityDirectory.from_file(path)
    assert again.fingerprint() == directory.fingerprint() and again.clients() == (0, 1, 2, 3)
    contrib = {c: {"w": np.full(6, float(c), np.float32)} for c in range(4)}
    sums, tr = SecAgg(adversary="semi-malicious", identities=path, identity_keys=keys).aggregate(
        SCHEMA, contrib
    )
    np.testing.assert_allclose(sums["w"].numpy(), np.full(6, 6.0), atol=1e-4)
    with pytest.raises(ConfigError, match="identity"):
        SecAgg(adversary="semi-malicious", identities=path).aggregate(SCHEMA, contrib)
    with pytest.raises(ConfigError, match="does not exist"):
        IdentityDirectory.from_file(tmp_path / "missing.json")


@settings(max_examples=200, deadline=None)
@given(
    advertised=st.integers(min_value=1, max_value=5000),
    threshold=st.integers(min_value=1, max_value=50),
    rate=st.floats(min_value=0.0, max_value=0.49),
)
def test_no_two_survivor_sets_can_both_reach_the_quorum(advertised: int, threshold: int, rate: float) -> None:
    """Two quorums of signers overlap in more clients than are corrupted, and an honest client signs one
    set per session: two different survivor sets can never both be certified."""
    q = quorum(advertised, threshold, rate)
    corrupted = int((rate + 1e-14) * advertised)
    assert q >= threshold and 2 * q - advertised > corrupted
