r"""FedStruct-B setup: each client's rows of :math:`\bar A = \sum_l \beta_l \hat A^l`, computed privately.

Aliakbari et al., *FedStruct*, https://arxiv.org/abs/2402.19163 (App. G, Alg. 3), in the row-block form
of the spec (``shared/specs/fedstruct.md`` §2.8, §3.4). With :math:`\hat A = \tilde D^{-1}(A + I)` (row
normalisation, global degrees) and :math:`P^{(l)}_{[i]}` the rows :math:`V_i` of :math:`\hat A^l`:

.. math::
    P^{(1)}_{[i]} = \tilde D_i^{-1}\tilde A_{[i]},\qquad
    P^{(l)}_{[i]} = \tilde D_i^{-1}\sum_{k=1}^{K} B^{(l)}_{ik},\quad
    B^{(l)}_{ik} = \tilde A_{ik} P^{(l-1)}_{[k]},\qquad
    \bar A_{[i]} = \sum_l \beta_l P^{(l)}_{[i]}.

:math:`B^{(l)}_{ik}` (``n_i x n``) is computed at client :math:`k` from its own edges into :math:`V_i` and
its own previous row block; the sum over :math:`k` is revealed to client :math:`i` only through the
protocol's designated-recipient mode (receiver-blinded secure aggregation: the server relays masked
blocks). Receivers are processed one at a time so memory stays bounded by one receiver's blocks.

What a client knows (spec §1.2): its nodes, intra-edges, and for each inter-edge the global id and owner
of the external endpoint. :func:`attach_cross_edges` puts exactly that on each client's ``Data``. The
public *directory* (global id -> owner) is summed once by the protocol at the start of a run (the server
learns it; spec §2.9 requires it for the L.1 variant too): it fixes the row order of every receiver block.

Internal module of the client half of :mod:`securefgl.algorithms.fedstruct` (the schema of each receiver's
sum is :func:`securefgl.algorithms.fedstruct.schema.setup_schema`); it also holds the setup's cost
estimate (checked in :meth:`~securefgl.algorithms.fedstruct.FedStruct.phases`) and the reference
simulations :func:`private_abar` and :func:`central_abar` used by tests, benchmarks and audits.

Shapes:
    ``P``, ``abar``: ``(n_i, n)`` float64 (rows in ascending global id of ``V_i``); contribution ``B``:
    ``(n_i, n)``.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch_geometric.data import Data

from securefgl.algorithms.fedstruct.schema import setup_schema
from securefgl.data.cross_edges import attach_cross_edges
from securefgl.errors import ConfigError, PartitionError

__all__ = [
    "SetupCost",
    "SetupTooLargeError",
    "SingleContributorWarning",
    "StructureView",
    "attach_cross_edges",
    "central_abar",
    "check_setup_budget",
    "directory_from_views",
    "estimate_setup_cost",
    "local_abar",
    "private_abar",
    "prune_top",
    "warn_single_contributor",
]


class SetupTooLargeError(ConfigError):
    """A dense FedStruct setup would exceed the configured byte or memory budget."""


class SingleContributorWarning(UserWarning):
    """A receiver's sum has a single other contributor, so the sum hides nothing (spec §3.4, §7 item 22)."""


@dataclass
class StructureView:
    """What one client knows of the graph structure (spec §1.2), in dense-row-block-friendly form.

    Args:
        cid: The client id.
        gid: ``(n_i,)`` global ids of its nodes, in local order.
        edge_index: ``(2, E_i)`` intra-edges, local indices.
        cross_src / cross_dst / cross_owner: its inter-edges (local own endpoint, global external endpoint,
            owner of the external endpoint).
        n: Number of global nodes.
    """

    cid: int
    gid: torch.Tensor
    edge_index: torch.Tensor
    cross_src: torch.Tensor
    cross_dst: torch.Tensor
    cross_owner: torch.Tensor
    n: int
    # filled during the setup
    order: torch.Tensor = field(init=False)  # local index of the r-th smallest global id
    tilde_deg: torch.Tensor = field(init=False)  # (n_i,) global degree + 1, in row (sorted) order
    levels: dict[int, torch.Tensor] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.order = torch.argsort(self.gid)
        deg = torch.ones(self.gid.numel(), dtype=torch.float64)
        deg.index_add_(0, self.edge_index[0], torch.ones(self.edge_index.shape[1], dtype=torch.float64))
        deg.index_add_(0, self.cross_src, torch.ones(self.cross_src.numel(), dtype=torch.float64))
        self.tilde_deg = deg[self.order]

    @classmethod
    def from_data(cls, cid: int, data: Data) -> StructureView:
        """Read the view from a client ``Data`` prepared by :func:`attach_cross_edges`.

        Raises:
            PartitionError: the client has no cross-edge information.
        """
        missing = [
            k for k in ("fs_cross_src", "fs_cross_dst", "fs_cross_owner", "fs_num_global") if k not in data
        ]
        if missing:
            raise PartitionError(
                f"client {cid} has no cross-client edge information ({missing} missing); FedStruct needs it: "
                "pass securefgl.algorithms.fedstruct.attach_cross_edges(fg) to the run"
            )
        return cls(
            cid,
            data.global_id.long().cpu(),
            data.edge_index.long().cpu(),
            data.fs_cross_src.long().cpu(),
            data.fs_cross_dst.long().cpu(),
            data.fs_cross_owner.long().cpu(),
            int(data.fs_num_global),
        )

    @property
    def num_nodes(self) -> int:
        return int(self.gid.numel())

    def rank(self) -> torch.Tensor:
        """``(n_i,)``: the row (sorted position) of each local node."""
        r = torch.empty_like(self.order)
        r[self.order] = torch.arange(self.order.numel())
        return r

    def first_power(self) -> torch.Tensor:
        r"""``(n_i, n)``: :math:`P^{(1)}_{[i]} = \tilde D_i^{-1}(A + I)_{[i]}`, rows in sorted order."""
        rank = self.rank()
        a = torch.zeros(self.num_nodes, self.n, dtype=torch.float64)
        rows = torch.cat([rank, rank[self.edge_index[0]], rank[self.cross_src]])
        cols = torch.cat([self.gid, self.gid[self.edge_index[1]], self.cross_dst])
        a.index_put_((rows, cols), torch.ones(rows.numel(), dtype=torch.float64), accumulate=True)
        return a / self.tilde_deg[:, None]

    def adjacent_clients(self) -> list[int]:
        """Other clients with at least one edge into this client."""
        return sorted(int(x) for x in torch.unique(self.cross_owner).tolist())

    def contribution(
        self, receiver: int, n_receiver: int, owner: torch.Tensor, prev: torch.Tensor
    ) -> torch.Tensor:
        r"""``(n_r, n)``: :math:`B_{rk} = \tilde A_{rk} P^{(l-1)}_{[k]}` for receiver ``r`` (this client is ``k``).

        Args:
            receiver: The receiver's client id.
            n_receiver: Its node count (public, from the directory).
            owner: ``(n,)`` the public directory (owner of each global id).
            prev: ``(n_k, n)`` this client's previous row block (sorted rows).
        """
        out = torch.zeros(n_receiver, self.n, dtype=torch.float64)
        rank = self.rank()
        if receiver == self.cid:
            src = torch.cat([torch.arange(self.num_nodes), self.edge_index[1]])
            dst = torch.cat([torch.arange(self.num_nodes), self.edge_index[0]])
            out.index_add_(0, rank[dst], prev[rank[src]])
            return out
        sel = self.cross_owner == receiver
        if not bool(sel.any()):
            return out
        is_r = owner == receiver
        row_of = torch.cumsum(is_r.long(), 0) - 1  # rank of a global id within the receiver's sorted ids
        dst = self.cross_dst[sel]
        out.index_add_(0, row_of[dst], prev[rank[self.cross_src[sel]]])
        return out


def prune_top(p: torch.Tensor, keep: int) -> torch.Tensor:
    """Keep the ``keep`` largest entries of ``p`` (ties broken by position), zero the rest (spec §2.8)."""
    if keep >= p.numel():
        return p
    flat = p.reshape(-1)
    idx = torch.topk(flat, keep, sorted=False).indices
    out = torch.zeros_like(flat)
    out[idx] = flat[idx]
    return out.reshape(p.shape)


@dataclass
class SetupCost:
    """Measured cost of a private setup, per client: bytes sent/received and seconds."""

    bytes_up: dict[int, int] = field(default_factory=dict)
    bytes_down: dict[int, int] = field(default_factory=dict)
    seconds: float = 0.0
    aggregations: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "bytes_up": {str(k): v for k, v in self.bytes_up.items()},
            "bytes_down": {str(k): v for k, v in self.bytes_down.items()},
            "seconds": self.seconds,
            "aggregations": self.aggregations,
        }


def estimate_setup_cost(
    sizes: Sequence[int], n: int, num_hops: int, *, bytes_per_value: int = 8
) -> dict[str, int]:
    """Dense setup cost estimate: per-client upload, total traffic and peak memory of one receiver step.

    Every client sends one dense ``n_i x n`` block to every receiver ``i`` per hop ``l = 2..L_s`` (masks
    destroy sparsity, spec §3.4): ``(L_s - 1) n^2`` values per client, ``(L_s - 1) K n^2`` in total.
    """
    k = len(sizes)
    hops = max(num_hops - 1, 0)
    per_client = hops * n * n * bytes_per_value
    peak = (k + 2) * max(sizes, default=0) * n * bytes_per_value
    return {"per_client_bytes": per_client, "total_bytes": per_client * k, "peak_memory_bytes": peak}


def check_setup_budget(
    sizes: Sequence[int], n: int, num_hops: int, *, max_bytes: float, max_memory: float, pruned: bool
) -> dict[str, int]:
    """Refuse a dense setup over budget, with the estimate in the message.

    Raises:
        SetupTooLargeError: the total traffic exceeds ``max_bytes`` or one receiver step exceeds
            ``max_memory`` (pruning does not reduce traffic under secure aggregation: it is only applied
            after aggregation, so it is offered for storage, and ``num_hops=1`` for a local-only setup).
    """
    est = estimate_setup_cost(sizes, n, num_hops)
    if est["total_bytes"] > max_bytes or est["peak_memory_bytes"] > max_memory:
        raise SetupTooLargeError(
            f"the dense FedStruct setup with L_s={num_hops}, K={len(sizes)}, n={n} would send "
            f"{est['total_bytes'] / 2**30:.2f} GiB in total ({est['per_client_bytes'] / 2**30:.2f} GiB per client) "
            f"and need {est['peak_memory_bytes'] / 2**30:.2f} GiB per receiver step; budget: "
            f"setup_max_bytes={max_bytes / 2**30:.2f} GiB, setup_max_memory={max_memory / 2**30:.2f} GiB. "
            f"Options: raise the budget, use num_hops_s=1 (local, no protocol), or prune (prune_p=30"
            f"{', already on' if pruned else ''}: it lowers storage, not secure-aggregation traffic)"
        )
    return est


def _betas(num_hops: int, beta: Sequence[float] | None) -> list[float]:
    if beta is None:
        return [0.0] * (num_hops - 1) + [1.0]
    if len(beta) != num_hops:
        raise ConfigError(f"beta must have num_hops_s={num_hops} entries, got {len(beta)}: {list(beta)}")
    return [float(b) for b in beta]


def private_abar(
    views: Sequence[StructureView],
    protocol: Any | None,
    num_hops: int,
    *,
    beta: Sequence[float] | None = None,
    prune_p: int | None = None,
    bound: float | None = None,
    precision: float = 2.0**-32,
    round_offset: int = 0,
    max_bytes: float = float("inf"),
    max_memory: float = float("inf"),
) -> tuple[list[torch.Tensor], SetupCost]:
    r"""Every client's :math:`\bar A_{[i]}`, computed by Alg. 3 with sums delivered to one receiver at a time.

    Args:
        views: Each client's :class:`StructureView` (index = client id).
        protocol: A :class:`~securefgl.protocols.base.Protocol` used in designated-recipient mode, or
            ``None`` for the plaintext computation (no protocol: the sum of the ``B_ik`` is formed directly).
        num_hops: :math:`L_s \ge 1`.
        beta: :math:`\beta_1..\beta_{L_s}` (default: the pure power, :math:`\beta_{L_s} = 1`).
        prune_p: Keep the top ``prune_p * n_i`` entries of each aggregated :math:`P^{(l)}_{[i]}`.
        bound: Public bound of the entries of ``B`` (default: ``n``).
        precision: Fixed-point step of the sums.
        round_offset: Round index of the first aggregation (bound into session ids).
        max_bytes / max_memory: Budget (see :func:`check_setup_budget`).

    Returns:
        ``(abar, cost)``: ``abar[i]`` of shape ``(n_i, n)``, rows in **local** order of client ``i``.
    """
    if num_hops < 1:
        raise ConfigError(f"num_hops_s must be >= 1, got {num_hops}")
    k = len(views)
    n = views[0].n
    sizes = [v.num_nodes for v in views]
    check_setup_budget(
        sizes, n, num_hops, max_bytes=max_bytes, max_memory=max_memory, pruned=prune_p is not None
    )
    betas = _betas(num_hops, beta)
    owner = torch.full((n,), -1, dtype=torch.long)
    for v in views:
        owner[v.gid] = v.cid
    cost = SetupCost(bytes_up=dict.fromkeys(range(k), 0), bytes_down=dict.fromkeys(range(k), 0))
    t0 = time.perf_counter()
    prev = [v.first_power() for v in views]
    abar = [betas[0] * p for p in prev]
    warn_single_contributor(views)
    rnd = round_offset
    for level in range(2, num_hops + 1):
        new = []
        for i in range(k):
            contribs = {v.cid: v.contribution(i, sizes[i], owner, prev[v.cid]) for v in views}
            if protocol is None:
                total = torch.stack(list(contribs.values())).sum(0)
            else:
                schema = setup_schema(
                    sizes[i], n, max_clients=k, bound=float(bound or n), precision=precision
                )
                sums, tr = protocol.aggregate(
                    schema, {c: {"B": b} for c, b in contribs.items()}, round_index=rnd, recipient=i
                )
                total = sums["B"].to(torch.float64)
                for c in contribs:
                    cost.bytes_up[c] += tr.total_bytes_sent(c)
                    cost.bytes_down[c] += tr.total_bytes_received(c)
                cost.aggregations += 1
            rnd += 1
            p = total / views[i].tilde_deg[:, None]
            if prune_p is not None:
                p = prune_top(p, int(prune_p) * sizes[i])
            new.append(p)
            abar[i] = abar[i] + betas[level - 1] * p
            del contribs
        prev = new
    cost.seconds = time.perf_counter() - t0
    return [a[v.rank()] for a, v in zip(abar, views, strict=True)], cost


def warn_single_contributor(views: Sequence[StructureView]) -> None:
    """Warn for every receiver with exactly one other adjacent client (its sum reveals that client's block)."""
    for v in views:
        adj = [c for c in v.adjacent_clients() if c != v.cid]
        if len(adj) == 1:
            warnings.warn(
                f"FedStruct setup: client {v.cid} receives contributions from a single other client ({adj[0]}); "
                "the secure sum hides nothing from it about that client's block (spec §3.4)",
                SingleContributorWarning,
                stacklevel=3,
            )


def local_abar(
    edge_index: torch.Tensor, num_nodes: int, num_hops: int, beta: Sequence[float] | None = None
) -> torch.Tensor:
    r"""``(n_i, n_i)``: :math:`\bar A^{(i)} = \sum_l \beta_l (\hat A^{(i)})^l` of the local graph (local degrees)."""
    betas = _betas(num_hops, beta)
    loops = torch.arange(num_nodes)
    idx = torch.cat([edge_index.long().cpu(), torch.stack([loops, loops])], dim=1)
    shape = (num_nodes, num_nodes)
    ones = torch.ones(idx.shape[1], dtype=torch.float64)
    a = torch.sparse_coo_tensor(idx, ones, shape, check_invariants=True).coalesce()
    deg = torch.zeros(num_nodes, dtype=torch.float64).index_add_(0, a.indices()[0], a.values())
    a_hat = torch.sparse_coo_tensor(
        a.indices(), a.values() / deg[a.indices()[0]], shape, check_invariants=False, is_coalesced=True
    )
    out = torch.zeros(num_nodes, num_nodes, dtype=torch.float64)
    p = torch.eye(num_nodes, dtype=torch.float64)
    for b in betas:
        p = torch.sparse.mm(a_hat, p)  # sparse x dense: O(|E| n) per hop
        out.add_(p, alpha=b)
    return out


def central_abar(
    edge_index: torch.Tensor, num_nodes: int, num_hops: int, beta: Sequence[float] | None = None
) -> torch.Tensor:
    r"""``(n, n)`` reference :math:`\bar A` of the global graph, computed centrally (tests, benchmarks)."""
    return local_abar(edge_index, num_nodes, num_hops, beta)


def directory_from_views(views: Mapping[int, StructureView] | Sequence[StructureView]) -> torch.Tensor:
    """``(n,)`` owner of each global id (what the directory round releases)."""
    vs = list(views.values()) if isinstance(views, Mapping) else list(views)
    owner = torch.full((vs[0].n,), -1, dtype=torch.long)
    for v in vs:
        owner[v.gid] = v.cid
    return owner
