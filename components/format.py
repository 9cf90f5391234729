"""Number formatting shared by every page, so a FLOP count reads the same everywhere."""

from __future__ import annotations

from whestboard.store import sci  # the core's one number format: pages and the view write numbers alike

__all__ = ["integer", "sci"]


def integer(x: float | None) -> str:
    return "—" if x is None else f"{int(x):,}"
