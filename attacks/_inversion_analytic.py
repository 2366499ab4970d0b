r"""Gradient inversion, the closed forms: what the update gives away without any optimisation.

* iDLG label counts from the output bias (:func:`recover_label_counts`);
* the first layer's rows :math:`\Delta W_1[h] / \Delta b_1[h]`, exact inputs when repeated
  (:func:`bias_candidates`);
* the feature support (zero columns of :math:`\Delta W_1`) and the row space the dummy features are searched in.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor

from securefgl.attacks._inversion_config import InversionConfig, ModelUpdate, TrainingRecipe
from securefgl.attacks._inversion_model import _first_layer_bias, _first_layer_weights, last_layer_bias
from securefgl.errors import AttackNotApplicableError


def _round_counts(expected: Tensor, n: int) -> Tensor:
    """Non-negative integers summing to ``n`` closest to ``expected`` (largest remainder)."""
    e = expected.clamp(min=0).to(torch.float64)
    if float(e.sum()) <= 0:
        e = torch.ones_like(e)
    e = e * (n / float(e.sum()))
    base = torch.floor(e)
    rest = int(n - base.sum())
    if rest > 0:
        order = torch.argsort(e - base, descending=True)
        base[order[:rest]] += 1
    return base.to(torch.long)


def recover_label_counts(
    update: ModelUpdate,
    model: torch.nn.Module,
    recipe: TrainingRecipe,
    num_classes: int,
    *,
    num_nodes: int,
    mean_prediction: Tensor | None = None,
) -> Tensor:
    """iDLG label counts from the output bias of the update.

    SGD recipes: :math:`\\hat g_b = -\\Delta b / (\\eta E)` and :math:`\\hat n = n(\\bar p - \\hat g_b)`
    (first order in the change of the predictions over the :math:`E` steps). Adam recipes: Adam's
    normalisation keeps little more than the sign of :math:`g_b`, so the present classes are those whose
    bias grew, and the counts are split over them in proportion to :math:`\\bar p_c - \\hat g_{b,c}` with
    :math:`\\hat g_b = -\\Delta b / (\\eta E)` as a (weak) magnitude proxy.

    Args:
        update: The observed update.
        model: The architecture.
        recipe: The training recipe.
        num_classes: ``C``.
        num_nodes: ``n``.
        mean_prediction: :math:`\\bar p` if known (default: uniform :math:`1/C`).

    Returns:
        ``(C,)`` int64 counts summing to ``num_nodes``.
    """
    name = last_layer_bias(model, num_classes)
    db = update.delta[name].detach().to(torch.float64).flatten()
    if db.numel() != num_classes:
        raise AttackNotApplicableError(f"update has no output bias of size {num_classes}")
    p = (
        torch.full((num_classes,), 1.0 / num_classes, dtype=torch.float64)
        if mean_prediction is None
        else mean_prediction.detach().cpu().to(torch.float64).flatten()
    )
    g = -db / (recipe.lr * recipe.epochs)
    if recipe.optimizer == "sgd":
        return _round_counts(num_nodes * (p - g), num_nodes)
    present = db > 0
    if not bool(present.any()):
        present = db >= db.max()
    weight = torch.where(present, (p - g).clamp(min=1e-3), torch.zeros_like(p))
    return _round_counts(weight, num_nodes)


def _support_and_basis(
    update: ModelUpdate,
    firsts: Sequence[str],
    num_features: int,
    rows: int,
    config: InversionConfig,
    recipe: TrainingRecipe,
) -> tuple[Tensor | None, Tensor | None]:
    """The feature support (zero columns of the first-layer update) and a row-space basis."""
    if not firsts:
        return None, None
    w = torch.cat([update.delta[n].detach().to(torch.float64).reshape(-1, num_features) for n in firsts], 0)
    scale = float(w.abs().max())
    if scale == 0.0 or not math.isfinite(scale):
        return None, None
    support = None
    if config.support:
        col = w.abs().amax(0)
        keep = col > scale * 1e-7
        support = keep if 0 < int(keep.sum()) < num_features else None
    basis = None
    if config.subspace and recipe.optimizer == "sgd" and not recipe.weight_decay:
        _, s, vh = torch.linalg.svd(w, full_matrices=False)
        rank = int((s > float(s[0]) * 1e-6).sum())
        # The row space holds every unknown row only if it is at least as large as their number (an MLP
        # with n < hidden: rank n; a single linear layer has rank <= C - 1 and cannot hold n >= C rows).
        if rows <= rank < num_features:
            basis = vh[:rank].to(torch.float32)
    return support, basis


def group_repeated_rows(
    cand: Tensor, *, min_cosine: float, norm_rtol: float, norm_floor: float
) -> tuple[Tensor, Tensor]:
    """Merge candidate rows that are the same input: ``(mean of each group, group sizes)``, in first-seen order.

    Two rows are the same when their cosine exceeds ``min_cosine`` and their norms agree within ``norm_rtol``
    (a repeated exact input has the same scale, not only the same direction).
    """
    unit = F.normalize(cand, dim=1)
    same = (unit @ unit.T) > min_cosine
    norms = cand.norm(dim=1)
    same &= (norms[:, None] - norms[None, :]).abs() <= norm_rtol * norms[:, None].clamp(min=norm_floor)
    taken = torch.zeros(cand.shape[0], dtype=torch.bool)
    reps: list[Tensor] = []
    counts: list[int] = []
    for i in range(cand.shape[0]):
        if taken[i]:
            continue
        group = same[i] & ~taken
        taken |= group
        reps.append(cand[group].mean(0))
        counts.append(int(group.sum()))
    return torch.stack(reps), torch.tensor(counts, dtype=torch.long)


def bias_candidates(
    update: ModelUpdate, model: torch.nn.Module, num_features: int, *, tol: float = 1e-4
) -> tuple[Tensor, Tensor]:
    r"""Rows :math:`\Delta W_1[h] / \Delta b_1[h]` of the first layer and how often each one repeats.

    For a unit :math:`h` of a first layer :math:`W_1 x + b_1` the update is
    :math:`\Delta W_1[h] = -\eta\sum_{t,i} \delta_{i,h,t}\, x_i` and :math:`\Delta b_1[h] =
    -\eta\sum_{t,i}\delta_{i,h,t}` (SGD), so the ratio is a weighted mean of the inputs that reach unit
    :math:`h`, and *exactly* one input when only that input activates the unit (Phong et al. 2017,
    https://eprint.iacr.org/2017/715, for one sample). Several units active on the same single input give the
    same row: a row repeated by at least two units is, up to float error, an exact input. For graph models the
    inputs are what the first layer sees (GCN: :math:`(\hat A X)_i`).

    Returns:
        ``(rows, repeats)``: ``(m, F)`` distinct candidate rows (cosine < 1 - ``tol`` between any two) sorted
        by ``repeats`` (``(m,)``, the number of units giving each), most repeated first.
    """
    rows: list[Tensor] = []
    for w in _first_layer_weights(model, num_features):
        b = _first_layer_bias(model, w)
        if b is None or w not in update.delta or b not in update.delta:
            continue
        dw = update.delta[w].detach().to(torch.float64)
        db = update.delta[b].detach().to(torch.float64)
        if dw.dim() != 2 or db.numel() != dw.shape[0]:
            continue
        big = db.abs() > db.abs().max() * 1e-6
        if bool(big.any()):
            rows.append(dw[big] / db[big, None])
    if not rows:
        return torch.empty(0, num_features), torch.empty(0, dtype=torch.long)
    cand = torch.cat(rows, 0)
    cand = cand[torch.isfinite(cand).all(1) & (cand.abs().sum(1) > 0)]
    if cand.numel() == 0:
        return torch.empty(0, num_features), torch.empty(0, dtype=torch.long)
    reps_t, counts_t = group_repeated_rows(cand, min_cosine=1 - tol, norm_rtol=1e-3, norm_floor=1e-12)
    # A repeated row can still be a mixture: at a fresh model two same-label nodes have nearly equal
    # residuals, so every unit active on exactly that pair gives their midpoint. Drop repeated rows that are
    # the midpoint of two other rows.
    scale = reps_t.norm(dim=1).max().clamp(min=1e-12)
    for i in torch.nonzero(counts_t >= 2).flatten().tolist():
        mirror = 2 * reps_t[i] - reps_t  # 2a - b: the partner c of every b
        mirror[i] = float("inf")
        dist = torch.cdist(mirror, reps_t)
        dist[:, i] = float("inf")
        dist.fill_diagonal_(float("inf"))
        if bool((dist < 1e-3 * scale).any()):
            counts_t[i] = 0
    order = torch.argsort(-counts_t, stable=True)
    return reps_t[order].to(torch.float32), counts_t[order]


def deconvolve_rows(z: Tensor, op: Tensor, targets: Tensor, observed: Tensor, *, cap: float | None) -> Tensor:
    r"""Raw features of the ``targets`` rows from the propagated rows :math:`Z = P X`, for features :math:`X \ge 0`.

    Every node :math:`j` with :math:`P_{ji} > 0` gives :math:`Z_{jf} = \sum_k P_{jk} X_{kf} \ge P_{ji} X_{if}`,
    so :math:`X_{if} \le \min_j Z_{jf} / P_{ji}` over the ``observed`` rows :math:`j` (those whose first-layer
    input the update constrains); the bound is the estimate, capped at ``cap`` (binary features: 1). A
    feature of node :math:`i` survives only if every observed neighbour carries it: the sparse-feature
    (bag-of-words) reading of a neighbourhood sum.

    Args:
        z: ``(N, F)`` propagated rows (of the reconstruction).
        op: ``(N, N)`` operator :math:`P`.
        targets: ``(n,)`` rows to deconvolve.
        observed: ``(N,)`` boolean: rows whose propagated input the update constrains.
        cap: Upper bound of a feature (``None``: none).
    """
    out = []
    zc = z.clamp(min=0)
    for i in targets.tolist():
        js = torch.nonzero((op[:, i] > 0) & observed).flatten()
        if js.numel() == 0:
            out.append(zc[i])
            continue
        est = (zc[js] / op[js, i][:, None]).amin(0)
        out.append(est.clamp(max=cap) if cap is not None else est)
    return torch.stack(out)
