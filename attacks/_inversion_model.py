"""Gradient inversion, the model side: which parameter is what, and the client's local training simulated.

:func:`simulate_update` replays the public training recipe on dummy nodes, differentiably in the dummy data;
:func:`model_forward` evaluates the architecture with given parameters.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
import torch.nn.functional as F
from torch import Tensor

from securefgl.attacks._inversion_config import TrainingRecipe
from securefgl.errors import AttackNotApplicableError

_EMPTY_EDGES = torch.empty(2, 0, dtype=torch.long)


def last_layer_bias(model: torch.nn.Module, num_classes: int) -> str:
    """Name of the output layer's bias (the last 1-D parameter of size ``C``).

    Raises:
        AttackNotApplicableError: the model has no output bias (label recovery needs it).
    """
    names = [n for n, p in model.named_parameters() if p.dim() == 1 and p.numel() == num_classes]
    if not names:
        raise AttackNotApplicableError(
            f"{type(model).__name__} has no output-layer bias of size {num_classes}: the iDLG label rule needs one"
        )
    return names[-1]


def _first_layer_weights(model: torch.nn.Module, num_features: int) -> list[str]:
    """Parameters that multiply the raw features (2-D, last dimension ``F``)."""
    return [n for n, p in model.named_parameters() if p.dim() == 2 and p.shape[-1] == num_features]


def _hops(model: torch.nn.Module) -> int:
    name = type(model).__name__.lower()
    if name == "mlp":
        return 0
    if name == "sgc":
        return int(getattr(model, "K", 2))
    convs = getattr(model, "convs", None)
    if convs is not None:
        return len(convs)
    raise AttackNotApplicableError(f"cannot tell the receptive field of model {type(model).__name__}")


def _propagates(model: torch.nn.Module) -> bool:
    return type(model).__name__.lower() != "mlp"


def simulate_update(
    model: torch.nn.Module,
    base: Mapping[str, Tensor],
    x: Tensor,
    y_soft: Tensor,
    recipe: TrainingRecipe,
    *,
    edge_index: Tensor | None = None,
    train_index: Tensor | None = None,
    adam_eps: float = 1e-8,
    create_graph: bool = True,
) -> dict[str, Tensor]:
    """The update :math:`w_E - w_0` of ``recipe`` on nodes ``x`` with soft labels ``y_soft``.

    Dropout is off (the client's masks are private). Differentiable in ``x`` and ``y_soft`` when
    ``create_graph``.

    Args:
        model: The public architecture (only its structure is used).
        base: Starting parameters :math:`w_0`.
        x: ``(N, F)`` node features (all nodes of ``edge_index``).
        y_soft: ``(n, C)`` label distributions of the training nodes.
        recipe: The local-training recipe.
        edge_index: ``(2, E)`` edges among the ``N`` nodes (default: none, isolated nodes).
        train_index: ``(n,)`` rows of the training nodes (default: all rows).
        adam_eps: Adam's epsilon in the simulation.
        create_graph: Keep the graph for a derivative in ``x``.
    """
    from torch.func import functional_call

    ei = _EMPTY_EDGES.to(x.device) if edge_index is None else edge_index
    was = model.training
    model.eval()
    grad_on = torch.enable_grad()
    grad_on.__enter__()
    try:
        start = {k: v.detach().to(x.dtype).clone().requires_grad_(True) for k, v in base.items()}
        cur: dict[str, Tensor] = dict(start)
        m = {k: torch.zeros_like(v) for k, v in cur.items()}
        v2 = {k: torch.zeros_like(v) for k, v in cur.items()}
        b1, b2 = 0.9, 0.999
        for t in range(1, recipe.epochs + 1):
            out = functional_call(model, cur, (x, ei))
            if train_index is not None:
                out = out[train_index]
            loss = -(y_soft * F.log_softmax(out, dim=-1)).sum(-1).mean()
            if recipe.prox_mu > 0:
                loss = loss + 0.5 * recipe.prox_mu * sum(((cur[k] - start[k]) ** 2).sum() for k in cur)
            grads = torch.autograd.grad(loss, list(cur.values()), create_graph=create_graph)
            nxt = {}
            for (k, w), g in zip(cur.items(), grads, strict=True):
                if recipe.weight_decay:
                    g = g + recipe.weight_decay * w
                if recipe.optimizer == "sgd":
                    if recipe.momentum:
                        m[k] = recipe.momentum * m[k] + g if t > 1 else g
                        g = m[k]
                    nxt[k] = w - recipe.lr * g
                else:
                    m[k] = b1 * m[k] + (1 - b1) * g
                    v2[k] = b2 * v2[k] + (1 - b2) * g * g
                    mh = m[k] / (1 - b1**t)
                    vh = v2[k] / (1 - b2**t)
                    nxt[k] = w - recipe.lr * mh / (torch.sqrt(vh + 1e-30) + adam_eps)
            cur = nxt
        delta = {k: cur[k] - start[k].detach() for k in cur}
        return delta if create_graph else {k: v.detach() for k, v in delta.items()}
    finally:
        grad_on.__exit__(None, None, None)
        model.train(was)


def _first_layer_bias(model: torch.nn.Module, weight: str) -> str | None:
    names = dict(model.named_parameters())
    for cand in (weight.removesuffix(".weight") + ".bias", weight.rsplit(".", 2)[0] + ".bias"):
        if cand in names and names[cand].dim() == 1 and names[cand].numel() == names[weight].shape[0]:
            return cand
    return None


def model_forward(
    model: torch.nn.Module, params: Mapping[str, Tensor], x: Tensor, edge_index: Tensor | None
) -> Tensor:
    """The model's logits with ``params`` (eval mode)."""
    from torch.func import functional_call

    was = model.training
    model.eval()
    try:
        ei = _EMPTY_EDGES.to(x.device) if edge_index is None else edge_index
        return functional_call(model, {k: v.to(x.dtype) for k, v in params.items()}, (x, ei))
    finally:
        model.train(was)


def first_layer_operator(model: torch.nn.Module, edge_index: Tensor, num_rows: int) -> Tensor | None:
    r"""Dense ``(N, N)`` operator :math:`P` with the first layer's input :math:`P X` (GCN: :math:`\hat A`).

    Used to deconvolve the reconstruction of a graph-known GCN inversion; ``None`` for models whose first
    layer is not one linear propagation of the raw features (MLP, SAGE) or whose update constrains the
    propagated rows of the training nodes only (SGC).
    """
    if type(model).__name__.lower() != "gcn":
        return None
    from torch_geometric.nn.conv.gcn_conv import gcn_norm

    ei, w = gcn_norm(edge_index, None, num_rows, add_self_loops=True)
    op = torch.zeros(num_rows, num_rows, dtype=torch.float32, device=edge_index.device)
    op.index_put_((ei[1], ei[0]), w.to(torch.float32), accumulate=True)  # row = target, column = source
    return op
