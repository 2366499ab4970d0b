"""The library entry point: ``securefgl.run(config) -> RunResult``.

.. code-block:: python

    import securefgl

    result = securefgl.run({"protocol": {"name": "secagg"}, "train": {"rounds": 20}})
    print(result.metric("test_acc"))          # (mean, std) over seeds
    print(result.output_dir)                  # config.toml, metrics.json, clients.csv, plot.png

The same run as ``securefgl run --protocol secagg --rounds 20``. The combination (algorithm x protocol x
model x dataset) is validated before any data is loaded.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from securefgl.config import RunConfig, load_run_config, merge, to_dict
from securefgl.engine.hooks import RunHooks
from securefgl.engine.metrics import mean_std
from securefgl.engine.results import write_results
from securefgl.engine.runner import RoundRecord, SeedResult, phase_rounds, run_seed
from securefgl.errors import ConfigError, SecureFGLError
from securefgl.training.device import resolve_device

__all__ = ["RunResult", "load_federated_graph", "privacy_statement", "run"]


@dataclass
class RunResult:
    """The outcome of :func:`run`.

    Args:
        config: The resolved config.
        seeds: One :class:`~securefgl.engine.runner.SeedResult` per seed.
        device: The device used.
        graph: Public facts of the federated graph (name, nodes, clients, classes, partition).
        output_dir: The results folder, or ``None`` when saving is off.
    """

    config: RunConfig
    seeds: list[SeedResult]
    device: str
    graph: dict[str, Any] = field(default_factory=dict)
    output_dir: Path | None = None

    @property
    def summary(self) -> dict[str, dict[str, float]]:
        """``{metric: {"mean", "std"}}`` over seeds (population std)."""
        return mean_std([s.summary() for s in self.seeds]) if self.seeds else {}

    def metric(self, name: str) -> tuple[float, float]:
        """(mean, std) of a final metric over seeds, e.g. ``"test_acc"``, ``"test_f1"``, ``"bytes_up"``."""
        s = self.summary
        if name not in s:
            raise ConfigError(f"unknown metric {name!r}; available: {', '.join(sorted(s))}")
        return s[name]["mean"], s[name]["std"]

    @property
    def privacy(self) -> dict[str, Any]:
        """The run's privacy statement: ``unit``, ``epsilon``, ``delta``, ``accountant`` (and more).

        Node- or edge-level from the algorithm's report (GAP), with the client-level guarantee of a ``+dp``
        protocol under ``client_level`` when both apply; client-level alone for a ``+dp`` protocol; otherwise
        ``{"unit": "none", "epsilon": None, ...}`` (no guarantee).
        """
        return privacy_statement(self.seeds, self.config.protocol.spec.dp)

    def to_dict(self) -> dict[str, Any]:
        return {
            "config": to_dict(self.config),
            "device": self.device,
            "graph": self.graph,
            "output_dir": str(self.output_dir) if self.output_dir else None,
            "privacy": self.privacy,
            "summary": self.summary,
            "seeds": [s.to_dict() for s in self.seeds],
        }


#: How a ``+dp`` protocol's client-level epsilon is computed (:mod:`securefgl.protocols.dp`).
CLIENT_LEVEL_ACCOUNTANT = "distributed discrete Gaussian RDP (Kairouz et al. 2021), composed over rounds; RDP to (eps, delta) by opacus"


def privacy_statement(seeds: Sequence[SeedResult], client_dp: bool) -> dict[str, Any]:
    """The privacy object of a run's results (see :attr:`RunResult.privacy`); the largest epsilon over seeds."""
    reported = [s.report["privacy"] for s in seeds if isinstance(s.report.get("privacy"), dict)]
    client = None
    if client_dp:
        spent = [s.summary() for s in seeds]
        eps = [x["dp_epsilon"] for x in spent if "dp_epsilon" in x]
        client = {
            "unit": "client",
            "epsilon": max(eps) if eps else None,
            "delta": next((x["dp_delta"] for x in spent if "dp_delta" in x), None),
            "accountant": CLIENT_LEVEL_ACCOUNTANT,
        }
    if reported:
        out = dict(reported[0])
        eps = [r.get("epsilon") for r in reported]
        out["epsilon"] = None if any(e is None for e in eps) else max(eps)
        if client is not None:
            out["client_level"] = client
        return out
    if client is not None:
        return client
    return {"unit": "none", "epsilon": None, "delta": None, "accountant": None}


def load_federated_graph(config: RunConfig) -> Any:
    """Load (or synthesise) the dataset and partition it as the config says."""
    from securefgl.data import load_dataset, make_csbm, partition_graph

    ds = config.dataset
    data = make_csbm(**to_dict(ds.csbm)) if ds.name == "csbm" else load_dataset(ds.name, root=ds.root)
    p = config.partition
    return partition_graph(
        data,
        p.method,
        p.clients,
        seed=p.seed,
        split=p.split,
        split_scope=p.split_scope,
        stratified=p.stratified,
        cache=p.cache,
        root=ds.root,
        **p.params,
    )


def _coerce(
    config: RunConfig | Mapping[str, Any] | str | Path | None, overrides: Mapping[str, Any]
) -> RunConfig:
    if isinstance(config, RunConfig):
        if overrides:
            return RunConfig.from_mapping(merge(to_dict(config), dict(overrides)))
        return config
    if config is None or isinstance(config, Mapping):
        return RunConfig.from_mapping(merge(dict(config or {}), dict(overrides)))
    if isinstance(config, str | Path):
        return load_run_config(config, dict(overrides) or None)
    raise ConfigError(
        f"run() takes a RunConfig, a mapping or a config file path, got {type(config).__name__}"
    )


def _output_dir(config: RunConfig) -> Path | None:
    if not config.output.save:
        return None
    if config.output.dir is not None:
        return Path(config.output.dir)
    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    name = f"{stamp}-{config.algorithm.name}-{config.protocol.name}-{config.dataset.name}".replace(
        "+", "plus"
    )
    return Path("results") / name


def run(
    config: RunConfig | Mapping[str, Any] | str | Path | None = None,
    *,
    on_round: Callable[[int, RoundRecord], None] | None = None,
    on_seed: Callable[[int, int], None] | None = None,
    hooks: RunHooks | None = None,
    **overrides: Any,
) -> RunResult:
    """Run a configured experiment over all its seeds and write the results folder.

    Args:
        config: A :class:`RunConfig`, a nested mapping, a config file path, or ``None`` (defaults: the synthetic
            CSBM, 10 Louvain clients, FedAvg under SecAgg).
        on_round: Progress callback ``(seed, record)`` after every round.
        on_seed: Callback ``(seed, total_rounds_planned)`` when a seed starts.
        hooks: Observers attached to every seed's run (:class:`~securefgl.engine.hooks.RunHooks`).
        **overrides: Top-level sections merged into ``config`` (e.g. ``train={"rounds": 5}``).

    Returns:
        The :class:`RunResult`.

    Raises:
        UnsupportedCombinationError: The combination cannot run (raised before any work).
        ConfigError: Invalid config, unknown device, CUDA absent, too many clients per round.
        TrainingError: The run failed part-way (``NonFiniteError`` names the client and round); the partial
            results are on disk in the results folder.
    """
    cfg = _coerce(config, overrides)
    from securefgl.algorithms.registry import check_combination

    check_combination(
        cfg.algorithm.name,
        cfg.protocol.name,
        cfg.model.name,
        cfg.dataset.name,
        options=cfg.algorithm.options,
        num_clients=cfg.partition.clients,
        dropout=cfg.protocol.dropout,
    )
    device = resolve_device(cfg.device)
    if cfg.threads is not None:
        import torch

        torch.set_num_threads(cfg.threads)
    fg = load_federated_graph(cfg)
    cfg.train.clients_in_round(fg.num_clients)
    graph = {
        "name": fg.name,
        "num_nodes": fg.num_nodes,
        "num_features": fg.num_features,
        "num_classes": fg.num_classes,
        "num_clients": fg.num_clients,
        "partition": {k: v for k, v in fg.meta.items() if isinstance(v, str | int | float | bool)},
    }
    out_dir = _output_dir(cfg)
    done: list[SeedResult] = []
    extra = {"device": str(device), "graph": graph}
    for seed in cfg.seeds:
        progress = RunHooks(
            on_round=(lambda ev, s=seed: on_round(s, ev.record)) if on_round else None,
            on_start=(lambda ev, s=seed: on_seed(s, _planned_rounds(ev.phases, cfg.train)))
            if on_seed
            else None,
        )
        try:
            done.append(run_seed(cfg, fg, seed, device, hooks=progress.combine(hooks)))
        except SecureFGLError as exc:
            partial = getattr(exc, "partial", None)
            if out_dir is not None:
                seeds = done + ([partial] if partial is not None else [])
                write_results(
                    out_dir,
                    cfg,
                    seeds,
                    mean_std([s.summary() for s in seeds if s.final is not None] or [{}]),
                    status="failed",
                    error=f"seed {seed}: {type(exc).__name__}: {exc}",
                    extra=extra,
                    plot=cfg.output.plot,
                )
                exc.output_dir = out_dir  # type: ignore[attr-defined]
            raise
    result = RunResult(cfg, done, str(device), graph, out_dir)
    if out_dir is not None:
        extra["privacy"] = result.privacy
        write_results(out_dir, cfg, done, result.summary, extra=extra, plot=cfg.output.plot)
    return result


def _planned_rounds(phases: Sequence[Any], train: Any) -> int:
    """Rounds a seed will run (each local phase counts as one step)."""
    return sum(phase_rounds(p, train) for p in phases)
