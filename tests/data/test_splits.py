"""Stratified splits and their validation."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from securefgl.data.splits import check_split, split_masks
from securefgl.errors import ConfigError


def test_stratified_floor_rule_per_class() -> None:
    y = torch.tensor([0] * 10 + [1] * 7 + [2] * 3)
    tr, va, te = split_masks(y, (0.2, 0.4, 0.4), np.random.default_rng(0))
    for c, n in ((0, 10), (1, 7), (2, 3)):
        m = y == c
        assert int(tr[m].sum()) == int(n * 0.2) and int(va[m].sum()) == int(n * 0.4)
        assert int(te[m].sum()) == n - int(n * 0.2) - int(n * 0.4)  # remainder to test when ratios sum to 1
    assert not (tr & va).any() and not (tr & te).any() and not (va & te).any()


def test_ratios_below_one_leave_nodes_out_and_groups_split_separately() -> None:
    y = torch.zeros(100, dtype=torch.long)
    groups = torch.tensor([0] * 50 + [1] * 40 + [-1] * 10)
    tr, va, te = split_masks(y, (0.1, 0.1, 0.5), np.random.default_rng(1), groups=groups)
    assert int(tr[:50].sum()) == 5 and int(tr[50:90].sum()) == 4 and int(te[:50].sum()) == 25
    assert not (tr | va | te)[90:].any()


def test_deterministic_and_seed_dependent() -> None:
    y = torch.randint(0, 4, (500,), generator=torch.Generator().manual_seed(0))
    a = split_masks(y, (0.4, 0.3, 0.3), np.random.default_rng(5))
    b = split_masks(y, (0.4, 0.3, 0.3), np.random.default_rng(5))
    c = split_masks(y, (0.4, 0.3, 0.3), np.random.default_rng(6))
    assert all(torch.equal(p, q) for p, q in zip(a, b, strict=True))
    assert not torch.equal(a[0], c[0])
    tr, _, _ = split_masks(y, (0.5, 0.5, 0.0), np.random.default_rng(0), stratified=False)
    assert int(tr.sum()) == 250


@pytest.mark.parametrize(
    ("split", "needle"),
    [
        ((0.5, 0.4, 0.2), "sum to 1.1 > 1"),
        ((0.5, 0.4), "three ratios"),
        ((-0.1, 0.5, 0.5), "in [0, 1]"),
        (("a", 0.5, 0.5), "must be a number"),
        ("privat", "valid: 'public'"),
        ((0.0, 0.5, 0.5), "train ratio must be > 0"),
    ],
)
def test_bad_splits(split, needle: str) -> None:
    with pytest.raises(ConfigError) as info:
        check_split(split)
    assert needle in str(info.value)
    assert check_split("PUBLIC") == "public"
