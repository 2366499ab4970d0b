"""The GAP accountant against Opacus's own accountant, and calibration to a target epsilon."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from opacus.accountants import RDPAccountant

from securefgl.errors import ConfigError, PrivacyBudgetError
from securefgl.privacy import Mechanism, PrivacyStatement, calibrate_noise_multiplier, composed_epsilon


def _opacus(history: list[tuple[float, float, int]], delta: float) -> float:
    acc = RDPAccountant()
    acc.history = list(history)
    return acc.get_epsilon(delta)


@settings(max_examples=12, deadline=None)
@given(
    z=st.floats(0.5, 8.0),
    q=st.floats(0.01, 1.0),
    dp_steps=st.integers(1, 400),
    hops=st.integers(1, 5),
)
def test_gap_pipeline_epsilon_equals_opacus_rdp_accountant(
    z: float, q: float, dp_steps: int, hops: int
) -> None:
    parts = [
        Mechanism("encoder DP-SGD", q, dp_steps),
        Mechanism("aggregation perturbation", 1.0, hops),
        Mechanism("classifier DP-SGD", q, dp_steps),
    ]
    ours = composed_epsilon(z, parts, 1e-5)
    theirs = _opacus([(z, q, dp_steps), (z, 1.0, hops), (z, q, dp_steps)], 1e-5)
    assert ours == pytest.approx(theirs, rel=1e-12)


def test_aggregation_alone_is_the_gaussian_mechanism_composed_k_times() -> None:
    # K Gaussian mechanisms at noise multiplier z: RDP alpha K / (2 z^2), Opacus's q = 1 case.
    ours = composed_epsilon(2.0, [Mechanism("aggregation", 1.0, 3)], 1e-5)
    assert ours == pytest.approx(_opacus([(2.0, 1.0, 3)], 1e-5), rel=1e-12)


def test_calibration_meets_the_target_and_is_tight() -> None:
    parts = [Mechanism("dp-sgd", 0.25, 50), Mechanism("aggregation", 1.0, 2), Mechanism("dp-sgd 2", 0.25, 50)]
    for target in (1.0, 4.0, 8.0):
        z = calibrate_noise_multiplier(target, parts, 1e-5)
        assert composed_epsilon(z, parts, 1e-5) <= target
        assert composed_epsilon(z * 0.99, parts, 1e-5) > target  # within 1 % of the smallest multiplier


def test_nothing_run_costs_nothing_and_no_noise_is_infinite() -> None:
    assert composed_epsilon(1.0, [Mechanism("aggregation", 1.0, 0)], 1e-5) == 0.0
    assert calibrate_noise_multiplier(1.0, [Mechanism("aggregation", 1.0, 0)], 1e-5) == 0.0
    assert composed_epsilon(0.0, [Mechanism("aggregation", 1.0, 2)], 1e-5) == math.inf


def test_bad_inputs_are_named() -> None:
    with pytest.raises(ConfigError, match="sample_rate"):
        Mechanism("x", 0.0, 1)
    with pytest.raises(ConfigError, match="delta"):
        composed_epsilon(1.0, [Mechanism("x", 1.0, 1)], 1.5)
    with pytest.raises(PrivacyBudgetError, match="epsilon"):
        calibrate_noise_multiplier(-1.0, [Mechanism("x", 1.0, 1)], 1e-5)


def test_statement_carries_unit_epsilon_delta_accountant() -> None:
    parts = [Mechanism("aggregation perturbation", 1.0, 2)]
    s = PrivacyStatement.build("edge", parts, noise_multiplier=1.5, delta=1e-5, assumptions=["undirected"])
    d = s.to_dict()
    assert d["unit"] == "edge" and d["delta"] == 1e-5 and "opacus" in d["accountant"]
    assert d["epsilon"] == pytest.approx(_opacus([(1.5, 1.0, 2)], 1e-5))
    assert d["mechanisms"][0]["noise_multiplier"] == 1.5
    assert "edge-level DP" in s.describe() and "undirected" in s.describe()
