"""The protocol parties of one sum, built on either side of a deployment (bytes in, bytes out).

A simulation runs a protocol with :meth:`~securefgl.protocols.base.Protocol.aggregate`, which builds the server
party and every client party in one process and wires them with the in-process router. A deployment builds
each party where it lives: :func:`server_party` in the ServerApp, :func:`client_party` in one client's process,
from the same protocol object (same options), and carries the bytes they exchange in Flower messages.

Supported: ``secagg`` and ``secagg+`` (one implementation, :class:`~securefgl.protocols.secaggplus.SecAggPlus`),
each with ``+dp``: every client noises its own contribution (:meth:`DistributedDP.privatize`, its own OS
randomness) before its masking party starts, and the server runs the wrapper's checks and accounting around the
sum (:meth:`DistributedDP.before_sum`, :meth:`DistributedDP.after_sum`). CKKS and ``plaintext`` are refused with
:class:`~securefgl.errors.UnsupportedCombinationError`.

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
from securefgl.protocols.base import Protocol, Sums
from securefgl.protocols.dp import DistributedDP
from securefgl.protocols.encoding import SumSchema
from securefgl.protocols.registry import get_protocol
from securefgl.protocols.secaggplus import IdentityDirectory, SecAggPlus

__all__ = [
    "DEPLOYABLE_PROTOCOLS",
    "IDENTITY_OPTIONS",
    "build_protocol",
    "client_party",
    "client_protocol_options",
    "deployed_protocol",
    "masking",
    "server_party",
    "server_result",
]

#: Protocol names a deployment carries.
DEPLOYABLE_PROTOCOLS = ("secagg", "secagg+")

#: Protocol options that name identities: a client takes them from its own configuration, never the server's.
IDENTITY_OPTIONS = ("identities", "identity_keys")


def client_protocol_options(options: Mapping[str, Any]) -> dict[str, Any]:
    """The server's protocol options without :data:`IDENTITY_OPTIONS` (a client brings its own)."""
    return {k: v for k, v in options.items() if k not in IDENTITY_OPTIONS}


def build_protocol(name: str, options: Mapping[str, Any]) -> SecAggPlus:
    """The masking protocol both sides build from the run config (record_views off: no transcript here).

    Raises:
        UnsupportedCombinationError: ``name`` is not one of :data:`DEPLOYABLE_PROTOCOLS`.
    """
    if name not in DEPLOYABLE_PROTOCOLS:
        raise UnsupportedCombinationError(
            f"protocol {name!r} cannot be deployed yet; valid for a deployment: "
            f"{', '.join(DEPLOYABLE_PROTOCOLS)}, each optionally with +dp"
        )
    protocol: Protocol = get_protocol(name, **{**dict(options), "record_views": False})
    assert isinstance(protocol, SecAggPlus)
    return protocol


def deployed_protocol(config: RunConfig, num_clients: int, *, client_side: bool = False) -> Protocol:
    """The run's protocol as the simulation builds it (:func:`~securefgl.engine.runner.build_run_protocol`):
    :class:`SecAggPlus`, or :class:`~securefgl.protocols.dp.DistributedDP` around it for ``+dp``.

    ``client_side`` drops the identity options of the server's config (a client brings its own).

    Raises:
        UnsupportedCombinationError: the base protocol is not one of :data:`DEPLOYABLE_PROTOCOLS`.
    """
    from securefgl.engine.runner import build_run_protocol

    build_protocol(config.protocol.spec.base, {})  # refuse an undeployable base with the deployment's message
    options = dict(config.protocol.options)
    if client_side:
        options = client_protocol_options(options)
    options["record_views"] = False
    cfg = dataclasses.replace(config, protocol=dataclasses.replace(config.protocol, options=options))
    return build_run_protocol(cfg, config.train.clients_in_round(num_clients), num_clients)


def masking(protocol: Protocol) -> SecAggPlus:
    """The masking protocol whose parties carry the sum (the inner one of a ``+dp`` protocol)."""
    inner = protocol.base if isinstance(protocol, DistributedDP) else protocol
    assert isinstance(inner, SecAggPlus)
    return inner


def server_party(
    protocol: SecAggPlus, schema: SumSchema, clients: Sequence[int], round_index: int, recipient: int | None
) -> Any:
    """The server party of one sum over ``clients`` (sorted ids)."""
    return protocol.server_class(
        schema,
        tuple(sorted(clients)),
        config=protocol.config,
        protocol_name=protocol.name,
        round_index=round_index,
        recipient=recipient,
        workers=protocol.workers,
        directory=protocol.identities,
    )


def server_result(party: Any) -> Sums | None:
    """The sum the server party released (``None`` in designated-recipient mode)."""
    return party.state.result


def client_party(
    protocol: SecAggPlus,
    client: int,
    schema: SumSchema,
    contribution: Mapping[str, Any],
    round_index: int,
    recipient: int | None,
    context: bytes,
    identity: Ed25519PrivateKey | None = None,
    directory: IdentityDirectory | None = None,
) -> Any:
    """One client's party of one sum (keys and masks from the OS CSPRNG), signing with ``identity``."""
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
    )
