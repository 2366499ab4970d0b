r"""Many clients' graphs as one padded disjoint union, for training the clients of a round together.

A :class:`GraphBatch` lays the K client graphs out so that every client's nodes occupy a contiguous,
padded block of rows. Clients are ordered by size (largest first) and grouped into a few *buckets*; inside
a bucket every client is padded to the bucket's largest client, so a per-client linear layer is one
batched matrix product per bucket:

.. math::
    H_{[k]} = X_{[k]} W_k^\top \quad\text{for all } k \text{ of a bucket at once:}\quad
    \texttt{bmm}\big(X_{\text{bucket}} \in \mathbb{R}^{K_b\times m_b\times F},\;
    W_{\text{bucket}}^\top \in \mathbb{R}^{K_b\times F\times H}\big)

and message passing is one sparse product with the block-diagonal adjacency of the union (the padding rows
are isolated). Stacked parameters ``(K, ...)`` are indexed by *batch position* (``GraphBatch.order``
maps batch positions to the caller's graph indices), and each bucket is a contiguous slice of the stack,
so no parameter is ever copied per client. The bucket boundaries are chosen by a small dynamic program
that trades padding rows against the number of ``bmm`` calls.

The ``packed`` layout keeps the caller's order and pads nothing (client ``k`` owns rows
``segments()[k]``, one bucket per client): the layout of algorithms whose per-client state is indexed by
node (FedSpray's per-node proxies), whose per-client weights are multiplied through the block-diagonal
feature matrix (:meth:`GraphBatch.features`) or by :meth:`GraphBatch.segment_matmul`.

The ``padded`` layout keeps the caller's order and pads every graph to the largest one (one bucket), so
that the rows reshape to ``(K, N_max, .)``: the layout of algorithms with dense per-client pairwise terms
(AdaFGL's learnable message passing over all ``N_k x N_k`` node pairs).

Every sparse product goes through :class:`~securefgl.training.sparse.SparseOperator`; one client alone
is a batch of one, so a deployment's client runs exactly the code the simulation runs.

Shapes:
    ``P`` padded rows (``>= sum_k N_k``), ``K`` clients, ``F`` features.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from securefgl.training.sparse import SparseOperator

__all__ = ["SPARSE_DENSITY", "Features", "GradSink", "GraphBatch", "SparseOperator", "plan_buckets"]

#: Feature matrices sparser than this are multiplied as sparse matrices (:meth:`GraphBatch.features`).
SPARSE_DENSITY = 0.2


def plan_buckets(sizes: Sequence[int], overhead: float) -> list[tuple[int, int]]:
    """Split sizes sorted in descending order into contiguous buckets minimising padded rows + overhead.

    Args:
        sizes: Node counts, sorted largest first.
        overhead: Cost of one extra bucket, in padded rows.

    Returns:
        ``[(start, end), ...]`` covering ``range(len(sizes))``.
    """
    k = len(sizes)
    if k == 0:
        return []
    best = [0.0] + [float("inf")] * k  # best[j]: cost of the first j clients
    cut = [0] * (k + 1)
    for j in range(1, k + 1):
        for i in range(j):
            cost = best[i] + (j - i) * sizes[i] + overhead
            if cost < best[j]:
                best[j], cut[j] = cost, i
    out = []
    j = k
    while j > 0:
        out.append((cut[j], j))
        j = cut[j]
    return out[::-1]


@dataclass(eq=False)
class GraphBatch:
    """The disjoint union of K graphs as padded blocks of rows (see the module docstring).

    Build with :meth:`from_graphs`. Attributes are tensors on one device.

    Args:
        order: ``order[b]`` is the caller's index of the graph at batch position ``b``.
        sizes: ``N_k`` per batch position.
        buckets: ``(start, end, pad, row_offset)`` per bucket: batch positions ``[start, end)`` padded to
            ``pad`` rows each, starting at padded row ``row_offset``.
        num_rows: ``P``.
        x: ``(P, F)`` features, zero on padding rows.
        y: ``(P,)`` labels, ``-1`` on padding rows.
        edge_index: ``(2, E)`` union edges in padded-row ids.
        rows: ``(sum_k N_k,)`` padded row of every real node, batch position by batch position.
        row_client: ``(P,)`` batch position owning each padded row.
        masks: ``name -> (P,)`` boolean masks (train/val/test), false on padding rows.
        packed: The ``packed`` layout (caller's order, no padding rows).
        padded: The ``padded`` layout (caller's order, every graph padded to the largest, one bucket).
    """

    order: list[int]
    sizes: list[int]
    buckets: list[tuple[int, int, int, int]]
    num_rows: int
    x: Tensor
    y: Tensor
    edge_index: Tensor
    rows: Tensor
    row_client: Tensor
    masks: dict[str, Tensor]
    packed: bool = False
    padded: bool = False
    _cache: dict[Any, Any] = field(default_factory=dict, repr=False)
    grad_sink: GradSink | None = field(default=None, repr=False)

    @property
    def num_graphs(self) -> int:
        return len(self.sizes)

    @property
    def device(self) -> torch.device:
        return self.x.device

    @classmethod
    def from_graphs(
        cls,
        graphs: Sequence[Any],
        *,
        layout: str = "bucketed",
        mask_names: Sequence[str] = ("train_mask", "val_mask", "test_mask"),
        bucket_overhead: float | None = None,
    ) -> GraphBatch:
        """Lay out ``graphs`` (PyG ``Data`` with ``x``, ``edge_index``, optional ``y`` and masks).

        Args:
            graphs: The client graphs (all on one device, same feature width).
            layout: ``"bucketed"`` (largest first, padded into buckets for ``bmm``), ``"packed"``
                (caller's order, no padding) or ``"padded"`` (caller's order, one bucket padded to the
                largest graph).
            mask_names: Boolean node masks to carry over where present (false for a graph without one).
            bucket_overhead: Cost of one more bucket in padded rows (default: 2% of all nodes + 32).

        Raises:
            ValueError: No graph, an unknown layout, or graphs with different feature widths.
        """
        if not graphs:
            raise ValueError("GraphBatch needs at least one graph")
        if layout not in ("bucketed", "packed", "padded"):
            raise ValueError(f"unknown layout {layout!r}; valid: 'bucketed', 'packed', 'padded'")
        widths = sorted({int(g.x.size(1)) for g in graphs})
        if len(widths) != 1:
            raise ValueError(f"graphs have features of different widths {widths}; expected one width")
        num_nodes = [int(g.num_nodes) for g in graphs]
        if layout == "packed":
            order = list(range(len(graphs)))
            buckets, starts = _packed_buckets(num_nodes)
        elif layout == "padded":
            order = list(range(len(graphs)))
            pad = max(max(num_nodes), 1)
            buckets, starts = [(0, len(graphs), pad, 0)], [k * pad for k in range(len(graphs))]
        else:
            order = sorted(range(len(graphs)), key=lambda i: (-num_nodes[i], i))
            total = sum(num_nodes)
            overhead = 0.02 * total + 32 if bucket_overhead is None else float(bucket_overhead)
            buckets, starts = _padded_buckets([num_nodes[i] for i in order], overhead)
        sizes = [num_nodes[i] for i in order]
        num_rows = sum((e - s) * pad for s, e, pad, _ in buckets)
        device = graphs[0].x.device
        x = torch.zeros(num_rows, widths[0], dtype=graphs[0].x.dtype, device=device)
        y = torch.full((num_rows,), -1, dtype=torch.long, device=device)
        row_client = torch.empty(num_rows, dtype=torch.long, device=device)
        present = [m for m in mask_names if any(getattr(g, m, None) is not None for g in graphs)]
        masks = {m: torch.zeros(num_rows, dtype=torch.bool, device=device) for m in present}
        rows, edges = [], []
        for s, e, pad, off in buckets:
            row_client[off : off + (e - s) * pad] = torch.arange(s, e, device=device).repeat_interleave(pad)
        for b, gi in enumerate(order):
            g = graphs[gi]
            n = sizes[b]
            start = starts[b]
            x[start : start + n] = g.x
            if getattr(g, "y", None) is not None:
                y[start : start + n] = g.y.reshape(-1)
            for m in masks:
                if getattr(g, m, None) is not None:
                    masks[m][start : start + n] = getattr(g, m)
            rows.append(torch.arange(start, start + n, device=device))
            edges.append(g.edge_index.long() + start)
        return cls(
            order=order,
            sizes=sizes,
            buckets=buckets,
            num_rows=num_rows,
            x=x,
            y=y,
            edge_index=torch.cat(edges, dim=1),
            rows=torch.cat(rows),
            row_client=row_client,
            masks=masks,
            packed=layout == "packed",
            padded=layout == "padded",
        )

    def segments(self) -> list[tuple[int, int]]:
        """``(first, end)`` real rows of every batch position (contiguous in every layout)."""
        return self.cached("segments", lambda: _segments(self.buckets, self.sizes))

    def join(self, per_graph: Sequence[Tensor]) -> Tensor:
        """Per-node tensors of every graph (caller's order, ``(N_k, ...)`` each) as ``(P, ...)`` rows, zero on
        padding rows: the inverse of :meth:`split`."""
        first = per_graph[0]
        out = first.new_zeros((self.num_rows, *first.shape[1:]))
        real = torch.cat([per_graph[gi] for gi in self.order])
        return out.index_copy(0, self.rows, real)

    def block_operator(self, matrices: Sequence[Tensor], *, storage: str = "csr") -> SparseOperator:
        """The block-diagonal :class:`SparseOperator` of per-graph sparse ``(N_k, N_k)`` matrices (caller's
        order) over the padded rows: a per-client operator other than the graph's own adjacency (AdaFGL's
        corrected, smoothed topology). ``storage``: see :mod:`securefgl.training.sparse`."""
        rows, cols, vals = [], [], []
        for b, gi in enumerate(self.order):
            start = self.segments()[b][0]
            m = matrices[gi].coalesce()
            rows.append(m.indices()[0] + start)
            cols.append(m.indices()[1] + start)
            vals.append(m.values())
        shape = (self.num_rows, self.num_rows)
        return SparseOperator.build(torch.cat(rows), torch.cat(cols), torch.cat(vals), shape, storage=storage)

    def client_sum(self, values: Tensor) -> Tensor:
        """Per batch position, the sum of a per-row quantity: ``(P, ...) -> (K, ...)`` (padding rows must be 0)."""
        out = torch.zeros((self.num_graphs, *values.shape[1:]), dtype=values.dtype, device=values.device)
        return out.index_add_(0, self.row_client, values)

    # ---------------------------------------------------------------- cached operators ------------------

    def cached(self, key: Any, make: Callable[[], Any]) -> Any:
        """``make()`` once per batch (operators, precomputed propagations)."""
        if key not in self._cache:
            self._cache[key] = make()
        return self._cache[key]

    def gcn_operator(self) -> SparseOperator:
        r"""``D̃^{-1/2}(A+I)D̃^{-1/2}`` of the union (PyG ``gcn_norm``) as a :class:`SparseOperator`."""

        def make() -> SparseOperator:
            from torch_geometric.nn.conv.gcn_conv import gcn_norm

            ei, w = gcn_norm(self.edge_index, None, self.num_rows, add_self_loops=True, dtype=self.x.dtype)
            return SparseOperator.from_edges(ei, w, self.num_rows)

        return self.cached("gcn", make)

    def mean_operator(self) -> SparseOperator:
        """Mean aggregation over in-neighbours (PyG ``aggr='mean'``) as a :class:`SparseOperator`."""

        def make() -> SparseOperator:
            src, dst = self.edge_index
            deg = torch.zeros(self.num_rows, dtype=self.x.dtype, device=self.device)
            deg.index_add_(0, dst, torch.ones_like(dst, dtype=self.x.dtype))
            w = 1.0 / deg.clamp(min=1.0)[dst]
            return SparseOperator.from_edges(self.edge_index, w, self.num_rows)

        return self.cached("mean", make)

    def input_dropout(self, p: float, training: bool, generator: torch.Generator | None) -> Tensor:
        """Dropout of the features ``x``, drawing only for their non-zero entries (found once per batch).

        Same distribution as :func:`securefgl.nn._functional.dropout` on ``x``.
        """
        if not training or p == 0.0:
            return self.x
        flat = self.x.reshape(-1)
        nz = self.cached("x_nonzero", lambda: (flat != 0).nonzero().squeeze(1))
        if nz.numel() > 0.25 * flat.numel():
            from securefgl.nn._functional import dropout

            return dropout(self.x, p, training, generator)
        keep = torch.rand(nz.numel(), generator=generator, device=self.device) >= p
        idx = nz[keep]
        out = torch.zeros_like(flat)
        out[idx] = flat[idx] / (1.0 - p)
        return out.view_as(self.x)

    def self_loop_edges(self) -> Tensor:
        """Union edges without self loops, plus one self loop per row (GAT)."""

        def make() -> Tensor:
            from torch_geometric.utils import add_self_loops, remove_self_loops

            ei, _ = remove_self_loops(self.edge_index)
            ei, _ = add_self_loops(ei, num_nodes=self.num_rows)
            return ei

        return self.cached("self_loops", make)

    # ---------------------------------------------------------------- per-client algebra ----------------

    def linear(self, x: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
        """Per-client linear map: row ``i`` of client ``k`` becomes ``x_i W_k^T (+ b_k)``.

        Args:
            x: ``(P, F_in)``.
            weight: ``(K, F_out, F_in)`` stacked in batch order.
            bias: ``(K, F_out)`` or ``None``.

        Returns:
            ``(P, F_out)``.
        """
        return _BucketedLinear.apply(x, weight, bias, self.buckets, self.num_rows, self.grad_sink)

    def per_row(self, values: Tensor) -> Tensor:
        """Broadcast per-client values ``(K, ...)`` to rows ``(P, ...)``."""
        return values.index_select(0, self.row_client)

    def split(self, out: Tensor) -> list[Tensor]:
        """Cut a ``(P, ...)`` result into the real rows of each graph, in the caller's order."""
        res: list[Tensor] = [out.new_empty(0)] * self.num_graphs
        pos = 0
        real = out.index_select(0, self.rows)
        for b, gi in enumerate(self.order):
            res[gi] = real[pos : pos + self.sizes[b]]
            pos += self.sizes[b]
        return res

    # ---------------------------------------------------------------- feature views ----------------------

    def sparse_features(
        self, sparse: bool | None = None, storage: str = "csr"
    ) -> tuple[SparseOperator | None, SparseOperator | None]:
        r"""``(shared, block)`` sparse forms of ``x``, or ``(None, None)`` to multiply it densely (cached).

        ``shared`` is ``x`` itself (products with one weight for all clients); ``block`` is the
        block-diagonal :math:`\mathrm{blockdiag}(X_1, \dots, X_K) \in R^{P \times KF}`, whose product
        with the stacked per-client weights reshaped to :math:`(KF, H)` is every client's ``X_k W_k`` at
        once. Their entries are in the same order. ``sparse=None`` decides from the density (below
        :data:`SPARSE_DENSITY`); ``storage``: see :mod:`securefgl.training.sparse`.
        """

        def make() -> tuple[SparseOperator | None, SparseOperator | None]:
            n, f = self.x.shape
            nz = self.x.nonzero(as_tuple=True)
            use = (nz[0].numel() < SPARSE_DENSITY * self.x.numel()) if sparse is None else sparse
            if not use:
                return None, None
            vals = self.x[nz]
            shared = SparseOperator.build(nz[0], nz[1], vals, (n, f), storage=storage)
            block_col = nz[1] + self.row_client[nz[0]] * f
            block = SparseOperator.build(nz[0], block_col, vals, (n, self.num_graphs * f), storage=storage)
            return shared, block

        return self.cached(("sparse_features", sparse, storage), make)

    def features(
        self,
        p: float = 0.0,
        generator: torch.Generator | None = None,
        *,
        sparse: bool | None = None,
        storage: str = "csr",
    ) -> Features:
        """The input features ready for linear maps, with inverted dropout of rate ``p`` on their entries;
        ``sparse`` and ``storage`` as in :meth:`sparse_features`."""
        shared, block = self.sparse_features(sparse, storage)
        if p == 0.0:
            return Features(self, self.x, shared, block)
        if shared is None or block is None:
            keep = torch.empty_like(self.x).bernoulli_(1.0 - p, generator=generator)
            return Features(self, self.x * keep / (1.0 - p), None, None)
        vals = shared.values()
        keep = torch.empty_like(vals).bernoulli_(1.0 - p, generator=generator)
        vals = vals * keep / (1.0 - p)
        return Features(self, None, shared.with_values(vals), block.with_values(vals))

    def propagated(self, hops: int) -> Tensor:
        r""":math:`\hat A^{K} X` (cached, no gradient): SGC's propagated features."""

        def make() -> Tensor:
            with torch.no_grad():
                z = self.x
                for _ in range(hops):
                    z = self.gcn_operator() @ z
                return z

        return self.cached(("propagated", hops), make)

    def segment_matmul(self, h: Tensor, w: Tensor) -> Tensor:
        """Per-client products ``h[rows of k] @ w[k]`` with ``w`` in ``(K, in, out)`` layout: ``(P, out)``.

        Raises:
            ValueError: The batch is not in the ``packed`` layout (padding rows would be dropped).
        """
        if not self.packed:
            raise ValueError("segment_matmul needs the 'packed' layout; use linear() on a bucketed batch")
        return torch.cat([h[s:e] @ w[k] for k, (s, e) in enumerate(self.segments())], dim=0)


def _packed_buckets(sizes: Sequence[int]) -> tuple[list[tuple[int, int, int, int]], list[int]]:
    """One unpadded bucket per graph, in order: ``(buckets, first row of every graph)``."""
    buckets, starts, offset = [], [], 0
    for b, n in enumerate(sizes):
        buckets.append((b, b + 1, n, offset))
        starts.append(offset)
        offset += n
    return buckets, starts


def _padded_buckets(
    sizes: Sequence[int], overhead: float
) -> tuple[list[tuple[int, int, int, int]], list[int]]:
    """Buckets of :func:`plan_buckets` over sizes sorted largest first: ``(buckets, first row of every graph)``."""
    buckets, starts, offset = [], [0] * len(sizes), 0
    for s, e in plan_buckets(sizes, overhead):
        pad = max(sizes[s], 1)
        buckets.append((s, e, pad, offset))
        for b in range(s, e):
            starts[b] = offset + (b - s) * pad
        offset += (e - s) * pad
    return buckets, starts


def _segments(buckets: Sequence[tuple[int, int, int, int]], sizes: Sequence[int]) -> list[tuple[int, int]]:
    out = []
    for s, e, pad, off in buckets:
        for b in range(s, e):
            start = off + (b - s) * pad
            out.append((start, start + sizes[b]))
    return out


@dataclass
class Features:
    """Input features of a :class:`GraphBatch` (possibly after dropout), ready for linear maps."""

    batch: GraphBatch
    dense: Tensor | None
    shared: SparseOperator | None
    block: SparseOperator | None

    def linear(self, w: Tensor) -> Tensor:
        """``X_k W`` for every client: shared ``W (F, H)`` or per-client ``W (K, F, H)`` -> ``(P, H)``."""
        if w.dim() == 2:
            return self.shared @ w if self.shared is not None else self.dense @ w  # type: ignore[operator]
        if self.block is not None:
            return self.block @ w.reshape(-1, w.shape[-1])
        if self.dense is None:  # pragma: no cover - one of the two representations always exists
            raise ValueError("Features hold neither a dense nor a sparse representation")
        if self.batch.packed:
            return self.batch.segment_matmul(self.dense, w)
        return self.batch.linear(self.dense, w.transpose(1, 2))


class GradSink:
    """Reusable gradient buffers for stacked weights, so that training allocates no K-model gradient per epoch.

    Without it, the backward of every per-client linear map allocates a fresh ``(K, F_out, F_in)`` gradient
    each epoch; for large stacks the allocator serves it with a fresh ``mmap``, whose page faults can cost
    more than the product itself. With a sink attached to the batch (:meth:`GraphBatch.linear` passes it on),
    the backward writes into a buffer kept across epochs and hands autograd ``None`` for that weight; the
    training loop then calls :meth:`collect` after ``backward()``, which adds any gradient autograd produced
    for the same leaf by other uses (a proximal term, say) and installs the buffer as ``leaf.grad``.

    Args:
        leaves: The stacked leaf tensors whose gradients go through the sink (each may feed at most one
            per-client linear map per forward pass).
    """

    def __init__(self, leaves: Sequence[Tensor]) -> None:
        self._leaves = {id(t): t for t in leaves}
        self._buffers: dict[int, Tensor] = {}
        self._written: set[int] = set()

    def accepts(self, weight: Tensor) -> bool:
        return id(weight) in self._leaves and self._leaves[id(weight)] is weight

    def buffer(self, weight: Tensor) -> Tensor:
        key = id(weight)
        if key in self._written:
            raise RuntimeError("a stacked weight fed two per-client linear maps in one pass; detach the sink")
        if key not in self._buffers:
            self._buffers[key] = torch.empty_like(weight)
        return self._buffers[key]

    def written(self, weight: Tensor) -> None:
        self._written.add(id(weight))

    def collect(self) -> None:
        """Install the buffers written in the last backward pass as the leaves' ``.grad``."""
        for key in self._written:
            leaf, buf = self._leaves[key], self._buffers[key]
            if leaf.grad is not None and leaf.grad is not buf:
                buf.add_(leaf.grad)
            leaf.grad = buf
        self._written.clear()


class _BucketedLinear(torch.autograd.Function):
    """Per-client linear map over the buckets of a :class:`GraphBatch`, with a hand-written backward.

    The backward writes every bucket's gradient straight into one preallocated ``(K, ...)`` tensor, so the
    stacked weight gets exactly one full-size gradient per call (slicing or splitting the stacked weight
    under autograd would add zero-filled or concatenated full-size copies).
    """

    @staticmethod
    def forward(
        ctx: Any,
        x: Tensor,
        weight: Tensor,
        bias: Tensor | None,
        buckets: list,
        num_rows: int,
        sink: GradSink | None = None,
    ) -> Tensor:
        f_in, f_out = x.size(1), weight.size(1)
        out = x.new_empty(num_rows, f_out)
        for s, e, pad, off in buckets:
            rows = slice(off, off + (e - s) * pad)
            xb = x[rows].view(e - s, pad, f_in)
            ob = out[rows].view(e - s, pad, f_out)
            wt = weight[s:e].transpose(1, 2)
            if bias is None:
                torch.bmm(xb, wt, out=ob)
            else:
                torch.baddbmm(bias[s:e].unsqueeze(1), xb, wt, out=ob)
        ctx.save_for_backward(x, weight)
        ctx.buckets = buckets
        ctx.has_bias = bias is not None
        ctx.sink = sink if (sink is not None and sink.accepts(weight)) else None
        ctx.weight_ref = weight if ctx.sink is not None else None
        return out

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor | None, ...]:
        x, weight = ctx.saved_tensors
        need_x, need_w, need_b = ctx.needs_input_grad[:3]
        f_in, f_out = x.size(1), weight.size(1)
        grad = grad.contiguous()
        gx = torch.empty_like(x) if need_x else None
        gw = None
        if need_w:
            gw = ctx.sink.buffer(ctx.weight_ref) if ctx.sink is not None else torch.empty_like(weight)
        gb = weight.new_empty(weight.size(0), f_out) if (need_b and ctx.has_bias) else None
        for s, e, pad, off in ctx.buckets:
            rows = slice(off, off + (e - s) * pad)
            g = grad[rows].view(e - s, pad, f_out)
            if gx is not None:
                torch.bmm(g, weight[s:e], out=gx[rows].view(e - s, pad, f_in))
            if gw is not None:
                torch.bmm(g.transpose(1, 2), x[rows].view(e - s, pad, f_in), out=gw[s:e])
            if gb is not None:
                torch.sum(g, dim=1, out=gb[s:e])
        if ctx.sink is not None and gw is not None:
            ctx.sink.written(ctx.weight_ref)
            gw = None  # delivered through the sink, see GradSink
        return gx, gw, gb, None, None, None
