"""The frame of a log-log plot and the dots pinned to its edge: one rule for every figure that has them.

Both the convergence figure and the leaderboard scatter show compute (x) against an error (y) on log
axes, in a frame chosen around what matters; a dot outside the frame is drawn just inside it as a
triangle pointing where it is. The side a dot is pinned to: beyond the x range first (the compute it
spent is what the axis is about), else beyond the y range. Everything here works on log10 coordinates.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

EDGE_SYMBOLS = {"left": "triangle-left", "right": "triangle-right", "top": "triangle-up", "bottom": "triangle-down"}
#: How far inside the frame a pinned dot sits, as a share of the frame's width and height.
INSET = 0.015


@dataclass(frozen=True)
class Frame:
    """What a plot shows, as log10 ranges of x and y."""

    x: tuple[float, float]
    y: tuple[float, float]

    def contains_x(self, value: float) -> bool:
        return self.x[0] <= math.log10(value) <= self.x[1]

    def union(self, other: Frame) -> Frame:
        """The smallest frame holding both: how far lines and shading must reach."""
        return Frame(x=(min(self.x[0], other.x[0]), max(self.x[1], other.x[1])),
                     y=(min(self.y[0], other.y[0]), max(self.y[1], other.y[1])))


def log_coords(x, y, frame: Frame) -> tuple[np.ndarray, np.ndarray]:
    """log10 of the coordinates; zero or missing values land below the frame (pinned to its edge)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        lx, ly = np.log10(np.asarray(x, dtype=np.float64)), np.log10(np.asarray(y, dtype=np.float64))
    return (np.where(np.isfinite(lx), lx, frame.x[0] - 1), np.where(np.isfinite(ly), ly, frame.y[0] - 1))


def edge_sides(lx: np.ndarray, ly: np.ndarray, frame: Frame) -> np.ndarray:
    """'' inside the frame, else the edge a dot is pinned to (left/right before bottom/top)."""
    side = np.full(np.shape(lx), "", dtype=object)
    side[ly > frame.y[1]] = "top"
    side[ly < frame.y[0]] = "bottom"
    side[lx > frame.x[1]] = "right"
    side[lx < frame.x[0]] = "left"
    return side


def pinned(lx, ly, frame: Frame) -> tuple[np.ndarray, np.ndarray]:
    """Coordinates just inside the frame (log10 in, linear out), for edge markers."""
    inset_x, inset_y = INSET * (frame.x[1] - frame.x[0]), INSET * (frame.y[1] - frame.y[0])
    px = np.clip(lx, frame.x[0] + inset_x, frame.x[1] - inset_x)
    py = np.clip(ly, frame.y[0] + inset_y, frame.y[1] - inset_y)
    return 10.0**px, 10.0**py
