"""CSPRNG uniforms and the discrete Gaussian sampler of the distributed DP wrapper (hazmat).

Re-exported by :mod:`securefgl.protocols.dp`, whose docstring states the sampler's accuracy: the
rejection sampler of Canonne, Kamath and Steinke (NeurIPS 2020, Alg. 3), vectorised, in float64 on
53-bit uniforms from an AES-256-CTR keystream; and the conditional randomized rounding of Kairouz,
Liu and Steinke (ICML 2021, Sec. 4.1).
"""

from __future__ import annotations

import math
import os

import numpy as np

from securefgl.errors import ConfigError, PrivacyBudgetError
from securefgl.protocols._prg import KEY_BYTES, MAX_BLOCKS_PER_KEY, derive_key, keystream_into

__all__ = ["CryptoUniform", "conditional_round", "discrete_gaussian"]

_U53 = 2.0**-53


class CryptoUniform:
    """Uniform random words and floats from an AES-256-CTR keystream (a CSPRNG).

    Hazmat. The key is 256 bits from ``os.urandom`` unless given; the stream is re-keyed through HKDF
    before the per-key block limit of :mod:`securefgl.protocols._prg` is reached.

    Args:
        key: 32-byte key (tests pass a derived key; production leaves it ``None``).
    """

    def __init__(self, key: bytes | None = None) -> None:
        if key is None:
            key = os.urandom(KEY_BYTES)
        if not isinstance(key, (bytes, bytearray)) or len(key) != KEY_BYTES:
            raise ConfigError(f"CryptoUniform needs a {KEY_BYTES}-byte key, got {type(key).__name__}")
        self._key = bytes(key)
        self._block = 0
        self._epoch = 0

    def words(self, n: int) -> np.ndarray:
        """``n`` uniform ``uint64`` words.

        Shapes:
            output: ``(n,)`` uint64.
        """
        out = np.empty(int(n), dtype=np.uint64)
        blocks = -(-8 * out.size // 16)
        if self._block + blocks > MAX_BLOCKS_PER_KEY:
            self._epoch += 1
            self._key = derive_key(self._key, "dp-csprng-rekey", label=str(self._epoch))
            self._block = 0
        keystream_into(self._key, out, start_block=self._block)
        self._block += blocks
        return out

    def uniform(self, n: int) -> np.ndarray:
        """``n`` floats uniform on the 53-bit grid of :math:`(0, 1]`."""
        w = self.words(n)
        return ((w >> np.uint64(11)).astype(np.float64) + 1.0) * _U53

    def uniform_open(self, n: int) -> np.ndarray:
        """``n`` floats uniform on the 53-bit grid of :math:`[0, 1)`."""
        return (self.words(n) >> np.uint64(11)).astype(np.float64) * _U53


def discrete_gaussian(sigma: float, size: int, source: CryptoUniform) -> np.ndarray:
    """Samples of the discrete Gaussian :math:`\\mathcal{N}_{\\mathbb{Z}}(0, \\sigma^2)`, vectorised.

    Hazmat. :math:`P(Y = y) \\propto e^{-y^2 / 2\\sigma^2}` on the integers. Canonne-Kamath-Steinke
    (2020) Alg. 3 with a discrete Laplace proposal of scale :math:`t = \\lfloor\\sigma\\rfloor + 1`,
    sampled by inverting :math:`P(|Y| \\ge k) = 2r^k/(1+r)`, :math:`r = e^{-1/t}` (one log per
    candidate), with a uniform sign, accepted with probability
    :math:`\\exp(-(|y| - \\sigma^2/t)^2 / 2\\sigma^2)`. Float64 arithmetic on 53-bit CSPRNG uniforms (see
    the module docstring for the accuracy).

    Args:
        sigma: the scale :math:`\\sigma > 0` (0 gives zeros).
        size: number of samples.
        source: the CSPRNG.

    Shapes:
        output: ``(size,)`` int64.
    """
    size = int(size)
    if not math.isfinite(sigma) or sigma < 0:
        raise ConfigError(f"discrete Gaussian sigma must be finite and >= 0, got {sigma!r}")
    out = np.zeros(size, dtype=np.int64)
    if sigma == 0 or size == 0:
        return out
    t = math.floor(sigma) + 1.0
    s2 = sigma * sigma
    shift = s2 / t
    log_tail = math.log1p(math.expm1(-1.0 / t) / 2.0)  # log((1 + r) / 2)
    neg_inv_2s2 = -1.0 / (2.0 * s2)
    filled = 0
    while filled < size:
        m = int((size - filled) * 1.3) + 64
        w = source.words(2 * m)
        first = w[:m]
        neg = (first & np.uint64(1)).astype(bool)  # bit 0 is independent of the top 53 bits
        mag = (first >> np.uint64(11)).astype(np.float64)
        mag += 1.0
        mag *= _U53  # uniform on (0, 1]
        np.log(mag, out=mag)
        mag += log_tail
        mag *= -t
        np.floor(mag, out=mag)
        np.maximum(mag, 0.0, out=mag)  # |Y| of the discrete Laplace proposal
        prob = mag - shift
        np.square(prob, out=prob)
        prob *= neg_inv_2s2
        np.exp(prob, out=prob)  # acceptance probability
        v = (w[m:] >> np.uint64(11)).astype(np.float64)
        v *= _U53  # uniform on [0, 1)
        accept = v < prob
        y = mag[accept]
        flip = neg[accept]
        y[flip] = -y[flip]
        take = min(y.size, size - filled)
        out[filled : filled + take] = y[:take]
        filled += take
    return out


def conditional_round(
    y: np.ndarray, bound_sq: float, source: CryptoUniform, *, max_attempts: int = 10_000
) -> np.ndarray:
    """Conditional randomized rounding: unbiased stochastic rounding, redrawn until the norm bound holds.

    Hazmat. Kairouz et al. 2021, Sec. 4.1: round each coordinate of ``y`` (grid units) up with
    probability its fractional part, and redraw the whole vector while :math:`\\lVert \\tilde y
    \\rVert_2^2 > \\Delta^2`. With :math:`\\Delta^2` from :meth:`DDGBlock.sensitivity_sq` each draw
    succeeds with probability at least :math:`1 - \\beta` (and always when the deterministic bound
    :math:`(c + \\sqrt d)^2` is the smaller one).

    Args:
        y: the clipped vector in grid units.
        bound_sq: :math:`\\Delta^2`.
        source: the CSPRNG.
        max_attempts: safety stop (never reached in practice).

    Shapes:
        ``y``: ``(d,)`` float64; output: ``(d,)`` int64.
    """
    fl = np.floor(y)
    frac = y - fl
    base = fl.astype(np.int64)
    # Conservative margin for the float64 norm computation.
    limit = float(bound_sq) * (1.0 - 1e-12)
    for _ in range(max_attempts):
        r: np.ndarray = base + (source.uniform_open(y.size) < frac)
        rf = r.astype(np.float64)
        if float(np.einsum("i,i->", rf, rf)) <= limit:
            return r
    raise PrivacyBudgetError(
        f"conditional rounding did not meet the norm bound {math.sqrt(bound_sq):.6g} in {max_attempts} "
        "attempts; the clip norm or beta is inconsistent"
    )
