"""ROC AUC of binary tasks through secure sums: per-bin counts add exactly, the pooled AUC is read from them,
and the server selects the best round by validation AUC."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.metrics import roc_auc_score
from torch_geometric.data import Data

from securefgl.engine.auc import AUC_BINS, auc_bin, auc_from_histograms, score_histograms
from securefgl.engine.evaluation import (
    RoundSelector,
    evaluation_contribution,
    evaluation_schema,
    metrics_from_sums,
    selection_metric,
    selection_tolerance,
)
from securefgl.engine.metrics import aggregate_clients, client_metrics
from securefgl.protocols.registry import get_protocol


def _binary_clients(seed: int = 0):
    """Three clients of an imbalanced binary task (about 20 % positives), with informative scores."""
    g = torch.Generator().manual_seed(seed)
    per_client, scores, labels = [], {"val": [], "test": []}, {"val": [], "test": []}
    for k, n in enumerate((300, 150, 80)):
        y = (torch.rand(n, generator=g) < 0.2).long()
        logits = torch.randn(n, 2, generator=g)
        logits[:, 1] += 1.5 * y  # positives score higher on average
        masks = torch.rand(3, n, generator=g)
        data = Data(
            y=y, train_mask=masks[0] < 0.4, val_mask=masks[1] < 0.3, test_mask=masks[2] < 0.3, num_nodes=n
        )
        per_client.append(client_metrics(k, logits, data, 2))
        p1 = logits.softmax(-1)[:, 1]
        for s in ("val", "test"):
            mask = getattr(data, f"{s}_mask")
            scores[s].append(p1[mask])
            labels[s].append(y[mask])
    return per_client, {s: (torch.cat(scores[s]), torch.cat(labels[s])) for s in scores}


@given(
    st.lists(st.floats(-100.0, 100.0, allow_nan=False), min_size=2, max_size=200),
    st.randoms(use_true_random=False),
)
@settings(max_examples=60, deadline=None)
def test_the_histogram_auc_is_the_rank_auc_of_the_binned_margins(values, rnd) -> None:
    margins = torch.tensor(values, dtype=torch.float64)
    y = torch.tensor([rnd.random() < 0.5 for _ in values], dtype=torch.long)
    if y.min() == y.max():
        y[0] = 1 - y[0]
    pos, neg = score_histograms(margins, y)
    assert int(pos.sum()) == int(y.sum()) and int(neg.sum()) == len(values) - int(y.sum())
    binned = auc_bin(margins)  # ties inside a bin are ties of the rank AUC
    assert auc_from_histograms(pos, neg) == pytest.approx(roc_auc_score(y.numpy(), binned.numpy()), abs=1e-12)


def test_bins_keep_the_order_of_a_confident_models_scores() -> None:
    """A model sure of the majority class (class-1 probabilities all under 1e-3, margins -16 to -7) still gets
    its ranking measured: its scores spread over hundreds of bins, and the AUC is the exact one to 1e-3."""
    g = torch.Generator().manual_seed(3)
    y = (torch.rand(4000, generator=g) < 0.2).long()
    margins = -12.0 + 1.5 * torch.randn(4000, generator=g).double() + 0.8 * y
    assert float(torch.sigmoid(margins).max()) < 1e-2
    pos, neg = score_histograms(margins, y)
    assert int(((pos + neg) > 0).sum()) > 300
    exact = roc_auc_score(y.numpy(), margins.numpy())
    assert auc_from_histograms(pos, neg) == pytest.approx(exact, abs=1e-3)
    assert torch.equal(
        auc_bin(torch.tensor([-1e9, 0.0, 1e9])), torch.tensor([0, AUC_BINS // 2, AUC_BINS - 1])
    )


def test_one_class_only_has_no_auc() -> None:
    pos, neg = score_histograms(torch.tensor([-1.0, 2.0]), torch.tensor([1, 1]))
    assert auc_from_histograms(pos, neg) != auc_from_histograms(pos, neg)  # NaN


@pytest.mark.parametrize("protocol", ["plaintext", "secagg", "ckks"])
def test_the_pooled_auc_from_the_sums_is_the_pooled_clients_auc(protocol: str) -> None:
    per_client, pooled = _binary_clients()
    schema = evaluation_schema(count_bound=400, max_clients=3, num_classes=2)
    assert schema is not None and "val.auc_pos" in {b.name for b in schema.blocks}
    contribs = {m.client: evaluation_contribution(m) for m in per_client}
    sums, _ = get_protocol(protocol).aggregate(schema, contribs)
    overall = metrics_from_sums(sums)
    expected = aggregate_clients(per_client)
    for s in ("val", "test"):
        assert overall[f"{s}_auc"] == expected[f"{s}_auc"]  # counts: exact under every protocol
        scores, y = pooled[s]
        # within the ties that the bins make of these scores, the exact pooled rank AUC
        assert overall[f"{s}_auc"] == pytest.approx(roc_auc_score(y.numpy(), scores.numpy()), abs=2e-3)
        assert 0.7 < overall[f"{s}_auc"] < 0.95
    assert selection_metric(overall) == "val_auc"
    assert selection_tolerance(sums, schema, metric="val_auc") == 0.0


def test_multiclass_tasks_carry_no_auc_and_select_by_accuracy() -> None:
    schema = evaluation_schema(count_bound=400, max_clients=3, num_classes=4)
    assert not any(b.name.endswith(("auc_pos", "auc_neg")) for b in schema.blocks)
    g = torch.Generator().manual_seed(1)
    y = torch.randint(0, 4, (50,), generator=g)
    ones = torch.ones(50, dtype=torch.bool)
    m = client_metrics(
        0,
        torch.randn(50, 4, generator=g),
        Data(y=y, train_mask=ones, val_mask=ones, test_mask=ones, num_nodes=50),
        4,
    )
    assert m.splits["val"].auc_pos is None and "val_auc" not in m.row()
    overall = metrics_from_sums(
        get_protocol("plaintext").aggregate(schema, {0: evaluation_contribution(m)})[0]
    )
    assert "val_auc" not in overall and selection_metric(overall) == "val_acc"


def test_selection_by_auc_keeps_the_best_validation_auc() -> None:
    sel = RoundSelector()
    assert sel.observe(0.61) and not sel.observe(0.60) and sel.observe(0.64) and not sel.observe(0.64)
    assert sel.best_value == 0.64
