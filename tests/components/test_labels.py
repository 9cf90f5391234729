"""Point labels laid out so that none meets another, a point or the figure's own marker labels."""

from __future__ import annotations

import itertools

from components.figures.frame import Frame
from components.figures.labels import (
    NOMINAL_WIDTH,
    place_labels,
    same_numbers,
    text_box,
    to_pixels,
    vertical_label_box,
)

FRAME = Frame(x=(6.5, 12.0), y=(-7.5, -1.5))


def test_labels_of_points_at_one_place_never_overlap():
    points = [(2.3e9, 7.9e-4, "Mean propagation"), (2.3e9, 7.9e-4, "Cumulant propagation, K = 1"),
              (2.5e9, 8.5e-4, "Something close by"), (1.0e10, 3.6e-5, "Covariance propagation")]
    layout = place_labels(points, FRAME)
    boxes = [box for _, _, box in layout]
    for a, b in itertools.combinations(boxes, 2):
        assert not a.meets(b, gap=0.0)
    for (x, y, text), (shift, offset, box) in zip(points, layout, strict=True):
        px, py = to_pixels(x, y, FRAME)
        assert box == text_box(px + shift, py + offset, text) and offset != 0  # off its point, with a leader


def test_a_label_avoids_a_fixed_label_and_stays_inside_the_plot():
    floor = vertical_label_box(10 ** 9.8, FRAME, "10% of B: charging floor")
    [(_, _, near_line)] = place_labels([(10 ** 9.8, 1e-3, "a label right on the charging floor's line")], FRAME,
                                       obstacles=[floor])
    assert not near_line.meets(floor, gap=0.0)
    [(shift, _, edge)] = place_labels([(10 ** 6.5, 1e-4, "a long label on the plot's left edge")], FRAME)
    assert shift > 0 and edge.left >= -1e-9
    [(shift, _, edge)] = place_labels([(10 ** 12.0, 1e-4, "a long label on the plot's right edge")], FRAME)
    assert shift < 0 and edge.right <= NOMINAL_WIDTH + 1e-9


def test_same_numbers_groups_only_equal_tuples():
    stats = [(32, 7.9e-4, 6.1e-4), (32, 3.6e-5, 2.7e-5), (32, 7.9e-4, 6.1e-4), (16, 7.9e-4, 6.1e-4),
             (32, 3.6e-5 * (1 + 1e-6), 2.7e-5)]
    assert same_numbers(stats) == [[0, 2], [1], [3], [4]]
