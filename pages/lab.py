"""Estimator lab: run an estimator under the grader's metered budget and see where its error comes from.

Run is a Dash background callback (the app's DiskcacheManager): the estimator
runs in a job process, so the page keeps serving; per-MLP results stream in
through ``set_progress`` and Cancel kills the job. An identical run is answered
from the cache service / run store before any job starts, so a repeat is instant.

"Sweep the budget", beside Run, scores the same estimator on the same MLPs at a ladder of budgets
(``budgets=LO:HI:N``), each point a run kept in the run records exactly as ``score --budget B`` keeps it,
and draws the curve over the Monte Carlo band; stored points are not scored again. The form's choices live
in the address (``components.url_state``).
"""

from __future__ import annotations

import dash
import dash_bootstrap_components as dbc
from dash import Input, Output, State, callback, ctx, dcc, html, no_update

from components.budget_curve import budget_curve_panel
from components.compare_panels import compare_url
from components.figures import lab as figs
from components.figures.margins import margins_panel
from components.selectors import not_found_panel, resolve_selection, selector_row
from components.url_state import address_store, href, keep_address_in_step, query_string
from server import faults
from server.background import priced
from whestboard.band import cached_convergence_view
from whestboard.cache import Region
from whestboard.data import get_dataset
from whestboard.jobs import check_cost
from whestboard.scoring import (
    MAX_BUDGET_MULTIPLE,
    RunError,
    Sweep,
    find_cached,
    get_run,
    get_run_predictions,
    layer_comparison,
    parse_lab_run,
    parse_sweep,
    quoted,
    rulebook_for,
    run_and_record,
    run_curve,
    run_margins,
    selection_text,
    served_choices,
    stored_curve,
)

dash.register_page(__name__, path="/lab", name="Lab", order=3, title="Estimator lab · Whestboard")

HIDDEN, SHOWN = {"display": "none"}, {"display": "block"}
DEFAULT_LADDER = "0.01B:1B:5"


def _controls(ds, mlps: str, estimator: str, mc: str, budget: str, budgets: str) -> dbc.Card:
    rnd_budget = rulebook_for(ds.info.round_tag).round_budget
    first = ds.indices[0] if ds.indices else 0
    return dbc.Card(dbc.CardBody([
        dbc.Row([
            dbc.Col([dbc.Label("MLPs", html_for="lab-mlps", className="small fw-semibold"),
                     dbc.Input(id="lab-mlps", value=mlps or str(first), size="sm", debounce=True),
                     dbc.FormText(f"indices {ds.indices[0]}–{ds.indices[-1]}: 0:8, 3 or 0,2,5")], md=2),
            dbc.Col([dbc.Label("Estimator", html_for="lab-estimator", className="small fw-semibold"),
                     dcc.Dropdown(id="lab-estimator", options=served_choices(), value=estimator or "mean",
                                  clearable=False, searchable=False)], md=4),
            dbc.Col([dbc.Label("Monte Carlo samples", html_for="lab-mc", className="small fw-semibold"),
                     dbc.Input(id="lab-mc", value=mc or "0.5B", size="sm"),
                     dbc.FormText("N samples (2 to 1e9), or 0.5B for half the budget")],
                    md=2, id="lab-mc-col", style=SHOWN if estimator == "mc" else HIDDEN),
            dbc.Col([dbc.Label("Budget per MLP (FLOPs)", html_for="lab-budget", className="small fw-semibold"),
                     dbc.Input(id="lab-budget", value=budget or "", size="sm", placeholder=f"{rnd_budget:.4g} (the round's B)"),
                     dbc.FormText(f"empty = the round's B; 2**41, 1e9 or 0.5B, at most {MAX_BUDGET_MULTIPLE}B")],
                    md=2),
            dbc.Col([
                dbc.Checkbox(id="lab-fresh", label="Score again even if stored", value=False, className="small mb-2"),
                dbc.Button("Run", id="lab-run", color="primary", size="sm", className="me-2"),
                dbc.Button("Cancel", id="lab-cancel", color="secondary", outline=True, size="sm", disabled=True),
            ], md=2, className="align-self-end"),
        ], className="g-3"),
        dbc.Row([
            dbc.Col([dbc.Label("Budgets to sweep", html_for="lab-budgets", className="small fw-semibold"),
                     dbc.Input(id="lab-budgets", value=budgets or DEFAULT_LADDER, size="sm"),
                     dbc.FormText("LO:HI:N (log-spaced) or B1,B2,…; each point is a run at that budget")], md=4),
            dbc.Col([
                dbc.Button("Sweep the budget", id="lab-sweep", color="primary", outline=True, size="sm",
                           className="me-2"),
                dbc.Button("Cancel sweep", id="lab-sweep-cancel", color="secondary", outline=True, size="sm",
                           disabled=True),
            ], md=4, className="align-self-end"),
        ], className="g-3 mt-1"),
    ]), className="mb-3")


def layout(dataset: str | None = None, round: str | None = None, mlps: str | None = None,  # noqa: A002
           estimator: str | None = None, mc: str | None = None, budget: str | None = None,
           budgets: str | None = None, **_query) -> html.Div:
    selection = resolve_selection(dataset=dataset, round=round)
    title = html.H2("Estimator lab")
    if not selection.ok:
        return html.Div([title, not_found_panel("Dataset not found", selection.problem)])
    ds = get_dataset(selection.dataset_key)
    return html.Div([
        title,
        html.P("Run an estimator on MLPs of the dataset exactly as the grader does: metered by flopscope under the "
               "round's full rulebook, scored by whestbench's evaluate_estimator, with the grader's fallback for any "
               "failure. " + figs.NOISE_HELP, className="text-muted"),
        selector_row(selection, target_path="/lab"),
        _controls(ds, mlps or "", estimator or "", mc or "", budget or "", budgets or ""),
        dcc.Store(id="lab-dataset", data=selection.dataset_key),
        dcc.Store(id="lab-round", data=selection.round_tag),
        address_store("lab-address"),
        dcc.Store(id="lab-job"),
        dcc.Store(id="lab-job-result"),
        dcc.Store(id="lab-plan-result"),
        dcc.Store(id="lab-live-store", data=[]),
        dcc.Store(id="lab-current-run"),
        html.Div(id="lab-form-error"),
        html.Div([
            dbc.Progress(id="lab-progress", value=0, label="", striped=True, animated=True, className="mb-2",
                         style={"height": "1.4rem"}),
            html.Div(id="lab-status", className="small text-muted mb-2"),
            html.Div(id="lab-live"),
        ], id="lab-progress-wrap", style=HIDDEN),
        html.Div([dbc.Progress(id="lab-sweep-progress", value=0, label="", striped=True, animated=True,
                               className="mb-2", style={"height": "1.4rem"})], id="lab-sweep-wrap", style=HIDDEN),
        html.Div(id="lab-sweep-results"),
        dcc.Loading(html.Div(id="lab-results"), type="default", delay_show=300),
        html.Div([
            html.H5("One layer, every neuron", className="mt-4"),
            dbc.Row([dbc.Col(dbc.Label("Layer", html_for="lab-layer", className="small fw-semibold"), width="auto"),
                     dbc.Col(dcc.Dropdown(id="lab-layer", clearable=False, searchable=False,
                                          style={"minWidth": "8rem"}), width="auto")],
                    className="g-2 align-items-center mb-2"),
            dbc.Row([dbc.Col(dcc.Graph(id="lab-heatmap"), md=7), dbc.Col(dcc.Graph(id="lab-scatter"), md=5)]),
        ], id="lab-layer-panel", style=HIDDEN),
    ])


@callback(Output("lab-mc-col", "style"), Input("lab-estimator", "value"))
def _toggle_mc(estimator: str):
    return SHOWN if estimator == "mc" else HIDDEN


def _spec(estimator: str, mc: str | None) -> str:
    """The estimator spec the form names: only what the menu offers (files come through uploads)."""
    offered = [choice["value"] for choice in served_choices()]
    if estimator not in offered:
        raise RunError(f"Estimator {quoted(estimator)} is not in the menu: choose one of {', '.join(offered)}")
    if estimator != "mc":
        return estimator
    text = mc if isinstance(mc, str) else ("" if mc is None else repr(mc))
    return f"mc:{text.strip() or '0.5B'}"


def _job_cost(job) -> float | None:
    """A lab run's most work before it runs: its MLPs times the FLOP budget of each (the job's own request)."""
    if not isinstance(job, dict):
        return None
    return parse_lab_run(job).cost


#: Run ids by the run's cache key: this process, and every worker through the shared backend.
_RUN_IDS: Region[str] = Region("lab-runs", max_entries=4096, shared=True)


def _stored_run(key: str) -> str | None:
    """A run with this cache key: the cache service first, then the durable store."""
    run_id = _RUN_IDS.get(key)
    if run_id and get_run(run_id) is not None:
        return run_id
    return find_cached(key)


@callback(
    Output("lab-plan-result", "data"),
    Output("lab-job", "data"),
    Output("lab-form-error", "children"),
    Input("lab-run", "n_clicks"),
    State("lab-dataset", "data"),
    State("lab-mlps", "value"),
    State("lab-estimator", "value"),
    State("lab-mc", "value"),
    State("lab-budget", "value"),
    State("lab-fresh", "value"),
    prevent_initial_call=True,
)
def _plan(n_clicks, dataset_key, mlps, estimator, mc, budget, fresh):
    """Check the form; answer a stored identical run at once, or hand the job to the background."""
    try:
        asked = parse_lab_run({"dataset": dataset_key, "mlps": mlps, "spec": _spec(estimator, mc), "budget": budget})
        key = asked.key
        run_id = None if fresh else _stored_run(key)
        if run_id is None:
            check_cost("This lab run", asked.cost)
    except (ValueError, KeyError, FileNotFoundError) as exc:
        message = exc.args[0] if isinstance(exc, KeyError) and exc.args else str(exc)
        return no_update, no_update, dbc.Alert(message, color="warning", className="py-2", id="lab-error")
    if run_id is not None:
        return {"run_id": run_id, "cached": True, "nonce": n_clicks}, no_update, None
    return no_update, {**asked.payload(), "nonce": n_clicks}, None


@callback(
    Output("lab-job-result", "data"),
    Input("lab-job", "data"),
    background=True,
    running=[
        (Output("lab-run", "disabled"), True, False),
        (Output("lab-cancel", "disabled"), False, True),
        (Output("lab-progress-wrap", "style"), SHOWN, SHOWN),
    ],
    progress=[Output("lab-progress", "value"), Output("lab-progress", "label"), Output("lab-live-store", "data")],
    cancel=[Input("lab-cancel", "n_clicks")],
    interval=500,
    prevent_initial_call=True,
)
@priced("This lab run", _job_cost)
def _run_job(set_progress, job):
    """The metered run, in a job process; every finished MLP is streamed to the page."""
    if not job:
        return no_update
    nonce = job.get("nonce")
    set_progress((0, "starting…", []))
    finished: list[dict] = []

    def on_progress(done: int, total: int, entry: dict) -> None:
        finished.append(entry)
        set_progress((100 * done / total, f"{done} of {total} MLPs", figs.live_rows(finished)))

    try:
        asked = parse_lab_run(job)  # the request the web worker priced, read back by the same parser
        outcome = run_and_record(asked.run, use_cache=False, on_progress=on_progress)
    except Exception as exc:  # the page shows a sentence, never a traceback
        message = faults.job_error(exc)
        return {"error": message, "nonce": nonce}
    return {"run_id": outcome.run_id, "cached": False, "key": asked.key, "nonce": nonce}


@callback(Output("lab-live", "children"), Input("lab-live-store", "data"))
def _live(rows):
    return figs.live_table(rows or [])


@callback(
    Output("lab-status", "children"),
    Input("lab-cancel", "n_clicks"),
    State("lab-live-store", "data"),
    prevent_initial_call=True,
)
def _cancelled(_n, rows):
    done = len(rows or [])
    return f"Cancelled after {done} MLP(s). A cancelled run is not recorded; its finished MLPs are shown above."


@callback(
    Output("lab-results", "children"),
    Output("lab-current-run", "data"),
    Output("lab-layer", "options"),
    Output("lab-layer", "value"),
    Output("lab-layer-panel", "style"),
    Input("lab-plan-result", "data"),
    Input("lab-job-result", "data"),
    prevent_initial_call=True,
)
def _show(planned, finished):
    """Render the run that just finished (or was found in the store)."""
    state = planned if ctx.triggered_id == "lab-plan-result" else finished
    if not state:
        return no_update, no_update, no_update, no_update, no_update
    if state.get("error"):
        alert = dbc.Alert(["The run could not finish: ", state["error"]], color="danger", id="lab-error")
        return alert, None, [], None, HIDDEN
    report = get_run(state["run_id"]) if isinstance(state.get("run_id"), str) else None
    if report is None:
        return dbc.Alert("The run was not recorded.", color="warning", id="lab-error"), None, [], None, HIDDEN
    if state.get("key") and state["key"] == report.get("cache_key"):  # never a mapping a browser made up
        _RUN_IDS.set(state["key"], state["run_id"])
    depth = report["dataset"]["depth"]
    options = [{"label": f"layer {i + 1}", "value": i} for i in range(depth)]
    return _results(report, cached=bool(state.get("cached"))), state["run_id"], options, depth - 1, SHOWN


def _results(report: dict, *, cached: bool) -> html.Div:
    return html.Div([
        figs.results_header(report),
        figs.summary_cards(report, cached=cached),
        figs.failures_alert(report),
        figs.contention_alert(report),
        margins_panel(run_margins(report), "lab"),
        dbc.Row([dbc.Col(dcc.Graph(id="lab-budget-gauge", figure=figs.budget_gauge(report)), md=6),
                 dbc.Col(dcc.Graph(id="lab-flop-breakdown", figure=figs.flop_breakdown(report)), md=6)]),
        dbc.Row([dbc.Col(dcc.Graph(id="lab-per-layer-plot", figure=figs.per_layer_mse(report)), md=7),
                 dbc.Col(dcc.Graph(id="lab-vs-sampling", figure=figs.versus_sampling(report)), md=5)]),
        html.P(figs.MC_SAME_HELP, className="text-muted small"),
        html.H5("Per MLP", className="mt-3"),
        figs.per_mlp_table(report),
        dcc.Link("Compare this run with another (paired, on the same MLPs)",
                 href=compare_url(f"run:{report['run_id']}"), id="lab-compare-link", className="small"),
    ], id="lab-result-panel")


@callback(
    Output("lab-heatmap", "figure"),
    Output("lab-scatter", "figure"),
    Input("lab-layer", "value"),
    State("lab-current-run", "data"),
    prevent_initial_call=True,
)
def _layer(layer, run_id):
    if layer is None or not run_id:
        return no_update, no_update
    report = get_run(run_id)
    if report is None:
        return no_update, no_update
    comparison = layer_comparison(report, get_run_predictions(run_id),
                                       get_dataset(report["dataset"]["key"]), int(layer))
    return figs.signed_error_heatmap(comparison), figs.predicted_vs_true(comparison)


@callback(
    Output("lab-address", "data"),
    Input("lab-mlps", "value"),
    Input("lab-estimator", "value"),
    Input("lab-mc", "value"),
    Input("lab-budget", "value"),
    Input("lab-budgets", "value"),
    State("lab-dataset", "data"),
    State("lab-round", "data"),
    prevent_initial_call=True,
)
def _sync_url(mlps, estimator, mc, budget, budgets, dataset_key, round_tag):
    """Every choice of the form; an empty selection (every MLP) is written as the dataset's whole range, since
    an address without ``mlps`` opens on the first MLP."""
    if not (mlps or "").strip() and dataset_key:
        try:
            mlps = selection_text(get_dataset(dataset_key).indices)
        except (KeyError, FileNotFoundError):
            mlps = None
    return query_string({"round": round_tag, "dataset": dataset_key, "mlps": mlps, "estimator": estimator,
                         "mc": mc if estimator == "mc" else None, "budget": budget,
                         "budgets": None if budgets == DEFAULT_LADDER else budgets})


keep_address_in_step("lab-address")


def _asked_sweep(dataset_key, mlps, estimator, mc, budgets) -> Sweep:
    """The lab's estimator on the lab's MLPs at each budget of the ladder (the round's rulebook, only B changed)."""
    return parse_sweep(dataset_key, [_spec(estimator, mc)], budgets, mlps, default_ladder=DEFAULT_LADDER)


def _sweep_cost(_n, dataset_key, mlps, estimator, mc, budgets) -> float:
    return _asked_sweep(dataset_key, mlps, estimator, mc, budgets).cost


@callback(
    Output("lab-sweep-results", "children"),
    Input("lab-sweep", "n_clicks"),
    State("lab-dataset", "data"),
    State("lab-mlps", "value"),
    State("lab-estimator", "value"),
    State("lab-mc", "value"),
    State("lab-budgets", "value"),
    background=True,
    running=[(Output("lab-sweep", "disabled"), True, False), (Output("lab-sweep-cancel", "disabled"), False, True),
             (Output("lab-sweep-wrap", "style"), SHOWN, HIDDEN)],
    progress=[Output("lab-sweep-progress", "value"), Output("lab-sweep-progress", "label")],
    cancel=[Input("lab-sweep-cancel", "n_clicks")],
    interval=500,
    prevent_initial_call=True,
)
@priced("This budget sweep", _sweep_cost)
def _sweep(set_progress, n_clicks, dataset_key, mlps, estimator, mc, budgets):
    """Every missing point of the curve, one run each, in a job process; then the curve over the band."""
    if not n_clicks:
        return no_update
    set_progress((0, "starting…"))
    try:
        asked = _asked_sweep(dataset_key, mlps, estimator, mc, budgets)
        (spec, requests), = asked.curves
        requests = list(requests)

        def progress(index, n_points, done, n_mlps):
            set_progress((100 * (index + done / max(n_mlps, 1)) / n_points,
                          f"point {index + 1} of {n_points}: {done}/{n_mlps} MLPs"))

        run_curve(requests, on_progress=progress)
        curve, missing = stored_curve(spec, requests)
        view, _ = cached_convergence_view(get_dataset(asked.dataset))
    except Exception as exc:  # the page shows a sentence, never a traceback
        message = faults.job_error(exc)
        return dbc.Alert(["The sweep could not finish: ", message], color="danger", id="lab-sweep-error")
    link = href("/convergence", {"round": view.round_tag, "dataset": asked.dataset, "curves": spec,
                                 "budgets": asked.ladder, "mlps": asked.mlps})
    return html.Div([
        html.H5("Budget curve", className="mt-3"),
        budget_curve_panel(view, [curve], prefix="lab-curve", missing=missing),
        dcc.Link("Draw it on the convergence page (with other estimators, in MSE/Var or score)", href=link,
                 id="lab-curve-link", className="small"),
    ], id="lab-sweep-panel")
