"""The :class:`FederatedGraph` container: a graph split among clients, with every cross-client edge kept."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch_geometric.data import Data

from securefgl.data.homophily import edge_homophily

__all__ = ["FederatedGraph", "build_federated_graph"]


@dataclass
class FederatedGraph:
    """A graph partitioned among K clients.

    Args:
        name: Dataset name.
        num_nodes: N, nodes of the whole graph (including nodes that belong to no client).
        num_features: F.
        num_classes: C (global).
        clients: One ``Data`` per client with ``x``, ``y``, ``edge_index`` (LOCAL indices, both directions,
            including injected edges for ``structure-noniid``), ``global_id`` (global node ids, ascending),
            ``train_mask``/``val_mask``/``test_mask`` (local, boolean) and ``num_nodes``.
        cross_edges: ``(2, E_x)`` GLOBAL ids of the edges whose endpoints belong to two different clients, both
            directions stored (like ``edge_index``).
        cross_owners: ``(2, E_x)`` the client owning each endpoint of ``cross_edges``.
        node_owner: ``(N,)`` the client of each global node; ``-1`` for nodes in no client (FedLoG's held-out
            new client and removed missing-class nodes, nodes outside the K largest Louvain communities, ...).
        meta: JSON-serialisable description: ``method``, ``params``, ``seed``, ``split``, ``fingerprint``,
            ``key``, ``cache_hit`` and method-specific entries.
        injected_edges: ``(2, E_i)`` GLOBAL ids of edges added inside clients by ``structure-noniid`` (both
            directions); empty otherwise. They appear in the clients' ``edge_index`` but not in the source graph.
        unowned_edges: ``(2, E_u)`` GLOBAL ids of the source edges with at least one endpoint in no client.
        held_out: FedLoG's new client (``global_id``, ``x``, ``y``, local ``edge_index``, ``test_mask`` all
            true), or ``None``.
        source: The whole source graph (global ids), used by :meth:`global_data`.
        client_eval: Per client, evaluation-only tensors that arrive at the client later (FedLoG's
            generalisation sets); the engine hands client ``k`` its own entry as ``Client.eval_data``, apart
            from the ``Data`` that training reads. ``None`` when there are none.

    Invariants (tested): every node is in at most one client, clients' ``global_id`` sets are disjoint; the
    source edge set equals the clients' local edges (minus injected ones) plus ``cross_edges`` plus
    ``unowned_edges``.
    """

    name: str
    num_nodes: int
    num_features: int
    num_classes: int
    clients: list[Data]
    cross_edges: torch.Tensor
    cross_owners: torch.Tensor
    node_owner: torch.Tensor
    meta: dict[str, Any] = field(default_factory=dict)
    injected_edges: torch.Tensor = field(default_factory=lambda: torch.empty(2, 0, dtype=torch.long))
    unowned_edges: torch.Tensor = field(default_factory=lambda: torch.empty(2, 0, dtype=torch.long))
    held_out: Data | None = None
    source: Data | None = field(default=None, repr=False)
    client_eval: list[dict[str, torch.Tensor]] | None = field(default=None, repr=False)

    @property
    def num_clients(self) -> int:
        """K, the number of clients."""
        return len(self.clients)

    def global_data(self, *, include_injected: bool = True) -> Data:
        """The whole graph in global ids, with global masks equal to the union of the clients' masks.

        Args:
            include_injected: Add ``injected_edges`` (the federation's view of the graph) or return the source
                edges only. (default: ``True``)

        Returns:
            ``Data`` with ``x``, ``y``, ``edge_index`` (coalesced), ``train_mask``/``val_mask``/``test_mask``
            (false for nodes in no client), ``node_owner``, ``num_classes`` and ``name``.
        """
        if self.source is None:
            raise ValueError("this FederatedGraph has no source graph attached")
        edge_index = self.source.edge_index
        if include_injected and self.injected_edges.numel():
            from torch_geometric.utils import coalesce

            edge_index = coalesce(torch.cat([edge_index, self.injected_edges], 1), num_nodes=self.num_nodes)
        masks = {
            k: torch.zeros(self.num_nodes, dtype=torch.bool) for k in ("train_mask", "val_mask", "test_mask")
        }
        for client in self.clients:
            for k, m in masks.items():
                m[client.global_id] = client[k]
        data = Data(
            x=self.source.x, y=self.source.y, edge_index=edge_index, num_nodes=self.num_nodes, **masks
        )
        data.node_owner = self.node_owner.clone()
        data.num_classes = self.num_classes
        data.name = self.name
        return data

    def client_sizes(self) -> list[int]:
        """Number of nodes of each client."""
        return [int(c.num_nodes) for c in self.clients]

    def summary(self) -> dict[str, Any]:
        """A JSON-serialisable per-client description (nodes, undirected edges, split counts, class histogram,
        edge homophily, cross-client edge endpoints) plus totals."""
        owners = self.cross_owners
        per_client_cross = (
            torch.bincount(owners[0], minlength=self.num_clients).tolist()
            if owners.numel()
            else [0] * self.num_clients
        )
        rows = []
        for k, c in enumerate(self.clients):
            hist = torch.bincount(c.y, minlength=self.num_classes).tolist()
            rows.append(
                {
                    "client": k,
                    "nodes": int(c.num_nodes),
                    "edges": int(c.edge_index.shape[1]) // 2,
                    "train": int(c.train_mask.sum()),
                    "val": int(c.val_mask.sum()),
                    "test": int(c.test_mask.sum()),
                    "class_histogram": hist,
                    "edge_homophily": edge_homophily(c.edge_index, c.y),
                    "cross_edges": int(per_client_cross[k]),
                }
            )
        return {
            "dataset": self.name,
            "method": self.meta.get("method"),
            "num_clients": self.num_clients,
            "num_nodes": self.num_nodes,
            "num_classes": self.num_classes,
            "nodes_in_clients": int((self.node_owner >= 0).sum()),
            "cross_edges": int(self.cross_edges.shape[1]) // 2,
            "injected_edges": int(self.injected_edges.shape[1]) // 2,
            "unowned_edges": int(self.unowned_edges.shape[1]) // 2,
            "held_out_nodes": int(self.held_out.num_nodes) if self.held_out is not None else 0,
            "cache_key": self.meta.get("key"),
            "cache_hit": self.meta.get("cache_hit"),
            "clients": rows,
        }

    def __repr__(self) -> str:
        return (
            f"FederatedGraph(name={self.name!r}, method={self.meta.get('method')!r}, clients={self.num_clients}, "
            f"nodes={self.num_nodes}, cross_edges={int(self.cross_edges.shape[1])})"
        )


def _local_subgraph(local_index: np.ndarray, src: np.ndarray, dst: np.ndarray) -> torch.Tensor:
    ei = np.stack([local_index[src], local_index[dst]])
    return torch.from_numpy(np.ascontiguousarray(ei))


def _long(a: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(a, dtype=np.int64))


def _local_indices(
    owner: np.ndarray, n: int, num_clients: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``(local_index, owned_order, starts, counts)``: every node's index inside its client (ascending global
    ids; ``-1`` for none), the owned nodes grouped by client, and each client's offset and size in that order."""
    order = np.argsort(owner, kind="stable")
    counts = np.bincount(owner[owner >= 0], minlength=num_clients)
    first_owned = int(np.searchsorted(owner[order], 0))
    local_index = np.full(n, -1, dtype=np.int64)
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    owned_order = order[first_owned:]
    local_index[owned_order] = np.arange(owned_order.size) - np.repeat(starts, counts)
    return local_index, owned_order, starts, counts


def _client_edges(
    l_src: np.ndarray,
    l_dst: np.ndarray,
    owner: np.ndarray,
    local_index: np.ndarray,
    injected: np.ndarray | None,
    n: int,
    num_clients: int,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(src, dst, starts)``: the intra-client edges (plus ``injected``) grouped by client, coalesced inside
    each client; client ``k`` holds ``starts[k]:starts[k+1]``."""
    if injected is not None and injected.size:
        l_src = np.concatenate([l_src, injected[0]])
        l_dst = np.concatenate([l_dst, injected[1]])
    l_owner = owner[l_src]
    if injected is not None and injected.size:
        # sort by (client, local src, local dst) so every client's edge_index is coalesced
        key = (l_owner * n + local_index[l_src]) * n + local_index[l_dst] if n < 2**20 else None
        e_order = (
            np.argsort(key, kind="stable")
            if key is not None
            else np.lexsort((local_index[l_dst], local_index[l_src], l_owner))
        )
    else:
        # the source edge_index is coalesced (sorted by global src, dst) and local ids preserve the global order
        # inside a client, so a stable sort by client alone keeps every client's edges sorted
        e_order = np.argsort(l_owner, kind="stable")
    l_src, l_dst, l_owner = l_src[e_order], l_dst[e_order], l_owner[e_order]
    e_counts = np.bincount(l_owner, minlength=num_clients)
    return l_src, l_dst, np.concatenate([[0], np.cumsum(e_counts)])


def _held_out_client(
    data: Data, held_out: np.ndarray | None, src: np.ndarray, dst: np.ndarray, n: int
) -> Data | None:
    """FedLoG's new client: the induced subgraph of ``held_out`` (all test nodes), or ``None``."""
    if held_out is None or not held_out.size:
        return None
    hid = np.sort(np.asarray(held_out, dtype=np.int64))
    pos = np.full(n, -1, dtype=np.int64)
    pos[hid] = np.arange(hid.size)
    in_h = (pos[src] >= 0) & (pos[dst] >= 0)
    gid = torch.from_numpy(hid)
    return Data(
        x=data.x[gid],
        y=data.y[gid],
        edge_index=torch.from_numpy(np.stack([pos[src[in_h]], pos[dst[in_h]]])),
        global_id=gid,
        train_mask=torch.zeros(hid.size, dtype=torch.bool),
        val_mask=torch.zeros(hid.size, dtype=torch.bool),
        test_mask=torch.ones(hid.size, dtype=torch.bool),
        num_nodes=int(hid.size),
    )


def build_federated_graph(
    data: Data,
    node_owner: np.ndarray,
    num_clients: int,
    masks: tuple[np.ndarray, np.ndarray, np.ndarray],
    *,
    injected: np.ndarray | None = None,
    held_out: np.ndarray | None = None,
    meta: dict[str, Any] | None = None,
) -> FederatedGraph:
    """Assemble a :class:`FederatedGraph` from a node->client assignment (vectorised; no loop over edges).

    Args:
        data: The source graph (undirected, coalesced).
        node_owner: ``(N,)`` int64 client of each node, ``-1`` for none.
        num_clients: K.
        masks: Global boolean ``(N,)`` train/val/test masks.
        injected: ``(2, E_i)`` global ids of extra intra-client edges (both directions), or ``None``.
        held_out: Global ids of FedLoG's new client, or ``None``.
        meta: Metadata to attach.
    """
    n = int(data.num_nodes)
    owner = np.asarray(node_owner, dtype=np.int64)
    ei = data.edge_index.numpy()
    src, dst = ei[0], ei[1]
    os_, od = owner[src], owner[dst]
    local = (os_ == od) & (os_ >= 0)
    cross = (os_ != od) & (os_ >= 0) & (od >= 0)
    unowned = (os_ < 0) | (od < 0)
    local_index, owned_order, starts, counts = _local_indices(owner, n, num_clients)
    l_src, l_dst, e_starts = _client_edges(
        src[local], dst[local], owner, local_index, injected, n, num_clients
    )

    x, y = data.x, data.y
    train, val, test = (torch.as_tensor(m) for m in masks)
    clients = []
    for k in range(num_clients):
        nodes = owned_order[starts[k] : starts[k] + counts[k]]
        gid = torch.from_numpy(nodes.copy())
        s, e = e_starts[k], e_starts[k + 1]
        client = Data(
            x=x[gid],
            y=y[gid],
            edge_index=_local_subgraph(local_index, l_src[s:e], l_dst[s:e]),
            global_id=gid,
            train_mask=train[gid],
            val_mask=val[gid],
            test_mask=test[gid],
            num_nodes=int(nodes.size),
        )
        clients.append(client)

    held = _held_out_client(data, held_out, src, dst, n)
    return FederatedGraph(
        name=str(getattr(data, "name", "graph")),
        num_nodes=n,
        num_features=int(x.shape[1]) if x is not None and x.dim() == 2 else 0,
        num_classes=int(getattr(data, "num_classes", int(y.max()) + 1)),
        clients=clients,
        cross_edges=_long(np.stack([src[cross], dst[cross]])),
        cross_owners=_long(np.stack([os_[cross], od[cross]])),
        node_owner=_long(owner),
        meta=dict(meta or {}),
        injected_edges=_long(injected)
        if injected is not None and injected.size
        else torch.empty(2, 0, dtype=torch.long),
        unowned_edges=_long(np.stack([src[unowned], dst[unowned]])),
        held_out=held,
        source=data,
    )
