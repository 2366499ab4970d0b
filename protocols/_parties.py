"""The parties of one protocol run: the input checks every protocol driver applies (hazmat).

Client ids travel as unsigned 32-bit integers in every message, and ``2**32 - 1`` is reserved (it encodes
"no recipient" in :mod:`securefgl.protocols.messages`), so a client id is an integer in
``[0, MAX_CLIENT_ID]``. Shared by :mod:`~securefgl.protocols.plaintext`, :mod:`~securefgl.protocols.secaggplus`
(and so :mod:`~securefgl.protocols.secagg`) and :mod:`~securefgl.protocols.ckks`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from securefgl.errors import ConfigError

__all__ = ["MAX_CLIENT_ID", "check_clients", "client_contexts"]

#: The largest client id a message can carry.
MAX_CLIENT_ID = 2**32 - 2


def check_clients(contributions: Mapping[int, Any]) -> tuple[int, ...]:
    """The sorted client ids of a run's contributions.

    Args:
        contributions: Client id -> contribution.

    Returns:
        The ids as Python ints, in increasing order.

    Raises:
        ConfigError: ``contributions`` is not a non-empty mapping, or an id is not an integer (a bool is
            not one) in ``[0, MAX_CLIENT_ID]``.
    """
    if not isinstance(contributions, Mapping) or not contributions:
        raise ConfigError("contributions must be a non-empty mapping of client id -> contribution")
    bad = [
        c
        for c in contributions
        if isinstance(c, bool) or not isinstance(c, (int, np.integer)) or not 0 <= int(c) <= MAX_CLIENT_ID
    ]
    if bad:
        raise ConfigError(f"client ids must be integers in [0, {MAX_CLIENT_ID}], got {bad[:5]}")
    return tuple(sorted(int(c) for c in contributions))


def client_contexts(context: bytes | Mapping[int, bytes], clients: Sequence[int]) -> dict[int, bytes]:
    """The session context each client binds its messages to.

    Args:
        context: One context shared by every client, or one per client id.
        clients: The run's client ids (see :func:`check_clients`).

    Returns:
        Client id -> context bytes, for every id in ``clients``.

    Raises:
        ConfigError: A per-client mapping misses a client, or ``context`` is neither bytes nor a mapping.
    """
    if isinstance(context, (bytes, bytearray, memoryview)):
        return dict.fromkeys(clients, bytes(context))
    if isinstance(context, Mapping):
        missing = [c for c in clients if c not in context]
        if missing:
            raise ConfigError(f"context given per client but missing for clients {missing[:5]}")
        return {c: bytes(context[c]) for c in clients}
    raise ConfigError(f"context must be bytes or a mapping of client -> bytes, got {type(context).__name__}")
