"""The settings of AdaFGL's Table II reproduction (spec ``adafgl.md`` §1.2-§1.3, §5.4, §7.5).

``examples/reproduce_adafgl.py`` and ``examples/tune_adafgl.py`` run the same cells: 10 clients, partition seed 0,
Table I's train/val/test ratios (:data:`SPLITS`), the two partition schemes of Table II
(:func:`partition_params`), and AdaFGL over a 2-layer GCN extractor (hidden 64, dropout 0.5, Adam 0.01)
configured by :func:`run_config`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from securefgl.config import RunConfig, build
from securefgl.errors import ConfigError

__all__ = ["INJECTIONS", "PARTITIONS", "SPLITS", "partition_params", "run_config"]

#: Train/val/test ratios per dataset (Table I).
SPLITS: dict[str, tuple[float, float, float]] = {
    "cora": (0.2, 0.4, 0.4),
    "citeseer": (0.2, 0.4, 0.4),
    "chameleon": (0.6, 0.2, 0.2),
    "squirrel": (0.6, 0.2, 0.2),
    "actor": (0.6, 0.2, 0.2),
}
#: The partition schemes of Table II.
PARTITIONS = ("louvain", "structure-noniid")


#: Structure non-iid edge injections: the paper's text (``floor(0.5 |E_i|)`` new edges per client) or the
#: official code's (every eligible non-edge pair with probability 0.001, isolated nodes joined to one partner).
INJECTIONS = ("text", "code")


def partition_params(split: str, *, injection: str = "text") -> dict[str, Any]:
    """Partitioner parameters of the two partition schemes (spec §1.2, §1.3).

    Args:
        split: ``"louvain"`` (every node assigned, FedSage+/AdaFGL packing) or ``"structure-noniid"``.
        injection: The structure non-iid injection, one of :data:`INJECTIONS`. (default: ``"text"``)

    Returns:
        The keyword arguments of ``partition_graph(data, split, K, ...)`` (``partition.params`` of a run config).

    Raises:
        ConfigError: ``split`` is not one of :data:`PARTITIONS`.
    """
    if split == "louvain":
        return {"assign": "greedy"}  # every node assigned, FedSage+/AdaFGL packing
    if injection not in INJECTIONS:
        raise ConfigError(f"unknown injection {injection!r}; valid: {', '.join(INJECTIONS)}")
    if split == "structure-noniid" and injection == "code":
        return {"p_homo": 0.5, "pair_rate": 0.001, "isolated_rate": 0.5}
    if split == "structure-noniid":
        return {"p_homo": 0.5, "rho": 0.5, "anchor": "uniform"}
    raise ConfigError(f"unknown split {split!r}; valid: {', '.join(PARTITIONS)}")


def run_config(
    dataset: str,
    split: str,
    protocol: str,
    options: Mapping[str, Any] | None = None,
    *,
    clients: int = 10,
    ratios: Sequence[float] | None = None,
    root: str | None = None,
    rounds: int = 100,
    local_epochs: int = 5,
    weight_decay: float = 0.0,
    optimizer_state: str = "reset",
    eval_every: int = 1,
    device: str = "cpu",
    algorithm: str = "adafgl",
    injection: str = "text",
) -> RunConfig:
    """The run config of one AdaFGL cell (partition seed 0; GCN extractor, hidden 64, 2 layers, dropout 0.5).

    Args:
        dataset: The dataset name (a key of :data:`SPLITS` unless ``ratios`` is given).
        split: The partition scheme, one of :data:`PARTITIONS`.
        protocol: The secure-aggregation protocol of step 1, e.g. ``"secagg"`` or ``"plaintext"``.
        options: AdaFGL option overrides (:class:`~securefgl.algorithms.adafgl.AdaFGLOptions` fields).
            (default: ``None``, the defaults)
        clients: Number of clients. (default: ``10``)
        ratios: Per-client train/val/test ratios. (default: ``None``, ``SPLITS[dataset]``)
        root: The data root. (default: ``None``, ``$SECUREFGL_DATA``)
        rounds: Step-1 rounds. (default: ``100``)
        local_epochs: Step-1 local epochs per round. (default: ``5``)
        weight_decay: Step-1 L2 weight decay. (default: ``0.0``)
        optimizer_state: ``"reset"`` or ``"persistent"``. (default: ``"reset"``)
        eval_every: Evaluate step 1 every this many rounds. (default: ``1``)
        device: Where the run's tensors live. (default: ``"cpu"``)
        algorithm: ``"adafgl"``, or a baseline run on the same cell with the same GCN and training settings
            (``"local"``: the Local column of issue 27; ``options`` must then be empty). (default: ``"adafgl"``)
        injection: The structure non-iid injection (:func:`partition_params`). (default: ``"text"``)

    Returns:
        The validated :class:`~securefgl.config.RunConfig`.

    Raises:
        ConfigError: An unknown ``split``; ``ratios`` is ``None`` and ``dataset`` is not a key of :data:`SPLITS`;
            or any value the run config refuses.
    """
    if ratios is None and dataset not in SPLITS:
        raise ConfigError(f"no Table I split for {dataset!r}; pass ratios, or one of: {', '.join(SPLITS)}")
    return build(
        RunConfig,
        {
            "dataset": {"name": dataset, "root": root},
            "partition": {
                "method": split,
                "clients": clients,
                "seed": 0,
                "split": list(ratios or SPLITS[dataset]),
                "params": partition_params(split, injection=injection),
            },
            "protocol": {"name": protocol},
            "algorithm": {"name": algorithm, "options": dict(options or {})},
            "model": {"name": "gcn", "hidden": 64, "layers": 2, "dropout": 0.5},
            "train": {
                "rounds": rounds,
                "local_epochs": local_epochs,
                "lr": 0.01,
                "weight_decay": weight_decay,
                "optimizer_state": optimizer_state,
                "eval_every": eval_every,
            },
            "device": device,
        },
    )
