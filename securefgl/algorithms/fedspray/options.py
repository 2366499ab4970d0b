r"""FedSpray's options: the frozen :class:`FedSprayOptions` and :class:`Hyper`, the view both halves use.

Part of :mod:`securefgl.algorithms.fedspray` (the method is documented on
:class:`~securefgl.algorithms.fedspray.FedSpray`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from securefgl.errors import ConfigError

__all__ = ["FedSprayOptions", "Hyper"]


@dataclass(frozen=True)
class FedSprayOptions:
    """Options of :class:`FedSpray` (``[algorithm.options]``); defaults follow the paper.

    The GNN is the run's model (``[model]``: ``gcn``, ``sgc`` or ``sage``, its ``hidden``, ``layers``,
    ``dropout`` and SGC's ``K``); it trains with ``train.lr``, ``train.local_epochs`` (E, per phase) and
    ``train.weight_decay`` using Adam.

    Args:
        lambda1: Weight :math:`\\lambda_1` of the GNN's distillation loss (paper 5; the code passes 1).
            (default: ``5.0``)
        lambda2: Weight :math:`\\lambda_2` of the encoder's distillation loss. (default: ``1.0``)
        proxy_dim: ``D``, the proxy and embedding width. (default: ``64``)
        encoder_lr: Adam learning rate of the encoder; ``None`` means ``train.lr``. (default: ``None``)
        proxy_lr: Adam learning rate of the per-node proxies. (default: ``0.02``)
        kd_conf_threshold: Unlabelled nodes take part in the GNN's distillation only if their projector
            confidence :math:`\\max_c q_{ic}` exceeds this; 0 keeps every node (paper), the code uses 0.7.
            (default: ``0.0``)
        proxy_mode: ``"paper_reset"``: labelled nodes start each round from their class's global proxy
            (Alg. 1, line 4); ``"code_persistent"``: they keep their locally learnt proxies across rounds
            (the official code). (default: ``"paper_reset"``)
        projector_init: ``"global_q"``: the local projector starts from the global projector;
            ``"global_p_quirk"``: from the global *classifier*, as the official code does.
            (default: ``"global_q"``)
        gnn_init: ``"glorot"``: the run's model initialisation (Glorot weights, zero biases, as every
            securefgl model); ``"uniform01"``: every GNN parameter from :math:`U[0,1)` (the official code).
            (default: ``"glorot"``)
        reset_optimizers: Re-create the three Adam states every round (the code keeps them).
            (default: ``False``)
        encoder_weight: :math:`N^{(k)}`: number of labelled nodes (``"train"``, code) or of nodes
            (``"nodes"``, paper); a client without labelled nodes always weighs 0. (default: ``"train"``)
        proxy_weight: :math:`a^{(k)}_j`: class fraction (``"ratio"``, paper and code) or class count
            (``"count"``) of the labelled nodes. (default: ``"ratio"``)
        proxy_min_clients: Release rule of the class-wise blocks: a class's proxy row is released only if at
            least this many contributing clients hold the class. (default: ``1``)
        upload: ``"delta"`` sends weighted differences to the broadcast values (small, tight bounds);
            ``"raw"`` the weighted values themselves. (default: ``"delta"``)
        encoder_clip: Public bound on each uploaded (unweighted) encoder number; ``None``: 1 for deltas,
            16 for raw values. (default: ``None``)
        proxy_clip: Public bound on each uploaded (unweighted) proxy number. (default: ``64.0``)
        proxy_init: Initial value of the per-node proxies. (default: ``0.1``)
        precision: Quantisation step of the sums (passed to the schema). (default: ``2**-20``)
    """

    lambda1: float = 5.0
    lambda2: float = 1.0
    proxy_dim: int = 64
    encoder_lr: float | None = None
    proxy_lr: float = 0.02
    kd_conf_threshold: float = 0.0
    proxy_mode: Literal["paper_reset", "code_persistent"] = "paper_reset"
    projector_init: Literal["global_q", "global_p_quirk"] = "global_q"
    gnn_init: Literal["glorot", "uniform01"] = "glorot"
    reset_optimizers: bool = False
    encoder_weight: Literal["train", "nodes"] = "train"
    proxy_weight: Literal["ratio", "count"] = "ratio"
    proxy_min_clients: int = 1
    upload: Literal["delta", "raw"] = "delta"
    encoder_clip: float | None = None
    proxy_clip: float = 64.0
    proxy_init: float = 0.1
    precision: float = 2.0**-20

    def __post_init__(self) -> None:
        for name in ("lambda1", "lambda2", "kd_conf_threshold"):
            v = getattr(self, name)
            if not (math.isfinite(v) and v >= 0):
                raise ConfigError(f"algorithm.options.{name} must be a finite number >= 0, got {v!r}")
        if self.kd_conf_threshold >= 1:
            raise ConfigError(
                f"algorithm.options.kd_conf_threshold must be in [0, 1), got {self.kd_conf_threshold!r}"
            )
        if self.proxy_dim < 1:
            raise ConfigError(f"algorithm.options.proxy_dim must be >= 1, got {self.proxy_dim}")
        for name in ("encoder_lr", "proxy_lr", "encoder_clip", "proxy_clip", "precision"):
            v = getattr(self, name)
            if v is not None and not (math.isfinite(v) and v > 0):
                raise ConfigError(f"algorithm.options.{name} must be a positive finite number, got {v!r}")
        if not math.isfinite(self.proxy_init):
            raise ConfigError(f"algorithm.options.proxy_init must be finite, got {self.proxy_init!r}")
        if self.proxy_min_clients < 1:
            raise ConfigError(
                f"algorithm.options.proxy_min_clients must be >= 1, got {self.proxy_min_clients}"
            )


@dataclass(frozen=True)
class Hyper:
    """The hyperparameters the local update and the server step need (a view of ``FedSpray.Options``)."""

    gnn: str = "gcn"
    layers: int = 2
    hops: int = 2
    dropout: float = 0.0
    weight_decay: float = 0.0
    lambda1: float = 5.0
    lambda2: float = 1.0
    epochs: int = 5
    lr: float = 0.003
    encoder_lr: float = 0.003
    proxy_lr: float = 0.02
    kd_conf_threshold: float = 0.0
    proxy_mode: Literal["paper_reset", "code_persistent"] = "paper_reset"
    projector_init: Literal["global_q", "global_p_quirk"] = "global_q"
    reset_optimizers: bool = False
    encoder_weight: Literal["train", "nodes"] = "train"
    proxy_weight: Literal["ratio", "count"] = "ratio"
    upload: Literal["delta", "raw"] = "delta"
    encoder_clip: float = 1.0
    proxy_clip: float = 64.0
    proxy_init: float = 0.1
