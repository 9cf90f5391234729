"""Two budget curves compared budget by budget, each budget paired over the MLPs both points scored.

At each budget of the ladder, A's and B's runs (``scoring.run_curve`` points: ``score --budget B`` runs)
are aligned MLP by MLP and go through ``paired_stat``, the same test the compare page's verdict uses: the
mean of A_m - B_m with its bootstrap interval, wins and losses, the sign-flip p-value. A budget where either
side has no stored point is reported as missing, never guessed.
"""

from __future__ import annotations

import numpy as np

from whestboard.compare._paired import paired_stat

#: What can be compared per budget: the board's score, or raw final-layer MSE.
CURVE_METRICS = {"score": "adjusted_final_layer_score", "mse": "final_layer_mse"}


def paired_curves(reports_a: dict[int, dict], reports_b: dict[int, dict], *, metric: str = "score") -> list[dict]:
    """Budget -> paired statistic of A minus B over their shared MLPs, for every budget either side has."""
    field = CURVE_METRICS[metric]
    rows = []
    for budget in sorted(set(reports_a) | set(reports_b)):
        a, b = reports_a.get(budget), reports_b.get(budget)
        if a is None or b is None:
            rows.append({"budget": budget, "missing": "A" if a is None else "B", "n": 0})
            continue
        by_a = {int(e["mlp_index"]): float(e[field]) for e in a["results"]["per_mlp"]}
        by_b = {int(e["mlp_index"]): float(e[field]) for e in b["results"]["per_mlp"]}
        shared = sorted(set(by_a) & set(by_b))
        stat = paired_stat(np.array([by_a[m] for m in shared]), np.array([by_b[m] for m in shared]), metric=metric)
        rows.append({"budget": budget, "missing": None, "mlps": shared, **stat.as_dict()})
    return rows
