"""Monte Carlo convergence: sampling error against FLOPs per MLP, and where every estimator sits on it.

One round (and dataset) at a time, chosen in the URL like every page
(``?round=TAG&dataset=KEY``), plus ``view=all`` for the all-layer view and
``highlight=team:NAME`` / ``highlight=estimator:LABEL``. Changing the view or
the highlight rewrites the address in place (no page reload), so any picture
can be shared. Missing white-box baselines are computed in a background job.
"""

from __future__ import annotations

import json

import dash
import dash_bootstrap_components as dbc
from dash import Input, Output, State, callback, clientside_callback, dcc, html, no_update

from components.figures import convergence as figs
from components.selectors import not_found_panel, resolve_selection, selector_row
from components.url_state import address_store, keep_address_in_step, query_string
from server.background import priced
from whestboard.band import (
    BASELINE_LABELS,
    baselines_cost,
    cached_convergence_view,
    compute_baselines,
    missing_baselines,
)
from whestboard.cache import memoize
from whestboard.data import get_dataset

dash.register_page(__name__, path="/convergence", name="Convergence", order=2, title="Convergence · Whestboard")

HIDDEN, SHOWN = {"display": "none"}, {"display": "block"}
GRAPH_CONFIG = {"displaylogo": False, "toImageButtonOptions": {"format": "png", "filename": "convergence"}}
METHOD = (
    "Each MLP gets one Monte Carlo run on its own sampling stream, independent of the reference's "
    "(SeedSequence(mlp_seed).spawn(4)[3]); the running means are recorded at N = 2^k, at 10% of B, at B and up to "
    "a few times B. FLOPs are whestbench's mc_flops_per_sample for the round times N. The band is noise-corrected: "
    "the reference's own error (σ²/N_ref) is subtracted, so the band estimates the error against the exact means, "
    "while runs and baselines are shown as measured against the reference (their floor is the grey region)."
)


def _view_controls(metric: str, highlight: str | None, options: list[dict]) -> dbc.Row:
    if highlight and highlight not in {o["value"] for o in options}:
        options = [*options, {"label": f"{highlight} (no run)", "value": highlight}]
    return dbc.Row([
        dbc.Col(html.Label("View", htmlFor="convergence-metric", className="col-form-label-sm fw-semibold"),
                width="auto"),
        dbc.Col(dbc.RadioItems(id="convergence-metric", value=metric, inline=True, className="small",
                               options=[{"label": "final layer", "value": "final"},
                                        {"label": "all layers", "value": "all"}]), width="auto"),
        dbc.Col(html.Label("Highlight", htmlFor="convergence-highlight", className="col-form-label-sm fw-semibold"),
                width="auto"),
        dbc.Col(dcc.Dropdown(id="convergence-highlight", options=options, value=highlight, clearable=True,
                             placeholder="an estimator or a team", style={"minWidth": "20rem"}), width="auto"),
    ], className="g-2 align-items-center mb-2")


def _baseline_panel(missing: list[str]) -> html.Div:
    names = ", ".join(BASELINE_LABELS[k].lower() for k in missing)
    return html.Div([
        dbc.Alert([f"White-box baselines not computed yet for this dataset: {names}. ",
                   dbc.Button("Compute them", id="convergence-compute", size="sm", color="primary",
                              className="ms-2")], color="secondary", className="py-2 small mb-2"),
        dbc.Progress(id="convergence-progress", value=0, label="", striped=True, animated=True,
                     style={"height": "1.2rem"}, className="mb-2"),
        html.Div(id="convergence-baseline-error"),
    ], id="convergence-baseline-panel", style=SHOWN if missing else HIDDEN)


def layout(dataset: str | None = None, round: str | None = None, highlight: str | None = None,  # noqa: A002
           view: str | None = None, **_query) -> html.Div:
    selection = resolve_selection(dataset=dataset, round=round)
    title = html.H2("Monte Carlo convergence")
    if not selection.ok:
        return html.Div([title, not_found_panel("Dataset not found", selection.problem)])
    ds = get_dataset(selection.dataset_key)
    metric = "all" if view == "all" else "final"
    try:
        view, _ = cached_convergence_view(ds)
        options, missing = view.highlight_options(), view.missing_baselines()
    except Exception as exc:  # a broken band file must not take the page down
        return html.Div([title, dbc.Alert(f"Cannot draw {ds.info.key}: {exc}", color="danger")])
    return html.Div([
        title,
        html.P("How Monte Carlo error falls as FLOPs per MLP grow, measured on this dataset's MLPs, and where the "
               "white-box baselines and every recorded run sit against it. Below the reference noise floor "
               "nothing can be resolved.", className="text-muted"),
        selector_row(selection, target_path="/convergence"),
        _view_controls(metric, highlight, options),
        dcc.Store(id="convergence-dataset", data=selection.dataset_key),
        dcc.Store(id="convergence-round", data=selection.round_tag),
        dcc.Store(id="convergence-refresh", data=0),
        dcc.Store(id="convergence-frame"),
        address_store("convergence-address"),
        html.Div(id="convergence-status"),
        _baseline_panel(missing),
        dcc.Loading(dcc.Graph(id="convergence-graph", config=GRAPH_CONFIG, style={"height": "620px"}),
                    type="default", delay_show=300),
        dbc.Card(dbc.CardBody(figs.readout_panel_placeholder(), id="convergence-readout"), className="mb-3"),
        html.P(METHOD, className="small text-muted"),
    ])


@callback(
    Output("convergence-graph", "figure"),
    Output("convergence-status", "children"),
    Input("convergence-metric", "value"),
    Input("convergence-highlight", "value"),
    Input("convergence-refresh", "data"),
    Input("convergence-frame", "data"),
    State("convergence-dataset", "data"),
)
def _render(metric: str, highlight: str | None, _refresh, stored_frame: dict | None, dataset_key: str):
    metric = metric or "final"
    try:
        view, _ = cached_convergence_view(get_dataset(dataset_key))
    except Exception as exc:
        return figs.empty_figure(str(exc)), dbc.Alert(f"Cannot draw {dataset_key}: {exc}", color="danger")
    frame_key = json.dumps(stored_frame, sort_keys=True) if stored_frame else ""
    static = _static_figure(dataset_key, metric, frame_key, view.static_token)
    visible = figs.frame_for(view, metric, stored_frame)
    return figs.with_runs(static, figs.run_traces(view, metric, highlight, visible)), figs.status_alerts(view)


# The band, baselines and axes are built once per (metric, frame, band and baselines) and shared by every
# worker through the cache service (Redis when configured); only the run dots, which change with every recorded run, are redrawn.
@memoize("convergence-static-figure", timeout=24 * 3600)
def _static_figure(dataset_key: str, metric: str, frame_key: str, static_token: str) -> dict:
    view, _ = cached_convergence_view(get_dataset(dataset_key))
    visible = figs.frame_for(view, metric, json.loads(frame_key) if frame_key else None)
    return figs.static_figure(view, metric, visible=visible).to_plotly_json()


# The frame is read off the graph itself, in the browser, after every zoom or pan: what the user sees
# is the truth. A server round trip here would race Plotly's own follow-up events (an ``autosize``
# relayout fired while the zoom's request is in flight supersedes it, and the zoom is lost).
clientside_callback(
    """
    function(relayout, metric, stored) {
        const skip = window.dash_clientside.no_update;
        const keys = Object.keys(relayout || {});
        if (keys.some(k => k.endsWith('.autorange'))) { return stored ? null : skip; }
        if (!keys.some(k => /^[xy]axis\\.range/.test(k))) { return skip; }
        const gd = document.querySelector('#convergence-graph .js-plotly-plot');
        const full = gd && gd._fullLayout;
        if (!full || !full.xaxis || !full.yaxis) { return skip; }
        const frame = {metric: metric || 'final', x: full.xaxis.range.map(Number), y: full.yaxis.range.map(Number)};
        return JSON.stringify(frame) === JSON.stringify(stored) ? skip : frame;
    }
    """,
    Output("convergence-frame", "data"),
    Input("convergence-graph", "relayoutData"),
    State("convergence-metric", "value"),
    State("convergence-frame", "data"),
    prevent_initial_call=True,
)


@callback(
    Output("convergence-address", "data"),
    Input("convergence-metric", "value"),
    Input("convergence-highlight", "value"),
    State("convergence-dataset", "data"),
    State("convergence-round", "data"),
    prevent_initial_call=True,
)
def _sync_url(metric: str, highlight: str | None, dataset_key: str, round_tag: str | None):
    params = {"round": round_tag, "dataset": dataset_key, "view": "all" if metric == "all" else None,
              "highlight": highlight}
    return query_string(params)


keep_address_in_step("convergence-address")


@callback(
    Output("convergence-readout", "children"),
    Input("convergence-graph", "clickData"),
    Input("convergence-metric", "value"),
    State("convergence-dataset", "data"),
    prevent_initial_call=True,
)
def _readout(click: dict | None, metric: str, dataset_key: str):
    point = ((click or {}).get("points") or [{}])[0].get("customdata")
    if not point:
        return figs.readout_panel_placeholder()
    try:
        view, _ = cached_convergence_view(get_dataset(dataset_key))
    except Exception as exc:
        return [html.P(f"Cannot compare: {exc}", className="mb-0")]
    return figs.readout_panel(view, metric or "final", point)


@callback(
    Output("convergence-refresh", "data"),
    Output("convergence-baseline-panel", "style"),
    Output("convergence-baseline-error", "children"),
    Input("convergence-compute", "n_clicks"),
    State("convergence-dataset", "data"),
    background=True,
    running=[(Output("convergence-compute", "disabled"), True, False)],
    progress=[Output("convergence-progress", "value"), Output("convergence-progress", "label")],
    prevent_initial_call=True,
)
@priced("Computing these baselines", lambda _n, dataset_key: baselines_cost(get_dataset(dataset_key)))
def _compute_baselines(set_progress, n_clicks, dataset_key: str):
    """Score mean and covariance propagation on every MLP (the grader's way), stored for next time."""
    if not n_clicks:
        return no_update, no_update, no_update
    set_progress((0, "starting…"))
    try:
        ds = get_dataset(dataset_key)
        kinds = tuple(missing_baselines(ds))

        def on_progress(kind: str, done: int, total: int) -> None:
            step = kinds.index(kind) if kind in kinds else 0
            set_progress((100 * (step + done / total) / max(len(kinds), 1),
                          f"{BASELINE_LABELS[kind]}: {done}/{total} MLPs"))

        compute_baselines(ds, kinds=kinds, on_progress=on_progress)
    except Exception as exc:  # shown in the page, never as a traceback
        return no_update, SHOWN, dbc.Alert(f"Could not compute the baselines: {exc}", color="danger",
                                           className="py-2 small")
    return n_clicks, HIDDEN, None
