"""Tests for securefgl.protocols.dp: the distributed discrete Gaussian wrapper and its accountant."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy import stats

from securefgl.errors import ConfigError, PrivacyBudgetError, ReleaseRefusedError, UnsupportedCombinationError
from securefgl.protocols import BlockSpec, DropoutPlan, SumSchema, available_protocols, get_protocol
from securefgl.protocols._prg import MAX_BLOCKS_PER_KEY
from securefgl.protocols.dp import (
    OPACUS_DEFAULT_ALPHAS,
    CryptoUniform,
    DDGBlock,
    DistributedDP,
    PrivateSums,
    conditional_round,
    ddg_epsilon,
    ddg_round_rdp,
    discrete_gaussian,
    poisson_subsampled_rdp,
)
from securefgl.protocols.plaintext import PlaintextAggregation

KEY = bytes(range(32))  # a fixed key: the tests are reproducible (production keys come from os.urandom)


def dg_pmf(sigma: float) -> tuple[np.ndarray, np.ndarray]:
    k = np.arange(-int(60 * sigma) - 5, int(60 * sigma) + 6)
    w = np.exp(-(k.astype(np.float64) ** 2) / (2 * sigma**2))
    return k, w / w.sum()


# -- the sampler -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("sigma", [0.8, 3.7, 40.0, 2500.0])
def test_discrete_gaussian_has_the_intended_variance(sigma):
    x = discrete_gaussian(sigma, 200_000, CryptoUniform(KEY))
    assert x.dtype == np.int64
    k, p = dg_pmf(sigma)
    var = float((p * k.astype(np.float64) ** 2).sum())
    n = x.size
    # sample variance of n iid draws: relative standard error sqrt(2/n) (kurtosis ~3); 5 sigma band
    assert abs(x.var() / var - 1) < 5 * math.sqrt(2 / n)
    assert abs(x.mean()) < 5 * math.sqrt(var / n)  # unbiased


def test_discrete_gaussian_matches_its_pmf():
    sigma = 3.7
    x = discrete_gaussian(sigma, 300_000, CryptoUniform(KEY))
    k, p = dg_pmf(sigma)
    lo, hi = -12, 12
    observed = np.array([np.sum(x <= lo)] + [np.sum(x == v) for v in range(lo + 1, hi)] + [np.sum(x >= hi)])
    expected = np.array(
        [p[k <= lo].sum()] + [p[k == v].sum() for v in range(lo + 1, hi)] + [p[k >= hi].sum()]
    )
    _, pvalue = stats.chisquare(observed, expected * x.size)
    assert pvalue > 1e-4


def test_crypto_uniform_is_a_keyed_stream():
    a, b = CryptoUniform(KEY), CryptoUniform(KEY)
    assert np.array_equal(a.words(1000), b.words(1000))
    assert not np.array_equal(CryptoUniform().words(8), CryptoUniform().words(8))  # fresh OS keys
    u = CryptoUniform(KEY).uniform(100_000)
    assert u.min() > 0 and u.max() <= 1
    assert stats.kstest(u, "uniform").pvalue > 1e-4
    c = CryptoUniform(KEY)
    c._block = MAX_BLOCKS_PER_KEY - 1  # the next draw re-keys instead of overrunning the counter
    w = c.words(16)
    assert c._epoch == 1 and w.size == 16
    with pytest.raises(ConfigError, match="32-byte key"):
        CryptoUniform(b"short")


def test_conditional_rounding_is_unbiased_and_bounded():
    src = CryptoUniform(KEY)
    y = np.array([0.3, -1.7, 2.5, 0.0, 4.9])
    blk = DDGBlock(dim=5, clip=float(np.linalg.norm(y)), sigma=1.0, beta=math.exp(-0.5))
    draws = np.array([conditional_round(y, blk.sensitivity_sq(), src) for _ in range(4000)])
    assert (np.sqrt((draws.astype(np.float64) ** 2).sum(1)) <= math.sqrt(blk.sensitivity_sq())).all()
    assert np.abs(draws.mean(0) - y).max() < 0.05
    assert set(np.unique(draws[:, 0])) == {0, 1}


# -- accounting ----------------------------------------------------------------------------------------------


def _gaussian_like(z: float) -> DDGBlock:
    """A block whose DDG round RDP is the Gaussian's alpha / (2 z^2) (huge sigma: tau vanishes)."""
    unit = DDGBlock(dim=10, clip=1e6, sigma=1.0, beta=0.0)
    return DDGBlock(dim=10, clip=1e6, sigma=z * math.sqrt(unit.sensitivity_sq()), beta=0.0)


#: (noise multiplier, sample rate, steps) -> epsilon at delta = 1e-5, computed with opacus 1.6.0.
PINNED_OPACUS = {(1.0, 1.0, 100): 96.11630842505602, (2.0, 1.0, 1000): 198.53553359954904}
PINNED_SAMPLED = {  # ours (general Poisson-subsampling bound) vs Opacus's sampled Gaussian (tighter)
    (1.1, 0.01, 10000): (6.079304140071312, 5.63199236854841),
    (0.8, 0.1, 100): (13.828010209476966, 12.358541266986002),
}


def test_opacus_default_orders_are_mirrored():
    from opacus.accountants import RDPAccountant

    assert list(OPACUS_DEFAULT_ALPHAS) == [float(a) for a in RDPAccountant.DEFAULT_ALPHAS]


@pytest.mark.parametrize(("z", "q", "steps"), list(PINNED_OPACUS))
def test_epsilon_matches_opacus_without_sampling(z, q, steps):
    from opacus.accountants import RDPAccountant

    ours = ddg_epsilon(
        [_gaussian_like(z)], rounds=steps, sample_rate=q, delta=1e-5, min_shares=1, max_shares=10
    )
    acc = RDPAccountant()
    for _ in range(steps):
        acc.step(noise_multiplier=z, sample_rate=q)
    assert ours == pytest.approx(PINNED_OPACUS[(z, q, steps)], rel=1e-12)
    assert acc.get_epsilon(1e-5) == pytest.approx(PINNED_OPACUS[(z, q, steps)], rel=1e-12)


@pytest.mark.parametrize(("z", "q", "steps"), list(PINNED_SAMPLED))
def test_epsilon_with_client_sampling_is_pinned_and_no_tighter_than_opacus(z, q, steps):
    from opacus.accountants import RDPAccountant

    ours = ddg_epsilon(
        [_gaussian_like(z)], rounds=steps, sample_rate=q, delta=1e-5, min_shares=1, max_shares=10
    )
    acc = RDPAccountant()
    for _ in range(steps):
        acc.step(noise_multiplier=z, sample_rate=q)
    pinned_ours, pinned_opacus = PINNED_SAMPLED[(z, q, steps)]
    assert ours == pytest.approx(pinned_ours, rel=1e-9)
    assert acc.get_epsilon(1e-5) == pytest.approx(pinned_opacus, rel=1e-12)
    assert pinned_opacus < ours < 1.2 * pinned_opacus


def test_poisson_subsampling_bound_matches_its_formula():
    eps = lambda a: 0.7 * a  # noqa: E731 - a Gaussian-like RDP curve
    base = np.array([eps(a) for a in range(2, 9)], dtype=np.float64)
    q = 0.05
    got = poisson_subsampled_rdp(base, [2.0, 5.0, 8.0], q)
    for a, g in zip([2, 5, 8], got, strict=True):
        s = (1 - q) ** (a - 1) * (a * q - q + 1) + math.comb(a, 2) * q**2 * (1 - q) ** (a - 2) * math.exp(
            eps(2)
        )
        s += sum(
            3 * math.comb(a, j) * q**j * (1 - q) ** (a - j) * math.exp((j - 1) * eps(j))
            for j in range(3, a + 1)
        )
        assert g == pytest.approx(min(math.log(s) / (a - 1), eps(a)), rel=1e-10)
    assert np.array_equal(poisson_subsampled_rdp(base, [2.0, 3.0], 1.0), base[:2])
    with pytest.raises(ConfigError, match="integer orders"):
        poisson_subsampled_rdp(base, [2.5], 0.1)


def test_tau_and_sensitivity_terms():
    b = DDGBlock(dim=1000, clip=50.0, sigma=0.6)
    assert b.tau(1) == 0.0 and b.tau(10) > b.tau(5) > 0
    assert b.sensitivity_sq() <= (50.0 + math.sqrt(1000)) ** 2
    # tau d is part of the bound: a small sigma on a large block makes every order expensive
    tiny = ddg_round_rdp([b], [2.0], min_shares=5, max_shares=100)[0]
    wide = ddg_round_rdp([DDGBlock(dim=1000, clip=50.0, sigma=30.0)], [2.0], min_shares=5, max_shares=100)[0]
    assert tiny > wide


# -- the wrapper ----------------------------------------------------------------------------------------------


def dp_schema(max_clients: int = 10) -> SumSchema:
    return SumSchema(
        [
            BlockSpec("g", (4000,), bound=1.0, dp=True),
            BlockSpec("n", (3,), kind="count", bound=100),
            BlockSpec("x", (5,), bound=2.0),
        ],
        max_clients=max_clients,
        precision=2.0**-12,
    )


def dp_contributions(n: int, seed: int = 0) -> dict[int, dict]:
    rng = np.random.default_rng(seed)
    return {
        c: {
            "g": rng.normal(0, 0.03, 4000),  # L2 norm about 1.9 > clip 1.0: clipped
            "n": rng.integers(0, 101, 3),
            "x": rng.uniform(-3, 3, 5),  # beyond the bound: clipped and counted
        }
        for c in range(n)
    }


def clipped(x: np.ndarray, c: float) -> np.ndarray:
    return x * min(1.0, c / float(np.linalg.norm(x)))


def make(inner=None, **kw) -> DistributedDP:
    opts = {"min_contributors": 3, "clip_norm": 1.0, "noise_multiplier": 0.7, "insecure_seed": 7}
    opts.update(kw)
    return DistributedDP(inner or PlaintextAggregation(), **opts)


@pytest.mark.parametrize("drop", [0, 2])
def test_sum_noise_has_the_target_variance_and_no_bias(drop):
    """n=5 invited, m=3: the noise variance is n/m times the target, and exactly the target after 2 drop."""
    s, contribs = dp_schema(), dp_contributions(5)
    p = make()
    plan = DropoutPlan({c: "input" for c in range(drop)})
    sums, t = p.aggregate(s, contribs, dropouts=plan)
    assert isinstance(sums, PrivateSums)
    who = t.survivors
    assert len(who) == 5 - drop
    residual = sums["g"].double().numpy() - sum(clipped(contribs[c]["g"], 1.0) for c in who)
    target = sums.privacy.noise_std["g"] ** 2  # variance of m = 3 shares
    expected = target * len(who) / 3
    n = residual.size
    assert abs(residual.var() / expected - 1) < 5 * math.sqrt(2 / n)
    assert abs(residual.mean()) < 5 * math.sqrt(expected / n)
    assert residual.var() >= target * (1 - 5 * math.sqrt(2 / n))
    # blocks without dp pass through exactly
    assert torch.equal(sums["n"], torch.as_tensor(sum(contribs[c]["n"] for c in who)))
    # the noise multiplier is relative to the post-rounding sensitivity bound
    assert sums.privacy.noise_std["g"] == pytest.approx(0.7 * 1.0, rel=0.01)


def test_privacy_report_in_sums_and_transcript():
    s, contribs = dp_schema(), dp_contributions(4, seed=1)
    sums, t = make().aggregate(s, contribs)
    rep = t.extra["privacy"]
    assert rep["unit"] == "client" and rep["delta"] == 1e-5
    assert rep["epsilon"] == sums.privacy.epsilon > 0
    assert "distributed discrete Gaussian" in rep["mechanism"]
    assert t.protocol == "plaintext+dp"
    assert "g" not in sums.clip_counts and "g" not in t.clip_counts  # not differentially private
    assert sums.clip_counts["x"] > 0
    assert "dp_noise" in t.phase_seconds
    assert "epsilon=" in repr(sums) and isinstance(sums.to("cpu"), PrivateSums)


def test_epsilon_accumulates_over_rounds_like_opacus():
    from opacus.accountants import RDPAccountant

    s = dp_schema()
    p = make(noise_multiplier=2.0)
    for r in range(3):
        sums, _ = p.aggregate(s, dp_contributions(4, seed=r), round_index=r)
    acc = RDPAccountant()
    for _ in range(3):
        acc.step(noise_multiplier=2.0, sample_rate=1.0)
    # the DDG bound adds tiny tau terms to the Gaussian's RDP: slightly above Opacus, never below
    assert acc.get_epsilon(1e-5) <= sums.privacy.epsilon < acc.get_epsilon(1e-5) * 1.01
    assert sums.privacy.rounds == 3


def test_participation_visible_epsilon_with_client_sampling():
    s = dp_schema()
    p = make(sample_rate=0.05, sampler="poisson")
    for r in range(2):
        sums, _ = p.aggregate(s, dp_contributions(4, seed=r), round_index=r)
    rep = sums.privacy
    assert rep.epsilon < rep.epsilon_participation_visible  # amplification does not hold against the server


def test_target_epsilon_budget_is_enforced():
    s = dp_schema()
    p = make(noise_multiplier=None, epsilon=3.0, rounds=2)
    for r in range(2):
        sums, _ = p.aggregate(s, dp_contributions(4, seed=r), round_index=r)
    assert 2.9 < sums.privacy.epsilon <= 3.0 * (1 + 1e-6)
    with pytest.raises(PrivacyBudgetError, match=r"round 2 would raise epsilon to .* budget epsilon=3.0"):
        p.aggregate(s, dp_contributions(4, seed=9), round_index=2)


def test_too_few_noise_shares_are_never_released():
    s = dp_schema()
    with pytest.raises(ReleaseRefusedError, match="min_contributors=3"):
        make().aggregate(s, dp_contributions(2))
    with pytest.raises(ReleaseRefusedError):  # enough invited, too many dropped: the inner rule refuses
        make().aggregate(s, dp_contributions(4), dropouts=DropoutPlan({0: "input", 1: "input"}))


def test_noise_split_from_a_server_reported_count_is_refused():
    for bad in (None, "survivors", "invited"):
        with pytest.raises(ConfigError, match="server"):
            DistributedDP(PlaintextAggregation(), min_contributors=bad, clip_norm=1.0, noise_multiplier=1.0)


@pytest.mark.parametrize(
    ("kw", "match"),
    [
        (
            {"noise_multiplier": None, "epsilon": -1.0, "rounds": 3},
            r"epsilon must be a positive finite number, got -1.0",
        ),
        ({"noise_multiplier": None, "epsilon": float("inf"), "rounds": 3}, r"got inf"),
        ({"delta": 0.0}, r"delta must be a number in \(0, 1\), got 0.0"),
        ({"delta": 1.5}, r"got 1.5"),
        ({"sample_rate": 0.0}, r"sample_rate must be a number in \(0, 1\], got 0.0"),
        ({"noise_multiplier": -2.0}, r"noise_multiplier must be a positive finite number, got -2.0"),
    ],
)
def test_out_of_range_privacy_parameters(kw, match):
    with pytest.raises(PrivacyBudgetError, match=match):
        make(**kw)


def test_configuration_errors():
    with pytest.raises(ConfigError, match="exactly one of noise_multiplier and epsilon"):
        make(epsilon=1.0, rounds=2)
    with pytest.raises(ConfigError, match="needs rounds"):
        make(noise_multiplier=None, epsilon=1.0)
    with pytest.raises(ConfigError, match="clip_norm is required"):
        make(clip_norm=None)
    no_dp = SumSchema([BlockSpec("a", (3,))], max_clients=5)
    with pytest.raises(ConfigError, match="at least one block with dp=True"):
        make().aggregate(no_dp, {c: {"a": np.zeros(3)} for c in range(3)})
    with pytest.raises(ConfigError, match=r"missing \['g'\]"):
        make(clip_norm={"x": 1.0}).aggregate(dp_schema(), dp_contributions(3))
    rows = SumSchema(
        [
            BlockSpec("cnt", (2,), kind="count", bound=5, dp=True),
            BlockSpec("m", (2, 3), counted_by="cnt", min_contributors=2),
        ],
        max_clients=5,
    )
    with pytest.raises(UnsupportedCombinationError, match="row-wise release on noised counts"):
        make().aggregate(
            rows, {c: {"cnt": np.ones(2, dtype=np.int64), "m": np.zeros((2, 3))} for c in range(3)}
        )
    with pytest.raises(PrivacyBudgetError, match="per-client noise scale"):
        make(noise_multiplier=1e-6).aggregate(dp_schema(), dp_contributions(3))


def test_noised_count_blocks_stay_integer():
    s = SumSchema([BlockSpec("cnt", (200,), kind="count", bound=20, dp=True)], max_clients=6)
    contribs = {c: {"cnt": np.full(200, c, dtype=np.int64)} for c in range(4)}
    sums, _ = make(clip_norm=500.0, noise_multiplier=0.5).aggregate(s, contribs)
    assert sums["cnt"].dtype == torch.int64
    resid = sums["cnt"].double().numpy() - 6.0
    assert abs(resid.mean()) < 5 * sums.privacy.noise_std["cnt"] * math.sqrt(4 / 3) / math.sqrt(200)


def test_wraps_every_available_protocol():
    s, contribs = dp_schema(), dp_contributions(3, seed=4)
    bases = [n for n in ("plaintext", "secagg", "secagg+", "ckks") if n + "+dp" in available_protocols()]
    assert {"plaintext", "ckks"} <= set(bases)
    for base in bases:
        p = get_protocol(base + "+dp", dp={"min_contributors": 3, "clip_norm": 1.0, "noise_multiplier": 0.7})
        sums, t = p.aggregate(s, contribs)
        assert t.protocol == base + "+dp"
        resid = sums["g"].double().numpy() - sum(clipped(contribs[c]["g"], 1.0) for c in range(3))
        assert abs(resid.std() / sums.privacy.noise_std["g"] - 1) < 0.15, base
        assert torch.equal(sums["n"], torch.as_tensor(sum(contribs[c]["n"] for c in range(3))))
        if base.startswith("secagg"):  # the masking protocols report their Shamir threshold
            assert sums.privacy.inner_threshold == p.base.parameters(3).threshold
        else:
            assert sums.privacy.inner_threshold is None
