"""Generate (or check) securefgl's own known-answer vectors for the masking protocols.

Usage::

    python tests/vectors/generate/generate_protocol_vectors.py           # rewrite the JSON files
    python tests/vectors/generate/generate_protocol_vectors.py --check   # verify them, write nothing

Every value produced by securefgl is recomputed here by an *independent* implementation before it is
written, and the official vectors it relies on are recomputed too:

- mask expansion: AES-256-CTR (AES-128-CTR) is rebuilt from AES-256-ECB (AES-128-ECB on the key's first
  16 bytes) of explicit 128-bit big-endian counter blocks (our own counter and offset logic, checked against
  NIST SP 800-38A F.5.5 and F.5.1), ChaCha20 from a pure-Python
  block function (checked against RFC 8439 2.4.2 and A.1); words are read little-endian and reduced
  modulo 2^bits in Python integers;
- key derivation: HKDF-SHA256 from ``hmac``/``hashlib`` (checked against RFC 5869 A.1-A.3) over an
  ``info`` string assembled here field by field;
- Shamir: polynomial evaluation and Lagrange interpolation over GF(2^31 - 1) with Python big integers,
  and the 30-bit limb split of the secret from ``int.from_bytes``;
- the SecAgg transcript vector: pinned from a seeded run; it is checked by the protocol's own invariant
  (the decoded sum equals the plaintext encoding sum exactly) and by re-running it, not independently.
"""

from __future__ import annotations

import argparse
import hashlib
import hmac
import json
import struct
import sys
import warnings
from pathlib import Path
from typing import Any

import numpy as np
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

VECTORS = Path(__file__).resolve().parents[1]
P = 2**31 - 1


# ---------------------------------------------------------------------------------------------------
# independent implementations
# ---------------------------------------------------------------------------------------------------


def _rotl(v: int, c: int) -> int:
    return ((v << c) & 0xFFFFFFFF) | (v >> (32 - c))


def chacha20_block(key: bytes, counter: int, nonce: bytes) -> bytes:
    """RFC 8439 section 2.3, in pure Python."""
    const = [0x61707865, 0x3320646E, 0x79622D32, 0x6B206574]
    state = (
        const + list(struct.unpack("<8I", key)) + [counter & 0xFFFFFFFF] + list(struct.unpack("<3I", nonce))
    )
    x = list(state)

    def qr(a: int, b: int, c: int, d: int) -> None:
        x[a] = (x[a] + x[b]) & 0xFFFFFFFF
        x[d] = _rotl(x[d] ^ x[a], 16)
        x[c] = (x[c] + x[d]) & 0xFFFFFFFF
        x[b] = _rotl(x[b] ^ x[c], 12)
        x[a] = (x[a] + x[b]) & 0xFFFFFFFF
        x[d] = _rotl(x[d] ^ x[a], 8)
        x[c] = (x[c] + x[d]) & 0xFFFFFFFF
        x[b] = _rotl(x[b] ^ x[c], 7)

    for _ in range(10):
        qr(0, 4, 8, 12)
        qr(1, 5, 9, 13)
        qr(2, 6, 10, 14)
        qr(3, 7, 11, 15)
        qr(0, 5, 10, 15)
        qr(1, 6, 11, 12)
        qr(2, 7, 8, 13)
        qr(3, 4, 9, 14)
    return struct.pack("<16I", *[(a + b) & 0xFFFFFFFF for a, b in zip(x, state, strict=True)])


def chacha20_keystream(key: bytes, nonce: bytes, counter: int, nbytes: int) -> bytes:
    out = b"".join(chacha20_block(key, counter + i, nonce) for i in range(-(-nbytes // 64)))
    return out[:nbytes]


def aes_ctr_keystream_via_ecb(key: bytes, start_counter: int, nbytes: int) -> bytes:
    """CTR from ECB: encrypt the explicit counter blocks start, start+1, ... (128-bit big-endian)."""
    blocks = -(-nbytes // 16)
    counters = b"".join(((start_counter + i) % 2**128).to_bytes(16, "big") for i in range(blocks))
    ecb = Cipher(algorithms.AES(key), modes.ECB()).encryptor()  # noqa: S305 - building CTR explicitly
    return (ecb.update(counters) + ecb.finalize())[:nbytes]


def hkdf_sha256(ikm: bytes, salt: bytes, info: bytes, length: int) -> bytes:
    """RFC 5869 with the standard library only."""
    prk = hmac.new(salt or bytes(32), ikm, hashlib.sha256).digest()
    okm, t, i = b"", b"", 1
    while len(okm) < length:
        t = hmac.new(prk, t + info + bytes([i]), hashlib.sha256).digest()
        okm += t
        i += 1
    return okm[:length]


def info_string(
    purpose: str, session_id: bytes, round_index: int, pair: tuple[int, int] | None, label: bytes
) -> bytes:
    def lp(b: bytes) -> bytes:
        return len(b).to_bytes(4, "big") + b

    pair_bytes = (
        b"\x00" if pair is None else b"\x01" + pair[0].to_bytes(8, "big") + pair[1].to_bytes(8, "big")
    )
    return (
        b"securefgl/protocols/v1"
        + lp(purpose.encode())
        + lp(session_id)
        + round_index.to_bytes(8, "big")
        + pair_bytes
        + lp(label)
    )


def words(stream: bytes, width: int, bits: int) -> list[int]:
    return [
        int.from_bytes(stream[i : i + width], "little") % (1 << bits) for i in range(0, len(stream), width)
    ]


def poly_eval(coeffs: list[int], x: int) -> int:
    return sum(c * pow(x, j, P) for j, c in enumerate(coeffs)) % P


def lagrange_zero(points: list[tuple[int, int]]) -> int:
    total = 0
    for i, (xi, yi) in enumerate(points):
        num, den = 1, 1
        for j, (xj, _) in enumerate(points):
            if i != j:
                num = num * xj % P
                den = den * (xj - xi) % P
        total = (total + yi * num * pow(den, P - 2, P)) % P
    return total


def limbs_of(secret: bytes) -> list[int]:
    v = int.from_bytes(secret, "little")
    return [(v >> (30 * j)) & (2**30 - 1) for j in range(9)]


# ---------------------------------------------------------------------------------------------------
# self-checks of the independent implementations against the official vectors
# ---------------------------------------------------------------------------------------------------


def check_official() -> None:
    for name in ("aes256ctr_sp800_38a.json", "aes128ctr_sp800_38a.json"):
        d = json.loads((VECTORS / "prg" / name).read_text())["vectors"][0]
        ks = aes_ctr_keystream_via_ecb(bytes.fromhex(d["key"]), int(d["counter"], 16), 64)
        assert (
            bytes(a ^ b for a, b in zip(ks, bytes.fromhex(d["plaintext"]), strict=True)).hex()
            == d["ciphertext"]
        )
    for v in json.loads((VECTORS / "prg" / "chacha20_rfc8439.json").read_text())["vectors"]:
        pt = v["plaintext_ascii"].encode() if v["plaintext_ascii"] else bytes(v["keystream_bytes"])
        ks = chacha20_keystream(bytes.fromhex(v["key"]), bytes.fromhex(v["nonce"]), v["counter"], len(pt))
        assert bytes(a ^ b for a, b in zip(ks, pt, strict=True)).hex() == v["ciphertext"]
    for v in json.loads((VECTORS / "kdf" / "hkdf_sha256_rfc5869.json").read_text())["vectors"]:
        got = hkdf_sha256(
            bytes.fromhex(v["ikm"]), bytes.fromhex(v["salt"]), bytes.fromhex(v["info"]), v["length"]
        )
        assert got.hex() == v["okm"], v["case"]


# ---------------------------------------------------------------------------------------------------
# securefgl vectors
# ---------------------------------------------------------------------------------------------------


def mask_vectors() -> dict[str, Any]:
    from securefgl.protocols._prg import MaskExpander, keystream_into

    cases = []
    rng_keys = [hashlib.sha256(f"securefgl mask vector {i}".encode()).digest() for i in range(8)]
    specs = [
        ("aes256-ctr", 20, 9, 0),
        ("aes256-ctr", 32, 8, 0),
        ("aes256-ctr", 45, 7, 0),
        ("aes256-ctr", 64, 6, 3),
        ("chacha20", 31, 17, 0),
        ("chacha20", 64, 9, 2),
        ("aes128-ctr", 40, 9, 0),
        ("aes128-ctr", 24, 8, 5),
    ]
    for key, (alg, bits, length, start) in zip(rng_keys, specs, strict=True):
        width = 4 if bits <= 32 else 8
        nbytes = length * width
        if alg == "aes256-ctr":
            stream = aes_ctr_keystream_via_ecb(key, start, nbytes)
        elif alg == "aes128-ctr":  # keyed by the first 128 bits of the 32-byte key
            stream = aes_ctr_keystream_via_ecb(key[:16], start, nbytes)
        else:
            stream = chacha20_keystream(key, bytes(12), start, nbytes)
        expected = words(stream, width, bits)
        # ours
        ex = MaskExpander(length, bits, algorithm=alg)
        if start == 0:
            ours = [int(v) for v in ex.expand(key)]
        else:
            buf = np.empty(length, dtype=ex.dtype)
            keystream_into(key, buf, algorithm=alg, start_block=start)
            ours = [int(v) for v in ex.reduce(buf)]
        assert ours == expected, (alg, bits)
        cases.append(
            {
                "algorithm": alg,
                "key": key.hex(),
                "ring_bits": bits,
                "length": length,
                "start_block": start,
                "values": [str(v) for v in expected],
            }
        )
    # the last block before ChaCha20's 32-bit counter wraps is still allowed
    key = rng_keys[0]
    stream = chacha20_keystream(key, bytes(12), 2**32 - 1, 64)
    buf = np.empty(8, dtype=np.uint64)
    keystream_into(key, buf, algorithm="chacha20", start_block=2**32 - 1)
    assert buf.tobytes() == stream
    cases.append(
        {
            "algorithm": "chacha20",
            "key": key.hex(),
            "ring_bits": 64,
            "length": 8,
            "start_block": 2**32 - 1,
            "values": [str(v) for v in words(stream, 8, 64)],
            "comment": "the last block before the 32-bit block counter would wrap",
        }
    )
    return {
        "family": "prg",
        "name": "securefgl mask expansion",
        "source": "generated by tests/vectors/generate/generate_protocol_vectors.py (securefgl._prg.MaskExpander)",
        "checked_by": "AES-256-ECB (AES-128-ECB on the key's first 16 bytes) over explicit counter blocks / "
        "pure-Python ChaCha20 (RFC 8439), little-endian words reduced mod 2^ring_bits with Python integers",
        "vectors": cases,
        "invalid": [
            {
                "comment": "ChaCha20 block counter would wrap",
                "algorithm": "chacha20",
                "start_block": 2**32 - 1,
                "length": 9,
                "ring_bits": 64,
            },
            {
                "comment": "AES-CTR stream beyond 2^32 blocks per key",
                "algorithm": "aes256-ctr",
                "start_block": 2**32 - 1,
                "length": 3,
                "ring_bits": 64,
            },
            {
                "comment": "folded/short key",
                "algorithm": "aes256-ctr",
                "key_bytes": 16,
                "length": 4,
                "ring_bits": 32,
            },
        ],
    }


def kdf_vectors() -> dict[str, Any]:
    from securefgl.protocols._prg import derive_key, hkdf_info

    cases = []
    specs = [
        ("pairwise-mask", bytes(range(32)), 7, (3, 11), b"vector"),
        ("self-mask", hashlib.sha256(b"sid").digest(), 0, (5, 5), b"vector"),
        ("recipient-pad", hashlib.sha256(b"sid2").digest(), 2**40, (9, 2), b"vector"),
        ("graph-seed", b"", 0, None, b""),
    ]
    for i, (purpose, sid, rnd, pair, label) in enumerate(specs):
        secret = hashlib.sha256(f"securefgl kdf vector {i}".encode()).digest()
        info = info_string(purpose, sid, rnd, pair, label)
        assert hkdf_info(purpose, session_id=sid, round_index=rnd, pair=pair, label=label) == info
        key = hkdf_sha256(secret, b"", info, 32)
        assert derive_key(secret, purpose, session_id=sid, round_index=rnd, pair=pair, label=label) == key
        cases.append(
            {
                "secret": secret.hex(),
                "purpose": purpose,
                "session_id": sid.hex(),
                "round_index": rnd,
                "pair": list(pair) if pair else None,
                "label": label.decode(),
                "info": info.hex(),
                "key": key.hex(),
            }
        )
    return {
        "family": "kdf",
        "name": "securefgl per-purpose key derivation",
        "source": "generated by tests/vectors/generate/generate_protocol_vectors.py (securefgl._prg.derive_key)",
        "checked_by": "info assembled field by field in the generator; HKDF-SHA256 from hmac/hashlib (RFC 5869)",
        "vectors": cases,
        "invalid": [
            {"comment": "a secret shorter than 32 bytes (folded seed) is refused", "secret_bytes": 4}
        ],
    }


def shamir_vectors() -> dict[str, Any]:
    from securefgl.protocols import _shamir
    from securefgl.protocols._prg import InsecureDeterministicRandom

    cases = []
    for i, (n, t) in enumerate([(3, 2), (5, 3), (7, 7), (10, 4)]):
        secrets = [hashlib.sha256(f"securefgl shamir secret {i}/{j}".encode()).digest() for j in range(2)]
        xs = [2 * k + 1 for k in range(n)]
        seed = f"shamir vector {i}".encode()
        shares = _shamir.split(secrets, xs, t, InsecureDeterministicRandom(seed))
        # recover the coefficients our split drew: replay the same deterministic stream
        coeffs = _shamir.uniform_field_elements((t - 1) * 2 * 9, InsecureDeterministicRandom(seed)).reshape(
            t - 1, 2, 9
        )
        for s_idx, secret in enumerate(secrets):
            limbs = limbs_of(secret)
            assert [int(v) for v in _shamir.secrets_to_limbs([secret])[0]] == limbs
            for limb in range(9):
                poly = [limbs[limb]] + [int(coeffs[j, s_idx, limb]) for j in range(t - 1)]
                for h, x in enumerate(xs):
                    assert poly_eval(poly, x) == int(shares[h, s_idx, limb])
                pts = [(xs[h], int(shares[h, s_idx, limb])) for h in range(n - t, n)]
                assert lagrange_zero(pts) == limbs[limb]
        cases.append(
            {
                "secrets": [s.hex() for s in secrets],
                "xs": xs,
                "threshold": t,
                "insecure_seed": seed.decode(),
                "coefficients": [[[int(v) for v in row] for row in blk] for blk in coeffs],
                "shares": [[[int(v) for v in row] for row in holder] for holder in shares],
            }
        )
    return {
        "family": "shamir",
        "name": "securefgl Shamir over GF(2^31 - 1), 9 limbs of 30 bits",
        "source": "generated by tests/vectors/generate/generate_protocol_vectors.py (securefgl._shamir.split)",
        "checked_by": "big-integer polynomial evaluation and Lagrange interpolation at 0 in Python; limbs from int.from_bytes",
        "vectors": cases,
        "invalid": [
            {"comment": "duplicate x-coordinates", "xs": [1, 2, 2], "threshold": 2},
            {"comment": "x-coordinate 0 would hand out the secret", "xs": [0, 1, 2], "threshold": 2},
            {"comment": "threshold above the number of holders", "xs": [1, 2, 3], "threshold": 4},
            {"comment": "share value not in the field", "xs": [1, 2], "share_value": P},
        ],
    }


def secagg_vectors() -> dict[str, Any]:
    import torch

    from securefgl.protocols.encoding import BlockSpec, SumSchema
    from securefgl.protocols.messages import MaskedInput, decode
    from securefgl.protocols.secagg import SecAgg

    schema = SumSchema([BlockSpec("w", (4,)), BlockSpec("n", (2,), kind="count", bound=5)], max_clients=8)
    contributions = {
        c: {
            "w": torch.tensor([0.25 * c, -0.5, 0.125, 1.0 / (c + 1)], dtype=torch.float64),
            "n": torch.tensor([c % 3, 1]),
        }
        for c in range(4)
    }
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        proto = SecAgg(insecure_seed=20261122)
    sums, tr = proto.aggregate(schema, contributions, round_index=3, context=b"model-hash")
    masked = {
        rec.sender: hashlib.sha256(
            decode(rec.payload, MaskedInput).vector.astype("<u8").tobytes()
        ).hexdigest()
        for rec in tr.view("server")
        if rec.phase == "masked_input"
    }
    exact_w = sum(float(v) for c in contributions for v in contributions[c]["w"])
    assert abs(float(sums["w"].sum()) - exact_w) < 1e-4
    return {
        "family": "secagg",
        "name": "SecAgg transcript with insecure_seed",
        "source": "generated by tests/vectors/generate/generate_protocol_vectors.py (SecAgg(insecure_seed=20261122))",
        "checked_by": "protocol invariant only (decoded sum equals the plaintext sum); pinned to catch unintended "
        "changes of key derivation, masking, encoding or session-id binding",
        "vectors": [
            {
                "insecure_seed": 20261122,
                "round_index": 3,
                "context": "model-hash",
                "schema": {"blocks": [["w", [4], "real", 1.0], ["n", [2], "count", 5]], "max_clients": 8},
                "contributions": {
                    str(c): {"w": [float(v) for v in x["w"]], "n": [int(v) for v in x["n"]]}
                    for c, x in contributions.items()
                },
                "session_id": tr.session_id.hex(),
                "masked_input_sha256": {str(k): v for k, v in sorted(masked.items())},
                "sum_w": [float(v) for v in sums["w"]],
                "sum_n": [int(v) for v in sums["n"]],
            }
        ],
        "invalid": [],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="verify the files instead of writing them")
    args = parser.parse_args()
    check_official()
    outputs = {
        "prg/securefgl_mask_expansion.json": mask_vectors(),
        "kdf/securefgl_derive_key.json": kdf_vectors(),
        "shamir/securefgl_shamir.json": shamir_vectors(),
        "secagg/secagg_insecure_seed.json": secagg_vectors(),
    }
    bad = 0
    for rel, data in outputs.items():
        text = json.dumps(data, indent=1) + "\n"
        path = VECTORS / rel
        if args.check:
            if not path.exists() or path.read_text() != text:
                print(f"MISMATCH {rel}")
                bad += 1
            else:
                print(f"ok {rel}")
        else:
            path.write_text(text)
            print(f"wrote {rel}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
