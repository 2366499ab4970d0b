"""CKKS vectors through TenSEAL's native binding, without its Python wrapper's per-call conversions.

TenSEAL's public ``ts.ckks_vector(ctx, values)`` turns the values into a list, a numpy array, a list again, a
``PlainTensor`` and once more a list before its C++ constructor runs (measured on this project's 2-core VM
at 4,096 slots: 12.5 ms for three encryptions through the binding against 14.3 ms through the wrapper,
interleaved); ``ts.ckks_vector_from`` and ``+=`` add type checks and a wrapper object per call (5.4 against
5.8 ms to load and add 30 ciphertexts). The binding (``tenseal._ts_cpp``, what the public API itself calls)
does the same SEAL work: the same encoding at the context's global scale, encryption with its public key,
serialisation, addition and decryption, so a ciphertext made one way loads, adds and decrypts the other way
(``tests/protocols/test_ckks_native.py``). pyproject pins ``tenseal<0.4``, whose binding has these calls.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import tenseal as ts

__all__ = ["NativeVector", "decrypt_into", "encrypt", "load"]

#: A TenSEAL native CKKS vector (``tenseal._ts_cpp.CKKSVector``): ``size()``, ``ciphertext()``, ``add_``,
#: ``sub_``, ``serialize()`` and, under a context holding the secret key, ``decrypt()``.
NativeVector = Any

_VECTOR = ts._ts_cpp.CKKSVector


def encrypt(ctx: ts.Context, values: np.ndarray) -> bytes:
    """One ciphertext of ``values`` (at most the context's slot count) under ``ctx``'s public key, serialised."""
    return bytes(_VECTOR(ctx.data, values.tolist()).serialize())


def load(ctx: ts.Context, blob: bytes) -> NativeVector:
    """Deserialise a ciphertext and link it to ``ctx`` (raises what TenSEAL raises on bad bytes)."""
    return _VECTOR(ctx.data, blob)


def decrypt_into(vec: NativeVector, out: np.ndarray) -> None:
    """Decrypt ``vec`` (its context holds the secret key) into the float64 slots ``out`` (as long as ``vec``)."""
    out[:] = np.fromiter(vec.decrypt(), dtype=np.float64, count=out.shape[0])
