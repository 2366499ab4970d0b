"""The one loader of securefgl's known-answer vectors (``tests/vectors/<family>/<name>.json``).

Every vector file is a JSON object with a header and its cases::

    {"family": "...", "source": "...", "checked_by": "...", "vectors": [...], "invalid": [...]}

``source`` says where the values come from (an RFC / NIST section, or the generator script for
securefgl's own vectors) and ``checked_by`` how they were verified; ``invalid`` lists inputs that must
raise. Tests load files through :func:`load_vectors`; test directories are not packages, so test
modules import this file by path (``importlib.util.spec_from_file_location``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

VECTORS_DIR = Path(__file__).resolve().parent
_REQUIRED = ("family", "source", "checked_by", "vectors")


def load_vectors(relative: str) -> dict[str, Any]:
    """Load and check one vector file, e.g. ``load_vectors("prg/aes256ctr_sp800_38a.json")``."""
    path = VECTORS_DIR / relative
    data = json.loads(path.read_text())
    missing = [k for k in _REQUIRED if k not in data]
    if missing:
        raise ValueError(f"vector file {relative} lacks header fields {missing}")
    if not data["vectors"]:
        raise ValueError(f"vector file {relative} has no vectors")
    data.setdefault("invalid", [])
    return data
