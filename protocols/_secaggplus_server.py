"""The SecAgg/SecAgg+ server party: relays keys and shares, sums masked inputs, unmasks, releases.

Re-exported by :mod:`securefgl.protocols.secaggplus` (see its docstring for the stages and the
checks). The server sees bytes only and never imports the client half.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey

from securefgl.errors import (
    InconsistentViewError,
    InvalidMessage,
    MalformedMessageError,
    ProtocolError,
    ReleaseRefusedError,
    StageOrderError,
    ThresholdError,
)
from securefgl.protocols import _shamir
from securefgl.protocols._harary import SecretSharingGraph
from securefgl.protocols._prg import MaskExpander, ring_dtype
from securefgl.protocols._secaggplus_params import SecAggPlusConfig, Stage, resolve_graph
from securefgl.protocols._secaggplus_session import (
    ClipLayout,
    commitment,
    key_is_usable,
    pair_key,
    release_ring,
    self_key,
    session_graph,
    wipe,
)
from securefgl.protocols.base import SERVER, Sums
from securefgl.protocols.encoding import SumSchema
from securefgl.protocols.messages import (
    Abort,
    AdvertiseKeys,
    AdvertiseRequest,
    DeliverRequest,
    MaskedInput,
    MaskedInputRequest,
    Message,
    ShareKeys,
    ShareKeysRequest,
    Unmask,
    UnmaskRequest,
    decode,
)
from securefgl.protocols.router import Outgoing

__all__ = ["SecAggPlusServer", "SecAggPlusServerState"]


@dataclass
class SecAggPlusServerState:
    """What the server holds during one session (public values and the masked sum only).

    Attributes:
        excluded: client -> reason, for clients excluded as misbehaving (``"ErrorClass: message"``).
        keys: client -> (channel public key, mask public key), for the clients that advertised (U1).
        session_id: the session id (the one most clients computed).
        graph: the secret-sharing graph over U1.
        u1, u2, u3: clients that advertised keys, shared them, and whose masked input was accepted.
        dead: U2 minus U3 (dropped or excluded after sharing).
        commitments: client -> commitment to its self-mask seed.
        envelopes: recipient -> {sender: share ciphertext} (relayed, then cleared).
        senders: client -> the neighbours whose ciphertexts were forwarded to it.
        complaints: client -> the senders whose ciphertexts it could not authenticate.
        masked_with: survivor -> the peers it masked against.
        total: the running sum of accepted masked inputs (then the unmasked sum).
        result: the released sums (server mode).
        delivered: whether the sum was relayed to the designated recipient.
        bad_shares: client -> note, where a reconstruction had to route around corrupted shares.
        unmask_seconds: wall time of the unmasking steps, and process CPU time (all threads) of mask
            removal and of the whole step.
        unmask_rejected: responder -> reason, for unmask replies that were ignored.
    """

    excluded: dict[int, str] = field(default_factory=dict)
    keys: dict[int, tuple[bytes, bytes]] = field(default_factory=dict)
    session_id: bytes = b""
    graph: SecretSharingGraph | None = None
    u1: tuple[int, ...] = ()
    u2: tuple[int, ...] = ()
    u3: tuple[int, ...] = ()
    dead: tuple[int, ...] = ()
    commitments: dict[int, bytes] = field(default_factory=dict)
    envelopes: dict[int, dict[int, bytes]] = field(default_factory=dict)
    senders: dict[int, tuple[int, ...]] = field(default_factory=dict)
    complaints: dict[int, tuple[int, ...]] = field(default_factory=dict)
    masked_with: dict[int, frozenset[int]] = field(default_factory=dict)
    total: np.ndarray | None = None
    result: Sums | None = None
    delivered: bool = False
    bad_shares: dict[int, str] = field(default_factory=dict)
    unmask_seconds: dict[str, float] = field(default_factory=dict)
    unmask_rejected: dict[int, str] = field(default_factory=dict)


class SecAggPlusServer:
    """The SecAgg/SecAgg+ server: relays keys and shares, sums masked inputs, unmasks, releases.

    It never sees a client object, only bytes; every reply is decoded and checked, and a client that
    sends anything malformed, duplicated, for another session or inconsistent is excluded (recorded in
    :attr:`excluded`) like a dropped client.

    Args:
        schema: the schema of the sum.
        invited: the invited client ids.
        config: the protocol configuration.
        protocol_name: ``"secagg"`` or ``"secagg+"``.
        round_index: the round.
        recipient: designated recipient or ``None``.
        workers: threads used to regenerate masks when unmasking.
    """

    def __init__(
        self,
        schema: SumSchema,
        invited: Sequence[int],
        *,
        config: SecAggPlusConfig,
        protocol_name: str,
        round_index: int,
        recipient: int | None,
        workers: int = 1,
    ) -> None:
        self.schema = schema
        self.layout = ClipLayout(schema)
        self.invited = tuple(sorted(int(c) for c in invited))
        self.config = config
        self.params = resolve_graph(config, len(self.invited))
        self.recipient = recipient
        self.round_index = int(round_index)
        self.workers = max(1, int(workers))
        self.stages = Stage.ordered(recipient=recipient is not None)
        self.request = AdvertiseRequest(
            protocol=protocol_name,
            round_index=self.round_index,
            invited=self.invited,
            degree=self.params.degree,
            threshold=self.params.threshold,
            ring_bits=schema.ring_bits,
            length=self.layout.length,
            prg=config.prg,
            recipient=recipient,
            schema_fingerprint=schema.fingerprint(),
        )
        self.x = {c: i + 1 for i, c in enumerate(self.invited)}
        self.state = SecAggPlusServerState()
        self._awaiting: str | None = None

    # -- helpers -------------------------------------------------------------------------------------

    def _exclude(self, client: int, err: ProtocolError | InvalidMessage | str) -> None:
        text = err if isinstance(err, str) else f"{type(err).__name__}: {err}"
        self.state.excluded.setdefault(client, text)

    def _collect(
        self, stage: str, replies: Sequence[tuple[int, bytes]], expected: type[Message], allowed: set[int]
    ) -> dict[int, Any]:
        """Decode one stage's replies: one valid message per allowed client; exclude the rest."""
        counts: dict[int, int] = {}
        for c, _ in replies:
            counts[c] = counts.get(c, 0) + 1
        out: dict[int, Any] = {}
        for c, payload in replies:
            if c not in allowed or c in self.state.excluded:
                continue
            if counts[c] > 1:
                self._exclude(
                    c,
                    StageOrderError(
                        f"sent {counts[c]} messages in stage {stage}; all discarded", party=c, phase=stage
                    ),
                )
                out.pop(c, None)
                continue
            try:
                msg = decode(payload, (expected, Abort))
            except MalformedMessageError as exc:
                self._exclude(c, MalformedMessageError(str(exc), party=c, phase=stage))
                continue
            if isinstance(msg, Abort):
                self._exclude(c, f"{msg.reason} (client abort): {msg.detail}")
                continue
            out[c] = msg
        return out

    # -- endpoint ------------------------------------------------------------------------------------

    def start(self) -> Outgoing:
        """The ``advertise_keys`` requests. A server object runs one session: a second start raises."""
        if self._awaiting is not None:
            raise StageOrderError("this server already started its session; build a new one", party=SERVER)
        self._awaiting = Stage.ADVERTISE_KEYS.value
        payload = self.request.to_bytes()
        return Outgoing(Stage.ADVERTISE_KEYS.value, dict.fromkeys(self.invited, payload))

    def handle(self, stage: str, replies: Sequence[tuple[int, bytes]]) -> Outgoing | None:
        """Consume the replies of ``stage`` (the stage whose requests were sent last) and move on."""
        handler = {
            Stage.ADVERTISE_KEYS.value: self._after_advertise,
            Stage.SHARE_KEYS.value: self._after_share_keys,
            Stage.MASKED_INPUT.value: self._after_masked_input,
            Stage.UNMASKING.value: self._after_unmasking,
            Stage.DELIVER.value: self._after_deliver,
        }.get(stage)
        if handler is None or stage != self._awaiting:
            raise StageOrderError(
                f"replies for stage {stage!r} while awaiting {self._awaiting!r}; valid order: {list(self.stages)}",
                party=SERVER,
            )
        self._awaiting = "finished"
        out = handler(replies)
        self._awaiting = out.stage if out is not None else "finished"
        return out

    def _need(self, ok: bool, message: str, phase: str) -> None:
        if not ok:
            raise ThresholdError(
                message + "; aborting before any share is requested, nothing is revealed",
                party=SERVER,
                phase=phase,
            )

    def _after_advertise(self, replies: Sequence[tuple[int, bytes]]) -> Outgoing:
        ph = Stage.ADVERTISE_KEYS.value
        got = self._collect(ph, replies, AdvertiseKeys, set(self.invited))
        seen: dict[bytes, list[int]] = {}
        for c, msg in got.items():
            seen.setdefault(msg.channel_pk, []).append(c)
            seen.setdefault(msg.mask_pk, []).append(c)
        dup = {c for owners in seen.values() if len(owners) > 1 for c in owners}
        for c in sorted(got):
            msg = got[c]
            if c in dup:
                self._exclude(
                    c,
                    InconsistentViewError(
                        "advertised a public key that is also advertised elsewhere (copied or reused)",
                        party=c,
                        phase=ph,
                    ),
                )
            elif not (key_is_usable(msg.channel_pk) and key_is_usable(msg.mask_pk)):
                self._exclude(c, "InvalidMessage: advertised a degenerate (low-order) X25519 public key")
            else:
                self.state.keys[c] = (msg.channel_pk, msg.mask_pk)
        self.state.u1 = tuple(sorted(self.state.keys))
        t = self.params.threshold
        self._need(
            len(self.state.u1) >= t,
            f"{len(self.state.u1)} clients advertised keys, fewer than the threshold {t}",
            ph,
        )
        if self.recipient is not None:
            self._need(
                self.recipient in self.state.keys, f"the designated recipient {self.recipient} dropped", ph
            )
        table = tuple((c, *self.state.keys[c]) for c in self.state.u1)
        payload = ShareKeysRequest(keys=table).to_bytes()
        return Outgoing(Stage.SHARE_KEYS.value, dict.fromkeys(self.state.u1, payload))

    def _consistent(self, client: int, msg: ShareKeys) -> bool:
        """Whether ``client`` computed the session id of the session (an honest server's check; the
        clients' own defence does not depend on it: shares bound to another session fail to open)."""
        return msg.session_id == self.state.session_id

    def _after_share_keys(self, replies: Sequence[tuple[int, bytes]]) -> Outgoing:
        ph = Stage.SHARE_KEYS.value
        got = self._collect(ph, replies, ShareKeys, set(self.state.u1))
        votes: dict[bytes, list[int]] = {}
        for c, msg in got.items():
            votes.setdefault(msg.session_id, []).append(c)
        if not votes:
            self._need(False, "no client completed share_keys", ph)
        # The session id most clients computed (ties: the group with the smallest client id) is the
        # session; the others were shown different parameters or contexts.
        self.state.session_id = min(votes, key=lambda sid: (-len(votes[sid]), min(votes[sid])))
        self.state.graph = session_graph(self.state.session_id, self.state.u1, self.params.degree)
        accepted: dict[int, ShareKeys] = {}
        for c in sorted(got):
            msg = got[c]
            if not self._consistent(c, msg):
                self._exclude(
                    c,
                    InconsistentViewError(
                        "computed a different session id (was shown different parameters or context)",
                        party=c,
                        phase=ph,
                    ),
                )
                continue
            want = set(self.state.graph.neighbours(c)) - {c}
            dsts = [d for d, _ in msg.envelopes]
            if len(dsts) != len(set(dsts)) or set(dsts) != want:
                self._exclude(
                    c,
                    MalformedMessageError(
                        "share ciphertexts are not addressed to exactly its neighbours", party=c, phase=ph
                    ),
                )
                continue
            accepted[c] = msg
        self.state.u2 = tuple(sorted(accepted))
        u2 = set(self.state.u2)
        t = self.params.threshold
        for c in self.state.u2:
            live = len(set(self.state.graph.neighbours(c)) & u2)
            self._need(
                live >= t,
                f"client {c} has {live} neighbours left after share_keys, fewer than the threshold {t}",
                ph,
            )
        if self.recipient is not None:
            self._need(self.recipient in u2, f"the designated recipient {self.recipient} dropped", ph)
        for c, msg in accepted.items():
            self.state.commitments[c] = msg.seed_commitment
            for d, blob in msg.envelopes:
                if d in u2:
                    self.state.envelopes.setdefault(d, {})[c] = blob
        out = {}
        for d in self.state.u2:
            env = tuple(sorted(self.state.envelopes.get(d, {}).items()))
            self.state.senders[d] = tuple(v for v, _ in env)
            out[d] = MaskedInputRequest(session_id=self.state.session_id, envelopes=env).to_bytes()
        self.state.envelopes.clear()
        return Outgoing(Stage.MASKED_INPUT.value, out)

    def _after_masked_input(self, replies: Sequence[tuple[int, bytes]]) -> Outgoing:
        ph = Stage.MASKED_INPUT.value
        assert self.state.graph is not None
        got = self._collect(ph, replies, MaskedInput, set(self.state.u2))
        accepted: dict[int, MaskedInput] = {}
        for c in sorted(got):
            msg = got[c]
            if msg.session_id != self.state.session_id:
                self._exclude(c, InconsistentViewError("masked input for another session", party=c, phase=ph))
            elif msg.ring_bits != self.schema.ring_bits or msg.vector.shape != (self.layout.length,):
                self._exclude(
                    c,
                    MalformedMessageError(
                        f"masked input of {msg.vector.shape[0]} elements over {msg.ring_bits} bits, expected {self.layout.length} over {self.schema.ring_bits}",
                        party=c,
                        phase=ph,
                    ),
                )
            elif len(set(msg.complaints)) != len(msg.complaints) or not set(msg.complaints) <= set(
                self.state.senders[c]
            ):
                self._exclude(
                    c,
                    MalformedMessageError(
                        "complaints about clients whose shares it was not sent", party=c, phase=ph
                    ),
                )
            else:
                accepted[c] = msg
        accused: dict[int, list[int]] = {}
        for c, msg in accepted.items():
            self.state.complaints[c] = msg.complaints
            self.state.masked_with[c] = frozenset(self.state.senders[c]) - frozenset(msg.complaints)
            for v in msg.complaints:
                accused.setdefault(v, []).append(c)
        for v, by in sorted(accused.items()):
            if v in accepted:
                self._exclude(
                    v,
                    f"InvalidMessage: its share ciphertexts failed authentication at clients {sorted(by)[:10]}",
                )
        self.state.u3 = tuple(c for c in sorted(accepted) if c not in accused)
        u3 = set(self.state.u3)
        self.state.dead = tuple(c for c in self.state.u2 if c not in u3)
        t = self.params.threshold
        self._need(
            len(self.state.u3) >= t,
            f"{len(self.state.u3)} masked inputs survive, fewer than the threshold {t}",
            ph,
        )
        if self.recipient is not None:
            self._need(self.recipient in u3, f"the designated recipient {self.recipient} dropped", ph)
        if len(self.state.u3) < self.schema.min_contributors:
            raise ReleaseRefusedError(
                f"{len(self.state.u3)} surviving input(s) < min_contributors={self.schema.min_contributors}; "
                "aborting before unmasking, nothing is revealed",
                party=SERVER,
                phase=ph,
            )
        for u in self.state.u3:
            live = len(set(self.state.graph.neighbours(u)) & u3)
            self._need(
                live >= t, f"survivor {u} has {live} live neighbours, fewer than the threshold {t}", ph
            )
        for v in self.state.dead:
            if not self._masked_with_dead(v):
                continue
            holders = self._masked_with_dead(v)  # survivors holding an authenticated share of v
            self._need(
                len(holders) >= t,
                f"dropped client {v} has {len(holders)} live share holders, fewer than the threshold {t}",
                ph,
            )
        dtype = ring_dtype(self.schema.ring_bits)
        total = np.zeros(self.layout.length, dtype=dtype)
        for u in self.state.u3:
            np.add(total, accepted[u].vector.astype(dtype, copy=False), out=total)
        self.state.total = total
        out = {}
        dead = set(self.state.dead)
        for u in self.state.u3:
            masked_with = set(self.state.masked_with[u]) | {u}
            out[u] = UnmaskRequest(
                session_id=self.state.session_id,
                alive=tuple(sorted(masked_with & u3)),
                dead=tuple(sorted(masked_with & dead)),
            ).to_bytes()
        return Outgoing(Stage.UNMASKING.value, out)

    def _after_unmasking(self, replies: Sequence[tuple[int, bytes]]) -> Outgoing | None:
        ph = Stage.UNMASKING.value
        assert self.state.graph is not None and self.state.total is not None
        t0 = time.perf_counter()
        c0 = time.process_time()
        u3, dead = set(self.state.u3), set(self.state.dead)
        counts: dict[int, int] = {}
        for c, _ in replies:
            counts[c] = counts.get(c, 0) + 1
        good: dict[int, Unmask] = {}
        for c, payload in replies:
            if c not in u3 or c in self.state.unmask_rejected:
                continue
            if counts[c] > 1:
                self.state.unmask_rejected[c] = f"sent {counts[c]} unmask replies; all ignored"
                continue
            try:
                msg = decode(payload, (Unmask, Abort))
            except MalformedMessageError as exc:
                self.state.unmask_rejected[c] = f"MalformedMessageError: {exc}"
                continue
            if isinstance(msg, Abort):
                self.state.unmask_rejected[c] = f"{msg.reason} (client abort): {msg.detail}"
                continue
            masked_with = set(self.state.masked_with[c]) | {c}
            ok = (
                msg.session_id == self.state.session_id
                and msg.alive == tuple(sorted(masked_with & u3))
                and set(msg.dead) <= (masked_with & dead)
                and len(set(msg.dead)) == len(msg.dead)
                and msg.seed_shares.shape == (len(msg.alive), _shamir.LIMBS)
                and msg.key_shares.shape == (len(msg.dead), _shamir.LIMBS)
            )
            if not ok:
                self.state.unmask_rejected[c] = "reply does not match the request"
                continue
            good[c] = msg
        t1 = time.perf_counter()
        seeds = self._reconstruct_kind(good, "seed", list(self.state.u3), ph)
        needed = [v for v in self.state.dead if self._masked_with_dead(v)]
        keys = self._reconstruct_kind(good, "key", needed, ph)
        total = self.state.total
        t2 = time.perf_counter()
        c2 = time.process_time()
        self._remove_masks(total, seeds, keys)
        t3 = time.perf_counter()
        c3 = time.process_time()
        for s in seeds.values():
            wipe(s)
        for k in keys.values():
            wipe(k)
        MaskExpander(self.layout.length, self.schema.ring_bits, algorithm=self.config.prg).reduce(total)
        self.state.unmask_seconds = {
            "decode": t1 - t0,
            "reconstruct": t2 - t1,
            "remove_masks": t3 - t2,
            "remove_masks_cpu": c3 - c2,
            "total_cpu": c3 - c0,
            "expansions": float(len(self.state.u3) + sum(len(self._masked_with_dead(v)) for v in keys)),
        }
        if self.recipient is None:
            self.state.result = release_ring(self.schema, self.layout, total, len(self.state.u3), ph)
            return None
        deliver = DeliverRequest(
            session_id=self.state.session_id,
            survivors=self.state.u3,
            ring_bits=self.schema.ring_bits,
            vector=total,
        )
        return Outgoing(Stage.DELIVER.value, {self.recipient: deliver.to_bytes()})

    def _after_deliver(self, replies: Sequence[tuple[int, bytes]]) -> None:
        self.state.delivered = True
        return None

    # -- reconstruction and unmasking ----------------------------------------------------------------

    def _verify(self, kind: str, owner: int, secret: np.ndarray) -> bool:
        if kind == "seed":
            return commitment(self.state.session_id, owner, secret.tobytes()) == self.state.commitments.get(
                owner
            )
        try:
            pk = X25519PrivateKey.from_private_bytes(secret.tobytes()).public_key().public_bytes_raw()
        except ValueError:
            return False
        return pk == self.state.keys[owner][1]

    def _reconstruct_kind(
        self, good: Mapping[int, Unmask], kind: str, owners: Sequence[int], phase: str
    ) -> dict[int, np.ndarray]:
        """Reconstruct the seeds (``kind="seed"``) or mask keys (``"key"``) of ``owners`` from the
        accepted unmask replies.

        Fast path: at least ``t`` responders that returned the same owner list (the complete graph)
        give a ``(t, owners, limbs)`` array straight from their share matrices, reconstructed with one
        cached Lagrange computation. Everything else (SecAgg+ neighbourhoods, verification failures)
        goes through :meth:`_reconstruct_all`.
        """
        t = self.params.threshold
        out: dict[int, np.ndarray] = {}
        remaining = set(owners)
        if not remaining:
            return out
        groups: dict[tuple[int, ...], list[int]] = {}
        for c, msg in good.items():
            groups.setdefault(msg.alive if kind == "seed" else msg.dead, []).append(c)
        for ids, responders in groups.items():
            todo = [i for i, o in enumerate(ids) if o in remaining]
            if len(responders) < t or len(todo) < 2:
                continue
            chosen = sorted(responders, key=lambda w: self.x[w])[:t]
            shares = np.stack(
                [(good[w].seed_shares if kind == "seed" else good[w].key_shares)[todo] for w in chosen]
            )
            secrets, valid = _shamir.reconstruct([self.x[w] for w in chosen], shares)
            for j, i in enumerate(todo):
                o = ids[i]
                if valid[j] and self._verify(kind, o, secrets[j]):
                    out[o] = secrets[j].copy()
                    remaining.discard(o)
            wipe(secrets, shares)
        if remaining:
            holders: dict[int, dict[int, np.ndarray]] = {o: {} for o in remaining}
            for c, msg in good.items():
                ids, rows = (msg.alive, msg.seed_shares) if kind == "seed" else (msg.dead, msg.key_shares)
                for i, o in enumerate(ids):
                    if o in holders:
                        holders[o][c] = rows[i]
            out.update(self._reconstruct_all(holders, kind, phase))
        return out

    def _reconstruct_all(
        self, holders: Mapping[int, Mapping[int, np.ndarray]], kind: str, phase: str
    ) -> dict[int, np.ndarray]:
        """Reconstruct every owner's secret from ``threshold`` holders; verify each against its
        commitment (seeds) or advertised public key (mask keys), retrying other holder subsets on a
        mismatch. Owners that share a holder set (complete graph) are reconstructed together with one
        cached Lagrange computation; owners with their own holder sets (SecAgg+) in one vectorised
        batch."""
        t = self.params.threshold
        groups: dict[tuple[int, ...], list[int]] = {}
        for owner, hs in holders.items():
            if len(hs) < t:
                raise ThresholdError(
                    f"only {len(hs)} share holders answered for the {kind} of client {owner}, fewer than the threshold {t}",
                    party=SERVER,
                    phase=phase,
                )
            chosen = tuple(sorted(hs, key=lambda w: self.x[w])[:t])
            groups.setdefault(chosen, []).append(owner)
        out: dict[int, np.ndarray] = {}
        retry: list[int] = []

        def accept(owners: Sequence[int], secrets: np.ndarray, valid: np.ndarray) -> None:
            for i, o in enumerate(owners):
                if valid[i] and self._verify(kind, o, secrets[i]):
                    out[o] = secrets[i].copy()
                else:
                    retry.append(o)
            wipe(secrets)

        singles: list[tuple[tuple[int, ...], int]] = []
        for chosen, owners in groups.items():
            if len(owners) == 1:  # its own holder set (SecAgg+): batched below, a cache would not hit
                singles.append((chosen, owners[0]))
                continue
            shares = np.stack([np.stack([holders[o][w] for o in owners]) for w in chosen])  # (t, S, LIMBS)
            accept(owners, *_shamir.reconstruct([self.x[w] for w in chosen], shares))
        if singles:
            xs = np.array([[self.x[w] for w in chosen] for chosen, _ in singles], dtype=np.int64)
            shares = np.stack(
                [np.stack([holders[o][w] for w in chosen]) for chosen, o in singles]
            )  # (G, t, L)
            accept([o for _, o in singles], *_shamir.reconstruct_many(xs, shares))
        for o in retry:
            ranked = sorted(holders[o], key=lambda w: self.x[w])
            for start in range(1, len(ranked) - t + 1):
                sub = ranked[start : start + t]
                sec, valid = _shamir.reconstruct(
                    [self.x[w] for w in sub], np.stack([holders[o][w] for w in sub])[:, None, :]
                )
                if valid[0] and self._verify(kind, o, sec[0]):
                    out[o] = sec[0].copy()
                    break
            else:
                raise ThresholdError(
                    f"no {t} consistent shares of the {kind} of client {o} among {len(hs)} holders (bad shares)",
                    party=SERVER,
                    phase=phase,
                )
            self.state.bad_shares[o] = f"{kind} reconstruction needed a second holder subset"
        return out

    def _masked_with_dead(self, v: int) -> list[int]:
        """Survivors whose masked input carries a pairwise mask with the dropped client ``v``."""
        return [u for u in self.state.u3 if v in self.state.masked_with.get(u, ())]

    def _remove_masks(
        self, total: np.ndarray, seeds: Mapping[int, np.ndarray], keys: Mapping[int, np.ndarray]
    ) -> None:
        """total -= sum of self masks of survivors, and -/+ the pairwise masks between survivors and the
        dropped (one PRG expansion each), split over ``workers`` threads (the PRG releases the GIL)."""
        sid, r = self.state.session_id, self.round_index
        public = {u: X25519PublicKey.from_public_bytes(self.state.keys[u][1]) for u in self.state.u3}
        jobs: list[tuple[str, Any]] = [("self", (u, seeds[u].tobytes())) for u in self.state.u3]
        for v, sk in keys.items():
            jobs.append(("pair", (v, sk.tobytes())))

        def work(chunk: list[tuple[str, Any]]) -> np.ndarray:
            ex = MaskExpander(self.layout.length, self.schema.ring_bits, algorithm=self.config.prg)
            acc = ex.zeros()
            for kind, (owner, secret) in chunk:
                if kind == "self":
                    ex.add(acc, self_key(secret, sid, r, owner))
                    continue
                sk = X25519PrivateKey.from_private_bytes(secret)
                for u in self._masked_with_dead(owner):
                    shared = sk.exchange(public[u])
                    key = pair_key(shared, sid, r, u, owner)
                    if owner > u:  # y_u holds +PRG(k_uv): remove it
                        ex.add(acc, key)
                    else:
                        ex.subtract(acc, key)
            return acc

        n_jobs = sum(1 if k == "self" else len(self._masked_with_dead(o)) for k, (o, _) in jobs)
        workers = min(self.workers, max(1, len(jobs)))
        if workers == 1 or n_jobs < 8:
            np.subtract(total, work(jobs), out=total)
            return
        # Interleave so each thread gets a similar number of expansions.
        order = sorted(range(len(jobs)), key=lambda i: jobs[i][0] != "pair")
        chunks: list[list[tuple[str, Any]]] = [[] for _ in range(workers)]
        for j, i in enumerate(order):
            chunks[j % workers].append(jobs[i])
        with ThreadPoolExecutor(max_workers=workers) as pool:
            for acc in pool.map(work, chunks):
                np.subtract(total, acc, out=total)
