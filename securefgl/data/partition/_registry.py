"""The registry of partition methods: name -> parameter dataclass, partitioner and one-line summary."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from torch_geometric.data import Data

from securefgl.config.loader import build
from securefgl.data.partition._base import _Result
from securefgl.data.partition._community import LouvainParams, _louvain_method
from securefgl.data.partition._dirichlet import DirichletParams, _dirichlet
from securefgl.data.partition._fedlog import FedLoGParams, _fedlog
from securefgl.data.partition._file import FileParams, _file_method
from securefgl.data.partition._kmeans import KMeansParams, _kmeans_method
from securefgl.data.partition._label_clusters import (
    LouvainPlusParams,
    MetisPlusParams,
    _louvain_plus,
    _metis_plus,
)
from securefgl.data.partition._metis import MetisParams, _metis_method
from securefgl.data.partition._structure_noniid import StructureNonIIDParams, _structure_noniid
from securefgl.data.partition._uniform import RandomParams, _random
from securefgl.errors import ConfigError, PartitionError


@dataclass(frozen=True)
class _Method:
    params: type
    fn: Callable[[Data, int, int, Any], _Result]
    summary: str


_METHODS: dict[str, _Method] = {
    "random": _Method(RandomParams, _random, "uniform random node assignment (FedStruct)"),
    "metis": _Method(MetisParams, _metis_method, "METIS k-way, minimum edge cut"),
    "louvain": _Method(LouvainParams, _louvain_method, "Louvain; K largest capped communities (FedSpray)"),
    "louvain+": _Method(
        LouvainPlusParams, _louvain_plus, "Louvain -> 100 owners -> KMeans on labels (O-pFGL)"
    ),
    "metis+": _Method(MetisPlusParams, _metis_plus, "METIS 100 parts -> KMeans on labels (O-pFGL)"),
    "dirichlet": _Method(DirichletParams, _dirichlet, "per-class Dirichlet(alpha) label skew"),
    "structure-noniid": _Method(
        StructureNonIIDParams, _structure_noniid, "METIS + homo/hete edge injection (AdaFGL)"
    ),
    "fedlog": _Method(FedLoGParams, _fedlog, "LCC, METIS K+1, held-out new client, missing classes (FedLoG)"),
    "kmeans": _Method(KMeansParams, _kmeans_method, "KMeans on features, size-capped (FedStruct)"),
    "file": _Method(FileParams, _file_method, "node -> client assignment (and split) read from an .npz"),
}

_METHOD_ALIASES = {
    "louvainplus": "louvain+",
    "metisplus": "metis+",
    "structurenoniid": "structure-noniid",
    "noniid": "structure-noniid",
    "adafgl": "structure-noniid",
    "k-means": "kmeans",
    "dir": "dirichlet",
}


def partition_methods() -> dict[str, str]:
    """Method name -> one-line description, in display order."""
    return {name: m.summary for name, m in _METHODS.items()}


def normalize_method(name: str, *, error: type[Exception] = PartitionError, key: str = "method") -> str:
    """Canonical method name (case, ``_`` vs ``-`` and ``plus`` vs ``+`` do not matter).

    Raises:
        PartitionError: (or ``error``) an unknown method; the message lists the valid ones.
    """
    if isinstance(name, str):
        low = name.strip().lower().replace("_", "-")
        if low in _METHODS:
            return low
        squashed = low.replace("-", "").replace(" ", "")
        if squashed in _METHOD_ALIASES:
            return _METHOD_ALIASES[squashed]
        if squashed in _METHODS:
            return squashed
    raise error(f"{key}: unknown partition method {name!r}; valid choices: {', '.join(_METHODS)}")


def method_params_class(method: str) -> type:
    """The parameter dataclass of a method."""
    return _METHODS[normalize_method(method)].params


def check_method_params(method: str, params: dict[str, Any] | None, *, where: str = "params") -> Any:
    """Validate method parameters; return the parameter dataclass instance.

    Raises:
        ConfigError: Unknown key (valid keys listed) or invalid value.
    """
    cls = method_params_class(method)
    name = normalize_method(method)
    try:
        return build(cls, params or {}, where=where)
    except ConfigError as exc:
        raise ConfigError(f"{exc} (method {name!r})") from exc
