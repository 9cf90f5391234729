"""Numbers as JSON and a table can hold them: NaN and infinities become None, numpy scalars plain Python.

Reports hold inf/NaN (the grader's values for an empty suite), and numpy scalars reach every dict the
core builds; JSON has neither, so whatever is stored, served or printed goes through these.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np


def finite(value: Any) -> float | None:
    """``value`` as a float when it is a finite number, else None (text, None, NaN, infinities)."""
    try:
        out = float(value)
    except (TypeError, ValueError):
        return None
    return out if math.isfinite(out) else None


def json_safe(value: Any) -> Any:
    """``value`` with every non-finite float (nested in dicts, lists, tuples) as None and numpy scalars as
    Python numbers; tuples become lists, as JSON would make them."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_safe(v) for v in value]
    if isinstance(value, np.generic):
        return json_safe(value.item())
    return value


class DuplicateKey(ValueError):
    """A JSON object naming one key twice: which value was meant is unknowable, so it is refused."""


def _unique_pairs(pairs: list[tuple[str, Any]]) -> dict:
    out: dict = {}
    for key, value in pairs:
        if key in out:
            raise DuplicateKey(f"duplicate key {key!r}: a JSON object names it twice; send each key once")
        out[key] = value
    return out


def strict_json(text: str | bytes, **kwargs: Any) -> Any:
    """``json.loads`` that refuses an object with a repeated key (:class:`DuplicateKey`, naming it)
    instead of keeping the last one silently: a hidden second ``results`` block is never stored."""
    import json

    return json.loads(text, object_pairs_hook=_unique_pairs, **kwargs)


def sci(x: float | None, digits: int = 3) -> str:
    """Compact scientific notation, as every page writes numbers; '—' for a missing one."""
    value = finite(x)
    if value is None:
        return "—"
    if value == 0:
        return "0"
    return f"{value:.{digits}g}" if 1e-3 <= abs(value) < 1e5 else f"{value:.{digits - 1}e}"
