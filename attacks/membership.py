r"""Node-level membership inference on a released model: loss and confidence thresholds.

The threshold attacks of Yeom, Giacomelli, Fredrikson and Jha ("Privacy Risk in Machine Learning: Analyzing
the Connection to Overfitting", CSF 2018, https://arxiv.org/abs/1709.01604) and Salem et al. (ML-Leaks, NDSS
2019, https://arxiv.org/abs/1806.01246), evaluated the way Carlini et al. ask ("Membership Inference Attacks
From First Principles", S&P 2022, https://arxiv.org/abs/2112.03570): the whole ROC curve, and the true-positive
rate at low false-positive rates (1% and 0.1%), not only the AUC. For node classification the members are the
training nodes of every client and the non-members held-out nodes of the same graphs; the released model is
queried on each client's graph, as deployed:

.. math::
    s_{\text{loss}}(v) = -\ell\big(f(v), y_v\big), \qquad
    s_{\text{conf}}(v) = \max_c f(v)_c,

a higher score meaning "member". Chance: AUC 0.5 and TPR equal to the FPR.

Shapes:
    logits ``(N, C)``; labels ``(N,)``; member mask ``(N,)``.
"""

from __future__ import annotations

from typing import Any, Literal

import torch
import torch.nn.functional as F
from torch import Tensor

from securefgl.attacks._common import roc_summary
from securefgl.errors import AttackNotApplicableError, ConfigError

__all__ = ["SCORES", "membership_inference", "membership_scores"]

SCORES = ("loss", "confidence")


def membership_scores(
    logits: Tensor, labels: Tensor, score: Literal["loss", "confidence"] = "loss"
) -> Tensor:
    """Per-node membership score (higher: more likely a training node).

    Raises:
        ConfigError: unknown score.
    """
    z = logits.detach().to(torch.float64).cpu()
    if score == "loss":
        return -F.cross_entropy(z, labels.cpu().long(), reduction="none")
    if score == "confidence":
        return F.softmax(z, -1).amax(-1)
    raise ConfigError(f"unknown membership score {score!r}; valid: {', '.join(SCORES)}")


def membership_inference(
    logits: Tensor,
    labels: Tensor,
    members: Tensor,
    non_members: Tensor,
    *,
    scores: tuple[str, ...] = SCORES,
) -> dict[str, Any]:
    """Threshold attacks: ROC over members vs non-members for each score.

    Args:
        logits: ``(N, C)`` the released model's outputs.
        labels: ``(N,)`` true labels (the loss attack assumes the adversary knows the node's label, as in the
            literature).
        members: ``(N,)`` bool, training nodes.
        non_members: ``(N,)`` bool, nodes never trained on.

    Returns:
        ``{score: {"auc", "tpr@0.01", "tpr@0.001", "fpr", "tpr"}}`` and ``"members"``/``"non_members"``
        counts.
    """
    m = members.cpu().bool()
    nm = non_members.cpu().bool()
    if bool((m & nm).any()):
        raise ConfigError("a node cannot be both a member and a non-member")
    if int(m.sum()) == 0 or int(nm.sum()) == 0:
        raise AttackNotApplicableError(
            f"membership inference needs members and non-members; got {int(m.sum())} and {int(nm.sum())}"
        )
    z = logits.detach()
    if not torch.isfinite(z).all():
        raise AttackNotApplicableError("the released model's outputs hold non-finite values")
    sel = m | nm
    y = m[sel].long().numpy()
    out: dict[str, Any] = {"members": int(m.sum()), "non_members": int(nm.sum())}
    for s in scores:
        sc = membership_scores(z, labels, s)[sel].numpy()  # type: ignore[arg-type]
        out[s] = roc_summary(y, sc, fprs=(0.01, 0.001))
    return out
