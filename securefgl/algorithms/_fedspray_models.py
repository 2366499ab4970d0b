r"""FedSpray internals: client batching, batched personalised GNNs, the feature-structure encoder, batched Adam.

Private to :mod:`securefgl.algorithms.fedspray`. The clients of a round are trained *together*: their local
graphs are concatenated along the node axis (client ``k`` owns rows ``ptr[k]:ptr[k+1]``), message passing is
one block-diagonal sparse product, and each client's private parameters are one slice of a stacked tensor
(``(K, ...)``). A loss that is a sum of per-client losses gives every client exactly the gradient it would
get alone, and :class:`BatchedAdam` (element-wise, with a per-client step counter) makes exactly the update
the client's own Adam would make; so one batched step equals ``K`` independent local steps.

Sparse bag-of-words features (Cora, CiteSeer) are multiplied by per-client weights as one product with the
block-diagonal feature matrix :math:`\mathrm{blockdiag}(X_1, \dots, X_K) \in R^{N \times KF}` against the
stacked weights reshaped to :math:`(KF, H)`; dense features fall back to one matmul per client.

Shapes: ``K`` clients, ``N`` nodes of all of them, ``F`` input features, ``H`` hidden width, ``C`` classes,
``D`` proxy / embedding width (``d_s``).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from securefgl.errors import ConfigError

__all__ = [
    "ENCODER_KEYS",
    "GNN_KINDS",
    "BatchedAdam",
    "ClientPack",
    "Features",
    "encoder_forward",
    "encoder_shapes",
    "gnn_forward",
    "gnn_param_shapes",
    "init_encoder",
    "pack_clients",
    "segment_matmul",
    "to_math_layout",
    "uniform01_like",
]

GNN_KINDS = ("gcn", "sgc", "sage")
#: The encoder's parameters, in upload order: embedding layer g_e, classifier g_p, projector g_q.
ENCODER_KEYS = ("W_e", "b_e", "W_p", "b_p", "W_q", "b_q")
#: Feature matrices sparser than this are multiplied as sparse matrices.
SPARSE_DENSITY = 0.2


class _SpMM(torch.autograd.Function):
    """``A @ B`` for a constant sparse CSR ``A`` with its transpose precomputed (fast backward for ``B``)."""

    @staticmethod
    def forward(ctx: Any, a: Tensor, a_t: Tensor, b: Tensor) -> Tensor:  # type: ignore[override]
        ctx.a_t = a_t
        return torch.sparse.mm(a, b)

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[None, None, Tensor]:  # type: ignore[override]
        return None, None, torch.sparse.mm(ctx.a_t, grad.contiguous())


def _csr_raw(crow: Tensor, col: Tensor, val: Tensor, shape: tuple[int, ...]) -> Tensor:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # "sparse CSR support is in beta"
        return torch.sparse_csr_tensor(crow, col, val, shape)


def _csr(row: Tensor, col: Tensor, val: Tensor, shape: tuple[int, int]) -> Tensor:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # "sparse CSR support is in beta"
        t = torch.sparse_coo_tensor(torch.stack([row, col]), val, shape, check_invariants=False)
        return t.coalesce().to_sparse_csr()


@dataclass
class _Sparse:
    """A constant sparse CSR matrix, its transpose, and the map between their value orders.

    ``a_t.values() == a.values()[perm]``, so :meth:`with_values` can rescale the entries (dropout) of both
    without re-sorting.
    """

    a: Tensor
    a_t: Tensor
    perm: Tensor

    @staticmethod
    def build(row: Tensor, col: Tensor, val: Tensor, shape: tuple[int, int]) -> _Sparse:
        a = _csr(row, col, val, shape)
        # the transpose, carrying each entry's position in ``a`` to recover the permutation
        a_row = torch.repeat_interleave(torch.arange(shape[0], device=val.device), a.crow_indices().diff())
        pos = torch.arange(a.values().numel(), device=val.device, dtype=torch.float64)
        t_pos = _csr(a.col_indices(), a_row, pos, (shape[1], shape[0]))
        perm = t_pos.values().round().long()
        a_t = _csr_raw(t_pos.crow_indices(), t_pos.col_indices(), a.values()[perm], (shape[1], shape[0]))
        return _Sparse(a, a_t, perm)

    def with_values(self, values: Tensor) -> _Sparse:
        """The same sparsity pattern with new values (in ``a``'s order)."""
        a = _csr_raw(self.a.crow_indices(), self.a.col_indices(), values, tuple(self.a.shape))
        a_t = _csr_raw(
            self.a_t.crow_indices(), self.a_t.col_indices(), values[self.perm], tuple(self.a_t.shape)
        )
        return _Sparse(a, a_t, self.perm)

    def __matmul__(self, dense: Tensor) -> Tensor:
        return _SpMM.apply(self.a, self.a_t, dense)


@dataclass
class ClientPack:
    """The local graphs of the clients of a round, concatenated along the node axis.

    Attributes:
        ptr: ``(K+1,)`` node offsets: client ``k`` owns rows ``ptr[k]:ptr[k+1]``.
        batch: ``(N,)`` client index of each node.
        x: ``(N, F)`` dense features.
        x_shared: sparse ``(N, F)`` features, or ``None`` when dense (products with shared weights).
        x_block: sparse ``(N, K*F)`` block-diagonal features, or ``None`` (products with per-client weights);
            its values are in the same order as ``x_shared``'s.
        y: ``(N,)`` labels. train, val, test: ``(N,)`` boolean masks.
        adj_gcn: block-diagonal :math:`D^{-1/2}(A+I)D^{-1/2}` (GCN, SGC; PyG's ``gcn_norm``).
        adj_mean: block-diagonal in-neighbour mean (SAGE; PyG's ``aggr="mean"``).
        num_nodes, num_train: ``(K,)`` node and labelled-node counts.
        train_counts: ``(K, C)`` labelled-node class histogram.
        majority: ``(K,)`` majority class (argmax of ``train_counts``; ``-1`` without labelled nodes).
    """

    ptr: Tensor
    batch: Tensor
    x: Tensor
    x_shared: _Sparse | None
    x_block: _Sparse | None
    y: Tensor
    train: Tensor
    val: Tensor
    test: Tensor
    adj_gcn: _Sparse
    adj_mean: _Sparse
    num_nodes: Tensor
    num_train: Tensor
    train_counts: Tensor
    majority: Tensor
    num_classes: int
    _cache: dict[Any, Tensor] = field(default_factory=dict, repr=False)

    @property
    def num_clients(self) -> int:
        return int(self.ptr.numel() - 1)

    @property
    def num_features(self) -> int:
        return int(self.x.shape[1])

    @property
    def device(self) -> torch.device:
        return self.x.device

    def segments(self) -> list[tuple[int, int]]:
        p = self.ptr.tolist()
        return list(zip(p[:-1], p[1:], strict=True))

    def client_sum(self, values: Tensor) -> Tensor:
        """Sum per client of a per-node quantity: ``(N, ...) -> (K, ...)``."""
        out = torch.zeros((self.num_clients, *values.shape[1:]), dtype=values.dtype, device=values.device)
        return out.index_add_(0, self.batch, values)

    def features(self, p: float = 0.0, generator: torch.Generator | None = None) -> Features:
        """The input features, with inverted dropout of rate ``p`` applied to their entries."""
        if p == 0.0:
            return Features(self, self.x, self.x_shared, self.x_block)
        if self.x_shared is None or self.x_block is None:
            keep = torch.empty_like(self.x).bernoulli_(1.0 - p, generator=generator)
            return Features(self, self.x * keep / (1.0 - p), None, None)
        vals = self.x_shared.a.values()
        keep = torch.empty_like(vals).bernoulli_(1.0 - p, generator=generator)
        vals = vals * keep / (1.0 - p)
        return Features(self, None, self.x_shared.with_values(vals), self.x_block.with_values(vals))

    def propagated(self, hops: int) -> Tensor:
        r""":math:`\hat A^{K} X` (cached): SGC's propagated features."""
        if ("sgc", hops) not in self._cache:
            with torch.no_grad():
                z = self.x
                for _ in range(hops):
                    z = self.adj_gcn @ z
                self._cache[("sgc", hops)] = z
        return self._cache[("sgc", hops)]


@dataclass
class Features:
    """Input features of a :class:`ClientPack` (possibly after dropout), ready for linear maps."""

    pack: ClientPack
    dense: Tensor | None
    shared: _Sparse | None
    block: _Sparse | None

    def linear(self, w: Tensor) -> Tensor:
        """``X_k W`` for every client: shared ``W (F, H)`` or per-client ``W (K, F, H)`` -> ``(N, H)``."""
        if w.dim() == 2:
            return self.shared @ w if self.shared is not None else self.dense @ w  # type: ignore[operator]
        if self.block is not None:
            return self.block @ w.reshape(-1, w.shape[-1])
        if self.dense is None:  # pragma: no cover - one of the two representations always exists
            raise ConfigError("Features hold neither a dense nor a sparse representation")
        return segment_matmul(self.dense, w, self.pack.segments())


def segment_matmul(h: Tensor, w: Tensor, segments: Sequence[tuple[int, int]]) -> Tensor:
    """Per-client products ``h[s:e] @ w[k]`` concatenated: ``(N, H), (K, H, C) -> (N, C)``."""
    return torch.cat([h[s:e] @ w[k] for k, (s, e) in enumerate(segments)], dim=0)


def pack_clients(
    clients: Sequence[Any],
    *,
    num_classes: int,
    device: torch.device | str | None = None,
    sparse: bool | None = None,
) -> ClientPack:
    """Concatenate the clients' local graphs (``x``, ``y``, local ``edge_index``, split masks).

    Args:
        clients: One ``torch_geometric.data.Data`` per client, in batch order.
        num_classes: ``C``, the global number of classes.
        device: Where the batch lives. (default: the first client's device)
        sparse: Multiply features as sparse matrices; ``None`` decides from the density
            (below :data:`SPARSE_DENSITY`). (default: ``None``)

    Raises:
        ConfigError: No client, a client without nodes, features of different widths, labels outside
            ``[0, C)``.
    """
    if not clients:
        raise ConfigError("FedSpray needs at least one client in a batch, got none")
    device = torch.device(device) if device is not None else clients[0].x.device
    sizes = [int(c.num_nodes) for c in clients]
    for k, size in enumerate(sizes):
        if size == 0:
            raise ConfigError(
                f"client at batch position {k} has no nodes; FedSpray needs a non-empty local graph"
            )
    widths = sorted({int(c.x.shape[1]) for c in clients})
    if len(widths) != 1:
        raise ConfigError(f"clients have features of different widths {widths}; expected one width")
    f = widths[0]
    k_clients = len(clients)
    ptr = torch.tensor([0, *torch.tensor(sizes).cumsum(0).tolist()], device=device)
    n = int(ptr[-1])
    batch = torch.repeat_interleave(
        torch.arange(k_clients, device=device), torch.tensor(sizes, device=device)
    )
    x = torch.cat([c.x.to(device).float() for c in clients])
    y = torch.cat([c.y.to(device).long().reshape(-1) for c in clients])
    if y.numel() and (int(y.min()) < 0 or int(y.max()) >= num_classes):
        raise ConfigError(
            f"labels must lie in [0, {num_classes}), got min {int(y.min())}, max {int(y.max())}"
        )

    def mask(name: str) -> Tensor:
        parts = []
        for c, size in zip(clients, sizes, strict=True):
            m = getattr(c, name, None)
            parts.append(
                torch.zeros(size, dtype=torch.bool, device=device) if m is None else m.to(device).bool()
            )
        return torch.cat(parts)

    train, val, test = mask("train_mask"), mask("val_mask"), mask("test_mask")
    # the union of the local graphs, edges as given (duplicates and self loops count as in PyG's layers)
    src = torch.cat(
        [c.edge_index.to(device).long()[0] + off for c, off in zip(clients, ptr[:-1].tolist(), strict=True)]
    )
    dst = torch.cat(
        [c.edge_index.to(device).long()[1] + off for c, off in zip(clients, ptr[:-1].tolist(), strict=True)]
    )
    ones = torch.ones(src.numel(), device=device)
    # messages flow source -> target (PyG's default flow): row = target, column = source
    deg_in = torch.zeros(n, device=device).index_add_(0, dst, ones)
    adj_mean = _Sparse.build(dst, src, ones / deg_in[dst].clamp(min=1), (n, n))
    from torch_geometric.nn.conv.gcn_conv import gcn_norm

    ei, w = gcn_norm(torch.stack([src, dst]), None, n, add_self_loops=True, dtype=x.dtype)
    adj_gcn = _Sparse.build(ei[1], ei[0], w, (n, n))

    nz = x.nonzero(as_tuple=True)
    use_sparse = (nz[0].numel() < SPARSE_DENSITY * x.numel()) if sparse is None else sparse
    x_shared = x_block = None
    if use_sparse:
        vals = x[nz]
        x_shared = _Sparse.build(nz[0], nz[1], vals, (n, f))
        x_block = _Sparse.build(nz[0], nz[1] + batch[nz[0]] * f, vals, (n, k_clients * f))
    counts = torch.zeros(k_clients, num_classes, device=device)
    counts.index_put_((batch[train], y[train]), torch.ones(int(train.sum()), device=device), accumulate=True)
    num_train = counts.sum(1).long()
    majority = torch.where(num_train > 0, counts.argmax(1), torch.full_like(num_train, -1))
    return ClientPack(
        ptr=ptr,
        batch=batch,
        x=x,
        x_shared=x_shared,
        x_block=x_block,
        y=y,
        train=train,
        val=val,
        test=test,
        adj_gcn=adj_gcn,
        adj_mean=adj_mean,
        num_nodes=torch.tensor(sizes, device=device),
        num_train=num_train,
        train_counts=counts,
        majority=majority,
        num_classes=num_classes,
    )


class BatchedAdam:
    """Adam (Kingma & Ba, 2015) over stacked per-client parameters, with a per-client step counter.

    Every parameter has the client on its first axis (or, with ``owners``, one client index per row, for
    per-node proxies). ``step(active)`` updates only the active clients' entries, each with its own bias
    correction, so stepping the batch equals stepping every active client's own ``torch.optim.Adam``
    (``amsgrad=False``; ``weight_decay`` is the L2 penalty added to the gradient, as there).

    Args:
        params: Leaf tensors with ``requires_grad``.
        lr: Learning rate.
        steps: ``(K,)`` float64 step counts so far.
        exp_avg, exp_avg_sq: Moments matching ``params`` (zeros when ``None``).
        owners: Per parameter, ``None`` (first axis = client) or a ``(rows,)`` client index per row.
        weight_decay: L2 penalty. (default: ``0.0``)
        betas: (default: ``(0.9, 0.999)``). eps: (default: ``1e-8``).
    """

    def __init__(
        self,
        params: Sequence[Tensor],
        lr: float,
        *,
        steps: Tensor,
        exp_avg: Sequence[Tensor] | None = None,
        exp_avg_sq: Sequence[Tensor] | None = None,
        owners: Sequence[Tensor | None] | None = None,
        weight_decay: float = 0.0,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
    ) -> None:
        if not math.isfinite(lr) or lr <= 0:
            raise ConfigError(f"learning rate must be positive and finite, got {lr!r}")
        self.params = list(params)
        self.lr, self.betas, self.eps, self.weight_decay = float(lr), betas, float(eps), float(weight_decay)
        self.steps = steps
        self.exp_avg = list(exp_avg) if exp_avg is not None else [torch.zeros_like(p) for p in self.params]
        self.exp_avg_sq = (
            list(exp_avg_sq) if exp_avg_sq is not None else [torch.zeros_like(p) for p in self.params]
        )
        self.owners = list(owners) if owners is not None else [None] * len(self.params)
        self._torch: torch.optim.Adam | None = None

    def reset(self) -> None:
        """Forget the moments and the step counts, as a freshly built optimizer."""
        self.steps.zero_()
        for m, v in zip(self.exp_avg, self.exp_avg_sq, strict=True):
            m.zero_()
            v.zero_()

    def zero_grad(self) -> None:
        for p in self.params:
            p.grad = None

    @torch.no_grad()
    def step(self, active: Tensor | None = None) -> None:
        """One Adam step for the clients in ``active`` (``(K,)`` bool; every client when ``None``)."""
        b1, b2 = self.betas
        act = torch.ones_like(self.steps, dtype=torch.bool) if active is None else active
        self.steps += act.to(self.steps.dtype)
        if bool(act.all()) and bool((self.steps == self.steps[0]).all()):
            self._uniform_step(float(self.steps[0]))
            return
        t = self.steps.clamp(min=1)
        step_size = (self.lr / (1 - b1**t)).float()
        bc2_sqrt = (1 - b2**t).sqrt().float()
        for p, m, v, owner in zip(self.params, self.exp_avg, self.exp_avg_sq, self.owners, strict=True):
            g = p.grad if p.grad is not None else torch.zeros_like(p)
            if self.weight_decay:
                g = g + self.weight_decay * p
            shape = (-1,) + (1,) * (p.dim() - 1)
            a = (act if owner is None else act[owner]).view(shape)
            ss = (step_size if owner is None else step_size[owner]).view(shape)
            bc = (bc2_sqrt if owner is None else bc2_sqrt[owner]).view(shape)
            m.copy_(torch.where(a, m * b1 + g * (1 - b1), m))
            v.copy_(torch.where(a, v * b2 + g * g * (1 - b2), v))
            p.sub_(torch.where(a, ss * m / (v.sqrt() / bc + self.eps), torch.zeros_like(p)))

    def _uniform_step(self, t: float) -> None:
        """Every client active with the same step count: one ``torch.optim.Adam`` step (fused when possible).

        The optimizer works on this object's moment tensors in place, so the state stays here.
        """
        if self._torch is None:
            try:
                opt = torch.optim.Adam(
                    self.params,
                    lr=self.lr,
                    betas=self.betas,
                    eps=self.eps,
                    weight_decay=self.weight_decay,
                    fused=True,
                )
            except (RuntimeError, ValueError):  # pragma: no cover - fused kernel unavailable on this device
                opt = torch.optim.Adam(
                    self.params, lr=self.lr, betas=self.betas, eps=self.eps, weight_decay=self.weight_decay
                )
            for p, m, v in zip(self.params, self.exp_avg, self.exp_avg_sq, strict=True):
                opt.state[p] = {
                    "step": torch.zeros((), dtype=torch.float32, device=p.device),
                    "exp_avg": m,
                    "exp_avg_sq": v,
                }
            self._torch = opt
        for p in self.params:
            if p.grad is None:
                p.grad = torch.zeros_like(p)
            self._torch.state[p]["step"].fill_(t - 1)
        self._torch.step()

    def _uniform_step_reference(self, t: float) -> None:
        """The same step written out (kept as the reference the tests compare against)."""
        b1, b2 = self.betas
        step_size = self.lr / (1 - b1**t)
        bc2_sqrt = math.sqrt(1 - b2**t)
        for p, m, v in zip(self.params, self.exp_avg, self.exp_avg_sq, strict=True):
            g = p.grad if p.grad is not None else torch.zeros_like(p)
            if self.weight_decay:
                g = g.add(p, alpha=self.weight_decay)
            m.mul_(b1).add_(g, alpha=1 - b1)
            v.mul_(b2).addcmul_(g, g, value=1 - b2)
            denom = v.sqrt().div_(bc2_sqrt).add_(self.eps)
            p.addcdiv_(m, denom, value=-step_size)


def _uniform(shape: tuple[int, ...], low: float, high: float, gen: torch.Generator) -> Tensor:
    return torch.rand(shape, generator=gen) * (high - low) + low


def gnn_param_shapes(
    kind: str, num_features: int, num_classes: int, hidden: int, layers: int
) -> dict[str, tuple[int, ...]]:
    """Parameter names and shapes of a securefgl GNN (``securefgl.nn``'s names; weights ``(out, in)``)."""
    if kind == "sgc":
        return {"conv.lin.weight": (num_classes, num_features), "conv.lin.bias": (num_classes,)}
    dims = [num_features] + [hidden] * (layers - 1) + [num_classes]
    out: dict[str, tuple[int, ...]] = {}
    for i, (a, b) in enumerate(zip(dims[:-1], dims[1:], strict=True)):
        if kind == "gcn":
            out[f"convs.{i}.lin.weight"] = (b, a)
            out[f"convs.{i}.bias"] = (b,)
        elif kind == "sage":
            out[f"convs.{i}.lin_l.weight"] = (b, a)
            out[f"convs.{i}.lin_l.bias"] = (b,)
            out[f"convs.{i}.lin_r.weight"] = (b, a)
        else:
            raise ConfigError(f"unknown FedSpray GNN {kind!r}; valid choices: {', '.join(GNN_KINDS)}")
    return out


def uniform01_like(params: dict[str, Tensor], generator: torch.Generator) -> dict[str, Tensor]:
    """FedSpray's code initialisation: every parameter, biases included, from :math:`U[0,1)`."""
    return {k: _uniform(tuple(v.shape), 0.0, 1.0, generator).to(v.device) for k, v in params.items()}


def gnn_forward(
    kind: str,
    params: dict[str, Tensor],
    pack: ClientPack,
    *,
    layers: int = 2,
    hops: int = 2,
    dropout: float = 0.0,
    generator: torch.Generator | None = None,
) -> Tensor:
    r"""Logits of every client's own GNN on its own graph: stacked ``params`` ``(K, ...)`` -> ``(N, C)``.

    ``params`` use securefgl.nn's names with weights in ``(K, in, out)`` layout (:func:`to_math_layout`).

    The same networks as :mod:`securefgl.nn` (dropout before every layer, ReLU between layers):

    - ``gcn``: :math:`h' = \hat A\, h W^\top + b`.
    - ``sage``: :math:`h_i' = \mathrm{mean}_{j \in N(i)} h_j W_l^\top + b_l + h_i W_r^\top`.
    - ``sgc``: :math:`\hat A^{K} X W^\top + b` (``hops`` = K).

    ``dropout > 0`` draws masks from ``generator`` (training); 0 is the deterministic network.
    """
    b = pack.batch
    segs = pack.segments()

    def drop(h: Tensor) -> Tensor:
        if dropout == 0.0:
            return h
        keep = torch.empty_like(h).bernoulli_(1.0 - dropout, generator=generator)
        return h * keep / (1.0 - dropout)

    if kind == "sgc":
        z = drop(pack.propagated(hops))
        return segment_matmul(z, params["conv.lin.weight"], segs) + params["conv.lin.bias"][b]
    if kind not in ("gcn", "sage"):
        raise ConfigError(f"unknown FedSpray GNN {kind!r}; valid choices: {', '.join(GNN_KINDS)}")
    feats = pack.features(dropout, generator)
    h: Tensor | None = None
    for i in range(layers):
        if i > 0:
            h = drop(h)  # type: ignore[arg-type]

        def lin(name: str, i: int = i, h: Tensor | None = h) -> Tensor:
            if i == 0:
                return feats.linear(params[name])
            return segment_matmul(h, params[name], segs)  # type: ignore[arg-type]

        if kind == "gcn":
            out = pack.adj_gcn @ lin(f"convs.{i}.lin.weight") + params[f"convs.{i}.bias"][b]
        else:
            out = (
                pack.adj_mean @ lin(f"convs.{i}.lin_l.weight")
                + params[f"convs.{i}.lin_l.bias"][b]
                + lin(f"convs.{i}.lin_r.weight")
            )
        h = torch.relu(out) if i < layers - 1 else out
    return h  # type: ignore[return-value]


def to_math_layout(name: str, value: Tensor) -> Tensor:
    """A securefgl.nn parameter in the layout :func:`gnn_forward` uses: weights ``(out, in)`` -> ``(in, out)``.

    Works on one client's tensor or a stacked one (the last two axes are swapped); the map is its own inverse.
    """
    return value.transpose(-1, -2).contiguous() if name.endswith("weight") else value


def init_encoder(
    num_features: int,
    dim: int,
    num_classes: int,
    *,
    generator: torch.Generator,
    device: torch.device | str = "cpu",
) -> dict[str, Tensor]:
    r"""The global feature-structure encoder :math:`\omega_0 = (W_e, b_e, W_p, b_p, W_q, b_q)`.

    Every weight and bias is drawn from :math:`U(\pm 1/\sqrt{\mathrm{out}})`, ``out`` being the layer's
    output width (FedSpray's code). Shapes: :math:`W_e (F, D)`, :math:`b_e (D,)`, :math:`W_p, W_q (D, C)`,
    :math:`b_p, b_q (C,)`.
    """
    be, bc = 1 / math.sqrt(dim), 1 / math.sqrt(num_classes)
    enc = {
        "W_e": _uniform((num_features, dim), -be, be, generator),
        "b_e": _uniform((dim,), -be, be, generator),
        "W_p": _uniform((dim, num_classes), -bc, bc, generator),
        "b_p": _uniform((num_classes,), -bc, bc, generator),
        "W_q": _uniform((dim, num_classes), -bc, bc, generator),
        "b_q": _uniform((num_classes,), -bc, bc, generator),
    }
    return {k: v.to(device) for k, v in enc.items()}


def encoder_shapes(num_features: int, dim: int, num_classes: int) -> dict[str, tuple[int, ...]]:
    """Shapes of the encoder's parameters, in :data:`ENCODER_KEYS` order."""
    return {
        "W_e": (num_features, dim),
        "b_e": (dim,),
        "W_p": (dim, num_classes),
        "b_p": (num_classes,),
        "W_q": (dim, num_classes),
        "b_q": (num_classes,),
    }


def encoder_forward(enc: dict[str, Tensor], pack: ClientPack, proxies: Tensor) -> tuple[Tensor, Tensor]:
    r"""Classifier and projector logits of the feature-structure encoder.

    .. math::

        e_i = \mathrm{ReLU}(x_i W_e + b_e),\quad o^p_i = (e_i + s_i) W_p + b_p,\quad o^q_i = e_i W_q + b_q.

    ``enc`` is the global encoder (2-D weights, shared by all nodes) or the clients' local copies stacked
    ``(K, ...)``.

    Shapes:
        proxies: ``(N, D)``. Returns ``(o_p, o_q)``, each ``(N, C)``.
    """
    feats = pack.features()
    if enc["W_e"].dim() == 2:
        e = torch.relu(feats.linear(enc["W_e"]) + enc["b_e"])
        return (e + proxies) @ enc["W_p"] + enc["b_p"], e @ enc["W_q"] + enc["b_q"]
    b, segs = pack.batch, pack.segments()
    e = torch.relu(feats.linear(enc["W_e"]) + enc["b_e"][b])
    o_p = segment_matmul(e + proxies, enc["W_p"], segs) + enc["b_p"][b]
    o_q = segment_matmul(e, enc["W_q"], segs) + enc["b_q"][b]
    return o_p, o_q
