"""One client's half of a deployed run: its data, its algorithm half and its protocol parties, bytes in and out.

:class:`ClientHalf` is what a client organisation runs. It is built from the client's own data file
(:func:`~securefgl.deploy.export.load_client_file`) and nothing else, answers the server's requests
(:mod:`securefgl.deploy.wire`) and keeps its state (model, optimiser, generators, the protocol parties of the
sums in flight) between requests. It computes everything it sends itself: the sum schemas come from its own copy
of the algorithm (never from the server), the round context from the broadcast it received, and the protocol's
client party encrypts what other clients must read (key shares) end to end, so the server relays ciphertexts.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from securefgl.algorithms.base import Algorithm, Client, RoundState, Setting
from securefgl.algorithms.registry import create_algorithm
from securefgl.config import RunConfig
from securefgl.deploy.export import CROSS_KEYS, ClientFile
from securefgl.deploy.parties import client_party, deployed_protocol, inner_protocol
from securefgl.deploy.wire import STEP_PARTS, Reply, Request
from securefgl.engine.broadcast import round_context
from securefgl.engine.evaluation import EVAL_KEY, evaluation_schema
from securefgl.engine.metrics import client_metrics
from securefgl.engine.seed_start import setting_for
from securefgl.engine.seeding import client_generators
from securefgl.engine.uploads import evaluation_upload, prepare_upload
from securefgl.errors import ConfigError, MalformedMessageError, NonFiniteError, SecureFGLError
from securefgl.protocols.dp import DistributedDP
from securefgl.protocols.encoding import SumSchema
from securefgl.protocols.messages import ResumeRequest, decode
from securefgl.protocols.secaggplus import ClientSession, IdentityDirectory, SecAggPlus

__all__ = ["ClientHalf", "make_setting_from_facts"]


def make_setting_from_facts(config: RunConfig, fed: Any, device: torch.device) -> Setting:
    """The run's :class:`Setting` from the federation's public facts (as ``make_setting`` from the graph).

    Raises:
        UnsupportedCombinationError: the algorithm makes the federation's edges public to the server (the
            server of a deployment holds no graph to read them from).
    """
    from securefgl.algorithms.registry import get_algorithm
    from securefgl.errors import UnsupportedCombinationError

    if get_algorithm(config.algorithm.name).server_knows_edges(config.algorithm.options):
        raise UnsupportedCombinationError(
            f"algorithm {config.algorithm.name!r} with these options gives the server the whole edge set; a "
            "deployment has no party holding it"
        )
    return setting_for(fed, config, device)


def _rs(body: Mapping[str, Any]) -> RoundState:
    return RoundState(
        str(body["phase"]),
        int(body["round"]),
        int(body["global_round"]),
        tuple(int(c) for c in body["clients"]),
        dict(body["broadcast"]),
        int(body["num_rounds"]),
    )


@dataclass
class _Pending:
    """A contribution waiting for its protocol run."""

    schema: SumSchema
    contribution: Mapping[str, Any]
    recipient: int | None
    context: bytes
    round_index: int


class ClientHalf:
    """The client's side of a deployed run (see the module docstring).

    Args:
        file: The client's own data file.
        device: Where its tensors live. (default: CPU)
        identity: The client's Ed25519 identity key (signs its advertised keys and, in the consistency round,
            the survivor set). (default: none)
        directory: Every client's identity public key, from this organisation's own configuration.
            (default: none; the consistency round, ``adversary="semi-malicious"``, needs both)
    """

    def __init__(
        self,
        file: ClientFile,
        device: torch.device | str = "cpu",
        *,
        identity: Ed25519PrivateKey | None = None,
        directory: IdentityDirectory | None = None,
    ) -> None:
        if (identity is None) != (directory is None):
            raise ConfigError(
                "a client's identity key and the identity directory go together: give both or neither"
            )
        if directory is not None and file.client_id not in directory:
            raise ConfigError(f"the identity directory has no key for client {file.client_id}")
        self.identity, self.directory = identity, directory
        self.file = file
        self.id = file.client_id
        self.device = torch.device(device)
        self.run: str | None = None
        self.last_seq = -1
        self.config: RunConfig | None = None
        self.algorithm: Algorithm | None = None
        self.client: Client | None = None
        self.seed = 0
        self.pending: dict[str, _Pending] = {}
        self.parties: dict[str, Any] = {}
        #: session id -> what this client kept of a SecAgg/SecAgg+ session for its next use (``session_uses``).
        self.sessions: dict[bytes, ClientSession] = {}
        self.protocol: Any = None

    # ------------------------------------------------------------------ dispatch -------------------------

    def handle(self, blob: bytes) -> bytes:
        """Answer one request frame; a refused or failed request gets a reply carrying the error."""
        try:
            req = Request.from_bytes(blob)
        except MalformedMessageError as exc:
            return Reply("", -1, self.id, {}, f"{type(exc).__name__}: {exc}").to_bytes()
        try:
            self._check(req)
            body = getattr(self, "_" + req.kind)(req)
        except SecureFGLError as exc:
            return Reply(req.run, req.seq, self.id, {}, f"{type(exc).__name__}: {exc}").to_bytes()
        return Reply(req.run, req.seq, self.id, body).to_bytes()

    def _check(self, req: Request) -> None:
        if req.kind == "hello":
            return
        if req.kind == "setup":
            if req.run == self.run and req.seq <= self.last_seq:
                raise MalformedMessageError(
                    f"setup {req.seq} of run {req.run!r} is not newer than the last request ({self.last_seq}): "
                    "replay refused"
                )
        elif req.run != self.run:
            raise MalformedMessageError(
                f"request of run {req.run!r} but client {self.id} takes part in run {self.run!r}: refused"
            )
        elif req.seq <= self.last_seq:
            raise MalformedMessageError(
                f"request {req.seq} of run {req.run!r} is not newer than the last one ({self.last_seq}): replay refused"
            )
        self.last_seq = req.seq

    # ------------------------------------------------------------------ requests -------------------------

    def _hello(self, req: Request) -> dict[str, Any]:
        return {"client": self.id, "federation": self.file.federation.to_json()}

    def _setup(self, req: Request) -> dict[str, Any]:
        config = RunConfig.from_mapping(dict(req.body["config"]))
        fed = self.file.federation
        if req.body.get("federation") != fed.digest:
            raise ConfigError(
                f"the server's federation digest {req.body.get('federation')!r} differs from client {self.id}'s "
                f"{fed.digest!r}: different partitions"
            )
        setting = make_setting_from_facts(config, fed, self.device)
        algorithm = create_algorithm(config.algorithm.name, setting, config.algorithm.options)
        self.seed = int(req.body["seed"])
        gen, work = client_generators(self.seed, self.id, fed.num_clients, self.device)
        data = self.file.data.clone()
        if not algorithm.needs_cross_edges:
            for k in CROSS_KEYS:
                if k in data:
                    del data[k]
        client = Client(
            self.id,
            data.to(self.device),
            gen,
            eval_data={k: v.to(self.device) for k, v in self.file.eval_data.items()},
            workspace={"generator": work},
        )
        algorithm.init_client(client)
        self.run, self.last_seq = req.run, req.seq
        self.config, self.algorithm, self.client = config, algorithm, client
        protocol = deployed_protocol(config, fed.num_clients, client_side=True)
        masker = inner_protocol(protocol)
        if isinstance(masker, SecAggPlus) and masker.config.consistency and self.identity is None:
            raise ConfigError(
                f"the run asks for the consistency round (protocol adversary {masker.config.adversary!r}), which "
                f"needs identities: start client {self.id}'s worker with --identity-key and --identities"
            )
        self.protocol = protocol
        self.pending.clear()
        self.parties.clear()
        return {}

    def _ready(self) -> tuple[RunConfig, Algorithm, Client]:
        if self.config is None or self.algorithm is None or self.client is None:
            raise MalformedMessageError(f"client {self.id} was not set up for this run")
        return self.config, self.algorithm, self.client

    def _losses(self, phase: str, rnd: int) -> list[float]:
        _, _, client = self._ready()
        for v in client.losses:
            if not math.isfinite(v):
                raise NonFiniteError(
                    f"training loss of client {self.id} became {v} in round {rnd} of phase {phase!r}"
                )
        return list(client.losses)

    def _step(self, req: Request) -> dict[str, Any]:
        """Run the request's parts in order (``eval``, ``train``, ``local``), then advance its protocol stages.

        One step carries everything a client can do without hearing from the server again: the evaluation of
        the last broadcast, this round's training and the first stage of each sum it contributes to, or the
        next stage of every sum in flight. Each Flower message costs a SuperNode poll and a process start,
        so a deployed round costs about as many of those as it has steps.
        """
        self._ready()
        out: dict[str, Any] = {}
        for part in req.body.get("parts", []):
            kind = str(part.get("kind"))
            if kind not in STEP_PARTS:
                raise MalformedMessageError(f"unknown step part {kind!r}; valid: {', '.join(STEP_PARTS)}")
            out[kind] = getattr(self, "_" + kind)(dict(part["body"]))
        out["payloads"] = {str(s["key"]): self._stage(s) for s in req.body.get("stages", [])}
        return out

    def _train(self, body: Mapping[str, Any]) -> dict[str, Any]:
        config, algorithm, client = self._ready()
        rs = _rs(body)
        client.losses.clear()
        outs = algorithm.client_steps([client], rs)
        losses = self._losses(rs.phase, rs.round)
        requests = list(algorithm.requests(rs))
        single = len(requests) == 1
        context = round_context(rs.broadcast)
        for key in [k for k in self.pending if k != EVAL_KEY]:  # an evaluation of this step may wait its sum
            del self.pending[key]
        for r in requests:
            if r.participants is not None and self.id not in r.participants:
                continue
            contrib = prepare_upload(
                outs.get(self.id),
                r.key,
                r.schema,
                single=single,
                cid=self.id,
                seed=self.seed,
                global_round=rs.global_round,
                phase=rs.phase,
                rnd=rs.round,
                grid=config.protocol.grid_upload,
                skip_dp=config.protocol.spec.dp,
            )
            self.pending[r.key] = _Pending(r.schema, contrib, r.recipient, context, rs.global_round)
        return {"losses": losses}

    def _eval(self, body: Mapping[str, Any]) -> dict[str, Any]:
        config, algorithm, client = self._ready()
        rs = _rs(body)
        broadcast = dict(body["eval_broadcast"])
        logits = algorithm.evaluate([client], broadcast, rs)[self.id]
        schema = evaluation_schema(
            algorithm.setting.count_bound,
            algorithm.setting.num_clients,
            num_classes=algorithm.setting.num_classes,
        )
        contrib = evaluation_upload(
            client_metrics(self.id, logits, client.data, algorithm.setting.num_classes),
            schema,
            grid=config.protocol.grid_upload,
            seed=self.seed,
            global_round=rs.global_round,
            cid=self.id,
        )
        self.pending[EVAL_KEY] = _Pending(schema, contrib, None, round_context(broadcast), rs.global_round)
        return {}

    def _local(self, body: Mapping[str, Any]) -> dict[str, Any]:
        config, algorithm, client = self._ready()
        name = str(body["phase"])
        phases = {p.name: p for p in algorithm.phases(config.train)}
        if name not in phases:
            raise ConfigError(f"unknown phase {name!r}; this algorithm's phases: {sorted(phases)}")
        client.losses.clear()
        algorithm.personalize_clients([client], dict(body["broadcast"]), phases[name])
        return {"losses": self._losses(name, 0)}

    def _stage(self, stage: Mapping[str, Any]) -> bytes | None:
        """One protocol stage of sum ``stage["key"]``; the first one starts this client's party."""
        _, _, client = self._ready()
        key = str(stage["key"])
        party = self.parties.get(key)
        if party is None or bool(stage.get("first")):
            pending = self.pending.pop(key, None)
            if pending is None:
                raise MalformedMessageError(f"client {self.id} holds no contribution for sum {key!r}")
            schema, contribution = pending.schema, pending.contribution
            if isinstance(self.protocol, DistributedDP) and key != EVAL_KEY:
                # This client's own noise share, from its own OS randomness, before its masking party starts.
                contribution = self.protocol.privatize(
                    schema, contribution, client=self.id, round_index=pending.round_index
                )
                schema = self.protocol.inner_schema(schema)
            party = client_party(
                inner_protocol(self.protocol),
                self.id,
                schema,
                contribution,
                pending.round_index,
                pending.recipient,
                pending.context,
                identity=self.identity,
                directory=self.directory,
                session=self._kept_session(bytes(stage["payload"])),
            )
            self.parties[key] = party
        out: bytes | None = party.handle(bytes(stage["payload"]))
        if party.result is not None:
            client.inbox[key] = party.result
            del self.parties[key]
        elif party.stage in ("done", "aborted"):
            del self.parties[key]
        kept = getattr(party, "session", None)
        if key not in self.parties and kept is not None:
            self.sessions[kept.session_id] = kept
        return out

    def _kept_session(self, payload: bytes) -> ClientSession | None:
        """The session a ``resume`` request names, taken out of :attr:`sessions` (the party wipes it when done
        and hands back the next one); ``None`` for any other first stage or an unknown session (the party then
        refuses the request)."""
        try:
            req = decode(payload, ResumeRequest)
        except MalformedMessageError:
            return None
        return self.sessions.pop(req.session_id, None)

    def _finish(self, req: Request) -> dict[str, Any]:
        self.pending.clear()
        self.parties.clear()
        for session in self.sessions.values():
            session.wipe()
        self.sessions.clear()
        return {}
