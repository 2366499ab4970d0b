"""AdaFGL step 2, learned parts: the homophilous and heterophilous modules of one client.

Client-side helpers of :mod:`securefgl.algorithms.adafgl` (spec ``shared/specs/adafgl.md`` §2.2,
§7.14-§7.20).
Every function here is local to one client and sends nothing.

Shapes: ``N`` local nodes, ``F`` features, ``C`` classes, ``K_p`` smoothing hops,
``Fs = (K_p + 1) F`` smoothed-feature width.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

import torch
import torch.nn.functional as F
from torch import nn

from securefgl.errors import ConfigError

__all__ = [
    "AdaFGLLocalModel",
    "LearnableMessagePassing",
    "LocalOutcome",
    "LocalStepOptions",
    "PReLUMLP",
    "SmoothedFeatures",
    "SmoothedInput",
    "combine_predictions",
    "cpu_generator",
]

_EPS = 1e-9
#: Feature matrices at most this dense are multiplied as sparse matrices (step 2's first layers).
SPARSE_MAX_DENSITY = 0.3


def _coo(indices: torch.Tensor, values: torch.Tensor, shape: tuple[int, int] | torch.Size) -> torch.Tensor:
    """A sparse COO matrix built from indices we produced ourselves (in range by construction)."""
    return torch.sparse_coo_tensor(indices, values, tuple(shape), check_invariants=False)


def _dropout(x: torch.Tensor, p: float, training: bool, generator: torch.Generator | None) -> torch.Tensor:
    """Inverted dropout drawing its mask from an explicit generator (no global RNG)."""
    if not training or p <= 0.0:
        return x
    keep = torch.rand(x.shape, generator=generator, device=x.device, dtype=x.dtype) >= p
    return x * keep / (1.0 - p)


def _xavier(shape: tuple[int, int], generator: torch.Generator | None) -> torch.Tensor:
    w = torch.empty(shape)
    return nn.init.xavier_uniform_(w, gain=nn.init.calculate_gain("relu"), generator=generator)


class _Tail(nn.Module):
    """``(PReLU -> dropout -> Linear)`` per step of ``dims``: what follows an MLP's first linear layer."""

    def __init__(self, dims: tuple[int, ...], dropout: float, generator: torch.Generator | None) -> None:
        super().__init__()
        self.dropout = float(dropout)
        self.acts = nn.ModuleList(nn.PReLU(num_parameters=1, init=0.25) for _ in dims[:-1])
        self.lins = nn.ModuleList(nn.Linear(a, b) for a, b in zip(dims[:-1], dims[1:], strict=True))
        with torch.no_grad():
            for lin in self.lins:
                lin.weight.copy_(_xavier(tuple(lin.weight.shape), generator))
                lin.bias.zero_()

    def forward(self, h: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
        for act, lin in zip(self.acts, self.lins, strict=True):
            h = lin(_dropout(act(h), self.dropout, self.training, generator))
        return h


class PReLUMLP(nn.Module):
    """MLP: Linear, then (PReLU -> dropout -> Linear) per further layer; one PReLU slope each, init 0.25.

    Weights are Xavier-uniform (gain relu), biases zero (spec §4). Dropout acts on hidden activations
    only, so the first layer is linear in the input (which :class:`SmoothedInput` exploits).

    Args:
        dims: layer widths, e.g. ``(F, 64, 64, C)`` (3 layers).
        dropout: dropout probability after every hidden activation (default: 0.5).
        generator: initialises the weights.

    Shapes:
        ``(N, dims[0])`` -> ``(N, dims[-1])``.
    """

    def __init__(
        self, dims: tuple[int, ...], *, dropout: float = 0.5, generator: torch.Generator | None = None
    ):
        super().__init__()
        if len(dims) < 2:
            raise ConfigError(f"an MLP needs at least input and output widths, got {dims!r}")
        self.first = nn.Linear(dims[0], dims[1])
        with torch.no_grad():
            self.first.weight.copy_(_xavier((dims[1], dims[0]), generator))
            self.first.bias.zero_()
        self.tail = _Tail(tuple(dims[1:]), dropout, generator)

    def forward(self, x: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
        return self.tail(self.first(x), generator)

    def __repr__(self) -> str:
        dims = [self.first.in_features, self.first.out_features] + [
            lin.out_features for lin in self.tail.lins
        ]
        return f"PReLUMLP({dims}, dropout={self.tail.dropout})"


class SmoothedFeatures:
    r"""The eq. (7) input :math:`X_s = [X \| \hat{\mathcal A}X \| \dots \| \hat{\mathcal A}^{K_p}X]`, never materialised.

    A linear map of :math:`X_s` is evaluated in factored form (Horner's scheme):

    .. math::
        X_s W = \sum_{k=0}^{K_p} \hat{\mathcal A}^k (X W_k)
        = X W_0 + \hat{\mathcal A}\big(X W_1 + \hat{\mathcal A}(\dots)\big)

    with :math:`W_k` the rows of hop :math:`k`. Sparse features (bag-of-words) stay sparse, so a first
    layer costs :math:`O(\mathrm{nnz}(X) K_p h + K_p |E| h)` time and :math:`O(\mathrm{nnz}(X))` memory instead
    of :math:`O(N K_p F h)` and :math:`O(N K_p F)`.

    Args:
        x: ``(N, F)`` features.
        operator: sparse ``(N, N)`` GraphOperator.
        num_hops: :math:`K_p`.
        sparse_max_density: treat ``X`` as sparse when its density is at most this (default:
            :data:`SPARSE_MAX_DENSITY`).
    """

    def __init__(
        self,
        x: torch.Tensor,
        operator: torch.Tensor,
        num_hops: int,
        *,
        sparse_max_density: float = SPARSE_MAX_DENSITY,
    ):
        if num_hops < 0:
            raise ConfigError(f"num_hops must be >= 0, got {num_hops!r}")
        self.x = x
        self.operator = operator.coalesce()
        self.num_hops = int(num_hops)
        nz = x != 0
        density = float(nz.sum()) / max(1, x.numel())
        self._bags: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None
        if density <= sparse_max_density:
            rows, cols = nz.nonzero(as_tuple=True)  # row-major order
            counts = torch.bincount(rows, minlength=x.size(0))
            offsets = torch.cumsum(counts, 0) - counts
            self._bags = (cols, offsets, x[rows, cols])

    @property
    def num_features(self) -> int:
        return int(self.x.size(1))

    def dense(self) -> torch.Tensor:
        """The materialised ``(N, (K_p + 1) F)`` matrix (for checks and small graphs)."""
        out, cur = [self.x], self.x
        for _ in range(self.num_hops):
            cur = torch.sparse.mm(self.operator, cur)
            out.append(cur)
        return torch.cat(out, dim=1)

    def apply(self, weight: torch.Tensor) -> torch.Tensor:
        """:math:`X_s W` for a hop-packed ``weight`` of shape ``(F, (K_p + 1) H)`` (hop-major columns) -> ``(N, H)``."""
        k1 = self.num_hops + 1
        if self._bags is not None:
            # Sparse X: a weighted bag-sum of weight rows (fast forward and backward on CPU and CUDA).
            cols, offsets, vals = self._bags
            xw = F.embedding_bag(cols, weight, offsets, mode="sum", per_sample_weights=vals)
        else:
            xw = self.x @ weight
        z = xw.view(xw.size(0), k1, -1)
        r = z[:, k1 - 1]
        for k in range(k1 - 2, -1, -1):
            r = torch.sparse.mm(self.operator, r) + z[:, k]
        return r


class SmoothedInput(nn.Module):
    """The first linear layers of several MLPs on the smoothed features, packed into one parameter.

    Each MLP ``name`` gets :math:`X_s W_{name}^\top + b_{name}` with :math:`W_{name}` of shape
    ``(h, (K_p + 1) F)`` initialised Xavier-uniform (gain relu) as an ``nn.Linear`` would be; the packed
    ``weight`` ``(F, (K_p + 1) H)`` holds all of them so that one sparse product serves every MLP.

    Args:
        num_features: ``F``.
        num_hops: :math:`K_p`.
        widths: output width per MLP, in order.
        generator: initialises the weights.
    """

    def __init__(
        self,
        num_features: int,
        num_hops: int,
        widths: dict[str, int],
        *,
        generator: torch.Generator | None = None,
    ) -> None:
        super().__init__()
        f, k1, total = num_features, num_hops + 1, sum(widths.values())
        self.num_features, self.num_hops = f, num_hops
        self.widths = dict(widths)
        packed = torch.empty(f, k1, total)
        off = 0
        for h in widths.values():
            w = _xavier((h, k1 * f), generator)  # nn.Linear layout (out, in), in = hop-major [X, AX, ...]
            packed[:, :, off : off + h] = w.view(h, k1, f).permute(2, 1, 0)
            off += h
        self.weight = nn.Parameter(packed.reshape(f, k1 * total))
        self.bias = nn.Parameter(torch.zeros(total))

    def linear_weight(self, name: str) -> torch.Tensor:
        """The ``nn.Linear``-layout weight ``(h, (K_p + 1) F)`` of MLP ``name`` (for checks)."""
        k1, total = self.num_hops + 1, sum(self.widths.values())
        off = 0
        for key, h in self.widths.items():
            if key == name:
                w = self.weight.view(self.num_features, k1, total)[:, :, off : off + h]
                return w.permute(2, 1, 0).reshape(h, k1 * self.num_features)
            off += h
        raise ConfigError(f"no smoothed input named {name!r}; valid: {', '.join(self.widths)}")

    def forward(self, xs: SmoothedFeatures | torch.Tensor) -> dict[str, torch.Tensor]:
        if isinstance(xs, SmoothedFeatures):
            out = xs.apply(self.weight)
        else:  # dense (N, (K_p + 1) F) with hop-major columns
            k1, total = self.num_hops + 1, sum(self.widths.values())
            w = (
                self.weight.view(self.num_features, k1, total)
                .transpose(0, 1)
                .reshape(k1 * self.num_features, total)
            )
            out = xs @ w
        out = out + self.bias
        return dict(zip(self.widths, out.split(list(self.widths.values()), dim=1), strict=True))


def _cos_no_diag_dense(h: torch.Tensor) -> torch.Tensor:
    hn = h / h.norm(dim=1, keepdim=True).clamp_min(_EPS)
    c = hn @ hn.T
    return c * (1.0 - torch.eye(h.size(0), device=h.device, dtype=h.dtype))


def _scale_signed(r: torch.Tensor, compat_c1_scaling: bool) -> torch.Tensor:
    r"""Mean-centre and scale monotonically to [-1, 1] (spec §7.16).

    :math:`R_s = (R-\mu)/(M-\mu)` where :math:`R > \mu`, else :math:`(R-\mu)/\mu` (``compat_c1_scaling``:
    :math:`-R/\mu`, [C1]'s non-monotone branch). Degenerate denominators give 0 (never NaN).
    """
    mu = r.mean()
    m = r.max()
    centred = r - mu
    pos = centred / (m - mu).clamp_min(_EPS)
    neg = -r / mu.clamp_min(_EPS) if compat_c1_scaling else centred / mu.clamp_min(_EPS)
    out = torch.where(centred > 0, pos, neg)
    return torch.where(torch.isfinite(out), out, torch.zeros_like(out))


class LearnableMessagePassing(nn.Module):
    r"""Learnable message passing of the heterophilous module, eqs. (11)-(12) with L = 1 (spec §7.16).

    .. math::
        R = \beta \tilde P^{(0)} + (1-\beta)\,\mathrm{CosNoDiag}(\mathrm{softmax}(H_m)),\quad
        R_s = \mathrm{scale}(R - \mu),\ \mathrm{diag}(R_s) = 1 \\
        H_{pos} = \mathrm{softmax}_{row}(\mathrm{PReLU}_+(R_s) H_m),\quad
        H_{neg} = \mathrm{softmax}_{row}(\mathrm{PReLU}_-(-R_s) H_m),\quad
        H_m' = \tfrac12\big((H_{pos} - H_{neg}) + H_m\big)

    Dense over all :math:`N^2` pairs when :math:`\tilde P^{(0)}` is a dense matrix; when it is sparse, restricted
    to its pattern :math:`\Omega` plus the diagonal (the large-client variant: :math:`O(|\Omega| C)` memory,
    mean and max over :math:`\Omega`), which equals the dense form when :math:`\Omega` holds every pair.

    Args:
        beta: weight of :math:`\tilde P^{(0)}` (default: 0.2).
        compat_c1_scaling: [C1]'s non-monotone negative branch :math:`-R/\mu` (default: False).
    """

    def __init__(self, beta: float = 0.2, *, compat_c1_scaling: bool = False) -> None:
        super().__init__()
        if not 0.0 <= beta <= 1.0:
            raise ConfigError(f"beta must be in [0, 1], got {beta!r}")
        self.beta = float(beta)
        self.compat_c1_scaling = bool(compat_c1_scaling)
        self.pos_sign = nn.PReLU(num_parameters=1, init=0.25)
        self.neg_sign = nn.PReLU(num_parameters=1, init=0.25)

    def forward(self, h_m: torch.Tensor, p0: torch.Tensor) -> torch.Tensor:
        """Args: ``h_m`` ``(N, C)`` logits; ``p0`` dense ``(N, N)`` or sparse ``(N, N)`` whose pattern is the support."""
        if p0.is_sparse:
            return self._forward_sparse(h_m, p0)
        n = h_m.size(0)
        r = self.beta * p0 + (1.0 - self.beta) * _cos_no_diag_dense(F.softmax(h_m, dim=1))
        rs = _scale_signed(r, self.compat_c1_scaling)
        eye = torch.eye(n, device=h_m.device, dtype=h_m.dtype)
        rs = rs * (1.0 - eye) + eye
        h_pos = F.softmax(self.pos_sign(rs) @ h_m, dim=1)
        h_neg = F.softmax(self.neg_sign(-rs) @ h_m, dim=1)
        return ((h_pos - h_neg) + h_m) / 2.0

    def _forward_sparse(self, h_m: torch.Tensor, p0: torch.Tensor) -> torch.Tensor:
        n = h_m.size(0)
        p0 = p0.coalesce()
        diag = torch.arange(n, device=h_m.device).repeat(2, 1)
        idx = torch.cat([p0.indices(), diag], dim=1)
        vals = torch.cat([p0.values().to(h_m.dtype), torch.zeros(n, device=h_m.device, dtype=h_m.dtype)])
        sup = _coo(idx, vals, (n, n)).coalesce()
        row, col = sup.indices()
        s = F.softmax(h_m, dim=1)
        sn = s / s.norm(dim=1, keepdim=True).clamp_min(_EPS)
        cos = (sn[row] * sn[col]).sum(dim=1)
        is_diag = row == col
        cos = torch.where(is_diag, torch.zeros_like(cos), cos)
        r = self.beta * sup.values() + (1.0 - self.beta) * cos
        rs = _scale_signed(r, self.compat_c1_scaling)
        rs = torch.where(is_diag, torch.ones_like(rs), rs)
        pos = self.pos_sign(rs)
        neg = self.neg_sign(-rs)
        agg_pos = torch.zeros_like(h_m).index_add(0, row, pos[:, None] * h_m[col])
        agg_neg = torch.zeros_like(h_m).index_add(0, row, neg[:, None] * h_m[col])
        return ((F.softmax(agg_pos, dim=1) - F.softmax(agg_neg, dim=1)) + h_m) / 2.0


class AdaFGLLocalModel(nn.Module):
    r"""The personalised model of one client: homophilous module + heterophilous module (spec §2.2).

    .. math::
        \tilde H_{ho} = \mathrm{MLP}_{ho}(X_s), \quad
        H_f = \mathrm{MLP}_f(X), \quad \tilde H_{he} = \mathrm{MLP}_{he}(X_s), \quad
        H_m = \mathrm{LMP}(\mathrm{MLP}_{msg}(X_s \text{ or } \tilde H_{he}),\ \tilde P^{(0)})

    :math:`\mathrm{MLP}_{ho}` has 2 layers, the others 3 ([C1][C2]); the first layers of the MLPs on
    :math:`X_s` share one packed parameter (:class:`SmoothedInput`).

    Args:
        num_features: ``F``.
        num_classes: ``C``.
        num_hops: ``K_p``; the smoothed input is ``(K_p + 1) F`` wide (default: 3).
        hidden: hidden width (default: 64).
        dropout: (default: 0.5).
        beta: eq. (11) (default: 0.2).
        feature_embedding: keep :math:`H_f` (ablation "w/o T.F." when False).
        message_passing: keep :math:`H_m` (ablation "w/o L.M." when False).
        he_input: input of :math:`\mathrm{MLP}_{msg}`: ``"smoothed_feats"`` ([C1][C2]) or ``"H_tilde"``
            (the paper's :math:`H_m^{(0)} = \tilde H`).
        compat_c1_scaling: see :class:`LearnableMessagePassing`.
        generator: initialises the weights.

    Shapes:
        x ``(N, F)``, xs :class:`SmoothedFeatures` or dense ``(N, (K_p + 1) F)`` -> dict of ``(N, C)`` logits
        ``ho``, ``he`` (+ ``f``, ``m``).
    """

    def __init__(
        self,
        num_features: int,
        num_classes: int,
        *,
        num_hops: int = 3,
        hidden: int = 64,
        dropout: float = 0.5,
        beta: float = 0.2,
        feature_embedding: bool = True,
        message_passing: bool = True,
        he_input: Literal["smoothed_feats", "H_tilde"] = "smoothed_feats",
        compat_c1_scaling: bool = False,
        generator: torch.Generator | None = None,
    ) -> None:
        super().__init__()
        if he_input not in ("smoothed_feats", "H_tilde"):
            raise ConfigError(f"he_input must be 'smoothed_feats' or 'H_tilde', got {he_input!r}")
        self.he_input = he_input
        widths = {"ho": hidden, "he": hidden}
        if message_passing and he_input == "smoothed_feats":
            widths["msg"] = hidden
        self.inputs = SmoothedInput(num_features, num_hops, widths, generator=generator)
        self.ho = _Tail((hidden, num_classes), dropout, generator)
        self.he = _Tail((hidden, hidden, num_classes), dropout, generator)
        self.feat = (
            PReLUMLP((num_features, hidden, hidden, num_classes), dropout=dropout, generator=generator)
            if feature_embedding
            else None
        )
        self.msg: nn.Module | None = None
        self.lmp: LearnableMessagePassing | None = None
        if message_passing:
            if he_input == "smoothed_feats":
                self.msg = _Tail((hidden, hidden, num_classes), dropout, generator)
            else:
                self.msg = PReLUMLP(
                    (num_classes, hidden, hidden, num_classes), dropout=dropout, generator=generator
                )
            self.lmp = LearnableMessagePassing(beta, compat_c1_scaling=compat_c1_scaling)

    def forward(
        self,
        x: torch.Tensor,
        xs: SmoothedFeatures | torch.Tensor,
        p0: torch.Tensor | None,
        *,
        generator: torch.Generator | None = None,
        homo: bool = True,
        hete: bool = True,
    ) -> dict[str, torch.Tensor]:
        """Logits of every active branch (``p0`` ``None`` skips the message passing)."""
        h1 = self.inputs(xs)
        out: dict[str, torch.Tensor] = {}
        if homo:
            out["ho"] = self.ho(h1["ho"], generator)
        if hete:
            out["he"] = self.he(h1["he"], generator)
            if self.feat is not None:
                out["f"] = self.feat(x, generator)
            if self.msg is not None and self.lmp is not None and p0 is not None:
                h_m = self.msg(h1["msg"] if "msg" in h1 else out["he"], generator)
                out["m"] = self.lmp(h_m, p0)
        return out


def combine_predictions(
    logits: Mapping[str, torch.Tensor],
    p_hat: torch.Tensor,
    hcs: float,
    *,
    mode: Literal["soft", "hard", "mean"] = "soft",
    hard_threshold: float = 0.9,
    compat_double_softmax: bool = False,
) -> torch.Tensor:
    r"""Eqs. (9), (13), (17): the final class distribution :math:`\hat Y`.

    .. math::
        \hat Y_{ho} = \tfrac12(\mathrm{softmax}(\tilde H_{ho}) + \hat P),\quad
        \hat Y_{he} = \mathrm{mean}(\mathrm{softmax}(H_f), \mathrm{softmax}(\tilde H_{he}), \mathrm{softmax}(H_m)),\quad
        \hat Y = \mathrm{HCS}\,\hat Y_{ho} + (1-\mathrm{HCS})\,\hat Y_{he}

    ``mode="hard"`` ([C1]): :math:`\hat Y_{ho}` if HCS >= ``hard_threshold`` else :math:`\hat Y_{he}`;
    ``mode="mean"`` (ablation "w/o HCS"): the plain average. ``compat_double_softmax`` applies the
    softmax a second time to :math:`\hat P` in eq. (9), as [C1][C2] do.

    Shapes:
        each logit ``(N, C)``, p_hat ``(N, C)`` -> ``(N, C)`` rows summing to 1.
    """
    y_ho = None
    if "ho" in logits:
        prior = F.softmax(p_hat, dim=1) if compat_double_softmax else p_hat
        y_ho = (F.softmax(logits["ho"], dim=1) + prior) / 2.0
    he_parts = [F.softmax(logits[k], dim=1) for k in ("f", "he", "m") if k in logits]
    y_he = torch.stack(he_parts).mean(dim=0) if he_parts else None
    if y_ho is None and y_he is None:
        raise ConfigError("combine_predictions needs at least one of the homophilous/heterophilous outputs")
    if y_ho is None:
        return y_he  # type: ignore[return-value]
    if y_he is None:
        return y_ho
    if mode == "soft":
        return hcs * y_ho + (1.0 - hcs) * y_he
    if mode == "hard":
        return y_ho if hcs >= hard_threshold else y_he
    if mode == "mean":
        return (y_ho + y_he) / 2.0
    raise ConfigError(f"combine mode must be 'soft', 'hard' or 'mean', got {mode!r}")


@dataclass(frozen=True)
class LocalStepOptions:
    """The step-2 options the training loop needs (a view of :class:`AdaFGLOptions`)."""

    epochs: int = 200
    lr: float = 0.01
    weight_decay: float = 5e-4
    dropout: float = 0.5
    hidden: int = 64
    num_hops: int = 3
    beta: float = 0.2
    he_input: Literal["smoothed_feats", "H_tilde"] = "smoothed_feats"
    compat_c1_scaling: bool = False
    knowledge_preserving: bool = True
    knowledge_loss: Literal["mse", "frobenius"] = "mse"
    feature_embedding: bool = True
    message_passing: bool = True
    loss: Literal["branches", "mixture"] = "branches"
    combine: Literal["soft", "hard", "mean"] = "soft"
    hard_threshold: float = 0.9
    compat_double_softmax: bool = False
    selection: Literal["best_val", "last"] = "best_val"
    blend_grid: tuple[float, ...] = ()


@dataclass
class LocalOutcome:
    """What step 2 leaves on one client (never sent anywhere).

    ``blends`` maps each non-zero weight :math:`\\gamma` of ``blend_grid`` to the blend
    :math:`(1-\\gamma)\\hat Y + \\gamma\\hat P` at the epoch where that blend did best on the client's
    validation nodes (``selection="best_val"``), so that every weight is chosen by the same rule as
    :math:`\\hat Y` itself.
    """

    probs: torch.Tensor
    best_epoch: int
    val_correct: int
    val_total: int
    test_correct: int
    test_total: int
    train_correct: int
    train_total: int
    history: list[float] = field(default_factory=list)
    blends: dict[float, torch.Tensor] = field(default_factory=dict)


def cpu_generator(generator: torch.Generator) -> torch.Generator:
    """``generator`` itself on the CPU; else a CPU generator seeded from it (weights are created on the CPU)."""
    if generator.device.type == "cpu":
        return generator
    seed = int(torch.randint(0, 2**62, (1,), generator=generator, device=generator.device))
    return torch.Generator().manual_seed(seed)


def _local_model(
    num_features: int, num_classes: int, opts: LocalStepOptions, generator: torch.Generator
) -> AdaFGLLocalModel:
    """A fresh step-2 model of one client, initialised from ``generator``."""
    return AdaFGLLocalModel(
        num_features,
        num_classes,
        num_hops=opts.num_hops,
        hidden=opts.hidden,
        dropout=opts.dropout,
        beta=opts.beta,
        feature_embedding=opts.feature_embedding,
        message_passing=opts.message_passing,
        he_input=opts.he_input,
        compat_c1_scaling=opts.compat_c1_scaling,
        generator=generator,
    )
