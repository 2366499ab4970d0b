"""Hazmat: vectorised t-of-n Shamir secret sharing of 256-bit secrets over GF(2^31 - 1).

.. warning::
    Low-level building block of :mod:`securefgl.protocols.secaggplus`; not a general-purpose API.

A 32-byte secret is cut into :data:`LIMBS` = 9 limbs of :data:`LIMB_BITS` = 30 bits (little-endian), and
each limb is shared independently with its own random polynomial over the prime field
:math:`\\mathbb{F}_p`, :math:`p = 2^{31} - 1` (Shamir, CACM 1979):

.. math::
    f_\\ell(x) = s_\\ell + \\sum_{j=1}^{t-1} a_{\\ell j} x^j, \\qquad
    \\text{share}_i = (f_\\ell(x_i))_{\\ell}, \\qquad
    s_\\ell = \\sum_{i \\in H} \\lambda_i f_\\ell(x_i),\\quad
    \\lambda_i = \\prod_{j \\in H, j \\ne i} \\frac{x_j}{x_j - x_i}.

Limbs are below :math:`2^{30} < p`, so products of two field elements fit in 62 bits and every operation
is a numpy ``uint64`` multiply, add and ``%`` over all holders, secrets and limbs at once (no Python loop
over elements; only over the :math:`t` polynomial coefficients). Any :math:`t-1` shares of a limb are
uniform and independent of it, hence of the secret. Lagrange coefficients are cached per holder set
(:func:`lagrange_at_zero`, an LRU cache keyed by the tuple of x-coordinates): with a complete graph every
secret is reconstructed from the same holder set, so the coefficients are computed once per round.

Random coefficients are drawn from a :data:`~securefgl.protocols._prg.RandomSource` (the OS CSPRNG in
production) by rejection sampling of 31-bit words, so they are exactly uniform in :math:`\\mathbb{F}_p`.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache

import numpy as np

from securefgl.errors import ConfigError
from securefgl.protocols._prg import RandomSource, system_random

__all__ = [
    "PRIME",
    "LIMB_BITS",
    "LIMBS",
    "SECRET_BYTES",
    "lagrange_at_zero",
    "lagrange_at_zero_many",
    "limbs_to_secrets",
    "reconstruct",
    "reconstruct_many",
    "secrets_to_limbs",
    "split",
    "uniform_field_elements",
]

#: The field modulus, the Mersenne prime 2^31 - 1.
PRIME = 2**31 - 1
#: Bits per limb of a secret (limbs are < 2^30 < PRIME).
LIMB_BITS = 30
#: Bytes per secret.
SECRET_BYTES = 32
#: Limbs per secret: ceil(256 / 30) = 9.
LIMBS = -(-8 * SECRET_BYTES // LIMB_BITS)

_P = np.uint64(PRIME)
_WEIGHTS = np.left_shift(np.uint64(1), np.arange(LIMB_BITS, dtype=np.uint64))


def _as_secret_array(secrets: np.ndarray | Sequence[bytes]) -> np.ndarray:
    if isinstance(secrets, np.ndarray):
        arr = secrets
    else:
        items = list(secrets)
        bad = [len(s) for s in items if len(s) != SECRET_BYTES]
        if bad:
            raise ConfigError(f"every secret must have {SECRET_BYTES} bytes, got lengths {bad[:5]}")
        arr = np.frombuffer(b"".join(bytes(s) for s in items), dtype=np.uint8).reshape(
            len(items), SECRET_BYTES
        )
    if arr.dtype != np.uint8 or arr.ndim != 2 or arr.shape[1] != SECRET_BYTES:
        raise ConfigError(f"secrets must be a (S, {SECRET_BYTES}) uint8 array, got {arr.dtype} {arr.shape}")
    return arr


def secrets_to_limbs(secrets: np.ndarray | Sequence[bytes]) -> np.ndarray:
    """Cut 32-byte secrets into 30-bit little-endian limbs.

    Shapes:
        secrets: :math:`(S, 32)` uint8 (or a sequence of ``S`` 32-byte strings); output :math:`(S, 9)` uint64.
    """
    arr = _as_secret_array(secrets)
    bits = np.unpackbits(arr, axis=1, bitorder="little")
    padded = np.zeros((arr.shape[0], LIMBS * LIMB_BITS), dtype=np.uint64)
    padded[:, : bits.shape[1]] = bits
    return padded.reshape(arr.shape[0], LIMBS, LIMB_BITS) @ _WEIGHTS


def limbs_to_secrets(limbs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Inverse of :func:`secrets_to_limbs`.

    Returns:
        ``(secrets, valid)``: the :math:`(S, 32)` uint8 secrets and a boolean :math:`(S,)` array that is
        false where a limb is out of range (bits beyond 256 set, or a limb :math:`\\ge 2^{30}`), which
        happens when a reconstruction used a corrupted share.
    """
    limbs = np.asarray(limbs, dtype=np.uint64)
    if limbs.ndim != 2 or limbs.shape[1] != LIMBS:
        raise ConfigError(f"limbs must have shape (S, {LIMBS}), got {limbs.shape}")
    in_range = np.all(limbs < np.uint64(1 << LIMB_BITS), axis=1)
    bits = ((limbs[:, :, None] >> np.arange(LIMB_BITS, dtype=np.uint64)) & np.uint64(1)).astype(np.uint8)
    bits = bits.reshape(limbs.shape[0], LIMBS * LIMB_BITS)
    valid = in_range & ~np.any(bits[:, 8 * SECRET_BYTES :], axis=1)
    return np.packbits(bits[:, : 8 * SECRET_BYTES], axis=1, bitorder="little"), valid


def uniform_field_elements(count: int, random: RandomSource = system_random) -> np.ndarray:
    """``count`` independent uniform elements of :math:`\\mathbb{F}_p` by rejection sampling 31-bit words."""
    out = np.empty(count, dtype=np.uint64)
    filled = 0
    while filled < count:
        need = count - filled
        words = np.frombuffer(random(4 * (need + need // 64 + 8)), dtype="<u4").astype(np.uint64)
        words &= np.uint64(0x7FFFFFFF)
        words = words[words < _P]
        take = min(need, words.size)
        out[filled : filled + take] = words[:take]
        filled += take
    return out


def _check_xs(xs: Sequence[int]) -> tuple[int, ...]:
    xt = tuple(int(x) for x in xs)
    if not xt:
        raise ConfigError("need at least one share holder")
    if any(not 1 <= x < PRIME for x in xt):
        raise ConfigError(
            f"x-coordinates must be in [1, {PRIME - 1}], got {[x for x in xt if not 1 <= x < PRIME][:5]}"
        )
    if len(set(xt)) != len(xt):
        raise ConfigError(f"x-coordinates must be distinct, got duplicates in {xt[:10]}...")
    return xt


def split(
    secrets: np.ndarray | Sequence[bytes],
    xs: Sequence[int],
    threshold: int,
    random: RandomSource = system_random,
) -> np.ndarray:
    """Share each secret among the holders at ``xs`` so that any ``threshold`` shares reconstruct it.

    Args:
        secrets: the 32-byte secrets (the same polynomial degree for all).
        xs: distinct non-zero x-coordinates of the holders (e.g. 1-based positions in the client list).
        threshold: :math:`t`, from 1 to ``len(xs)``.
        random: source of the polynomial coefficients (the OS CSPRNG unless testing).

    Returns:
        Shares, :math:`(m, S, 9)` uint32 with values below :data:`PRIME`: ``shares[i]`` goes to ``xs[i]``.
    """
    arr = _as_secret_array(secrets)
    xt = _check_xs(xs)
    if (
        isinstance(threshold, bool)
        or not isinstance(threshold, (int, np.integer))
        or not 1 <= threshold <= len(xt)
    ):
        raise ConfigError(
            f"threshold must be an integer in [1, {len(xt)}] (number of holders), got {threshold!r}"
        )
    s = arr.shape[0]
    coeffs = np.empty((threshold, s, LIMBS), dtype=np.uint64)
    coeffs[0] = secrets_to_limbs(arr)
    if threshold > 1:
        coeffs[1:] = uniform_field_elements((threshold - 1) * s * LIMBS, random).reshape(
            threshold - 1, s, LIMBS
        )
    x = np.asarray(xt, dtype=np.uint64)[:, None, None]
    acc = np.broadcast_to(coeffs[threshold - 1], (len(xt), s, LIMBS)).copy()
    for j in range(threshold - 2, -1, -1):  # Horner over the t coefficients, vectorised over the rest
        acc *= x
        acc += coeffs[j]
        acc %= _P
    coeffs.fill(0)
    return acc.astype(np.uint32)


@lru_cache(maxsize=4096)
def lagrange_at_zero(xs: tuple[int, ...]) -> np.ndarray:
    """Lagrange coefficients :math:`\\lambda_i` for interpolating at 0 from the holders ``xs`` (cached).

    Returns:
        :math:`(|xs|,)` uint64 array of field elements, read-only (shared by the cache).
    """
    xt = _check_xs(xs)
    x = np.asarray(xt, dtype=np.uint64)
    m = x.size
    diff = (x[None, :] + _P - x[:, None]) % _P  # diff[i, j] = x_j - x_i
    np.fill_diagonal(diff, 1)
    num = np.ones(m, dtype=np.uint64)
    den = np.ones(m, dtype=np.uint64)
    for j in range(m):
        xj = np.full(m, x[j], dtype=np.uint64)
        xj[j] = 1
        num = num * xj % _P
        den = den * diff[:, j] % _P
    inv = np.array([pow(int(d), PRIME - 2, PRIME) for d in den], dtype=np.uint64)
    lam = num * inv % _P
    lam.setflags(write=False)
    return lam


def reconstruct(xs: Sequence[int], shares: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Interpolate the secrets at 0 from the shares of the holders ``xs`` (use exactly ``t`` of them).

    Args:
        xs: x-coordinates of the holders whose shares are given, in the order of ``shares``.
        shares: :math:`(m, S, 9)` shares (values below :data:`PRIME`).

    Returns:
        ``(secrets, valid)`` as in :func:`limbs_to_secrets`. With fewer than ``t`` shares (or a corrupted
        one) the result is a wrong secret: callers verify it against a public commitment.
    """
    sh = np.asarray(shares)
    if sh.ndim != 3 or sh.shape[0] != len(xs) or sh.shape[2] != LIMBS:
        raise ConfigError(f"shares must have shape ({len(xs)}, S, {LIMBS}), got {sh.shape}")
    if sh.size and int(sh.max()) >= PRIME:
        raise ConfigError(f"share values must be below {PRIME}")
    lam = lagrange_at_zero(tuple(int(x) for x in xs))
    terms = lam[:, None, None] * sh.astype(np.uint64) % _P
    limbs = terms.sum(axis=0, dtype=np.uint64) % _P
    return limbs_to_secrets(limbs)


def _inverse(a: np.ndarray) -> np.ndarray:
    """Elementwise :math:`a^{p-2} \\bmod p` (Fermat inverse) by square-and-multiply, vectorised."""
    result = np.ones_like(a, dtype=np.uint64)
    base = a.astype(np.uint64) % _P
    e = PRIME - 2
    while e:
        if e & 1:
            result = result * base % _P
        base = base * base % _P
        e >>= 1
    return result


def lagrange_at_zero_many(xs: np.ndarray) -> np.ndarray:
    """Lagrange coefficients at 0 for many holder sets at once (one row each), uncached.

    Used when every secret has its own holder set (SecAgg+ neighbourhoods), where a per-set cache
    would never hit. :math:`\\lambda_j = \\prod_{i \\ne j} x_i / (x_i - x_j)`: one pass per column over
    all rows, each factor's inverse read from a table of the inverses of ``1 .. max(x)`` (the differences
    of x-coordinates of at most that size), so no row needs a modular exponentiation; beyond
    :data:`INVERSE_TABLE_MAX` the denominators are inverted by Fermat's little theorem instead.

    Shapes:
        xs: :math:`(G, t)` x-coordinates, distinct within each row. Output: :math:`(G, t)` uint64.
    """
    x = np.asarray(xs, dtype=np.int64)
    if x.ndim != 2 or x.shape[1] == 0:
        raise ConfigError(f"xs must be a non-empty (G, t) array, got shape {x.shape}")
    if x.size and (int(x.min()) < 1 or int(x.max()) >= PRIME):
        raise ConfigError(f"x-coordinates must be in [1, {PRIME - 1}]")
    g, t = x.shape
    top = int(x.max()) if x.size else 1
    if top > INVERSE_TABLE_MAX:
        return _lagrange_fermat(x.astype(np.uint64))
    size = max(64, 1 << (top - 1).bit_length())  # a power of two: one cached table serves every nearby top
    table = _small_inverses(size)  # table[a + size] = a^-1 mod p for 0 < |a| <= size
    coefficients: np.ndarray = np.ones((g, t), dtype=np.uint64)
    for i in range(t):
        d = x[:, i : i + 1] - x  # x_i - x_j, in [-(top - 1), top - 1]; 0 on the diagonal
        if bool((d == 0).sum(axis=1).max() > 1):
            raise ConfigError("x-coordinates must be distinct within each holder set")
        factor = x[:, i : i + 1].astype(np.uint64) * table[d + size] % _P
        factor[:, i] = 1
        coefficients = coefficients * factor % _P
    return coefficients


#: Largest x-coordinate for which :func:`lagrange_at_zero_many` builds a table of inverses (beyond: Fermat).
INVERSE_TABLE_MAX = 1 << 16


@lru_cache(maxsize=8)
def _small_inverses(top: int) -> np.ndarray:
    """``table[a + top]`` = the inverse of ``a`` mod p for ``0 < |a| <= top`` (0 at ``a = 0``), read-only."""
    pos = np.array([0] + [pow(a, PRIME - 2, PRIME) for a in range(1, top + 1)], dtype=np.uint64)
    table = np.concatenate([(_P - pos[:0:-1]) % _P, pos])
    table.setflags(write=False)
    return table


def _lagrange_fermat(x: np.ndarray) -> np.ndarray:
    """:func:`lagrange_at_zero_many` for large x-coordinates: products, then Fermat inverses of the
    denominators."""
    g, t = x.shape
    num: np.ndarray = np.ones((g, t), dtype=np.uint64)
    den: np.ndarray = np.ones((g, t), dtype=np.uint64)
    for j in range(t):
        xj = x[:, j : j + 1]
        diff = (xj + _P - x) % _P  # x_j - x_i for every i of each row
        diff[:, j] = 1
        mult = np.repeat(xj, t, axis=1)
        mult[:, j] = 1
        num = num * mult % _P
        den = den * diff % _P
    if not den.all():
        raise ConfigError("x-coordinates must be distinct within each holder set")
    coefficients: np.ndarray = num * _inverse(den) % _P
    return coefficients


def reconstruct_many(xs: np.ndarray, shares: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Reconstruct one secret per row, each from its own ``t`` holders.

    Args:
        xs: :math:`(G, t)` x-coordinates of the holders of each secret.
        shares: :math:`(G, t, 9)` their shares of that secret.

    Returns:
        ``(secrets, valid)`` as in :func:`limbs_to_secrets`, one row per secret.
    """
    sh = np.asarray(shares)
    if sh.ndim != 3 or sh.shape[:2] != np.shape(xs) or sh.shape[2] != LIMBS:
        raise ConfigError(f"shares must have shape {tuple(np.shape(xs))} + ({LIMBS},), got {sh.shape}")
    if sh.size and int(sh.max()) >= PRIME:
        raise ConfigError(f"share values must be below {PRIME}")
    lam = lagrange_at_zero_many(xs)
    limbs = (lam[:, :, None] * sh.astype(np.uint64) % _P).sum(axis=1, dtype=np.uint64) % _P
    return limbs_to_secrets(limbs)
