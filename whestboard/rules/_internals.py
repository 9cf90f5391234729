"""whestbench's and flopscope's private names, each behind one function: the only module that takes them.

They are what the grader itself computes with (its sampler's chunk size, its budget breakdown, flopscope's
erf), so Whestboard calls them rather than re-deriving them; a release that renames one breaks here, in
one place, and ``tests/rules`` says so. Each import is made when the function is first called, as the
callers did, so importing this module costs nothing (the sandbox worker imports it before it confines
itself).
"""

from __future__ import annotations

from typing import Any

import numpy as np


def sampling_chunk_size(width: int) -> int:
    """Samples per chunk of ``whestbench.simulation.sample_layer_statistics`` at this width."""
    from whestbench.simulation import _pick_chunk_size

    return int(_pick_chunk_size(width))


def sampling_budget_breakdown(summary: dict) -> Any:
    """A sampling run's FLOP breakdown, as ``whestbench.scoring`` reports it in a dataset's metadata."""
    from whestbench.scoring import _normalize_sampling_budget_breakdown

    return _normalize_sampling_budget_breakdown(summary)


def erf(x: np.ndarray) -> np.ndarray:
    """flopscope's own erf, so that numbers match ``flops.stats.norm.cdf`` bit for bit."""
    from flopscope.stats._erf import _erf

    return _erf(x)


def budget_payload(budget_ctx: Any) -> Any:
    """A predict's budget breakdown, as whestbench's own subprocess worker sends it to the grader."""
    from whestbench.subprocess_worker import _budget_payload

    return _budget_payload(budget_ctx)


def budget_module() -> Any:
    """``flopscope._budget``: the per-thread active budget and every BudgetContext, which the sandbox's
    meter watches so that participant code cannot open a budget of its own unseen."""
    import flopscope._budget as module

    return module
