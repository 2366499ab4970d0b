"""securefgl.protocols: how sums of client vectors are computed (plaintext, SecAgg, SecAgg+, CKKS, DP).

Safe entry points are the protocol classes (``SecAgg``, ``SecAggPlus``, ``CKKSAggregation``, the
``DistributedDP`` wrapper) looked up by name with :func:`get_protocol`; ``PlaintextAggregation`` is the
insecure baseline. The encoding (:class:`SumSchema`, :class:`BlockSpec`) is the shared contract.
Protocol classes are imported lazily on first access, so an optional piece that is missing (or whose
dependency is not installed) does not break ``import securefgl.protocols``.
"""

from __future__ import annotations

import importlib
import importlib.util
from typing import TYPE_CHECKING, Any

from securefgl.protocols.base import SERVER, DropoutPlan, MessageRecord, Protocol, Sums, Transcript
from securefgl.protocols.encoding import BlockSpec, EncodedVector, SumSchema
from securefgl.protocols.registry import (
    ProtocolSpec,
    available_protocols,
    get_protocol,
    parse_protocol,
    register_protocol,
)

if TYPE_CHECKING:
    from securefgl.protocols.ckks import CKKSAggregation
    from securefgl.protocols.dp import DistributedDP
    from securefgl.protocols.plaintext import PlaintextAggregation
    from securefgl.protocols.secagg import SecAgg
    from securefgl.protocols.secaggplus import SecAggPlus

#: Public names imported on first access: name -> module.
_LAZY = {
    "PlaintextAggregation": "securefgl.protocols.plaintext",
    "SecAgg": "securefgl.protocols.secagg",
    "SecAggPlus": "securefgl.protocols.secaggplus",
    "CKKSAggregation": "securefgl.protocols.ckks",
    "DistributedDP": "securefgl.protocols.dp",
    "IdentityDirectory": "securefgl.protocols.secaggplus",
}

__all__ = [
    "SERVER",
    "BlockSpec",
    "CKKSAggregation",
    "DistributedDP",
    "DropoutPlan",
    "EncodedVector",
    "IdentityDirectory",
    "MessageRecord",
    "PlaintextAggregation",
    "Protocol",
    "ProtocolSpec",
    "SecAgg",
    "SecAggPlus",
    "SumSchema",
    "Sums",
    "Transcript",
    "available_protocols",
    "get_protocol",
    "parse_protocol",
    "register_protocol",
]


def _present(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


# Lazy names are exported only when their module is present, so ``from securefgl.protocols import *``
# keeps working while an optional piece is missing.
__all__ = [n for n in __all__ if n not in _LAZY or _present(_LAZY[n])]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    try:
        value = getattr(importlib.import_module(module), name)
    except ImportError as exc:
        raise ImportError(
            f"securefgl.protocols.{name} is unavailable: importing {module} failed: {exc}"
        ) from exc
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
