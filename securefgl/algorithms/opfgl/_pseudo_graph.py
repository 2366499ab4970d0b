"""O-pFGL's generation from sums: class moments, and the global pseudo-graph generator.

Internal module of :mod:`securefgl.algorithms.opfgl` (spec ``shared/specs/opfgl.md`` §2.6-2.8), used by the
server half (:mod:`securefgl.algorithms.opfgl.server`) and, under variant A.5, by every client on the sum in
its own inbox. It reads nothing but the summed blocks ``A = Σ_k a_k``, ``B = Σ_k b_k``, ``Q = Σ_k q_k``,
``M = Σ_k e_k`` and ``O = Σ_k o_k``; the generator then optimises a tiny synthetic graph to match the
aggregated class moments (moment matching in the style of SimGC/GCDM). It imports no client-side module.

Paper: Yan et al., *Towards Federated Graph Learning in One-shot Communication* (O-pFGL),
https://arxiv.org/abs/2411.11304
"""

from __future__ import annotations

import hashlib
import io
import math
import struct
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import torch
from torch import Tensor, nn

from securefgl.algorithms.opfgl.options import PseudoGraphConfig
from securefgl.errors import ConfigError, MalformedMessageError, NonFiniteError, TrainingError

if TYPE_CHECKING:
    from securefgl.algorithms.opfgl.options import OPFGLOptions

__all__ = [
    "ClassMoments",
    "LinkPredictor",
    "PseudoGraph",
    "PseudoGraphConfig",
    "generate_pseudo_graph",
    "moments_from_sums",
    "pseudo_graph_from_sums",
    "pseudo_graph_sizes",
    "released_moments",
    "seed_from",
    "small_classes",
]


# --------------------------------------------------------------------------------------------------
# Aggregated moments
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ClassMoments:
    r"""Aggregated per-class moments of the propagated features (Eq. 9, from sums only).

    .. math::
        \mu^c = B^c / A^c,\qquad
        s^{2,c} = \frac{Q^c - A^c (\mu^c)^2}{A^c - M^c},\qquad
        \lambda_c = A^c / \textstyle\sum_{c'} A^{c'}

    Rows of classes that are not released (withheld by the protocol's release rule, or absent
    everywhere) are zero and ``released[c]`` is ``False``.

    Attributes:
        count: ``(C,)`` ``A^c``; mean, var, std: ``(C, D)``; contributors: ``(C,)`` ``M^c``;
        orig: ``(C,)`` ``O^c``; weight: ``(C,)`` ``λ_c``; released: ``(C,)`` bool.
        withheld: classes refused by the release rule; absent: classes with ``A^c = 0``;
        single_contributor: released classes with ``M^c = 1`` (their moments are one client's);
        degenerate: released classes whose variance denominator is ``<= 0`` (variance set to 0).
    """

    count: Tensor
    mean: Tensor
    var: Tensor
    std: Tensor
    contributors: Tensor
    orig: Tensor
    weight: Tensor
    released: Tensor
    withheld: tuple[int, ...] = ()
    absent: tuple[int, ...] = ()
    single_contributor: tuple[int, ...] = ()
    degenerate: tuple[int, ...] = ()

    @property
    def num_classes(self) -> int:
        return int(self.count.numel())

    @property
    def released_classes(self) -> list[int]:
        return [int(c) for c in torch.nonzero(self.released).flatten()]


def moments_from_sums(
    count: Tensor,
    total: Tensor,
    total_sq: Tensor,
    contributors: Tensor,
    orig: Tensor,
    *,
    withheld_rows: Tensor | None = None,
    denominator: Literal["contributors", "unbiased"] = "contributors",
) -> ClassMoments:
    r"""Class means, pooled variances and weights from the summed blocks (spec §2.6).

    The pooled variance of Eq. 9 collapses, with :math:`\mu = B/A`, to

    .. math::
        \sum_k (N_k-1)s_k^2 + \sum_k N_k(\mu_k-\mu)^2 = Q - 2\mu B + \mu^2 A = Q - A\mu^2,

    divided by :math:`A - M` (``denominator="contributors"``, the paper's ``N^c - m_c``) or by
    :math:`A - 1` (``"unbiased"``). Computed in float64; a tiny negative value produced by
    quantisation is clamped to zero.

    Args:
        count, contributors, orig: ``(C,)`` summed counts ``A``, indicators ``M`` and original counts ``O``.
        total, total_sq: ``(C, D)`` summed ``Σx`` and ``Σx²``.
        withheld_rows: ``(C,)`` bool, classes the release rule refused (their rows may be NaN).
        denominator: ``"contributors"`` (default, paper/code) or ``"unbiased"``.

    Shapes:
        -> :class:`ClassMoments` with ``(C,)`` and ``(C, D)`` tensors.
    """
    if denominator not in ("contributors", "unbiased"):
        raise ConfigError(f"variance denominator must be 'contributors' or 'unbiased', got {denominator!r}")
    num_classes = count.numel()
    if total.dim() != 2 or total.shape != total_sq.shape or total.size(0) != num_classes:
        raise ConfigError(
            f"sum blocks disagree: count {tuple(count.shape)}, sum {tuple(total.shape)}, sumsq {tuple(total_sq.shape)}"
        )
    withheld = (
        withheld_rows.bool().cpu()
        if withheld_rows is not None
        else torch.zeros(num_classes, dtype=torch.bool)
    )
    a = torch.nan_to_num(count.detach().cpu().to(torch.float64).flatten(), nan=0.0)
    m = torch.nan_to_num(contributors.detach().cpu().to(torch.float64).flatten(), nan=0.0)
    o = torch.nan_to_num(orig.detach().cpu().to(torch.float64).flatten(), nan=0.0)
    b = total.detach().cpu().to(torch.float64)
    q = total_sq.detach().cpu().to(torch.float64)
    # A count sum is an integer; round away quantisation noise, if any.
    a, m, o = a.round(), m.round(), o.round()
    # ``contributors`` is never withheld (it counts the rows), so a class nobody uploaded is "absent"
    # even when the release rule also refused its (empty) row.
    present = (a > 0) | ((m > 0) & withheld)
    released = present & ~withheld
    absent = tuple(int(c) for c in torch.nonzero(~present).flatten())
    withheld_cls = tuple(int(c) for c in torch.nonzero(withheld & present).flatten())
    rel_f = released.to(torch.float64)
    b = torch.where(released[:, None], b, torch.zeros_like(b))
    q = torch.where(released[:, None], q, torch.zeros_like(q))
    if not (torch.isfinite(b).all() and torch.isfinite(q).all()):
        raise NonFiniteError("released class sums contain NaN/Inf")
    safe_a = torch.where(released, a, torch.ones_like(a))
    mean = b / safe_a[:, None]
    denom = (a - m) if denominator == "contributors" else (a - 1.0)
    degenerate_mask = released & (denom <= 0)
    safe_denom = torch.where(denom > 0, denom, torch.ones_like(denom))
    var = (q - a[:, None] * mean * mean) / safe_denom[:, None]
    var = torch.where((released & ~degenerate_mask)[:, None], var.clamp_min(0.0), torch.zeros_like(var))
    std = var.sqrt()
    total_count = float((a * rel_f).sum())
    weight = a * rel_f / total_count if total_count > 0 else torch.zeros_like(a)
    return ClassMoments(
        count=a * rel_f,
        mean=mean * rel_f[:, None],
        var=var,
        std=std,
        contributors=m * rel_f,
        orig=o * rel_f,
        weight=weight,
        released=released,
        withheld=withheld_cls,
        absent=absent,
        single_contributor=tuple(int(c) for c in torch.nonzero(released & (m == 1)).flatten()),
        degenerate=tuple(int(c) for c in torch.nonzero(degenerate_mask).flatten()),
    )


# --------------------------------------------------------------------------------------------------
# Pseudo-graph
# --------------------------------------------------------------------------------------------------


def pseudo_graph_sizes(moments: ClassMoments, config: PseudoGraphConfig) -> Tensor:
    """Pseudo nodes per class ``n'_c`` (``(C,)`` long): ``ipc`` or ``ceil(p·O^c)``, 0 for skipped classes."""
    rel = moments.released
    if config.rate is not None:
        sizes = torch.ceil(config.rate * moments.orig).to(torch.long)
        sizes = torch.where(rel, sizes.clamp_min(1), torch.zeros_like(sizes))
    else:
        sizes = torch.full((moments.num_classes,), config.nodes_per_class, dtype=torch.long)
        if config.absent_classes == "skip":
            sizes = torch.where(rel, sizes, torch.zeros_like(sizes))
    return sizes


def _reset_linear(layer: nn.Linear, generator: torch.Generator) -> None:
    # PyTorch's default Linear init (kaiming_uniform with a=sqrt(5)), drawn from an explicit generator.
    bound = 1.0 / math.sqrt(layer.in_features)
    with torch.no_grad():
        layer.weight.uniform_(-bound, bound, generator=generator)
        if layer.bias is not None:
            layer.bias.uniform_(-bound, bound, generator=generator)


class LinkPredictor(nn.Module):
    r"""The MLP link predictor :math:`g_\theta: \mathbb{R}^{2F} \to \mathbb{R}` (spec §2.7.3).

    ``Linear(2F, H) -> BN -> ReLU -> Linear(H, H) -> BN -> ReLU -> Linear(H, 1)``, evaluated on all
    ordered pairs, with batch-norm statistics over the ``n'^2`` pairs (train mode throughout, as in the
    code). The first layer is split as :math:`W[x_i \| x_j] = W_a x_i + W_b x_j`, which is the same map
    without materialising the ``(n'^2, 2F)`` pair matrix.

    Shapes:
        x ``(n', F)`` -> logits ``(n', n')``.
    """

    def __init__(self, num_features: int, hidden: int, generator: torch.Generator) -> None:
        super().__init__()
        self.num_features = num_features
        self.lin1 = nn.Linear(2 * num_features, hidden)
        self.bn1 = nn.BatchNorm1d(hidden)
        self.lin2 = nn.Linear(hidden, hidden)
        self.bn2 = nn.BatchNorm1d(hidden)
        self.lin3 = nn.Linear(hidden, 1)
        for layer in (self.lin1, self.lin2, self.lin3):
            _reset_linear(layer, generator)

    def forward(self, x: Tensor) -> Tensor:
        n, f = x.shape
        w = self.lin1.weight
        left = x @ w[:, :f].T
        right = x @ w[:, f:].T
        h = (left[:, None, :] + right[None, :, :] + self.lin1.bias).reshape(n * n, -1)
        h = torch.relu(self.bn1(h))
        h = torch.relu(self.bn2(self.lin2(h)))
        return self.lin3(h).reshape(n, n)

    def __repr__(self) -> str:
        return f"LinkPredictor({self.num_features}, hidden={self.lin2.in_features})"


def _adam(params: list[Tensor], lr: float) -> torch.optim.Optimizer:
    try:
        return torch.optim.Adam(params, lr=lr, fused=True)
    except (RuntimeError, ValueError):
        return torch.optim.Adam(params, lr=lr)


def _edge_probabilities(predictor: LinkPredictor, x: Tensor) -> Tensor:
    if x.size(0) < 2:  # no pair to score (and batch norm needs more than one value)
        return torch.zeros(x.size(0), x.size(0), dtype=x.dtype, device=x.device)
    logits = predictor(x)
    p = torch.sigmoid((logits + logits.T) / 2)
    return p * (1.0 - torch.eye(p.size(0), dtype=p.dtype, device=p.device))


def _threshold(p: Tensor, delta: float, binary: bool) -> Tensor:
    keep = (p >= delta).to(p.dtype)
    keep = keep * (1.0 - torch.eye(p.size(0), dtype=p.dtype, device=p.device))
    return keep if binary else p * keep


def _dense_propagate(x: Tensor, adj: Tensor, hops: int) -> Tensor:
    n = adj.size(0)
    a = adj + torch.eye(n, dtype=adj.dtype, device=adj.device)
    inv = a.sum(dim=1).pow(-0.5)
    inv = torch.where(torch.isfinite(inv), inv, torch.zeros_like(inv))
    op = inv[:, None] * a * inv[None, :]
    out, cur = [x], x
    for _ in range(hops):
        cur = op @ cur
        out.append(cur)
    return torch.cat(out, dim=1)


def _smoothness(x: Tensor, adj: Tensor, kind: str) -> Tensor:
    total = adj.sum()
    if float(total.detach()) <= 0.0:
        return torch.zeros((), dtype=x.dtype, device=x.device)
    diff = x[:, None, :] - x[None, :, :]
    if kind == "laplacian":
        per_pair = diff.pow(2).sum(dim=-1)
    else:
        per_pair = torch.exp(-diff.pow(2) / 2).mean(dim=-1)
    loss = (adj * per_pair).sum() / total
    return -loss if kind == "kernel_neg" else loss


@dataclass
class PseudoGraph:
    """The global pseudo-graph ``G' = (X', A', Y')`` broadcast to every client, plus public seeds.

    Attributes:
        x: ``(n', F)`` float32 features; edge_index ``(2, E')`` long; edge_weight ``(E',)`` float32;
        y: ``(n',)`` long labels; num_classes: ``C``; model_seed: seed of the shared model
        initialisation (homogeneous models); info: generation diagnostics (not transmitted).
    """

    x: Tensor
    edge_index: Tensor
    edge_weight: Tensor
    y: Tensor
    num_classes: int
    model_seed: int = 0
    info: dict = field(default_factory=dict)

    _MAGIC = b"OPFGLPG1"

    @property
    def num_nodes(self) -> int:
        return int(self.x.size(0))

    def to_bytes(self) -> bytes:
        """The broadcast message: a versioned header and the raw little-endian arrays."""
        n, f = self.x.shape
        e = self.edge_index.size(1)
        header = self._MAGIC + struct.pack("<IIIIQ", n, f, e, self.num_classes, self.model_seed & (2**64 - 1))
        buf = io.BytesIO()
        buf.write(header)
        buf.write(self.x.detach().cpu().numpy().astype("<f4").tobytes())
        buf.write(self.edge_index.cpu().numpy().astype("<u4").tobytes())
        buf.write(self.edge_weight.detach().cpu().numpy().astype("<f4").tobytes())
        buf.write(self.y.cpu().numpy().astype("<u2").tobytes())
        return buf.getvalue()

    @classmethod
    def from_bytes(cls, payload: bytes) -> PseudoGraph:
        """Parse and validate a broadcast message (:class:`MalformedMessageError` on anything wrong)."""
        head = len(cls._MAGIC) + struct.calcsize("<IIIIQ")
        if len(payload) < head or payload[: len(cls._MAGIC)] != cls._MAGIC:
            raise MalformedMessageError("not an O-pFGL pseudo-graph message (bad magic or truncated)")
        n, f, e, c, seed = struct.unpack("<IIIIQ", payload[len(cls._MAGIC) : head])
        expected = head + 4 * n * f + 8 * e + 4 * e + 2 * n
        if len(payload) != expected:
            raise MalformedMessageError(f"pseudo-graph message has {len(payload)} bytes, expected {expected}")
        off = head
        x = np.frombuffer(payload, "<f4", n * f, off).reshape(n, f)
        off += 4 * n * f
        ei = np.frombuffer(payload, "<u4", 2 * e, off).reshape(2, e).astype(np.int64)
        off += 8 * e
        w = np.frombuffer(payload, "<f4", e, off)
        off += 4 * e
        y = np.frombuffer(payload, "<u2", n, off).astype(np.int64)
        if e and int(ei.max()) >= n:
            raise MalformedMessageError(f"pseudo-graph edge refers to node {int(ei.max())} >= n' = {n}")
        if n and int(y.max()) >= c:
            raise MalformedMessageError(f"pseudo-graph label {int(y.max())} >= C = {c}")
        if not (np.isfinite(x).all() and np.isfinite(w).all()):
            raise MalformedMessageError("pseudo-graph contains NaN/Inf")
        return cls(
            x=torch.from_numpy(x.copy()),
            edge_index=torch.from_numpy(ei),
            edge_weight=torch.from_numpy(w.copy()),
            y=torch.from_numpy(y),
            num_classes=int(c),
            model_seed=int(seed),
        )

    def digest(self) -> str:
        """SHA-256 of the broadcast bytes (used to check that A.5 clients built the same graph)."""
        return hashlib.sha256(self.to_bytes()).hexdigest()


@dataclass
class _Targets:
    """What the pseudo nodes are aligned to: the released classes with ``n'_c > 0`` and their moments."""

    classes: list[int]
    avg: Tensor  # (C', n') row j: 1/n'_c on the pseudo nodes of class classes[j]
    mean: Tensor  # (C', D)
    second: Tensor  # (C', D) std or var, per ``align_moment``
    weight: Tensor  # (C',) lambda_c
    multi: list[tuple[int, Tensor]]  # (j, node ids) of the classes with more than one pseudo node


def _generation_sizes(
    moments: ClassMoments, num_features: int, config: PseudoGraphConfig
) -> tuple[Tensor, int]:
    """``(n'_c per class, n')``, after checking the moment width and that some class is released."""
    d = moments.mean.size(1)
    if d != (config.hops + 1) * num_features:
        raise ConfigError(
            f"moment width {d} != (hops + 1) * num_features = {(config.hops + 1) * num_features}; "
            "clients and server must use the same hops"
        )
    sizes = pseudo_graph_sizes(moments, config)
    n = int(sizes.sum())
    if n == 0 or not bool(moments.released.any()):
        raise TrainingError(
            "pseudo-graph of size zero: no class statistic was released "
            f"(withheld by the release rule: {list(moments.withheld)}, absent everywhere: {list(moments.absent)})"
        )
    return sizes, n


def _alignment_targets(
    moments: ClassMoments, sizes: Tensor, labels: Tensor, config: PseudoGraphConfig, dev: torch.device
) -> _Targets:
    n = int(labels.numel())
    target = moments.std if config.align_moment == "std" else moments.var
    cls_list = [c for c in moments.released_classes if int(sizes[c]) > 0]
    avg = torch.zeros(len(cls_list), n)
    for j, c in enumerate(cls_list):
        avg[j, labels == c] = 1.0 / float(sizes[c])
    multi = [
        (j, torch.nonzero(labels == c).flatten().to(dev)) for j, c in enumerate(cls_list) if int(sizes[c]) > 1
    ]
    return _Targets(
        classes=cls_list,
        avg=avg.to(dev),
        mean=moments.mean[cls_list].to(dev, torch.float32),
        second=target[cls_list].to(dev, torch.float32),
        weight=moments.weight[cls_list].to(dev, torch.float32),
        multi=multi,
    )


def _generation_losses(
    predictor: LinkPredictor, x: Tensor, tg: _Targets, config: PseudoGraphConfig
) -> tuple[Tensor, Tensor, Tensor]:
    """``(total, alignment, smoothness)`` of the current pseudo-graph."""
    p = _edge_probabilities(predictor, x)
    adj = _threshold(p, config.threshold, config.binary_edges)
    xp = _dense_propagate(x, adj, config.hops)
    per_class = (tg.avg @ xp - tg.mean).pow(2).mean(dim=1)
    align = (tg.weight * per_class).sum()
    for j, idx in tg.multi:
        rows = xp[idx]
        second = rows.std(dim=0) if config.align_moment == "std" else rows.var(dim=0)
        align = align + tg.weight[j] * (second - tg.second[j]).pow(2).mean()
    smt = _smoothness(x, adj, config.smoothness)
    return config.align_weight * align + config.smooth_weight * smt, align, smt


def _optimise(predictor: LinkPredictor, x: Tensor, tg: _Targets, config: PseudoGraphConfig) -> float:
    """The alternating schedule of ``θ`` and ``X'`` steps, in place; the alignment loss at iteration 0."""
    opt_x = _adam([x], config.lr_feat)
    opt_t = _adam(list(predictor.parameters()), config.lr_adj)
    theta = [p for p in predictor.parameters()]
    first_align = float("nan")
    for i in range(config.loops):
        # Only the optimiser that steps at iteration i needs its gradient: computing just that one is
        # the same update as computing both and zeroing both (the other optimiser does not step).
        adj_step = i % config.period < config.adj_steps
        wrt = theta if adj_step else [x]
        loss, align, _ = _generation_losses(predictor, x, tg, config)
        if not torch.isfinite(loss):
            raise NonFiniteError(f"pseudo-graph loss became non-finite at iteration {i}")
        grads = torch.autograd.grad(loss, wrt, allow_unused=True) if loss.requires_grad else [None] * len(wrt)
        for param, grad in zip(wrt, grads, strict=True):
            param.grad = grad
        (opt_t if adj_step else opt_x).step()
        if i == 0:
            first_align = float(align.detach())
    return first_align


def _final_pseudo_graph(
    predictor: LinkPredictor,
    x: Tensor,
    labels: Tensor,
    tg: _Targets,
    config: PseudoGraphConfig,
    num_classes: int,
    model_seed: int,
    first_align: float,
) -> PseudoGraph:
    """Threshold the optimised edge probabilities into the graph to broadcast, with diagnostics."""
    with torch.no_grad():
        p = _edge_probabilities(predictor, x)
        adj = _threshold(p, config.threshold, config.binary_edges)
        _, final_align, final_smt = _generation_losses(predictor, x, tg, config)
        row, col = torch.nonzero(adj > 0, as_tuple=True)
        weight = adj[row, col]
        x_out = x.detach()
        if not torch.isfinite(x_out).all():
            raise NonFiniteError("pseudo-graph features became non-finite")
    return PseudoGraph(
        x=x_out.cpu().float(),
        edge_index=torch.stack([row, col]).cpu().long(),
        edge_weight=weight.cpu().float(),
        y=labels.cpu(),
        num_classes=num_classes,
        model_seed=int(model_seed),
        info={
            "nodes": int(labels.numel()),
            "edges": int(row.numel()),
            "align_loss_first": first_align,
            "align_loss_last": float(final_align),
            "smoothness_last": float(final_smt),
            "classes": tg.classes,
        },
    )


def generate_pseudo_graph(
    moments: ClassMoments,
    num_features: int,
    config: PseudoGraphConfig,
    *,
    seed: int,
    model_seed: int = 0,
    device: torch.device | str = "cpu",
) -> PseudoGraph:
    r"""Optimise the global pseudo-graph against the aggregated class moments (spec §2.7).

    .. math::
        A'_{ij} = P_{ij}\,1[P_{ij} \ge \delta],\; P = \sigma\big((E + E^\top)/2\big),\; E_{ij} = g_\theta(x'_i \| x'_j)

        \min_{X', \theta}\; \alpha_a \sum_c \lambda_c\big[\mathrm{MSE}(\mu'^c, \mu^c)
            + 1[n'_c > 1]\,\mathrm{MSE}(s'^c, s^c)\big] + \alpha_s L_{smt}

    with :math:`X'^{prop} = [X' \| \tilde A' X' \| \dots]` and ``X' ~ N(0, 1)`` drawn from ``seed``.
    The optimisation alternates ``adj_steps`` steps of ``θ`` and ``period - adj_steps`` steps of ``X'``.

    Args:
        moments: the aggregated class moments (server input: sums only).
        num_features: ``F`` (raw features; moments have ``D = (h+1)F`` columns).
        config: :class:`PseudoGraphConfig`.
        seed: generation seed (public; shared by clients in the A.5 variant).
        model_seed: the shared model-initialisation seed to broadcast.
        device: where to optimise.

    Shapes:
        moments.mean ``(C, (h+1)F)`` -> ``PseudoGraph`` with ``x (n', F)``.

    Raises:
        TrainingError: no class is released (a pseudo-graph of size zero).
    """
    sizes, n = _generation_sizes(moments, num_features, config)
    dev = torch.device(device)
    gen = torch.Generator().manual_seed(int(seed))
    labels = torch.repeat_interleave(torch.arange(moments.num_classes), sizes)
    x = torch.randn(n, num_features, generator=gen).to(dev).requires_grad_(True)
    predictor = LinkPredictor(num_features, config.hidden, gen).to(dev).train()
    targets = _alignment_targets(moments, sizes, labels, config, dev)
    first_align = _optimise(predictor, x, targets, config)
    return _final_pseudo_graph(
        predictor, x, labels, targets, config, moments.num_classes, model_seed, first_align
    )


# --------------------------------------------------------------------------------------------------
# From the released sums (the server step, or every client under variant A.5)
# --------------------------------------------------------------------------------------------------


def seed_from(generator: torch.Generator) -> int:
    """A seed drawn from ``generator`` (the server's public seeds; a heterogeneous client's own model seed)."""
    return int(torch.randint(0, 2**62, (1,), generator=generator))


def small_classes(sums: Any, options: OPFGLOptions) -> torch.Tensor:
    """Released classes below the server-side ``min_class_count`` (public: from the summed counts)."""
    count = torch.nan_to_num(sums["count"].to(torch.float64), nan=0.0)
    return (count > 0) & (count < options.min_class_count)


def released_moments(sums: Any, options: OPFGLOptions) -> ClassMoments:
    """The class moments of the released ``stats`` sum (withheld rows and small classes skipped)."""
    withheld = small_classes(sums, options)
    for name in ("count", "sum", "sumsq", "orig"):
        rows = sums.withheld_rows(name)
        if rows is not None:
            withheld = withheld | rows.bool()
    return moments_from_sums(
        sums["count"],
        sums["sum"],
        sums["sumsq"],
        sums["contrib"],
        sums["orig"],
        withheld_rows=withheld,
        denominator=options.variance_denominator,
    )


def pseudo_graph_from_sums(
    sums: Any,
    options: OPFGLOptions,
    *,
    num_features: int,
    device: torch.device | str,
    generation_seed: int,
    model_seed: int,
) -> tuple[PseudoGraph | None, dict]:
    """Moments and pseudo-graph from released sums; ``None`` graph when nothing was released.

    Returns:
        The graph (``None`` under ``on_empty="local"`` when no class was released) and the public report
        (released/withheld/absent classes, clip rate, generation diagnostics).
    """
    moments = released_moments(sums, options)
    report = {
        "released_classes": moments.released_classes,
        "withheld_classes": list(moments.withheld),
        "below_min_count_classes": [int(c) for c in torch.nonzero(small_classes(sums, options)).flatten()],
        "absent_classes": list(moments.absent),
        "single_contributor_classes": list(moments.single_contributor),
        "degenerate_variance_classes": list(moments.degenerate),
        "class_counts": [int(v) for v in moments.count],
        "class_contributors": [int(v) for v in moments.contributors],
        "clipped_values": {k: int(v) for k, v in getattr(sums, "clip_counts", {}).items()},
    }
    clip = sums["clip"].to(torch.float64)
    report["feature_clip_rate"] = float(clip[0] / clip[1]) if float(clip[1]) > 0 else 0.0
    report["feature_clipped"] = int(clip[0])
    try:
        graph = generate_pseudo_graph(
            moments,
            num_features,
            options.pseudo_graph_config(),
            seed=generation_seed,
            model_seed=model_seed,
            device=device,
        )
    except TrainingError:
        if options.on_empty == "raise":
            raise
        report["pseudo_graph"] = "empty: clients train local models only"
        return None, report
    report["pseudo_graph"] = dict(graph.info)
    return graph, report
