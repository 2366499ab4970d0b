"""CKKS key handling: key generation, the session id, and the checks of received contexts and ciphertexts.

Used by the parties of :mod:`securefgl.protocols.ckks`; the secret context only ever travels sealed on a
peer channel, and the server refuses a context that holds a secret key.
"""

from __future__ import annotations

import hashlib
import math
import os
import struct
from collections.abc import Sequence
from pathlib import Path

import tenseal as ts

from securefgl.errors import InconsistentViewError
from securefgl.protocols._ckks_native import NativeVector
from securefgl.protocols._ckks_params import CKKSParameters

__all__ = ["check_ciphertext", "check_context", "ckks_session_id", "new_context", "save_secret_context"]


_PROTOCOL_INFO = b"securefgl/ckks/v1"


def new_context(params: CKKSParameters) -> tuple[bytes, bytes]:
    """A fresh CKKS key pair under ``params``: ``(secret context, public context)``, serialised.

    Neither carries relinearisation or Galois keys (the protocol only adds ciphertexts).
    """
    p = params
    ctx = ts.context(
        ts.SCHEME_TYPE.CKKS,
        poly_modulus_degree=p.poly_modulus_degree,
        coeff_mod_bit_sizes=list(p.coeff_mod_bit_sizes),
    )
    ctx.global_scale = 2.0**p.scale_bits
    secret = ctx.serialize(
        save_public_key=True, save_secret_key=True, save_galois_keys=False, save_relin_keys=False
    )
    public = ctx.serialize(
        save_public_key=True, save_secret_key=False, save_galois_keys=False, save_relin_keys=False
    )
    del ctx
    return secret, public


def save_secret_context(path: Path, secret: bytes) -> None:
    """Write a serialised secret context to the new file ``path`` with mode 0600 (an existing file raises)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(secret)


def ckks_session_id(request: bytes, roster: Sequence[tuple[int, bytes]], context_digest: bytes) -> bytes:
    """SHA-256 of what a client saw: the advertise request, the roster and its round context's digest."""
    h = hashlib.sha256(_PROTOCOL_INFO)
    h.update(struct.pack(">Q", len(request)) + request)
    h.update(struct.pack(">I", len(roster)))
    for cid, pk in sorted(roster):
        h.update(struct.pack(">Q", cid) + pk)
    h.update(context_digest)
    return h.digest()


def check_ciphertext(
    vec: NativeVector, params: CKKSParameters, ctx: ts.Context, *, full: bool = True
) -> None:
    """Refuse a ciphertext that does not have exactly this session's parameters.

    ``full=False`` checks only the slot count (cheap); the level, scale and size of such a ciphertext
    are then checked by SEAL when it is added to a fully checked one (a mismatch raises).
    """
    if vec.size() != params.slots:
        raise ValueError(f"expected a ciphertext of {params.slots} slots, got {vec.size()}")
    if not full:
        return
    cts = vec.ciphertext()  # a copy of the polynomials: only for the checks that need it
    if len(cts) != 1:
        raise ValueError(f"expected one ciphertext, got {len(cts)}")
    ct = cts[0]
    first = ctx.seal_context().data.first_parms_id()
    if (
        ct.size() != 2
        or ct.poly_modulus_degree() != params.poly_modulus_degree
        or ct.coeff_modulus_size() != len(params.coeff_mod_bit_sizes) - 1
        or list(ct.parms_id()) != list(first)
        or ct.scale != 2.0**params.scale_bits
    ):
        raise ValueError(
            f"ciphertext parameters differ from the session's (size {ct.size()}, N {ct.poly_modulus_degree()}, "
            f"{ct.coeff_modulus_size()} primes, scale 2^{math.log2(ct.scale):.1f})"
        )


def check_context(ctx: ts.Context, params: CKKSParameters, *, private: bool) -> None:
    sc = ctx.seal_context().data
    key_bits = sc.key_context_data().total_coeff_modulus_bit_count()
    data_bits = sc.first_context_data().total_coeff_modulus_bit_count()
    want_key = sum(params.coeff_mod_bit_sizes)
    want_data = sum(params.coeff_mod_bit_sizes[:-1])
    if (
        sc.first_context_data().parms().poly_modulus_degree() != params.poly_modulus_degree
        or key_bits != want_key
        or data_bits != want_data
        or ctx.global_scale != 2.0**params.scale_bits
        or ctx.is_private() != private
        or not ctx.has_public_key()
    ):
        raise InconsistentViewError(
            "received CKKS context does not match the session parameters "
            f"(expected N={params.poly_modulus_degree}, {want_key}/{want_data} bits, scale 2^{params.scale_bits}, "
            f"secret key {'present' if private else 'absent'})"
        )
