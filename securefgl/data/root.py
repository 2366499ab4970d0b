"""Where datasets and partition caches live on disk."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["data_root", "ENV_VAR"]

ENV_VAR = "SECUREFGL_DATA"


def data_root(root: str | os.PathLike[str] | None = None) -> Path:
    """Resolve the data root.

    The first of: the explicit ``root``; the environment variable ``SECUREFGL_DATA``; the user cache directory
    (``$XDG_CACHE_HOME/securefgl/data``, by default ``~/.cache/securefgl/data``). The directory is not created
    here; loaders create what they write.

    Args:
        root: An explicit data root. (default: ``None``)

    Returns:
        The absolute data root.
    """
    if root is not None and str(root) != "":
        return Path(root).expanduser().resolve()
    env = os.environ.get(ENV_VAR)
    if env:
        return Path(env).expanduser().resolve()
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return (Path(cache) / "securefgl" / "data").resolve()
