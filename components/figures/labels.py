"""Point labels that never overlap: plotly draws a trace's text where it is told, on top of any other.

``place_labels`` lays out one label per point of a log-log frame as annotations with a short leader line,
in pixels of a nominal plot area: each label goes to the first of a few places (centred above, starting or
ending at the point above, the same below, then further out) where its box meets no label placed before
it, no point and no fixed obstacle (the figure's own marker labels). The nominal area is smaller than the
plot a page draws (about 1,300 x 410 px at 1440 x 900), so a layout without overlaps there keeps none on a
wider plot: points only move further apart, and labels keep their pixel size and their side of their point. ``same_numbers`` finds the points that are
the same estimator under two names (identical F and MSE statistics), so a figure can say so once.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from components.figures.frame import Frame

#: The plot area labels are laid out in, in pixels (smaller than any page draws the figures at).
NOMINAL_WIDTH, NOMINAL_HEIGHT = 900.0, 380.0
FONT_SIZE = 11
#: Width of one character of the label font, generously (plotly's default sans at 11 px averages ~6 px).
CHAR_WIDTH = 6.6
LINE_HEIGHT = 16.0
#: Vertical offsets of a label's centre from its point, tried in this order (pixels, negative is up).
OFFSETS = (-16.0, 16.0, -34.0, 34.0, -52.0, 52.0, -70.0, 70.0, -88.0, 88.0)
MARKER_BOX = 7.0  # half the size of a point's marker box


@dataclass(frozen=True)
class Box:
    """An axis-aligned box in pixels of the nominal plot area (y grows downwards)."""

    left: float
    top: float
    right: float
    bottom: float

    def meets(self, other: Box, gap: float = 2.0) -> bool:
        return not (self.right + gap <= other.left or other.right + gap <= self.left
                    or self.bottom + gap <= other.top or other.bottom + gap <= self.top)


def to_pixels(x: float, y: float, frame: Frame) -> tuple[float, float]:
    """A data point (log axes) in pixels of the nominal plot area."""
    px = (math.log10(x) - frame.x[0]) / (frame.x[1] - frame.x[0]) * NOMINAL_WIDTH
    py = (frame.y[1] - math.log10(y)) / (frame.y[1] - frame.y[0]) * NOMINAL_HEIGHT
    return px, py


def text_box(px: float, py: float, text: str) -> Box:
    """The box of ``text`` centred at (px, py)."""
    half = (CHAR_WIDTH * len(text) + 8.0) / 2.0
    return Box(px - half, py - LINE_HEIGHT / 2, px + half, py + LINE_HEIGHT / 2)


def vertical_label_box(x: float, frame: Frame, text: str) -> Box:
    """The box of a label written upwards along a vertical marker line, hung from the plot's top, left of x."""
    px, _ = to_pixels(x, 10 ** frame.y[1], frame)
    return Box(px - LINE_HEIGHT - 2.0, 0.0, px, CHAR_WIDTH * len(text) + 8.0)


def corner_label_box(y: float, frame: Frame, text: str) -> Box:
    """The box of a label right-aligned on the plot's right edge, sitting on the height y."""
    _, py = to_pixels(10 ** frame.x[0], y, frame)
    return Box(NOMINAL_WIDTH - CHAR_WIDTH * len(text) - 8.0, py - LINE_HEIGHT, NOMINAL_WIDTH, py)


def _inside(box: Box) -> float:
    """How far to move a box sideways so it stays within the plot's width (a label near an edge)."""
    if box.left < 0:
        return -box.left
    if box.right > NOMINAL_WIDTH:
        return max(NOMINAL_WIDTH - box.right, -box.left)
    return 0.0


def place_labels(points: Sequence[tuple[float, float, str]], frame: Frame, *,
                 obstacles: Sequence[Box] = ()) -> list[tuple[float, float, Box]]:
    """``(sideways shift, vertical offset, box)`` in pixels for each ``(x, y, text)``: the first vertical offset
    whose box meets nothing placed or fixed, else the one that meets the fewest; a box near the plot's left or
    right edge is shifted inwards (on a wider plot the point is further from the edge, so it stays inside).
    Points are placed from the highest up, so a crowd of labels stacks outwards."""
    anchors = [to_pixels(x, y, frame) for x, y, _ in points]
    markers = [Box(px - MARKER_BOX, py - MARKER_BOX, px + MARKER_BOX, py + MARKER_BOX) for px, py in anchors]
    placed: list[Box] = []
    out: dict[int, tuple[float, float, Box]] = {}
    for i in sorted(range(len(points)), key=lambda k: (anchors[k][1], anchors[k][0])):
        px, py = anchors[i]
        best = None
        centred = text_box(px, py, points[i][2])
        half = (centred.right - centred.left) / 2
        for offset, side in ((o, side) for o in OFFSETS for side in (0.0, half - 4.0, 4.0 - half)):
            box = text_box(px + side, py + offset, points[i][2])
            shift = side + _inside(box)
            box = text_box(px + shift, py + offset, points[i][2])
            hits = sum(box.meets(b) for b in (*placed, *obstacles)) + sum(
                box.meets(m, gap=0.0) for j, m in enumerate(markers))
            if box.top < 0 or box.bottom > NOMINAL_HEIGHT:
                hits += 1
            if best is None or hits < best[0]:
                best = (hits, shift, offset, box)
            if hits == 0:
                break
        _, shift, offset, box = best
        placed.append(box)
        out[i] = (shift, offset, box)
    return [out[i] for i in range(len(points))]


def same_numbers(stats: Sequence[tuple], *, rel: float = 1e-9) -> list[list[int]]:
    """Groups of indices whose number tuples agree to ``rel`` (each index in one group, in order)."""
    groups: list[list[int]] = []
    for i, numbers in enumerate(stats):
        for group in groups:
            first = stats[group[0]]
            if len(first) == len(numbers) and all(math.isclose(a, b, rel_tol=rel, abs_tol=0.0)
                                                  for a, b in zip(first, numbers, strict=True)):
                group.append(i)
                break
        else:
            groups.append([i])
    return groups
