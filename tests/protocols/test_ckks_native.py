"""Tests for securefgl.protocols._ckks_native: TenSEAL's binding does what its public API does (real contexts)."""

from __future__ import annotations

import numpy as np
import pytest
import tenseal as ts

from securefgl.protocols import BlockSpec, SumSchema
from securefgl.protocols import _ckks_native as native
from securefgl.protocols._ckks_keys import check_ciphertext, new_context
from securefgl.protocols.ckks import select_parameters

#: CKKS at scale 2^30 decrypts a fresh or summed ciphertext of values this small to within about 1e-5.
TOL = 1e-3


@pytest.fixture(scope="module")
def keys():
    params = select_parameters(SumSchema([BlockSpec("x", (10,), bound=1.0)], max_clients=16))
    secret, public = new_context(params)
    return params, ts.context_from(secret), ts.context_from(public)


def test_native_and_public_ciphertexts_are_interchangeable(keys):
    params, sk, pk = keys
    rng = np.random.default_rng(0)
    a, b = rng.uniform(-3, 3, (2, params.slots))
    blob_native = native.encrypt(pk, a)
    blob_public = ts.ckks_vector(pk, b.tolist()).serialize()
    assert isinstance(blob_native, bytes)
    assert len(blob_native) == len(blob_public)  # the same ciphertext structure
    # the native ciphertext through the public API, the public one through the binding
    np.testing.assert_allclose(ts.ckks_vector_from(sk, blob_native).decrypt(), a, atol=TOL)
    out = np.full(params.slots, np.nan)
    native.decrypt_into(native.load(sk, blob_public), out)
    np.testing.assert_allclose(out, b, atol=TOL)


def test_native_sum_and_rollback(keys):
    params, sk, pk = keys
    rng = np.random.default_rng(1)
    xs = rng.uniform(-1, 1, (4, params.slots))
    acc = native.load(pk, native.encrypt(pk, xs[0]))
    for x in xs[1:]:
        acc.add_(native.load(pk, native.encrypt(pk, x)))
    check_ciphertext(acc, params, pk)  # a summed ciphertext keeps the session's parameters
    extra = native.load(pk, native.encrypt(pk, xs[0]))
    acc.add_(extra)
    acc.sub_(extra)  # the server's undo of a partly added upload
    out = np.empty(params.slots)
    native.decrypt_into(native.load(sk, acc.serialize()), out)
    np.testing.assert_allclose(out, xs.sum(axis=0), atol=4 * TOL)


def test_short_vectors_fill_the_first_slots(keys):
    params, sk, pk = keys
    vals = np.arange(5, dtype=np.float64)
    vec = native.load(sk, native.encrypt(pk, vals))
    assert vec.size() == 5
    out = np.empty(5)
    native.decrypt_into(vec, out)
    np.testing.assert_allclose(out, vals, atol=TOL)


@pytest.mark.parametrize("blob", [b"\x00" * 64, b"not a ciphertext"])
def test_garbage_does_not_load(keys, blob):
    _, _, pk = keys
    with pytest.raises(Exception):  # noqa: B017 - TenSEAL raises assorted types; the parties catch them all
        native.load(pk, blob)


def test_empty_bytes_load_as_an_empty_vector_the_checks_refuse(keys):
    params, _, pk = keys
    vec = native.load(pk, b"")  # as ts.ckks_vector_from does
    assert vec.size() == 0
    with pytest.raises(ValueError, match=f"expected a ciphertext of {params.slots} slots"):
        check_ciphertext(vec, params, pk)


def test_decrypting_without_the_secret_key_fails(keys):
    params, _, pk = keys
    vec = native.load(pk, native.encrypt(pk, np.zeros(params.slots)))
    with pytest.raises(Exception):  # noqa: B017
        native.decrypt_into(vec, np.empty(params.slots))
