"""The app's plot style: one small template, installed as plotly's default by ``create_app``.

Naming a template in a figure's layout makes plotly deep-copy and re-validate the
whole template for that figure (about 14 ms for ``plotly_white``, most of the build
time of a small figure), and ships it inside every figure's JSON (about 6 KB). So the
figure builders never name one: they draw on plotly's default, which ``create_app``
makes this template: white plot, light grid, the app's font and colours, a few hundred
bytes per figure.
"""

from __future__ import annotations

import plotly.graph_objects as go
import plotly.io as pio

APP_TEMPLATE = "whestboard"
GRID = "rgba(0,0,0,0.07)"
#: What failed is drawn in this colour in every figure (a run, a baseline, a curve point, a submission).
FAILED_COLOR = "rgb(214, 96, 28)"
COLORWAY = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22",
            "#17becf"]


def app_template() -> go.layout.Template:
    """White background, light grid lines, no zero-line emphasis: numbers, not decoration."""
    axis = dict(gridcolor=GRID, zerolinecolor=GRID, linecolor="rgba(0,0,0,0.25)", ticks="outside",
                tickcolor="rgba(0,0,0,0.25)", automargin=True)
    return go.layout.Template(layout=dict(
        paper_bgcolor="white", plot_bgcolor="white", colorway=COLORWAY,
        font=dict(family="system-ui, -apple-system, 'Segoe UI', Roboto, sans-serif", size=12, color="#222"),
        xaxis=axis, yaxis=axis, hoverlabel=dict(font_size=12), legend=dict(bgcolor="rgba(255,255,255,0.6)"),
    ))


def use_app_template() -> None:
    """Register the app's template and make it plotly's default (idempotent)."""
    if APP_TEMPLATE not in pio.templates:
        pio.templates[APP_TEMPLATE] = app_template()
    pio.templates.default = APP_TEMPLATE
