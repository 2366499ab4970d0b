r"""Evaluation metrics with the aggregation rules of the specs.

Per client ``k`` (on its own val or test nodes): accuracy, macro-F1 over **all** ``C`` global classes
(sklearn ``f1_score(average="macro", labels=range(C))``: a class neither present nor predicted scores 0),
cross-entropy, and the minority-class accuracy of FedSpray (test nodes whose label is not the client's
majority training class). Over clients (``shared/specs/opfgl.md`` §2.11 and §5):

.. math::
    \mathrm{acc} = \frac{\sum_k N_k\,\mathrm{acc}_k}{\sum_k N_k},\qquad
    \mathrm{F1} = \frac{\sum_k N_k\,\mathrm{F1}_k}{\sum_k N_k}

weighted by each client's total node count ``N_k``; ``acc_pooled`` (every test node counted once, the
micro average FedSpray reports), ``loss`` (pooled cross-entropy) and ``minority_acc`` (pooled over minority
nodes) are reported beside them. Across seeds: mean and population standard deviation (``ddof=0``).

Binary tasks (two classes: Tolokers, Minesweeper, Questions, whose standard metric is ROC AUC, Platonov et al.
2023) also get ``auc``: each client counts its positive and negative nodes per bin of the class-1 logit margin
(:mod:`securefgl.engine.auc`), the counts add over clients, and the pooled ROC AUC is read from the summed
histograms (:func:`~securefgl.engine.auc.auc_from_histograms`; two nodes in one bin count as a tie). Counts add
exactly, so the pooled AUC is the same under every protocol; it differs from the exact rank AUC only by ties
inside a bin.

These are the experimenter's measurements of the simulated clients; no server step ever sees them.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from securefgl.engine.auc import auc_from_histograms, score_histograms

__all__ = [
    "ClientMetrics",
    "SplitMetrics",
    "aggregate_clients",
    "client_metrics",
    "macro_f1",
    "majority_class",
    "mean_std",
]


def macro_f1(pred: Tensor, target: Tensor, num_classes: int) -> float:
    """Macro-F1 over ``range(num_classes)``; a class with no true and no predicted node scores 0."""
    if target.numel() == 0:
        return float("nan")
    c = num_classes
    idx = target * c + pred
    conf = torch.bincount(idx, minlength=c * c).reshape(c, c).double()
    tp = conf.diagonal()
    fp = conf.sum(0) - tp
    fn = conf.sum(1) - tp
    denom = 2 * tp + fp + fn
    f1 = torch.where(denom > 0, 2 * tp / denom.clamp(min=1), torch.zeros_like(tp))
    return float(f1.mean())


def majority_class(y: Tensor, train_mask: Tensor, num_classes: int) -> int | None:
    """Argmax of the client's training label histogram (lowest class on ties); ``None`` without train nodes."""
    ys = y[train_mask]
    if ys.numel() == 0:
        return None
    return int(torch.bincount(ys, minlength=num_classes).argmax())


@dataclass
class SplitMetrics:
    """One client's metrics on one split (``val`` or ``test``)."""

    n: int
    correct: int
    acc: float
    f1: float
    loss_sum: float
    minority_n: int = 0
    minority_correct: int = 0
    #: Binary tasks: counts of positive / negative nodes per bin of the class-1 logit margin (else ``None``).
    auc_pos: Tensor | None = None
    auc_neg: Tensor | None = None

    @property
    def auc(self) -> float:
        """ROC AUC on this split from the histograms (NaN when not a binary task or one class is absent)."""
        if self.auc_pos is None or self.auc_neg is None:
            return float("nan")
        return auc_from_histograms(self.auc_pos, self.auc_neg)

    @property
    def loss(self) -> float:
        return self.loss_sum / self.n if self.n else float("nan")

    @property
    def minority_acc(self) -> float:
        return self.minority_correct / self.minority_n if self.minority_n else float("nan")


@dataclass
class ClientMetrics:
    """One client's metrics: node count and per-split results."""

    client: int
    num_nodes: int
    splits: dict[str, SplitMetrics] = field(default_factory=dict)

    def row(self) -> dict[str, Any]:
        out: dict[str, Any] = {"client": self.client, "num_nodes": self.num_nodes}
        for name, s in self.splits.items():
            out[f"{name}_n"] = s.n
            out[f"{name}_acc"] = s.acc
            out[f"{name}_f1"] = s.f1
            out[f"{name}_loss"] = s.loss
            if s.auc_pos is not None:
                out[f"{name}_auc"] = s.auc
            if name == "test":
                out["test_minority_n"] = s.minority_n
                out["test_minority_acc"] = s.minority_acc
        return out


def client_metrics(
    client_id: int, logits: Tensor, data: Any, num_classes: int, splits: Sequence[str] = ("val", "test")
) -> ClientMetrics:
    """Metrics of one client from its class scores on all its nodes.

    Args:
        client_id: The client's id.
        logits: ``(N_k, C)`` class scores.
        data: The client's graph with ``y`` and ``<split>_mask`` (and ``train_mask`` for the majority class).
        num_classes: ``C`` (global).
        splits: Which masks to evaluate.
    """
    logits = logits.detach()
    y = data.y.to(logits.device)
    pred = logits.argmax(dim=-1)
    majority = majority_class(y, data.train_mask.to(logits.device), num_classes)
    out = ClientMetrics(client_id, int(data.num_nodes))
    for split in splits:
        mask = getattr(data, f"{split}_mask").to(logits.device)
        ys, ps = y[mask], pred[mask]
        n = int(mask.sum())
        correct = int((ys == ps).sum())
        loss_sum = float(F.cross_entropy(logits[mask].float(), ys, reduction="sum")) if n else 0.0
        sm = SplitMetrics(
            n=n,
            correct=correct,
            acc=correct / n if n else float("nan"),
            f1=macro_f1(ps, ys, num_classes),
            loss_sum=loss_sum,
        )
        if num_classes == 2:
            scores = logits[mask].double()
            sm.auc_pos, sm.auc_neg = score_histograms(scores[:, 1] - scores[:, 0], ys)
        if majority is not None:
            minority = ys != majority
            sm.minority_n = int(minority.sum())
            sm.minority_correct = int((ps[minority] == ys[minority]).sum())
        out.splits[split] = sm
    return out


def _weighted(values: Sequence[float], weights: Sequence[float]) -> float:
    pairs = [(v, w) for v, w in zip(values, weights, strict=True) if not math.isnan(v)]
    total = sum(w for _, w in pairs)
    return sum(v * w for v, w in pairs) / total if total else float("nan")


def aggregate_clients(per_client: Sequence[ClientMetrics]) -> dict[str, float]:
    """Overall metrics over clients (see the module docstring for the rules).

    Returns:
        ``{"<split>_acc", "<split>_f1", "<split>_acc_pooled", "<split>_loss", "test_minority_acc"}``, and
        ``"<split>_auc"`` (pooled ROC AUC) on binary tasks.
        A client without nodes in a split is left out of that split's weighted average.
    """
    out: dict[str, float] = {}
    if not per_client:
        return out
    for split in per_client[0].splits:
        ms = [c.splits[split] for c in per_client]
        weights = [c.num_nodes for c in per_client]
        out[f"{split}_acc"] = _weighted([m.acc for m in ms], weights)
        out[f"{split}_f1"] = _weighted([m.f1 for m in ms], weights)
        n = sum(m.n for m in ms)
        out[f"{split}_acc_pooled"] = sum(m.correct for m in ms) / n if n else float("nan")
        out[f"{split}_loss"] = sum(m.loss_sum for m in ms) / n if n else float("nan")
        if all(m.auc_pos is not None and m.auc_neg is not None for m in ms):
            out[f"{split}_auc"] = auc_from_histograms(
                sum(m.auc_pos for m in ms),  # type: ignore[misc]
                sum(m.auc_neg for m in ms),  # type: ignore[misc]
            )
        if split == "test":
            mn = sum(m.minority_n for m in ms)
            out["test_minority_acc"] = sum(m.minority_correct for m in ms) / mn if mn else float("nan")
    return out


def mean_std(values: Sequence[Mapping[str, float]]) -> dict[str, dict[str, float]]:
    """``{metric: {"mean", "std"}}`` over runs (population std, ``ddof=0``, as the specs report)."""
    keys = [k for k in values[0] if isinstance(values[0][k], int | float)] if values else []
    out = {}
    for k in keys:
        arr = np.array([float(v[k]) for v in values], dtype=np.float64)
        out[k] = {"mean": float(np.mean(arr)), "std": float(np.std(arr))}
    return out
