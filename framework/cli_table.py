"""Plain-text tables for the command line (``triomq admin`` and the like)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["table"]


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """Columns aligned under their headers and a rule; ``None`` shows as ``-``."""
    cells = [[str(h) for h in headers], *[["-" if c is None else str(c) for c in r]
                                           for r in rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip()
             for row in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)
