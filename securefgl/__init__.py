"""securefgl: privacy-preserving federated graph learning in which the server only ever sees sums.

``securefgl.run(config)`` runs an experiment (see :func:`securefgl.api.run`); it is imported lazily so that
``import securefgl`` stays cheap.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

__all__ = ["RunResult", "__version__", "run"]

if TYPE_CHECKING:
    from securefgl.api import RunResult, run


def __getattr__(name: str) -> Any:
    if name in ("run", "RunResult"):
        from securefgl import api

        return getattr(api, name)
    raise AttributeError(f"module 'securefgl' has no attribute {name!r}")
