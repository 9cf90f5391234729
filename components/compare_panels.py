"""Panels of the compare page: the link every page uses to open it, the verdict cards, the worst-neuron table.

``compare_url(a, b)`` is the one builder of ``/compare?a=<id>&b=<id>`` links; ids are ``run:<run id>``,
``sub:<submission id>`` or ``base:<dataset key>:<estimator>`` (``whestboard.compare._sides``).
"""

from __future__ import annotations

import dash_bootstrap_components as dbc
from dash import dcc, html

from components.format import sci
from components.url_state import href
from whestboard.compare import mlps_needed_text, verdict_sentence

COMPARE_PATH = "/compare"
#: Under this many shared MLPs a percentile bootstrap interval is too narrow to trust (said only where an
#: interval is drawn: under the fewest MLPs a verdict needs, none is).
SMALL_SAMPLE = 10
SMALL_SAMPLE_NOTE = (f" With fewer than {SMALL_SAMPLE} MLPs the bootstrap interval comes out too narrow; "
                     "the sign-flip p-value (exact here) is the one to trust.")


def compare_url(a: str | None, b: str | None = None) -> str:
    """``/compare?a=...&b=...`` (either may be left out: the page then asks for it)."""
    return href(COMPARE_PATH, {"a": a, "b": b})


def run_id_of(side_id: str | None) -> str | None:
    return side_id[4:] if isinstance(side_id, str) and side_id.startswith("run:") else None


def upload_options(uploads) -> list[dict]:
    """This tab's uploads that produced a run (the shared ``session-uploads`` store), newest first."""
    out = []
    for entry in reversed(uploads if isinstance(uploads, list) else []):
        if isinstance(entry, dict) and isinstance(entry.get("run_id"), str) and entry["run_id"]:
            label = str(entry.get("label") or entry["run_id"][:8])
            out.append({"label": f"your upload: {label} · {entry.get('dataset') or ''}", "value": f"run:{entry['run_id']}"})
    return out


def merged_options(first: list[dict], rest: list[dict]) -> list[dict]:
    """``first`` then ``rest``, each value once (an upload's run is listed once, under its upload's name)."""
    seen, out = set(), []
    for option in first + rest:
        if option["value"] not in seen:
            seen.add(option["value"])
            out.append(option)
    return out


def lab_url(dataset: str | None, estimator: str, mlps: str | None = None) -> str:
    """``/lab?...`` opening the lab on ``estimator`` (a spec: ``mc:0.5B`` is the lab's Monte Carlo with 0.5B)."""
    mc = estimator[3:] if estimator.startswith("mc:") else None
    return href("/lab", {"dataset": dataset, "mlps": mlps, "estimator": "mc" if mc else estimator, "mc": mc})


def _rescore_links(noise: dict) -> list:
    """Where to score each side whose predictions the noise split lacks (``noise["rescore"]``)."""
    links = [html.Li(dcc.Link(f"Score {r['side']} ({r['estimator']} on {r['dataset']}, MLPs {r['mlps']}) in the lab",
                              href=lab_url(r["dataset"], r["estimator"], r["mlps"]), id=f"compare-rescore-{r['side']}"))
             for r in noise.get("rescore") or []]
    return [html.Ul(links, className="mb-0 mt-1")] if links else []


def stat_card(stat: dict, title: str, name: str, n_available: int, public: int, card_id: str) -> dbc.Card:
    """One metric's paired verdict, every number the CLI prints; what it may claim is the core's
    (``compare.verdict_sentence``, ``compare.mlps_needed_text``): no interval where no verdict can be reached."""
    possible = stat.get("verdict_possible", True)
    none = f"none on {stat['n']} MLP(s) (at least {stat['fewest_mlps_for_a_verdict']} needed)"
    rows = [
        ("mean A", sci(stat["mean_a"], 4)), ("mean B", sci(stat["mean_b"], 4)),
        ("mean A - B", sci(stat["mean_difference"], 4)),
        ("95% interval", f"[{sci(stat['ci_low'], 4)}, {sci(stat['ci_high'], 4)}]" if possible else none),
        ("A / B (geometric mean)", f"{sci(stat['ratio'], 4)} [{sci(stat['ratio_low'], 4)}, {sci(stat['ratio_high'], 4)}]"
         if possible else f"{sci(stat['ratio'], 4)}, no interval on {stat['n']} MLP(s)"),
        ("A wins / loses / ties", f"{stat['wins']} / {stat['losses']} / {stat['ties']}"),
        ("sign-flip p", sci(stat["p_value"], 4)),
        (f"MLPs needed (95% test, 80% power; at least {stat['fewest_mlps_for_a_verdict']})",
         f"{mlps_needed_text(stat)} (public suite {public}, here {n_available})"),
    ]
    body = [html.H6(title, className="card-title"),
            html.P(verdict_sentence(stat, name), className="fw-semibold small mb-2", id=f"{card_id}-sentence"),
            html.Table(html.Tbody([html.Tr([html.Td(k, className="text-muted pe-3"), html.Td(v, id=f"{card_id}-{i}")])
                                   for i, (k, v) in enumerate(rows)]), className="small")]
    return dbc.Card(dbc.CardBody(body), id=card_id, className="h-100")


def verdict_panel(verdict: dict) -> html.Div:
    """Who is ahead on the shared MLPs, and how sure that is: the verdict's numbers as the CLI prints them."""
    n = verdict["n_shared"]
    public = verdict["public_suite_mlps"]
    noise = verdict["noise"]
    return html.Div([
        html.P([html.B("A: "), verdict["a"]["label"], html.Br(), html.B("B: "), verdict["b"]["label"], html.Br(),
                f"Paired on {n} shared MLP(s) of {verdict['a']['dataset'] or 'the same dataset'}."
                + (SMALL_SAMPLE_NOTE if n < SMALL_SAMPLE and verdict["score"].get("verdict_possible") else ""),
                *[html.Div(f"{side.upper()}: {text}; those MLPs count at the grader's fallback (the all-zero "
                           "prediction, multiplier 1.0), drawn as crosses below.", className="text-danger",
                           id=f"compare-failures-{side}")
                  for side, text in (verdict.get("failures") or {}).items() if text]],
               className="small", id="compare-sides"),
        dbc.Row([
            dbc.Col(stat_card(verdict["score"], "Score (mean MSE x multiplier)", "score", n, public, "compare-score"), md=6),
            dbc.Col(stat_card(verdict["final_layer_mse"], "Final-layer MSE", "final-layer MSE", n, public,
                              "compare-mse"), md=6),
        ], className="g-3 mb-2"),
        dbc.Alert(noise["sentence"] if noise.get("available") else [noise["reason"], *_rescore_links(noise)],
                  color="info" if noise.get("available") else "secondary", className="small py-2", id="compare-noise"),
        dbc.Alert(verdict["blas"]["sentence"], color="warning", className="small py-2", id="compare-blas")
        if (verdict.get("blas") or {}).get("same") is False else None,
        html.P(("Reference noise: sigma_i^2 taken as each MLP's avg_variance over N_ref = "
                f"{noise['n_reference_samples']:,} samples (the reference stores no per-neuron variance)."
                if noise.get("available") else ""), className="text-muted small"),
    ], id="compare-verdict-panel")


def worst_table(rows: list[dict], has_b: bool) -> dbc.Table:
    """The neurons where A's error is largest (or, with B, where A loses most to B), any layer."""
    head = ["MLP", "layer", "neuron", "true mean", "A", "A sq. error", "A layer MSE"]
    if has_b:
        head += ["B", "B sq. error", "B layer MSE"]
    body = []
    for r in rows:
        cells = [r["mlp_index"], r["layer"], r["neuron"], sci(r["truth"], 4), sci(r["predicted_a"], 4),
                 sci(r["sq_error_a"]), sci(r["layer_mse_a"])]
        if has_b:
            cells += [sci(r["predicted_b"], 4), sci(r["sq_error_b"]), sci(r["layer_mse_b"])]
        body.append(html.Tr([html.Td(c) for c in cells]))
    return dbc.Table([html.Thead(html.Tr([html.Th(h) for h in head])), html.Tbody(body)], size="sm", striped=True,
                     className="small", id="compare-worst")
