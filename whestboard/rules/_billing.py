"""What the installed flopscope bills, where it differs from what a round's grader charged.

flopscope keeps its dtype rates in one process-wide table loaded at import (``flopscope._weights``), not
on a ``BudgetContext``, so every run in a process is metered under it whatever round is being re-scored.
This module is the one place that reads flopscope's internals for that.
"""

from __future__ import annotations

from whestbench.budget import mc_flops_per_sample
from whestbench.scoring import _aggregate_budget_breakdowns


def metered_dtype_aware_billing() -> bool:
    """Whether the installed flopscope bills float64 above float32 (true from 0.9 on).

    flopscope 0.12 keeps its dtype rates in one process-wide table loaded at
    import (``flopscope._weights``), not on a ``BudgetContext``, so every run in
    this process is metered under it whatever round is being re-scored.
    """
    from flopscope._weights import get_dtype_rate

    return get_dtype_rate("float64") > get_dtype_rate("float32")


def metered_mc_flops_per_sample(width: int, depth: int) -> int:
    """FLOPs the installed flopscope charges per Monte Carlo sample (whestbench's formula)."""
    return mc_flops_per_sample(width, depth, dtype_aware_billing=metered_dtype_aware_billing())


def aggregate_budget_breakdowns(breakdowns: list) -> dict:
    """FLOPs by operation summed over MLPs, as the grader sums them (whestbench's own helper)."""
    return _aggregate_budget_breakdowns(breakdowns)
