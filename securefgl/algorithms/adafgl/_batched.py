r"""AdaFGL step 2's training loop, over a batch of clients (one client trains as a batch of one).

Private helper of :mod:`securefgl.algorithms.adafgl` (client side). Each client keeps its own model,
optimiser state, HCS and best-validation epoch; only the arithmetic is batched, on the training stack of
:mod:`securefgl.training` that every algorithm's client half uses:

* the per-client models of :class:`~securefgl.algorithms.adafgl.model.AdaFGLLocalModel` (the readable
  one-client definition; tests check the batched forward against it) are initialised from each client's
  own generator and their parameters stacked into ``(K, ...)`` leaves, stepped by one
  :class:`~securefgl.training.optim.StackedOptimizer` (Adam on the stack equals one Adam per client);
* the clients' nodes are one :class:`~securefgl.training.batched.GraphBatch` in the ``padded`` layout
  ``(K, n_max, .)``; the smoothed-feature first layers are one block-diagonal sparse product of the
  features and one block-diagonal propagation (:class:`~securefgl.training.sparse.SparseOperator` in its
  ``bag`` and ``coo`` storages: see that module); the MLP tails and the dense learnable message passing use ``bmm`` with
  per-client masks for the mean and max of eq. (11); large clients (sparse :math:`\tilde P^{(0)}`) pass
  messages on their support only, with per-client segment means and maxima;
* the objective is the sum of the clients' losses, so each client's slice of a stacked gradient is its
  own gradient.

Clients never see each other's data in any sense that matters for privacy: this is a simulation speed-up
of K independent local computations (nothing here is sent anywhere). Dropout masks are drawn from one
generator for the whole batch (the convention of :mod:`securefgl.training`), so with dropout the random
stream depends on the batch; with ``dropout=0`` a client's result does not depend on its batch (tested).

Shapes: ``K`` clients, ``n_k`` nodes of client ``k``, ``n_max = max_k n_k``, ``F`` features, ``C`` classes,
``h`` hidden width, ``K_p`` hops.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch_geometric.data import Data

from securefgl.algorithms.adafgl.model import (
    _EPS,
    SPARSE_MAX_DENSITY,
    AdaFGLLocalModel,
    LocalOutcome,
    LocalStepOptions,
    SmoothedFeatures,
    _dropout,
    _local_model,
)
from securefgl.errors import ConfigError, NonFiniteError
from securefgl.training.batched import GraphBatch
from securefgl.training.optim import StackedOptimizer

__all__ = ["BatchClient", "train_local_batched"]


@dataclass
class BatchClient:
    """One client's prepared step-2 inputs (all on the same device)."""

    id: int | str
    x: torch.Tensor  # (n, F)
    feats: SmoothedFeatures
    p0: torch.Tensor | None  # dense (n, n) or None (no message passing)
    p_hat: torch.Tensor  # (n, C)
    target: torch.Tensor  # (n, C) eq. (8) target
    y: torch.Tensor  # (n,)
    masks: tuple[torch.Tensor, torch.Tensor, torch.Tensor]
    hcs: float
    init_generator: torch.Generator


def _prelu(h: torch.Tensor, slope: torch.Tensor) -> torch.Tensor:
    """PReLU with one slope per client: ``slope`` (K,), ``h`` (K, n, d)."""
    return torch.where(h > 0, h, slope.view(-1, 1, 1) * h)  # slope at exactly 0, as torch.prelu


class _Stacked:
    """The stacked parameters of K :class:`AdaFGLLocalModel` and their batched forward pass."""

    def __init__(self, models: Sequence[AdaFGLLocalModel], num_features: int, num_hops: int) -> None:
        m0 = models[0]
        self.k = len(models)
        self.f = num_features
        self.k1 = num_hops + 1
        self.widths = dict(m0.inputs.widths)
        self.dropout = m0.ho.dropout
        self.he_input = m0.he_input
        self.has_feat = m0.feat is not None
        self.has_msg = m0.msg is not None
        self.beta = m0.lmp.beta if m0.lmp is not None else 0.0
        self.compat = m0.lmp.compat_c1_scaling if m0.lmp is not None else False
        self.params: dict[str, torch.Tensor] = {}

        def stack(name: str, tensors: list[torch.Tensor]) -> None:
            self.params[name] = torch.stack([t.detach() for t in tensors]).clone().requires_grad_(True)

        stack("in.w", [m.inputs.weight for m in models])  # (K, F, k1 H): every hop's input weight
        stack("in.b", [m.inputs.bias for m in models])

        def stack_tail(prefix: str, tails: list) -> None:
            for j in range(len(tails[0].lins)):
                stack(f"{prefix}.a{j}", [t.acts[j].weight.view(()) for t in tails])
                stack(f"{prefix}.w{j}", [t.lins[j].weight.T for t in tails])  # (in, out)
                stack(f"{prefix}.b{j}", [t.lins[j].bias for t in tails])

        stack_tail("ho", [m.ho for m in models])
        stack_tail("he", [m.he for m in models])
        if self.has_feat:
            stack("f.w", [m.feat.first.weight.T for m in models])  # (K, F, h)
            stack("f.b", [m.feat.first.bias for m in models])
            stack_tail("f", [m.feat.tail for m in models])
        if self.has_msg:
            if self.he_input == "smoothed_feats":
                stack_tail("msg", [m.msg for m in models])
            else:
                stack("msg.in.w", [m.msg.first.weight.T for m in models])
                stack("msg.in.b", [m.msg.first.bias for m in models])
                stack_tail("msg", [m.msg.tail for m in models])
            stack("lmp.pos", [m.lmp.pos_sign.weight.view(()) for m in models])
            stack("lmp.neg", [m.lmp.neg_sign.weight.view(()) for m in models])

    def tail(self, prefix: str, h: torch.Tensor, training: bool, gen: torch.Generator | None) -> torch.Tensor:
        p = self.params
        j = 0
        while f"{prefix}.w{j}" in p:
            h = _dropout(_prelu(h, p[f"{prefix}.a{j}"]), self.dropout, training, gen)
            h = torch.baddbmm(p[f"{prefix}.b{j}"].unsqueeze(1), h, p[f"{prefix}.w{j}"])
            j += 1
        return h


class _Batch:
    """K clients' nodes as one :class:`~securefgl.training.batched.GraphBatch` in the ``padded`` layout.

    Row ``k * n_max + i`` is node ``i`` of client ``k``, so every per-node ``(P, d)`` result reshapes to
    ``(K, n_max, d)``; the clients' smoothing operators form one block-diagonal
    :class:`~securefgl.training.sparse.SparseOperator` and their features one
    :class:`~securefgl.training.batched.Features` (the block-diagonal sparse product of bag-of-words
    features, or a ``bmm`` for dense ones).
    """

    def __init__(self, clients: Sequence[BatchClient]) -> None:
        empty = torch.zeros(2, 0, dtype=torch.long, device=clients[0].x.device)
        graphs = [
            Data(
                x=c.x,
                edge_index=empty,
                y=c.y.long(),
                train_mask=c.masks[0],
                val_mask=c.masks[1],
                test_mask=c.masks[2],
            )
            for c in clients
        ]
        self.graph = GraphBatch.from_graphs(graphs, layout="padded")
        self.k = len(clients)
        self.sizes = list(self.graph.sizes)
        self.n_max = self.graph.buckets[0][2]
        valid = torch.zeros(self.graph.num_rows, dtype=torch.bool, device=self.graph.device)
        valid[self.graph.rows] = True
        self.valid = valid.view(self.k, self.n_max)
        self.counts = torch.tensor(self.sizes, dtype=torch.float32, device=self.graph.device)
        # COO and bag: the kernels AdaFGL's reproduction figures were measured with (securefgl.training.sparse)
        self.operator = self.graph.block_operator([c.feats.operator for c in clients], storage="coo")
        # sparse products exactly where SmoothedFeatures would use them (density at most 0.3 over real nodes)
        nnz = sum(int(torch.count_nonzero(c.x)) for c in clients)
        density = nnz / max(1, sum(self.sizes) * int(clients[0].x.size(1)))
        self.features = self.graph.features(sparse=density <= SPARSE_MAX_DENSITY, storage="bag")

    def view(self, rows: torch.Tensor) -> torch.Tensor:
        """``(P, ...)`` rows -> ``(K, n_max, ...)``."""
        return rows.view(self.k, self.n_max, *rows.shape[1:])

    def pad_list(self, ts: Sequence[torch.Tensor]) -> torch.Tensor:
        """Per-client ``(n_k, ...)`` tensors -> padded ``(K, n_max, ...)`` (zeros in the padding)."""
        return self.view(self.graph.join(list(ts)))

    def xw(self, weight: torch.Tensor) -> torch.Tensor:
        """``X_k W_k`` for every client as ``(P, d)`` rows; ``weight`` is ``(K, F, d)``."""
        return self.features.linear(weight)


@dataclass
class _Support:
    r"""The large-client message passing: :math:`\tilde P^{(0)}`'s pattern plus the diagonal, as entries over
    the padded rows (block-diagonal: no entry joins two clients)."""

    row: torch.Tensor  # (E,)
    col: torch.Tensor  # (E,)
    p0: torch.Tensor  # (E,) values of P~(0) (0 on the added diagonal)
    client: torch.Tensor  # (E,) batch position of each entry
    diag: torch.Tensor  # (E,) bool
    counts: torch.Tensor  # (K,) entries per client

    @classmethod
    def build(cls, clients: Sequence[BatchClient], b: _Batch) -> _Support:
        rows, cols, vals = [], [], []
        for k, c in enumerate(clients):
            n, start = b.sizes[k], k * b.n_max
            p0 = c.p0.coalesce()  # type: ignore[union-attr]
            diag = torch.arange(n, device=p0.device).repeat(2, 1)
            sup = torch.sparse_coo_tensor(
                torch.cat([p0.indices(), diag], 1),
                torch.cat([p0.values().float(), torch.zeros(n, device=p0.device)]),
                (n, n),
                check_invariants=False,
            ).coalesce()
            rows.append(sup.indices()[0] + start)
            cols.append(sup.indices()[1] + start)
            vals.append(sup.values())
        row, col = torch.cat(rows), torch.cat(cols)
        client = b.graph.row_client[row]
        counts = torch.bincount(client, minlength=b.k).float()
        return cls(row, col, torch.cat(vals), client, row == col, counts)


def _forward(
    st: _Stacked, b: _Batch, p0: torch.Tensor | _Support | None, training: bool, gen: torch.Generator | None
) -> dict[str, torch.Tensor]:
    p = st.params
    k1 = st.k1
    total_h = sum(st.widths.values())
    z = b.xw(p["in.w"]).view(-1, k1, total_h)
    r = z[:, k1 - 1]
    for k in range(k1 - 2, -1, -1):
        r = b.operator @ r + z[:, k]
    h1 = b.view(r) + p["in.b"].unsqueeze(1)  # (K, n_max, H)
    parts = dict(zip(st.widths, h1.split(list(st.widths.values()), dim=2), strict=True))
    out = {"ho": st.tail("ho", parts["ho"], training, gen), "he": st.tail("he", parts["he"], training, gen)}
    if st.has_feat:
        hf = b.view(b.xw(p["f.w"])) + p["f.b"].unsqueeze(1)
        out["f"] = st.tail("f", hf, training, gen)
    if st.has_msg and p0 is not None:
        if st.he_input == "smoothed_feats":
            h_m = st.tail("msg", parts["msg"], training, gen)
        else:
            hm1 = torch.baddbmm(p["msg.in.b"].unsqueeze(1), out["he"], p["msg.in.w"])
            h_m = st.tail("msg", hm1, training, gen)
        out["m"] = _lmp_sparse(st, b, h_m, p0) if isinstance(p0, _Support) else _lmp(st, b, h_m, p0)
    return out


def _scaled(
    r: torch.Tensor, centred: torch.Tensor, mu: torch.Tensor, mx: torch.Tensor, compat: bool
) -> torch.Tensor:
    r"""Spec §7.16's monotone scaling of :math:`R - \mu` to [-1, 1] (degenerate denominators give 0)."""
    pos = centred / (mx - mu).clamp_min(_EPS)
    neg = -r / mu.clamp_min(_EPS) if compat else centred / mu.clamp_min(_EPS)
    rs = torch.where(centred > 0, pos, neg)
    return torch.where(torch.isfinite(rs), rs, torch.zeros_like(rs))


def _lmp(st: _Stacked, b: _Batch, h_m: torch.Tensor, p0: torch.Tensor) -> torch.Tensor:
    """Eqs. (11)-(12) batched: mean and max of R over each client's valid ``n_k x n_k`` block."""
    n = b.n_max
    valid2 = b.valid.unsqueeze(2) & b.valid.unsqueeze(1)  # (K, n, n)
    eye = torch.eye(n, dtype=torch.bool, device=h_m.device).unsqueeze(0)
    s = F.softmax(h_m, dim=2)
    sn = s / s.norm(dim=2, keepdim=True).clamp_min(_EPS)
    cos = torch.bmm(sn, sn.transpose(1, 2)).masked_fill(eye | ~valid2, 0.0)
    r = st.beta * p0 + (1.0 - st.beta) * cos
    mu = (r.sum(dim=(1, 2)) / (b.counts * b.counts)).view(-1, 1, 1)
    mx = r.masked_fill(~valid2, -math.inf).amax(dim=(1, 2)).view(-1, 1, 1)
    rs = _scaled(r, r - mu, mu, mx, st.compat)
    rs = torch.where(eye & valid2, torch.ones_like(rs), rs).masked_fill(~valid2, 0.0)
    pos_m = _prelu(rs, st.params["lmp.pos"])
    neg_m = _prelu(-rs, st.params["lmp.neg"])
    h_pos = F.softmax(torch.bmm(pos_m, h_m), dim=2)
    h_neg = F.softmax(torch.bmm(neg_m, h_m), dim=2)
    return ((h_pos - h_neg) + h_m) / 2.0


def _lmp_sparse(st: _Stacked, b: _Batch, h_m: torch.Tensor, sup: _Support) -> torch.Tensor:
    """Eqs. (11)-(12) restricted to each client's support (large clients): mean and max over its entries."""
    c = h_m.size(2)
    hm = h_m.reshape(-1, c)
    s = F.softmax(hm, dim=1)
    sn = s / s.norm(dim=1, keepdim=True).clamp_min(_EPS)
    cos = (sn[sup.row] * sn[sup.col]).sum(dim=1)
    cos = torch.where(sup.diag, torch.zeros_like(cos), cos)
    r = st.beta * sup.p0 + (1.0 - st.beta) * cos
    mu = torch.zeros(b.k, dtype=r.dtype, device=r.device).index_add(0, sup.client, r) / sup.counts.clamp_min(
        1
    )
    mx = torch.full((b.k,), -math.inf, dtype=r.dtype, device=r.device)
    mx = mx.scatter_reduce(0, sup.client, r, reduce="amax", include_self=True)
    mu_e, mx_e = mu[sup.client], mx[sup.client]
    rs = _scaled(r, r - mu_e, mu_e, mx_e, st.compat)
    rs = torch.where(sup.diag, torch.ones_like(rs), rs)
    pos_w = torch.where(rs > 0, rs, st.params["lmp.pos"][sup.client] * rs)
    neg_w = torch.where(-rs > 0, -rs, st.params["lmp.neg"][sup.client] * -rs)
    agg_pos = torch.zeros_like(hm).index_add(0, sup.row, pos_w[:, None] * hm[sup.col])
    agg_neg = torch.zeros_like(hm).index_add(0, sup.row, neg_w[:, None] * hm[sup.col])
    return b.view(((F.softmax(agg_pos, dim=1) - F.softmax(agg_neg, dim=1)) + hm) / 2.0)


def _combine(
    out: dict[str, torch.Tensor],
    p_hat: torch.Tensor,
    hcs: torch.Tensor,
    homo: torch.Tensor,
    opts: LocalStepOptions,
) -> torch.Tensor:
    prior = F.softmax(p_hat, dim=2) if opts.compat_double_softmax else p_hat
    y_ho = (F.softmax(out["ho"], dim=2) + prior) / 2.0
    y_he = torch.stack([F.softmax(out[k], dim=2) for k in ("f", "he", "m") if k in out]).mean(dim=0)
    if opts.combine == "soft":
        w = hcs.view(-1, 1, 1)
        return w * y_ho + (1.0 - w) * y_he
    if opts.combine == "hard":
        return torch.where(homo.view(-1, 1, 1), y_ho, y_he)
    if opts.combine == "mean":
        return (y_ho + y_he) / 2.0
    raise ConfigError(f"combine mode must be 'soft', 'hard' or 'mean', got {opts.combine!r}")


def _per_client_mean(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``values`` (K, n), ``mask`` (K, n) -> per-client mean over the mask, 0 where the mask is empty."""
    cnt = mask.sum(dim=1)
    total = (values * mask).sum(dim=1)
    return torch.where(cnt > 0, total / cnt.clamp_min(1), torch.zeros_like(total))


@dataclass
class _Padded:
    """The clients' step-2 inputs in the padded ``(K, n_max, .)`` layout, and which modules each trains."""

    y: torch.Tensor  # (K, n_max)
    train: torch.Tensor  # (K, n_max) bool
    val: torch.Tensor
    test: torch.Tensor
    p_hat: torch.Tensor  # (K, n_max, C)
    target: torch.Tensor  # (K, n_max, C)
    p0: torch.Tensor | _Support | None  # dense (K, n_max, n_max), or the large clients' support
    hcs: torch.Tensor  # (K,)
    homo: torch.Tensor  # (K,) bool: the homophilous module is selected
    use_ho: torch.Tensor  # (K,) weight of the homophilous module's loss
    use_he: torch.Tensor  # (K,) weight of the heterophilous modules' losses


def _check_clients(clients: Sequence[BatchClient], opts: LocalStepOptions) -> int:
    """The common feature width ``F``; :class:`ConfigError` when the clients cannot share a batch."""
    f = int(clients[0].x.size(1))
    if any(int(c.x.size(1)) != f for c in clients):
        raise ConfigError(
            f"AdaFGL step 2 batches clients of one feature width; got widths {sorted({int(c.x.size(1)) for c in clients})}"
        )
    if opts.message_passing:
        kinds = {"missing" if c.p0 is None else "sparse" if c.p0.is_sparse else "dense" for c in clients}
        if "missing" in kinds or len(kinds) != 1:
            raise ConfigError(
                "AdaFGL step 2 with message passing batches clients whose P~(0) is all dense or all sparse, "
                f"got {sorted(kinds)}"
            )
    return f


def _stack_models(
    clients: Sequence[BatchClient], opts: LocalStepOptions, f: int, num_classes: int
) -> _Stacked:
    """Each client's model, initialised as the one-client path does, stacked into ``(K, ...)`` leaves."""
    dev = clients[0].x.device
    models = [_local_model(f, num_classes, opts, c.init_generator).to(dev) for c in clients]
    return _Stacked(models, f, opts.num_hops)


def _pad_inputs(clients: Sequence[BatchClient], b: _Batch, opts: LocalStepOptions) -> _Padded:
    dev = clients[0].x.device
    kk = len(clients)
    g = b.graph
    y = b.view(g.y.clamp_min(0))  # padding rows (-1) are never counted; 0 keeps the gathers in range
    train, val, test = (b.view(g.masks[m]) for m in ("train_mask", "val_mask", "test_mask"))
    p_hat = b.pad_list([c.p_hat for c in clients])
    target = b.pad_list([c.target for c in clients])
    p0: torch.Tensor | _Support | None = None
    if opts.message_passing and clients[0].p0 is not None and clients[0].p0.is_sparse:
        p0 = _Support.build(clients, b)
    elif opts.message_passing:
        p0 = torch.zeros(kk, b.n_max, b.n_max, device=dev)
        for i, c in enumerate(clients):
            n = b.sizes[i]
            p0[i, :n, :n] = c.p0  # type: ignore[index]
    hcs = torch.tensor([c.hcs for c in clients], dtype=torch.float32, device=dev)
    homo = (
        hcs >= opts.hard_threshold if opts.combine == "hard" else torch.ones(kk, dtype=torch.bool, device=dev)
    )
    use_ho = homo.float()
    use_he = (~homo).float() if opts.combine == "hard" else torch.ones(kk, device=dev)
    return _Padded(y, train, val, test, p_hat, target, p0, hcs, homo, use_ho, use_he)


def _knowledge(
    h: torch.Tensor, pad: _Padded, b: _Batch, opts: LocalStepOptions, num_classes: int
) -> torch.Tensor:
    """Eq. (8) per client: ``(K,)``."""
    sq = ((h - pad.target) ** 2).sum(dim=2) * b.valid.float()  # (K, n)
    if opts.knowledge_loss == "mse":
        return sq.sum(dim=1) / (b.counts * num_classes)
    return sq.sum(dim=1).clamp_min(1e-12).sqrt()


def _predict(st: _Stacked, b: _Batch, pad: _Padded, opts: LocalStepOptions) -> torch.Tensor:
    with torch.no_grad():
        return _combine(_forward(st, b, pad.p0, False, None), pad.p_hat, pad.hcs, pad.homo, opts)


def _client_losses(
    out: dict[str, torch.Tensor], pad: _Padded, b: _Batch, opts: LocalStepOptions, num_classes: int
) -> torch.Tensor:
    """Each client's eq. (14) loss, ``(K,)``: per-branch CE or mixture NLL, plus the knowledge term."""
    kk = b.k
    if opts.loss == "branches":
        per_client = torch.zeros(kk, device=b.valid.device)
        for name, logits in out.items():
            ce = F.cross_entropy(logits.reshape(-1, num_classes), pad.y.reshape(-1), reduction="none")
            weight = pad.use_ho if name == "ho" else pad.use_he
            per_client = per_client + weight * _per_client_mean(ce.view(kk, -1), pad.train.float())
    else:
        mix = _combine(out, pad.p_hat, pad.hcs, pad.homo, opts)
        nll = -mix.clamp_min(1e-12).log().gather(2, pad.y.unsqueeze(2)).squeeze(2)
        per_client = _per_client_mean(nll, pad.train.float())
    if opts.knowledge_preserving:
        per_client = per_client + pad.use_ho * _knowledge(out["ho"], pad, b, opts, num_classes)
    return per_client


def _check_finite(per_client: torch.Tensor, clients: Sequence[BatchClient], epoch: int) -> None:
    values = per_client.detach()
    if not bool(torch.isfinite(values).all()):
        bad = [clients[i].id for i in torch.nonzero(~torch.isfinite(values)).flatten().tolist()]
        raise NonFiniteError(f"AdaFGL step 2: non-finite loss on client(s) {bad} at epoch {epoch}")


class _BlendSelection:
    r"""Each blend :math:`(1-\gamma)\hat Y + \gamma\hat P` of ``opts.blend_grid`` at its own best-validation epoch.

    Choosing :math:`\hat Y`'s epoch on the validation nodes inflates its validation accuracy; tracking every blend
    by the same rule keeps the blend phase's comparison of weights on the same footing.
    """

    def __init__(
        self, weights: Sequence[float], pad: _Padded, probs: torch.Tensor, n_val: torch.Tensor
    ) -> None:
        self.weights = tuple(weights)
        self.gamma = torch.tensor(self.weights, dtype=probs.dtype, device=probs.device).view(-1, 1, 1, 1)
        self.pad, self.n_val = pad, n_val
        self.best = self._blend(probs)
        self.best_val = torch.full((len(self.weights), probs.size(0)), -1.0, device=probs.device)

    def _blend(self, probs: torch.Tensor) -> torch.Tensor:
        return (1.0 - self.gamma) * probs.unsqueeze(0) + self.gamma * self.pad.p_hat.to(
            probs.dtype
        ).unsqueeze(0)

    def update(self, probs: torch.Tensor, keep_last: bool) -> None:
        blended = self._blend(probs)  # (G, K, n_max, C)
        correct = ((blended.argmax(dim=3) == self.pad.y) & self.pad.val).sum(dim=2).float()
        acc = torch.where(self.n_val > 0, correct / self.n_val.clamp_min(1), torch.zeros_like(correct))
        better = (
            torch.ones_like(acc, dtype=torch.bool) if keep_last else (acc > self.best_val) | (self.n_val == 0)
        )
        self.best_val = torch.where(better, acc, self.best_val)
        self.best = torch.where(better.unsqueeze(-1).unsqueeze(-1), blended, self.best)

    def of_client(self, i: int, n: int) -> dict[float, torch.Tensor]:
        return {g: self.best[j, i, :n].clone() for j, g in enumerate(self.weights)}


def _outcomes(
    b: _Batch,
    pad: _Padded,
    best_probs: torch.Tensor,
    best_epoch: torch.Tensor,
    histories: list[list[float]],
    blends: _BlendSelection | None = None,
) -> list[LocalOutcome]:
    """Unpad the selected epoch of every client into its :class:`LocalOutcome`."""
    pred = best_probs.argmax(dim=2)
    y, train, val, test = pad.y, pad.train, pad.val, pad.test
    outcomes = []
    for i in range(b.k):
        n = b.sizes[i]
        ok = pred[i, :n] == y[i, :n]
        outcomes.append(
            LocalOutcome(
                probs=best_probs[i, :n].clone(),
                best_epoch=int(best_epoch[i]),
                val_correct=int((ok & val[i, :n]).sum()),
                val_total=int(val[i, :n].sum()),
                test_correct=int((ok & test[i, :n]).sum()),
                test_total=int(test[i, :n].sum()),
                train_correct=int((ok & train[i, :n]).sum()),
                train_total=int(train[i, :n].sum()),
                history=histories[i],
                blends={} if blends is None else blends.of_client(i, n),
            )
        )
    return outcomes


def train_local_batched(
    clients: Sequence[BatchClient],
    opts: LocalStepOptions,
    *,
    num_classes: int,
    generator: torch.Generator | None,
) -> list[LocalOutcome]:
    r"""Step 2 on every client of the batch: train the modules (eq. (14)), keep each best-validation epoch.

    Loss ``"branches"`` ([C2], spec §7.17): :math:`\mathrm{CE}(\tilde H_{ho}) + L_{knowledge} +
    \mathrm{CE}(H_f) + \mathrm{CE}(\tilde H_{he}) + \mathrm{CE}(H_m)` on train nodes, with
    :math:`L_{knowledge} = \mathrm{mean}((\tilde H_{ho} - \hat X)^2)` over all local nodes (eq. (8),
    ``knowledge_loss="frobenius"``: :math:`\lVert\tilde H_{ho} - \hat X\rVert_F`). Loss ``"mixture"``:
    NLL of :math:`\log\hat Y` on train nodes plus :math:`L_{knowledge}`. Under the hard switch only the
    selected module is trained (the other's loss weight is 0). A client without train nodes trains on
    :math:`L_{knowledge}` alone.

    Raises:
        ConfigError: clients disagree on the feature width, or mix dense and sparse message passing.
        NonFiniteError: a client's loss became NaN/Inf (names the client and the epoch).
    """
    if not clients:
        return []
    f = _check_clients(clients, opts)
    dev = clients[0].x.device
    st = _stack_models(clients, opts, f, num_classes)
    b = _Batch(clients)
    pad = _pad_inputs(clients, b, opts)
    kk = len(clients)
    optim = StackedOptimizer(st.params, "adam", lr=opts.lr, weight_decay=opts.weight_decay)
    n_val = pad.val.sum(dim=1)

    best_probs = _predict(st, b, pad, opts)
    best_val = torch.full((kk,), -1.0, device=dev)
    best_epoch = torch.zeros(kk, dtype=torch.long, device=dev)
    histories: list[list[float]] = [[] for _ in clients]
    blends = _BlendSelection(opts.blend_grid, pad, best_probs, n_val) if opts.blend_grid else None
    for epoch in range(1, opts.epochs + 1):
        optim.zero_grad()
        out = _forward(st, b, pad.p0, True, generator)
        per_client = _client_losses(out, pad, b, opts, num_classes)
        _check_finite(per_client, clients, epoch)
        per_client.sum().backward()
        optim.step()
        probs = _predict(st, b, pad, opts)
        correct_val = ((probs.argmax(dim=2) == pad.y) & pad.val).sum(dim=1).float()
        val_acc = torch.where(n_val > 0, correct_val / n_val.clamp_min(1), torch.zeros_like(correct_val))
        for i, v in enumerate(val_acc.tolist()):
            histories[i].append(v)
        if opts.selection == "best_val":
            better = (val_acc > best_val) | (n_val == 0)
        else:
            better = torch.ones(kk, dtype=torch.bool, device=dev)
        best_val = torch.where(better, val_acc, best_val)
        best_epoch = torch.where(better, torch.full_like(best_epoch, epoch), best_epoch)
        best_probs = torch.where(better.view(-1, 1, 1), probs, best_probs)
        if blends is not None:
            blends.update(probs, keep_last=opts.selection != "best_val")
    return _outcomes(b, pad, best_probs, best_epoch, histories, blends)
