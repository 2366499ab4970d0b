"""Shared pieces of the attack modules: result records, ROC metrics, matching, trial statistics.

Internal: the public names are re-exported by the attack modules and :mod:`securefgl.attacks`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
import torch
from scipy.optimize import linear_sum_assignment

from securefgl.errors import AttackNotApplicableError, ConfigError, NothingToAttackError

__all__ = [
    "AttackOutcome",
    "Metric",
    "NothingToAttackError",
    "hungarian_match",
    "mean_std",
    "roc_summary",
    "tpr_at_fpr",
]


@dataclass(frozen=True)
class Metric:
    """A figure over trials, with the baselines it must be read against.

    Args:
        mean: Mean over trials.
        std: Population standard deviation over trials.
        trials: Number of trials.
        baselines: Name -> value of the reference figures (``"chance"``, ``"public"``: the same attack on
            information the adversary is entitled to, e.g. the released sum).
        higher_is_worse: Whether a higher value means more leakage (``True`` for AUC, accuracy, cosine).
    """

    mean: float
    std: float
    trials: int
    baselines: dict[str, float] = field(default_factory=dict)
    higher_is_worse: bool = True

    def to_dict(self) -> dict[str, Any]:
        return {
            "mean": _finite(self.mean),
            "std": _finite(self.std),
            "trials": self.trials,
            "baselines": {k: _finite(v) for k, v in self.baselines.items()},
            "higher_is_worse": self.higher_is_worse,
        }


def _finite(v: float) -> float | None:
    return float(v) if v is not None and math.isfinite(float(v)) else None


Status = Literal["ok", "not_applicable", "nothing_to_attack", "refused", "failed"]


@dataclass
class AttackOutcome:
    """One attack on one adversary view under one protocol.

    Args:
        attack: Attack name (``"gradient-inversion"``, ``"label"``, ``"link-stealing"``, ...).
        protocol: Protocol the run used.
        view: Adversary kind (``"server"``, ``"client"``, ``"collusion"``); ``details["view"]`` names the
            parties (``"client:3"``, ``"server+clients[1, 2]"``).
        status: ``"ok"``; ``"not_applicable"`` (refused before running, see ``reason``);
            ``"nothing_to_attack"`` (the view holds nothing usable); ``"refused"`` (a protocol defence
            refused the adversary's request, e.g. an inconsistent view was caught); ``"failed"``.
        reason: Why the attack did not run (or what stopped it).
        metrics: Metric name -> :class:`Metric`.
        details: JSON-friendly extra information (per-trial values, parameters, targets).
        seconds: Wall time of the attack.
    """

    attack: str
    protocol: str
    view: str
    status: Status = "ok"
    reason: str = ""
    metrics: dict[str, Metric] = field(default_factory=dict)
    details: dict[str, Any] = field(default_factory=dict)
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "attack": self.attack,
            "protocol": self.protocol,
            "view": self.view,
            "status": self.status,
            "reason": self.reason,
            "metrics": {k: m.to_dict() for k, m in self.metrics.items()},
            "details": _jsonable(self.details),
            "seconds": self.seconds,
        }


def _jsonable(obj: Any) -> Any:
    if isinstance(obj, Mapping):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    if isinstance(obj, torch.Tensor):
        return _jsonable(obj.detach().cpu().tolist())
    if isinstance(obj, np.ndarray):
        return _jsonable(obj.tolist())
    if isinstance(obj, (np.floating, float)):
        return _finite(float(obj))
    if isinstance(obj, (np.integer,)):
        return int(obj)
    if isinstance(obj, (bytes, bytearray)):
        return bytes(obj).hex()
    return obj


def mean_std(values: Sequence[float]) -> tuple[float, float]:
    """Mean and population standard deviation (NaN, NaN for no values)."""
    arr = np.asarray([float(v) for v in values], dtype=np.float64)
    if arr.size == 0:
        return float("nan"), float("nan")
    return float(arr.mean()), float(arr.std())


def metric(
    values: Sequence[float], baselines: Mapping[str, float] | None = None, *, higher_is_worse: bool = True
) -> Metric:
    """A :class:`Metric` from per-trial values."""
    m, s = mean_std(values)
    return Metric(m, s, len(values), dict(baselines or {}), higher_is_worse)


def _check_scores(labels: Any, scores: Any) -> tuple[np.ndarray, np.ndarray]:
    y = np.asarray(labels, dtype=np.int64).ravel()
    s = np.asarray(scores, dtype=np.float64).ravel()
    if y.shape != s.shape:
        raise ConfigError(f"labels and scores differ in length: {y.shape[0]} vs {s.shape[0]}")
    if not np.isin(y, (0, 1)).all():
        raise ConfigError("labels must be 0/1")
    if y.sum() == 0 or y.sum() == y.size:
        raise AttackNotApplicableError(
            f"an ROC curve needs both positives and negatives; got {int(y.sum())} positives of {y.size}"
        )
    if not np.isfinite(s).all():
        raise ConfigError("scores must be finite")
    return y, s


def tpr_at_fpr(labels: Any, scores: Any, fpr: float) -> float:
    """True-positive rate at false-positive rate at most ``fpr`` (the ROC step function, no interpolation).

    Args:
        labels: 0/1 ground truth (1: member/edge).
        scores: Attack scores, higher meaning "more likely 1".
        fpr: The false-positive budget in (0, 1).
    """
    from sklearn.metrics import roc_curve

    y, s = _check_scores(labels, scores)
    f, t, _ = roc_curve(y, s)
    ok = f <= fpr + 1e-12
    return float(t[ok].max()) if ok.any() else 0.0


def roc_summary(labels: Any, scores: Any, fprs: Iterable[float] = (0.01, 0.001)) -> dict[str, Any]:
    """AUC, TPR at the given FPRs and the ROC curve (``fpr``, ``tpr`` lists, at most 200 points).

    Shapes:
        labels, scores: ``(M,)``.
    """
    from sklearn.metrics import roc_auc_score, roc_curve

    y, s = _check_scores(labels, scores)
    f, t, _ = roc_curve(y, s)
    if f.size > 200:
        idx = np.unique(np.linspace(0, f.size - 1, 200).round().astype(int))
        f, t = f[idx], t[idx]
    out: dict[str, Any] = {"auc": float(roc_auc_score(y, s)), "fpr": f.tolist(), "tpr": t.tolist()}
    for p in fprs:
        out[f"tpr@{p:g}"] = tpr_at_fpr(y, s, p)
    return out


def hungarian_match(cost: torch.Tensor | np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Optimal assignment minimising ``cost`` (rows: reconstructed items, columns: true items).

    Returns:
        ``(rows, cols)``: matched index pairs (``min(R, T)`` of them), as from
        :func:`scipy.optimize.linear_sum_assignment`.
    """
    c = cost.detach().cpu().numpy() if isinstance(cost, torch.Tensor) else np.asarray(cost)
    if c.ndim != 2 or c.size == 0:
        raise ConfigError(f"hungarian_match needs a non-empty 2-D cost matrix, got shape {c.shape}")
    if not np.isfinite(c).all():
        c = np.nan_to_num(c, nan=1e9, posinf=1e9, neginf=-1e9)
    r, k = linear_sum_assignment(c)
    return r, k
