r"""The one sparse product of the training stack: a constant sparse matrix times a dense one.

Message passing (:math:`\hat A H`), bag-of-words first layers (:math:`X W`) and the block-diagonal feature
products of per-client weights are all ``A @ H`` with a *constant* sparse ``A`` and a dense ``H`` that needs
a gradient. :class:`SparseOperator` holds ``A`` and its transpose as CSR matrices, built once, so that the
backward pass is one more sparse product (``A^T @ grad``) instead of a conversion per step; it also keeps
the map between the value orders of ``A`` and ``A^T``, so that rescaling the entries (dropout on sparse
features) never re-sorts either matrix.

Three storages, the same entries in the same (row-major) order, the same product up to float rounding:

* ``"csr"`` (the default): on the CPU the product goes through MKL;
* ``"coo"``: torch's own kernel, which sums each row's entries one by one in column order;
* ``"bag"``: the rows are bags of column ids for :func:`torch.nn.functional.embedding_bag` (``mode="sum"``,
  the entries as per-sample weights), the fastest CPU kernel for a wide, very sparse matrix times a
  gradient-carrying weight (bag-of-words features times per-client first-layer weights).

They round differently in the last bits. AdaFGL's step 2 multiplies its smoothing operator through ``"coo"``
and its features through ``"bag"``, the kernels its published reproduction figures were measured with, so
that they reproduce to the bit.

Used by every client half that trains on graphs: the client-batch layout
(:class:`~securefgl.training.batched.GraphBatch`), FedSpray's per-client feature products and O-pFGL's
per-client GCN.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

__all__ = ["STORAGES", "SparseOperator", "csr"]

#: The storages of a :class:`SparseOperator` (module docstring).
STORAGES = ("csr", "coo", "bag")


def csr(row: Tensor, col: Tensor, val: Tensor, shape: tuple[int, int]) -> Tensor:
    """A sparse CSR matrix with ``A[row, col] = val`` (duplicates summed, as ``coalesce`` does)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # "sparse CSR support is in beta"
        coo = torch.sparse_coo_tensor(torch.stack([row, col]), val, shape, check_invariants=False)
        return coo.coalesce().to_sparse_csr()


def _csr_raw(crow: Tensor, col: Tensor, val: Tensor, shape: tuple[int, ...]) -> Tensor:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # "sparse CSR support is in beta"
        return torch.sparse_csr_tensor(crow, col, val, shape)


class _SpMM(torch.autograd.Function):
    """``A @ H`` for a constant CSR ``A`` whose transpose is precomputed (gradient for ``H`` only)."""

    @staticmethod
    def forward(ctx: Any, a: Tensor, a_t: Tensor, h: Tensor) -> Tensor:  # type: ignore[override]
        ctx.a_t = a_t
        return torch.sparse.mm(a, h)

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[None, None, Tensor]:  # type: ignore[override]
        return None, None, torch.sparse.mm(ctx.a_t, grad.contiguous())


@dataclass(eq=False)
class SparseOperator:
    """A constant sparse matrix ``a``, its transpose ``a_t`` (both CSR) and their value map.

    ``a_t.values() == a.values()[perm]``. ``op @ h`` is differentiable in ``h``.

    Build with :meth:`build` (entries), :meth:`from_edges` (a graph's message-passing matrix) or
    :meth:`from_dense` (a feature matrix).
    """

    a: Tensor
    a_t: Tensor
    perm: Tensor
    storage: str = "csr"

    @staticmethod
    def build(
        row: Tensor, col: Tensor, val: Tensor, shape: tuple[int, int], *, storage: str = "csr"
    ) -> SparseOperator:
        """``A[row, col] = val`` of the given shape, stored as ``"csr"``, ``"coo"`` or ``"bag"`` (module
        docstring).

        Raises:
            ValueError: an unknown ``storage``.
        """
        if storage not in STORAGES:
            raise ValueError(f"unknown sparse storage {storage!r}; valid: {', '.join(map(repr, STORAGES))}")
        a = csr(row, col, val, shape)
        # the transpose, carrying each entry's position in ``a`` to recover the permutation
        a_row = torch.repeat_interleave(torch.arange(shape[0], device=val.device), a.crow_indices().diff())
        pos = torch.arange(a.values().numel(), device=val.device, dtype=torch.float64)
        t_pos = csr(a.col_indices(), a_row, pos, (shape[1], shape[0]))
        perm = t_pos.values().round().long()
        a_t = _csr_raw(t_pos.crow_indices(), t_pos.col_indices(), a.values()[perm], (shape[1], shape[0]))
        if storage == "coo":
            return SparseOperator(a.to_sparse_coo().coalesce(), a_t.to_sparse_coo().coalesce(), perm, storage)
        return SparseOperator(a, a_t, perm, storage)

    @staticmethod
    def from_edges(edge_index: Tensor, weight: Tensor, n: int) -> SparseOperator:
        """The ``(n, n)`` message-passing matrix ``A[dst, src] = weight`` (messages flow source -> target)."""
        return SparseOperator.build(edge_index[1], edge_index[0], weight, (n, n))

    @staticmethod
    def from_dense(x: Tensor) -> SparseOperator:
        """The non-zero entries of a dense ``(N, F)`` matrix (bag-of-words features)."""
        nz = x.nonzero(as_tuple=True)
        return SparseOperator.build(nz[0], nz[1], x[nz], (x.shape[0], x.shape[1]))

    @property
    def shape(self) -> tuple[int, int]:
        return (int(self.a.shape[0]), int(self.a.shape[1]))

    def values(self) -> Tensor:
        """The entries, in ``a``'s (row-major) order."""
        return self.a.values()

    def with_values(self, values: Tensor) -> SparseOperator:
        """The same sparsity pattern with new entries (in ``a``'s order)."""
        if self.a.layout == torch.sparse_coo:
            a = torch.sparse_coo_tensor(self.a.indices(), values, self.a.shape, is_coalesced=True)
            a_t = torch.sparse_coo_tensor(
                self.a_t.indices(), values[self.perm], self.a_t.shape, is_coalesced=True
            )
            return SparseOperator(a, a_t, self.perm)
        a = _csr_raw(self.a.crow_indices(), self.a.col_indices(), values, tuple(self.a.shape))
        a_t = _csr_raw(
            self.a_t.crow_indices(), self.a_t.col_indices(), values[self.perm], tuple(self.a_t.shape)
        )
        return SparseOperator(a, a_t, self.perm, self.storage)

    def __matmul__(self, h: Tensor) -> Tensor:
        if self.storage == "bag":
            return F.embedding_bag(
                self.a.col_indices(),
                h,
                self.a.crow_indices(),
                mode="sum",
                per_sample_weights=self.a.values(),
                include_last_offset=True,
            )
        return _SpMM.apply(self.a, self.a_t, h)
