"""Each client's view of its inter-client edges: its own endpoint, the other endpoint's global id and owner.

An algorithm that declares ``needs_cross_edges`` (FedStruct) gets clients prepared by :func:`attach_cross_edges`
from the engine: a client knows, for each edge leaving its node set, the global id and the owner of the external
endpoint (what two organisations holding the two ends of a transaction both know), and nothing else of the
other client.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

from securefgl.errors import PartitionError

__all__ = ["attach_cross_edges"]


def attach_cross_edges(fg: Any) -> Any:
    """A copy of ``fg`` whose clients also carry what they know of their inter-client edges.

    Adds to every client ``Data``: ``fs_cross_src`` (local index of the own endpoint), ``fs_cross_dst``
    (global id of the external endpoint), ``fs_cross_owner`` (its owner) and ``fs_num_global`` (``n``).

    Args:
        fg: A :class:`~securefgl.data.FederatedGraph` (with ``cross_edges`` and ``cross_owners``).

    Raises:
        PartitionError: ``fg`` has no cross-client edge information (FedStruct needs it).
    """
    cross = getattr(fg, "cross_edges", None)
    owners = getattr(fg, "cross_owners", None)
    if cross is None or owners is None:
        raise PartitionError(
            "this algorithm needs the partition's cross-client edges (FederatedGraph.cross_edges and "
            f"cross_owners); got cross_edges={cross!r}, cross_owners={owners!r}. Build the partition with "
            "securefgl.data.partition_graph, which keeps them"
        )
    if cross.dim() != 2 or cross.shape[0] != 2 or tuple(owners.shape) != tuple(cross.shape):
        raise PartitionError(
            f"cross_edges must be (2, E) with cross_owners of the same shape; got {tuple(cross.shape)} and "
            f"{tuple(owners.shape)}"
        )
    n = int(fg.num_nodes)
    clients = []
    for i, c in enumerate(fg.clients):
        gid = c.global_id.long()
        local = torch.full((n,), -1, dtype=torch.long)
        local[gid] = torch.arange(gid.numel())
        sel = owners[0] == i
        d = c.clone()
        d.fs_cross_src = local[cross[0, sel].long()]
        d.fs_cross_dst = cross[1, sel].long().clone()
        d.fs_cross_owner = owners[1, sel].long().clone()
        d.fs_num_global = n
        if bool((d.fs_cross_src < 0).any()):
            raise PartitionError(f"client {i}: a cross edge starts at a node the client does not own")
        clients.append(d)
    return dataclasses.replace(fg, clients=clients)
