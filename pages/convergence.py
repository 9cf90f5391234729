"""Monte Carlo convergence: sampling error against FLOPs per MLP, and where every estimator sits on it.

One round (and dataset) at a time, chosen in the URL like every page
(``?round=TAG&dataset=KEY``), plus ``view=all`` for the all-layer view and
``highlight=team:NAME`` / ``highlight=estimator:LABEL``. Changing the view or
the highlight rewrites the address in place (no page reload), so any picture
can be shared. Missing white-box baselines are computed in a background job.

Below it, budget curves (``curves=mc:1B|cov&budgets=0.01B:1B:5&mlps=0:4&x=ratio&y=var``): each chosen
estimator at a ladder of budgets, every point a run kept in the run records (so the ``curve`` command and
this page share points); "Sweep the budget" scores the missing points in a background job with progress.
"""

from __future__ import annotations

import dash
import dash_bootstrap_components as dbc
from dash import Input, Output, State, callback, clientside_callback, dcc, html, no_update

from components.budget_curve import budget_curve_panel
from components.figures import convergence as figs
from components.figures import paper as paper_figs
from components.figures.frame import Frame
from components.selectors import not_found_panel, resolve_selection, selector_row
from components.url_state import address_store, keep_address_in_step, query_string
from server import faults
from server.background import priced
from whestboard.band import (
    BASELINE_LABELS,
    baselines_cost,
    cached_convergence_view,
    compute_baselines,
    missing_baselines,
    paper_view,
)
from whestboard.cache import memoize
from whestboard.data import get_dataset
from whestboard.scoring import (
    Sweep,
    curve_spec_choices,
    parse_sweep,
    run_curve,
    stored_curve,
)

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
    names = "; ".join(BASELINE_LABELS[k] for k in missing)  # as the legend names them (K and variants kept)
    return html.Div([
        dbc.Alert([f"White-box baselines not computed yet for this dataset: {names}. ",
                   dbc.Button("Compute them", id="convergence-compute", size="sm", color="primary",
                              className="ms-2")], color="secondary", className="py-2 small mb-2"),
        dbc.Progress(id="convergence-progress", value=0, label="", striped=True, animated=True,
                     style={"height": "1.2rem"}, className="mb-2"),
        html.Div(id="convergence-baseline-error"),
    ], id="convergence-baseline-panel", style=SHOWN if missing else HIDDEN)


DEFAULT_LADDER = "0.01B:1B:5"


def _curve_controls(curves: list[str], budgets: str, mlps: str, x_axis: str, y_axis: str) -> dbc.Card:
    offered = {c["value"] for c in curve_spec_choices()}
    options = curve_spec_choices() + [{"label": s, "value": s} for s in curves if s not in offered]
    return dbc.Card(dbc.CardBody([
        html.H5("Budget curves: what more FLOPs buy", className="mb-2"),
        html.P("Each estimator scored at a ladder of budgets, every point exactly as `python -m whestboard score "
               "--budget B` scores it (the round's rulebook, only B changed), drawn over the Monte Carlo band. "
               "Points below the reference noise floor are open circles: they cannot be resolved.",
               className="small text-muted"),
        dbc.Row([
            dbc.Col([dbc.Label("Estimators", html_for="curve-estimators", className="small fw-semibold"),
                     dcc.Dropdown(id="curve-estimators", options=options, value=curves, multi=True,
                                  placeholder="choose estimators")], md=4),
            dbc.Col([dbc.Label("Budgets", html_for="curve-budgets", className="small fw-semibold"),
                     dbc.Input(id="curve-budgets", value=budgets, size="sm", debounce=True),
                     dbc.FormText("LO:HI:N or B1,B2,…")], md=2),
            dbc.Col([dbc.Label("MLPs", html_for="curve-mlps", className="small fw-semibold"),
                     dbc.Input(id="curve-mlps", value=mlps, size="sm", debounce=True, placeholder="all"),
                     dbc.FormText("0:8, 3 or 0,2,5")], md=2),
            dbc.Col([dbc.Label("x", className="small fw-semibold"),
                     dbc.RadioItems(id="curve-x", value=x_axis, className="small",
                                    options=[{"label": "FLOPs", "value": "flops"},
                                             {"label": "FLOPs / B", "value": "ratio"}])], md=1),
            dbc.Col([dbc.Label("y", className="small fw-semibold"),
                     dbc.RadioItems(id="curve-y", value=y_axis, className="small",
                                    options=[{"label": "raw MSE", "value": "mse"}, {"label": "score", "value": "score"},
                                             {"label": "MSE / Var", "value": "var"}])], md=1),
            dbc.Col([dbc.Button("Sweep the budget", id="curve-sweep", color="primary", size="sm", className="me-2"),
                     dbc.Button("Cancel", id="curve-cancel", color="secondary", outline=True, size="sm",
                                disabled=True)], md=2, className="align-self-end"),
        ], className="g-3"),
        html.Div([dbc.Progress(id="curve-progress", value=0, label="", striped=True, animated=True,
                               style={"height": "1.2rem"}, className="mt-2")], id="curve-progress-wrap", style=HIDDEN),
        html.Div(id="curve-status", className="small mt-2"),
    ]), className="mb-3")


def layout(dataset: str | None = None, round: str | None = None, highlight: str | None = None,  # noqa: A002
           view: str | None = None, curves: str | None = None, budgets: str | None = None, mlps: str | None = None,
           x: str | None = None, y: str | None = None, paper: str | None = None, **_query) -> html.Div:
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
        _curve_controls([c for c in (curves or "").split("|") if c], budgets or DEFAULT_LADDER, mlps or "",
                        x if x in ("flops", "ratio") else "flops", y if y in ("mse", "score", "var") else "mse"),
        dcc.Store(id="curve-refresh", data=0),
        dcc.Loading(html.Div(id="curve-body"), type="default", delay_show=300),
        _paper_section(paper or selection.round_tag),
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
    visible = figs.frame_for(view, metric, stored_frame)  # the browser's zoom, read by the figures' own rule
    if visible == figs.default_frame(view, metric):
        static = _static_figure(dataset_key, metric, view.static_token)
    else:
        static = _zoomed_figure(dataset_key, metric, (visible.x, visible.y), view.static_token)
    return figs.with_runs(static, figs.run_traces(view, metric, highlight, visible)), figs.status_alerts(view)


# The band, baselines and axes are built once per (metric, band and baselines) and shared by every worker through
# the cache service (Redis when configured); only the run dots, which change with every recorded run, are redrawn.
@memoize("convergence-static-figure", timeout=24 * 3600)
def _static_figure(dataset_key: str, metric: str, static_token: str) -> dict:
    view, _ = cached_convergence_view(get_dataset(dataset_key))
    return figs.static_figure(view, metric).to_plotly_json()


# A zoom is any pair of ranges a browser sends: drawn for it and kept in this process only (a few, by entries), never
# in the shared cache, where every made-up frame would be a new value kept a day.
@memoize("convergence-zoomed-figure", shared=False, max_entries=32)
def _zoomed_figure(dataset_key: str, metric: str, frame: tuple, static_token: str) -> dict:
    view, _ = cached_convergence_view(get_dataset(dataset_key))
    visible = Frame(x=frame[0], y=frame[1])
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
    Input("curve-estimators", "value"),
    Input("curve-budgets", "value"),
    Input("curve-mlps", "value"),
    Input("curve-x", "value"),
    Input("curve-y", "value"),
    Input("paper-shape", "value"),
    State("convergence-dataset", "data"),
    State("convergence-round", "data"),
    prevent_initial_call=True,
)
def _sync_url(metric: str, highlight: str | None, curves, budgets, mlps, x_axis, y_axis, paper, dataset_key: str,
              round_tag: str | None):
    """Every choice of the page, the paper's shape too (left out where it is the one the round opens on)."""
    opens_on = _paper_shape(round_tag, [o["value"] for o in paper_view().options()])
    params = {"round": round_tag, "dataset": dataset_key, "view": "all" if metric == "all" else None,
              "highlight": highlight, "curves": "|".join(curves or []) or None,
              "budgets": None if budgets == DEFAULT_LADDER else budgets, "mlps": mlps,
              "x": None if x_axis == "flops" else x_axis, "y": None if y_axis == "mse" else y_axis,
              "paper": paper if isinstance(paper, str) and paper != opens_on else None}
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
        return no_update, SHOWN, dbc.Alert(f"Could not compute the baselines: {faults.job_error(exc)}", color="danger",
                                           className="py-2 small")
    return n_clicks, HIDDEN, None


# ---------------------------------------------------------------------------
# budget curves
# ---------------------------------------------------------------------------


def _asked_sweep(dataset_key, specs, budgets, mlps) -> Sweep:
    """Every chosen estimator at the ladder's budgets on the same MLPs, parsed once by the core (each spec one
    this page serves, at most ``MAX_SPECS``); its RunError names the field to fix."""
    return parse_sweep(dataset_key, specs or [], budgets, mlps, default_ladder=DEFAULT_LADDER)


def _sweep_cost(_n, dataset_key, specs, budgets, mlps) -> float:
    """The missing points' work: their MLPs times each budget (stored points cost nothing)."""
    return _asked_sweep(dataset_key, specs, budgets, mlps).cost


@callback(
    Output("curve-body", "children"),
    Input("curve-estimators", "value"),
    Input("curve-budgets", "value"),
    Input("curve-mlps", "value"),
    Input("curve-x", "value"),
    Input("curve-y", "value"),
    Input("curve-refresh", "data"),
    State("convergence-dataset", "data"),
)
def _render_curves(specs, budgets, mlps, x_axis, y_axis, _refresh, dataset_key):
    """Draw the stored points of every chosen curve (the one budget-curve panel); say how many are missing."""
    try:
        asked = _asked_sweep(dataset_key, specs, budgets, mlps)
        view, _ = cached_convergence_view(get_dataset(asked.dataset))
    except (ValueError, KeyError, FileNotFoundError) as exc:
        message = exc.args[0] if isinstance(exc, KeyError) and exc.args else str(exc)
        return dbc.Alert(message, color="warning", className="py-2 small", id="curve-error")
    drawn = [stored_curve(spec, list(requests)) for spec, requests in asked.curves]
    return budget_curve_panel(view, [curve for curve, _ in drawn], prefix="curve", x_axis=x_axis or "flops",
                              y_axis=y_axis or "mse", missing=sum(missing for _, missing in drawn))


@callback(
    Output("curve-refresh", "data"),
    Output("curve-status", "children"),
    Input("curve-sweep", "n_clicks"),
    State("convergence-dataset", "data"),
    State("curve-estimators", "value"),
    State("curve-budgets", "value"),
    State("curve-mlps", "value"),
    background=True,
    running=[(Output("curve-sweep", "disabled"), True, False), (Output("curve-cancel", "disabled"), False, True),
             (Output("curve-progress-wrap", "style"), SHOWN, HIDDEN)],
    progress=[Output("curve-progress", "value"), Output("curve-progress", "label")],
    cancel=[Input("curve-cancel", "n_clicks")],
    interval=500,
    prevent_initial_call=True,
)
@priced("This budget sweep", _sweep_cost)
def _sweep(set_progress, n_clicks, dataset_key, specs, budgets, mlps):
    """Score every missing point of every chosen curve, one run each, in a job process."""
    if not n_clicks:
        return no_update, no_update
    if not specs:
        return no_update, dbc.Alert("Choose at least one estimator to sweep.", color="warning", className="py-2")
    set_progress((0, "starting…"))
    try:
        asked = _asked_sweep(dataset_key, specs, budgets, mlps)
        total = asked.n_points
        done = 0
        for spec, requests in asked.curves:
            def progress(index, n_points, mlps_done, n_mlps, _spec=spec, _base=done):
                share = 100 * (_base + index + mlps_done / max(n_mlps, 1)) / max(total, 1)
                set_progress((share, f"{_spec}: point {index + 1}/{n_points}, {mlps_done}/{n_mlps} MLPs"))
            run_curve(list(requests), on_progress=progress)
            done += len(requests)
    except Exception as exc:  # the page shows a sentence, never a traceback
        message = faults.job_error(exc)
        return n_clicks, dbc.Alert(f"The sweep could not finish: {message}", color="danger", className="py-2",
                                   id="curve-error")
    return n_clicks, html.Span(f"Swept {total} point(s).", id="curve-done")


# ---------------------------------------------------------------------------
# the paper's figure: cumulant propagation's MSE / Var against FLOPs, beside sampling's 1/m
# ---------------------------------------------------------------------------

PAPER_DEFAULT = "256x16"
PAPER_NOTE = (
    "ARC's paper plots each variant and order of cumulant propagation as a point against sampling's line "
    "MSE / Var = 1/m, m the forward passes the same FLOPs buy. Here every cumulant spec is metered by flopscope "
    "on whestbench's MLPs (the paper's widths 8 to 256 at depth 16, seeds 0..m-1, with the whole third-cumulant "
    "history; and the rounds' own first MLPs under their budgets), against a Monte Carlo reference of N_ref "
    "samples on each MLP's own stream; the grey dash under each point is that reference's noise floor, "
    "σ²/N_ref ÷ σ² = 1/N_ref, below which nothing is resolved. Bars: 10–90% across the MLPs. Measured by "
    "python -m whestboard paper (data/paper/)."
)


def _paper_shape(chosen: str | None, keys: list[str]) -> str | None:
    """The shape the section shows: the one asked for if measured, else the paper's default, else the first."""
    return chosen if chosen in keys else PAPER_DEFAULT if PAPER_DEFAULT in keys else (keys[0] if keys else None)


def _paper_section(chosen: str | None) -> dbc.Card:
    view = paper_view()
    keys = [o["value"] for o in view.options()]
    value = _paper_shape(chosen, keys)
    return dbc.Card(dbc.CardBody([
        html.H5("The paper's figure: cumulant propagation against sampling", className="mb-2"),
        html.P(PAPER_NOTE, className="small text-muted"),
        dbc.Row([
            dbc.Col(html.Label("Shape", htmlFor="paper-shape", className="col-form-label-sm fw-semibold"), width="auto"),
            dbc.Col(dcc.Dropdown(id="paper-shape", options=view.options(), value=value, clearable=False,
                                 style={"minWidth": "22rem"}), width="auto"),
        ], className="g-2 align-items-center mb-2"),
        *[dbc.Alert(problem, color="warning", className="py-2 small mb-2") for problem in view.problems],
        dcc.Graph(id="paper-graph", config={**GRAPH_CONFIG, "toImageButtonOptions": {"format": "png",
                                                                                      "filename": "paper-figure"}},
                  figure=paper_figs.paper_figure(view.shape(value)), style={"height": "560px"}),
    ]), className="mb-3 mt-3", id="paper-section")


@callback(Output("paper-graph", "figure"), Input("paper-shape", "value"), prevent_initial_call=True)
def _render_paper(shape_key: str | None):
    """Redraw for another shape: the view is read from the measured files, the key is only looked up in it."""
    return paper_figs.paper_figure(paper_view().shape(shape_key if isinstance(shape_key, str) else None))
