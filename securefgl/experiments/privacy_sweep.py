"""The privacy-utility sweep's methods and run configurations (issue 24), shared by ``examples/privacy_utility.py``
(the fixed-recipe sweep and its report) and ``examples/privacy_tuning.py`` (the tuned rows).

Every method is one ``securefgl.run`` configuration: 10 Louvain clients, split 50/25/25, protocol secagg, 50
rounds per phase, lr 0.02, eval every 10 rounds (:func:`run_config`); each result is one JSON record named by
:func:`record_slug`.
"""

from __future__ import annotations

import math
from typing import Any

__all__ = ["EPSILONS", "FIXED_RECIPE", "METHODS", "METHOD_OPTIONS", "SYNTHETIC", "record_slug", "run_config"]

EPSILONS = (1.0, 2.0, 4.0, 8.0, math.inf)

#: method -> (algorithm, model, privacy unit or None, epsilons it runs at)
METHODS: dict[str, tuple[str, str, str | None, tuple[float, ...]]] = {
    "GAP edge": ("gap", "gcn", "edge", EPSILONS),
    "GAP node": ("gap", "gcn", "node", EPSILONS[:-1]),
    "GAP node residual-vote": ("gap", "gcn", "node", EPSILONS[:-1]),
    "GAP node vote-head": ("gap", "gcn", "node", EPSILONS[:-1]),
    "DP-MLP node": ("gap", "mlp", "node", EPSILONS),
    "FedAvg GCN (non-private)": ("fedavg", "gcn", None, (math.inf,)),
    "DP-FedAvg client": ("fedavg", "gcn", "client", (1.0, 8.0)),
    # rows of examples/privacy_tuning.py: the same models with hyperparameters searched on validation
    "GAP node tuned": ("gap", "gcn", "node", EPSILONS[:-1]),
    "GAP node head tuned": ("gap", "gcn", "node", EPSILONS[:-1]),
    "GAP node noisy head tuned": ("gap", "gcn", "node", EPSILONS[:-1]),
    "DP-MLP node tuned": ("gap", "mlp", "node", EPSILONS),
}
#: Methods ``run`` trains with the fixed recipe (the tuned rows come from ``examples/privacy_tuning.py evaluate``).
FIXED_RECIPE = tuple(m for m in METHODS if not m.endswith(" tuned"))
#: The node-DP heads' searches (``examples/privacy_tuning.py --method "GAP node head"``, ``"GAP node noisy
#: head"``), not fixed-recipe rows.
METHODS["GAP node head"] = ("gap", "gcn", "node", EPSILONS[:-1])
METHODS["GAP node noisy head"] = ("gap", "gcn", "node", EPSILONS[:-1])

#: Options beyond the privacy unit and epsilon: GAP with one hop of neighbour votes and the residual classifier
#: (30 encoder rounds, then 20 in which the classifier trains the encoder on: 50 DP-SGD steps, as DP-MLP).
METHOD_OPTIONS: dict[str, dict[str, Any]] = {
    "GAP node residual-vote": {
        "embedding": "vote",
        "classifier": "residual",
        "hops": 1,
        "degree_bound": 5,
        "encoder_rounds": 30,
        "classifier_rounds": 20,
    },
    "GAP node head": {"classifier": "head", "hops": 1},
    "GAP node noisy head": {"classifier": "noisy-head", "hops": 1},
    "GAP node vote-head": {
        "embedding": "vote",
        "classifier": "head",
        "hops": 1,
        "degree_bound": 5,
        "encoder_rounds": 50,
        "classifier_rounds": 20,
        "link_prior": 1.0,
        "aggregation_noise_scale": 5.0,
    },
}


#: Named synthetic graphs: ``csbm-dense`` is GAP's regime (its paper shows node-level gains on graphs whose nodes
#: have tens to hundreds of neighbours): a contextual SBM of 20,000 nodes of mean degree 40, homophily 0.8, 5
#: classes, 64 features with class means 0.3 noise standard deviations apart.
SYNTHETIC: dict[str, dict[str, Any]] = {
    "csbm-dense": {"name": "csbm", "csbm": {"num_nodes": 20_000, "avg_degree": 40, "signal": 0.3}},
}


def run_config(dataset: str, method: str, epsilon: float, seeds: list[int]) -> dict[str, Any]:
    """The ``securefgl.run`` configuration of ``method`` at ``epsilon`` over ``seeds``."""
    algorithm, model, unit, _ = METHODS[method]
    cfg: dict[str, Any] = {
        "dataset": SYNTHETIC.get(dataset, {"name": dataset}),
        "partition": {"clients": 10, "split": [0.5, 0.25, 0.25]},
        "protocol": {"name": "secagg"},
        "algorithm": {"name": algorithm},
        "model": {"name": model},
        "train": {"rounds": 50, "local_epochs": 3, "lr": 0.02, "eval_every": 10},
        "output": {"save": False},
        "seeds": seeds,
        "threads": 1,
    }
    if algorithm == "gap":
        cfg["algorithm"]["options"] = {"privacy": unit, "epsilon": epsilon, **METHOD_OPTIONS.get(method, {})}
    elif unit == "client":
        cfg["protocol"] = {
            "name": "secagg+dp",
            "options": {"dp_epsilon": epsilon, "dp_min_contributors": 9, "dp_clip_norm": 1.0},
        }
    return cfg


def record_slug(dataset: str, method: str, epsilon: float) -> str:
    """The file name (without ``.json``) of one (dataset, method, epsilon) record."""
    eps = "inf" if math.isinf(epsilon) else f"{epsilon:g}"
    return f"{dataset}_{method.replace(' ', '_').replace('(', '').replace(')', '')}_eps{eps}".lower()
