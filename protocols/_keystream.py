"""The masking PRG's stream ciphers, importable on their own (the standard library and ``cryptography`` only).

:mod:`._prg` expands every mask through :func:`encryptor`, and so does the mask worker process
(:mod:`._mask_worker`), which runs this file's directory as a plain script directory, without importing the
package (and torch with it): one definition, so a key gives the same stream in both, bit for bit.
"""

from __future__ import annotations

import struct

from cryptography.hazmat.primitives.ciphers import Cipher, CipherContext, algorithms, modes

__all__ = ["AES128_KEY_BYTES", "BLOCK_BYTES", "encryptor"]

#: AES-128-CTR is keyed by the first 16 bytes of a 32-byte mask key.
AES128_KEY_BYTES = 16
#: Bytes per cipher block of each algorithm (the unit of ``start_block``).
BLOCK_BYTES = {"aes256-ctr": 16, "aes128-ctr": 16, "chacha20": 64}


def encryptor(key: bytes, algorithm: str, start_block: int) -> CipherContext:
    """The keystream of ``key`` from cipher block ``start_block``: AES-CTR with a 128-bit big-endian counter
    block (NIST SP 800-38A), or ChaCha20 with the RFC 8439 layout (32-bit little-endian block counter, all-zero
    nonce). Encrypting zeros with it writes the stream; the caller checks the key and algorithm."""
    if algorithm == "aes256-ctr":
        return Cipher(algorithms.AES(key), modes.CTR(start_block.to_bytes(16, "big"))).encryptor()
    if algorithm == "aes128-ctr":
        return Cipher(
            algorithms.AES(key[:AES128_KEY_BYTES]), modes.CTR(start_block.to_bytes(16, "big"))
        ).encryptor()
    nonce = struct.pack("<I", start_block) + bytes(12)  # RFC 8439: 32-bit LE counter || 96-bit nonce (0)
    return Cipher(algorithms.ChaCha20(key, nonce), None).encryptor()
