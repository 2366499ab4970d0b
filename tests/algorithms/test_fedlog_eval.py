"""FedLoG's round selection (shared with the claim comparison, tests/experiments/test_claims.py)."""

from securefgl.algorithms.fedlog import best_round


def test_best_round_takes_highest_validation_and_later_rounds_win_ties() -> None:
    hist = [
        {"round": 0, "seen_val": 0.5},
        {"round": 1, "seen_val": 0.8},
        {"round": 2, "seen_val": 0.7},
        {"round": 3, "seen_val": 0.8},
    ]
    assert best_round(hist)["round"] == 3


def test_best_round_skips_undefined_validation() -> None:
    hist = [{"round": 0, "seen_val": None}, {"round": 1, "seen_val": 0.1}, {"round": 2, "seen_val": None}]
    assert best_round(hist)["round"] == 1
    assert best_round([{"round": 0, "seen_val": None}]) is None
    assert best_round([]) is None


def test_best_round_other_key() -> None:
    hist = [{"round": 0, "acc": 0.9, "seen_val": 0.1}, {"round": 1, "acc": 0.2, "seen_val": 0.9}]
    assert best_round(hist, key="acc")["round"] == 0
