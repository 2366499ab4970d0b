r"""FedLoG's "unseen data" evaluation sets (spec ``shared/specs/fedlog.md`` §1.2, steps 5-7).

Part of :mod:`securefgl.algorithms.fedlog`: a data-preparation step, run by the experimenter before a run
(neither half of the algorithm imports it). For client :math:`k` with node set :math:`V_k`, the
evolved graph :math:`G_k^+` is the ``hops``-hop expansion of :math:`V_k` in the global graph, with every global
edge among its nodes. On it:

* Unseen Node (``unseen_node_mask``): nodes of :math:`G_k^+` outside :math:`V_k` whose label is a class the
  client has training labels for;
* Missing Class (``unseen_cls_mask``): nodes of :math:`G_k^+` whose label is *not* among the client's training
  classes (its removed tail classes and classes it never held).

The New Client is FedLoG's held-out Metis part (``FederatedGraph.held_out``): every local model predicts all of
its nodes. These sets are test data that *arrives later at the client*: they go into the federated graph's
declared evaluation slot ``FederatedGraph.client_eval[k]`` (keys :data:`EVAL_KEYS`), which the engine hands to
client :math:`k` alone as ``Client.eval_data``. The clients' training ``Data`` objects are left untouched, so no
training function receives them; only FedLoG's evaluation counters (and experimenter-side scoring) read them.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch
from torch_geometric.utils import k_hop_subgraph, subgraph

from securefgl.errors import ConfigError

__all__ = ["EVAL_KEYS", "attach_generalization_sets"]

#: Keys of a client's evaluation dict (``FederatedGraph.client_eval[k]`` / ``Client.eval_data``); the ``nc_*``
#: keys only when the graph has a held-out New Client.
EVAL_KEYS = (
    "unseen_x",
    "unseen_edge_index",
    "unseen_y",
    "unseen_node_mask",
    "unseen_cls_mask",
    "nc_x",
    "nc_edge_index",
    "nc_y",
)


def attach_generalization_sets(fg: Any, hops: int = 2) -> Any:
    """A copy of ``fg`` whose ``client_eval`` holds FedLoG's Unseen-Node, Missing-Class and New-Client test sets.

    Args:
        fg: A :class:`~securefgl.data.FederatedGraph` (normally from ``partition_graph(..., "fedlog", K)``).
        hops: Expansion radius ``r`` of :math:`G_k^+` (the paper's value is lost; spec recommends 2).

    Returns:
        A copy of ``fg`` (the same client ``Data`` objects, unchanged) with ``client_eval[k]`` a dict holding
        ``unseen_x`` ``(N_k^+, F)``, ``unseen_edge_index`` ``(2, E_k^+)`` (local to :math:`G_k^+`), ``unseen_y``,
        ``unseen_node_mask``, ``unseen_cls_mask`` and, when ``fg.held_out`` exists, ``nc_x``, ``nc_edge_index``,
        ``nc_y`` (each client its own copy). The engine delivers ``client_eval[k]`` to client ``k`` only, as
        ``Client.eval_data``; ``meta["fedlog_eval"]`` records the public set sizes.

    Raises:
        ConfigError: ``hops`` is not an integer >= 0, or ``fg`` has no source graph.
    """
    if isinstance(hops, bool) or not isinstance(hops, int) or hops < 0:
        raise ConfigError(f"hops must be an integer >= 0, got {hops!r}")
    if fg.source is None:
        raise ConfigError("attach_generalization_sets needs a FederatedGraph with its source graph")
    src = fg.source
    ei_global = src.edge_index
    n = int(fg.num_nodes)
    sets: list[dict[str, torch.Tensor]] = []
    for data in fg.clients:
        gid = data.global_id
        if hops > 0:
            nodes, _, _, _ = k_hop_subgraph(gid, hops, ei_global, num_nodes=n, relabel_nodes=False)
        else:
            nodes = gid.clone()
        nodes = torch.unique(nodes)
        ei, _ = subgraph(nodes, ei_global, relabel_nodes=True, num_nodes=n)
        y = src.y[nodes]
        trained = torch.unique(data.y[data.train_mask])
        own = torch.zeros(n, dtype=torch.bool)
        own[gid] = True
        is_trained = torch.isin(y, trained)
        later = {
            "unseen_x": src.x[nodes],
            "unseen_edge_index": ei,
            "unseen_y": y,
            "unseen_node_mask": (~own[nodes]) & is_trained,
            "unseen_cls_mask": ~is_trained,
        }
        if fg.held_out is not None:
            later["nc_x"] = fg.held_out.x.clone()
            later["nc_edge_index"] = fg.held_out.edge_index.clone()
            later["nc_y"] = fg.held_out.y.clone()
        sets.append(later)
    meta = dict(fg.meta)
    meta["fedlog_eval"] = {
        "hops": hops,
        "unseen_node": [int(e["unseen_node_mask"].sum()) for e in sets],
        "missing_class": [int(e["unseen_cls_mask"].sum()) for e in sets],
        "new_client": int(fg.held_out.num_nodes) if fg.held_out is not None else 0,
    }
    return dataclasses.replace(fg, clients=list(fg.clients), meta=meta, client_eval=sets)
