"""FedStruct options: the frozen :class:`FedStructOptions` and the facts derived from them alone.

Aliakbari et al., *FedStruct*, https://arxiv.org/abs/2402.19163; spec ``shared/specs/fedstruct.md``. The
options are documented under ``Args:`` of :mod:`securefgl.algorithms.fedstruct.algorithm`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, get_args

from securefgl.errors import ConfigError

__all__ = ["GLOBAL_NSF", "NSF", "FedStructOptions", "feature_width", "server_knows_edges", "variant"]

#: Structure features that need the whole graph, so only FedStruct-A (server knows E) can compute them.
GLOBAL_NSF = ("node2vec", "gdv")
#: Every structure-feature option (``Options.nsf``).
NSF = Literal["h2v", "degree", "node2vec", "gdv"]


@dataclass(frozen=True)
class FedStructOptions:
    """Options of FedStruct (``[algorithm.options]``), checked on construction (:class:`ConfigError`).

    Each option is described under ``Args:`` of :mod:`securefgl.algorithms.fedstruct.algorithm`.
    """

    num_hops: int = 2
    num_hops_s: int = 10
    beta: tuple[float, ...] | None = None
    nsf: NSF = "h2v"
    d_s: int = 256
    n2v_epochs: int = 50
    gdv_graphlet_size: int = 5
    hidden_f: tuple[int, ...] = (64,)
    hidden_s: tuple[int, ...] = (256,)
    dropout: float = 0.7
    dropout_s: float | None = None
    u_form: bool = False
    h2v_std: float = 0.05
    prune_p: int | None = None
    grad_bound: float = 1e4
    setup_max_bytes: float = 64 * 2.0**30
    setup_max_memory: float = 4 * 2.0**30

    def __post_init__(self) -> None:
        if self.num_hops < 1 or self.num_hops_s < 1:
            raise ConfigError(
                f"algorithm.options.num_hops and num_hops_s must be >= 1, got {self.num_hops}, {self.num_hops_s}"
            )
        if self.nsf not in get_args(NSF):
            raise ConfigError(
                f"algorithm.options.nsf must be one of {', '.join(map(repr, get_args(NSF)))}, got {self.nsf!r}"
            )
        if self.n2v_epochs < 1 or self.gdv_graphlet_size not in (4, 5):
            raise ConfigError(
                f"algorithm.options: need n2v_epochs >= 1 and gdv_graphlet_size in (4, 5); got "
                f"n2v_epochs={self.n2v_epochs}, gdv_graphlet_size={self.gdv_graphlet_size}"
            )
        if self.beta is not None and len(self.beta) != self.num_hops_s:
            raise ConfigError(
                f"algorithm.options.beta needs num_hops_s={self.num_hops_s} entries, got {list(self.beta)}"
            )
        if self.d_s < 1 or not 0.0 <= self.dropout < 1.0 or not self.h2v_std > 0 or not self.grad_bound > 0:
            raise ConfigError(
                f"algorithm.options: need d_s >= 1, dropout in [0, 1), h2v_std > 0, grad_bound > 0; got "
                f"d_s={self.d_s}, dropout={self.dropout}, h2v_std={self.h2v_std}, grad_bound={self.grad_bound}"
            )
        ds = self.dropout if self.dropout_s is None else self.dropout_s
        if not 0.0 <= ds < 1.0:
            raise ConfigError(f"algorithm.options.dropout_s must be in [0, 1), got {self.dropout_s}")
        if self.u_form and ds != 0.0:
            raise ConfigError(
                f"algorithm.options.u_form needs no dropout in g (the server recomputes g(S)); got "
                f"dropout_s={ds}: set dropout_s=0 or u_form=false"
            )
        if self.prune_p is not None and self.prune_p < 1:
            raise ConfigError(f"algorithm.options.prune_p must be >= 1 or None, got {self.prune_p}")


def server_knows_edges(options: Any) -> bool:
    """FedStruct-A (``nsf`` ``"node2vec"`` or ``"gdv"``): the server knows the global edge set."""
    nsf = options.get("nsf", "h2v") if isinstance(options, Mapping) else getattr(options, "nsf", "h2v")
    return nsf in GLOBAL_NSF


def variant(options: FedStructOptions) -> str:
    """``"A"`` (server knows the edges) or ``"B"`` (it does not; the default)."""
    return "A" if options.nsf in GLOBAL_NSF else "B"


def feature_width(options: FedStructOptions) -> int:
    """Width of :math:`S`: ``d_s``, or the GDV's orbit count (73 or 15)."""
    o = options
    if o.nsf == "gdv":
        return 73 if o.gdv_graphlet_size == 5 else 15
    return o.d_s
