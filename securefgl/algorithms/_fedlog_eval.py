r"""FedLoG's "unseen data" evaluation sets (spec ``shared/specs/fedlog.md`` §1.2, steps 5-7).

Internal module of :mod:`securefgl.algorithms.fedlog`. For client :math:`k` with node set :math:`V_k`, the
evolved graph :math:`G_k^+` is the ``hops``-hop expansion of :math:`V_k` in the global graph, with every global
edge among its nodes. On it:

* Unseen Node (``unseen_node_mask``): nodes of :math:`G_k^+` outside :math:`V_k` whose label is a class the
  client has training labels for;
* Missing Class (``unseen_cls_mask``): nodes of :math:`G_k^+` whose label is *not* among the client's training
  classes (its removed tail classes and classes it never held).

The New Client is FedLoG's held-out Metis part (``FederatedGraph.held_out``): every local model predicts all of
its nodes. These sets are test data that *arrives later at the client*; they are attached to the client's own
``Data`` (attributes ``unseen_*`` and ``nc_*``) and are read only by client-side code.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch_geometric.utils import k_hop_subgraph, subgraph

from securefgl.errors import ConfigError

__all__ = ["ClaimCheck", "ClaimVerdict", "attach_generalization_sets", "best_round", "claim_verdicts"]


def attach_generalization_sets(fg: Any, hops: int = 2) -> Any:
    """A copy of ``fg`` whose clients carry FedLoG's Unseen-Node, Missing-Class and New-Client test sets.

    Args:
        fg: A :class:`~securefgl.data.FederatedGraph` (normally from ``partition_graph(..., "fedlog", K)``).
        hops: Expansion radius ``r`` of :math:`G_k^+` (the paper's value is lost; spec recommends 2).

    Returns:
        A shallow copy of ``fg`` with new client ``Data`` objects holding ``unseen_x`` ``(N_k^+, F)``,
        ``unseen_edge_index`` ``(2, E_k^+)`` (local to :math:`G_k^+`), ``unseen_y``, ``unseen_node_mask``,
        ``unseen_cls_mask`` and, when ``fg.held_out`` exists, ``nc_x``, ``nc_edge_index``, ``nc_y``.

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
    out = copy.copy(fg)
    clients = []
    for data in fg.clients:
        d = copy.copy(data)
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
        d.unseen_x = src.x[nodes]
        d.unseen_edge_index = ei
        d.unseen_y = y
        d.unseen_node_mask = (~own[nodes]) & is_trained
        d.unseen_cls_mask = ~is_trained
        if fg.held_out is not None:
            d.nc_x = fg.held_out.x
            d.nc_edge_index = fg.held_out.edge_index
            d.nc_y = fg.held_out.y
        clients.append(d)
    out.clients = clients
    out.meta = dict(fg.meta)
    out.meta["fedlog_eval"] = {
        "hops": hops,
        "unseen_node": [int(c.unseen_node_mask.sum()) for c in clients],
        "missing_class": [int(c.unseen_cls_mask.sum()) for c in clients],
        "new_client": int(fg.held_out.num_nodes) if fg.held_out is not None else 0,
    }
    return out


def best_round(history: list[dict[str, Any]], key: str = "seen_val") -> dict[str, Any] | None:
    """The record with the best pooled Seen-Graph validation accuracy (spec §2.7); later rounds win ties.

    FedLoG selects its reported round this way, and the claim comparison applies the same rule to the
    baselines so that every method is scored at a round chosen identically. Records whose ``key`` is
    ``None`` (no validation node anywhere) are skipped; ``None`` when no record has one.
    """
    best = None
    for rec in history:
        v = rec.get(key)
        if v is not None and (best is None or v >= best[key]):
            best = rec
    return best


#: The metrics FedLoG's claim is about (spec §1.2): above the baselines on these two.
CLAIM_GENERALIZATION = ("missing_class", "new_client")
#: How far FedLoG's Seen-Graph accuracy may fall below FedAvg's (points) under the claim.
CLAIM_SEEN_TOLERANCE = 1.0


@dataclass(frozen=True)
class ClaimCheck:
    """One comparison of the claim: ``metric`` of FedLoG against ``baseline`` (means over seeds, points)."""

    metric: str
    baseline: str
    fedlog: float
    other: float
    ok: bool

    @property
    def margin(self) -> float:
        """FedLoG's mean minus the baseline's (points); the Seen-Graph check passes down to -1."""
        return self.fedlog - self.other


@dataclass(frozen=True)
class ClaimVerdict:
    """FedLoG's claim in one (dataset, K) setting against one FedAvg view and Local.

    ``holds`` needs every check to pass and at least one check made: Missing Class and New Client above
    the FedAvg view and Local, Seen Graph not more than :data:`CLAIM_SEEN_TOLERANCE` below the FedAvg view.
    ``missing`` names the comparisons that could not be made (a method that did not run, a metric that is
    undefined in every seed), so a partial grid never reads as a pass.
    """

    dataset: str
    clients: int
    method: str
    fedavg: str
    checks: tuple[ClaimCheck, ...]
    missing: tuple[str, ...]

    @property
    def holds(self) -> bool:
        return bool(self.checks) and not self.missing and all(c.ok for c in self.checks)


def _mean_points(rows: list[dict[str, Any]], key: str) -> float | None:
    vals = [r[key] for r in rows if r.get(key) is not None]
    return 100.0 * float(np.mean(vals)) if vals else None


def claim_verdicts(
    rows: list[dict[str, Any]], method: str = "fedlog", fedavg: str = "fedavg-local", local: str = "local"
) -> list[ClaimVerdict]:
    """FedLoG's claim (issue 10, check 2) per (dataset, K), from per-seed result rows.

    Each row is a dict with ``dataset``, ``clients``, ``method`` and the accuracies ``seen_test``,
    ``missing_class``, ``new_client`` (fractions in [0, 1], or ``None`` where undefined); rows of one
    (dataset, K, method) are averaged over seeds. ``fedavg`` picks which FedAvg rows stand for FedAvg:
    ``"fedavg-local"`` (post-update local models, how FED-PUB's code, the paper's FedAvg, scores it) or
    ``"fedavg"`` (the aggregated model). Settings without a ``method`` row are skipped.
    """
    groups: dict[tuple[str, int, str], list[dict[str, Any]]] = {}
    for r in rows:
        groups.setdefault((r["dataset"], int(r["clients"]), r["method"]), []).append(r)
    out = []
    for ds, k in dict.fromkeys((d, kk) for d, kk, m in groups if m == method):
        ours = groups[(ds, k, method)]
        checks: list[ClaimCheck] = []
        missing: list[str] = []
        wanted = [(key, other) for other in (fedavg, local) for key in CLAIM_GENERALIZATION]
        wanted.append(("seen_test", fedavg))
        for key, other in wanted:
            a = _mean_points(ours, key)
            b = _mean_points(groups.get((ds, k, other), []), key)
            if a is None or b is None:
                missing.append(f"{key} vs {other}")
                continue
            ok = a >= b - CLAIM_SEEN_TOLERANCE - 1e-9 if key == "seen_test" else a > b  # 1e-9: float %
            checks.append(ClaimCheck(key, other, a, b, ok))
        out.append(ClaimVerdict(ds, k, method, fedavg, tuple(checks), tuple(missing)))
    return out
