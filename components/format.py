"""Number formatting shared by every page, so a FLOP count reads the same everywhere."""

from __future__ import annotations

import math


def sci(x: float | None, digits: int = 3) -> str:
    """Compact scientific notation; '—' for missing values."""
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "—"
    if x == 0:
        return "0"
    return f"{x:.{digits}g}" if 1e-3 <= abs(x) < 1e5 else f"{x:.{digits - 1}e}"


def integer(x: float | None) -> str:
    return "—" if x is None else f"{int(x):,}"
