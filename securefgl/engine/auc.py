"""ROC AUC of a binary task from per-bin counts, the form in which it goes through a secure sum.

Each client counts its positive and negative nodes per bin of the class-1 probability
(:func:`score_histograms`); counts add over clients exactly, and the pooled ROC AUC is read from the summed
histograms (:func:`auc_from_histograms`). It differs from the exact rank AUC only by ties inside a bin.
Client side (counting) and server side (reading) share this module; it imports neither.
"""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["AUC_BINS", "auc_from_histograms", "score_histograms"]

#: Bins of the class-1 probability in the ROC AUC histograms of binary tasks.
AUC_BINS = 1024


def auc_from_histograms(pos: Tensor, neg: Tensor) -> float:
    r"""ROC AUC from per-bin counts: :math:`\sum_b p_b (\sum_{b'<b} n_{b'} + n_b / 2) / (PN)`, NaN without
    both classes (a pair in one bin is a tie, as the rank AUC counts equal scores)."""
    p, n = pos.double().reshape(-1), neg.double().reshape(-1)
    total_p, total_n = float(p.sum()), float(n.sum())
    if total_p <= 0 or total_n <= 0:
        return float("nan")
    below = torch.cumsum(n, 0) - n
    return float((p * (below + 0.5 * n)).sum()) / (total_p * total_n)


def score_histograms(scores: Tensor, target: Tensor, bins: int = AUC_BINS) -> tuple[Tensor, Tensor]:
    """``(positives, negatives)``: int64 counts of class-1 and class-0 nodes per bin of ``scores`` in [0, 1]."""
    idx = (scores.double().clamp(0.0, 1.0) * bins).long().clamp(max=bins - 1).cpu()
    y = target.cpu()
    pos = torch.bincount(idx[y == 1], minlength=bins)
    neg = torch.bincount(idx[y != 1], minlength=bins)
    return pos, neg
