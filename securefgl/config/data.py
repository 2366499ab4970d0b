"""The data-side config sections: which graph to load and how it is split among clients.

``[dataset]`` (:class:`DatasetConfig`, with the synthetic CSBM's parameters in :class:`CSBMConfig`) and
``[partition]`` (:class:`PartitionConfig`); :class:`DataConfig` is the two together, as ``securefgl
partition`` reads them. Names and parameters are validated by :mod:`securefgl.data` (imported when a
section is built, so that importing this module stays cheap).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Literal

from securefgl.config.loader import to_dict
from securefgl.errors import ConfigError

__all__ = ["CSBMConfig", "DataConfig", "DatasetConfig", "PartitionConfig", "SplitSpec"]

SplitSpec = tuple[float, float, float] | Literal["public"]


@dataclasses.dataclass(frozen=True)
class CSBMConfig:
    """Parameters of the synthetic contextual SBM (see :func:`securefgl.data.make_csbm`)."""

    num_nodes: int = 3000
    num_classes: int = 5
    avg_degree: float = 10.0
    homophily: float = 0.8
    num_features: int = 64
    signal: float = 1.0
    imbalance: float = 0.0
    seed: int = 0

    def __post_init__(self) -> None:
        from securefgl.data.synthetic import check_csbm_params

        check_csbm_params(**to_dict(self))


@dataclasses.dataclass(frozen=True)
class DatasetConfig:
    """Which graph to load.

    Args:
        name: A known dataset (``securefgl datasets`` lists them) or ``"csbm"`` for the synthetic default.
            (default: ``"csbm"``)
        root: Data root; ``None`` means ``$SECUREFGL_DATA`` or the user cache directory. (default: ``None``)
        csbm: Parameters used when ``name == "csbm"``.
    """

    name: str = "csbm"
    root: str | None = None
    csbm: CSBMConfig = dataclasses.field(default_factory=CSBMConfig)

    def __post_init__(self) -> None:
        from securefgl.data.datasets import canonical_name

        object.__setattr__(self, "name", canonical_name(self.name, error=ConfigError, key="dataset.name"))

    def load(self) -> Any:
        """Load the graph: :func:`~securefgl.data.make_csbm` with ``csbm`` for ``"csbm"``, else
        :func:`~securefgl.data.load_dataset` under ``root``."""
        if self.name == "csbm":
            from securefgl.data.synthetic import make_csbm

            return make_csbm(**to_dict(self.csbm))
        from securefgl.data.datasets import load_dataset

        return load_dataset(self.name, self.root)


@dataclasses.dataclass(frozen=True)
class PartitionConfig:
    """How a graph is split among clients and how each client splits its nodes.

    Args:
        method: Partitioner name (``random``, ``metis``, ``louvain``, ``louvain+``, ``metis+``, ``dirichlet``,
            ``structure-noniid``, ``fedlog``, ``kmeans``, ``file``: a saved node -> client array, with
            ``params.path``). (default: ``"louvain"``)
        clients: Number of clients K. (default: 10)
        seed: Seed of the partition and of the per-client splits. (default: 0)
        split: ``[train, val, test]`` ratios (sum at most 1, stratified per class) or ``"public"`` for the
            dataset's own split. (default: ``[0.2, 0.4, 0.4]``)
        split_scope: ``"client"`` draws each client's split from its own nodes; ``"global"`` draws one split of
            the whole graph before partitioning (FedStruct). (default: ``"client"``)
        stratified: Split per class (floor rounding, remainder to test) or over all nodes. (default: ``True``)
        cache: Read/write the partition cache under the data root. (default: ``True``)
        params: Method parameters (e.g. ``alpha`` for ``dirichlet``); unknown ones are rejected.
    """

    method: str = "louvain"
    clients: int = 10
    seed: int = 0
    split: SplitSpec = (0.2, 0.4, 0.4)
    split_scope: Literal["client", "global"] = "client"
    stratified: bool = True
    cache: bool = True
    params: dict[str, Any] = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        from securefgl.data.partition import check_method_params, normalize_method
        from securefgl.data.splits import check_split

        object.__setattr__(
            self, "method", normalize_method(self.method, error=ConfigError, key="partition.method")
        )
        if self.clients < 1:
            raise ConfigError(f"partition.clients must be at least 1, got {self.clients}")
        check_split(self.split, key="partition.split")
        check_method_params(self.method, self.params, where="partition.params")

    def apply(self, data: Any, *, root: str | None = None, cache_dir: str | Path | None = None) -> Any:
        """Partition ``data`` (a ``Data``) with these settings; returns a :class:`~securefgl.data.FederatedGraph`."""
        from securefgl.data.partition import partition_graph

        return partition_graph(
            data,
            self.method,
            self.clients,
            seed=self.seed,
            split=self.split,
            split_scope=self.split_scope,
            stratified=self.stratified,
            cache=self.cache,
            cache_dir=cache_dir,
            root=root,
            **self.params,
        )


@dataclasses.dataclass(frozen=True)
class DataConfig:
    """The ``[dataset]`` and ``[partition]`` sections together (what ``securefgl partition`` reads)."""

    dataset: DatasetConfig = dataclasses.field(default_factory=DatasetConfig)
    partition: PartitionConfig = dataclasses.field(default_factory=PartitionConfig)
