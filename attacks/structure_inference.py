r"""External-edge inference by a curious FedStruct client from the multi-hop rows it receives.

Threat (``shared/specs/fedstruct.md`` §1.2, §2.8, §3.4): in FedStruct-B's setup, client :math:`i` receives,
through receiver-blinded secure sums, its rows :math:`\bar A_{[i]} = \sum_l \beta_l \hat A^l_{[i]}` of the
multi-hop matrix (rows: its nodes, columns: all ``N`` nodes). It already knows its nodes, its intra-edges and
the external endpoint (and owner) of each of its inter-edges, hence the global degree of each of its nodes. The
secure sum hides the individual contributions :math:`B_{ik}`, not their sum, and the sum carries edges the
client does not know: with :math:`\hat A = \tilde D^{-1}(A + I)`,

.. math::
    \hat A^2[u, v] = \sum_w \hat A[u, w]\,\hat A[w, v]

is positive for every neighbour ``v`` of an external neighbour ``w`` of ``u``, i.e. for edges between other
clients' nodes.

The attack. Candidate pairs are ``(w, v)`` with ``w`` an external neighbour the client knows and ``v`` any
node outside the client (``v != w``); every such pair is an edge the client does not know. The positives are
the true edges among them (at most ``max_pairs``, sampled); each positive ``(w, v)`` gets a negative
``(w, v')`` with the same ``w`` and a uniformly drawn non-edge ``v'``, so the score must rank ``v``, not
``w``. The score is

.. math::
    s(w, v) = \max_{u \in V_i,\ (u, w) \in E_i'} \tilde d_u\,|R[u, v]|,

with :math:`R` the received rows, less (when the public coefficients ``beta`` are given) the part the client
computes alone: the walks whose intermediate nodes all lie in :math:`V_i`,
:math:`\sum_l \beta_l Q^{l-1} P^{(1)}_{[i]}` with :math:`Q` the own columns of :math:`P^{(1)}_{[i]}`. The
factor :math:`\tilde d_u` (known) undoes ``u``'s normalisation: for ``L = 2`` and ``u`` with a single
external neighbour ``w``, :math:`\tilde d_u R[u, :] = \tilde A[w, :] / \tilde d_w` exactly (``w``'s neighbour
list and degree). With ``L = 1`` the residual is zero: the rows reveal nothing new and the AUC is 0.5.

Metrics follow link stealing (He et al., *Stealing Links from Graph Neural Networks*, USENIX Security 2021,
https://arxiv.org/abs/2005.02131): ROC-AUC on balanced pairs (chance 0.5) and precision at ``k`` with ``k`` the
number of true pairs (chance: the positive rate, 0.5). With ``beta`` the same score on the client's own
:func:`known_walks` is reported as the *public* baseline (what it infers without the setup: triangles through
its own nodes). Ties are broken by a seeded shuffle of the pairs.

Shapes:
    rows ``(n_i, N)`` (row ``r`` belongs to ``own_nodes[r]``); own_nodes ``(n_i,)``; known_edges,
    true_edges ``(2, E)`` global ids (one or both directions).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from torch import Tensor

from securefgl.attacks._common import roc_summary
from securefgl.attacks.link_stealing import precision_at_k
from securefgl.errors import AttackNotApplicableError, ConfigError

__all__ = ["external_edge_inference", "known_walks"]


def _undirected_keys(edges: Tensor, n: int) -> Tensor:
    e = edges.to(torch.long).cpu()
    u, v = torch.minimum(e[0], e[1]), torch.maximum(e[0], e[1])
    keep = u != v
    return torch.unique(u[keep] * n + v[keep])


def _own_first_power(own: Tensor, known: Tensor, n: int) -> tuple[Tensor, Tensor, Tensor]:
    """``(P1 (n_i, N), tilde_deg (n_i,), known undirected edges (2, E))`` from the client's own knowledge."""
    keys = _undirected_keys(known, n)
    a, b = keys // n, keys % n
    local = torch.full((n,), -1, dtype=torch.long)
    local[own] = torch.arange(own.numel())
    rows = torch.cat([local[a], local[b]])
    cols = torch.cat([b, a])
    ok = rows >= 0
    p1 = torch.zeros(own.numel(), n, dtype=torch.float64)
    p1[torch.arange(own.numel()), own] = 1.0
    p1.index_put_((rows[ok], cols[ok]), torch.ones(int(ok.sum()), dtype=torch.float64), accumulate=True)
    deg = p1.sum(1)
    return p1 / deg[:, None], deg, torch.stack([a, b])


def known_walks(own_nodes: Tensor, known_edges: Tensor, num_nodes: int, beta: Sequence[float]) -> Tensor:
    r"""``(n_i, N)``: the part of :math:`\bar A_{[i]}` the client computes alone (walks through own nodes only).

    :math:`\sum_l \beta_l Q^{l-1} P^{(1)}_{[i]}`, exact because the client knows every edge of its own nodes
    and their global degrees.
    """
    own = own_nodes.to(torch.long).cpu()
    p1, _, _ = _own_first_power(own, known_edges, num_nodes)
    q = p1[:, own]
    out = torch.zeros_like(p1)
    p = p1
    for level, b in enumerate(beta):
        if level > 0:
            p = q @ p
        out = out + float(b) * p
    return out


def _sample_pairs(
    pos_keys: Tensor, ext: Tensor, outside: Tensor, true_keys: set[int], n: int, generator: torch.Generator
) -> tuple[Tensor, Tensor]:
    """Positives ``(w, v)`` (``w`` external) and, per positive, a non-edge ``(w, v')`` with ``v'`` outside."""
    a, b = pos_keys // n, pos_keys % n
    is_ext = torch.zeros(n, dtype=torch.bool)
    is_ext[ext] = True
    # orient each positive so that w is an external neighbour (pick a at random when both are)
    flip = ~is_ext[a] | (is_ext[b] & (torch.rand(a.numel(), generator=generator) < 0.5))
    w = torch.where(flip, b, a)
    v = torch.where(flip, a, b)
    neg_w: list[int] = []
    neg_v: list[int] = []
    keep: list[int] = []
    used: set[int] = set()
    draws = torch.randint(outside.numel(), (a.numel(), 64), generator=generator)
    for j in range(a.numel()):
        wj = int(w[j])
        for t in draws[j].tolist():
            vj = int(outside[t])
            key = min(wj, vj) * n + max(wj, vj)
            if vj == wj or key in true_keys or key in used:
                continue
            used.add(key)
            neg_w.append(wj)
            neg_v.append(vj)
            keep.append(j)
            break
    if not keep:
        raise AttackNotApplicableError("no non-edge could be sampled among the candidate pairs")
    k = torch.tensor(keep, dtype=torch.long)
    pos = torch.stack([w[k], v[k]])
    neg = torch.tensor([neg_w, neg_v], dtype=torch.long)
    labels = torch.cat([torch.ones(k.numel(), dtype=torch.long), torch.zeros(k.numel(), dtype=torch.long)])
    return torch.cat([pos, neg], 1), labels


def _own_external_adjacency(own: Tensor, known: Tensor, is_own: Tensor, n: int) -> tuple[Tensor, Tensor]:
    """``(u_local, w_global)``: every known inter-edge, own endpoint as a row index, external one as an id."""
    local = torch.full((n,), -1, dtype=torch.long)
    local[own] = torch.arange(own.numel())
    a, b = known
    fwd = is_own[a] & ~is_own[b]
    bwd = is_own[b] & ~is_own[a]
    return torch.cat([local[a[fwd]], local[b[bwd]]]), torch.cat([b[fwd], a[bwd]])


def _scores(rows: Tensor, deg: Tensor, own_adj: tuple[Tensor, Tensor], pairs: Tensor, tol: float) -> Tensor:
    """``s(w, v) = max`` over own ``u`` adjacent to ``w`` of ``d_u |rows[u, v]|``, rounded to multiples of ``tol``."""
    scaled = torch.round(rows.abs() * deg[:, None] / tol) * tol
    u_loc, w_ext = own_adj
    w, v = pairs
    out = torch.zeros(w.numel(), dtype=torch.float64)
    for ww in torch.unique(w).tolist():
        idx = torch.nonzero(w == ww).flatten()
        out[idx] = scaled[u_loc[w_ext == ww]][:, v[idx]].amax(0)
    return out


def _checked_inputs(rows: Tensor, own_nodes: Tensor, n: int) -> tuple[Tensor, Tensor]:
    """``(own ids, rows as float64)`` on the CPU, after checking their shapes, ids and values."""
    own = own_nodes.to(torch.long).cpu()
    r = rows.detach().to(torch.float64).cpu()
    if r.dim() != 2 or r.shape != (own.numel(), n):
        raise ConfigError(f"rows must be (n_i, N) = ({own.numel()}, {n}), got {tuple(r.shape)}")
    if (
        own.numel() == 0
        or int(own.min()) < 0
        or int(own.max()) >= n
        or torch.unique(own).numel() != own.numel()
    ):
        raise ConfigError(f"own_nodes must be distinct global ids in [0, {n})")
    if not torch.isfinite(r).all():
        raise AttackNotApplicableError("the received rows hold non-finite values")
    return own, r


def _positive_keys(true_edges: Tensor, is_own: Tensor, ext: Tensor, n: int) -> tuple[Tensor, Tensor]:
    """``(candidate true edges, all true edges)`` as undirected keys ``u * N + v``: the candidates join an
    external neighbour to another node, both outside the client."""
    ext_mask = torch.zeros(n, dtype=torch.bool)
    ext_mask[ext] = True
    if ext.numel() == 0:
        raise AttackNotApplicableError(
            "the client has no external neighbour: its rows only cover walks it computes itself"
        )
    true_keys_t = _undirected_keys(true_edges, n)
    ta, tb = true_keys_t // n, true_keys_t % n
    cand = ~is_own[ta] & ~is_own[tb] & (ext_mask[ta] | ext_mask[tb])
    pos_keys = true_keys_t[cand]
    if pos_keys.numel() == 0:
        raise AttackNotApplicableError(
            f"no true edge among the candidate pairs (external neighbour, outside node) of the client's "
            f"{ext.numel()} external neighbours: nothing to infer"
        )
    return pos_keys, true_keys_t


def _report(
    scores: Tensor, labels: Tensor, public_scores: Tensor | None, num_external: int, subtracted: bool
) -> dict[str, Any]:
    """The metrics of the scored pairs (and of the public baseline, when given)."""
    y = labels.numpy()
    s = scores.numpy()
    k = int(y.sum())
    roc = roc_summary(y, s, fprs=(0.01, 0.001))
    out: dict[str, Any] = {
        **roc,
        "precision@k": precision_at_k(y, s, k),
        "k": k,
        "pairs": int(y.size),
        "positives": k,
        "external_neighbours": num_external,
        "informative_pairs": int(np.count_nonzero(s)),
        "subtracted_known": subtracted,
        "chance": {"auc": 0.5, "precision@k": float(y.mean())},
    }
    if public_scores is not None:
        sp = public_scores.numpy()
        out["public"] = {"auc": roc_summary(y, sp, fprs=())["auc"], "precision@k": precision_at_k(y, sp, k)}
    return out


def external_edge_inference(
    rows: Tensor,
    own_nodes: Tensor,
    known_edges: Tensor,
    true_edges: Tensor,
    num_nodes: int,
    *,
    generator: torch.Generator,
    max_pairs: int | None = 2000,
    beta: Sequence[float] | None = None,
    tol: float = 1e-7,
) -> dict[str, Any]:
    r"""Infer edges between nodes outside the client from its received rows :math:`\bar A_{[i]}`.

    Args:
        rows: ``(n_i, N)`` the client's received rows, row ``r`` for ``own_nodes[r]``.
        own_nodes: ``(n_i,)`` global ids of the client's nodes.
        known_edges: ``(2, E)`` the edges the client knows (intra-edges and inter-edges), global ids.
        true_edges: ``(2, E)`` the global graph's edges (ground truth, for scoring only).
        num_nodes: ``N``.
        generator: Seeds the pair sampling and the tie-breaking shuffle.
        max_pairs: At most this many positive pairs (and as many negatives); ``None``: all.
        beta: The setup's public :math:`\beta_1..\beta_{L}`; when given, the walks the client computes alone
            (:func:`known_walks`) are subtracted from ``rows`` first. ``None``: score the raw rows.
        tol: Scores are rounded to multiples of this, so the fixed-point noise of the secure sums neither
            creates nor breaks ties (plaintext and masked sums then score alike).

    Returns:
        ``{"auc", "precision@k", "k", "pairs", "positives", "external_neighbours", "informative_pairs",
        "subtracted_known", "chance": {"auc", "precision@k"}, "tpr@0.01", "tpr@0.001", "fpr", "tpr"}``, and
        with ``beta`` also ``"public": {"auc", "precision@k"}`` (the same score on :func:`known_walks`, what
        the client has without the setup); ``informative_pairs`` counts pairs with a nonzero score.

    Raises:
        ConfigError: shapes or ids that do not fit together.
        AttackNotApplicableError: the client has no external neighbour, or no true edge lies among the
            candidate pairs (the rows have nothing to reveal).
    """
    n = int(num_nodes)
    own, r = _checked_inputs(rows, own_nodes, n)
    _, deg, known = _own_first_power(own, known_edges, n)
    is_own = torch.zeros(n, dtype=torch.bool)
    is_own[own] = True
    own_adj = _own_external_adjacency(own, known, is_own, n)
    ext = torch.unique(own_adj[1])
    outside = torch.nonzero(~is_own).flatten()
    pos_keys, true_keys_t = _positive_keys(true_edges, is_own, ext, n)
    if max_pairs is not None and pos_keys.numel() > max_pairs:
        pos_keys = pos_keys[torch.randperm(pos_keys.numel(), generator=generator)[:max_pairs]]
    pairs, labels = _sample_pairs(pos_keys, ext, outside, set(true_keys_t.tolist()), n, generator)
    perm = torch.randperm(labels.numel(), generator=generator)
    pairs, labels = pairs[:, perm], labels[perm]

    public = known_walks(own, known_edges, n, beta) if beta is not None else None
    resid = r - public if public is not None else r
    scores = _scores(resid, deg, own_adj, pairs, tol)
    public_scores = _scores(public, deg, own_adj, pairs, tol) if public is not None else None
    return _report(scores, labels, public_scores, int(ext.numel()), beta is not None)
