"""Draw docs/img/paper-figure-*.png: the paper's figure as /convergence draws it, from data/paper/.

The measured view (``python -m whestboard paper`` wrote it) drawn by the page's own builder
(``components.figures.paper.paper_figure``), one image per shape asked for, dated and tied to the commit
in its title, and photographed by headless Chromium (no image exporter is installed).

    .venv/bin/python scripts/paper_figure.py [--shapes 256x16,64x16,v2-phase2] [--date 2026-12-06]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from components.figures.paper import paper_figure  # noqa: E402
from components.figures.style import use_app_template  # noqa: E402
from whestboard.band import paper_view  # noqa: E402

CHROMIUM = os.environ.get("WHESTBOARD_CHROMIUM", "/usr/bin/chromium")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--shapes", default="256x16,64x16,v2-phase2")
    parser.add_argument("--date", default="2026-12-06")
    parser.add_argument("--out", default=str(REPO / "docs" / "img"))
    args = parser.parse_args()
    use_app_template()
    view = paper_view()
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True,
                            text=True).stdout.strip()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=["--headless", "--no-sandbox", "--disable-gpu"])
        page = browser.new_page(viewport={"width": 1200, "height": 600})
        for key in args.shapes.split(","):
            shape = view.shape(key)
            if shape is None or shape.key != key:
                raise SystemExit(f"{key}: not measured in data/paper (run python -m whestboard paper)")
            fig = paper_figure(shape)
            fig.update_layout(width=1200, height=600, title=dict(
                text=f"{fig.layout.title.text}<br><sup>{args.date}, commit {commit}</sup>"))
            html_path = Path(tempfile.mkdtemp()) / "figure.html"
            fig.write_html(html_path, include_plotlyjs=True, full_html=True, config={"displayModeBar": False})
            page.goto(html_path.as_uri())
            page.wait_for_selector(".js-plotly-plot .main-svg")
            target = Path(args.out) / f"paper-figure-{key}.png"
            page.screenshot(path=str(target), full_page=False)
            print("wrote", target)
        browser.close()


if __name__ == "__main__":
    main()
