r"""FedSpray's client batching: the local graphs of a round's clients as one block-diagonal batch.

Client side, private to :mod:`securefgl.algorithms.fedspray`. The clients of a round are trained *together*:
their local graphs are concatenated along the node axis (client ``k`` owns rows ``ptr[k]:ptr[k+1]``), message
passing is one block-diagonal sparse product, and each client's private parameters are one slice of a stacked
tensor (``(K, ...)``). A loss that is a sum of per-client losses gives every client exactly the gradient it
would get alone, and :class:`~securefgl.algorithms.fedspray._adam.BatchedAdam` (element-wise, with a
per-client step counter) makes exactly the update the client's own Adam would make; so one batched step
equals ``K`` independent local steps.

Sparse bag-of-words features (Cora, CiteSeer) are multiplied by per-client weights as one product with the
block-diagonal feature matrix :math:`\mathrm{blockdiag}(X_1, \dots, X_K) \in R^{N \times KF}` against the
stacked weights reshaped to :math:`(KF, H)`; dense features fall back to one matmul per client.

Shapes: ``K`` clients, ``N`` nodes of all of them, ``F`` input features, ``H`` hidden width, ``C`` classes.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from securefgl.errors import ConfigError

__all__ = ["SPARSE_DENSITY", "ClientPack", "Features", "pack_clients", "segment_matmul"]

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


def _check_sizes(clients: Sequence[Any]) -> tuple[list[int], int]:
    """``(nodes per client, F)``; :class:`ConfigError` for a client without nodes, or mixed widths."""
    sizes = [int(c.num_nodes) for c in clients]
    for k, size in enumerate(sizes):
        if size == 0:
            raise ConfigError(
                f"client at batch position {k} has no nodes; FedSpray needs a non-empty local graph"
            )
    widths = sorted({int(c.x.shape[1]) for c in clients})
    if len(widths) != 1:
        raise ConfigError(f"clients have features of different widths {widths}; expected one width")
    return sizes, widths[0]


def _cat_mask(clients: Sequence[Any], sizes: list[int], name: str, device: torch.device) -> Tensor:
    """The clients' ``name`` masks concatenated (all false for a client without one)."""
    parts = []
    for c, size in zip(clients, sizes, strict=True):
        m = getattr(c, name, None)
        parts.append(torch.zeros(size, dtype=torch.bool, device=device) if m is None else m.to(device).bool())
    return torch.cat(parts)


def _adjacencies(
    clients: Sequence[Any], offsets: list[int], n: int, device: torch.device, dtype: torch.dtype
) -> tuple[_Sparse, _Sparse]:
    """``(adj_mean, adj_gcn)`` of the union of the local graphs, edges as given (duplicates and self loops
    count as in PyG's layers)."""
    src = torch.cat(
        [c.edge_index.to(device).long()[0] + off for c, off in zip(clients, offsets, strict=True)]
    )
    dst = torch.cat(
        [c.edge_index.to(device).long()[1] + off for c, off in zip(clients, offsets, strict=True)]
    )
    ones = torch.ones(src.numel(), device=device)
    # messages flow source -> target (PyG's default flow): row = target, column = source
    deg_in = torch.zeros(n, device=device).index_add_(0, dst, ones)
    adj_mean = _Sparse.build(dst, src, ones / deg_in[dst].clamp(min=1), (n, n))
    from torch_geometric.nn.conv.gcn_conv import gcn_norm

    ei, w = gcn_norm(torch.stack([src, dst]), None, n, add_self_loops=True, dtype=dtype)
    return adj_mean, _Sparse.build(ei[1], ei[0], w, (n, n))


def _sparse_features(
    x: Tensor, batch: Tensor, k: int, sparse: bool | None
) -> tuple[_Sparse | None, _Sparse | None]:
    """``(x_shared, x_block)`` as sparse matrices, or ``(None, None)`` to multiply ``x`` densely."""
    n, f = x.shape
    nz = x.nonzero(as_tuple=True)
    use_sparse = (nz[0].numel() < SPARSE_DENSITY * x.numel()) if sparse is None else sparse
    if not use_sparse:
        return None, None
    vals = x[nz]
    x_shared = _Sparse.build(nz[0], nz[1], vals, (n, f))
    x_block = _Sparse.build(nz[0], nz[1] + batch[nz[0]] * f, vals, (n, k * f))
    return x_shared, x_block


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
    sizes, f = _check_sizes(clients)
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
    train, val, test = (_cat_mask(clients, sizes, m, device) for m in ("train_mask", "val_mask", "test_mask"))
    adj_mean, adj_gcn = _adjacencies(clients, ptr[:-1].tolist(), n, device, x.dtype)
    x_shared, x_block = _sparse_features(x, batch, k_clients, sparse)
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
