r"""Gradient inversion, the optimisation loop: dummy features (and labels) whose simulated update matches.

One start (:func:`_optimise`) minimises the cosine (Inverting Gradients) or Euclidean (DLG) distance between the
simulated and the observed update, plus the priors, with L-BFGS or signed Adam; :func:`_search` runs the random
restarts, decides which exact first-layer rows stay fixed, and (iDLG labels) refines the label counts.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from securefgl.attacks._inversion_analytic import recover_label_counts
from securefgl.attacks._inversion_config import InversionConfig, ModelUpdate, TrainingRecipe
from securefgl.attacks._inversion_model import model_forward, simulate_update


def _flat(d: Mapping[str, Tensor], keys: Sequence[str]) -> Tensor:
    return torch.cat([d[k].flatten() for k in keys])


def _prior_penalty(x: Tensor, config: InversionConfig) -> Tensor:
    pen = x.new_zeros(())
    if config.prior in ("nonneg", "binary"):
        pen = pen + F.relu(-x).sum() * 10.0
    if config.prior == "binary":
        pen = pen + F.relu(x - 1.0).sum() * 10.0
    if config.sparsity:
        pen = pen + config.sparsity * x.abs().sum()
    return pen


def _objective(sim: dict[str, Tensor], obs: dict[str, Tensor], keys: Sequence[str], kind: str) -> Tensor:
    a = _flat(sim, keys)
    b = _flat(obs, keys)
    if kind == "cosine":
        return 1.0 - F.cosine_similarity(a, b, dim=0, eps=1e-30)
    return ((a - b) ** 2).sum() / (b.pow(2).sum() + 1e-30)


def _raw_rows(p: _Problem) -> bool:
    """Whether the searched rows are the features themselves, so that the priors apply to them.

    Not so for a graph-known search in the row space: the update pins down only the propagated rows
    :math:`P X`, reached by raw rows in the row space that are no feature vectors (negative entries); the
    priors act on the deconvolution instead, and a penalty here would pull :math:`P X` off its fit.
    """
    return p.basis is None or p.edge_index is None


def _labels_from_counts(counts: Tensor, device: torch.device | None = None) -> Tensor:
    return torch.repeat_interleave(torch.arange(counts.numel()), counts.cpu().long()).to(device or "cpu")


@dataclass(frozen=True, eq=False)
class _Problem:
    """The fixed inputs of one inversion: the simulation, the observed update and the search space.

    Args:
        model: The public architecture (on ``device``).
        base: Broadcast parameters the simulated training starts from.
        obs: The observed update (``float32``, on ``device``).
        keys: Parameter names, in the model's order.
        recipe: The client's training recipe.
        n: Training nodes.
        num_classes: ``C``.
        rows: Unknown feature rows (``n``, or the receptive field when the graph is known).
        num_features: ``F``.
        edge_index: Edges among the unknown rows (``None``: isolated nodes).
        train_rows: Rows of the training nodes among the unknown rows.
        basis: Row-space basis the features are searched in (``None``: the full feature space).
        mask: ``(F,)`` 0/1 feature support (``None``: every feature).
        pool: Candidate rows the free rows start at.
        cfg: Reconstruction settings.
        gen: Seeds the random starts.
        device: Where the simulation runs.
        pad: Rows of zeros appended after the unknown rows (graph known: the hop beyond the receptive
            field, which only sets degrees).
    """

    model: torch.nn.Module
    base: dict[str, Tensor]
    obs: dict[str, Tensor]
    keys: Sequence[str]
    recipe: TrainingRecipe
    n: int
    num_classes: int
    rows: int
    num_features: int
    edge_index: Tensor | None
    train_rows: Tensor
    basis: Tensor | None
    mask: Tensor | None
    pool: Tensor
    cfg: InversionConfig
    gen: torch.Generator
    device: torch.device
    pad: int = 0


class _Restarts:
    """Random restarts of :func:`_optimise`, keeping the best; ``progress(done, total)`` after each."""

    def __init__(self, problem: _Problem, progress: Callable[[int, int], None] | None, total: int) -> None:
        self.problem = problem
        self.progress = progress
        self.total = total
        self.done = 0

    def attempt(self, restarts: int, counts: Tensor | None, anchors: Tensor) -> tuple[float, Tensor, Tensor]:
        p = self.problem
        fixed = (
            None
            if counts is None
            else F.one_hot(_labels_from_counts(counts, p.device), p.num_classes).to(torch.float32)
        )
        best: tuple[float, Tensor | None, Tensor | None] = (math.inf, None, None)
        for _ in range(restarts):
            x, y_soft = _optimise(p, fixed, anchors)
            sim = simulate_update(
                p.model,
                p.base,
                x,
                y_soft,
                p.recipe,
                edge_index=p.edge_index,
                train_index=p.train_rows,
                adam_eps=p.cfg.adam_eps,
                create_graph=False,
            )
            val = float(_objective(sim, p.obs, p.keys, p.cfg.objective).detach())
            if best[1] is None or val < best[0]:
                best = (val, x, y_soft.argmax(-1))
            self.done += 1
            if self.progress is not None:
                self.progress(self.done, self.total)
            if best[0] < p.cfg.exact_tol:  # an exact fit: further restarts cannot do better
                break
        assert best[1] is not None and best[2] is not None
        return best[0], best[1], best[2]


def _search(
    p: _Problem,
    update: ModelUpdate,
    counts: Tensor,
    anchors: Tensor,
    progress: Callable[[int, int], None] | None,
) -> tuple[float, Tensor, Tensor, Tensor, Tensor]:
    """The whole search: which exact rows to fix, then the labels and features.

    Returns:
        ``(objective, x, labels, counts, anchors)``: the best restart's objective, its ``(rows, F)`` features
        and ``(n,)`` labels, the label counts and the exact rows kept fixed.
    """
    cfg = p.cfg
    joint = cfg.labels == "joint"
    quick = max(1, min(2, cfg.restarts))
    passes = cfg.label_passes if (cfg.labels == "idlg" and cfg.refine_labels) else 0
    runs = _Restarts(p, progress, passes * quick + cfg.restarts)

    # A row repeated by several units can still be a mixture (two same-label nodes with equal residuals):
    # if fixing every such row leaves a clearly non-zero objective, try leaving each one out.
    k = int(anchors.shape[0])
    if k:
        fixed_counts = None if joint else counts
        runs.total += quick * (k + 1)
        trials = [(runs.attempt(quick, fixed_counts, anchors)[0], anchors)]
        for j in range(k):
            if min(t[0] for t in trials) < cfg.exact_tol:
                break
            keep = torch.cat([anchors[:j], anchors[j + 1 :]], 0)
            trials.append((runs.attempt(quick, fixed_counts, keep)[0], keep))
        anchors = min(trials, key=lambda t: t[0])[1]
    if joint:
        value, x_full, labels = runs.attempt(cfg.restarts, None, anchors)
        counts = torch.bincount(labels.cpu(), minlength=p.num_classes)
    else:
        # iDLG counts need the mean prediction p-bar; estimate it on quick reconstructions until stable.
        for _ in range(passes):
            _, x, _ = runs.attempt(quick, counts, anchors)
            with torch.no_grad():
                pbar = F.softmax(model_forward(p.model, p.base, x, p.edge_index)[p.train_rows], -1).mean(0)
            new = recover_label_counts(
                update, p.model, p.recipe, p.num_classes, num_nodes=p.n, mean_prediction=pbar
            )
            if torch.equal(new, counts):
                break
            counts = new
        runs.total = runs.done + cfg.restarts
        value, x_full, labels = runs.attempt(cfg.restarts, counts, anchors)
    return value, x_full, labels, counts, anchors


def _optimise(p: _Problem, fixed_labels: Tensor | None, anchors: Tensor) -> tuple[Tensor, Tensor]:
    """One random start: features (and, without ``fixed_labels``, soft labels) minimising the objective.

    Returns ``(x, y_soft)``; with free labels a second run polishes the features with the labels fixed to
    their argmax.
    """
    cfg = p.cfg
    k = int(anchors.shape[0])
    dev = p.obs[p.keys[0]].device
    var = _start(p, p.rows - k, dev).clone().requires_grad_(True)
    fixed_rows = anchors.to(torch.float32)
    lab = (0.01 * torch.randn(p.n, p.num_classes, generator=p.gen)).to(dev).requires_grad_(True)

    def features() -> Tensor:
        x = var @ p.basis if p.basis is not None else var
        if p.mask is not None:
            x = x * p.mask
        parts = ([fixed_rows] if k else []) + [x] + ([x.new_zeros(p.pad, x.shape[1])] if p.pad else [])
        return torch.cat(parts, 0) if len(parts) > 1 else x

    if fixed_labels is not None:
        _fit(p, [var], features, lambda: fixed_labels, cfg.iterations)
        y_soft = fixed_labels
    else:
        _fit(p, [var, lab], features, lambda: F.softmax(lab, -1), cfg.iterations)
        with torch.no_grad():
            y_soft = F.one_hot(lab.argmax(-1), p.num_classes).to(torch.float32)
        _fit(p, [var], features, lambda: y_soft, max(1, cfg.iterations // 2))
    with torch.no_grad():
        x = features().detach()
        if not torch.isfinite(x).all():
            x = torch.nan_to_num(x, nan=0.0, posinf=0.0, neginf=0.0)
        # Graph known with a row-space basis: the raw rows only matter through P X (deconvolved later);
        # clamping them would change that propagation.
        if _raw_rows(p):
            if cfg.prior in ("nonneg", "binary"):
                x = x.clamp(min=0)
            if cfg.prior == "binary":
                x = x.clamp(max=1)
    return x, y_soft


def _start(p: _Problem, free: int, dev: torch.device) -> Tensor:
    """Starting point of the ``free`` rows (in the basis' coordinates when there is one)."""
    dim = p.basis.shape[0] if p.basis is not None else p.num_features
    init = torch.randn(free, dim, generator=p.gen).to(dev)
    if p.basis is None and p.cfg.prior in ("nonneg", "binary"):
        init = init.abs() * 0.5
    if p.pool.shape[0] and free:
        # start the free rows at candidate rows of the first layer (weighted means of true inputs)
        pick = torch.randperm(p.pool.shape[0], generator=p.gen)[:free].to(dev)
        start = p.pool[pick] @ p.basis.T if p.basis is not None else p.pool[pick]
        init[: start.shape[0]] = start
    return init


def _fit(
    p: _Problem,
    params: list[Tensor],
    features: Callable[[], Tensor],
    labels: Callable[[], Tensor],
    iterations: int,
) -> None:
    """Minimise the objective over ``params`` (L-BFGS, or Adam on signed gradients with step decay)."""
    cfg = p.cfg

    def value() -> Tensor:
        x = features()
        y = labels()
        sim = simulate_update(
            p.model,
            p.base,
            x,
            y,
            p.recipe,
            edge_index=p.edge_index,
            train_index=p.train_rows,
            adam_eps=cfg.adam_eps,
        )
        fit = _objective(sim, p.obs, p.keys, cfg.objective)
        return fit + _prior_penalty(x, cfg) / max(1, x.numel()) if _raw_rows(p) else fit

    if cfg.optimizer == "lbfgs":
        opt = torch.optim.LBFGS(
            params,
            lr=1.0,
            max_iter=iterations,
            history_size=50,
            line_search_fn="strong_wolfe",
            tolerance_grad=1e-10,
            tolerance_change=1e-12,
        )

        def closure() -> Tensor:
            opt.zero_grad()
            loss = value()
            loss.backward()
            return loss

        with contextlib.suppress(RuntimeError):  # a line search that hit NaN: keep the last finite point
            opt.step(closure)
        return
    opt2 = torch.optim.Adam(params, lr=cfg.step)
    marks = [int(iterations * f) for f in (0.375, 0.625, 0.875)]
    sched = torch.optim.lr_scheduler.MultiStepLR(opt2, marks, 0.1)
    for _ in range(iterations):
        opt2.zero_grad()
        loss = value()
        loss.backward()
        for q in params:
            if q.grad is not None:
                q.grad.sign_()
        opt2.step()
        sched.step()
