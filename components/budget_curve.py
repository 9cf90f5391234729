"""The budget-curve panel: the one component the lab, the convergence page and compare draw curves with.

Data in (``scoring.curve_data`` dicts, built by ``scoring.stored_curve`` or ``scoring.Curve.data``), Dash
components out: a note for the points not scored yet, the figure (``figures.convergence.curve_figure``: failed
points drawn as failed, a crossing only from points that carry it), optionally something beside it (compare's
paired difference), then what may be said of each curve and every point's numbers. Ids are ``<prefix>-graph``,
``-missing``, ``-notes``, ``-points`` and ``-panel``, so a page holds one panel per prefix.
"""

from __future__ import annotations

from typing import Any

import dash_bootstrap_components as dbc
from dash import dcc, html

from components.figures import convergence as figs
from whestboard.band import ConvergenceView

GRAPH_CONFIG = {"displaylogo": False, "toImageButtonOptions": {"format": "png", "filename": "budget-curve"}}


def budget_curve_panel(view: ConvergenceView, curves: list[dict], *, prefix: str, x_axis: str = "flops",
                       y_axis: str = "mse", missing: int = 0, to_score: str = "press Sweep the budget",
                       beside: Any = None) -> html.Div:
    """The curves of ``curves`` over ``view``'s band, with their notes and table; ``missing`` points of the
    chosen ladder not stored yet are named with what to do (``to_score``)."""
    graph = dcc.Graph(id=f"{prefix}-graph", figure=figs.curve_figure(view, curves, x_axis=x_axis, y_axis=y_axis),
                      config=GRAPH_CONFIG, style={"height": "560px"})
    note = (html.P(f"{missing} point(s) not scored yet: {to_score} to score them (stored points are kept; an "
                   "interrupted sweep resumes where it stopped).", className="small text-muted", id=f"{prefix}-missing")
            if missing else None)
    body = dbc.Row([dbc.Col(graph, md=7), dbc.Col(beside, md=5)]) if beside is not None else graph
    return html.Div([note, body, figs.curve_table(curves, prefix=prefix)], id=f"{prefix}-panel")
