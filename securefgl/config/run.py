"""The run configuration: what to train, how, under which protocol, and where results go.

:class:`RunConfig` is a frozen, validated dataclass tree built with the generic machinery of
:mod:`securefgl.config.loader` (TOML/YAML/JSON files, ``section.key=value`` overrides, unknown keys
refused). The resolved config is saved with every result. Sections::

    [dataset]    name, root, csbm.*                  (securefgl.config.DatasetConfig)
    [partition]  method, clients, seed, split, ...   (securefgl.config.PartitionConfig)
    [protocol]   name, dropout, options
    [algorithm]  name, options                       (options validated by the algorithm registry)
    [model]      name, hidden, layers, dropout, options  (securefgl.nn.ModelSpec)
    [train]      rounds, local_epochs, lr, optimizer, weight_decay, client sampling, eval, early stopping
                                                     (securefgl.config.TrainConfig)
    [output]     dir, plot, save
    seeds, device

This module composes sections owned by lower layers: it imports the protocol and algorithm registries
only inside the validators of their sections, and nothing of :mod:`securefgl.engine`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from securefgl.config.data import DatasetConfig, PartitionConfig
from securefgl.config.loader import build, load_mapping, merge, parse_overrides
from securefgl.config.train import TrainConfig
from securefgl.errors import ConfigError
from securefgl.nn.registry import ModelSpec

if TYPE_CHECKING:
    from securefgl.protocols.registry import ProtocolSpec

__all__ = [
    "AlgorithmConfig",
    "OutputConfig",
    "ProtocolConfig",
    "RunConfig",
    "load_run_config",
]


@dataclass(frozen=True)
class ProtocolConfig:
    """The secure-sum protocol.

    Args:
        name: ``plaintext``, ``secagg``, ``secagg+``, ``ckks``, or any with ``+dp``. (default: ``"secagg"``)
        dropout: Fraction of each round's clients that drop out at a random protocol phase. (default: 0)
        options: Constructor options of the protocol (see its docstring). (default: ``{}``)
        grid_upload: Each client rounds the real blocks of its upload onto the sum's public fixed-point
            grid itself (unbiased stochastic rounding from a seeded stream of its own), so every
            protocol encodes it exactly and releases the same sum to the bit: a run under ``plaintext``
            and under ``secagg`` then gives identical numbers. ``False`` sums the raw floats in
            plaintext and leaves the rounding to each secure protocol (OS-seeded, so a secure run is
            not reproducible to the bit). DP blocks of a ``+dp`` protocol are never pre-rounded.
            (default: ``True``)
    """

    name: str = "secagg"
    dropout: float = 0.0
    options: dict[str, Any] = field(default_factory=dict)
    grid_upload: bool = True

    def __post_init__(self) -> None:
        from securefgl.protocols.registry import available_protocols, normalize_protocol_name

        name = normalize_protocol_name(self.name)
        if name not in available_protocols():
            raise ConfigError(
                f"protocol.name: unknown protocol {self.name!r}; valid: {', '.join(available_protocols())}"
            )
        object.__setattr__(self, "name", name)
        if not 0.0 <= self.dropout < 1.0:
            raise ConfigError(f"protocol.dropout must be in [0, 1), got {self.dropout}")
        if not isinstance(self.grid_upload, bool):
            raise ConfigError(f"protocol.grid_upload must be true or false, got {self.grid_upload!r}")

    @property
    def spec(self) -> ProtocolSpec:
        """The parsed protocol: ``spec.base`` and ``spec.dp`` (the ``+dp`` of the name is sugar for it)."""
        from securefgl.protocols.registry import parse_protocol

        return parse_protocol(self.name)


@dataclass(frozen=True)
class AlgorithmConfig:
    """The algorithm and its options (validated by the algorithm's ``Options`` dataclass).

    Args:
        name: A registered algorithm (``securefgl run --help`` lists them). (default: ``"fedavg"``)
        options: The algorithm's options. (default: ``{}``)
    """

    name: str = "fedavg"
    options: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        from securefgl.algorithms.registry import check_algorithm_options

        object.__setattr__(
            self, "name", check_algorithm_options(self.name, self.options, where="algorithm.options")
        )


@dataclass(frozen=True)
class OutputConfig:
    """Where results go.

    Args:
        dir: Results folder; ``None`` means ``./results/<timestamp>-<algorithm>-<protocol>-<dataset>``.
            (default: ``None``)
        save: Write the results folder at all. (default: ``True``)
        plot: Write the PNG plot. (default: ``True``)
    """

    dir: str | None = None
    save: bool = True
    plot: bool = True


@dataclass(frozen=True)
class RunConfig:
    """A whole run (see the module docstring for the sections).

    Args:
        seeds: Training seeds; each seed is one run over the same partition, reported as mean and std.
            (default: ``(0,)``)
        device: ``"auto"`` (CUDA when present), ``"cpu"``, ``"cuda"`` or ``"cuda:i"``. (default: ``"auto"``)
        threads: CPU threads for tensor operations (``torch.set_num_threads``, process-wide); ``None`` keeps
            torch's default (one per core). On a busy machine one thread can be far faster: measured on a
            2-core machine at load 13, the synthetic default trained in 3.3 s with 1 thread and 132 s with 2,
            whose threads wait on each other at every small operation. (default: ``None``)
    """

    dataset: DatasetConfig = field(default_factory=DatasetConfig)
    partition: PartitionConfig = field(default_factory=PartitionConfig)
    protocol: ProtocolConfig = field(default_factory=ProtocolConfig)
    algorithm: AlgorithmConfig = field(default_factory=AlgorithmConfig)
    model: ModelSpec = field(default_factory=ModelSpec)
    train: TrainConfig = field(default_factory=TrainConfig)
    output: OutputConfig = field(default_factory=OutputConfig)
    seeds: tuple[int, ...] = (0,)
    device: str = "auto"
    threads: int | None = None

    def __post_init__(self) -> None:
        if self.threads is not None and self.threads < 1:
            raise ConfigError(f"threads must be >= 1 or none, got {self.threads}")
        if not self.seeds:
            raise ConfigError("seeds must list at least one seed")
        if len(set(self.seeds)) != len(self.seeds):
            raise ConfigError(f"seeds must be distinct, got {list(self.seeds)}")
        from securefgl.training.device import check_device_string

        check_device_string(self.device)
        if self.train.clients_per_round is not None and self.train.clients_per_round > self.partition.clients:
            raise ConfigError(
                f"train.clients_per_round={self.train.clients_per_round} asks for more clients per round than "
                f"partition.clients={self.partition.clients}; use at most {self.partition.clients}"
            )

    @classmethod
    def from_mapping(cls, mapping: dict[str, Any] | None = None) -> RunConfig:
        """Validate a nested mapping (e.g. a parsed TOML file)."""
        return build(cls, mapping or {})


def load_run_config(
    path: str | Path | None = None,
    overrides: dict[str, Any] | list[str] | None = None,
    *,
    base: dict[str, Any] | None = None,
) -> RunConfig:
    """Read a run config file (TOML/YAML/JSON) if given, apply overrides, validate.

    Args:
        path: Config file; ``None`` starts from the defaults.
        overrides: A nested mapping or ``section.key=value`` strings; they win over the file.
        base: A mapping under the file (a preset); the file and the overrides win over it.
    """
    values: dict[str, Any] = dict(base or {})
    if path is not None:
        values = merge(values, load_mapping(path))
    if overrides:
        values = merge(values, overrides if isinstance(overrides, dict) else parse_overrides(overrides))
    return build(RunConfig, values)
