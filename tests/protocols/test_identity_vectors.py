"""RFC 8032 Ed25519 known-answer vectors through the identity directory the consistency round uses."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from securefgl.protocols._identity import IdentityDirectory

_spec = importlib.util.spec_from_file_location(
    "_vector_loader", Path(__file__).resolve().parents[1] / "vectors" / "loader.py"
)
assert _spec is not None and _spec.loader is not None
_loader = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_loader)

DATA = _loader.load_vectors("ed25519/ed25519_rfc8032.json")


@pytest.mark.parametrize("vector", DATA["vectors"], ids=lambda v: v["name"])
def test_rfc8032_signatures_and_directory_verification(vector: dict) -> None:
    sk = Ed25519PrivateKey.from_private_bytes(bytes.fromhex(vector["secret_key"]))
    pk = bytes.fromhex(vector["public_key"])
    msg, sig = bytes.fromhex(vector["message"]), bytes.fromhex(vector["signature"])
    assert sk.public_key().public_bytes_raw() == pk
    assert sk.sign(msg) == sig  # Ed25519 signing is deterministic
    directory = IdentityDirectory({7: pk})
    assert directory.verify(7, msg, sig)
    assert not directory.verify(8, msg, sig)  # an unknown client never verifies


@pytest.mark.parametrize("case", DATA["invalid"], ids=lambda c: c["name"])
def test_rfc8032_altered_inputs_are_refused(case: dict) -> None:
    vector = DATA["vectors"][case["vector"]]
    pk = bytes.fromhex(vector["public_key"])
    sig = bytearray(bytes.fromhex(vector["signature"]))
    if "flip_bit" in case:
        sig[case["flip_bit"] // 8] ^= 1 << (case["flip_bit"] % 8)
    msg = bytes.fromhex(case.get("message", vector["message"]))
    assert not IdentityDirectory({0: pk}).verify(0, msg, bytes(sig))
