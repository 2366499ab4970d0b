"""SecAgg+ (Bell et al., CCS 2020) and, on the complete graph, SecAgg (Bonawitz et al., CCS 2017).

One implementation of masking-based secure aggregation with dropout recovery. Each client masks its
ring-encoded input with a self mask and with pairwise masks shared with its neighbours in a secret-sharing
graph, and Shamir-shares the two secrets that let the survivors remove the masks of whoever drops out.
:class:`SecAggPlus` uses a random Harary graph of degree about :math:`\\log n` (parameters from
:func:`~securefgl.protocols._harary.find_graph_parameters`); :class:`~securefgl.protocols.secagg.SecAgg`
is this class configured with the complete graph.

Stages (:class:`Stage`, in this order; messages in :mod:`securefgl.protocols.messages`):

1. ``advertise_keys``: the server sends the public parameters; each client draws two X25519 key pairs
   (channel :math:`c_u`, mask :math:`s_u`) and returns the public keys.
2. ``share_keys``: the server relays all keys. Each client computes the session id

   .. math::
       \\mathrm{sid} = \\mathrm{SHA256}(\\text{protocol}, \\text{round}, \\text{invited}, k, t, b, d,
       \\text{prg}, \\text{recipient}, \\text{schema fingerprint}, \\mathrm{SHA256}(\\text{context}),
       \\{(v, c^{pk}_v, s^{pk}_v)\\}_{v \\in U_1}),

   derives the graph from it (so nobody chooses the neighbourhoods), draws a self-mask seed
   :math:`b_u`, Shamir-shares :math:`b_u` and :math:`s^{sk}_u` :math:`t`-out-of-:math:`|N(u)|` among
   its neighbours :math:`N(u)` (itself included), and encrypts each neighbour's shares with
   ChaCha20-Poly1305 under :math:`\\mathrm{HKDF}(\\mathrm{X25519}(c^{sk}_u, c^{pk}_v))` with
   ``(session, src, dst)`` in the associated data. It also sends
   :math:`\\mathrm{SHA256}(\\mathrm{sid}, u, b_u)`, a commitment the server checks reconstructions
   against.
3. ``masked_input``: the server forwards the ciphertexts. Client :math:`u` decrypts its shares,
   reports the senders whose ciphertext fails authentication (*complaints*; it does not mask against
   them, and the server excludes them), encodes its contribution with ``schema.encode`` and sends

   .. math::
       y_u = x_u + \\mathrm{PRG}(b_u) + \\sum_{v \\in M_u,\\, v > u} \\mathrm{PRG}(k_{uv})
             - \\sum_{v \\in M_u,\\, v < u} \\mathrm{PRG}(k_{uv}) \\bmod 2^{b},
       \\qquad k_{uv} = \\mathrm{HKDF}(\\mathrm{X25519}(s^{sk}_u, s^{pk}_v), \\text{sid}, (u, v)),

   with :math:`M_u \\subseteq N(u) \\cap U_2` the neighbours whose shares authenticated.
   :math:`x_u` also carries the client's per-block clip counts, split into limbs that cannot overflow,
   so only their sum is revealed.
4. ``unmasking``: for each survivor :math:`u \\in U_3` the server asks its neighbours for shares of
   :math:`b_u`; for each neighbour that dropped (or was excluded) after sharing, for shares of
   :math:`s^{sk}_v`. It reconstructs, checks each secret against its commitment (or public key), and
   removes the masks: :math:`\\sum_{u \\in U_3} y_u - \\mathrm{PRG}(b_u) \\mp \\sum_{v \\in D}
   \\mathrm{PRG}(k_{uv}) = \\sum_{u \\in U_3} x_u`.
5. ``deliver`` (designated-recipient mode only): see below.

With ``consistency_check`` (on by default for ``adversary="semi-malicious"``, a server that may lie
about who dropped), a ``consistency_check`` stage runs between 3 and 4 (Bonawitz et al. 2017, §4;
:mod:`~securefgl.protocols._consistency`): every survivor signs ``(sid, round, U_3)`` with its Ed25519
identity key and answers the unmask request only if a quorum of survivors signed the very set it
signed and the request splits its neighbours by that set. With identities (a directory from
configuration), advertised keys are signed too, so the server cannot substitute them.

Designated-recipient mode (``recipient=r``; FedStruct's receiver-blinded sums): every contributor
:math:`u` also adds a *recipient pad* :math:`\\mathrm{PRG}(p_{ur})`, :math:`p_{ur} =
\\mathrm{HKDF}(\\mathrm{X25519}(c^{sk}_u, c^{pk}_r), \\text{"recipient-pad"}, \\text{sid}, (u, r))`. The
pad key comes from the *channel* key pair, which is never secret-shared, so no set of clients below the
threshold and no server can remove it; only :math:`u` and :math:`r` know it. After unmasking, the server
holds :math:`\\sum_{u \\in U_3} x_u + \\mathrm{PRG}(p_{ur})`, uniformly random to it, and relays it with
the list :math:`U_3` to :math:`r`, who subtracts its :math:`|U_3|` pads, decodes and applies the release
rules. The server learns the sizes and :math:`U_3`, nothing about the sum. If :math:`r` drops, nobody
learns the sum.

Resumed sessions (``session_uses > 1``, opt-in; :mod:`~securefgl.protocols._secaggplus_resume`): after a sum
that every client completed, the next sum over the same clients reuses the key agreement. It is two stages,
``resume`` (each client shares a fresh self-mask seed and sends its input masked with every neighbour under
per-use keys) and ``unmasking``; a use counter, per-use ids and the end of the session on any dropout keep it
as safe as a fresh session. An optimistic use (``optimistic_uses``) is one round trip without self masks. In
simulation a use's pairwise masks can be expanded while the clients train (:meth:`SecAggPlus.prepare`,
:mod:`~securefgl.protocols._secaggplus_precompute`).

Security:
    Honest-but-curious server, plus fewer than :math:`t` colluding clients per neighbourhood (SecAgg: in
    total), learn nothing about the inputs beyond their sum over :math:`U_3`, which has at least
    :math:`t` clients (and ``schema.min_contributors``). Every survivor refuses to reveal both share
    kinds of one peer (alive/dead overlap), duplicates, non-neighbours, requests with fewer than
    :math:`t` survivors, and repeated or out-of-order requests (:class:`~securefgl.errors.RequestRefusedError`,
    :class:`~securefgl.errors.ThresholdError`, :class:`~securefgl.errors.StageOrderError`). Everything is
    bound to the session id, so a server that shows different contexts (e.g. models) or parameters to
    different clients is caught: the clients' shares fail to authenticate, and a client left with fewer
    than :math:`t` valid shares aborts with :class:`~securefgl.errors.InconsistentViewError` before
    sending its input. Dropouts at any stage are tolerated as long as every needed secret keeps
    :math:`t` live holders; otherwise the server aborts with ThresholdError *before* asking for any
    share. A client that sends garbled, replayed, duplicated or misauthenticated messages is excluded
    like a dropped one and the sum over the others stays exact; a complaint about a share excludes the
    accused only when ``t`` clients make it, otherwise it excludes the complainers. No sum of fewer
    than ``min_contributors`` (default 2) inputs, and none beyond ``n * bound``, is released. Against
    a server that lies about dropouts: the consistency round and the semi-malicious parameters
    (:math:`2t > k + 1`). Not protected: the released sum itself (see the attack harness), the curious
    configuration against a lying server, and an in-bound but false input of a malicious client.
"""

from __future__ import annotations

import os
import warnings
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar, Literal

import numpy as np
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from securefgl.errors import ConfigError, ProtocolError, ThresholdError
from securefgl.protocols._harary import GraphParameters
from securefgl.protocols._identity import IdentityDirectory, generate_identities
from securefgl.protocols._parties import check_clients, client_contexts
from securefgl.protocols._prg import InsecureDeterministicRandom, PrgAlgorithm, RandomSource, system_random
from securefgl.protocols._release import DEFAULT_MIN_CONTRIBUTORS
from securefgl.protocols._rounding import RoundingBits
from securefgl.protocols._secaggplus_client import SecAggPlusClient, SecAggPlusClientState
from securefgl.protocols._secaggplus_params import SecAggPlusConfig, Stage, resolve_graph
from securefgl.protocols._secaggplus_precompute import (
    MaskPrecompute,
    WorkerMaskPrecompute,
    pairwise_jobs,
    start_precompute,
    warm_up,
)
from securefgl.protocols._secaggplus_resume import (
    ClientSession,
    ResumedInput,
    ResumedUnmaskRequest,
    ServerSession,
)
from securefgl.protocols._secaggplus_server import SecAggPlusServer, SecAggPlusServerState
from securefgl.protocols._secaggplus_session import ClipLayout, session_graph, session_id_for
from securefgl.protocols.base import SERVER, Contribution, DropoutPlan, Protocol, Sums, Transcript
from securefgl.protocols.encoding import SumSchema, default_rng
from securefgl.protocols.messages import ResumeRequest
from securefgl.protocols.router import Interceptor, Router

__all__ = [
    "ClientSession",
    "ClipLayout",
    "IdentityDirectory",
    "ResumedInput",
    "ResumedUnmaskRequest",
    "SecAggPlus",
    "SecAggPlusClient",
    "SecAggPlusConfig",
    "SecAggPlusServer",
    "SecAggPlusServerState",
    "ServerSession",
    "SecAggPlusClientState",
    "Stage",
    "generate_identities",
    "resolve_graph",
    "session_graph",
    "session_id_for",
]


class SecAggPlus(Protocol):
    """SecAgg+ (Bell et al., CCS 2020, https://eprint.iacr.org/2020/704): masking secure aggregation
    over a random Harary graph of degree :math:`O(\\log n)`, tolerant to dropouts at every stage.

    See the module docstring for the stages and the designated-recipient construction.

    .. math::
        S = \\sum_{u \\in U_3} y_u - \\mathrm{PRG}(b_u)
            - \\sum_{v \\in D} \\sum_{u \\in N(v) \\cap U_3} \\pm \\mathrm{PRG}(k_{uv})
          = \\sum_{u \\in U_3} x_u \\pmod{2^b}

    Args:
        graph: ``"harary"`` or ``"complete"``. (default: ``"harary"``)
        degree, threshold, dropout_rate, corrupt_rate, adversary, prg, security_bits, correctness_bits,
            complete_below: see :class:`SecAggPlusConfig`.
        record_views: keep every message in the transcript (off for benchmarks). (default: ``True``)
        workers: threads expanding masks, the vector split between them: each client's masked input, the
            server's mask removal and a designated recipient's pads (default: the CPU count, at most 8).
        rng: generator used only to resolve ``"any"`` entries of a dropout plan (default: OS-seeded).
        interceptor: fault-injection hook of the router (tests: garble, drop, replay, duplicate).
        consistency_check, insecure_low_threshold, min_contributors, session_uses, optimistic_uses: see
            :class:`SecAggPlusConfig`
            (the consistency round is on by default exactly when ``adversary="semi-malicious"``; a sum
            of fewer than ``min_contributors`` inputs, default 2, is never unmasked).
        identities: the clients' Ed25519 identity public keys: an :class:`IdentityDirectory` or the
            path of its JSON file (the deployment's node-authentication keys). With identities, key
            advertisements are signed and checked. (default: ``None``)
        identity_keys: client id -> Ed25519 private key, for the in-process clients when
            ``identities`` is given. Without ``identities``, the consistency round draws fresh
            per-session identity keys from the OS CSPRNG (simulation only: real clients hold their own).
        insecure_seed: INSECURE, tests and known-answer vectors only: derive every key, seed, share
            and rounding decision from this seed instead of the OS CSPRNG.

    With ``session_uses > 1`` the protocol object keeps, per set of clients and recipient, the session of
    the last sum (each party's half held apart, as each party would hold its own) and resumes it for the
    next sum over the same clients when no dropout is planned (:mod:`._secaggplus_resume`); the transcript
    says which use a sum was (``extra["session_use"]``, 0 for a key agreement).

    Shapes:
        Contributions as declared by the schema; each masked vector is ``(schema.length + c,)`` ring
        elements of ``schema.ring_bits`` bits, ``c`` the clip-count limbs (:class:`ClipLayout`).

    Security:
        See the module docstring. Threshold :math:`t` per neighbourhood of :math:`k+1` clients; with
        the finder's parameters, tolerated dropouts :math:`\\delta n` and colluding clients
        :math:`\\gamma n` except with probability :math:`2^{-20}` (correctness) and :math:`2^{-40}`
        (security). The sum itself is released (to the server, or to the designated recipient only).
    """

    name: ClassVar[str] = "secagg+"
    _graph: ClassVar[Literal["harary", "complete"]] = "harary"
    #: The server party class (a subclass can model a deviating server in attack simulations).
    server_class: ClassVar[type[SecAggPlusServer]] = SecAggPlusServer
    #: The client party class.
    client_class: ClassVar[type[SecAggPlusClient]] = SecAggPlusClient

    def __init__(
        self,
        *,
        graph: Literal["harary", "complete"] | None = None,
        degree: int | None = None,
        threshold: int | float | None = None,
        dropout_rate: float = 0.1,
        corrupt_rate: float = 0.05,
        adversary: Literal["curious", "semi-malicious", "none"] = "curious",
        prg: PrgAlgorithm = "aes256-ctr",
        security_bits: float = 40.0,
        correctness_bits: float = 20.0,
        complete_below: int = 32,
        record_views: bool = True,
        workers: int | None = None,
        rng: np.random.Generator | None = None,
        interceptor: Interceptor | None = None,
        consistency_check: bool | None = None,
        insecure_low_threshold: bool = False,
        min_contributors: int = DEFAULT_MIN_CONTRIBUTORS,
        identities: IdentityDirectory | str | os.PathLike[str] | None = None,
        identity_keys: Mapping[int, Ed25519PrivateKey] | None = None,
        insecure_seed: bytes | int | None = None,
        session_uses: int = 1,
        optimistic_uses: bool = False,
    ) -> None:
        self.config = SecAggPlusConfig(
            graph=graph or self._graph,
            degree=degree,
            threshold=threshold,
            dropout_rate=dropout_rate,
            corrupt_rate=corrupt_rate,
            adversary=adversary,
            prg=prg,
            security_bits=security_bits,
            correctness_bits=correctness_bits,
            complete_below=complete_below,
            consistency_check=consistency_check,
            insecure_low_threshold=insecure_low_threshold,
            min_contributors=min_contributors,
            session_uses=session_uses,
            optimistic_uses=optimistic_uses,
        )
        #: (clients, recipient) -> the session to resume next (at most :data:`_MAX_SESSIONS`, oldest dropped).
        self._sessions: OrderedDict[tuple[tuple[int, ...], int | None], _KeptSession] = OrderedDict()
        #: the pairwise masks of the announced next resumed use, expanding (:meth:`prepare`)
        self._precomputed: MaskPrecompute | WorkerMaskPrecompute | None = None
        if isinstance(identities, (str, Path, os.PathLike)):
            identities = IdentityDirectory.from_file(identities)
        if identities is not None and not isinstance(identities, IdentityDirectory):
            raise ConfigError(
                f"identities must be an IdentityDirectory or a file path, got {type(identities).__name__}"
            )
        if identity_keys is not None and identities is None:
            raise ConfigError("identity_keys need the matching identities (the public directory)")
        self.identities = identities
        self._identity_keys = dict(identity_keys) if identity_keys is not None else None
        self.record_views = bool(record_views)
        if workers is not None and (isinstance(workers, bool) or not isinstance(workers, int) or workers < 1):
            raise ConfigError(f"workers must be a positive integer, got {workers!r}")
        self.workers = workers or min(8, os.cpu_count() or 1)
        self._rng = rng
        self.interceptor = interceptor
        if insecure_seed is not None:
            warnings.warn(
                f"{type(self).__name__}(insecure_seed=...) derives every key and mask from a fixed seed: "
                "INSECURE, for tests and known-answer vectors only",
                UserWarning,
                stacklevel=2,
            )
        self._insecure_seed = insecure_seed

    @property
    def min_contributors(self) -> int:
        """The fewest inputs a released sum may hold (the schema's rule applies too, where stricter)."""
        return self.config.min_contributors

    def parameters(self, num_clients: int) -> GraphParameters:
        """The graph degree and threshold this protocol uses with ``num_clients`` invited clients."""
        return resolve_graph(self.config, num_clients)

    def _random_for(
        self, client: int, round_index: int, use: int = 0
    ) -> tuple[RandomSource, RoundingBits | None]:
        if self._insecure_seed is None:
            return system_random, None
        label = f"{self.name}/client/{client}/round/{round_index}" + (f"/use/{use}" if use else "")
        src = InsecureDeterministicRandom(self._insecure_seed, label=label)
        return src, RoundingBits.insecure_seeded(src(16), "encoding")

    def _dropout_rng(self) -> np.random.Generator:
        """The generator that resolves ``"any"`` entries of a dropout plan."""
        if self._rng is not None:
            return self._rng
        if self._insecure_seed is not None:
            return np.random.default_rng(
                int.from_bytes(InsecureDeterministicRandom(self._insecure_seed, "dropouts")(16), "big")
            )
        return default_rng()

    def _identities(
        self, clients: tuple[int, ...], round_index: int
    ) -> tuple[dict[int, Ed25519PrivateKey] | None, IdentityDirectory | None]:
        """The identity keys of this session's in-process clients and the directory, or ``(None, None)``."""
        if self.identities is not None:
            missing = self.identities.missing(clients)
            keys = self._identity_keys or {}
            no_private = sorted(c for c in clients if c not in keys)
            if missing or no_private:
                raise ConfigError(
                    f"clients {(missing or no_private)[:5]} have no identity "
                    f"{'public key in the directory' if missing else 'private key (identity_keys)'}"
                )
            return {c: keys[c] for c in clients}, self.identities
        if not self.config.consistency:
            return None, None
        src = system_random
        if self._insecure_seed is not None:
            src = InsecureDeterministicRandom(
                self._insecure_seed, label=f"{self.name}/identities/{round_index}"
            )
        return generate_identities(clients, src)

    def _clients(
        self,
        schema: SumSchema,
        contributions: Mapping[int, Contribution],
        clients: tuple[int, ...],
        round_index: int,
        recipient: int | None,
        contexts: Mapping[int, bytes],
        identities: tuple[dict[int, Ed25519PrivateKey] | None, IdentityDirectory | None] = (None, None),
        sessions: Mapping[int, ClientSession] | None = None,
    ) -> dict[int, SecAggPlusClient]:
        """One client party per invited client, in the order of ``clients`` (resuming ``sessions``)."""
        keys, directory = identities
        parties = {}
        for c in clients:
            session = None if sessions is None else sessions[c]
            src, gen = self._random_for(c, round_index, 0 if session is None else session.use + 1)
            parties[c] = self.client_class(
                c,
                schema,
                contributions[c],
                config=self.config,
                protocol_name=self.name,
                round_index=round_index,
                recipient=recipient,
                context=contexts[c],
                random=src,
                encode_rng=gen,
                identity=None if keys is None else keys[c],
                directory=directory,
                session=session,
                workers=self.workers,
            )
        return parties

    def prepare(
        self,
        schema: SumSchema,
        clients: Sequence[int],
        *,
        round_index: int = 0,
        recipient: int | None = None,
        context: bytes | Mapping[int, bytes] = b"",
    ) -> bool:
        """Announce the next sum (see :meth:`Protocol.prepare`): when it will be a resumed or optimistic use of
        a kept session, start expanding every client's pairwise masks for it in the mask worker process, or on a
        thread where none runs (:mod:`._secaggplus_precompute`); each client takes its sum if the request it receives is the one
        announced, else expands its masks as usual. Returns whether expansion started."""
        self._discard_precomputed()
        if self.config.session_uses > 1:
            warm_up()  # the worker process that expands masks ahead: ready by the first resumed use
        ids = tuple(sorted({int(c) for c in clients}))
        kept = self._sessions.get((ids, recipient))
        if recipient is not None or kept is None or kept.server.use + 1 >= self.config.session_uses:
            return False
        request = ResumeRequest(
            session_id=kept.server.session_id,
            use=kept.server.use + 1,
            protocol=self.name,
            round_index=int(round_index),
            ring_bits=schema.ring_bits,
            length=ClipLayout(schema).length,
            prg=self.config.prg,
            recipient=None,
            schema_fingerprint=schema.fingerprint(),
        )
        jobs = pairwise_jobs(request, kept.clients, client_contexts(context, ids))
        self._precomputed = start_precompute(jobs, request.length, schema.ring_bits, self.config.prg)
        return True

    def _discard_precomputed(self) -> None:
        if self._precomputed is not None:
            self._precomputed.discard()
            self._precomputed = None

    def aggregate(
        self,
        schema: SumSchema,
        contributions: Mapping[int, Contribution],
        *,
        dropouts: DropoutPlan | None = None,
        round_index: int = 0,
        recipient: int | None = None,
        context: bytes | Mapping[int, bytes] = b"",
    ) -> tuple[Sums, Transcript]:
        """Securely sum ``contributions``. See :meth:`Protocol.aggregate`.

        Raises:
            ConfigError: bad arguments (client ids, recipient, dropout plan, threshold).
            OverflowRiskError: more contributions than ``schema.max_clients``.
            ThresholdError: too few survivors (or the designated recipient dropped); nothing revealed.
            ReleaseRefusedError: fewer surviving inputs than ``schema.min_contributors``.
        """
        if not isinstance(schema, SumSchema):
            raise ConfigError(f"schema must be a SumSchema, got {type(schema).__name__}")
        clients = check_clients(contributions)
        schema.check_num_clients(len(clients))
        if recipient is not None and recipient not in contributions:
            raise ConfigError(
                f"recipient {recipient!r} is not an invited client; invited: {list(clients)[:10]}"
            )
        contexts = client_contexts(context, clients)
        stages = Stage.ordered(recipient=recipient is not None, consistency=self.config.consistency)
        plan = (dropouts or DropoutPlan.none()).resolve(stages, self._dropout_rng())
        kept = self._sessions.pop((clients, recipient), None)
        if kept is not None and plan:  # a planned dropout would reveal a mask key: agree on fresh keys
            kept.wipe()
            kept = None
        ids = kept.identities if kept is not None else self._identities(clients, round_index)
        transcript = Transcript(
            protocol=self.name,
            round_index=int(round_index),
            invited=clients,
            recipient=SERVER if recipient is None else recipient,
        )
        server = self.server_class(
            schema,
            clients,
            config=self.config,
            protocol_name=self.name,
            round_index=round_index,
            recipient=recipient,
            workers=self.workers,
            directory=ids[1],
            session=None if kept is None else kept.server,
        )
        parties = self._clients(
            schema,
            contributions,
            clients,
            round_index,
            recipient,
            contexts,
            ids,
            None if kept is None else kept.clients,
        )
        if kept is not None:
            for p in parties.values():
                p.precomputed = self._precomputed
        transcript.extra.update(
            session_use=0 if kept is None else kept.server.use + 1,
            optimistic_use=server.optimistic,
            graph="complete" if server.params.complete else "harary",
            degree=server.params.degree,
            threshold=server.params.threshold,
            consistency_check=self.config.consistency,
        )
        try:
            Router(
                transcript, dropouts=plan, record_views=self.record_views, interceptor=self.interceptor
            ).run(server, parties)
            if recipient is not None:
                sums = parties[recipient].result
                if sums is None:
                    raise ThresholdError(
                        f"the designated recipient {recipient} dropped out before the sum was delivered; "
                        "nobody learned the sum",
                        party=recipient,
                        phase=Stage.DELIVER.value,
                    )
                transcript.extra["delivered_to"] = recipient
            else:
                assert server.state.result is not None
                sums = server.state.result
        except ProtocolError as exc:
            _finish(transcript, server, parties)
            exc.transcript = transcript  # type: ignore[attr-defined]
            raise
        finally:
            self._discard_precomputed()  # what no client took is wiped
        _finish(transcript, server, parties)
        self._keep(clients, recipient, server, parties, ids)
        transcript.clip_counts = dict(sums.clip_counts)
        transcript.withheld = dict(sums.withheld)
        return sums, transcript

    def _keep(
        self,
        clients: tuple[int, ...],
        recipient: int | None,
        server: SecAggPlusServer,
        parties: Mapping[int, SecAggPlusClient],
        ids: tuple[dict[int, Ed25519PrivateKey] | None, IdentityDirectory | None],
    ) -> None:
        """Keep the session for the next sum over ``clients`` if the server and every client may resume it."""
        if self.config.session_uses < 2:
            return
        nxt = server.next_session()
        sessions = {c: p.session for c, p in parties.items()}
        if nxt is None or any(v is None for v in sessions.values()):
            for v in sessions.values():
                if v is not None:
                    v.wipe()
            return
        self._sessions[(clients, recipient)] = _KeptSession(
            nxt, {c: v for c, v in sessions.items() if v is not None}, ids
        )
        while len(self._sessions) > _MAX_SESSIONS:
            self._sessions.popitem(last=False)[1].wipe()

    def end_sessions(self) -> None:
        """Wipe every kept session (the next sums run key agreements) and any masks expanded ahead."""
        self._discard_precomputed()
        while self._sessions:
            self._sessions.popitem()[1].wipe()

    def __repr__(self) -> str:
        c = self.config
        return (
            f"{type(self).__name__}(graph={c.graph!r}, degree={c.degree}, threshold={c.threshold}, "
            f"dropout_rate={c.dropout_rate}, corrupt_rate={c.corrupt_rate}, adversary={c.adversary!r}, prg={c.prg!r}, "
            f"consistency_check={c.consistency}, session_uses={c.session_uses})"
        )


#: Most sessions one protocol object keeps (e.g. one per designated recipient in FedStruct).
_MAX_SESSIONS = 64


@dataclass
class _KeptSession:
    """A session between two uses: the server's public half, each client's own half, the identities."""

    server: ServerSession
    clients: dict[int, ClientSession]
    identities: tuple[dict[int, Ed25519PrivateKey] | None, IdentityDirectory | None]

    def wipe(self) -> None:
        for c in self.clients.values():
            c.wipe()


def _finish(
    transcript: Transcript, server: SecAggPlusServer, parties: Mapping[int, SecAggPlusClient]
) -> None:
    transcript.session_id = server.state.session_id
    transcript.survivors = server.state.u3
    for c, why in server.state.excluded.items():
        transcript.excluded.setdefault(c, why)
    for c, p in parties.items():
        if p.error is not None:
            transcript.excluded.setdefault(c, f"{type(p.error).__name__}: {p.error}")
    transcript.extra.update(
        advertised=list(server.state.u1),
        shared=list(server.state.u2),
        dead_after_sharing=list(server.state.dead),
    )
    steps: dict[str, list[float]] = {}
    for p in parties.values():
        for k, v in p.step_seconds.items():
            steps.setdefault(k, []).append(v)
    if steps:
        transcript.extra["client_masked_input_seconds"] = {
            k: {"min": min(v), "median": float(np.median(v)), "max": max(v)} for k, v in steps.items()
        }
    if server.state.unmask_seconds:
        transcript.extra["server_unmask_seconds"] = dict(server.state.unmask_seconds)
    if server.state.u4:
        transcript.extra["signed_survivors"] = list(server.state.u4)
    if server.state.bad_shares:
        transcript.extra["bad_shares"] = {str(k): v for k, v in server.state.bad_shares.items()}
    if server.state.unmask_rejected:
        transcript.extra["unmask_rejected"] = {str(k): v for k, v in server.state.unmask_rejected.items()}
