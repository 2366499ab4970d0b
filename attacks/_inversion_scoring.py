"""Gradient inversion, scoring: reconstructed vs true training nodes after optimal matching."""

from __future__ import annotations

from collections.abc import Mapping

import torch
import torch.nn.functional as F
from torch import Tensor

from securefgl.attacks._common import hungarian_match


def label_accuracy(pred_counts: Tensor, true_labels: Tensor, num_classes: int) -> float:
    """Multiset overlap of recovered and true labels: :math:`\\sum_c \\min(\\hat n_c, n_c) / n`."""
    true = torch.bincount(true_labels.cpu().long(), minlength=num_classes)
    pc = pred_counts.cpu().long()
    return float(torch.minimum(pc, true).sum()) / max(1, int(true.sum()))


def _binarize(x: Tensor) -> Tensor:
    peak = x.amax(dim=1, keepdim=True)
    return (x > 0.5 * peak) & (peak > 0)


def score_reconstruction(
    x_hat: Tensor,
    y_hat: Tensor,
    x_true: Tensor,
    y_true: Tensor,
    *,
    num_classes: int,
    binary: bool | None = None,
    extra_targets: Mapping[str, Tensor] | None = None,
) -> dict[str, float]:
    """Match reconstructed to true nodes (Hungarian, on feature cosine) and score.

    Args:
        x_hat: ``(n', F)`` reconstructed features.
        y_hat: ``(n',)`` recovered labels (row-aligned with ``x_hat``).
        x_true: ``(n, F)`` true features of the training nodes.
        y_true: ``(n,)`` true labels.
        num_classes: ``C``.
        binary: Whether features are binary (default: inferred from ``x_true``).
        extra_targets: Other ``(n, F)`` targets to report the matched cosine against (e.g.
            ``"propagated"``: SGC's :math:`(S^K X)_{train}`), matched independently.

    Returns:
        ``label_accuracy`` (after matching), ``label_multiset_accuracy``, ``feature_cosine``, ``mse``,
        ``feature_f1`` (binary features only) and ``<name>_cosine`` per extra target.
    """
    xh = x_hat.detach().to(torch.float64).cpu()
    xt = x_true.detach().to(torch.float64).cpu()
    cos = F.normalize(xh, dim=1, eps=1e-30) @ F.normalize(xt, dim=1, eps=1e-30).T
    r, c = hungarian_match(-cos)
    out: dict[str, float] = {
        "feature_cosine": float(cos[r, c].mean()),
        "mse": float(((xh[r] - xt[c]) ** 2).mean()),
        "label_accuracy": float((y_hat.cpu()[r] == y_true.cpu()[c]).double().mean()),
        "label_multiset_accuracy": label_accuracy(
            torch.bincount(y_hat.cpu().long(), minlength=num_classes), y_true, num_classes
        ),
    }
    is_binary = bool(((xt == 0) | (xt == 1)).all()) if binary is None else binary
    if is_binary:
        pred = _binarize(xh[r])
        true = xt[c] > 0.5
        tp = float((pred & true).sum())
        fp = float((pred & ~true).sum())
        fn = float((~pred & true).sum())
        out["feature_f1"] = 2 * tp / max(1e-12, 2 * tp + fp + fn)
    for name, target in (extra_targets or {}).items():
        tt = target.detach().to(torch.float64).cpu()
        cc = F.normalize(xh, dim=1, eps=1e-30) @ F.normalize(tt, dim=1, eps=1e-30).T
        r2, c2 = hungarian_match(-cc)
        out[f"{name}_cosine"] = float(cc[r2, c2].mean())
    return out
