"""Home: every served dataset, its round and how fine an error its reference resolves."""

from __future__ import annotations

import dash
import dash_bootstrap_components as dbc
from dash import html

from components.format import integer, sci
from whestboard.data import broken_datasets, dataset_overview, datasets_for_round
from whestboard.rules import ALL_ROUNDS

dash.register_page(__name__, path="/", name="Home", order=0, title="Whestboard")

NOISE_HELP = (
    "Noise floor = mean avg_variance / N_ref: the MSE the reference's own sampling error adds. "
    "Differences below it cannot be resolved with this data."
)
MCB_HELP = "MC@B: the expected final-layer MSE of spending the whole budget on Monte Carlo sampling."


def _mlp_count(r: dict) -> str:
    held = r["n_held"]
    text = f"{r['n_mlps']} readable of {held}" if r["damaged"] else f"{held}"
    if r["declared_n_mlps"] not in (None, held):
        text += f" of {r['declared_n_mlps']}"
    return text + (f" ({len(r['damaged'])} damaged)" if r["damaged"] else "")


def _dataset_rows(overview: list[dict]) -> list:
    rows = []
    for r in overview:
        ratio = r["mc_at_bm"] / r["noise_floor"] if r["mc_at_bm"] and r["noise_floor"] else None
        rows.append(
            html.Tr(
                [
                    html.Td(dbc.NavLink(r["key"], href=f"/explorer?dataset={r['key']}", className="p-0")),
                    html.Td(r["round"] or "custom"),
                    html.Td(r["shape"]),
                    html.Td(sci(r["budget"])),
                    html.Td(_mlp_count(r), title=f"Figures are over {r['aggregate_basis']}."),
                    html.Td(integer(r["n_samples"])),
                    html.Td(sci(r["noise_floor"])),
                    html.Td(sci(r["mc_at_bm"])),
                    html.Td(sci(ratio, 2) + "x" if ratio else "—"),
                    html.Td(r["format"], className="text-muted small"),
                ],
                className="dataset-row",
            )
        )
    return rows


def _datasets_table(overview: list[dict]) -> dbc.Table:
    header = html.Thead(
        html.Tr(
            [
                html.Th("Dataset"),
                html.Th("Round"),
                html.Th("Width x depth"),
                html.Th("Budget B"),
                html.Th("MLPs"),
                html.Th("Reference samples"),
                html.Th("Noise floor", title=NOISE_HELP),
                html.Th("MC@B", title=MCB_HELP),
                html.Th("MC@B / floor", title="How many times above the noise floor MC@B sits."),
                html.Th("Format"),
            ]
        )
    )
    return dbc.Table([header, html.Tbody(_dataset_rows(overview))], hover=True, size="sm", id="datasets-table")


def _served_for(tag: str) -> html.Td:
    served = datasets_for_round(tag)
    if served:
        return html.Td(", ".join(d.info.key for d in served))
    return html.Td(
        f"none — bake one: python -m whestboard bake --round {tag} --n-mlps 8 --samples 1048576 --out data/{tag}",
        className="text-muted small",
    )


def _rounds_table() -> dbc.Table:
    header = html.Thead(
        html.Tr([html.Th(h) for h in ("Round", "Width x depth", "Budget B", "Residual time", "Wall cap",
                                      "FLOPs per MC sample", "MC samples at B", "Datasets served")])
    )
    body = [
        html.Tr(
            [
                html.Td(r.tag),
                html.Td(r.shape_label),
                html.Td(sci(r.budget)),
                html.Td(r.residual_rule),
                html.Td(f"{r.wall_time_limit_s:g} s"),
                html.Td(integer(r.mc_flops_per_sample)),
                html.Td(f"{r.mc_samples_at_budget:,.1f}"),
                _served_for(r.tag),
            ]
        )
        for r in ALL_ROUNDS.values()
    ]
    return dbc.Table([header, html.Tbody(body)], size="sm", id="rounds-table")


def _broken_alerts() -> list:
    return [
        dbc.Alert(f"Could not open {b.path}: {b.reason}", color="warning", className="py-2")
        for b in broken_datasets()
    ]


def _damaged_alerts(overview: list[dict]) -> list:
    """One alert per dataset with damaged MLPs: each file and reason, and what its figures leave out."""
    alerts = []
    for r in overview:
        if not r["damaged"]:
            continue
        items = [html.Li([f"MLP {d['index']}: ", html.Code(d["path"]), f": {d['reason']}"]) for d in r["damaged"][:10]]
        if len(r["damaged"]) > 10:
            items.append(html.Li(f"… and {len(r['damaged']) - 10} more (see /healthz)"))
        alerts.append(dbc.Alert([
            html.Div([html.Span(r["key"], className="fw-semibold"),
                      f": damaged MLP files; the other MLPs are served and its figures are over {r['aggregate_basis']}."]),
            html.Ul(items, className="mb-1"),
            html.Div(r["damaged"][0]["remedy"], className="small"),
        ], color="warning", className="py-2 damaged-dataset"))
    return alerts


#: The most datasets kept from the playground listed here; the rest are counted (the page stays small however
#: many the operator lets visitors keep).
KEPT_ON_HOME = 20


def _bounded(overview: list[dict]) -> tuple[list[dict], int]:
    """The rows listed (every dataset but the kept ones past ``KEPT_ON_HOME``) and how many kept ones are not."""
    kept = [r for r in overview if r.get("kept")]
    listed = [r for r in overview if not r.get("kept")] + kept[:KEPT_ON_HOME]
    return listed, max(0, len(kept) - KEPT_ON_HOME)


def layout(**_query) -> html.Div:
    overview, unlisted = _bounded(dataset_overview())
    return html.Div(
        [
            html.H2("Datasets"),
            html.P(
                "Each dataset's reference was baked by Monte Carlo; an error measured against it is only "
                "meaningful above its noise floor. " + MCB_HELP,
                className="text-muted",
            ),
            *_broken_alerts(),
            *_damaged_alerts(overview),
            _datasets_table(overview),
            html.P(f"{unlisted} more datasets kept from the playground are served but not listed here "
                   "(python -m whestboard datasets lists them all).", className="small text-muted",
                   id="kept-unlisted") if unlisted else None,
            html.H4("Rounds", className="mt-4"),
            html.P("Rulebooks straight from whestbench.budget.ROUNDS.", className="text-muted small"),
            _rounds_table(),
        ]
    )
