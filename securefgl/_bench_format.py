"""Plain-text (markdown) tables of benchmark rows, with numbers shortened for reading."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["format_rows"]


def _fmt(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, bool):
        return "yes" if v else "NO"
    if isinstance(v, float):
        if v == 0:
            return "0"
        if abs(v) >= 100:
            return f"{v:.0f}"
        if abs(v) >= 1:
            return f"{v:.2f}"
        return f"{v:.3f}" if abs(v) >= 1e-3 else f"{v:.1e}"
    if isinstance(v, int) and abs(v) >= 100_000:
        return f"{v:.3g}" if math.log10(abs(v)) % 1 else f"1e{int(math.log10(abs(v)))}"
    return str(v)


def format_rows(rows: Sequence[Mapping[str, Any]], columns: Sequence[str] | None = None) -> str:
    """A plain-text (markdown) table of ``rows``."""
    if not rows:
        return "(no rows)"
    cols = list(columns) if columns else list(rows[0])
    cells = [[_fmt(r.get(c)) for c in cols] for r in rows]
    widths = [max(len(c), *(len(row[i]) for row in cells)) for i, c in enumerate(cols)]
    line = "| " + " | ".join(c.ljust(w) for c, w in zip(cols, widths, strict=True)) + " |"
    sep = "|" + "|".join("-" * (w + 2) for w in widths) + "|"
    body = ["| " + " | ".join(x.rjust(w) for x, w in zip(row, widths, strict=True)) + " |" for row in cells]
    return "\n".join([line, sep, *body])
