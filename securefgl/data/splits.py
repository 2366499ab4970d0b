r"""Train/validation/test splits of nodes: stratified per class with caller ratios, or a public split.

The rule (O-pFGL's and AdaFGL's code, FedSpray's ratios): inside each group (a class when stratified, all
nodes otherwise) the nodes are shuffled with the given generator and

.. math::
    n_{tr} = \lfloor r_{tr} n_g \rfloor, \quad n_{va} = \lfloor r_{va} n_g \rfloor, \quad
    n_{te} = n_g - n_{tr} - n_{va} \text{ if } r_{tr} + r_{va} + r_{te} = 1 \text{ else }
    \lfloor r_{te} n_g \rfloor

so a rare class may get no training node (floor rounding), exactly as in the specs. Fully vectorised.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence

import numpy as np
import torch

from securefgl.errors import ConfigError

__all__ = ["check_split", "split_masks", "SPLIT_TOLERANCE"]

SPLIT_TOLERANCE = 1e-9


def check_split(split: object, *, key: str = "split") -> tuple[float, float, float] | str:
    """Validate a split spec: ``"public"`` or three ratios in [0, 1] that sum to at most 1.

    Returns:
        ``"public"`` or the ratios as a tuple of floats.

    Raises:
        ConfigError: Anything else; the message names ``key`` and the valid forms.
    """
    if isinstance(split, str):
        if split.lower() == "public":
            return "public"
        raise ConfigError(f"{key}: invalid value {split!r}; valid: 'public' or [train, val, test] ratios")
    if not isinstance(split, Sequence) or len(split) != 3:
        raise ConfigError(f"{key}: expected 'public' or three ratios [train, val, test], got {split!r}")
    ratios = []
    for name, r in zip(("train", "val", "test"), split, strict=True):
        if isinstance(r, bool) or not isinstance(r, numbers.Real) or not math.isfinite(float(r)):
            raise ConfigError(f"{key}: the {name} ratio must be a number, got {r!r}")
        if not 0.0 <= float(r) <= 1.0:
            raise ConfigError(f"{key}: the {name} ratio must be in [0, 1], got {r!r}")
        ratios.append(float(r))
    if sum(ratios) > 1.0 + SPLIT_TOLERANCE:
        raise ConfigError(f"{key}: ratios {ratios} sum to {sum(ratios):.6g} > 1; they must sum to at most 1")
    if ratios[0] == 0.0:
        raise ConfigError(f"{key}: the train ratio must be > 0, got {ratios}")
    return (ratios[0], ratios[1], ratios[2])


def split_masks(
    y: torch.Tensor | np.ndarray,
    ratios: tuple[float, float, float],
    rng: np.random.Generator,
    *,
    stratified: bool = True,
    groups: torch.Tensor | np.ndarray | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Draw train/val/test masks.

    Args:
        y: Labels (negative labels are never put in any split).
        ratios: ``(train, val, test)`` ratios, validated by :func:`check_split`.
        rng: Generator for the shuffles (explicit; no global RNG).
        stratified: Split each class separately (default) or all nodes together. (default: ``True``)
        groups: Optional group id per node (e.g. the owning client); splits are drawn inside each
            (group, class) cell, so every client gets its own stratified split in one vectorised pass. Nodes with
            a negative group are left out. (default: ``None``, one group)

    Returns:
        Three disjoint boolean masks of shape ``(N,)``.
    """
    r_tr, r_va, r_te = check_split(ratios)  # type: ignore[misc]
    yy = (
        (y.detach().cpu().numpy() if isinstance(y, torch.Tensor) else np.asarray(y))
        .reshape(-1)
        .astype(np.int64)
    )
    n = yy.shape[0]
    g = (
        np.zeros(n, dtype=np.int64)
        if groups is None
        else (
            groups.detach().cpu().numpy() if isinstance(groups, torch.Tensor) else np.asarray(groups)
        ).astype(np.int64)
    )
    valid = (yy >= 0) & (g >= 0)
    cls = yy if stratified else np.zeros(n, dtype=np.int64)
    ncls = int(cls[valid].max()) + 1 if valid.any() else 1
    cell = np.where(valid, g * ncls + cls, -1)
    perm = rng.permutation(n)
    order = perm[np.argsort(cell[perm], kind="stable")]  # random order inside each cell
    cell_sorted = cell[order]
    uniq, first, counts = np.unique(cell_sorted, return_index=True, return_counts=True)
    starts = np.repeat(first, counts)
    rank = np.arange(n) - starts
    size = np.repeat(counts, counts)
    n_tr = np.floor(size * r_tr + 1e-9).astype(np.int64)
    n_va = np.floor(size * r_va + 1e-9).astype(np.int64)
    if abs(r_tr + r_va + r_te - 1.0) <= 1e-9:
        n_te = size - n_tr - n_va
    else:
        n_te = np.floor(size * r_te + 1e-9).astype(np.int64)
    ok = cell_sorted >= 0
    tr, va, te = (np.zeros(n, dtype=bool) for _ in range(3))
    tr[order] = ok & (rank < n_tr)
    va[order] = ok & (rank >= n_tr) & (rank < n_tr + n_va)
    te[order] = ok & (rank >= n_tr + n_va) & (rank < n_tr + n_va + n_te)
    del uniq
    return torch.from_numpy(tr), torch.from_numpy(va), torch.from_numpy(te)
