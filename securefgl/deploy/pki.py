"""Throw-away credentials of a one-machine deployment: a TLS CA, the SuperLink's certificate, SuperNode keys.

``securefgl deploy`` makes them at start with ``cryptography`` (nothing is downloaded, nothing outlives the
run's folder): a self-signed CA, a server certificate for ``localhost``/``127.0.0.1`` signed by it (the
SuperLink's Fleet and Control APIs), and one NIST P-384 key pair per SuperNode in OpenSSH format (Flower's
SuperNode authentication: the SuperLink admits only the public keys registered with ``flwr supernode
register``). A real federation uses its own PKI; these files are for trying a deployment on one machine.
"""

from __future__ import annotations

import datetime as _dt
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

__all__ = ["NodeKeys", "TlsFiles", "make_node_keys", "make_tls"]


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
