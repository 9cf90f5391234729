"""A 10-point budget curve of Monte Carlo on v2-phase2's embedded MLPs: time to draw it cold and warm.

"Cold" is a fresh run store: every point is scored (``run_curve``: one metered run per budget, each MLP
through ``evaluate_estimator``) and the figure is built. "Warm" is the same curve again: every point is
served from the run records (what the page and the ``curve`` command do for a stored point) and the figure
is built; the median of ``--repeats`` passes. Both include building the figure's JSON, as the page sends it.
Printed: both times, their ratio, and the curve's points.

    nice -n 10 .venv/bin/python benchmarks/bench_curve.py [--budgets 0.0001B:0.01B:10] [--spec mc:1B] [--repeats 5]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
os.environ.setdefault("WHESTBOARD_STATE_DIR", tempfile.mkdtemp(prefix="bench-curve-"))

from plotly.utils import PlotlyJSONEncoder  # noqa: E402

from components.figures import convergence as figs  # noqa: E402
from whestboard.band import convergence_view  # noqa: E402
from whestboard.data import get_dataset  # noqa: E402
from whestboard.scoring import (  # noqa: E402
    curve_requests,
    fixed_cost,
    parse_budget_ladder,
    resolve_estimator,
    rulebook_for,
    run_curve,
    sampling_crossing,
)


def draw(view, requests, label: str) -> tuple[float, list[dict], int]:
    """One pass: the curve's points (scored or served), then the figure as the page would send it."""
    start = time.perf_counter()
    curve = run_curve(requests, label=label)
    points = curve.summaries()
    figure = figs.curve_figure(view, [{"label": label, "points": points, "crossing": sampling_crossing(points),
                                       "fixed_cost": fixed_cost(points)}])
    sent = len(json.dumps(figure.to_plotly_json(), cls=PlotlyJSONEncoder))
    assert sent > 0
    return time.perf_counter() - start, points, len(curve.scored_now)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dataset", default="v2-phase2")
    parser.add_argument("--spec", default="mc:1B")
    parser.add_argument("--budgets", default="0.0001B:0.01B:10")
    parser.add_argument("--mlps", default="")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()

    ds = get_dataset(args.dataset)
    tag = ds.info.round_tag
    ladder = parse_budget_ladder(args.budgets, rulebook_for(tag).round_budget)
    requests = curve_requests(ds, args.mlps, resolve_estimator(args.spec), tag, ladder)
    view = convergence_view(ds)
    print(f"{args.spec} on {ds.info.key} ({len(requests[0].indices)} MLPs, {ds.info.width} x {ds.info.depth}), "
          f"{len(ladder)} budgets {args.budgets}")
    cold, points, scored = draw(view, requests, args.spec)
    assert scored == len(ladder), "the cold pass must score every point (a fresh run store)"
    warm_times = []
    for _ in range(args.repeats):
        t, _, scored = draw(view, requests, args.spec)
        assert scored == 0, "a warm pass must be served from the run records"
        warm_times.append(t)
    warm = statistics.median(warm_times)
    print(f"{'B':>11} {'F (mean)':>11} {'final MSE':>11} {'MSE/Var':>10} {'score':>11}")
    for p in points:
        print(f"{p['budget']:>11.4g} {p['flops_used']['mean']:>11.4g} {p['final_layer_mse']['mean']:>11.4g} "
              f"{p['mse_over_variance']['mean']:>10.4g} {p['score']['mean']:>11.4g}")
    print(f"cold (score every point + figure): {cold:.2f} s")
    print(f"warm (served from the run records + figure, median of {args.repeats}): {warm * 1000:.1f} ms")
    print(f"cold / warm: {cold / warm:.0f}x")


if __name__ == "__main__":
    main()
