"""Hazmat: long-term Ed25519 identity keys of SecAgg/SecAgg+ clients (the PKI of the malicious-server
variant, Bonawitz et al. 2017 §4).

.. warning::
    Low-level building block of :mod:`securefgl.protocols.secaggplus`.

An :class:`IdentityDirectory` maps client ids to raw 32-byte Ed25519 public keys. In a deployment it is
read from configuration (:meth:`IdentityDirectory.from_file`, the same file a deployment's node
authentication uses) and never from the server; in an in-process simulation without a file,
:func:`generate_identities` draws per-session keys from the OS CSPRNG. Clients sign two statements,
each with its own domain label, so a signature for one purpose, session or round verifies for no other:

* :func:`advertise_statement`: the advertised X25519 keys, bound to the exact session parameters
  (the serialised ``AdvertiseRequest``): a server cannot substitute keys;
* :func:`survivors_statement`: the survivor set of the consistency round, bound to the session id and
  the round.

File format (JSON)::

    {"version": 1, "scheme": "ed25519", "clients": {"0": "<64 hex digits>", "1": "..."}}
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from securefgl.errors import ConfigError
from securefgl.protocols._prg import KEY_BYTES, RandomSource, system_random

__all__ = [
    "SIGNATURE_BYTES",
    "IdentityDirectory",
    "advertise_statement",
    "generate_identities",
    "survivors_statement",
]

SIGNATURE_BYTES = 64
_DOMAIN = b"securefgl/secagg/identity/v1"
_FORMAT_VERSION = 1


def _lp(b: bytes) -> bytes:
    return struct.pack(">I", len(b)) + b


class IdentityDirectory:
    """Client id -> Ed25519 public key (immutable). Verifies signatures; never signs.

    Args:
        keys: client id -> raw 32-byte public key.

    Raises:
        ConfigError: an id that is not a non-negative integer, a key that is not 32 bytes or not a valid
            Ed25519 point, or a key listed for two clients.
    """

    def __init__(self, keys: Mapping[int, bytes]) -> None:
        parsed: dict[int, Ed25519PublicKey] = {}
        raw: dict[int, bytes] = {}
        for cid, pk in keys.items():
            if isinstance(cid, bool) or not isinstance(cid, int) or cid < 0:
                raise ConfigError(f"identity directory: client ids must be integers >= 0, got {cid!r}")
            if not isinstance(pk, (bytes, bytearray)) or len(pk) != KEY_BYTES:
                raise ConfigError(f"identity key of client {cid} must be {KEY_BYTES} raw bytes")
            try:
                parsed[cid] = Ed25519PublicKey.from_public_bytes(bytes(pk))
            except ValueError:
                raise ConfigError(f"identity key of client {cid} is not a valid Ed25519 public key") from None
            raw[cid] = bytes(pk)
        if len(set(raw.values())) != len(raw):
            raise ConfigError("identity directory lists the same public key for two clients")
        self._keys = parsed
        self._raw = raw

    @classmethod
    def from_file(cls, path: str | os.PathLike[str]) -> IdentityDirectory:
        """Read a directory file (module docstring).

        Raises:
            ConfigError: missing file, bad JSON, wrong version or scheme, or a bad entry.
        """
        p = Path(path)
        try:
            doc = json.loads(p.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise ConfigError(f"identity key file {str(p)!r} does not exist") from None
        except (OSError, ValueError) as exc:
            raise ConfigError(f"identity key file {str(p)!r} is not readable JSON: {exc}") from None
        if (
            not isinstance(doc, dict)
            or doc.get("version") != _FORMAT_VERSION
            or doc.get("scheme") != "ed25519"
        ):
            raise ConfigError(
                f"identity key file {str(p)!r}: expected version {_FORMAT_VERSION} and scheme 'ed25519'"
            )
        clients = doc.get("clients")
        if not isinstance(clients, dict):
            raise ConfigError(f"identity key file {str(p)!r}: 'clients' must map client ids to hex keys")
        keys: dict[int, bytes] = {}
        for k, v in clients.items():
            try:
                keys[int(k)] = bytes.fromhex(v)
            except (TypeError, ValueError):
                raise ConfigError(f"identity key file {str(p)!r}: bad entry for client {k!r}") from None
        return cls(keys)

    def write(self, path: str | os.PathLike[str]) -> None:
        """Write this directory in the file format of :meth:`from_file`."""
        doc = {
            "version": _FORMAT_VERSION,
            "scheme": "ed25519",
            "clients": {str(c): pk.hex() for c, pk in sorted(self._raw.items())},
        }
        Path(path).write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")

    def __contains__(self, client: object) -> bool:
        return client in self._keys

    def __len__(self) -> int:
        return len(self._keys)

    def clients(self) -> tuple[int, ...]:
        """The client ids with a key, sorted."""
        return tuple(sorted(self._keys))

    def missing(self, clients: Iterable[int]) -> list[int]:
        """The ids among ``clients`` without a key."""
        return sorted(c for c in clients if c not in self._keys)

    def fingerprint(self) -> bytes:
        """SHA-256 of the directory (ids and keys), e.g. to bind it into a run record."""
        h = hashlib.sha256(_DOMAIN + b"/directory")
        for c, pk in sorted(self._raw.items()):
            h.update(struct.pack(">Q", c) + pk)
        return h.digest()

    def verify(self, client: int, statement: bytes, signature: bytes) -> bool:
        """Whether ``signature`` is ``client``'s valid signature of ``statement`` (False if unknown)."""
        pk = self._keys.get(client)
        if pk is None or len(signature) != SIGNATURE_BYTES:
            return False
        try:
            pk.verify(signature, statement)
        except InvalidSignature:
            return False
        return True


def generate_identities(
    clients: Iterable[int], random: RandomSource = system_random
) -> tuple[dict[int, Ed25519PrivateKey], IdentityDirectory]:
    """Fresh identity key pairs for ``clients`` (in-process simulation without a key file).

    ``random`` is the OS CSPRNG unless a test injects an ``insecure_`` source.
    """
    private = {int(c): Ed25519PrivateKey.from_private_bytes(random(KEY_BYTES)) for c in clients}
    directory = IdentityDirectory({c: k.public_key().public_bytes_raw() for c, k in private.items()})
    return private, directory


def advertise_statement(request: bytes, party: int, channel_pk: bytes, mask_pk: bytes) -> bytes:
    """What a client signs when it advertises keys: the session parameters, its id and both keys."""
    return (
        _DOMAIN
        + b"/advertise-keys"
        + hashlib.sha256(request).digest()
        + struct.pack(">Q", party)
        + channel_pk
        + mask_pk
    )


def survivors_statement(session_id: bytes, round_index: int, survivors: Sequence[int]) -> bytes:
    """What a client signs in the consistency round: session id, round and the sorted survivor set."""
    body = struct.pack(">QI", round_index, len(survivors)) + b"".join(struct.pack(">I", u) for u in survivors)
    return _DOMAIN + b"/consistency-check" + _lp(session_id) + body
