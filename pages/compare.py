"""Compare two estimators on the MLPs both were scored on: a paired, noise-aware verdict and the error anatomy.

``/compare?a=<id>&b=<id>``; the lists offer lab runs, this tab's uploads, baselines and imported submissions
with per-MLP results, B's list only what shares MLPs with A. Every number comes from
``whestboard.compare`` (the same dict ``python -m whestboard compare --json`` prints).

Below, two budget curves (``ca=SPEC&cb=SPEC&cdataset=KEY&cbudgets=LO:HI:N&cmlps=SEL&cmetric=score|mse``):
both estimators at one ladder of budgets on the same MLPs (each point a run in the run records), and A - B
paired over MLPs at each budget (``compare.paired_curves``); "Sweep both" scores missing points in a job.
"""

from __future__ import annotations

import dash
import dash_bootstrap_components as dbc
from dash import Input, Output, State, callback, dcc, html, no_update

from components import compare_panels as panels
from components.budget_curve import budget_curve_panel
from components.figures import compare as figs
from components.shell import SESSION_UPLOADS_ID
from components.url_state import address_store, keep_address_in_step, query_string
from server import faults
from server.background import priced
from whestboard.band import cached_convergence_view
from whestboard.cache import memoize
from whestboard.compare import (
    CompareError,
    anatomy_inputs,
    anatomy_of,
    cached_side,
    candidates,
    curve_defaults,
    dataset_of,
    heatmap_of,
    paired_curves,
    stores_revision,
    verdict,
)
from whestboard.data import get_dataset, served_datasets
from whestboard.scoring import (
    Sweep,
    curve_cost,
    curve_data,
    curve_spec_choices,
    parse_sweep,
    point_summary,
    run_curve,
    stored_reports,
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


CURVE_LADDER = "0.01B:1B:5"


def _curve_choice(a: str | None, b: str | None) -> dict:
    """What the two curves open on: A's and B's estimators, dataset and shared MLPs (``compare.curve_defaults``)."""
    sides = []
    for side_id in (a, b):
        try:
            sides.append(cached_side(side_id) if side_id else None)
        except CompareError:  # the verdict says what is wrong with it
            sides.append(None)
    return curve_defaults(*sides)


def _spec_options(*chosen: str | None) -> list[dict]:
    """The curve menu, plus any chosen spec it does not list (a run's ``mc:1000``, a spec from the address)."""
    specs = curve_spec_choices()
    known = {o["value"] for o in specs}
    return specs + [{"label": v, "value": v} for v in dict.fromkeys(chosen) if v and v not in known]


def _curve_section(dataset: str | None, ca: str | None, cb: str | None, budgets: str | None, mlps: str | None,
                   metric: str | None, note: str | None = None) -> dbc.Card:
    keys = list(served_datasets())
    options = _spec_options(ca, cb)
    return dbc.Card(dbc.CardBody([
        html.H5("Two budget curves, paired per budget"),
        html.P("Both estimators at each budget of the ladder on the same MLPs, every point exactly as `score "
               "--budget B` scores it; below, A − B at each budget paired over those MLPs. They open on A's and "
               "B's estimators, dataset and shared MLPs.", className="small text-muted"),
        html.P(note, className="small text-warning-emphasis", id="compare-curve-note"),
        dbc.Row([
            dbc.Col([dbc.Label("Dataset", html_for="compare-curve-dataset", className="small fw-semibold"),
                     dcc.Dropdown(id="compare-curve-dataset", options=[{"label": k, "value": k} for k in keys],
                                  value=dataset if dataset in keys else (keys[0] if keys else None),
                                  clearable=False)], md=2),
            dbc.Col([dbc.Label("A", html_for="compare-curve-a", className="small fw-semibold"),
                     dcc.Dropdown(id="compare-curve-a", options=options, value=ca, clearable=False)], md=2),
            dbc.Col([dbc.Label("B", html_for="compare-curve-b", className="small fw-semibold"),
                     dcc.Dropdown(id="compare-curve-b", options=options, value=cb, clearable=False)], md=2),
            dbc.Col([dbc.Label("Budgets", html_for="compare-curve-budgets", className="small fw-semibold"),
                     dbc.Input(id="compare-curve-budgets", value=budgets or CURVE_LADDER, size="sm", debounce=True)],
                    md=2),
            dbc.Col([dbc.Label("MLPs", html_for="compare-curve-mlps", className="small fw-semibold"),
                     dbc.Input(id="compare-curve-mlps", value=mlps or "", size="sm", debounce=True,
                               placeholder="all")], md=1),
            dbc.Col([dbc.RadioItems(id="compare-curve-metric", value=metric if metric in ("score", "mse") else "score",
                                    className="small", options=[{"label": "score", "value": "score"},
                                                                {"label": "raw MSE", "value": "mse"}])], md=1),
            dbc.Col([dbc.Button("Sweep both", id="compare-curve-sweep", color="primary", size="sm", className="me-1"),
                     dbc.Button("Cancel", id="compare-curve-cancel", color="secondary", outline=True, size="sm",
                                disabled=True)], md=2, className="align-self-end"),
        ], className="g-2"),
        html.Div([dbc.Progress(id="compare-curve-progress", value=0, label="", striped=True, animated=True,
                               style={"height": "1.2rem"}, className="mt-2")], id="compare-curve-wrap", style=HIDDEN),
        dcc.Store(id="compare-curve-refresh", data=0),
        html.Div(id="compare-curve-status", className="small mt-2"),
        dcc.Loading(html.Div(id="compare-curve-body"), type="default", delay_show=300),
    ]), className="mt-4")


def layout(a: str | None = None, b: str | None = None, cdataset: str | None = None, ca: str | None = None,
           cb: str | None = None, cbudgets: str | None = None, cmlps: str | None = None, cmetric: str | None = None,
           **_query) -> html.Div:
    """The dropdowns start with their options: a value from the address outside its options would be dropped."""
    a, b = _one_id(a), _one_id(b)
    opens = _curve_choice(a, b)
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
        _curve_section(cdataset or opens["dataset"], ca or opens["a"], cb or opens["b"], cbudgets,
                       opens["mlps"] if cmlps is None else cmlps, cmetric, opens["note"] if not (ca or cb) else None),
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


@callback(
    Output("compare-curve-dataset", "value"),
    Output("compare-curve-a", "options"),
    Output("compare-curve-a", "value"),
    Output("compare-curve-b", "options"),
    Output("compare-curve-b", "value"),
    Output("compare-curve-mlps", "value"),
    Output("compare-curve-note", "children"),
    Input("compare-a", "value"),
    Input("compare-b", "value"),
    State("compare-curve-dataset", "value"),
    prevent_initial_call=True,
)
def _curves_follow_the_sides(a, b, dataset):
    """Picking A or B moves the two curves onto their estimators, dataset and shared MLPs."""
    opens = _curve_choice(_one_id(a), _one_id(b))
    options = _spec_options(opens["a"], opens["b"])
    return (opens["dataset"] or dataset, options, opens["a"], options, opens["b"], opens["mlps"], opens["note"])


@callback(Output("compare-address", "data"), Input("compare-a", "value"), Input("compare-b", "value"),
          Input("compare-curve-dataset", "value"), Input("compare-curve-a", "value"), Input("compare-curve-b", "value"),
          Input("compare-curve-budgets", "value"), Input("compare-curve-mlps", "value"),
          Input("compare-curve-metric", "value"), prevent_initial_call=True)
def _address(a, b, cdataset, ca, cb, cbudgets, cmlps, cmetric):
    """The address follows A and B, and the curves' choices, in place (``components.url_state``)."""
    return query_string({"a": a, "b": b, "cdataset": cdataset, "ca": ca, "cb": cb,
                         "cbudgets": None if cbudgets == CURVE_LADDER else cbudgets, "cmlps": cmlps,
                         "cmetric": None if cmetric == "score" else cmetric})


keep_address_in_step("compare-address")


# ---------------------------------------------------------------------------
# two budget curves
# ---------------------------------------------------------------------------


def _curve_sweep(dataset_key, ca, cb, budgets, mlps) -> Sweep:
    """A and B on the same MLPs and ladder, parsed once by the core (each spec one this page serves, never a
    path); its RunError names a field to fix."""
    return parse_sweep(dataset_key, [ca, cb], budgets, mlps, default_ladder=CURVE_LADDER)


def _curve_pair(dataset_key, ca, cb, budgets, mlps) -> list:
    """(spec, requests) for A and B (``_curve_sweep``'s curves)."""
    return [(spec, list(requests)) for spec, requests in _curve_sweep(dataset_key, ca, cb, budgets, mlps).curves]


@callback(
    Output("compare-curve-body", "children"),
    Input("compare-curve-dataset", "value"),
    Input("compare-curve-a", "value"),
    Input("compare-curve-b", "value"),
    Input("compare-curve-budgets", "value"),
    Input("compare-curve-mlps", "value"),
    Input("compare-curve-metric", "value"),
    Input("compare-curve-refresh", "data"),
)
def _curves(dataset_key, ca, cb, budgets, mlps, metric, _refresh):
    """The two curves (stored points) over the band, and A − B paired per budget."""
    if not dataset_key or not ca or not cb:
        return None
    metric = metric if metric in ("score", "mse") else "score"
    try:
        asked = _curve_sweep(dataset_key, ca, cb, budgets, mlps)
        pair = [(spec, list(requests)) for spec, requests in asked.curves]
        view, _ = cached_convergence_view(get_dataset(asked.dataset))
    except (ValueError, KeyError, FileNotFoundError) as exc:
        return dbc.Alert(exc.args[0] if isinstance(exc, KeyError) and exc.args else str(exc), color="warning",
                         className="py-2 small", id="compare-curve-error")
    reports = [stored_reports(requests) for _, requests in pair]
    sides = "AB" if len(pair) == 2 else ["A = B"]  # one estimator on both sides is one curve
    curves = [curve_data(f"{side}: {spec}", [point_summary(r) for r in found.values()])
              for side, (spec, _), found in zip(sides, pair, reports, strict=True)]
    missing = sum(len(requests) - len(found) for (_, requests), found in zip(pair, reports, strict=True))
    if len(pair) == 1:
        return html.Div([
            html.P(f"A and B are the same estimator ({pair[0][0]}): its curve is drawn once, and A − B is 0 at "
                   "every budget. Choose another estimator for A or B to compare two curves.",
                   className="small text-warning-emphasis", id="compare-curve-same"),
            budget_curve_panel(view, curves, prefix="compare-curve", y_axis=metric, missing=missing,
                               to_score="press Sweep both"),
        ])
    rows = paired_curves(reports[0], reports[1], metric=metric)
    return html.Div([
        budget_curve_panel(view, curves, prefix="compare-curve", y_axis=metric, missing=missing,
                           to_score="press Sweep both",
                           beside=dcc.Graph(id="compare-curve-diff", figure=figs.curve_difference_figure(rows, metric, ladder=list(asked.budgets)))),
        _difference_table(rows),
    ])


def _difference_table(rows: list[dict]) -> dbc.Table | None:
    """A − B per budget as a table; none at all while no budget has a point on either side (the figure beside
    says so), rather than headers over nothing."""
    if not rows:
        return None
    head = html.Thead(html.Tr([html.Th(h) for h in ("B", "paired MLPs", "A − B [95%]", "A lower / B lower", "p",
                                                    "verdict", "left out")]))
    body = []
    for r in rows:
        if r.get("missing"):
            body.append(html.Tr([html.Td(f"{r['budget']:.4g}"), html.Td(f"no {r['missing']} point", colSpan=6)]))
            continue
        interval = (f"{r['mean_difference']:.3g} [{r['ci_low']:.3g}, {r['ci_high']:.3g}]" if r["verdict_possible"]
                    else "none: " + (f"{r['n']} MLP(s)" if r["n"] else "no MLP") + " to pair")
        left = "; ".join(f"{side}: {text}" for side, text in (("A", r.get("failed_a")), ("B", r.get("failed_b")))
                         if text)
        body.append(html.Tr([html.Td(f"{r['budget']:.4g}"), html.Td(r["n"]), html.Td(interval),
                             html.Td(f"{r['wins']} / {r['losses']}"),
                             html.Td(f"{r['p_value']:.3g}" if r["n"] else "—"), html.Td(r["verdict"]),
                             html.Td(left)]))
    return dbc.Table([head, html.Tbody(body)], size="sm", striped=True, className="small", id="compare-curve-table")


def _sweep_cost(_n, dataset_key, ca, cb, budgets, mlps) -> float:
    return sum(curve_cost(requests) for _, requests in _curve_pair(dataset_key, ca, cb, budgets, mlps))


@callback(
    Output("compare-curve-refresh", "data"),
    Output("compare-curve-status", "children"),
    Input("compare-curve-sweep", "n_clicks"),
    State("compare-curve-dataset", "value"),
    State("compare-curve-a", "value"),
    State("compare-curve-b", "value"),
    State("compare-curve-budgets", "value"),
    State("compare-curve-mlps", "value"),
    background=True,
    running=[(Output("compare-curve-sweep", "disabled"), True, False),
             (Output("compare-curve-cancel", "disabled"), False, True),
             (Output("compare-curve-wrap", "style"), SHOWN, HIDDEN)],
    progress=[Output("compare-curve-progress", "value"), Output("compare-curve-progress", "label")],
    cancel=[Input("compare-curve-cancel", "n_clicks")],
    interval=500,
    prevent_initial_call=True,
)
@priced("This budget sweep", _sweep_cost)
def _sweep(set_progress, n_clicks, dataset_key, ca, cb, budgets, mlps):
    """Score the missing points of both curves, one run each, in a job process."""
    if not n_clicks:
        return no_update, no_update
    set_progress((0, "starting…"))
    try:
        pair = _curve_pair(dataset_key, ca, cb, budgets, mlps)
        for side, (spec, requests) in enumerate(pair):
            def progress(index, n_points, done, n_mlps, _side=side, _spec=spec):
                set_progress((100 * (_side + (index + done / max(n_mlps, 1)) / n_points) / 2,
                              f"{_spec}: point {index + 1}/{n_points}, {done}/{n_mlps} MLPs"))
            run_curve(requests, on_progress=progress)
    except Exception as exc:  # the page shows a sentence, never a traceback
        message = faults.job_error(exc)
        return n_clicks, dbc.Alert(f"The sweep could not finish: {message}", color="danger", className="py-2")
    return n_clicks, html.Span("Both curves swept.", id="compare-curve-done")
