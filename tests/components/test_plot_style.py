"""The app's template is plotly's default once the app is built, and importing a figure module changes nothing.

Naming a template in a figure costs plotly a deep copy and a re-validation (~14 ms a figure); the
figure modules draw on whatever the default is (each figure test module checks its builders take a
foreign default), and ``create_app`` makes the app's template that default.
"""

from __future__ import annotations

import os
import subprocess
import sys

import plotly.io as pio

from components.figures.style import APP_TEMPLATE, use_app_template
from tests.conftest import REPO

FIGURE_MODULES = ("convergence", "explorer", "lab", "leaderboard", "upload")


def test_importing_the_figure_modules_leaves_plotlys_default_alone():
    code = ("import plotly.io as pio; before = pio.templates.default; "
            + "; ".join(f"import components.figures.{m}" for m in FIGURE_MODULES)
            + "; print(before, pio.templates.default)")
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    before, after = done.stdout.split()
    assert before == after != APP_TEMPLATE


def test_use_app_template_makes_the_apps_template_the_default():
    previous = pio.templates.default
    try:
        pio.templates.default = "plotly_dark"
        use_app_template()
        assert pio.templates.default == APP_TEMPLATE
    finally:
        pio.templates.default = previous


def test_create_app_installs_the_template(tmp_path):
    code = "import plotly.io as pio, app; app.the_app(); print(pio.templates.default)"
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "WHESTBOARD_STATE_DIR": str(tmp_path)})
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split()[-1] == APP_TEMPLATE
