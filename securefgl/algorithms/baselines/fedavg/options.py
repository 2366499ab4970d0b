"""FedAvg's options (:class:`FedAvgOptions`, ``FedAvg.Options``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from securefgl.errors import ConfigError

__all__ = ["FedAvgOptions"]


@dataclass(frozen=True)
class FedAvgOptions:
    """Options of :class:`~securefgl.algorithms.baselines.fedavg.FedAvg` (see its docstring for each one)."""

    weighting: Literal["train", "uniform"] = "train"
    param_bound: float = 16.0
    finetune_epochs: int = 0
    upload: Literal["auto", "weights", "delta"] = "auto"

    def __post_init__(self) -> None:
        if self.upload not in ("auto", "weights", "delta"):
            raise ConfigError(
                f"algorithm.options.upload: invalid value {self.upload!r}; valid choices: 'auto', 'weights', "
                "'delta'"
            )
        if not self.param_bound > 0:
            raise ConfigError(f"algorithm.options.param_bound must be > 0, got {self.param_bound}")
        if self.finetune_epochs < 0:
            raise ConfigError(f"algorithm.options.finetune_epochs must be >= 0, got {self.finetune_epochs}")
