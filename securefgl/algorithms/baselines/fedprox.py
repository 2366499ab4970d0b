r"""FedProx (Li et al., MLSys 2020), https://arxiv.org/abs/1812.06127: FedAvg with a proximal term.

Client :math:`k` minimises its loss plus a proximal term towards the broadcast global model :math:`w`:

.. math::
    w_k \leftarrow \arg\min_{v}\; \mathcal L_k(v) + \frac{\mu}{2}\lVert v - w\rVert_2^2
    \quad(\text{E local epochs}),

and uploads the same numerator and denominator blocks as
:class:`~securefgl.algorithms.baselines.fedavg.FedAvg`:

.. math::
    w \leftarrow \frac{\sum_k n_k\,\mathrm{clip}_B(w_k)}{\sum_k n_k}.

Args:
    mu: Proximal weight :math:`\mu \ge 0`. (default: ``0.01``)
    weighting, param_bound, finetune_epochs, upload: As FedAvg.

Shapes:
    As FedAvg.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from securefgl.algorithms.baselines.fedavg import FedAvg
from securefgl.algorithms.registry import register_algorithm
from securefgl.errors import ConfigError

__all__ = ["FedProx"]


@register_algorithm
class FedProx(FedAvg):
    """FedAvg with the proximal term :math:`\\frac{\\mu}{2}\\lVert w_k - w\\rVert^2`.

    Only the client half changes (:meth:`prox_mu`, read by FedAvg's local training); the schema and the server
    half are FedAvg's.
    """

    name = "fedprox"

    @dataclass(frozen=True)
    class Options:
        mu: float = 0.01
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
            if self.mu < 0:
                raise ConfigError(f"algorithm.options.mu must be >= 0, got {self.mu}")
            if not self.param_bound > 0:
                raise ConfigError(f"algorithm.options.param_bound must be > 0, got {self.param_bound}")
            if self.finetune_epochs < 0:
                raise ConfigError(
                    f"algorithm.options.finetune_epochs must be >= 0, got {self.finetune_epochs}"
                )

    def prox_mu(self) -> float:
        return float(self.options.mu)
