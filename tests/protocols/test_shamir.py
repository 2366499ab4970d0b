"""Tests of securefgl.protocols._shamir: known answers, threshold property, caching, bad input."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from securefgl.errors import ConfigError
from securefgl.protocols import _shamir
from securefgl.protocols._prg import InsecureDeterministicRandom

_spec = importlib.util.spec_from_file_location(
    "vectors_loader", Path(__file__).resolve().parents[1] / "vectors" / "loader.py"
)
assert _spec is not None and _spec.loader is not None
_loader = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_loader)
load_vectors = _loader.load_vectors

P = _shamir.PRIME


def _big_int_lagrange(points: list[tuple[int, int]]) -> int:
    """Independent reconstruction with Python integers."""
    total = 0
    for i, (xi, yi) in enumerate(points):
        num = den = 1
        for j, (xj, _) in enumerate(points):
            if i != j:
                num, den = num * xj % P, den * (xj - xi) % P
        total = (total + yi * num * pow(den, P - 2, P)) % P
    return total


def test_prime_is_prime() -> None:
    assert P == 2**31 - 1
    assert all(pow(a, P - 1, P) == 1 for a in (2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37))
    assert _shamir.LIMBS * _shamir.LIMB_BITS >= 8 * _shamir.SECRET_BYTES
    assert 2**_shamir.LIMB_BITS < P


def test_known_answer_vectors() -> None:
    data = load_vectors("shamir/securefgl_shamir.json")
    for v in data["vectors"]:
        secrets = [bytes.fromhex(s) for s in v["secrets"]]
        shares = _shamir.split(
            secrets, v["xs"], v["threshold"], InsecureDeterministicRandom(v["insecure_seed"].encode())
        )
        assert shares.tolist() == v["shares"]
        t = v["threshold"]
        # any t holders reconstruct; check the last t and every other one
        for sel in (list(range(len(v["xs"]) - t, len(v["xs"]))), list(range(0, len(v["xs"]), 2))[:t]):
            if len(sel) < t:
                continue
            out, valid = _shamir.reconstruct([v["xs"][i] for i in sel], shares[sel])
            assert valid.all()
            assert [bytes(o) for o in out] == secrets
        # the recorded polynomial coefficients reproduce the shares with big integers
        coeffs = v["coefficients"]
        for s_idx, secret in enumerate(secrets):
            limbs = [(int.from_bytes(secret, "little") >> (30 * j)) & (2**30 - 1) for j in range(9)]
            for limb in range(9):
                poly = [limbs[limb]] + [coeffs[j][s_idx][limb] for j in range(t - 1)]
                for h, x in enumerate(v["xs"]):
                    assert (
                        sum(c * pow(x, e, P) for e, c in enumerate(poly)) % P == v["shares"][h][s_idx][limb]
                    )


def test_invalid_vectors_raise() -> None:
    data = load_vectors("shamir/securefgl_shamir.json")
    secret = [os.urandom(32)]
    for bad in data["invalid"]:
        with pytest.raises(ConfigError):
            if "share_value" in bad:
                sh = np.zeros((len(bad["xs"]), 1, _shamir.LIMBS), dtype=np.uint64)
                sh[0, 0, 0] = bad["share_value"]
                _shamir.reconstruct(bad["xs"], sh)
            else:
                _shamir.split(secret, bad["xs"], bad["threshold"])


@settings(max_examples=40, deadline=None)
@given(
    n=st.integers(1, 12),
    data=st.data(),
    secret=st.binary(min_size=32, max_size=32),
)
def test_any_t_shares_reconstruct(n: int, data: st.DataObject, secret: bytes) -> None:
    t = data.draw(st.integers(1, n))
    xs = data.draw(st.lists(st.integers(1, P - 1), min_size=n, max_size=n, unique=True))
    shares = _shamir.split([secret], xs, t)
    sel = sorted(data.draw(st.lists(st.integers(0, n - 1), min_size=t, max_size=t, unique=True)))
    out, valid = _shamir.reconstruct([xs[i] for i in sel], shares[sel])
    assert valid[0] and bytes(out[0]) == secret
    # independent big-integer reconstruction of every limb
    limbs = [(int.from_bytes(secret, "little") >> (30 * j)) & (2**30 - 1) for j in range(9)]
    for limb in range(9):
        assert _big_int_lagrange([(xs[i], int(shares[i, 0, limb])) for i in sel]) == limbs[limb]


def test_fewer_than_t_shares_reveal_nothing_about_the_secret() -> None:
    """t-1 shares of a limb are uniform whatever the secret: compare two secrets' share distributions."""
    xs, t = [1, 2, 3, 4, 5], 3
    a, b = bytes(32), b"\xff" * 32
    sa = np.stack([_shamir.split([a], xs, t)[:2, 0, 0] for _ in range(1500)]).astype(np.float64) / P
    sb = np.stack([_shamir.split([b], xs, t)[:2, 0, 0] for _ in range(1500)]).astype(np.float64) / P
    for col in range(2):
        assert stats.ks_2samp(sa[:, col], sb[:, col]).pvalue > 1e-4
        assert stats.kstest(sa[:, col], "uniform").pvalue > 1e-4
    assert abs(np.corrcoef(sa[:, 0], sa[:, 1])[0, 1]) < 0.12
    # and t-1 shares interpolate to a value unrelated to the secret
    out, _ = _shamir.reconstruct(xs[:2], _shamir.split([a], xs, t)[:2])
    assert bytes(out[0]) != a


def test_limbs_round_trip_and_validity_flag() -> None:
    secrets = [os.urandom(32) for _ in range(20)] + [bytes(32), b"\xff" * 32]
    limbs = _shamir.secrets_to_limbs(secrets)
    assert limbs.shape == (22, 9) and int(limbs.max()) < 2**30
    out, valid = _shamir.limbs_to_secrets(limbs)
    assert valid.all() and [bytes(o) for o in out] == secrets
    limbs[0, 8] = 2**20  # beyond 256 bits
    limbs[1, 0] = 2**30  # limb out of range
    _, valid = _shamir.limbs_to_secrets(limbs)
    assert not valid[0] and not valid[1] and valid[2:].all()


def test_lagrange_coefficients_are_cached_per_holder_set() -> None:
    _shamir.lagrange_at_zero.cache_clear()
    xs = tuple(range(1, 60))
    lam = _shamir.lagrange_at_zero(xs)
    assert _shamir.lagrange_at_zero(xs) is lam
    assert _shamir.lagrange_at_zero.cache_info().hits == 1
    assert not lam.flags.writeable
    # coefficients of interpolation at 0 sum to 1 (interpolating the constant polynomial 1)
    assert int(lam.sum() % P) == 1
    ref = [
        (
            np.prod([x for x in xs if x != xi], dtype=object)
            * pow(int(np.prod([(x - xi) % P for x in xs if x != xi], dtype=object) % P), P - 2, P)
        )
        % P
        for xi in xs[:5]
    ]
    assert [int(v) for v in lam[:5]] == ref


def test_batched_reconstruction_matches_individual() -> None:
    xs = list(range(1, 41))
    secrets = [os.urandom(32) for _ in range(30)]
    shares = _shamir.split(secrets, xs, 21)
    out, valid = _shamir.reconstruct(xs[5:26], shares[5:26])
    assert valid.all() and [bytes(o) for o in out] == secrets


def test_bad_arguments() -> None:
    with pytest.raises(ConfigError, match="32 bytes"):
        _shamir.split([b"short"], [1, 2], 2)
    with pytest.raises(ConfigError, match="threshold"):
        _shamir.split([bytes(32)], [1, 2], 0)
    with pytest.raises(ConfigError, match="shape"):
        _shamir.reconstruct([1, 2], np.zeros((3, 1, 9), dtype=np.uint32))


def test_batched_reconstruction_with_a_holder_set_per_secret() -> None:
    rng = np.random.default_rng(3)
    secrets = [os.urandom(32) for _ in range(40)]
    xs = np.stack([rng.choice(np.arange(1, 500), size=7, replace=False) for _ in range(40)])
    shares = np.stack([_shamir.split([s], list(x), 7)[:, 0, :] for s, x in zip(secrets, xs, strict=True)])
    out, valid = _shamir.reconstruct_many(xs, shares)
    assert valid.all() and [bytes(o) for o in out] == secrets
    # the vectorised coefficients equal the cached per-set ones
    lam = _shamir.lagrange_at_zero_many(xs)
    for row in range(5):
        assert np.array_equal(lam[row], _shamir.lagrange_at_zero(tuple(int(v) for v in xs[row])))
    with pytest.raises(ConfigError, match="distinct"):
        _shamir.lagrange_at_zero_many(np.array([[1, 2, 2]]))
    with pytest.raises(ConfigError, match="shape"):
        _shamir.reconstruct_many(xs, shares[:, :3])


@pytest.mark.parametrize("top", [9, 500, _shamir.INVERSE_TABLE_MAX + 1000])
def test_table_and_fermat_coefficients_agree(top: int) -> None:
    """Up to ``INVERSE_TABLE_MAX`` the coefficients' inverses come from a table of small inverses, beyond it by
    Fermat: both equal the cached per-set coefficients, and a repeated x is refused on either path."""
    rng = np.random.default_rng(top)
    xs = np.stack([rng.choice(np.arange(1, top + 1), size=5, replace=False) for _ in range(30)])
    lam = _shamir.lagrange_at_zero_many(xs)
    assert np.array_equal(lam, _shamir._lagrange_fermat(xs.astype(np.uint64)))
    for row in range(30):
        assert np.array_equal(lam[row], _shamir.lagrange_at_zero(tuple(int(v) for v in xs[row])))
    with pytest.raises(ConfigError, match="distinct"):
        _shamir.lagrange_at_zero_many(np.array([[top, 1, top]]))
