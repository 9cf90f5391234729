"""The app's template is plotly's default once the app is built, and importing a figure module changes nothing.

Naming a template in a figure costs plotly a deep copy and a re-validation (~14 ms a figure); the
figure modules draw on whatever the default is (each figure test module checks its builders take a
foreign default), and ``create_app`` makes the app's template that default.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import plotly.io as pio
import pytest

from components.figures.style import APP_TEMPLATE, use_app_template
from tests.conftest import REPO

FIGURE_MODULES = ("convergence", "explorer", "lab", "leaderboard", "upload")


@pytest.fixture(scope="module")
def fresh_interpreter_defaults(tmp_path_factory) -> dict[str, str]:
    """plotly's default template in one fresh interpreter: at start, after importing every figure module,
    and after building the app. One interpreter answers both tests below (its imports cost two seconds)."""
    code = ("import json, plotly.io as pio; seen = {'start': pio.templates.default}; "
            + "; ".join(f"import components.figures.{m}" for m in FIGURE_MODULES)
            + "; seen['figures imported'] = pio.templates.default; "
            + "import app; app.the_app(); seen['app built'] = pio.templates.default; print(json.dumps(seen))")
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "WHESTBOARD_STATE_DIR": str(tmp_path_factory.mktemp("state"))})
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.splitlines()[-1])


def test_importing_the_figure_modules_leaves_plotlys_default_alone(fresh_interpreter_defaults):
    assert fresh_interpreter_defaults["start"] == fresh_interpreter_defaults["figures imported"] != APP_TEMPLATE


def test_use_app_template_makes_the_apps_template_the_default():
    previous = pio.templates.default
    try:
        pio.templates.default = "plotly_dark"
        use_app_template()
        assert pio.templates.default == APP_TEMPLATE
    finally:
        pio.templates.default = previous


def test_create_app_installs_the_template(fresh_interpreter_defaults):
    assert fresh_interpreter_defaults["app built"] == APP_TEMPLATE
