"""Every figure is drawn in the app's template without naming it (naming it costs ~14 ms a figure)."""

from __future__ import annotations

import importlib
from pathlib import Path

import plotly.graph_objects as go
import pytest

FIGURE_MODULES = ["convergence_figures", "lab_figures", "leaderboard_figures", "upload_figures"]


@pytest.mark.parametrize("name", FIGURE_MODULES)
def test_figure_modules_draw_on_the_app_template(name):
    importlib.import_module(f"components.{name}")
    layout = go.Figure(go.Scatter(x=[1, 2], y=[3, 4])).to_plotly_json()["layout"]
    assert layout["template"]["layout"]["plot_bgcolor"] == "white"
    source = (Path(__file__).resolve().parent.parent / "components" / f"{name}.py").read_text()
    assert "plotly_white" not in source, f"{name} names the template: every figure would re-validate it"
