"""The protocol parties of one sum, built on either side of a deployment (bytes in, bytes out).

A simulation runs a protocol with :meth:`~securefgl.protocols.base.Protocol.aggregate`, which builds the server
party and every client party in one process and wires them with the in-process router. A deployment builds
each party where it lives: :func:`server_party` in the ServerApp, :func:`client_party` in one client's process,
from the same protocol object (same options), and carries the bytes they exchange in Flower messages.

Supported: ``secagg`` and ``secagg+`` (:class:`~securefgl.protocols.secaggplus.SecAggPlus`), ``ckks``
(:class:`~securefgl.protocols.ckks.CKKSAggregation`: the key generator seals the secret context for the key
holders on their peer channels, the server relays it and adds ciphertexts) and ``plaintext`` (the baseline a
deployment's cost is measured against), each with ``+dp``: every client noises its own contribution
(:meth:`DistributedDP.privatize`, its own OS randomness) before its party starts, and the server runs the
wrapper's checks and accounting around the sum (:meth:`DistributedDP.before_sum`, :meth:`DistributedDP.after_sum`).
Every server party is wrapped in :class:`ServerParty`, one face for the deployment loop.

Identities (SecAgg's PKI): the server party takes the directory of the protocol's ``identities`` option (the
server's own configuration); a client party takes its own Ed25519 key and the directory *its* organisation
configured (:func:`client_protocol_options` drops any identity option the server's run config carries, so the
server cannot choose whose keys a client trusts).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from securefgl.config import RunConfig
from securefgl.errors import UnsupportedCombinationError
from securefgl.protocols.base import SERVER, Protocol, Sums, Transcript
from securefgl.protocols.ckks import CKKSAggregation, CKKSClient, CKKSServer
from securefgl.protocols.dp import DistributedDP
from securefgl.protocols.encoding import SumSchema
from securefgl.protocols.plaintext import PlainClient, PlainServer, PlaintextAggregation
from securefgl.protocols.router import Outgoing
from securefgl.protocols.secaggplus import ClientSession, IdentityDirectory, SecAggPlus, ServerSession

__all__ = [
    "DEPLOYABLE_PROTOCOLS",
    "IDENTITY_OPTIONS",
    "ServerParty",
    "check_deployable",
    "client_party",
    "client_protocol_options",
    "deployed_protocol",
    "inner_protocol",
    "server_party",
]

#: Protocol names (bases) a deployment carries; each may take ``+dp``.
DEPLOYABLE_PROTOCOLS = ("secagg", "secagg+", "ckks", "plaintext")

#: Protocol options that name identities: a client takes them from its own configuration, never the server's.
IDENTITY_OPTIONS = ("identities", "identity_keys")


def client_protocol_options(options: Mapping[str, Any]) -> dict[str, Any]:
    """The server's protocol options without :data:`IDENTITY_OPTIONS` (a client brings its own)."""
    return {k: v for k, v in options.items() if k not in IDENTITY_OPTIONS}


def check_deployable(base: str) -> None:
    """Raise :class:`UnsupportedCombinationError` unless ``base`` is one of :data:`DEPLOYABLE_PROTOCOLS`."""
    if base not in DEPLOYABLE_PROTOCOLS:
        raise UnsupportedCombinationError(
            f"protocol {base!r} cannot be deployed; valid for a deployment: "
            f"{', '.join(DEPLOYABLE_PROTOCOLS)}, each optionally with +dp"
        )


def deployed_protocol(config: RunConfig, num_clients: int, *, client_side: bool = False) -> Protocol:
    """The run's protocol as the simulation builds it (:func:`~securefgl.engine.run_protocol.build_run_protocol`),
    without transcript views. ``client_side`` drops the identity options of the server's config.

    Raises:
        UnsupportedCombinationError: the base protocol is not one of :data:`DEPLOYABLE_PROTOCOLS`.
    """
    from securefgl.engine.run_protocol import build_run_protocol

    check_deployable(config.protocol.spec.base)
    options = dict(config.protocol.options)
    if client_side:
        options = client_protocol_options(options)
    options["record_views"] = False
    cfg = dataclasses.replace(config, protocol=dataclasses.replace(config.protocol, options=options))
    return build_run_protocol(cfg, config.train.clients_in_round(num_clients), num_clients)


def inner_protocol(protocol: Protocol) -> Protocol:
    """The protocol whose parties carry the sum (the inner one of a ``+dp`` protocol)."""
    return protocol.base if isinstance(protocol, DistributedDP) else protocol


class ServerParty:
    """One face of every protocol's server party: stages in and out, then the released sum.

    Args:
        party: The protocol's server party (``start()`` and ``handle(stage, replies)``).
        transcript: Where that party records excluded clients (``None``: it keeps them in ``state``).
        release: Computes the released sum once the stages are over (``None`` in designated-recipient mode).
        survivors: The clients whose inputs the sum holds.
    """

    def __init__(self, party: Any, transcript: Transcript | None, release: Any, survivors: Any) -> None:
        self.party, self.transcript = party, transcript
        self._release, self._survivors = release, survivors

    def start(self) -> Outgoing:
        out: Outgoing = self.party.start()
        return out

    def handle(self, stage: str, replies: Sequence[tuple[int, bytes]]) -> Outgoing | None:
        out: Outgoing | None = self.party.handle(stage, replies)
        return out

    @property
    def excluded(self) -> Mapping[int, str]:
        """Clients excluded for misbehaving, with why."""
        if self.transcript is not None:
            return {int(c): str(w) for c, w in self.transcript.excluded.items() if c != SERVER}
        return dict(self.party.state.excluded)

    def result(self) -> Sums | None:
        """The sum released to the server (``None`` in designated-recipient mode)."""
        out: Sums | None = self._release()
        return out

    def survivors(self) -> tuple[int, ...]:
        return tuple(int(c) for c in self._survivors())


def server_party(
    protocol: Protocol,
    schema: SumSchema,
    clients: Sequence[int],
    round_index: int,
    recipient: int | None,
    session: ServerSession | None = None,
) -> ServerParty:
    """The server party of one sum over ``clients`` (sorted ids); ``protocol`` is an inner (non-DP) protocol.
    ``session``: a SecAgg/SecAgg+ session to resume (its last use's ``next_session()``)."""
    invited = tuple(sorted(clients))
    if isinstance(protocol, SecAggPlus):
        p = protocol.server_class(
            schema,
            invited,
            config=protocol.config,
            protocol_name=protocol.name,
            round_index=round_index,
            recipient=recipient,
            workers=protocol.workers,
            directory=protocol.identities,
            session=session,
        )
        return ServerParty(p, None, lambda: p.state.result, lambda: p.state.u3)
    t = Transcript(
        protocol=protocol.name,
        round_index=int(round_index),
        invited=invited,
        recipient=SERVER if recipient is None else recipient,
    )
    if isinstance(protocol, CKKSAggregation):
        c = CKKSServer(
            schema,
            protocol.parameters(schema),
            invited,
            round_index,
            recipient,
            protocol.key_holders,
            protocol.key_generator,
            t,
            min_contributors=protocol.min_contributors,
        )
        return ServerParty(c, t, lambda: c.sums if recipient is None else None, lambda: c.contributors)
    if isinstance(protocol, PlaintextAggregation):
        s = PlainServer(schema, invited, round_index, recipient, t)
        return ServerParty(
            s,
            t,
            lambda: s.release(protocol.min_contributors) if recipient is None else None,
            lambda: s.survivors,
        )
    raise UnsupportedCombinationError(f"protocol {protocol.name!r} has no deployed server party")


def client_party(
    protocol: Protocol,
    client: int,
    schema: SumSchema,
    contribution: Mapping[str, Any],
    round_index: int,
    recipient: int | None,
    context: bytes,
    identity: Ed25519PrivateKey | None = None,
    directory: IdentityDirectory | None = None,
    session: ClientSession | None = None,
) -> Any:
    """One client's party of one sum (keys and masks from the OS CSPRNG), signing with ``identity``
    (SecAgg/SecAgg+), resuming ``session`` if given. It answers ``handle(payload)``; ``result`` is the sum
    delivered to it, if any."""
    if isinstance(protocol, SecAggPlus):
        return protocol.client_class(
            client,
            schema,
            contribution,
            config=protocol.config,
            protocol_name=protocol.name,
            round_index=round_index,
            recipient=recipient,
            context=context,
            identity=identity,
            directory=directory,
            session=session,
            workers=protocol.workers,
        )
    if isinstance(protocol, CKKSAggregation):
        return _CKKSClientParty(
            CKKSClient(
                client,
                schema,
                protocol.parameters(schema),
                contribution,
                round_index,
                context,
                None,  # a deployed client never writes its secret key to disk
                min_contributors=protocol.min_contributors,
            )
        )
    if isinstance(protocol, PlaintextAggregation):
        return PlainClient(client, schema, contribution, round_index, context)
    raise UnsupportedCombinationError(f"protocol {protocol.name!r} has no deployed client party")


class _CKKSClientParty:
    """A CKKS client with the deployment's face: ``result`` is the sum it decrypted for itself (recipient)."""

    def __init__(self, party: CKKSClient) -> None:
        self.party = party

    def handle(self, payload: bytes) -> bytes | None:
        try:
            return self.party.handle(payload)
        finally:
            if self.party.stage == "done":
                self.party.forget()

    @property
    def stage(self) -> str:
        return str(self.party.stage)

    @property
    def result(self) -> Sums | None:
        return self.party.released
