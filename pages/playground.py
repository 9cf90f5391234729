"""Playground: any MLP from (width, depth, seed), its Monte Carlo truth, and every estimator on it at once.

URL: ``/playground?width=&depth=&seed=`` (also ``samples=``, ``mc=``, ``round=``), so a link reproduces
the page. The MLP comes from whestbench's own generator (``whestboard.data._generated``), every estimator
is metered and scored as the lab scores (``whestboard.scoring._playground``). Small shapes are answered
in the callback; large ones (or any upload) run as a background job of the app's one job system, with
progress and Cancel, and the page then draws what the job left in the cache. "Keep this MLP" is always such
a job. Every control, store and job payload is read by one parser (``scoring.parse_playground``): the
stores are conveniences, never believed.
"""

from __future__ import annotations

import dash
import dash_bootstrap_components as dbc
from dash import Input, Output, State, callback, dcc, html, no_update

from components import playground_panels as panels
from components.figures import playground as figs
from components.figures.margins import margins_panel
from components.shell import SESSION_UPLOADS_ID
from components.url_state import address_store, keep_address_in_step, query_string
from server import faults
from server.background import launching_client, priced, request_client_id
from server.switches import uploads_on
from whestboard.data import (
    GeneratedMLPError,
    KeepRefused,
    check_room,
    drop_kept,
    keep_generated,
    manifest_summary,
    parse_samples,
    parse_shape,
)
from whestboard.jobs import check_cost
from whestboard.rules import ALL_ROUNDS
from whestboard.scoring import (
    DEFAULT_MC_SAMPLES,
    Playground,
    PlaygroundRequest,
    RunError,
    cached_playground,
    parse_playground,
    play,
    playground_margins,
)

dash.register_page(__name__, path="/playground", name="Playground", order=1.5,
                   title="Playground · Whestboard")

DEFAULT_WIDTH, DEFAULT_DEPTH, DEFAULT_SEED = 16, 4, 2026
HIDDEN, SHOWN = {"display": "none"}, {"display": "block"}
MIN_MC_SAMPLES = panels.MC_CHOICES[0]
INTRO = ("Pick a shape and a seed: the MLP is made by whestbench's own generator (seed protocol 3.0), its "
         "ground truth by Monte Carlo, and every built-in estimator runs on it metered by flopscope under the "
         "round's rules, scored by whestbench's evaluate_estimator, exactly as the lab scores.")


# ---------------------------------------------------------------------------
# what the controls ask for
# ---------------------------------------------------------------------------


def _asked(width, depth, seed, samples, mc_position, round_tag, uploads, mc_link=None) -> PlaygroundRequest:
    """The controls as one request, through the core's parser (GeneratedMLPError/RunError name the field)."""
    mc = panels.mc_samples(mc_position, mc_link, DEFAULT_MC_SAMPLES)
    return parse_playground({"width": width, "depth": depth, "seed": seed, "samples": samples, "mc": mc,
                             "round": round_tag, "uploads": uploads}, uploads=uploads_on())


def _read(params) -> PlaygroundRequest:
    """A request carried by a store or a job (the same parser: a store is never believed)."""
    return parse_playground(params, uploads=uploads_on())


def _job_cost(job) -> float | None:
    """What a playground job costs before it runs: the truth, the built-ins and each upload's budget."""
    if not isinstance(job, dict):
        return None
    return _read(job.get("params")).cost


def _keep_cost(n_clicks, params) -> float:
    """What keeping costs (the truth alone); refused at once when the kept datasets have no room for it."""
    asked = _read(params)
    check_room(launching_client(), asked.shape.width, asked.shape.depth)
    return asked.keep_cost


def _search(asked: PlaygroundRequest) -> str:
    query = {"width": asked.shape.width, "depth": asked.shape.depth, "seed": asked.shape.seed}
    if not asked.samples_auto:
        query["samples"] = asked.samples
    if asked.mc != DEFAULT_MC_SAMPLES:
        query["mc"] = asked.mc
    if asked.round_tag:
        query["round"] = asked.round_tag
    return query_string(query)


# ---------------------------------------------------------------------------
# layout
# ---------------------------------------------------------------------------


def _from_link(width, depth, seed, samples, mc, round_tag) -> tuple[dict, list]:
    """Control values from the URL; a value that cannot be used is named, and the default shown."""
    problems = []
    values = {"width": DEFAULT_WIDTH, "depth": DEFAULT_DEPTH, "seed": DEFAULT_SEED, "samples": panels.AUTO,
              "mc": DEFAULT_MC_SAMPLES, "round": None}
    try:
        shape = parse_shape(width if width is not None else DEFAULT_WIDTH,
                                      depth if depth is not None else DEFAULT_DEPTH,
                                      seed if seed is not None else DEFAULT_SEED)
        values.update(width=shape.width, depth=shape.depth, seed=shape.seed)
    except GeneratedMLPError as exc:
        problems.append(f"The link's {exc}; showing the default {DEFAULT_WIDTH} x {DEFAULT_DEPTH} MLP instead.")
    for key, raw, parse in (("samples", samples, parse_samples),
                            ("mc", mc, lambda v: parse_samples(v, "Monte Carlo samples", low=MIN_MC_SAMPLES))):
        if raw is None:
            continue
        try:
            values[key] = str(parse(raw)) if key == "samples" else parse(raw)
        except GeneratedMLPError as exc:
            problems.append(f"The link's {exc}; using the default.")
    if round_tag is not None:
        if round_tag in ALL_ROUNDS:
            values["round"] = round_tag
        else:
            problems.append(f"The link names round {round_tag!r}, which is not one of "
                            f"{', '.join(ALL_ROUNDS)}; the round is picked by shape.")
    return values, problems


def layout(width=None, depth=None, seed=None, samples=None, mc=None, round=None, **_query):  # noqa: A002
    values, problems = _from_link(width, depth, seed, samples, mc, round)
    return html.Div([
        address_store("pg-address"),
        html.H2("Playground"),
        html.P(INTRO, className="text-muted"),
        html.Div([dbc.Alert(p, color="warning", className="py-2 small") for p in problems], id="pg-link-error"),
        panels.controls(values["width"], values["depth"], values["seed"], values["samples"], values["mc"],
                        values["round"]),
        dcc.Store(id="pg-mc-link", data=values["mc"]),  # the link's exact count, which may fall between stops
        dcc.Store(id="pg-params"),
        dcc.Store(id="pg-job-request"),
        dcc.Store(id="pg-job-done"),
        html.Div(id="pg-error"),
        panels.job_panel(),
        panels.keep_panel(),
        dcc.Store(id="pg-kept-name"),
        html.Div(id="pg-keep-out"),
        dcc.Loading(html.Div(id="pg-results"), type="default", delay_show=400),
    ], id="pg-page")


keep_address_in_step("pg-address")


def _render(result: Playground) -> html.Div:
    """Every view of the playground for one result."""
    figures = figs.truth_figures(result)
    focus = result.results[0]
    depth = result.shape.depth
    focus_picker = dbc.Row([
        dbc.Col(dbc.Label("Estimator", html_for="pg-focus", className="small fw-semibold"), width="auto"),
        dbc.Col(dcc.Dropdown(id="pg-focus", options=[{"label": s.label, "value": s.spec} for s in result.results],
                             value=focus.spec, clearable=False, searchable=False, style={"minWidth": "16rem"}),
                width="auto"),
        dbc.Col(dbc.Label("Layer", html_for="pg-layer", className="small fw-semibold"), width="auto"),
        dbc.Col(dcc.Dropdown(id="pg-layer", options=[{"label": f"layer {i + 1}", "value": i} for i in range(depth)],
                             value=depth - 1, clearable=False, searchable=False, style={"minWidth": "8rem"}),
                width="auto"),
    ], className="g-2 align-items-center mb-2")
    rows = [
        *[dbc.Alert(problem, color="warning", className="py-2 small pg-problem") for problem in result.problems],
        panels.facts(result),
        html.H5("Every estimator on this MLP", className="mt-2"),
        panels.summary_table(result),
        margins_panel(playground_margins(result), "pg", title="How close each estimator came to each cap",
                      item="estimator"),
        html.P("FLOPs as flopscope meters them under the round's rules; 'of budget' is the share of B; the score "
               "is the grader's per-MLP score. Monte Carlo's MSE is, in expectation, σ²/N_mc plus the truth's "
               "own floor.", className="small text-muted"),
        dbc.Row([dbc.Col(panels.graph("mse", figs.per_layer_mse_figure(result)), lg=6),
                 dbc.Col(panels.graph("means", figures["means"]), lg=6)], className="g-3 mb-1"),
        focus_picker,
        dbc.Row([dbc.Col(panels.graph("error", figs.error_heatmap_figure(result, focus)), lg=7),
                 dbc.Col(panels.graph("scatter", figs.predicted_vs_true_figure(result, focus, depth - 1)), lg=5)],
                className="g-3 mb-1"),
        dbc.Row([dbc.Col(panels.graph("ribbon", figures["ribbon"]), lg=5),
                 dbc.Col(panels.graph("weights", figures["weights"]), lg=7)], className="g-3 mb-1"),
    ]
    if "network" in figures:
        rows.append(panels.graph("network", figures["network"], note="Neurons coloured by their true mean E[h]."))
    return html.Div(rows, id="pg-result-panel")


def _failure(message: str) -> dbc.Alert:
    return dbc.Alert(message, color="warning", className="py-2", id="pg-input-error")


# ---------------------------------------------------------------------------
# callbacks: wiring only
# ---------------------------------------------------------------------------


# A new seed is drawn in the browser (an int63, as create_dataset draws them): no round trip before the work.
dash.clientside_callback(
    """
    function(n) {
        if (!n) { return window.dash_clientside.no_update; }
        const words = window.crypto.getRandomValues(new Uint32Array(2));
        return ((BigInt(words[0] & 0x7fffffff) << 32n) | BigInt(words[1])).toString();
    }
    """,
    Output("pg-seed", "value"),
    Input("pg-new-seed", "n_clicks"),
    prevent_initial_call=True,
)


@callback(Output("pg-samples", "options"), Output("pg-round", "options"), Input("pg-width", "value"),
          Input("pg-depth", "value"), State("pg-samples", "value"), prevent_initial_call=True)
def _choices(width, depth, samples):
    """The truth-sample and round choices name what "auto" and "by shape" use for the shape now asked for."""
    shape = panels.shape_of(width, depth)
    return panels.sample_options(shape, samples), panels.round_options(shape)


@callback(Output("pg-mc-readout", "children"), Input("pg-mc", "value"), State("pg-mc-link", "data"))
def _mc_readout(position, mc_link=None):
    n = panels.mc_samples(position, mc_link, DEFAULT_MC_SAMPLES)
    return f"{n:,} samples per prediction"


@callback(Output("pg-uploads", "options"), Output("pg-uploads-hint", "children"), Input(SESSION_UPLOADS_ID, "data"))
def _upload_options(uploads):
    if not uploads_on():
        return [], "Uploaded estimators are off on this server."
    entries = [u for u in (uploads or []) if isinstance(u, dict) and isinstance(u.get("upload"), str)]
    seen: dict[str, str] = {}
    for entry in entries:
        seen[entry["upload"]] = str(entry.get("label") or entry["upload"][:12])
    return [{"label": label, "value": sha} for sha, label in seen.items()], panels.uploads_hint(len(seen))


@callback(
    Output("pg-address", "data"),
    Output("pg-results", "children", allow_duplicate=True),
    Output("pg-params", "data"),
    Output("pg-job-request", "data"),
    Output("pg-keep", "disabled", allow_duplicate=True),
    Output("pg-error", "children"),
    Output("pg-keep-out", "children", allow_duplicate=True),
    Input("pg-width", "value"),
    Input("pg-depth", "value"),
    Input("pg-seed", "value"),
    Input("pg-samples", "value"),
    Input("pg-mc", "value"),
    Input("pg-round", "value"),
    Input("pg-uploads", "value"),
    State("pg-mc-link", "data"),
    prevent_initial_call="initial_duplicate",
)
def _plan(width, depth, seed, samples, mc_position, round_tag, uploads, mc_link=None):
    """Check the controls; draw at once when quick (or cached), else hand the work to a background job."""
    try:
        asked = _asked(width, depth, seed, samples, mc_position, round_tag, uploads, mc_link)
        result = cached_playground(asked.shape, asked.samples, asked.specs, asked.rulebook)
        if result is None:
            check_cost("This playground job", asked.cost)
        if result is None and asked.quick:
            result = play(asked.shape, asked.samples, asked.specs, asked.rulebook)
    except (GeneratedMLPError, RunError, ValueError, KeyError, FileNotFoundError) as exc:
        return no_update, [], None, no_update, True, _failure(faults.job_error(exc)), None
    params = asked.payload()
    if result is not None:
        return _search(asked), _render(result), params, no_update, False, None, None
    waiting = html.Div(f"{asked.shape.label} with {asked.samples:,} truth samples runs as a background job; the "
                       "plots appear when it is done.", className="small text-muted", id="pg-waiting")
    return _search(asked), waiting, params, {"params": params}, True, None, None


@callback(
    Output("pg-job-done", "data"),
    Input("pg-job-request", "data"),
    background=True,
    running=[(Output("pg-job", "style"), SHOWN, HIDDEN), (Output("pg-cancel", "disabled"), False, True)],
    progress=[Output("pg-progress", "value"), Output("pg-progress", "label"), Output("pg-job-status", "children")],
    cancel=[Input("pg-cancel", "n_clicks")],
    interval=500,
    prevent_initial_call=True,
)
@priced("This playground job", _job_cost)
def _run_job(set_progress, request):
    """The truth and every estimator, in a job process; the results land in the playground's cache."""
    if not request:
        return no_update
    params = request["params"]
    set_progress((0, "starting…", "drawing the truth"))
    try:
        asked = _read(params)
        play(asked.shape, asked.samples, asked.specs, asked.rulebook,
             progress=lambda what, fraction: set_progress((100 * fraction, f"{100 * fraction:.0f}%", what)))
    except Exception as exc:  # the page shows a sentence, never a traceback
        message = faults.job_error(exc)
        return {"params": params, "error": message}
    return {"params": params}


def _cached(params) -> Playground | None:
    """The result the controls in ``params`` (a store) name, if the cache holds it; None otherwise."""
    try:
        asked = _read(params)
        return cached_playground(asked.shape, asked.samples, asked.specs, asked.rulebook)
    except (GeneratedMLPError, RunError, ValueError, KeyError, FileNotFoundError):
        return None


@callback(
    Output("pg-results", "children", allow_duplicate=True),
    Output("pg-keep", "disabled", allow_duplicate=True),
    Input("pg-job-done", "data"),
    State("pg-params", "data"),
    prevent_initial_call=True,
)
def _show_job(done, current):
    if not isinstance(done, dict) or done.get("params") != current:
        return no_update, no_update  # a job for controls changed since
    if done.get("error"):
        return dbc.Alert(["The playground job could not finish: ", str(done["error"])], color="danger",
                         id="pg-job-error"), True
    result = _cached(current)
    if result is None:
        return dbc.Alert("The job's results are no longer in the cache; change a control to run it again.",
                         color="warning", id="pg-job-error"), True
    return _render(result), False


@callback(
    Output("pg-graph-error", "figure"),
    Output("pg-graph-scatter", "figure"),
    Input("pg-focus", "value"),
    Input("pg-layer", "value"),
    State("pg-params", "data"),
    prevent_initial_call=True,
)
def _focus(spec, layer, params):
    result = _cached(params) if params else None
    chosen = next((s for s in result.results if s.spec == spec), None) if result else None
    if chosen is None or not isinstance(layer, int) or not 0 <= layer < result.shape.depth:
        return no_update, no_update
    return figs.error_heatmap_figure(result, chosen), figs.predicted_vs_true_figure(result, chosen, int(layer))


@callback(
    Output("pg-keep-out", "children", allow_duplicate=True),
    Output("pg-kept-name", "data"),
    Input("pg-keep", "n_clicks"),
    State("pg-params", "data"),
    background=True,
    running=[(Output("pg-keep-job", "style"), SHOWN, HIDDEN), (Output("pg-keep-cancel", "disabled"), False, True)],
    progress=[Output("pg-keep-progress", "value"), Output("pg-keep-progress", "label"),
              Output("pg-keep-status", "children")],
    cancel=[Input("pg-keep-cancel", "n_clicks")],
    interval=500,
    prevent_initial_call=True,
)
@priced("Keeping this MLP", _keep_cost)
def _keep(set_progress, n_clicks, params):
    """Bake the MLP with its truth into a kept dataset, in a job process: the explorer and lab serve it next."""
    if not n_clicks or not params:
        return no_update, no_update
    set_progress((0, "starting…", "keeping this MLP"))

    def progress(done: int, total: int) -> None:
        set_progress((100 * done / total, f"{100 * done / total:.0f}%", f"truth: {done:,} of {total:,} chunks"))

    try:
        asked = _read(params)
        directory = keep_generated(asked.shape, asked.samples, owner=launching_client(), progress=progress)
        summary = manifest_summary(directory)
    except (GeneratedMLPError, ValueError, KeyError, OSError) as exc:
        return dbc.Alert(f"Could not keep this MLP: {faults.job_error(exc)}", color="danger", className="py-2 small",
                         id="pg-kept"), None
    return panels.kept_notice(summary), summary["key"]


@callback(
    Output("pg-keep-out", "children", allow_duplicate=True),
    Input("pg-kept-drop", "n_clicks"),
    State("pg-kept-name", "data"),
    prevent_initial_call=True,
)
def _drop(n_clicks, name):
    """Drop the dataset this visitor kept (the organizer drops any through the API)."""
    if not n_clicks or not name:
        return no_update
    try:
        drop_kept(name, owner=request_client_id())
    except KeepRefused as exc:
        return dbc.Alert(f"Not dropped: {exc}.", color="danger", className="py-2 small", id="pg-dropped")
    return dbc.Alert(f"Dropped kept dataset {name}: no page serves it any more.", color="secondary",
                     className="py-2 small", id="pg-dropped")
