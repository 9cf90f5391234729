"""Number formatting shared by every page, so a FLOP count reads the same everywhere."""

from __future__ import annotations

from decimal import ROUND_HALF_UP, Decimal

# sci: the core's one number format, so pages and the view write numbers alike
from whestboard.store import finite, sci

__all__ = ["exponent", "integer", "sci", "significant"]


def integer(x: float | None) -> str:
    return "—" if x is None else f"{int(x):,}"


def significant(x: float | None, digits: int = 3) -> str:
    """``x`` to ``digits`` significant digits, trailing zeros dropped: d3's ``.3~g`` (JavaScript's
    ``toPrecision``), what the tables' numeric columns showed in the browser (``1.23e+5``, ``0.00123``,
    ``1e-7``); '—' for a missing number."""
    value = finite(x)
    if value is None:
        return "—"
    mantissa, exp = _rounded(value, digits)
    if exp < -6 or exp >= digits:  # where toPrecision switches to an exponent
        return f"{_trimmed(format(mantissa, 'f'))}e{'+' if exp >= 0 else '-'}{abs(exp)}"
    fixed = Decimal(value).quantize(Decimal(1).scaleb(-(digits - 1 - exp)), rounding=ROUND_HALF_UP)
    return _trimmed(format(fixed, "f"))


def exponent(x: float | None, digits: int = 3) -> str:
    """``x`` with ``digits`` decimals in exponent form, trailing zeros dropped: d3's ``.3~e`` (JavaScript's
    ``toExponential``: ``1.235e-5``, ``1e+9``); '—' for a missing number."""
    value = finite(x)
    if value is None:
        return "—"
    mantissa, exp = _rounded(value, digits + 1)
    return f"{_trimmed(format(mantissa, 'f'))}e{'+' if exp >= 0 else '-'}{abs(exp)}"


def _rounded(value: float, digits: int) -> tuple[Decimal, int]:
    """The mantissa of ``value`` to ``digits`` significant digits and its power of ten, a tie rounded away
    from zero on the float's exact value, as JavaScript rounds (Python's own formats round it to even)."""
    if value == 0:
        return Decimal(0).quantize(Decimal(1).scaleb(-(digits - 1))), 0
    exact = Decimal(value)
    exp = exact.adjusted()
    step = Decimal(1).scaleb(-(digits - 1))
    mantissa = exact.scaleb(-exp).quantize(step, rounding=ROUND_HALF_UP)
    if abs(mantissa) >= 10:  # 9.996 to three digits is 10.0: one more power of ten
        exp += 1
        mantissa = exact.scaleb(-exp).quantize(step, rounding=ROUND_HALF_UP)
    return mantissa, exp


def _trimmed(number: str) -> str:
    return number.rstrip("0").rstrip(".") if "." in number else number
