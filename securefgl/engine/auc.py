r"""ROC AUC of a binary task from per-bin counts, the form in which it goes through a secure sum.

Each client counts its positive and negative nodes per bin of the class-1 logit margin
:math:`m = \ell_1 - \ell_0` (:func:`score_histograms`); counts add over clients exactly, and the pooled ROC AUC
is read from the summed histograms (:func:`auc_from_histograms`). The AUC is a rank statistic, so any increasing
map of the scores gives the same value; the bins are equal in :math:`\operatorname{asinh}(m)` over
:math:`|m| \le` :data:`AUC_MARGIN_RANGE`: about 0.002 wide at the decision boundary and 0.02 at :math:`|m| = 10`,
where a confident model's scores sit (bins of the probability would put every score of a model that is sure of
the majority class, :math:`p_1 < 10^{-3}`, in one bin). It differs from the exact rank AUC only by ties inside a
bin. Client side (counting) and server side (reading) share this module; it imports neither.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

__all__ = ["AUC_BINS", "AUC_MARGIN_RANGE", "auc_bin", "auc_from_histograms", "score_histograms"]

#: Bins of the class-1 logit margin in the ROC AUC histograms of binary tasks.
AUC_BINS = 4096
#: Margins beyond this magnitude share the outermost bins.
AUC_MARGIN_RANGE = 64.0


def auc_from_histograms(pos: Tensor, neg: Tensor) -> float:
    r"""ROC AUC from per-bin counts: :math:`\sum_b p_b (\sum_{b'<b} n_{b'} + n_b / 2) / (PN)`, NaN without
    both classes (a pair in one bin is a tie, as the rank AUC counts equal scores)."""
    p, n = pos.double().reshape(-1), neg.double().reshape(-1)
    total_p, total_n = float(p.sum()), float(n.sum())
    if total_p <= 0 or total_n <= 0:
        return float("nan")
    below = torch.cumsum(n, 0) - n
    return float((p * (below + 0.5 * n)).sum()) / (total_p * total_n)


def auc_bin(margin: Tensor, bins: int = AUC_BINS) -> Tensor:
    """The histogram bin of each class-1 logit margin: equal bins of ``asinh(margin)``, an increasing map."""
    top = math.asinh(AUC_MARGIN_RANGE)
    u = (torch.asinh(margin.double().clamp(-AUC_MARGIN_RANGE, AUC_MARGIN_RANGE)) / top + 1.0) / 2.0
    return (u * bins).long().clamp(0, bins - 1)


def score_histograms(margin: Tensor, target: Tensor, bins: int = AUC_BINS) -> tuple[Tensor, Tensor]:
    """``(positives, negatives)``: int64 counts of class-1 and other nodes per bin of the class-1 logit margin
    (:func:`auc_bin`)."""
    idx = auc_bin(margin, bins).cpu()
    y = target.cpu()
    pos = torch.bincount(idx[y == 1], minlength=bins)
    neg = torch.bincount(idx[y != 1], minlength=bins)
    return pos, neg
