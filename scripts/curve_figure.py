"""Draw docs/img/budget-curves*.png: budget curves on v1-warmup's embedded MLPs, as /convergence draws them.

Three estimators at one ladder of budgets (Monte Carlo with half of each budget, covariance and mean
propagation), scored in a private run store, drawn by the page's own builder (``curve_figure``) in raw MSE
and in MSE / avg_variance, and photographed by headless Chromium (no image exporter is installed).

    nice -n 10 .venv/bin/python scripts/curve_figure.py [--mlps 0:8] [--budgets 0.001B:1B:7]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from datetime import date
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
os.environ.setdefault("WHESTBOARD_STATE_DIR", tempfile.mkdtemp(prefix="curve-figure-"))

from components.figures import convergence as figs  # noqa: E402
from components.figures.style import use_app_template  # noqa: E402
from whestboard.band import convergence_view  # noqa: E402
from whestboard.data import get_dataset  # noqa: E402
from whestboard.scoring import (  # noqa: E402
    curve_data,
    curve_requests,
    parse_budget_ladder,
    resolve_estimator,
    rulebook_for,
    run_curve,
)

CHROMIUM = os.environ.get("WHESTBOARD_CHROMIUM", "/usr/bin/chromium")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dataset", default="v1-warmup")
    parser.add_argument("--mlps", default="0:8")
    parser.add_argument("--budgets", default="0.001B:1B:7")
    parser.add_argument("--specs", default="mc:0.5B,cov,mean")
    parser.add_argument("--out", default=str(REPO / "docs" / "img"))
    args = parser.parse_args()
    use_app_template()
    ds = get_dataset(args.dataset)
    tag = ds.info.round_tag
    ladder = parse_budget_ladder(args.budgets, rulebook_for(tag).round_budget)
    curves = []
    for spec in args.specs.split(","):
        points = run_curve(curve_requests(ds, args.mlps, resolve_estimator(spec), tag, ladder)).summaries()
        curves.append(curve_data(spec, points))
        print(spec, [f"{p['final_layer_mse']['mean']:.3g}@{p['flops_used']['mean']:.3g}" for p in points])
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True,
                            text=True).stdout.strip()
    view = convergence_view(ds)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=["--headless", "--no-sandbox", "--disable-gpu"])
        page = browser.new_page(viewport={"width": 1100, "height": 640})
        for y_axis, name in (("mse", "budget-curves.png"), ("var", "budget-curves-mse-over-var.png")):
            fig = figs.curve_figure(view, curves, y_axis=y_axis)
            fig.update_layout(width=1100, height=640, title=dict(
                text=f"{fig.layout.title.text} · MLPs {args.mlps} · {date.today().isoformat()}, commit {commit}"))
            html_path = Path(tempfile.mkdtemp()) / "figure.html"
            fig.write_html(html_path, include_plotlyjs=True, full_html=True, config={"displayModeBar": False})
            page.goto(html_path.as_uri())
            page.wait_for_selector(".js-plotly-plot .main-svg")
            page.screenshot(path=str(Path(args.out) / name), full_page=False)
            print("wrote", Path(args.out) / name)
        browser.close()


if __name__ == "__main__":
    main()
