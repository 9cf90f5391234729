"""Two budget curves compared budget by budget, each budget paired over the MLPs both points scored.

At each budget of the ladder, A's and B's runs (``scoring.run_curve`` points: ``score --budget B`` runs)
are aligned MLP by MLP and go through ``paired_stat``, the same test the compare page's verdict uses: the
mean of A_m - B_m with its bootstrap interval, wins and losses, the sign-flip p-value. A budget where either
side has no stored point is reported as missing, never guessed; an MLP that failed on either side is left
out of the pair (its MSE is the grader's fallback, not the estimator's error) and the row names it.

``curve_defaults`` decides what the page's two curves open on: A's and B's own estimators, on their dataset
and the MLPs both were scored on.
"""

from __future__ import annotations

import numpy as np

from whestboard.compare._paired import paired_stat
from whestboard.compare._sides import Side, shared_indices
from whestboard.data import served_datasets
from whestboard.rules import failure_kind, failures_sentence
from whestboard.scoring import selection_text

#: What can be compared per budget: the board's score, or raw final-layer MSE.
CURVE_METRICS = {"score": "adjusted_final_layer_score", "mse": "final_layer_mse"}
#: What the two curves open on when neither side names an estimator a curve can sweep: sampling and a baseline.
DEFAULT_CURVE_SPECS = ("mc:1B", "cov")
#: What stands in for a side whose code a curve cannot sweep here: Monte Carlo, the reference.
STAND_IN_SPEC = "mc:1B"


def paired_curves(reports_a: dict[int, dict], reports_b: dict[int, dict], *, metric: str = "score") -> list[dict]:
    """Budget -> paired statistic of A minus B over the MLPs both scored without failing, for every budget
    either side has; ``failed_a``/``failed_b`` name what was left out ("1 of 4 MLPs failed: FLOP budget")."""
    field = CURVE_METRICS[metric]
    rows = []
    for budget in sorted(set(reports_a) | set(reports_b)):
        a, b = reports_a.get(budget), reports_b.get(budget)
        if a is None or b is None:
            rows.append({"budget": budget, "missing": "A" if a is None else "B", "n": 0})
            continue
        entries_a = {int(e["mlp_index"]): e for e in a["results"]["per_mlp"]}
        entries_b = {int(e["mlp_index"]): e for e in b["results"]["per_mlp"]}
        both = sorted(set(entries_a) & set(entries_b))
        shared = [m for m in both if not failure_kind(entries_a[m]) and not failure_kind(entries_b[m])]
        stat = paired_stat(np.array([float(entries_a[m][field]) for m in shared]),
                           np.array([float(entries_b[m][field]) for m in shared]), metric=metric)
        rows.append({"budget": budget, "missing": None, "mlps": shared, "left_out": len(both) - len(shared),
                     "failed_a": failures_sentence([failure_kind(entries_a[m]) for m in both]),
                     "failed_b": failures_sentence([failure_kind(entries_b[m]) for m in both]),
                     **stat.as_dict()})
    return rows


def curve_defaults(a: Side | None, b: Side | None) -> dict:
    """What compare's two budget curves open on: ``{"dataset", "a", "b", "mlps", "note"}``.

    A's and B's own estimators (``Side.curve_spec``) on A's dataset (B's without A) and the MLPs both were
    scored on; a side whose code cannot be swept here (an upload, an imported submission) is stood in for by
    Monte Carlo and ``note`` says so; with neither side, sampling against covariance propagation and no
    dataset (the page picks one).
    """
    sides = [s for s in (a, b) if s is not None]
    if not sides:
        return {"dataset": None, "a": DEFAULT_CURVE_SPECS[0], "b": DEFAULT_CURVE_SPECS[1], "mlps": "", "note": None}
    dataset = next((s.dataset_key for s in sides if s.dataset_key in served_datasets()), None)
    mlps = shared_indices(a, b) if a is not None and b is not None else sorted(sides[0].entries)
    specs, unswept = [], []
    for name, side in (("A", a), ("B", b)):
        if side is not None and side.curve_spec:
            specs.append(side.curve_spec)
        elif side is not None:
            specs.append(STAND_IN_SPEC)
            unswept.append(f"{name} ({side.label})")
        else:  # only one side chosen: the other curve is sampling, or a baseline when that side is sampling
            specs.append(DEFAULT_CURVE_SPECS[1] if specs and specs[0] == STAND_IN_SPEC else STAND_IN_SPEC)
    note = (f"{' and '.join(unswept)} cannot be swept here: its code runs only where it was scored (an upload "
            f"or an imported submission), so Monte Carlo ({STAND_IN_SPEC}) stands in its place."
            if unswept else None)
    return {"dataset": dataset, "a": specs[0], "b": specs[1], "mlps": selection_text(mlps) if dataset else "",
            "note": note}
