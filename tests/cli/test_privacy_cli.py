"""``securefgl run --privacy``: what the flags stand for, and the refusals (no training needed)."""

from __future__ import annotations

import math

import pytest

from securefgl.cli._privacy import privacy_lines, privacy_overrides
from securefgl.errors import ConfigError


def test_node_and_edge_train_gap_with_the_budget() -> None:
    o = privacy_overrides("node", 4.0, 1e-6, algorithm=None, protocol="secagg")
    assert o == {"algorithm": {"name": "gap", "options": {"privacy": "node", "epsilon": 4.0, "delta": 1e-6}}}
    assert privacy_overrides("edge", math.inf, None, algorithm="gap", protocol=None)["algorithm"][
        "options"
    ] == {
        "privacy": "edge",
        "epsilon": math.inf,
    }


def test_client_wraps_the_protocol_in_distributed_dp() -> None:
    o = privacy_overrides("client", None, None, algorithm=None, protocol="secagg+", clients=20)
    assert o["protocol"]["name"] == "secagg++dp"
    assert o["protocol"]["options"] == {"dp_epsilon": 8.0, "dp_min_contributors": 19, "dp_clip_norm": 1.0}


@pytest.mark.parametrize(
    ("args", "match"),
    [
        (("node", 8.0, None, "fedavg"), "--algorithm fedavg has no node-level DP"),
        ((None, 8.0, None, None), "--epsilon and --delta need --privacy"),
        (("people", 8.0, None, None), "valid: node, edge, client"),
        (("node", -1.0, None, None), "--epsilon must be > 0"),
        (("edge", 1.0, 2.0, None), "--delta must be in"),
        (("client", math.inf, None, None), "finite --epsilon"),
    ],
)
def test_refusals_name_the_value(args: tuple, match: str) -> None:
    privacy, eps, delta, algorithm = args
    with pytest.raises(ConfigError, match=match):
        privacy_overrides(privacy, eps, delta, algorithm=algorithm, protocol=None)


def test_statement_lines() -> None:
    lines = privacy_lines(
        {
            "unit": "node",
            "epsilon": 7.99,
            "delta": 1e-5,
            "accountant": "opacus RDP",
            "mechanisms": [{"name": "aggregation", "steps": 2, "sample_rate": 1.0, "noise_multiplier": 2.0}],
            "assumptions": ["degree bound D=10"],
            "client_level": {"unit": "client", "epsilon": 8.0, "delta": 1e-5, "accountant": "ddg"},
        }
    )
    assert lines[0] == "privacy: node-level DP, epsilon 7.99 at delta 1e-05"
    assert "  assumes: degree bound D=10" in lines
    assert any(line.startswith("privacy: client-level DP, epsilon 8") for line in lines)
    assert privacy_lines({"unit": "none"}) == ["privacy: no differential-privacy guarantee (no --privacy)"]
