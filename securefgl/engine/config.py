"""The run configuration: what to train, how, under which protocol, and where results go.

:class:`RunConfig` is a frozen, validated dataclass tree built with the generic machinery of
:mod:`securefgl.config` (TOML/YAML/JSON files, ``section.key=value`` overrides, unknown keys refused). The
resolved config is saved with every result. Sections::

    [dataset]    name, root, csbm.*                  (securefgl.config.DatasetConfig)
    [partition]  method, clients, seed, split, ...   (securefgl.config.PartitionConfig)
    [protocol]   name, dropout, options
    [algorithm]  name, options                       (options validated by the algorithm)
    [model]      name, hidden, layers, dropout, options  (securefgl.nn.ModelSpec)
    [train]      rounds, local_epochs, lr, optimizer, weight_decay, client sampling, eval, early stopping
    [output]     dir, plot, save
    seeds, device
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from securefgl.config import DatasetConfig, PartitionConfig, build, load_mapping, merge, parse_overrides
from securefgl.errors import ConfigError
from securefgl.nn.registry import ModelSpec

__all__ = [
    "AlgorithmConfig",
    "OutputConfig",
    "ProtocolConfig",
    "RunConfig",
    "TrainConfig",
    "load_run_config",
]


@dataclass(frozen=True)
class TrainConfig:
    """Optimisation and round settings.

    Args:
        rounds: Communication rounds of a ``rounds`` phase. (default: ``50``)
        local_epochs: Full-batch local epochs per client per round (E). (default: ``3``)
        lr: Learning rate. (default: ``0.01``)
        optimizer: ``"adam"`` or ``"sgd"``. (default: ``"adam"``)
        optimizer_state: ``"persistent"``: every client keeps its optimiser state across the rounds it takes
            part in (as common FGL code bases do); ``"reset"``: a fresh optimiser every round. With Adam and
            L2 weight decay a reset state moves every weight by about ``lr`` per round, also weights with no
            local gradient, which hurts FedAvg badly. (default: ``"persistent"``)
        momentum: SGD momentum. (default: ``0.0``)
        weight_decay: L2 penalty added to the gradient. The default is 0 because, with Adam, a client's
            weights of features absent from its subgraph receive only the penalty's gradient, which Adam
            normalises into a step of about ``lr`` towards zero per epoch: federated models then lose those
            weights (measured on Cora/Louvain/10 clients: FedAvg val accuracy 64% with ``5e-4`` vs 83% with 0).
            Centralized runs can use the usual ``5e-4``. (default: ``0.0``)
        client_fraction: Fraction of clients invited per round (at least one). (default: ``1.0``)
        clients_per_round: Exact number of clients per round; overrides ``client_fraction``.
            (default: ``None``)
        eval_every: Evaluate every this many rounds (and after the last). (default: ``1``)
        patience: Stop a phase after this many evaluations without a better validation accuracy;
            ``None`` disables early stopping. (default: ``None``)
        select_best: Report the test metrics of the round with the best validation accuracy (``False``:
            of the last round). (default: ``True``)
        batched: Train the clients of a round together when the algorithm supports it (``False`` runs the
            one-client-at-a-time reference path). (default: ``True``)
        epochs: Epochs of non-federated algorithms (Centralized, Local); ``None`` means
            ``rounds * local_epochs``. (default: ``None``)
    """

    rounds: int = 50
    local_epochs: int = 3
    lr: float = 0.01
    optimizer: Literal["adam", "sgd"] = "adam"
    optimizer_state: Literal["persistent", "reset"] = "persistent"
    momentum: float = 0.0
    weight_decay: float = 0.0
    client_fraction: float = 1.0
    clients_per_round: int | None = None
    eval_every: int = 1
    patience: int | None = None
    select_best: bool = True
    batched: bool = True
    epochs: int | None = None

    def __post_init__(self) -> None:
        if self.rounds < 1:
            raise ConfigError(f"train.rounds must be >= 1, got {self.rounds}")
        if self.local_epochs < 1:
            raise ConfigError(f"train.local_epochs must be >= 1, got {self.local_epochs}")
        if not self.lr > 0:
            raise ConfigError(f"train.lr must be > 0, got {self.lr}")
        if self.momentum < 0:
            raise ConfigError(f"train.momentum must be >= 0, got {self.momentum}")
        if self.weight_decay < 0:
            raise ConfigError(f"train.weight_decay must be >= 0, got {self.weight_decay}")
        if not 0.0 < self.client_fraction <= 1.0:
            raise ConfigError(f"train.client_fraction must be in (0, 1], got {self.client_fraction}")
        if self.clients_per_round is not None and self.clients_per_round < 1:
            raise ConfigError(f"train.clients_per_round must be >= 1, got {self.clients_per_round}")
        if self.eval_every < 1:
            raise ConfigError(f"train.eval_every must be >= 1, got {self.eval_every}")
        if self.patience is not None and self.patience < 1:
            raise ConfigError(f"train.patience must be >= 1 or none, got {self.patience}")
        if self.epochs is not None and self.epochs < 1:
            raise ConfigError(f"train.epochs must be >= 1 or none, got {self.epochs}")

    @property
    def total_epochs(self) -> int:
        """Epochs of a non-federated run: ``epochs`` or ``rounds * local_epochs``."""
        return self.epochs if self.epochs is not None else self.rounds * self.local_epochs

    def clients_in_round(self, num_clients: int) -> int:
        """How many of ``num_clients`` clients a round invites.

        Raises:
            ConfigError: ``clients_per_round`` exceeds ``num_clients``.
        """
        if self.clients_per_round is not None:
            if self.clients_per_round > num_clients:
                raise ConfigError(
                    f"train.clients_per_round={self.clients_per_round} asks for more clients per round than "
                    f"the partition has ({num_clients}); use at most {num_clients}"
                )
            return self.clients_per_round
        return max(1, round(self.client_fraction * num_clients))


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
        from securefgl.algorithms.base import parse_options
        from securefgl.algorithms.registry import get_algorithm, normalize_name

        cls = get_algorithm(self.name)
        object.__setattr__(self, "name", normalize_name(self.name))
        parse_options(cls.Options, self.options, where="algorithm.options")


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
        from securefgl.engine.device import check_device_string

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
