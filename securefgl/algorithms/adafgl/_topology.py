"""AdaFGL step 2, non-learned parts: topology correction, smoothing operators, label propagation, HCS.

Private helpers of :mod:`securefgl.algorithms.adafgl`, client side (spec ``shared/specs/adafgl.md``
§2.1-§2.2, §7).
Everything here runs on one client's subgraph and never leaves it. Matrices of size ``n x n`` are held
as coalesced ``torch.sparse_coo_tensor`` (values float32) so that large clients never materialise a
dense similarity matrix: the similarity of predicted class distributions is computed in row chunks
and only the kept entries (threshold and/or top-k) are stored.

Shapes: ``N`` local nodes, ``E`` local directed edges (both directions), ``F`` features, ``C`` classes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import torch

from securefgl.errors import ConfigError

__all__ = [
    "TopologyCorrection",
    "adjacency",
    "correct_topology",
    "homophily_confidence_score",
    "label_propagation",
    "prediction_similarity",
    "smoothed_features",
    "sym_normalize",
]

_EPS = 1e-9


def _coo(indices: torch.Tensor, values: torch.Tensor, shape: tuple[int, int] | torch.Size) -> torch.Tensor:
    """A sparse COO matrix built from indices we produced ourselves (in range by construction)."""
    return torch.sparse_coo_tensor(indices, values, tuple(shape), check_invariants=False)


def adjacency(
    edge_index: torch.Tensor, num_nodes: int, *, device: torch.device | str | None = None
) -> torch.Tensor:
    """The raw 0/1 symmetric adjacency without self-loops, as a coalesced sparse matrix.

    Duplicate edges and self-loops are dropped and the graph is symmetrised, so any ``edge_index``
    (directed, duplicated, with loops) gives the same matrix as its undirected simple version.

    Shapes:
        edge_index ``(2, E)`` (local ids in ``[0, N)``) -> sparse ``(N, N)``.
    """
    device = edge_index.device if device is None else torch.device(device)
    if edge_index.dim() != 2 or edge_index.size(0) != 2:
        raise ConfigError(f"edge_index must have shape (2, E), got {tuple(edge_index.shape)}")
    ei = edge_index.to(device=device, dtype=torch.long)
    if ei.numel() and (int(ei.min()) < 0 or int(ei.max()) >= num_nodes):
        raise ConfigError(
            f"edge_index has ids outside [0, {num_nodes}): min {int(ei.min())}, max {int(ei.max())}"
        )
    ei = ei[:, ei[0] != ei[1]]
    ei = torch.cat([ei, ei.flip(0)], dim=1)
    vals = torch.ones(ei.size(1), device=device)
    a = _coo(ei, vals, (num_nodes, num_nodes)).coalesce()
    return _coo(a.indices(), torch.ones_like(a.values()), a.shape).coalesce()


def _diag(values: torch.Tensor) -> torch.Tensor:
    n = values.numel()
    idx = torch.arange(n, device=values.device).repeat(2, 1)
    return _coo(idx, values, (n, n))


def sym_normalize(matrix: torch.Tensor, *, add_self_loops: bool = True) -> torch.Tensor:
    r"""The GraphOperator of eq. (1) with :math:`r = 1/2`: :math:`D^{-1/2}(P + I)D^{-1/2}`.

    :math:`D = \mathrm{diag}(\text{rowsum}(P + I))`; rows whose degree is not positive get a zero
    scale (no NaN/Inf, whatever the weights).

    Shapes:
        sparse ``(N, N)`` -> sparse ``(N, N)``.
    """
    n = matrix.size(0)
    m = matrix.coalesce()
    if add_self_loops:
        m = (m + _diag(torch.ones(n, device=m.device))).coalesce()
    deg = torch.sparse.sum(m, dim=1).to_dense() if m._nnz() else torch.zeros(n, device=m.device)
    inv = torch.where(deg > _EPS, deg.clamp_min(_EPS).rsqrt(), torch.zeros_like(deg))
    idx = m.indices()
    vals = m.values() * inv[idx[0]] * inv[idx[1]]
    return _coo(idx, vals, m.shape).coalesce()


def prediction_similarity(
    probs: torch.Tensor,
    *,
    normalization: Literal["cosine", "literal"] = "cosine",
    threshold: float | None = 0.999,
    topk: int | None = None,
    dense_max_nodes: int = 4096,
    large_client_topk: int = 64,
    chunk_size: int = 1024,
) -> torch.Tensor:
    r"""Similarity of the extractor's predicted class distributions, eqs. (5)-(6), kept sparse.

    ``normalization="cosine"`` (spec §7.11 [R]):
    :math:`S_{ij} = \hat p_i^\top \hat p_j / \max(\lVert\hat p_i\rVert \lVert\hat p_j\rVert, 10^{-9})`,
    diagonal zero; with ``threshold`` the kept entries are binarised: :math:`B = 1[S > \text{threshold}]`
    ([C1]). ``normalization="literal"`` keeps the raw :math:`\hat P\hat P^\top` (diagonal included,
    ``threshold`` unused) for the literal eq. (6).

    Rows are computed ``chunk_size`` at a time. ``topk`` keeps at most that many entries per row
    (largest similarity). Above ``dense_max_nodes`` nodes a row cap of ``topk or large_client_topk`` is
    always applied, so memory is :math:`O(N \cdot k + \text{chunk} \cdot N)` instead of :math:`O(N^2)`.
    The kept pattern is symmetrised (union), so the result is a symmetric matrix.

    Shapes:
        probs ``(N, C)`` -> sparse ``(N, N)``.
    """
    if normalization not in ("cosine", "literal"):
        raise ConfigError(f"normalization must be 'cosine' or 'literal', got {normalization!r}")
    if threshold is not None and not (-1.0 <= threshold <= 1.0):
        raise ConfigError(f"sim_threshold must be in [-1, 1] or None, got {threshold!r}")
    if topk is not None and topk < 1:
        raise ConfigError(f"sim_topk must be a positive int or None, got {topk!r}")
    n = probs.size(0)
    device = probs.device
    p = probs.detach().float()
    if normalization == "cosine":
        p = p / p.norm(dim=1, keepdim=True).clamp_min(_EPS)
    cap = topk if topk is not None else (large_client_topk if n > dense_max_nodes else None)
    if cap is not None:
        cap = min(cap, n)
    rows_out: list[torch.Tensor] = []
    cols_out: list[torch.Tensor] = []
    vals_out: list[torch.Tensor] = []
    for start in range(0, n, max(1, chunk_size)):
        stop = min(n, start + max(1, chunk_size))
        block = p[start:stop] @ p.T  # (c, N)
        r_local = torch.arange(stop - start, device=device)
        if normalization == "cosine":
            block[r_local, r_local + start] = 0.0
            keep = block > threshold if threshold is not None else block > 0
        else:
            keep = block > 0
        if cap is not None:
            masked = torch.where(keep, block, torch.full_like(block, -math.inf))
            top = masked.topk(cap, dim=1)
            sel = torch.zeros_like(keep)
            sel.scatter_(1, top.indices, True)
            keep = keep & sel
        r, c = keep.nonzero(as_tuple=True)
        v = block[r, c]
        if normalization == "cosine" and threshold is not None:
            v = torch.ones_like(v)
        rows_out.append(r + start)
        cols_out.append(c)
        vals_out.append(v)
    rows = torch.cat(rows_out) if rows_out else torch.zeros(0, dtype=torch.long, device=device)
    cols = torch.cat(cols_out) if cols_out else torch.zeros(0, dtype=torch.long, device=device)
    vals = torch.cat(vals_out) if vals_out else torch.zeros(0, device=device)
    if cap is not None:
        # Symmetrise the top-k pattern: union, keeping the (symmetric) similarity value.
        idx = torch.cat([torch.stack([rows, cols]), torch.stack([cols, rows])], dim=1)
        s = _coo(idx, torch.cat([vals, vals]), (n, n)).coalesce()
        counts = _coo(idx, torch.ones(idx.size(1), device=device), (n, n)).coalesce()
        return _coo(s.indices(), s.values() / counts.values(), (n, n)).coalesce()
    return _coo(torch.stack([rows, cols]), vals, (n, n)).coalesce()


@dataclass
class TopologyCorrection:
    """The corrected topology of one client (spec §2.1 eqs. (5)-(6)).

    Attributes:
        similarity: the sparse similarity part ``S`` (``B`` when binarised); the default
            :math:`\\tilde P^{(0)}` of the learnable message passing.
        corrected: :math:`\\tilde P = \\alpha A + (1-\\alpha) S` (cosine mode) or the literal eq. (6).
        operator: ``GraphOperator(P~)`` = sym-normalised with self-loops, used by eq. (7).
    """

    similarity: torch.Tensor
    corrected: torch.Tensor
    operator: torch.Tensor


def correct_topology(
    adj: torch.Tensor,
    probs: torch.Tensor,
    *,
    alpha: float = 0.5,
    normalization: Literal["cosine", "literal"] = "cosine",
    threshold: float | None = 0.999,
    topk: int | None = None,
    dense_max_nodes: int = 4096,
    large_client_topk: int = 64,
    chunk_size: int = 1024,
    enabled: bool = True,
) -> TopologyCorrection:
    r"""Topology correction with the federated knowledge extractor, eqs. (5)-(6).

    .. math::
        P = \alpha A + (1-\alpha)\,S(\hat P), \qquad
        \tilde P = \begin{cases} P & \text{cosine (default)}\\
        P \oslash (d d^\top) - \mathrm{diag}(P),\ d_i = \sqrt{\textstyle\sum_j P_{ij}} & \text{literal}\end{cases}

    With ``enabled=False`` (ablation "w/o L.T.") :math:`\tilde P = A` and the similarity part is ``A``
    too, so the extractor does not touch the topology.

    Shapes:
        adj sparse ``(N, N)``, probs ``(N, C)`` -> three sparse ``(N, N)``.
    """
    if not 0.0 <= alpha <= 1.0:
        raise ConfigError(f"alpha must be in [0, 1], got {alpha!r}")
    adj = adj.coalesce().float()
    if not enabled:
        return TopologyCorrection(similarity=adj, corrected=adj, operator=sym_normalize(adj))
    s = prediction_similarity(
        probs,
        normalization=normalization,
        threshold=threshold,
        topk=topk,
        dense_max_nodes=dense_max_nodes,
        large_client_topk=large_client_topk,
        chunk_size=chunk_size,
    )
    p = (alpha * adj + (1.0 - alpha) * s).coalesce()
    if normalization == "literal":
        n = p.size(0)
        deg = torch.sparse.sum(p, dim=1).to_dense() if p._nnz() else torch.zeros(n, device=p.device)
        d = deg.clamp_min(0.0).sqrt()
        idx = p.indices()
        denom = d[idx[0]] * d[idx[1]]
        vals = torch.where(denom > _EPS, p.values() / denom.clamp_min(_EPS), torch.zeros_like(denom))
        diag_mask = idx[0] == idx[1]
        vals = torch.where(diag_mask, vals - p.values(), vals)
        p = _coo(idx, vals, p.shape).coalesce()
    return TopologyCorrection(similarity=s, corrected=p, operator=sym_normalize(p))


def smoothed_features(operator: torch.Tensor, x: torch.Tensor, num_hops: int = 3) -> torch.Tensor:
    r"""Eq. (7) precomputed: :math:`[X \,\|\, \hat{\mathcal A} X \,\|\, \dots \,\|\, \hat{\mathcal A}^{K_p} X]`.

    Shapes:
        operator sparse ``(N, N)``, x ``(N, F)`` -> ``(N, (K_p + 1) F)``.
    """
    if num_hops < 0:
        raise ConfigError(f"num_hops must be >= 0, got {num_hops!r}")
    out = [x]
    cur = x
    with torch.no_grad():
        for _ in range(num_hops):
            cur = torch.sparse.mm(operator, cur)
            out.append(cur)
    return torch.cat(out, dim=1)


def label_propagation(
    norm_adj: torch.Tensor,
    y0: torch.Tensor,
    *,
    steps: int = 5,
    kappa: float = 0.5,
    reinject: torch.Tensor | None = None,
) -> torch.Tensor:
    r"""Non-parametric label propagation, eq. (15) (approximate personalised PageRank).

    .. math::
        \hat Y^{k} = \kappa Y^0 + (1-\kappa)\,\tilde A \hat Y^{k-1}, \quad \hat Y^0 = Y^0,\ k = 1..K

    ``reinject`` (a boolean node mask, [C1] behaviour) adds :math:`Y^0` back onto those rows after each
    step. An isolated node (only its self-loop) keeps its own initial distribution.

    Shapes:
        norm_adj sparse ``(N, N)``, y0 ``(N, C)`` -> ``(N, C)``.
    """
    if steps < 0:
        raise ConfigError(f"lp_steps must be >= 0, got {steps!r}")
    if not 0.0 <= kappa <= 1.0:
        raise ConfigError(f"lp_kappa must be in [0, 1], got {kappa!r}")
    y = y0
    for _ in range(steps):
        y = kappa * y0 + (1.0 - kappa) * torch.sparse.mm(norm_adj, y)
        if reinject is not None:
            y = y + torch.where(reinject[:, None], y0, torch.zeros_like(y0))
    return y


def _strict_argmax_correct(scores: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Per row: the label is the unique maximum (ties count as incorrect, spec §7.18)."""
    top = scores.max(dim=1).values
    at_top = (scores >= top[:, None] - 1e-7 * top.abs().clamp_min(1.0)[:, None]).sum(dim=1)
    return (scores.gather(1, labels[:, None]).squeeze(1) >= top - 1e-7 * top.abs().clamp_min(1.0)) & (
        at_top == 1
    )


def homophily_confidence_score(
    adj: torch.Tensor,
    y: torch.Tensor,
    train_mask: torch.Tensor,
    num_classes: int,
    *,
    generator: torch.Generator,
    steps: int = 5,
    kappa: float = 0.5,
    mask_prob: float = 0.5,
    num_masks: int = 1,
    reinject: bool = False,
    default: float = 0.5,
) -> float:
    r"""The homophily confidence score, eqs. (15)-(16).

    A random ``mask_prob`` fraction of the train nodes is hidden (uniform init, as are all other
    non-train nodes); label propagation over :math:`\tilde A = \tilde D^{-1/2}(A + I)\tilde D^{-1/2}` of
    the *original* local graph runs ``steps`` steps; HCS is the accuracy on the hidden train nodes:

    .. math::
        \mathrm{HCS} = \frac{|\{i \in \mathrm{mask}(V_L) : \arg\max \hat Y^K_i = y_i\}|}{|\mathrm{mask}(V_L)|}

    Undefined cases (spec §7.18): fewer than 2 train nodes -> ``default`` (0.5). Argmax ties (e.g. an
    isolated hidden node stays uniform) count as incorrect, so a client with no edges scores 0 and is
    handled by the topology-independent heterophilous module. Averaged over ``num_masks`` masks.

    Args:
        adj: raw sparse adjacency without self-loops ``(N, N)``.
        y: labels ``(N,)`` (only train entries are read).
        train_mask: ``(N,)`` bool.
        num_classes: ``C``.
        generator: draws the masks.

    Returns:
        A float in ``[0, 1]``, never NaN.
    """
    if not 0.0 < mask_prob < 1.0:
        raise ConfigError(f"hcs_mask_prob must be in (0, 1), got {mask_prob!r}")
    if num_masks < 1:
        raise ConfigError(f"hcs_num_masks must be >= 1, got {num_masks!r}")
    train_idx = train_mask.nonzero(as_tuple=True)[0]
    t = int(train_idx.numel())
    if t < 2 or num_classes < 1:
        return float(default)
    n = adj.size(0)
    device = adj.device
    norm = sym_normalize(adj.float())
    scores: list[float] = []
    for _ in range(num_masks):
        perm = torch.randperm(t, generator=generator, device=generator.device).to(device)
        n_hidden = min(t - 1, max(1, int(round(mask_prob * t))))
        hidden = train_idx[perm[:n_hidden]]
        visible = train_idx[perm[n_hidden:]]
        y0 = torch.full((n, num_classes), 1.0 / num_classes, device=device)
        y0[visible] = torch.nn.functional.one_hot(y[visible].long(), num_classes).float()
        reinj = None
        if reinject:
            reinj = torch.zeros(n, dtype=torch.bool, device=device)
            reinj[visible] = True
        yk = label_propagation(norm, y0, steps=steps, kappa=kappa, reinject=reinj)
        correct = _strict_argmax_correct(yk[hidden], y[hidden].long())
        scores.append(int(correct.sum()) / int(correct.numel()))
    out = float(sum(scores) / len(scores))
    return out if math.isfinite(out) else float(default)
