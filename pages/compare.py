"""Compare two estimators on the MLPs both were scored on: a paired, noise-aware verdict and the error anatomy.

``/compare?a=<id>&b=<id>``; the lists offer lab runs, this tab's uploads, baselines and imported submissions
with per-MLP results, B's list only what shares MLPs with A. Every number comes from
``whestboard.compare`` (the same dict ``python -m whestboard compare --json`` prints).
"""

from __future__ import annotations

import dash
import dash_bootstrap_components as dbc
from dash import Input, Output, State, callback, dcc, html, no_update

from components import compare_panels as panels
from components.figures import compare as figs
from components.shell import SESSION_UPLOADS_ID
from components.url_state import address_store, keep_address_in_step, query_string
from whestboard.cache import memoize
from whestboard.compare import (
    CompareError,
    anatomy_inputs,
    anatomy_of,
    cached_side,
    candidates,
    dataset_of,
    heatmap_of,
    stores_revision,
    verdict,
)

dash.register_page(__name__, path="/compare", name="Compare", order=6, title="Compare · Whestboard")

HIDDEN, SHOWN = {"display": "none"}, {"display": "block"}
#: No id is longer (a submission id is at most 200 characters, plus its prefix).
MAX_ID_CHARS = 600
INTRO = ("Pick two things scored on common MLPs. Each MLP is compared with itself (paired): MLPs differ from each "
         "other far more than two estimators differ on one MLP, so pairing resolves differences no unpaired "
         "comparison can, even below the reference's noise floor, where the reference's own noise cancels.")


def _option(side_id: str) -> list[dict]:
    """An option for an id from the address that the lists do not hold (older than the newest listed, or
    unknown: then it stays, labelled so, and the verdict says what is wrong with it)."""
    try:
        return [{"label": cached_side(side_id).label, "value": side_id}]
    except CompareError:
        return [{"label": f"{side_id} (not found)", "value": side_id}]


def _a_choices(uploads, current: str | None) -> list[dict]:
    listed = [{"label": c["label"], "value": c["id"]} for c in candidates()]
    options = panels.merged_options(panels.upload_options(uploads), listed)
    if current and current not in {o["value"] for o in options}:
        options = _option(current) + options
    return options


def _b_choices(a: str | None, uploads, current: str | None) -> list[dict]:
    """What shares MLPs with A (this tab's uploads first); a B from the address is kept even if it shares none,
    so the verdict can say why it cannot be paired."""
    if not a:
        return []
    try:
        first = cached_side(a)
    except CompareError:
        return _option(current) if current else []  # the verdict says what is wrong with A
    listed = [{"label": c["label"], "value": c["id"]} for c in candidates(first)]
    shared = {o["value"] for o in listed}
    uploads_sharing = [o for o in panels.upload_options(uploads) if o["value"] in shared]
    options = panels.merged_options(uploads_sharing, listed)
    if current and current != a and current not in shared:
        options = _option(current) + options
    return options


def _one_id(value) -> str | None:
    """An id from the address: a repeated parameter (``?a=x&a=y``) keeps its last value; capped in length."""
    if isinstance(value, (list, tuple)):
        value = value[-1] if value else None
    return str(value)[:MAX_ID_CHARS] if value else None


def layout(a: str | None = None, b: str | None = None, **_query) -> html.Div:
    """The dropdowns start with their options: a value from the address outside its options would be dropped."""
    a, b = _one_id(a), _one_id(b)
    return html.Div([
        html.H2("Compare"),
        html.P(INTRO, className="text-muted"),
        address_store("compare-address"),
        dbc.Row([
            dbc.Col([dbc.Label("A", html_for="compare-a", className="small fw-semibold"),
                     dcc.Dropdown(id="compare-a", value=a, options=_a_choices(None, a), placeholder="a run, upload, baseline or submission")], md=6),
            dbc.Col([dbc.Label("B (shares MLPs with A)", html_for="compare-b", className="small fw-semibold"),
                     dcc.Dropdown(id="compare-b", value=b, options=_b_choices(a, None, b), placeholder="pick A first")], md=6),
        ], className="g-3 mb-3"),
        dcc.Loading(html.Div(id="compare-verdict"), type="default", delay_show=300),
        html.Div([
            dbc.Button("Error anatomy", id="compare-anatomy-open", color="secondary", outline=True, size="sm",
                       className="my-2"),
            dcc.Loading(html.Div(id="compare-anatomy"), type="default", delay_show=300),
            html.Div([
                dbc.Row([dbc.Col(dbc.Label("MLP", html_for="compare-heatmap-mlp", className="small fw-semibold"),
                                 width="auto"),
                         dbc.Col(dcc.Dropdown(id="compare-heatmap-mlp", clearable=False, style={"minWidth": "10rem"}),
                                 width="auto")], className="g-2 align-items-center"),
                dcc.Graph(id="compare-heatmap"),
            ], id="compare-heatmap-wrap", style=HIDDEN),
        ], id="compare-anatomy-wrap", style=HIDDEN),
    ])


@callback(Output("compare-a", "options"), Input(SESSION_UPLOADS_ID, "data"), State("compare-a", "value"))
def _a_options(uploads, current):
    return _a_choices(uploads, current)


@callback(Output("compare-b", "options"), Input("compare-a", "value"), Input(SESSION_UPLOADS_ID, "data"),
          State("compare-b", "value"))
def _b_options(a, uploads, current):
    return _b_choices(a, uploads, current)


@memoize("compare-verdict", timeout=24 * 3600)
def _verdict(a: str, b: str, revision: str) -> dict:
    return verdict(cached_side(a), cached_side(b))


@memoize("compare-anatomy", timeout=24 * 3600)
def _anatomy(a: str, b: str, revision: str) -> dict:
    side_a, side_b = cached_side(a), cached_side(b)
    return anatomy_of(anatomy_inputs(side_a, side_b, dataset_of(side_a)))


def _error(exc: Exception) -> dbc.Alert:
    return dbc.Alert(str(exc), color="warning", className="py-2", id="compare-error")


@callback(
    Output("compare-verdict", "children"),
    Output("compare-anatomy-wrap", "style"),
    Output("compare-anatomy", "children"),
    Output("compare-heatmap-wrap", "style"),
    Input("compare-a", "value"),
    Input("compare-b", "value"),
)
def _show(a, b):
    if not a or not b:
        hint = html.P("Pick A and B above." if not a else "Pick B: the list holds what shares MLPs with A.",
                      className="text-muted", id="compare-hint")
        return hint, HIDDEN, None, HIDDEN
    try:
        result = _verdict(a, b, stores_revision())
    except CompareError as exc:
        return _error(exc), HIDDEN, None, HIDDEN
    body = html.Div([
        panels.verdict_panel(result),
        dbc.Row([dbc.Col(dcc.Graph(id="compare-scatter", figure=figs.pair_scatter(result, "score")), md=6),
                 dbc.Col(dcc.Graph(id="compare-scatter-mse", figure=figs.pair_scatter(result, "mse")), md=6)]),
        dbc.Row([dbc.Col(dcc.Graph(id="compare-intervals", figure=figs.interval_figure(result)), md=6),
                 dbc.Col(dcc.Graph(id="compare-noise-split", figure=figs.noise_figure(result)), md=6)]),
    ])
    return body, SHOWN, None, HIDDEN


@callback(
    Output("compare-anatomy", "children", allow_duplicate=True),
    Output("compare-heatmap-mlp", "options"),
    Output("compare-heatmap-mlp", "value"),
    Output("compare-heatmap-wrap", "style", allow_duplicate=True),
    Input("compare-anatomy-open", "n_clicks"),
    State("compare-a", "value"),
    State("compare-b", "value"),
    prevent_initial_call=True,
)
def _open_anatomy(_n, a, b):
    if not a or not b:
        return no_update, no_update, no_update, no_update
    try:
        result = _anatomy(a, b, stores_revision())
    except CompareError as exc:
        return _error(exc), [], None, HIDDEN
    indices = result["mlp_index"]
    body = html.Div([
        html.P(f"Over the {len(indices)} shared MLP(s) with stored predictions"
               + ("; A - B parts need B's predictions too, and B stored none." if not result["has_b"] else "."),
               className="text-muted small"),
        dbc.Row([dbc.Col(dcc.Graph(id="compare-per-layer", figure=figs.per_layer_figure(result)), md=6),
                 dbc.Col(dcc.Graph(id="compare-by-truth", figure=figs.truth_bins_figure(result)), md=6)]),
        dcc.Graph(id="compare-shares", figure=figs.shares_figure(result)),
        html.H6("Worst neurons" + (" (where A loses most to B)" if result["has_b"] else ""), className="mt-2"),
        panels.worst_table(result["worst"], result["has_b"]),
    ], id="compare-anatomy-panel")
    options = [{"label": f"MLP {i}", "value": i} for i in indices]
    return body, options, indices[0], SHOWN


@callback(Output("compare-heatmap", "figure"), Input("compare-heatmap-mlp", "value"), State("compare-a", "value"),
          State("compare-b", "value"), prevent_initial_call=True)
def _heatmap(mlp, a, b):
    if mlp is None or not a or not b:
        return no_update
    try:
        side_a, side_b = cached_side(a), cached_side(b)
        inputs = anatomy_inputs(side_a, side_b, dataset_of(side_a), only=[int(mlp)])
        return figs.heatmap_figure(heatmap_of(inputs, int(mlp)))
    except CompareError:
        return no_update


@callback(Output("compare-address", "data"), Input("compare-a", "value"), Input("compare-b", "value"),
          prevent_initial_call=True)
def _address(a, b):
    """The address follows A and B in place (``components.url_state``)."""
    return query_string({"a": a, "b": b})


keep_address_in_step("compare-address")
