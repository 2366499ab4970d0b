"""Link stealing (Attack-0) and membership inference on a released model."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from securefgl.attacks._common import roc_summary, tpr_at_fpr
from securefgl.attacks.link_stealing import (
    DISTANCES,
    balanced_pairs,
    link_stealing,
    posterior_distance,
    precision_at_k,
)
from securefgl.attacks.membership import membership_inference
from securefgl.data import make_csbm
from securefgl.errors import AttackNotApplicableError, ConfigError


def _gnn_like_posteriors(data, noise: float, seed: int = 0) -> torch.Tensor:
    """Posteriors of a GCN-like smoother: two steps of mean aggregation over one-hot labels plus noise."""
    g = torch.Generator().manual_seed(seed)
    n, c = data.num_nodes, int(data.y.max()) + 1
    h = F.one_hot(data.y, c).double() + noise * torch.randn(n, c, generator=g, dtype=torch.float64)
    ei = data.edge_index
    deg = torch.bincount(ei[0], minlength=n).double() + 1
    for _ in range(2):
        h = (h.index_add(0, ei[0], h[ei[1]])) / deg[:, None]
    return F.softmax(4 * h, -1)


def test_balanced_pairs_and_distances():
    data = make_csbm(num_nodes=200, num_classes=3, avg_degree=5.0, seed=0)
    pairs, y = balanced_pairs(data.edge_index, data.num_nodes, generator=torch.Generator().manual_seed(1))
    m = int(y.sum())
    assert y.numel() == 2 * m and m == data.edge_index.shape[1] // 2
    edges = {(int(a), int(b)) for a, b in data.edge_index.T.tolist()}
    assert all((int(a), int(b)) in edges for a, b in pairs[:, :m].T.tolist())
    assert not any((int(a), int(b)) in edges for a, b in pairs[:, m:].T.tolist())
    p = torch.softmax(torch.randn(4, 3, dtype=torch.float64), -1)
    from scipy.spatial import distance

    for d in DISTANCES:
        ours = posterior_distance(p[:2], p[2:], d)
        ref = [getattr(distance, d)(p[i].numpy(), p[i + 2].numpy()) for i in range(2)]
        assert np.allclose(ours.numpy(), ref, atol=1e-9), d
    with pytest.raises(ConfigError, match="valid"):
        posterior_distance(p, p, "hamming")


def test_link_stealing_beats_chance_on_gnn_posteriors_and_not_on_random_ones():
    data = make_csbm(num_nodes=400, num_classes=4, avg_degree=6.0, homophily=0.8, seed=2)
    pairs, y = balanced_pairs(data.edge_index, data.num_nodes, generator=torch.Generator().manual_seed(0))
    res = link_stealing(_gnn_like_posteriors(data, 0.5), pairs, y, metrics=("correlation", "cosine"))
    assert res["correlation"]["auc"] > 0.75 and res["correlation"]["precision@k"] > 0.7
    noise = torch.softmax(torch.randn(data.num_nodes, 4, generator=torch.Generator().manual_seed(5)), -1)
    rnd = link_stealing(noise, pairs, y)
    assert abs(rnd["correlation"]["auc"] - 0.5) < 0.06
    assert precision_at_k([1, 0, 1, 0], [0.9, 0.8, 0.7, 0.1], 2) == 0.5


def test_membership_inference_on_an_overfit_model():
    g = torch.Generator().manual_seed(0)
    n, c = 400, 4
    labels = torch.randint(0, c, (n,), generator=g)
    members = torch.zeros(n, dtype=torch.bool)
    members[:200] = True
    logits = torch.randn(n, c, generator=g)
    logits[members, labels[members]] += 3.0  # confident on its training nodes
    res = membership_inference(logits, labels, members, ~members)
    assert res["loss"]["auc"] > 0.85 and res["confidence"]["auc"] > 0.7
    assert res["loss"]["tpr@0.01"] >= 0.01
    null = membership_inference(torch.randn(n, c, generator=g), labels, members, ~members)
    assert abs(null["loss"]["auc"] - 0.5) < 0.1
    with pytest.raises(AttackNotApplicableError, match="members and non-members"):
        membership_inference(logits, labels, members, torch.zeros(n, dtype=torch.bool))
    with pytest.raises(ConfigError, match="both"):
        membership_inference(logits, labels, members, members)


def test_roc_helpers():
    y = np.array([0, 0, 1, 1])
    s = np.array([0.1, 0.4, 0.35, 0.8])
    r = roc_summary(y, s)
    assert r["auc"] == pytest.approx(0.75)
    assert tpr_at_fpr(y, s, 0.0) == pytest.approx(0.5)
    with pytest.raises(AttackNotApplicableError, match="positives and negatives"):
        roc_summary(np.ones(3), np.ones(3))
