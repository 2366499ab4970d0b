"""Metrics follow the spec rules: macro-F1 over all global classes, node-count weighting over clients."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from sklearn.metrics import f1_score
from torch_geometric.data import Data

from securefgl.engine.metrics import aggregate_clients, client_metrics, macro_f1, majority_class, mean_std


@pytest.mark.parametrize("seed", range(5))
def test_macro_f1_matches_sklearn_with_global_labels(seed):
    g = torch.Generator().manual_seed(seed)
    c = 6
    target = torch.randint(0, 3, (50,), generator=g)  # classes 3..5 absent from this client
    pred = torch.randint(0, 5, (50,), generator=g)
    ref = f1_score(target.numpy(), pred.numpy(), average="macro", labels=list(range(c)), zero_division=0)
    assert macro_f1(pred, target, c) == pytest.approx(ref)


def _client(y, pred_correct, n_train_major=3):
    n = len(y)
    y = torch.tensor(y)
    train = torch.zeros(n, dtype=torch.bool)
    train[:n_train_major] = True
    test = ~train
    logits = torch.zeros(n, 3)
    pred = torch.where(torch.tensor(pred_correct), y, (y + 1) % 3)
    logits[torch.arange(n), pred] = 1.0
    return Data(y=y, train_mask=train, val_mask=test, test_mask=test, num_nodes=n), logits


def test_client_and_overall_metrics_by_hand():
    d0, l0 = _client([0, 0, 0, 0, 1, 2], [True, True, True, True, False, True])  # test: 0,1,2 -> 2/3 correct
    d1, l1 = _client([1, 1, 1, 1, 1, 1, 1, 1, 0, 0], [True] * 3 + [True] * 5 + [False, False])  # test 5/7
    m0 = client_metrics(0, l0, d0, 3)
    m1 = client_metrics(1, l1, d1, 3)
    assert m0.splits["test"].acc == pytest.approx(2 / 3)
    assert m1.splits["test"].acc == pytest.approx(5 / 7)
    overall = aggregate_clients([m0, m1])
    # weighted by each client's total node count N_k (6 and 10), not by test nodes
    assert overall["test_acc"] == pytest.approx((6 * 2 / 3 + 10 * 5 / 7) / 16)
    assert overall["test_acc_pooled"] == pytest.approx(7 / 10)
    # minority: client 0 majority class 0 -> minority test nodes {1: wrong, 2: right}; client 1 majority 1 ->
    # minority test nodes {0, 0}: both wrong
    assert m0.splits["test"].minority_n == 2 and m0.splits["test"].minority_correct == 1
    assert overall["test_minority_acc"] == pytest.approx(1 / 4)
    assert overall["test_f1"] == pytest.approx((6 * m0.splits["test"].f1 + 10 * m1.splits["test"].f1) / 16)


def test_majority_class_and_mean_std():
    y = torch.tensor([2, 2, 1, 0])
    assert majority_class(y, torch.tensor([True, True, True, False]), 3) == 2
    assert majority_class(y, torch.zeros(4, dtype=torch.bool), 3) is None
    ms = mean_std([{"a": 1.0}, {"a": 3.0}])
    assert ms["a"]["mean"] == 2.0 and ms["a"]["std"] == pytest.approx(np.std([1.0, 3.0]))  # ddof = 0
