"""The board's flags: one vocabulary, one decision per flag, and the calibration they are measured against.

A flag is a claim an organizer acts on, so it fires only where the data carries its meaning, and it says
that meaning with its numbers. Each flag is decided once, by one function of ``_integrity``
(``residual_share``, ``meter_tampering``, ``public_private``), as a boolean column of the board;
``row_flags`` turns a board row's decided flags into ``Flag``s, and every view (the ranking's Flags
cell, the Integrity list, the team panel, the organizer's scatter count) draws those. Ties with the
next rank and failed MLPs are not flags: the ranking's "vs leader" and "Failed MLPs" columns and the
Integrity section's ties sentence say them.

**Residual arbitrage, calibrated on the shipped baselines.** In the priced v1 rounds (C = F + lambda R)
a share F / C near 0 alone means little: mean propagation spends 5e6 FLOPs, so a tenth of a second of
interpreter overhead makes its F / C about 0.001. What the real competition showed was different: top
entries did almost all their *work* in residual time (F / C around 5e-5, ``flops_used`` identical on
every MLP) and reached accuracies their metered FLOPs cannot buy. So the flag needs both:

* almost all of the charged compute is residual time: F / C < ``RESIDUAL_SHARE_LIMIT``, and
* the accuracy did not come from the metered FLOPs: the final-layer MSE is more than
  ``RESIDUAL_ACCURACY_FACTOR`` times below the best any shipped baseline of the round reaches with at
  most its F (at least the cheapest baseline's F: nothing cheaper than mean propagation is expected to
  beat it). ``honest_frontier`` reads that table from ``data/submissions/baselines.csv``, the sweep's
  real estimators graded under the round's rules; a shipped baseline sits on that frontier, never
  ten times below it, so no shipped baseline is flagged (``tests/leaderboard/test_flags.py`` checks
  every one).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from whestboard.data import REPO_ROOT

#: Almost all of the charged compute is residual time: instrumented share F / C below this
#: (the real Phase 1 pattern: 5e-5; an honest estimator's overhead keeps it near 1 once it computes).
RESIDUAL_SHARE_LIMIT = 0.1
#: ... and the accuracy is this many times better than any shipped baseline buys with its metered FLOPs.
RESIDUAL_ACCURACY_FACTOR = 10.0
#: The sweep's real estimators graded on the embedded data: what the residual flag is calibrated on.
SHIPPED_BASELINES = REPO_ROOT / "data" / "submissions" / "baselines.csv"

#: The flags, in the order a row lists them, with the words every view uses for each.
FLAG_LABELS = {
    "meter": "meter tampering",
    "residual": "residual arbitrage",
    "overfit": "overfitting signature",
}


@dataclass(frozen=True)
class Flag:
    """One flag of one ranked submission: its kind (a key of FLAG_LABELS) and what it means, in numbers (a
    phrase that starts with the kind's label)."""

    kind: str
    text: str

    @property
    def label(self) -> str:
        return FLAG_LABELS[self.kind]

    def __str__(self) -> str:
        return f"⚠ {self.text}"


def _raised(value) -> bool:
    return value is True or (isinstance(value, int | float | np.bool_) and bool(value) and value == value)


def row_flags(row: Mapping) -> tuple[Flag, ...]:
    """The flags a board row carries (decided by ``_integrity``; organizer columns are absent from a public
    board, so a public row never carries the overfitting flag)."""
    flags = []
    if _raised(row.get("meter")):
        flags.append(Flag("meter", str(row.get("meter_text") or FLAG_LABELS["meter"])))  # "meter tampering on ..."
    if _raised(row.get("residual")):
        flags.append(Flag("residual", f"{FLAG_LABELS['residual']}: {row.get('residual_text') or ''}"))
    if _raised(row.get("overfit")) or _raised(row.get("flops_differ")):
        flags.append(Flag("overfit", f"{FLAG_LABELS['overfit']}: {row.get('overfit_text') or ''}"))
    return tuple(flags)


def flags_text(row: Mapping) -> str:
    """Every flag of a board row in words, ``·``-separated; "" when it carries none."""
    return " · ".join(map(str, row_flags(row)))


def count_flagged(rows: Iterable[Mapping], kinds: Iterable[str] = tuple(FLAG_LABELS)) -> int:
    """How many rows carry at least one flag of ``kinds``."""
    wanted = set(kinds)
    return sum(1 for row in rows if any(flag.kind in wanted for flag in row_flags(row)))


# ---------------------------------------------------------------------------
# the calibration: what the shipped baselines reach with a given number of metered FLOPs
# ---------------------------------------------------------------------------


@functools.cache
def _shipped(path: Path, _mtime: float) -> pd.DataFrame:
    try:
        table = pd.read_csv(path)
    except (OSError, ValueError):
        return pd.DataFrame(columns=["round", "team", "mean_flops_used", "final_layer_mse"])
    honest = table[(table["status"] == "graded") & (table["n_failed_mlps"].fillna(0) == 0)
                   & (table["mean_flops_used"] > 0) & np.isfinite(table["final_layer_mse"])]
    return honest[["round", "team", "submission_id", "mean_flops_used", "final_layer_mse"]].reset_index(drop=True)


def shipped_baselines(path: Path = SHIPPED_BASELINES) -> pd.DataFrame:
    """The shipped baselines that finished every MLP: round, team, submission id, F, final-layer MSE."""
    try:
        mtime = path.stat().st_mtime
    except OSError:
        mtime = -1.0
    return _shipped(path, mtime)


def honest_frontier(round_tag: str, flops: float, *, path: Path = SHIPPED_BASELINES) -> tuple[float, str] | None:
    """The lowest final-layer MSE a shipped baseline of ``round_tag`` reaches with at most ``flops`` metered
    FLOPs (at least the cheapest baseline's), with the baseline's name; None when the round has none."""
    table = shipped_baselines(path)
    table = table[table["round"] == round_tag]
    if table.empty or not math.isfinite(flops):
        return None
    within = table[table["mean_flops_used"] <= max(float(flops), float(table["mean_flops_used"].min()))]
    best = within.loc[within["final_layer_mse"].idxmin()]
    return float(best["final_layer_mse"]), str(best["team"])
