"""O-pFGL client stages: Stage 1 on the pseudo-graph, Stage 2 with node-adaptive distillation.

Internal module of the client half of :mod:`securefgl.algorithms.opfgl` (spec ``shared/specs/opfgl.md``
§2.9-2.10). All of it runs on one client, on that client's data and the broadcast pseudo-graph; nothing is
sent.

Paper: Yan et al., *Towards Federated Graph Learning in One-shot Communication* (O-pFGL),
https://arxiv.org/abs/2411.11304
"""

from __future__ import annotations

import contextlib
import copy
import functools
import inspect
import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch_geometric.nn.conv import MessagePassing

from securefgl.algorithms.opfgl.options import StageConfig
from securefgl.errors import ConfigError, NonFiniteError
from securefgl.training.sparse import SparseOperator

__all__ = [
    "LocalGraph",
    "StageConfig",
    "StageResult",
    "distillation_weights",
    "forward",
    "train_stage1",
    "train_stage1_shared",
    "train_stage2",
]


@dataclass
class StageResult:
    """Outcome of a stage: the best validation accuracy, the step it was reached at, steps run."""

    best_val: float
    best_iter: int
    iters: int
    history: list[tuple[int, float]] = field(default_factory=list)


def _accepts_edge_weight(model: nn.Module) -> bool:
    try:
        return "edge_weight" in inspect.signature(model.forward).parameters
    except (TypeError, ValueError):
        return False


@contextlib.contextmanager
def _weighted_convs(model: nn.Module, edge_weight: Tensor) -> Iterator[None]:
    """Make every PyG convolution of ``model`` that takes ``edge_weight`` use it for one call.

    Used only for models whose ``forward`` has no ``edge_weight`` argument; each such layer's bound
    ``forward`` is wrapped for the duration of the ``with`` block and restored afterwards.
    """
    patched = []
    for module in model.modules():
        if (
            isinstance(module, MessagePassing)
            and "edge_weight" in inspect.signature(module.forward).parameters
        ):
            original = module.forward
            module.forward = functools.partial(original, edge_weight=edge_weight)  # type: ignore[method-assign]
            patched.append(module)
    try:
        yield
    finally:
        for module in patched:
            del module.forward


def forward(model: nn.Module, x: Tensor, edge_index: Tensor, edge_weight: Tensor | None = None) -> Tensor:
    """Call a securefgl/PyG-style model on a (possibly weighted) graph.

    ``edge_weight`` is passed to ``model.forward`` when it accepts one; otherwise to every PyG convolution
    inside the model that accepts one (GCNConv, SGConv, ...). Layers without edge weights ignore them.
    """
    if edge_weight is None:
        return model(x, edge_index)
    if _accepts_edge_weight(model):
        return model(x, edge_index, edge_weight=edge_weight)
    with _weighted_convs(model, edge_weight):
        return model(x, edge_index)


class LocalGraph:
    r"""A client's fixed local graph with the operators a GCN needs, built once.

    For a securefgl :class:`~securefgl.nn.gcn.GCN` without dropout, :meth:`logits` evaluates the model's
    own parameters as :math:`\tilde A(\dots \tilde A(X W_1^\top) + b_1 \dots)` with a precomputed sparse
    :math:`\tilde A` and, when ``X`` is sparse (bag-of-words features), a sparse first layer: the same
    function as ``model(x, edge_index)`` (checked in the tests) at a fraction of the cost. Any other model
    goes through its own ``forward``.

    Shapes:
        x ``(N, F)``, edge_index ``(2, E)``, edge_weight ``(E,)`` (optional).
    """

    def __init__(
        self,
        x: Tensor,
        edge_index: Tensor,
        edge_weight: Tensor | None = None,
        *,
        sparse_threshold: float = 0.1,
    ) -> None:
        self.x = x
        self.edge_index = edge_index
        self.edge_weight = edge_weight
        self._threshold = sparse_threshold
        self._ops: tuple[SparseOperator, SparseOperator | None] | None = None

    def _operators(self) -> tuple[SparseOperator, SparseOperator | None]:
        """``(Ã, X)`` as sparse operators of the training stack (``X`` only when sparse enough, on CPU)."""
        if self._ops is None:
            from securefgl.algorithms.opfgl._statistics import gcn_operator

            op = gcn_operator(self.edge_index, self.x.size(0), edge_weight=self.edge_weight)
            row, col = op.indices()
            adj = SparseOperator.build(row, col, op.values(), (op.size(0), op.size(1)))
            density = float((self.x != 0).sum()) / max(1, self.x.numel())
            sparse_x = density <= self._threshold and self.x.device.type == "cpu"
            self._ops = (adj, SparseOperator.from_dense(self.x) if sparse_x else None)
        return self._ops

    @staticmethod
    def _fast_gcn(model: nn.Module) -> bool:
        try:
            from securefgl.nn.gcn import GCN
        except ImportError:  # pragma: no cover - securefgl.nn is part of the package
            return False
        return type(model) is GCN and (getattr(model, "p", 0.0) == 0.0 or not model.training)

    def logits(self, model: nn.Module) -> Tensor:
        """``model``'s class scores on this graph."""
        if not self._fast_gcn(model):
            return forward(model, self.x, self.edge_index, self.edge_weight)
        adj, x_op = self._operators()
        h = self.x
        for i, conv in enumerate(model.convs):
            weight = conv.lin.weight
            h = x_op @ weight.t() if i == 0 and x_op is not None else h @ weight.t()
            h = adj @ h + conv.bias
            if i < len(model.convs) - 1:
                h = h.relu()
        return h


def _accuracy(logits: Tensor, y: Tensor, mask: Tensor) -> float:
    if not bool(mask.any()):
        return 0.0
    return float((logits[mask].argmax(dim=1) == y[mask]).float().mean())


def _evaluate(model: nn.Module, graph: LocalGraph, y: Tensor, mask: Tensor) -> float:
    model.eval()
    with torch.no_grad():
        acc = _accuracy(graph.logits(model), y, mask)
    model.train()
    return acc


def _adam(params: list[Tensor], cfg: StageConfig) -> torch.optim.Optimizer:
    """Adam; the fused kernel where the parameters' device supports it (same update, one pass)."""
    try:
        return torch.optim.Adam(params, lr=cfg.lr, weight_decay=cfg.weight_decay, fused=True)
    except (RuntimeError, ValueError):
        return torch.optim.Adam(params, lr=cfg.lr, weight_decay=cfg.weight_decay)


@dataclass
class _Selector:
    """Best-validation model selection for one client (one local graph)."""

    graph: LocalGraph
    y: Tensor
    val_mask: Tensor
    best_val: float = -1.0
    best_iter: int = -1
    bad: int = 0
    stopped_at: int | None = None
    best_state: dict[str, Tensor] | None = None
    history: list[tuple[int, float]] = field(default_factory=list)


def _run_selected(
    model: nn.Module,
    loss_fn: Callable[[], Tensor],
    cfg: StageConfig,
    selectors: Sequence[_Selector],
    what: str,
) -> list[tuple[dict[str, Tensor], StageResult]]:
    """Full-batch Adam with model selection on local validation accuracy (spec §2.9, code schedule).

    Steps ``0 .. max_iters`` run; the model is evaluated after step ``j`` whenever ``j >= eval_every``
    and ``j % eval_every == 0``; a strictly better validation accuracy saves the weights and resets the
    patience counter, otherwise ``patience`` evaluations without improvement stop the stage for that
    selector. With several selectors (clients that train the *same* trajectory, e.g. Stage 1 from the
    shared initialisation on the shared pseudo-graph) every one keeps its own best weights and its own
    stopping point, exactly as if each had run alone; training stops when all have stopped.

    Returns:
        Per selector: the selected weights (the last ones when no evaluation happened) and a summary.
    """
    opt = _adam(list(model.parameters()), cfg)
    model.train()
    steps = 0
    for it in range(cfg.max_iters + 1):
        opt.zero_grad()
        loss = loss_fn()
        loss.backward()
        opt.step()
        steps = it + 1
        if it >= cfg.eval_every and it % cfg.eval_every == 0:
            # Checked at evaluations only (a NaN loss makes every later weight NaN, so nothing is missed).
            if not torch.isfinite(loss.detach()):
                raise NonFiniteError(f"{what}: loss became non-finite by step {it}")
            for sel in selectors:
                if sel.stopped_at is not None:
                    continue
                val = _evaluate(model, sel.graph, sel.y, sel.val_mask)
                sel.history.append((it, val))
                if val > sel.best_val:
                    sel.best_val, sel.best_iter, sel.bad = val, it, 0
                    sel.best_state = copy.deepcopy(model.state_dict())
                else:
                    sel.bad += 1
                    if sel.bad >= cfg.patience:
                        sel.stopped_at = it
            if all(sel.stopped_at is not None for sel in selectors):
                break
    if steps and not all(bool(torch.isfinite(p).all()) for p in model.parameters()):
        raise NonFiniteError(f"{what}: the weights became non-finite")
    out = []
    last = copy.deepcopy(model.state_dict())
    for sel in selectors:
        iters = steps if sel.stopped_at is None else sel.stopped_at + 1
        if sel.best_state is None:
            sel.best_state = last
            sel.best_val, sel.best_iter = _evaluate(model, sel.graph, sel.y, sel.val_mask), steps - 1
        out.append((sel.best_state, StageResult(sel.best_val, sel.best_iter, iters, sel.history)))
    model.eval()
    return out


def _run(
    model: nn.Module,
    loss_fn: Callable[[], Tensor],
    cfg: StageConfig,
    graph: LocalGraph,
    y: Tensor,
    val_mask: Tensor,
    what: str,
) -> StageResult:
    """:func:`_run_selected` for one client; loads the selected weights into ``model``."""
    [(state, result)] = _run_selected(model, loss_fn, cfg, [_Selector(graph, y, val_mask)], what)
    model.load_state_dict(state)
    model.eval()
    return result


def train_stage1(
    model: nn.Module,
    pseudo_x: Tensor,
    pseudo_edge_index: Tensor,
    pseudo_edge_weight: Tensor,
    pseudo_y: Tensor,
    local: LocalGraph,
    local_y: Tensor,
    local_val_mask: Tensor,
    cfg: StageConfig,
) -> StageResult:
    r"""Stage 1 (Eq. 14): :math:`\min \mathrm{CE}(M_G(A', X'), Y')`, selected on local validation accuracy.

    Shapes:
        pseudo_x ``(n', F)``, pseudo_edge_index ``(2, E')``, pseudo_edge_weight ``(E',)``,
        pseudo_y ``(n',)``; local: the client's graph with ``N_k`` nodes; local_y, local_val_mask ``(N_k,)``.
    """

    pseudo = LocalGraph(pseudo_x, pseudo_edge_index, pseudo_edge_weight)

    def loss_fn() -> Tensor:
        return F.cross_entropy(pseudo.logits(model), pseudo_y)

    return _run(model, loss_fn, cfg, local, local_y, local_val_mask, "O-pFGL stage 1")


def train_stage1_shared(
    model: nn.Module,
    pseudo_x: Tensor,
    pseudo_edge_index: Tensor,
    pseudo_edge_weight: Tensor,
    pseudo_y: Tensor,
    locals_: Sequence[tuple[LocalGraph, Tensor, Tensor]],
    cfg: StageConfig,
) -> list[tuple[dict[str, Tensor], StageResult]]:
    """Stage 1 for several clients that share the model initialisation (homogeneous models).

    Their training trajectories on the broadcast pseudo-graph are identical (same initial weights, same
    data, same deterministic optimiser), so one trajectory is computed and each client selects its own
    checkpoint on its own validation nodes with its own patience: the same result as
    :func:`train_stage1` per client, at the cost of one.

    Args:
        locals_: Per client ``(local graph, y, val_mask)``.

    Returns:
        Per client, in order: the selected weights and the stage summary.
    """
    pseudo = LocalGraph(pseudo_x, pseudo_edge_index, pseudo_edge_weight)

    def loss_fn() -> Tensor:
        return F.cross_entropy(pseudo.logits(model), pseudo_y)

    selectors = [_Selector(g, y, m) for g, y, m in locals_]
    return _run_selected(model, loss_fn, cfg, selectors, "O-pFGL stage 1")


def distillation_weights(
    soft_labels: Tensor,
    w_dist: Tensor,
    *,
    beta: float,
    gamma_min: float | None = None,
    gamma_max: float | None = None,
) -> Tensor:
    r"""Node-adaptive distillation weights (Eq. 17 with the code's clamp).

    .. math:: \gamma_i = \mathrm{clamp}\big(\beta\, \tilde y_i^\top w,\; \gamma_{min}, \gamma_{max}\big)

    Shapes:
        soft_labels ``(N, C)`` (unnormalised LP output), w_dist ``(C,)`` -> ``(N,)``.
    """
    if beta < 0 or not math.isfinite(beta):
        raise ConfigError(f"beta must be a finite number >= 0, got {beta!r}")
    if gamma_min is not None and gamma_max is not None and gamma_min > gamma_max:
        raise ConfigError(f"gamma_min {gamma_min} > gamma_max {gamma_max}")
    gamma = beta * (soft_labels @ w_dist)
    if gamma_min is None and gamma_max is None:
        return gamma
    return gamma.clamp(min=gamma_min, max=gamma_max)


def train_stage2(
    model: nn.Module,
    teacher_logits: Tensor,
    gamma: Tensor,
    local: LocalGraph,
    y: Tensor,
    train_mask: Tensor,
    val_mask: Tensor,
    cfg: StageConfig,
) -> StageResult:
    r"""Stage 2 (Eqs. 15-16): fine-tune with CE plus the γ-weighted distillation to the frozen teacher.

    .. math::
        L = \frac{1}{|V_L|}\sum_{i \in V_L} \mathrm{CE}_i
            + \frac{1}{N_k}\sum_{i=1}^{N_k} \gamma_i\,
              \mathrm{KL}\big(\mathrm{softmax}(z^T_i) \,\|\, \mathrm{softmax}(z_i)\big)

    Shapes:
        teacher_logits ``(N_k, C)``, gamma ``(N_k,)``, y and the masks ``(N_k,)``.
    """
    t_prob = F.softmax(teacher_logits.detach(), dim=1)
    t_logp = F.log_softmax(teacher_logits.detach(), dim=1)
    n = local.x.size(0)
    has_train = bool(train_mask.any())

    def loss_fn() -> Tensor:
        logits = local.logits(model)
        logp = F.log_softmax(logits, dim=1)
        kl = (t_prob * (t_logp - logp)).sum(dim=1)
        loss = (gamma * kl).sum() / n
        if has_train:
            loss = loss + F.cross_entropy(logits[train_mask], y[train_mask])
        return loss

    return _run(model, loss_fn, cfg, local, y, val_mask, "O-pFGL stage 2")
