"""Throw-away credentials of a one-machine deployment: a TLS CA, the SuperLink's certificate, SuperNode keys.

``securefgl deploy`` makes them at start with ``cryptography`` (nothing is downloaded, nothing outlives the
run's folder): a self-signed CA, a server certificate for ``localhost``/``127.0.0.1`` signed by it (the
SuperLink's Fleet and Control APIs), and one NIST P-384 key pair per SuperNode in OpenSSH format (Flower's
SuperNode authentication: the SuperLink admits only the public keys registered with ``flwr supernode
register``), and one Ed25519 *identity* key per client with the public directory of them all (SecAgg's
PKI, :mod:`securefgl.protocols._identity`: clients sign their advertised keys and, under
``adversary="semi-malicious"``, the survivor set of the consistency round; each client reads the directory
from its own configuration, never from the server). A real federation uses its own PKI; these files are for
trying a deployment on one machine.
"""

from __future__ import annotations

import datetime as _dt
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.x509.oid import NameOID

__all__ = [
    "IdentityFiles",
    "NodeKeys",
    "TlsFiles",
    "load_identity_key",
    "make_identity_keys",
    "make_node_keys",
    "make_tls",
]


@dataclass(frozen=True)
class TlsFiles:
    """Paths of the PEM files of a throw-away TLS setup."""

    ca_cert: Path
    server_cert: Path
    server_key: Path


@dataclass(frozen=True)
class NodeKeys:
    """Paths of one SuperNode's authentication key pair (OpenSSH format)."""

    private: Path
    public: Path


def _write_private(path: Path, data: bytes) -> None:
    path.write_bytes(data)
    path.chmod(0o600)


def _name(common: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common)])


def make_tls(folder: Path, *, hosts: tuple[str, ...] = ("localhost", "127.0.0.1"), days: int = 2) -> TlsFiles:
    """Write a fresh CA and a server certificate for ``hosts`` (valid ``days`` days) into ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    now = _dt.datetime.now(_dt.UTC)
    ca_key = ec.generate_private_key(ec.SECP384R1())
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(_name("securefgl throw-away CA"))
        .issuer_name(_name("securefgl throw-away CA"))
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - _dt.timedelta(minutes=5))
        .not_valid_after(now + _dt.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .sign(ca_key, hashes.SHA384())
    )
    key = ec.generate_private_key(ec.SECP384R1())
    names: list[x509.GeneralName] = []
    for h in hosts:
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(h)))
        except ValueError:
            names.append(x509.DNSName(h))
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(hosts[0]))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - _dt.timedelta(minutes=5))
        .not_valid_after(now + _dt.timedelta(days=days))
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .sign(ca_key, hashes.SHA384())
    )
    files = TlsFiles(folder / "ca.crt", folder / "server.pem", folder / "server.key")
    files.ca_cert.write_bytes(ca_cert.public_bytes(serialization.Encoding.PEM))
    files.server_cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    _write_private(
        files.server_key,
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.TraditionalOpenSSL,
            serialization.NoEncryption(),
        ),
    )
    return files


def make_node_keys(folder: Path, name: str) -> NodeKeys:
    """Write a fresh SuperNode authentication key pair ``name`` / ``name.pub`` into ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    key = ec.generate_private_key(ec.SECP384R1())
    keys = NodeKeys(folder / name, folder / f"{name}.pub")
    _write_private(
        keys.private,
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH, serialization.NoEncryption()
        ),
    )
    keys.public.write_bytes(
        key.public_key().public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
    )
    return keys


@dataclass(frozen=True)
class IdentityFiles:
    """The clients' Ed25519 identity keys: one private PEM file each (mode 0600) and the public directory."""

    directory: Path
    private: dict[int, Path]


def make_identity_keys(folder: Path, num_clients: int) -> IdentityFiles:
    """Fresh identity keys for clients ``0 .. num_clients-1`` (OS CSPRNG) and their public directory file."""
    from securefgl.protocols.secaggplus import IdentityDirectory

    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    private: dict[int, Path] = {}
    public: dict[int, bytes] = {}
    for c in range(num_clients):
        key = Ed25519PrivateKey.generate()
        path = folder / f"identity-{c}.pem"
        pem = key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
        _write_private(path, pem)
        private[c] = path
        public[c] = key.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    directory = folder / "identities.json"
    IdentityDirectory(public).write(directory)
    return IdentityFiles(directory, private)


def load_identity_key(path: str | Path) -> Ed25519PrivateKey:
    """A client's identity key from its PEM file.

    Raises:
        ConfigError: the file is missing, unreadable, or not an unencrypted Ed25519 private key.
    """
    from securefgl.errors import ConfigError

    try:
        key = serialization.load_pem_private_key(Path(path).read_bytes(), password=None)
    except FileNotFoundError:
        raise ConfigError(f"identity key file {str(path)!r} does not exist") from None
    except (OSError, ValueError, TypeError) as exc:
        raise ConfigError(
            f"identity key file {str(path)!r} is not an unencrypted PEM private key: {exc}"
        ) from None
    if not isinstance(key, Ed25519PrivateKey):
        raise ConfigError(f"identity key file {str(path)!r} holds a {type(key).__name__}, not an Ed25519 key")
    return key
