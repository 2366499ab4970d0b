"""Differential privacy for the people in the graph: node- and edge-level DP (GAP-style), with Opacus.

The protocols' distributed DP (:mod:`securefgl.protocols.dp`) protects one *client*. This package protects one
*node* (its features, label and edges) or one *edge* of a client's graph, the unit a compliance reviewer asks
about:

* :mod:`.degree`: degree bounding (a node keeps at most ``D`` sampled edges), so one node touches at most
  ``D`` neighbourhood sums;
* :mod:`.aggregation`: aggregation perturbation (GAP): Gaussian noise on every normalised neighbourhood sum,
  multi-hop sums computed once;
* :mod:`.dpsgd`: DP-SGD with Opacus (per-node gradient clipping, Poisson sampling), its Gaussian noise
  shared among the clients of a secure sum;
* :mod:`.accounting`: composition of all of these with Opacus's RDP accountant, noise calibration to a
  target epsilon, and the one :class:`PrivacyStatement` a run prints and saves.

The federated GAP algorithm that uses them is :mod:`securefgl.algorithms.gap`.
"""

from __future__ import annotations

from securefgl.privacy.accounting import (
    Mechanism,
    PrivacyStatement,
    calibrate_noise_multiplier,
    composed_epsilon,
)
from securefgl.privacy.aggregation import aggregation_sensitivity, normalize_rows, perturbed_aggregates
from securefgl.privacy.degree import bound_degree, max_degree, undirected_edges
from securefgl.privacy.dpsgd import dp_gradient_sum

__all__ = [
    "Mechanism",
    "PrivacyStatement",
    "aggregation_sensitivity",
    "bound_degree",
    "calibrate_noise_multiplier",
    "composed_epsilon",
    "dp_gradient_sum",
    "max_degree",
    "normalize_rows",
    "perturbed_aggregates",
    "undirected_edges",
]
