r"""FedLoG's client side: local fitting, local generalisation, prompt-generator pretraining, evaluation.

Client side, private to :mod:`securefgl.algorithms.fedlog` (spec ``shared/specs/fedlog.md`` §2.1, §2.3, §2.4,
§2.5, §2.7). Everything here runs on one client's own data and the public broadcast; nothing reads another
client's state. Training functions receive the client's training ``Data`` only; the evaluation-only sets
(``Client.eval_data``) reach :func:`eval_counters` alone.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from securefgl.algorithms.fedlog.model import FedLoGNet, PromptGenerator, degree_alpha, neighbour_mean
from securefgl.nn._functional import init_parameters

__all__ = [
    "eval_counters",
    "local_epoch",
    "mixed_logp",
    "pretrain_prompt",
    "synthetic_graph",
    "warmup_embedder",
]


def mixed_logp(logp_h: Tensor, logp_t: Tensor, alpha: Tensor) -> Tensor:
    r"""Log of the prediction mixture :math:`\alpha p^H + (1-\alpha) p^T`, ``(N, C)``."""
    a = alpha.clamp(1e-12, 1 - 1e-12).unsqueeze(-1)
    return torch.logaddexp(logp_h + torch.log(a), logp_t + torch.log1p(-a))


def synthetic_graph(
    syn_x: Tensor, syn_y: Tensor, lam: Tensor, psi_c: Mapping[int, PromptGenerator] | None
) -> tuple[Tensor, Tensor, int]:
    r"""Feature scaling (Eq. 5) and prompt graphs of the global synthetic nodes.

    :math:`\hat x_{c,j} = \tilde x_{c,j} + \lambda_c(\bar x - \tilde x_{c,j})`; each target gets its prompt
    :math:`\psi_c(\hat x_{c,j})` as its only neighbour (no prompts when ``psi_c`` is ``None``).

    Returns:
        Features ``(S or 2S, F)``, edge index, and ``S`` (targets are rows ``0..S-1``).
    """
    s = syn_x.shape[0]
    xbar = syn_x.mean(0, keepdim=True)
    xhat = syn_x + lam[syn_y].unsqueeze(-1) * (xbar - syn_x)
    if psi_c is None:
        return xhat, torch.empty(2, 0, dtype=torch.long, device=syn_x.device), s
    prompts = torch.empty_like(xhat)
    with torch.no_grad():
        for c in torch.unique(syn_y).tolist():
            rows = syn_y == c
            prompts[rows] = psi_c[int(c)](xhat[rows])
    t = torch.arange(s, device=syn_x.device)
    ei = torch.cat([torch.stack([t, t + s]), torch.stack([t + s, t])], 1)
    return torch.cat([xhat, prompts]), ei, s


def _batches(train_idx: Tensor, batch_size: int, generator: torch.Generator) -> list[Tensor]:
    """One epoch's mini-batches (spec §2.7): a permutation from ``generator`` (CPU) cut into
    ``max(n // batch_size, 1)`` batches; the last ``n mod batch_size`` nodes are dropped, as in the code."""
    n = int(train_idx.numel())
    perm = train_idx[torch.randperm(n, generator=generator, device="cpu").to(train_idx.device)]
    return [perm[s * batch_size : (s + 1) * batch_size] for s in range(max(n // batch_size, 1))]


def local_epoch(
    net: FedLoGNet,
    xh: Tensor,
    xt: Tensor,
    lam: Tensor,
    data: Any,
    opts: Any,
    num_classes: int,
    generator: torch.Generator,
    syn: tuple[Tensor, Tensor] | None,
    psi_c: Mapping[int, PromptGenerator] | None,
    alpha: Tensor,
    dropout_gen: torch.Generator | None = None,
) -> float:
    r"""One local epoch (spec §2.7 ``local_epoch``): mini-batches of ``batch_size`` train nodes.

    Per step :math:`L = L_{pred} + \beta L_{norm} + \gamma L_{syn}` (``L_syn`` only when ``syn`` is given), then
    the per-class :math:`\lambda` step. Fresh Adam optimisers every call (the code's per-round re-creation).

    Returns:
        The mean loss over the steps (NaN when the client has no training node).
    """
    train_idx = data.train_mask.nonzero().squeeze(1)
    n_train = int(train_idx.numel())
    if n_train == 0:
        return float("nan")
    opt = torch.optim.Adam(net.parameters(), lr=opts.lr, weight_decay=opts.weight_decay)
    opt_x = torch.optim.Adam([xh, xt], lr=opts.lr)
    sx = sei = None
    n_syn = 0
    net.train()
    losses = []
    for batch in _batches(train_idx, opts.batch_size, generator):
        lh, lt = net.branch_logp(data.x, data.edge_index, xh, xt, num_classes, dropout_gen, batch)
        a = alpha[batch]
        yy = data.y[batch].unsqueeze(1)
        l_pred = -(a * lh.gather(1, yy).squeeze(1) + (1 - a) * lt.gather(1, yy).squeeze(1)).mean()
        loss = l_pred + opts.beta * 0.5 * (xh.norm() + xt.norm())
        if syn is not None:
            syn_x, syn_y = syn
            sx, sei, n_syn = synthetic_graph(syn_x, syn_y, lam, psi_c)
            idx = torch.arange(n_syn, device=sx.device)
            sh, st = net.branch_logp(sx, sei, xh, xt, num_classes, dropout_gen, idx)
            l_syn = -(0.5 * sh[idx, syn_y] + 0.5 * st[idx, syn_y]).mean()
            loss = loss + opts.gamma * l_syn
        opt.zero_grad()
        opt_x.zero_grad()
        loss.backward()
        opt.step()
        opt_x.step()
        losses.append(float(loss.detach()))
        if syn is not None:
            with torch.no_grad():
                pred = (0.5 * sh + 0.5 * st).argmax(-1)
                for c in torch.unique(syn_y).tolist():
                    rows = syn_y == c
                    acc = float((pred[rows] == c).float().mean())
                    lam[c] += opts.lambda_step if acc > opts.lambda_threshold else -opts.lambda_step
                lam.clamp_(0.0, 1.0)
    return sum(losses) / len(losses)


def warmup_embedder(
    net: FedLoGNet,
    data: Any,
    num_classes: int,
    epochs: int,
    lr: float,
    weight_decay: float,
    batch_size: int,
    patience: int,
    generator: torch.Generator,
    dropout_gen: torch.Generator | None = None,
) -> int:
    r"""Round-0 cross-entropy warm-up of the embedder :math:`f_E` (spec §2.5; in the code, not the paper).

    Trains ``net.conv1``/``net.conv2`` plus a fresh ``Linear(out_dim, C)`` head on the client's train nodes:
    Adam (``lr``, ``weight_decay``), the mini-batches of :func:`local_epoch`, up to ``epochs`` epochs. After
    each epoch the validation accuracy is measured; training stops after ``patience`` epochs without a strict
    improvement and the best-validation embedder weights are restored. The official code early-stops on
    *test* accuracy, a leak; this uses the client's val nodes. Without val nodes all ``epochs`` run and the
    last weights are kept. The head is then discarded: the official code averages it on the server but never
    uses it, so it is neither uploaded nor averaged here. The branches and synthetic nodes are untouched.

    Args:
        generator: CPU generator of the head initialisation and the batch permutations.
        dropout_gen: Generator of the embedder's dropout masks, on the data's device. (default: ``generator``)

    Returns:
        The number of epochs run (0 for a client without training nodes, which is left unchanged).
    """
    train_idx = data.train_mask.nonzero().squeeze(1)
    if epochs == 0 or train_idx.numel() == 0:
        return 0
    drop = generator if dropout_gen is None else dropout_gen
    embedder = nn.ModuleList([net.conv1, net.conv2])
    head = nn.Linear(net.conv2.out_channels, num_classes)
    init_parameters(head, generator)
    head = head.to(data.x.device)
    opt = torch.optim.Adam([*embedder.parameters(), *head.parameters()], lr=lr, weight_decay=weight_decay)
    x, ei, y, val = data.x, data.edge_index, data.y, data.val_mask
    has_val = bool(val.any())
    was_training = net.training
    best_acc, best_state, since_best, run = -1.0, None, 0, 0
    for _ in range(epochs):
        net.train()
        for batch in _batches(train_idx, batch_size, generator):
            loss = F.cross_entropy(head(net.embed(x, ei, drop)[batch]), y[batch])
            opt.zero_grad()
            loss.backward()
            opt.step()
        run += 1
        if not has_val:
            continue
        net.eval()
        with torch.no_grad():
            acc = float((head(net.embed(x, ei)[val]).argmax(-1) == y[val]).float().mean())
        if acc > best_acc:
            best_acc, since_best = acc, 0
            best_state = {k: v.detach().clone() for k, v in embedder.state_dict().items()}
        else:
            since_best += 1
            if since_best >= patience:
                break
    if best_state is not None:
        embedder.load_state_dict(best_state)
    net.train(was_training)
    return run


def pretrain_prompt(
    psi: PromptGenerator,
    data: Any,
    num_classes: int,
    epochs: int,
    inits: int,
    lr: float,
    generator: torch.Generator,
    hidden: int = 128,
    out_dim: int = 64,
    dropout_gen: torch.Generator | None = None,
) -> float:
    r"""Pretrain the client's prompt generator :math:`\psi_k` (spec §2.4, Eqs. 11-13).

    .. math::
        L_{gen} = \underbrace{\tfrac{1}{|V^{tr}|}\sum_v \lVert\psi(x_v) - \bar x_{N(v)}\rVert^2}_{L_{feat}}
        + \underbrace{\tfrac{1}{T}\sum_t \sum_q \mathrm{MSE}(\nabla_{\theta_t,q} L(G_k),
        \nabla_{\theta_t,q} L(S^\psi))}_{L_{grad}}

    with :math:`\theta_t` a freshly initialised GraphSAGE + linear head per ``t`` and :math:`S^\psi` the
    2-node graphs :math:`\{x_v, \psi(x_v)\}`. The plain mean over ``t`` fixes the code's cumulative ``/= T``.

    Returns:
        The final loss (NaN without training nodes).
    """
    train = data.train_mask
    if int(train.sum()) == 0 or epochs == 0:
        return float("nan")
    x, ei, y = data.x, data.edge_index, data.y
    target = neighbour_mean(x, ei)[train]
    xt_, yt = x[train], y[train]
    agg_x = neighbour_mean(x, ei)
    opt = torch.optim.Adam(psi.parameters(), lr=lr)
    f = x.shape[1]
    last = float("nan")
    psi.train()
    for _ in range(epochs):
        p = psi(xt_, dropout_gen)
        loss = F.mse_loss(p, target)
        if inits > 0:
            g_loss = 0.0
            for _t in range(inits):
                params = _random_sage(f, hidden, out_dim, num_classes, generator, x.device)
                true_g = torch.autograd.grad(
                    F.cross_entropy(_sage_graph(params, x, agg_x, ei)[train], yt), params
                )
                syn_g = torch.autograd.grad(
                    F.cross_entropy(_sage_pairs(params, xt_, p), yt), params, create_graph=True
                )
                g_loss = g_loss + sum(F.mse_loss(s, t.detach()) for s, t in zip(syn_g, true_g, strict=True))
            loss = loss + g_loss / inits
        opt.zero_grad()
        loss.backward()
        opt.step()
        last = float(loss.detach())
    psi.eval()
    if not math.isfinite(last):
        return float("nan")
    return last


def _glorot(shape: tuple[int, ...], generator: torch.Generator, device: torch.device) -> Tensor:
    bound = math.sqrt(6.0 / (shape[0] + shape[1]))
    w = torch.empty(shape).uniform_(-bound, bound, generator=generator)
    return w.to(device).requires_grad_(True)


def _random_sage(
    f: int, hidden: int, out_dim: int, c: int, generator: torch.Generator, device: torch.device
) -> list[Tensor]:
    z = torch.zeros
    return [
        _glorot((hidden, f), generator, device),
        _glorot((hidden, f), generator, device),
        z(hidden, device=device, requires_grad=True),
        _glorot((out_dim, hidden), generator, device),
        _glorot((out_dim, hidden), generator, device),
        z(out_dim, device=device, requires_grad=True),
        _glorot((c, out_dim), generator, device),
        z(c, device=device, requires_grad=True),
    ]


def _sage_graph(params: list[Tensor], x: Tensor, agg_x: Tensor, ei: Tensor) -> Tensor:
    w1l, w1r, b1, w2l, w2r, b2, wc, bc = params
    h = F.relu(agg_x @ w1l.T + x @ w1r.T + b1)
    h = neighbour_mean(h, ei) @ w2l.T + h @ w2r.T + b2
    return h @ wc.T + bc


def _sage_pairs(params: list[Tensor], x: Tensor, p: Tensor) -> Tensor:
    """The same network on the 2-node graphs {x_v, p_v}: each node's neighbour mean is the other node."""
    w1l, w1r, b1, w2l, w2r, b2, wc, bc = params
    hx = F.relu(p @ w1l.T + x @ w1r.T + b1)
    hp = F.relu(x @ w1l.T + p @ w1r.T + b1)
    h = hp @ w2l.T + hx @ w2r.T + b2
    return h @ wc.T + bc


@torch.no_grad()
def eval_counters(
    net: FedLoGNet,
    xh: Tensor,
    xt: Tensor,
    data: Any,
    eval_data: Mapping[str, Tensor],
    num_classes: int,
    tau: float,
    own: Tensor | None = None,
) -> tuple[list[int], list[int], float, int]:
    """Correct/count for seen val, seen test, Unseen Node, Missing Class, and the New-Client accuracy.

    Args:
        data: The client's own training ``Data`` (Seen Graph val/test masks).
        eval_data: The client's own evaluation-only sets (``Client.eval_data``, from
            :func:`~securefgl.algorithms.fedlog.eval_sets.attach_generalization_sets`); missing keys leave the
            corresponding counters at zero.
        own: The model's log-probabilities on the client's own graph, if already computed.

    Returns:
        ``(correct[4], count[4], nc_acc, nc_models)``; ``nc_models`` is 1 when a New-Client set exists.
    """
    net.eval()
    correct, count = [0, 0, 0, 0], [0, 0, 0, 0]
    logp = predict(net, xh, xt, data.x, data.edge_index, num_classes, tau) if own is None else own
    pred = logp.argmax(-1)
    for i, m in enumerate((data.val_mask, data.test_mask)):
        correct[i] = int((pred[m] == data.y[m]).sum())
        count[i] = int(m.sum())
    ev = eval_data
    if ev.get("unseen_x") is not None:
        pu = predict(net, xh, xt, ev["unseen_x"], ev["unseen_edge_index"], num_classes, tau).argmax(-1)
        for i, m in ((2, ev["unseen_node_mask"]), (3, ev["unseen_cls_mask"])):
            correct[i] = int((pu[m] == ev["unseen_y"][m]).sum())
            count[i] = int(m.sum())
    nc_acc, nc_models = 0.0, 0
    if ev.get("nc_x") is not None and ev["nc_y"].numel():
        pn = predict(net, xh, xt, ev["nc_x"], ev["nc_edge_index"], num_classes, tau).argmax(-1)
        nc_acc, nc_models = float((pn == ev["nc_y"]).float().mean()), 1
    return correct, count, nc_acc, nc_models


@torch.no_grad()
def predict(
    net: FedLoGNet,
    xh: Tensor,
    xt: Tensor,
    x: Tensor,
    ei: Tensor,
    num_classes: int,
    tau: float,
    chunk: int = 4096,
) -> Tensor:
    """Mixed log-probabilities ``(N, C)`` of the local model on a graph (degrees from that graph)."""
    net.eval()
    n = x.shape[0]
    parts = []
    for start in range(0, n, chunk):  # bounded (chunk, C m, D) memory for the branch refinement
        idx = torch.arange(start, min(start + chunk, n), device=x.device)
        lh, lt = net.branch_logp(x, ei, xh, xt, num_classes, None, idx)
        parts.append(mixed_logp(lh, lt, degree_alpha(ei, n, tau)[idx]))
    return torch.cat(parts) if parts else torch.empty(0, num_classes, device=x.device)
