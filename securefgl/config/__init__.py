"""securefgl.config: typed, validated configuration (file + flags), saved with every result.

One module per concept:

* :mod:`securefgl.config.loader`: the generic machinery (:func:`build`, :func:`load_config`,
  :func:`parse_overrides`, :func:`merge`, :func:`save_config`, ...) for any dataclass;
* :mod:`securefgl.config.data`: the ``[dataset]`` and ``[partition]`` sections;
* :mod:`securefgl.config.train`: the ``[train]`` section, handed to algorithms and the training stack;
* :mod:`securefgl.config.run`: the ``[protocol]``, ``[algorithm]`` and ``[output]`` sections and the whole
  :class:`RunConfig`.

The run-level names are imported on first use (as :func:`securefgl.run` is), so that the lower layers,
which import :mod:`securefgl.config.loader` and :mod:`securefgl.config.train` directly, never pull in the
registries the run config validates against.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from securefgl.config.data import CSBMConfig, DataConfig, DatasetConfig, PartitionConfig, SplitSpec
from securefgl.config.loader import (
    build,
    dumps_toml,
    load_config,
    load_mapping,
    merge,
    parse_overrides,
    replace,
    save_config,
    to_dict,
)
from securefgl.config.train import TrainConfig

if TYPE_CHECKING:
    from securefgl.config.run import (
        AlgorithmConfig,
        OutputConfig,
        ProtocolConfig,
        RunConfig,
        load_run_config,
    )

__all__ = [
    "AlgorithmConfig",
    "CSBMConfig",
    "DataConfig",
    "DatasetConfig",
    "OutputConfig",
    "PartitionConfig",
    "ProtocolConfig",
    "RunConfig",
    "SplitSpec",
    "TrainConfig",
    "build",
    "dumps_toml",
    "load_config",
    "load_mapping",
    "load_run_config",
    "merge",
    "parse_overrides",
    "replace",
    "save_config",
    "to_dict",
]

_RUN_NAMES = ("AlgorithmConfig", "OutputConfig", "ProtocolConfig", "RunConfig", "load_run_config")


def __getattr__(name: str) -> Any:
    if name in _RUN_NAMES:
        from securefgl.config import run

        return getattr(run, name)
    raise AttributeError(f"module 'securefgl.config' has no attribute {name!r}")
