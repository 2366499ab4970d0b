"""FedLoG's options: the frozen :class:`FedLoGOptions` (``[algorithm.options]``).

Part of :mod:`securefgl.algorithms.fedlog`; every option and its default is documented under ``Args:`` of
:class:`~securefgl.algorithms.fedlog.FedLoG`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from securefgl.errors import ConfigError

__all__ = ["FedLoGOptions"]


@dataclass(frozen=True)
class FedLoGOptions:
    """Options of :class:`~securefgl.algorithms.fedlog.FedLoG` (``FedLoG.Options``; see its ``Args:``)."""

    num_proto: int = 20
    tau: float = 3.0
    beta: float = 1.0
    gamma: float = 1.0
    lr: float = 0.001
    weight_decay: float = 5e-4
    batch_size: int = 64
    hidden: int = 128
    out_dim: int = 64
    dropout: float = 0.5
    classifier_mode: Literal["paper", "released"] = "paper"
    prompt_mode: Literal["paper", "none"] = "paper"
    prompt_epochs: int = 100
    prompt_inits: int = 20
    prompt_lr: float = 0.01
    warmup_epochs: int = 0
    warmup_patience: int = 10
    lambda_step: float = 0.001
    lambda_threshold: float = 0.8
    weighting: Literal["uniform", "train"] = "uniform"
    min_holders: int = 1
    param_bound: float = 8.0
    x_bound: float = 1.0
    psi_bound: float = 8.0

    def __post_init__(self) -> None:
        checks = {
            "num_proto": self.num_proto >= 1,
            "tau": self.tau >= 0,
            "beta": self.beta >= 0,
            "gamma": self.gamma >= 0,
            "lr": self.lr > 0,
            "weight_decay": self.weight_decay >= 0,
            "batch_size": self.batch_size >= 1,
            "hidden": self.hidden >= 1,
            "out_dim": self.out_dim >= 1,
            "dropout": 0 <= self.dropout < 1,
            "prompt_epochs": self.prompt_epochs >= 0,
            "prompt_inits": self.prompt_inits >= 0,
            "prompt_lr": self.prompt_lr > 0,
            "warmup_epochs": self.warmup_epochs >= 0,
            "warmup_patience": self.warmup_patience >= 1,
            "lambda_step": 0 <= self.lambda_step <= 1,
            "lambda_threshold": 0 <= self.lambda_threshold <= 1,
            "min_holders": self.min_holders >= 1,
            "param_bound": self.param_bound > 0,
            "x_bound": self.x_bound > 0,
            "psi_bound": self.psi_bound > 0,
        }
        bad = [k for k, ok in checks.items() if not ok]
        if bad:
            raise ConfigError(
                f"algorithm.options.{bad[0]}={getattr(self, bad[0])!r} is out of range "
                "(num_proto/batch_size/hidden/out_dim/min_holders/warmup_patience >= 1, "
                "dropout in [0, 1), lambda_* in [0, 1], lr/prompt_lr/bounds > 0, the rest >= 0)"
            )
        if self.classifier_mode not in ("paper", "released"):
            raise ConfigError(
                f"algorithm.options.classifier_mode={self.classifier_mode!r}; valid: 'paper', 'released'"
            )
        if self.prompt_mode not in ("paper", "none"):
            raise ConfigError(f"algorithm.options.prompt_mode={self.prompt_mode!r}; valid: 'paper', 'none'")
        if self.weighting not in ("uniform", "train"):
            raise ConfigError(f"algorithm.options.weighting={self.weighting!r}; valid: 'uniform', 'train'")
