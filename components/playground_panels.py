"""HTML building blocks of the playground: the controls, the facts about the MLP and its truth, the table
of every estimator's metered result, and the tour's restart button.

Numbers are formatted here once (``mse_text``, ``flops_text``, ``share_text``), so the page and the tests
that read it back format the core's numbers the same way.
"""

from __future__ import annotations

import dash_bootstrap_components as dbc
from dash import dcc, html

from components.figures.playground import colour_of
from components.format import integer, sci
from components.selectors import page_url
from whestboard.data import (
    MAX_DEPTH,
    MAX_WIDTH,
    MIN_DEPTH,
    MIN_WIDTH,
    SAMPLE_CHOICES,
    GeneratedMLPError,
    Shape,
    default_samples,
    describe_generated,
    parse_shape,
)
from whestboard.rules import ALL_ROUNDS
from whestboard.scoring import Playground, Scored, rulebook_for_shape

#: Monte Carlo estimator sample counts on the slider (its positions are their indices).
MC_CHOICES = (10, 30, 100, 300, 1_000, 3_000, 10_000, 30_000, 100_000, 300_000, 1_000_000)
AUTO = "auto"
GRAPH_CONFIG = {"displaylogo": False, "toImageButtonOptions": {"format": "png", "scale": 2}}


def mse_text(value: float | None) -> str:
    return sci(value, 4)


def flops_text(value: float | None) -> str:
    return sci(value, 4)


def share_text(flops: float, budget: float) -> str:
    """FLOPs as a share of the round's budget B, e.g. ``0.0123% of B``."""
    share = 100.0 * float(flops) / float(budget) if budget else float("nan")
    return f"{sci(share, 3)}% of B"


def mc_position(n: int) -> int:
    """The slider position closest to ``n`` samples."""
    return min(range(len(MC_CHOICES)), key=lambda i: abs(MC_CHOICES[i] - n))


def mc_samples(position: int | None, link_samples: int | None, default: int) -> int:
    """The Monte Carlo sample count the controls ask for.

    A link may name a count between the slider's stops (``mc=500``): it holds for as long as the slider
    stays on the stop it was drawn at, so a shared link reproduces its numbers; moving the slider
    picks a stop.
    """
    if position is None:
        return link_samples or default
    if link_samples and mc_position(link_samples) == int(position):
        return int(link_samples)
    return MC_CHOICES[int(position)]


def _label(text: str, target: str) -> dbc.Label:
    return dbc.Label(text, html_for=target, className="small fw-semibold mb-1")


def sample_options(shape: Shape | None, samples: str | None) -> list[dict]:
    """The truth-sample choices, "auto" naming the count the shape gets (``default_samples``, what a run with
    auto uses), so the control shows the value that is used; a count from a link between the choices is kept."""
    auto = f"auto (by shape: {integer(default_samples(shape.width, shape.depth))})" if shape else "auto (by shape)"
    options = [{"label": auto, "value": AUTO}] + [{"label": integer(n), "value": str(n)} for n in SAMPLE_CHOICES]
    if samples and samples not in {o["value"] for o in options} and str(samples).isdigit():
        options.append({"label": integer(int(samples)), "value": samples})
    return options


def round_options(shape: Shape | None) -> list[dict]:
    """The rounds, "by shape" naming the round the shape gets (``rulebook_for_shape``: what a run uses)."""
    auto = f"by shape: {rulebook_for_shape(shape).round_tag}" if shape else "by shape (or the current round)"
    return [{"label": auto, "value": AUTO}] + [
        {"label": f"{tag} ({rnd.shape_label}, B = {rnd.budget:.3g})", "value": tag} for tag, rnd in ALL_ROUNDS.items()]


def shape_of(width, depth, seed=0) -> Shape | None:
    """The shape the width and depth controls ask for, None while they hold no valid shape."""
    try:
        return parse_shape(width, depth, seed)
    except GeneratedMLPError:
        return None


def controls(width: int, depth: int, seed: int, samples: str, mc: int, round_tag: str | None) -> dbc.Card:
    """Shape, seed, truth samples, Monte Carlo samples, round and the session's uploads."""
    shape = shape_of(width, depth, seed)
    sample_choices, round_choices = sample_options(shape, samples), round_options(shape)
    return dbc.Card(dbc.CardBody([
        dbc.Row([
            dbc.Col([_label("Width", "pg-width"),
                     dbc.Input(id="pg-width", type="number", step=1, value=width, size="sm", debounce=True),
                     dbc.FormText(f"{MIN_WIDTH}–{MAX_WIDTH}")], md=1),
            dbc.Col([_label("Depth", "pg-depth"),
                     dbc.Input(id="pg-depth", type="number", step=1, value=depth, size="sm", debounce=True),
                     dbc.FormText(f"{MIN_DEPTH}–{MAX_DEPTH}")], md=1),
            dbc.Col([_label("Seed (mlp_seed)", "pg-seed"),
                     dbc.InputGroup([dbc.Input(id="pg-seed", value=str(seed), size="sm", debounce=True),
                                     dbc.Button("new seed", id="pg-new-seed", size="sm", color="secondary")],
                                    size="sm"),
                     dbc.FormText("an official dataset's mlp_seed gives its MLP")], md=3),
            dbc.Col([_label("Truth samples", "pg-samples"),
                     dcc.Dropdown(id="pg-samples", options=sample_choices, value=samples, clearable=False,
                                  searchable=False)], md=2),
            dbc.Col([_label("Monte Carlo estimator samples", "pg-mc"),
                     dcc.Slider(id="pg-mc", min=0, max=len(MC_CHOICES) - 1, step=1, value=mc_position(mc),
                                marks={i: {"label": sci(n, 1)} for i, n in enumerate(MC_CHOICES) if i % 2 == 0},
                                included=False, allow_direct_input=False),
                     html.Div(id="pg-mc-readout", className="small text-muted")], md=3),
            dbc.Col([_label("Round (budget B)", "pg-round"),
                     dcc.Dropdown(id="pg-round", options=round_choices, value=round_tag or AUTO, clearable=False,
                                  searchable=False)], md=2),
        ], className="g-3"),
        dbc.Row([
            dbc.Col([html.Div("Your uploaded estimators (this tab)", className="small fw-semibold"),
                     dcc.Checklist(id="pg-uploads", options=[], value=[], inline=True,
                                   inputClassName="me-1", labelClassName="me-3 small"),
                     html.Div(id="pg-uploads-hint", className="small text-muted")], md=8),
            dbc.Col([dbc.Button("Keep this MLP", id="pg-keep", size="sm", color="success", outline=True,
                                className="me-2", disabled=True),
                     dbc.Button("Tour", id="pg-tour-restart", size="sm", color="info", outline=True,
                                title="Walk through this page again")],
                    md=4, className="text-md-end align-self-end"),
        ], className="g-3 mt-1"),
    ]), className="mb-3", id="pg-controls")


def uploads_hint(count: int) -> str:
    if count:
        return "Ticked uploads run in a sandbox beside the built-ins (always as a background job)."
    return "None yet: an estimator uploaded on the Upload page shows up here to run on this MLP."


def _fact(label: str, value, value_id: str | None = None) -> html.Div:
    return html.Div([html.Div(label, className="text-muted small"),
                     html.Div(value, className="fw-semibold", id=value_id or "")], className="me-4 mb-2")


def facts(result: Playground) -> dbc.Card:
    """Where the MLP comes from, and what its truth is worth (its noise floor)."""
    shape, drawn, rulebook = result.shape, result.truth, result.rulebook
    return dbc.Card(dbc.CardBody([
        html.P(describe_generated(shape, result.generated), className="small mb-2", id="pg-provenance"),
        html.Div([
            _fact("MLP", result.generated.name, "pg-mlp-name"),
            _fact("Width x depth", shape.label),
            _fact("Round rules", f"{rulebook.round_tag} (B = {rulebook.flop_budget:.4g})", "pg-round-rules"),
            _fact("Truth samples N", integer(drawn.n_samples), "pg-truth-samples"),
            _fact("avg_variance σ²", mse_text(drawn.avg_variance), "pg-avg-variance"),
            _fact("Truth's noise floor σ²/N", mse_text(drawn.noise_floor), "pg-noise-floor"),
        ], className="d-flex flex-wrap"),
        html.P("Against this truth no estimator's expected final-layer MSE is below the noise floor: an "
               "MSE near it means 'as good as the truth can tell'. More truth samples lower the floor.",
               className="small text-muted mb-0"),
    ]), className="mb-3", id="pg-truth-facts")


def _row(position: int, scored: Scored, result: Playground) -> html.Tr:
    entry, budget = scored.entry, result.rulebook.flop_budget
    floor = result.truth.noise_floor
    final = float(entry["final_layer_mse"])
    status = "ok" if not scored.failed else (entry.get("failure_reason") or "failed")
    return html.Tr([
        html.Td([html.Span("●", style={"color": colour_of(position)}, className="me-1"), scored.label]),
        html.Td(mse_text(final), className="pg-final-mse"),
        html.Td(sci(final / floor, 3) + "×" if floor > 0 else "—"),
        html.Td(mse_text(entry["all_layers_mse"])),
        html.Td(flops_text(entry["flops_used"]), className="pg-flops"),
        html.Td(share_text(entry["flops_used"], budget)),
        html.Td(mse_text(entry["adjusted_final_layer_score"])),
        html.Td(status, className="small"),
    ], className="table-danger" if scored.failed else "", id={"type": "pg-row", "spec": scored.spec})


def summary_table(result: Playground) -> dbc.Table:
    """One row per estimator: the grader's numbers, metered by flopscope under the round's rules."""
    head = html.Thead(html.Tr([html.Th(h) for h in (
        "estimator", "final-layer MSE", "÷ noise floor", "all-layer MSE", "FLOPs", "of budget",
        "score MSE·max(0.1, C/B)", "status")]))
    rows = [_row(i, scored, result) for i, scored in enumerate(result.results)]
    return dbc.Table([head, html.Tbody(rows)], size="sm", striped=True, hover=True, responsive=True,
                     className="small mb-1", id="pg-summary")


def graph(name: str, figure, note: str | None = None) -> dbc.Card:
    body = [dcc.Graph(id=f"pg-graph-{name}", figure=figure, config=GRAPH_CONFIG)]
    if note:
        body.append(html.Div(note, className="small text-muted"))
    return dbc.Card(dbc.CardBody(body), className="mb-3 h-100")


def _progress_panel(prefix: str, height: str, status_id: str) -> html.Div:
    """A job's progress bar, status line and Cancel, hidden until the job runs (ids ``{prefix}-progress``,
    ``status_id``, ``{prefix}-cancel`` and the panel's ``{prefix}-job``)."""
    return html.Div([
        dbc.Progress(id=f"{prefix}-progress", value=0, label="", striped=True, animated=True, className="mb-2",
                     style={"height": height}),
        html.Div([html.Span(id=status_id, className="small text-muted me-3"),
                  dbc.Button("Cancel", id=f"{prefix}-cancel", size="sm", color="secondary", outline=True)]),
    ], id=f"{prefix}-job", style={"display": "none"}, className="mb-3")


def job_panel() -> html.Div:
    """Progress of the playground's job (the truth and every estimator), with Cancel."""
    return _progress_panel("pg", "1.4rem", "pg-job-status")


def keep_panel() -> html.Div:
    """Progress of keeping the MLP (a background job: its truth may take a while to draw), with Cancel."""
    return _progress_panel("pg-keep", "1.2rem", "pg-keep-status")


def kept_notice(summary: dict) -> dbc.Alert:
    key = summary["key"]
    return dbc.Alert([
        f"Kept as dataset {key} ({summary['width']} x {summary['depth']}, {integer(summary['n_samples'])} "
        "truth samples): ",
        dcc.Link("open it in the explorer", href=page_url("/explorer", key)), " or ",
        dcc.Link("score it in the lab", href=page_url("/lab", key)), ". ",
        dbc.Button("Drop it", id="pg-kept-drop", size="sm", color="secondary", outline=True, className="ms-2 py-0",
                   title="Delete this kept dataset on every machine (only you, or the organizer, can)"),
    ], color="success", className="py-2 small", id="pg-kept")
