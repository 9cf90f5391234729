"""Numbers made JSON-safe: what the run store, the comparison and the pages all serve."""

from __future__ import annotations

import json
import math

import numpy as np

from whestboard.store._values import finite, json_safe


def test_non_finite_numbers_become_none_at_any_depth_and_numpy_scalars_python_numbers():
    value = {"a": float("nan"), "b": [1.5, float("inf"), (np.float32(2.5), np.int64(3))],
             "c": {"d": np.float64(-np.inf), "e": np.bool_(True), "f": "text", "g": None}}
    safe = json_safe(value)
    assert safe == {"a": None, "b": [1.5, None, [2.5, 3]], "c": {"d": None, "e": True, "f": "text", "g": None}}
    assert type(safe["b"][2][1]) is int and type(safe["c"]["e"]) is bool
    assert json.loads(json.dumps(safe, allow_nan=False)) == safe


def test_finite_is_a_float_or_none():
    assert finite("2.5") == 2.5 and finite(np.int32(4)) == 4.0 and isinstance(finite(np.int32(4)), float)
    assert [finite(v) for v in (None, "x", math.nan, -math.inf, [1.0])] == [None] * 5
