"""Leaderboard: every graded submission of a round against the FLOPs it spent, rankings, timeline.

``/leaderboard?round=TAG&team=NAME`` (plus ``y=score|mse``, ``x=flops|compute`` and ``split=public|private|rerun``).
The organizer's integrity views (the private and rerun rankings, public against private, the
overfitting flags) are computed on the server only for a request carrying the organizer token
(``whestboard.leaderboard._auth``); without it a callback answers with the public split and no
number computed from withheld MLPs.
Changing the round follows a link (a new page render); highlighting a team
only patches the highlight traces and rewrites the address in place with
``history.replaceState``, so 10,000 dots are not resent. A round of more than
``figs.DOT_LIMIT`` graded submissions is drawn as density bins counted on the server plus
every team's best, the frontier and the edge outliers; zooming patches in the dots of the
window, read from the store, when at most ``figs.DOT_LIMIT`` lie there. Every figure is
cached without a team; a team's dots are read by team. The ranking is a plain table
(``components.paged_table``: no JavaScript bundle of its own) sorted, filtered and paged on the server,
one page of rows per response, so no response grows with the field; its sort, page and filter are in
the address (``sort=-vs_mc&page=2&filter=NAME``). Nothing on this page
writes to a ``dcc.Location``: a Location whose props went stale would push the
old address back and re-render the page. Organizer actions (upload, edit, delete) check the token on the
server through ``whestboard.leaderboard._auth``, exactly as the HTTP API does.
"""

from __future__ import annotations

import base64
import functools
from dataclasses import replace
from typing import NamedTuple

import dash
import dash_bootstrap_components as dbc
from dash import ALL, Input, Output, State, callback, clientside_callback, ctx, dcc, html, no_update

from components.compare_panels import compare_url
from components.figures import leaderboard as figs
from components.figures import standings as standings_figs
from components.figures.convergence import empty_figure
from components.figures.margins import margins_panel
from components.final_pairs import DECIDED_BY, pair_list, rank_text
from components.format import exponent, sci, significant
from components.paged_table import (
    Column,
    DrawnPage,
    TableState,
    body_rows,
    page_holding,
    paged_table,
    sort_labels,
    table_page,
)
from components.url_state import address_store, keep_address_in_step, query_string
from server.api import EXPORT_PATH, MLP_EXPORT_PATH
from server.switches import uploads_on
from server.warm import register_warmer
from whestboard import config
from whestboard.band import band_frame
from whestboard.cache import memoize
from whestboard.leaderboard import (
    FLAG_LABELS,
    FLOPS_CV_GAP_LIMIT,
    FLOPS_MEAN_RATIO_LIMIT,
    OVERFIT_ALPHA,
    READ_ERRORS,
    RESCORE_ERRORS,
    RESIDUAL_ACCURACY_FACTOR,
    RESIDUAL_SHARE_LIMIT,
    SPLITS,
    STATUSES,
    TIE_POWER,
    WRITE_ERRORS,
    FlaggedTeam,
    ImportRejected,
    OrganizerDenied,
    Upload,
    all_points,
    best_candidates,
    best_per_team,
    board,
    board_revision,
    compare_pair,
    default_round,
    delete_submission,
    edit_submission,
    failure_sentences,
    final_view,
    import_uploads,
    in_window,
    is_organizer,
    organizer_actions_enabled,
    organizer_flag_count,
    queue_rescore,
    ranking_frame,
    ranking_row,
    reference_fingerprint,
    require_organizer,
    rescore_progress,
    round_counts,
    round_field,
    round_reference,
    stored_margins,
    submission_count,
    submissions_frame,
    team_of_round,
    team_points,
    team_view,
    timeline_points,
    versions_warning,
    viewer_board,
)
from whestboard.rules import ALL_ROUNDS, get_round
from whestboard.scoring import UPLOADS_OFF

dash.register_page(__name__, path="/leaderboard", name="Leaderboard", order=4, title="Leaderboard · Whestboard",
                   preload=("graph", "dropdown", "upload", "plotly"))

PATH = "/leaderboard"
Y_CHOICES = [{"label": "score", "value": "score"}, {"label": "final-layer MSE", "value": "mse"}]
X_CHOICES = [{"label": "FLOPs F", "value": "flops"}, {"label": "charged compute C", "value": "compute"}]
GRAPH_CONFIG = {"displaylogo": False, "doubleClick": "reset", "scrollZoom": False,
                "modeBarButtonsToRemove": ["select2d", "lasso2d"]}
MCB_NOTE = (
    "MC@B is the expected score of spending the whole budget on Monte Carlo sampling, from the mean "
    "avg_variance of the MLPs a submission was scored on when known (every baseline), else of the round's "
    "embedded dataset."
)


# ---------------------------------------------------------------------------
# data access (through the domain core, cached per store revision)
# ---------------------------------------------------------------------------


def _mc_reference(round_tag: str) -> figs.McReference:
    rnd = get_round(round_tag)
    ref = round_reference(round_tag)
    return figs.McReference(
        budget=float(rnd.budget),
        mc_flops_per_sample=float(rnd.mc_flops_per_sample),
        mean_avg_variance=ref.mean_avg_variance if ref else None,
        noise_floor=ref.noise_floor if ref else None,
        dataset_key=ref.dataset_key if ref else None,
        band=_band(round_tag),
        mc_at_b=rnd.mc_at_bm(ref.mean_avg_variance) if ref and ref.mean_avg_variance > 0 else None,
    )


def _band(round_tag: str):
    """The round's measured Monte Carlo band, or None (the analytic line stands in)."""
    try:
        return band_frame(round_tag)
    except Exception:  # noqa: BLE001 - an unreadable band must not take the leaderboard down
        return None


SPLIT_CHOICES = [{"label": "public", "value": "public"}, {"label": "private (organizer)", "value": "private"},
                 {"label": "rerun of the nominated (organizer)", "value": "rerun"}]
COLOUR_DEFAULT = "flag"
COLOUR_CHOICES = [{"label": "colour: flag", "value": "flag"}, {"label": "colour: F / C", "value": "share"}]
COLOUR_VALUES = tuple(c["value"] for c in COLOUR_CHOICES)


def _query(round_tag: str, team: str | None, y: str, x: str, split: str = "public",
           standings: str | None = None, ranking: TableState | None = None, colour: str = COLOUR_DEFAULT) -> str:
    params = {"round": round_tag, "team": team or None, "y": None if y == "score" else y,
              "x": None if x == "flops" else x, "split": None if split == "public" else split,
              "standings": None if standings in (None, STANDINGS_DEFAULT) else standings,
              "colour": None if colour not in COLOUR_VALUES or colour == COLOUR_DEFAULT else colour,
              **(ranking.query() if ranking else {})}
    return query_string(params)


# ---------------------------------------------------------------------------
# layout
# ---------------------------------------------------------------------------


def layout(round: str | None = None, team: str | None = None, y: str | None = None,  # noqa: A002
           x: str | None = None, split: str | None = None, standings: str | None = None, sort: str | None = None,
           page: str | None = None, filter: str | None = None, colour: str | None = None,  # noqa: A002
           **_query) -> html.Div:
    problem = None
    if round and round not in ALL_ROUNDS:
        problem = f"There is no round called {round!r}; showing {default_round()}. Known rounds: {', '.join(ALL_ROUNDS)}."
    round_tag = round if round in ALL_ROUNDS else default_round()
    y = y if y in figs.Y_METRICS else "score"
    x = x if x in figs.X_METRICS else "flops"
    split = split if split in SPLITS else "public"
    ranking = TableState.from_query(RANKING_COLUMNS, sort, page, filter)
    standings = standings if standings in STANDINGS_TABS else STANDINGS_DEFAULT
    colour = colour if colour in COLOUR_VALUES else COLOUR_DEFAULT
    first = _first_view(round_tag, team or None, y, x, split, standings, ranking, colour)
    return html.Div(
        [
            html.H2("Leaderboard"),
            html.P(
                "Every graded submission as a dot at the FLOPs it spent per MLP, over what Monte Carlo sampling "
                "reaches with the same FLOPs. Drag to zoom, double-click to reset; hover a dot for its details.",
                className="text-muted",
            ),
            dbc.Alert(problem, color="warning", id="lb-problem") if problem else None,
            _controls(round_tag, team, y, x, split, standings, ranking, first.team_options, colour),
            html.Div(first.summary, id="lb-summary", className="small text-muted mb-2"),
            dcc.Loading(dcc.Graph(id="lb-scatter", figure=first.scatter, config=GRAPH_CONFIG,
                                  style={"height": "560px"}), delay_show=300),
            html.Div(id="lb-zoom-note", className="small text-muted"),
            html.H4("Ranking", className="mt-4"),
            dbc.Row([
                dbc.Col(html.Label("Split", className="col-form-label-sm fw-semibold"), width="auto"),
                dbc.Col(dbc.RadioItems(id="lb-split", options=SPLIT_CHOICES, value=split, inline=True),
                        width="auto", className="small"),
            ], className="g-2 align-items-center"),
            html.P(
                "Each team's best graded submission on the chosen split's MLPs (the rerun: nominated submissions "
                "only). The interval is a 95% bootstrap over its MLPs; “≈ leader” marks a team a paired "
                "sign-flip test on the MLPs both were scored on cannot tell apart from the leader (p ≥ 0.05). "
                "Click a team to open its history. The private and rerun splits need the organizer token "
                "(under “Organizer” below).",
                className="text-muted small",
            ),
            html.Div(first.split_note, id="lb-split-note"),
            _versions_warning_slot(first.versions_warning),
            _ranking_table(ranking, first.ranking),
            _integrity_section(first),
            _standings_section(standings, first.standings),
            html.H4("Timeline", className="mt-4"),
            html.P(MCB_NOTE + " Rounds are shaded from their first to their last submission; baseline submissions "
                   "are placed at the time the sweep graded them.", className="text-muted small"),
            html.Div(dcc.Loading(dcc.Graph(id="lb-timeline", figure=_timeline_placeholder(), config=GRAPH_CONFIG,
                                           style={"height": "420px"}), delay_show=300),
                     **{"data-lazy-store": "lb-timeline-wanted"}),
            _export_row(),
            _organizer_panel(),
            dcc.Store(id="lb-round", data=round_tag),
            dcc.Store(id="lb-revision", data=0),
            dcc.Store(id="lb-highlight-index", data=first.highlight_index),
            dcc.Store(id="lb-timeline-index"),
            dcc.Store(id="lb-timeline-wanted"),
            dcc.Store(id="lb-zoom-request"),
            dcc.Store(id="lb-ranking-state", data=ranking.to_store()),
            address_store("lb-address"),
        ]
    )


class FirstView(NamedTuple):
    """What the page shows when it opens, drawn in its layout by the callbacks' own functions.

    The layout carries it, so opening the page costs the one layout request: the page's callbacks wait
    for the viewer's first change (``prevent_initial_call``). Fired on load, they were seven requests
    after the layout, each re-reading what the layout request had just checked, and at 500,000
    submissions the last of them answered a second or more after the page had drawn. The timeline,
    below the fold and two thirds of the bytes, is drawn when it scrolls into view (``_render_timeline``).
    A named tuple: Dash executes a page module before it is in ``sys.modules``, where a dataclass
    cannot be made."""

    scatter: dict
    highlight_index: int | None
    summary: object
    team_options: list
    split_note: object
    flags: object
    ties: object
    ranking: DrawnPage | None
    versions_warning: object
    team_panel: object
    pubpriv: object
    pubpriv_note: object
    standings: tuple
    colour: str


def _first_view(round_tag: str, team: str | None, y: str, x: str, split: str, standings: str,
                ranking: TableState, colour: str = COLOUR_DEFAULT) -> FirstView:
    """The public view the address asks for (the organizer token is typed after the page opens)."""
    scatter, index, summary, options, split_note, flags, ties = _render_board(y, x, 0, split, None, round_tag, team)
    pubpriv, pubpriv_note = _render_public_private(colour, None, 0, team, round_tag)
    return FirstView(
        scatter=scatter, highlight_index=index, summary=summary, team_options=options, split_note=split_note,
        flags=flags, ties=ties, ranking=_ranking_page(round_tag, split, False, team, ranking),
        versions_warning=_render_versions_warning(0, split, None, round_tag),
        team_panel=_render_team_panel(team, 0, None, round_tag), pubpriv=pubpriv, pubpriv_note=pubpriv_note,
        standings=_render_standings(standings, None, 0, team, round_tag), colour=colour,
    )


def _round_links(round_tag: str, team: str | None, y: str, x: str, split: str, standings: str | None,
                 ranking: TableState, colour: str = COLOUR_DEFAULT) -> html.Div:
    """Plain links (no callback touches the shared Location): choosing a round navigates, keeping the view
    (a link to another round starts at its ranking's first page); ``_address`` keeps them in step."""
    first_page = replace(ranking, page=1)
    return html.Div(
        [
            dcc.Link(f"{tag} ({r.shape_label})", href=PATH + _query(tag, team, y, x, split, standings, first_page, colour),
                     id={"type": "lb-round-link", "round": tag},
                     className="btn btn-sm me-1 " + ("btn-primary active" if tag == round_tag else "btn-outline-primary"))
            for tag, r in ALL_ROUNDS.items()
        ],
        id="lb-round-choice",
    )


def _controls(round_tag: str, team: str | None, y: str, x: str, split: str, standings: str | None,
              ranking: TableState, team_options: list, colour: str = COLOUR_DEFAULT) -> dbc.Row:
    return dbc.Row(
        [
            dbc.Col(html.Label("Round", className="col-form-label-sm fw-semibold"), width="auto"),
            dbc.Col(_round_links(round_tag, team, y, x, split, standings, ranking, colour), width="auto"),
            dbc.Col(html.Label("Highlight team", className="col-form-label-sm fw-semibold"), width="auto"),
            dbc.Col(dcc.Dropdown(id="lb-team", value=team or None, options=team_options,
                                 placeholder="choose a team…", clearable=True, style={"minWidth": "16rem"}),
                    width="auto"),
            dbc.Col(dbc.RadioItems(id="lb-y", options=Y_CHOICES, value=y, inline=True), width="auto",
                    className="small"),
            dbc.Col(dbc.RadioItems(id="lb-x", options=X_CHOICES, value=x, inline=True), width="auto",
                    className="small"),
        ],
        className="g-2 align-items-center mb-2",
    )


def _compare_link(row: dict):
    """The row's link to its paired comparison with the leader (``_compare_cell``); empty without one."""
    link = row.get("compare")
    return dcc.Link(link[0], href=link[1]) if link else ""


def _times(value) -> str:
    return "—" if value is None else significant(value) + "x"


def _verdict_cell(row: dict) -> list:
    """The paired verdict against the leader, and the link that opens that comparison."""
    link = _compare_link(row)
    return [row["vs_leader"], html.Span(link, className="cell-note")] if link else [row["vs_leader"]]


def _failed_cell(row: dict) -> str:
    """Failed MLPs of how many, and by kind (the failure vocabulary): a count, never a flag."""
    failed, total = row.get("n_failed_mlps"), row.get("n_mlps")
    text = "—" if failed is None else f"{failed}" + ("" if total is None else f" of {total}")
    return text + (f" ({row['failures']})" if row.get("failures") else "")


def _submitted_cell(row: dict) -> list:
    return [row["submitted"], html.Span(row["submission_id"], className="cell-note")]


def _priced_cell(row: dict) -> list:
    return [row["priced_with"], html.Span(f"seed protocol {row['seed_protocol']}", className="cell-note")]


#: The ranking's columns; a header sorts by the board's own numbers (the score text by the score). Their
#: widths sum to less than the page's at 1440 px (``fit``): every column shows, the Flags column takes the rest.
RANKING_COLUMNS = [
    Column("rank", "#", sort_by=("rank",), numeric=True, width="2.5rem"),
    Column("team", "Team", sort_by=("team",), clickable=True, width="9rem",
           tooltip="Click a team to open its history and highlight its dots."),
    Column("vs_leader", "vs leader", width="9rem", cell=_verdict_cell,
           tooltip="Paired sign-flip test of the per-MLP score difference on the MLPs both were scored on; the "
                   "link opens that paired comparison (public suite)."),
    Column("score_text", "Score (95% CI)", sort_by=("adjusted_score",), value="adjusted_score", width="8.5rem",
           tooltip="Mean adjusted score; interval from resampling its MLPs (bootstrap)."),
    Column("vs_mc", "x better than MC@B", sort_by=("vs_mc",), numeric=True, fmt=_times, width="5.5rem"),
    Column("final_layer_mse", "Final-layer MSE", sort_by=("final_layer_mse",), numeric=True, fmt=exponent,
           width="5.5rem",
           tooltip="Mean final-layer MSE against the reference; differences below the reference noise floor "
                   "(in the summary above the plot) cannot be resolved."),
    Column("mean_flops_used", "Mean FLOPs", sort_by=("mean_flops_used",), numeric=True, fmt=exponent, width="5.5rem"),
    Column("mean_multiplier", "Multiplier", sort_by=("mean_multiplier",), numeric=True, fmt=significant,
           width="5.5rem"),
    Column("n_failed_mlps", "Failed MLPs", sort_by=("n_failed_mlps",), value="n_failed_mlps", cell=_failed_cell,
           width="5.5rem", tooltip="Failed MLPs of the MLPs scored, by kind (each scored as the zero prediction)."),
    Column("flags", "Flags", title=True,
           tooltip="Integrity flags (the list under “Integrity” below, the same words): " + ", ".join(
               FLAG_LABELS.values()) + ". Ties and failed MLPs are not flags."),
    Column("submitted", "Submitted (UTC)", sort_by=("submitted_at",), cell=_submitted_cell, width="8rem",
           tooltip="When it was submitted, and its submission id."),
]


def _integrity_section(first: FirstView) -> html.Div:
    """Flags, ties, the team panel and (organizer) public against private."""
    return html.Div([
        html.H5("Integrity", className="mt-3"),
        html.Div(first.ties, id="lb-ties", className="small mb-2"),
        html.Div(first.flags, id="lb-flags", className="small"),
        html.P(
            f"Flags (the ranking's Flags column says the same): residual arbitrage where residual time is "
            f"priced, when almost all of the charged compute is residual wall time (F / C < "
            f"{RESIDUAL_SHARE_LIMIT:g}) and the final-layer MSE is more than {RESIDUAL_ACCURACY_FACTOR:g}x below the "
            "best a shipped baseline reaches with at most its metered FLOPs: accuracy bought outside "
            "flopscope's meter (a small F / C alone is no sign: an estimator that spends few FLOPs gets one "
            "from interpreter overhead, as mean propagation does); meter tampering when the sandbox saw the "
            f"estimator make flopscope count less; overfitting (organizer) when a one-sided permutation test of "
            f"private minus public mean score over the per-MLP scores gives p < {OVERFIT_ALPHA:g}, or FLOPs "
            f"differ when their means on the halves differ by more than {FLOPS_MEAN_RATIO_LIMIT:g}x or their "
            f"coefficients of variation by more than {FLOPS_CV_GAP_LIMIT:g}. Ties with the next rank and failed "
            "MLPs are not flags (see “vs leader”, “Failed MLPs” and the sentence above). Extra MLPs: how many more "
            f"paired MLPs a test at 5% separates #1 from #2 with {TIE_POWER:.0%} power, from the "
            "spread of their per-MLP differences.",
            className="text-muted small",
        ),
        html.Div(first.team_panel, id="lb-team-panel", className="mt-2"),
        dbc.Row([
            dbc.Col(html.H6("Public against private (organizer)", className="mb-0"), width="auto"),
            dbc.Col(dbc.RadioItems(id="lb-colour", options=COLOUR_CHOICES, value=first.colour, inline=True),
                    width="auto", className="small"),
        ], className="g-2 align-items-center mt-3"),
        html.Div(first.pubpriv_note, id="lb-pubpriv-note", className="small text-muted"),
        dcc.Graph(id="lb-pubpriv", figure=first.pubpriv, config=GRAPH_CONFIG, style={"height": "460px"}),
    ])


def _ranking_table(state: TableState, drawn: DrawnPage | None) -> html.Div:
    return paged_table(RANKING_ID, RANKING_COLUMNS, filter_placeholder="filter by team or submission id…",
                       filter_value=state.filter, drawn=drawn, fit=True)


def _export_row() -> dbc.Row:
    """Links to the HTTP API's exports: streamed by the server, formulas escaped, one code path for both."""

    return dbc.Row(
        [
            dbc.Col(dbc.Button("Download submissions CSV", id="lb-export", size="sm", color="secondary",
                               outline=True, href=dash.get_relative_path(EXPORT_PATH), external_link=True,
                               download="whestboard-submissions.csv"), width="auto"),
            dbc.Col(dbc.Button("Download per-MLP CSV", id="lb-export-mlps", size="sm", color="secondary",
                               outline=True, href=dash.get_relative_path(MLP_EXPORT_PATH), external_link=True,
                               download="whestboard-submissions.per_mlp.csv"), width="auto"),
            dbc.Col(html.Span("Every submission in the import schema (docs/submissions-schema.md); "
                              "also at /api/submissions.csv.", className="text-muted small"), width="auto"),
        ],
        className="g-2 align-items-center mt-3",
    )


def _organizer_panel() -> dbc.Accordion:
    enabled = organizer_actions_enabled()
    notice = (
        "Organizer actions need the organizer token; the server checks it on every action."
        if enabled else
        "Organizer actions are disabled on this server: WHESTBOARD_ORGANIZER_TOKEN is not set."
    )
    body = [
        dbc.Alert(notice, color="info" if enabled else "secondary", className="py-2 small", id="lb-org-notice"),
        dbc.Input(id="lb-token", type="password", placeholder="organizer token (also opens the private views)",
                  size="sm", className="mb-2", autoComplete="off", debounce=True),
        dcc.Link("Run the final evaluation (rerun the nominated on a fresh private suite)", href="/final", id="lb-final-link"),
        html.H6("Import"),
        dbc.Row([
            dbc.Col(dbc.Input(id="lb-import-team", placeholder="team (for whest run reports and grader records)",
                              size="sm")),
            dbc.Col(dbc.Input(id="lb-import-id", placeholder="submission id (optional, one report)", size="sm")),
            dbc.Col(dbc.Select(id="lb-import-split", options=[{"label": f"reports' split: {s}", "value": s}
                                                                 for s in SPLITS],
                               value="public", size="sm"), width=3),
        ], className="g-2 mb-2"),
        dcc.Upload(
            id="lb-upload", multiple=True, max_size=si_max_bytes(),
            children=html.Div(["Drop submission files here or ", html.A("choose files"),
                               html.Span(" (.csv / .parquet with optional .per_mlp file, whest run .json, or the "
                                         "grader's own AIcrowd record .json)", className="text-muted")]),
            style={"border": "1px dashed #999", "borderRadius": "6px", "padding": "14px", "textAlign": "center"},
        ),
        html.H6("Edit or delete", className="mt-3"),
        dbc.Row([
            dbc.Col(dbc.Input(id="lb-edit-id", placeholder="submission id", size="sm"), width=4),
            dbc.Col(dbc.Input(id="lb-edit-team", placeholder="new team name", size="sm"), width=3),
            dbc.Col(dbc.Select(id="lb-edit-status", options=[{"label": s, "value": s} for s in STATUSES],
                               placeholder="status", size="sm"), width=2),
            dbc.Col(dbc.Button("Save", id="lb-edit", size="sm", color="primary"), width="auto"),
            dbc.Col(dbc.Button("Delete", id="lb-delete", size="sm", color="danger", outline=True), width="auto"),
        ], className="g-2"),
        html.Div(id="lb-org-result", className="mt-2"),
        *_rescore_controls(),
    ]
    return dbc.Accordion([dbc.AccordionItem(body, title="Organizer: import, edit, delete, re-score")],
                         start_collapsed=True, className="mt-4", id="lb-organizer")


def si_max_bytes() -> int:
    """The one upload limit (WHESTBOARD_UPLOAD_MAX_MB), read when the page is drawn."""
    return config.upload_max_bytes()


# ---------------------------------------------------------------------------
# rendering
# ---------------------------------------------------------------------------


def _compare_cell(row: dict, leader: str | None) -> tuple[str, str] | None:
    """The link (text, address) to the paired comparison of this row's submission with the leader's (the view
    model's ``compare_pair``); None when the submission has no per-MLP results (nothing to pair)."""
    pair = compare_pair(row, leader)
    if pair is None:
        return None
    own, other = pair
    return ("compare", compare_url(own)) if other is None else ("vs #1", compare_url(own, other))


RANKING_ID = "lb-ranking"
#: What the ranking's filter box matches (plain text, any case).
FILTER_FIELDS = ("team", "submission_id")
#: The chosen team's row (the table's cells paint ``--bs-table-bg``, so it is set too).
ROW_HIGHLIGHT = {"backgroundColor": "#fde2e2", "fontWeight": "600", "--bs-table-bg": "#fde2e2"}


@callback(
    Output("lb-ranking-body", "children"),
    Output({"type": "lb-ranking-sort", "col": ALL}, "children"),
    Output("lb-ranking-pager", "children"),
    Output("lb-ranking-prev", "disabled"),
    Output("lb-ranking-next", "disabled"),
    Output("lb-ranking-state", "data"),
    Input({"type": "lb-ranking-sort", "col": ALL}, "n_clicks"),
    Input("lb-ranking-prev", "n_clicks"),
    Input("lb-ranking-next", "n_clicks"),
    Input("lb-ranking-filter", "value"),
    Input("lb-team", "value"),
    Input("lb-split", "value"),
    Input("lb-token", "value"),
    Input("lb-revision", "data"),
    State("lb-ranking-state", "data"),
    State("lb-round", "data"),
    prevent_initial_call=True,  # the layout draws the first page (FirstView)
)
def _render_ranking(_sorts, _prev, _next, filter_text, team: str | None, split: str | None, token: str | None,
                    _revision, stored, round_tag: str):
    """One page of the ranking, sorted and filtered on the server; the state goes to the address."""
    fields = [output["id"]["col"] for output in ctx.outputs_list[1]]
    state = _ranking_state(ctx.triggered_id, TableState.from_store(RANKING_COLUMNS, stored), filter_text)
    drawn = _ranking_page(round_tag, split or "public", is_organizer(token), team, state,
                          find_team=ctx.triggered_id == "lb-team")
    if drawn is None:  # the board's summary says the store cannot be read
        return [], sort_labels(RANKING_COLUMNS, state, fields), "—", True, True, no_update
    kept = drawn.state.to_store()
    return (drawn.rows, sort_labels(RANKING_COLUMNS, drawn.state, fields), drawn.pager, drawn.first, drawn.last,
            no_update if kept == stored else kept)


def _ranking_page(round_tag: str, split: str, organizer: bool, team: str | None, state: TableState, *,
                  find_team: bool = False) -> DrawnPage | None:
    """The ranking's page at ``state`` (the page holding ``team``'s row when ``find_team``), None when the
    store cannot be read: what the layout draws and the callback redraws."""
    try:
        frame = ranking_frame(round_tag, split, organizer=organizer)
    except READ_ERRORS:
        return None
    if find_team and team:
        holding = page_holding(frame, RANKING_COLUMNS, state, "team", team, filter_fields=FILTER_FIELDS)
        state = replace(state, page=holding or state.page)
    shown = table_page(frame, RANKING_COLUMNS, state, filter_fields=FILTER_FIELDS)
    leader = frame["submission_id"].iloc[0] if len(frame) else None
    rows = [{**row, "compare": _compare_cell(row, leader)}
            for row in map(ranking_row, shown.rows.to_dict("records"))]
    body = body_rows(RANKING_ID, RANKING_COLUMNS, rows, highlight=lambda row: bool(team) and row["team"] == team,
                     highlight_style=ROW_HIGHLIGHT, key="submission_id")
    return DrawnPage.of(shown, body, state, "teams")


def _ranking_state(trigger, state: TableState, filter_text: str | None) -> TableState:
    """What the viewer's action makes of the ranking's state: a header sorts, the pager turns, the filter
    or a new split starts again from page 1."""
    if isinstance(trigger, dict):
        return state.sorted_by(trigger["col"])
    if trigger == "lb-ranking-prev":
        return replace(state, page=state.page - 1)
    if trigger == "lb-ranking-next":
        return replace(state, page=state.page + 1)
    if trigger == "lb-ranking-filter":
        return TableState.from_query(RANKING_COLUMNS, _sort_param(state), 1, filter_text)
    if trigger in ("lb-split", "lb-token"):
        return replace(state, page=1)
    return state


def _sort_param(state: TableState) -> str | None:
    return state.query()["sort"]


@callback(
    Output("lb-scatter", "figure"),
    Output("lb-highlight-index", "data"),
    Output("lb-summary", "children"),
    Output("lb-team", "options"),
    Output("lb-split-note", "children"),
    Output("lb-flags", "children"),
    Output("lb-ties", "children"),
    Input("lb-y", "value"),
    Input("lb-x", "value"),
    Input("lb-revision", "data"),
    Input("lb-split", "value"),
    Input("lb-token", "value"),
    State("lb-round", "data"),
    State("lb-team", "value"),
    prevent_initial_call=True,  # likewise
)
def _render_board(y_metric: str, x_metric: str, _revision, split: str, token: str | None, round_tag: str,
                  team: str | None):
    try:
        return _board(y_metric, x_metric, round_tag, team, split or "public", is_organizer(token))
    except READ_ERRORS as exc:  # an unreachable store: say so instead of a traceback
        message = dbc.Alert(f"The submissions store cannot be read: {type(exc).__name__}: {exc}", color="danger")
        return {}, None, message, [], None, None, None


def _board(y_metric: str, x_metric: str, round_tag: str, team: str | None, split: str, organizer: bool):
    view = board(round_tag, split, organizer=organizer, team=team, rows=False)  # the table pages its own
    fig = _with_highlight(_scatter(round_tag, y_metric, x_metric, _data_version(round_tag)), round_tag,
                          y_metric, x_metric, team)
    options = [{"label": t, "value": t} for t in view.teams]
    if view.team_unknown:
        options.append({"label": f"{team} (no submissions in {round_tag})", "value": team})
    return (fig, len(fig["data"]) - 1, view.summary, options, _refused_note(view.refused),
            _flags_list(view.flagged), view.ties)


def _refused_note(refused: str | None) -> dbc.Alert | None:
    if refused is None:
        return None
    return dbc.Alert(f"{refused.capitalize()}: enter it under “Organizer” below. Showing the public split.",
                     color="warning", className="py-2 small", id="lb-split-refused")


def _with_highlight(fig: dict, round_tag: str, y_metric: str, x_metric: str, team: str | None) -> dict:
    """The cached figure with the team's dots in its last trace (a copy: the cached one stays team-free)."""
    if not team:
        return fig
    out = {**fig, "data": list(fig["data"])}
    out["data"][-1] = _scatter_highlight(fig, round_tag, y_metric, x_metric, team)
    return out


def _scatter_highlight(fig: dict, round_tag: str, y_metric: str, x_metric: str, team: str | None) -> dict:
    """The team's dots in the figure's frame, from its own rows (never the whole field)."""
    layout = fig["layout"]
    frame = figs.Frame(tuple(layout["xaxis"]["range"]), tuple(layout["yaxis"]["range"]))
    rows = team_of_round(team, round_tag)
    return figs.highlight_trace(figs.prepare_in(rows, y_metric, x_metric, frame), team).to_plotly_json()


def _flags_list(flagged: list[FlaggedTeam]) -> html.Ul | html.Div:
    if not flagged:
        return html.Div("No team is flagged on this split.", className="text-muted", id="lb-flag-none")
    return html.Ul([html.Li([html.B(f.team), f" ({f.submission_id}): ", f.text], className="lb-flag")
                    for f in flagged], className="mb-1", id="lb-flag-list")


@functools.cache
def _public_private_placeholder() -> dict:
    """The empty public-against-private frame every public view shows (built once: 50 ms a view)."""
    return figs.public_private_figure(None).to_plotly_json()


@functools.cache
def _timeline_placeholder() -> dict:
    return empty_figure("The timeline is drawn when it scrolls into view.").update_layout(height=420).to_plotly_json()


@callback(Output("lb-timeline", "figure"), Output("lb-timeline-index", "data"),
          Input("lb-timeline-wanted", "data"), Input("lb-revision", "data"), State("lb-team", "value"),
          prevent_initial_call=True)
def _render_timeline(wanted, _revision, team: str | None):
    """The field over time, once the viewer scrolls to it (``assets/lazy_load.js`` sets ``lb-timeline-wanted``):
    1.3 MB at 500,000 submissions that a visit to the ranking alone never needs."""
    if not wanted:
        return no_update, no_update
    try:
        fig = _timeline(_data_version(None))
        if team:
            fig = {**fig, "data": list(fig["data"])}
            fig["data"][-2:] = _timeline_highlight(team)
    except READ_ERRORS:  # the board's summary already says the store cannot be read
        return {}, None
    return fig, len(fig["data"]) - 1


def _data_version(round_tag: str | None) -> str:
    """Everything a figure depends on besides its arguments: store revision, references, band."""
    band = _band(round_tag) if round_tag else None
    band_mlps = int(band["n_mlps"].iloc[0]) if band is not None and len(band) and "n_mlps" in band else 0
    return f"{board_revision()}|{reference_fingerprint()}|{band_mlps}"


# Figures are built once per (arguments, data version) and shared by every worker through the
# cache service (this process, or Redis when scaled out): a page view then costs a cache read, not a rebuild.
# They are built without a highlighted team; a team's dots are read by team and put in the last trace.
# A round of more than figs.DOT_LIMIT graded submissions is drawn as server-side density bins plus the
# dots an organizer reads (every team's best, the frontier, outliers); a zoom fetches the dots in view.
@memoize("leaderboard-scatter", timeout=24 * 3600)
def _scatter(round_tag: str, y_metric: str, x_metric: str, _version: str) -> dict:
    per_team, n_graded = round_counts(round_tag)
    ref = _mc_reference(round_tag)
    if n_graded <= figs.DOT_LIMIT:
        points = submissions_frame(round_tag=round_tag)
        failed = points.loc[points["n_failed_mlps"].fillna(0) > 0, "submission_id"].tolist()
        return figs.scatter_figure(points, ref, round_tag=round_tag, y_metric=y_metric, x_metric=x_metric,
                                   failures=failure_sentences(failed)).to_plotly_json()
    prep = figs.prepare(round_field(round_tag), ref, y_metric, x_metric)
    best = best_per_team(best_candidates(round_tag))["submission_id"]
    view = figs.field_view(prep, best)
    details = submissions_frame(ids=prep.graded["submission_id"].iloc[view.drawn].tolist())
    return figs.density_scatter_figure(prep, details, view, ref, round_tag=round_tag, y_metric=y_metric,
                                       x_metric=x_metric,
                                       n_not_graded=sum(per_team.values()) - n_graded).to_plotly_json()


@memoize("leaderboard-timeline", timeout=24 * 3600)
def _timeline(_version: str) -> dict:
    if submission_count() <= figs.DOT_LIMIT:
        return figs.timeline_figure(all_points(), round_order=list(ALL_ROUNDS)).to_plotly_json()
    field = timeline_points()
    graded = figs.timeline_points(field)
    marks = figs.timeline_marks(graded)  # found once: the dots' ids and the figure both need them
    details = timeline_points(figs.timeline_drawn_ids(graded, marks))
    return figs.density_timeline_figure(field, details, round_order=list(ALL_ROUNDS), marks=marks).to_plotly_json()


def _warm_first_views() -> None:
    """What every round's first visitor asks for (the board, its scatter and warning, the timeline), built
    in gunicorn's master before it forks: at 500,000 submissions that was seconds for the first visitor of
    each round, and again for each web worker a later visit landed on."""
    for round_tag in ALL_ROUNDS:
        if round_counts(round_tag)[1]:
            _board("score", "flops", round_tag, None, "public", False)
            versions_warning(round_tag, "public", organizer=False)
    _timeline(_data_version(None))


register_warmer(_warm_first_views)


def _timeline_highlight(team: str | None) -> list[dict]:
    """The team's best-so-far line and its dots: the timeline's last two traces."""
    points = team_points(team)
    return [figs.timeline_best_trace(points, team).to_plotly_json(),
            figs.timeline_highlight_trace(points, team).to_plotly_json()]


@callback(
    Output("lb-scatter", "figure", allow_duplicate=True),
    Output("lb-timeline", "figure", allow_duplicate=True),
    Input("lb-team", "value"),
    State("lb-round", "data"),
    State("lb-y", "value"),
    State("lb-x", "value"),
    State("lb-highlight-index", "data"),
    State("lb-timeline-index", "data"),
    prevent_initial_call=True,
)
def _highlight(team: str | None, round_tag: str, y_metric: str, x_metric: str, index, timeline_index):
    """Only the highlight traces change: a few dots travel, not the whole field."""
    if index is None:
        return no_update, no_update
    base = _scatter(round_tag, y_metric, x_metric, _data_version(round_tag))
    scatter_patch = dash.Patch()  # the team's rows are read once per revision for both figures
    scatter_patch["data"][index] = _scatter_highlight(base, round_tag, y_metric, x_metric, team)
    timeline_patch = no_update
    if timeline_index is not None:
        timeline_patch = dash.Patch()
        best, dots = _timeline_highlight(team)
        timeline_patch["data"][timeline_index] = dots
        timeline_patch["data"][timeline_index - 1] = best
    return scatter_patch, timeline_patch


#: A zoom's window as plotly reports it (log10 of the axis values on a log axis).
_RANGE_KEYS = {"x": ("xaxis.range[0]", "xaxis.range[1]"), "y": ("yaxis.range[0]", "yaxis.range[1]")}


def _zoom_window(relayout: dict, frame: figs.Frame) -> figs.Frame | None:
    """The window a relayout event zoomed to (an axis it left alone keeps the frame's range); None when
    the event changed no range (a legend click, a hover mode) or holds something that is not one."""
    ranges = {}
    for axis, (low_key, high_key) in _RANGE_KEYS.items():
        pair = relayout.get(f"{axis}axis.range")
        pair = pair if isinstance(pair, list) and len(pair) == 2 else [relayout.get(low_key), relayout.get(high_key)]
        if all(isinstance(v, int | float) and not isinstance(v, bool) and abs(v) < 400 for v in pair):
            ranges[axis] = (float(min(pair)), float(max(pair)))
    if not ranges:
        return None
    return figs.Frame(ranges.get("x", frame.x), ranges.get("y", frame.y))


# In the browser: only a zoom or a reset goes to the server. Plotly reports a relayout when it first draws
# the figure ({"autosize": true}) and on legend clicks; each was a round trip after the page had drawn.
clientside_callback(
    r"""function(relayout) {
        const moved = relayout && Object.keys(relayout).some(k => /^[xy]axis\.(range|autorange)/.test(k));
        return moved ? relayout : window.dash_clientside.no_update;
    }""",
    Output("lb-zoom-request", "data"),
    Input("lb-scatter", "relayoutData"),
    prevent_initial_call=True,
)


@callback(
    Output("lb-scatter", "figure", allow_duplicate=True),
    Output("lb-zoom-note", "children"),
    Input("lb-zoom-request", "data"),
    State("lb-round", "data"),
    State("lb-y", "value"),
    State("lb-x", "value"),
    State("lb-highlight-index", "data"),
    prevent_initial_call=True,
)
def _zoom(relayout, round_tag: str, y_metric: str, x_metric: str, index):
    """A large round's zoom: the dots in the window, read from the store, when at most figs.DOT_LIMIT lie there."""
    if (not isinstance(relayout, dict) or not isinstance(index, int) or index < 1 or round_tag not in ALL_ROUNDS
            or y_metric not in figs.Y_METRICS or x_metric not in figs.X_METRICS):
        return no_update, no_update
    try:
        _, n_graded = round_counts(round_tag)
        if n_graded <= figs.DOT_LIMIT:  # every dot is drawn already
            return no_update, no_update
        base = _scatter(round_tag, y_metric, x_metric, _data_version(round_tag))
        layout = base["layout"]
        window = _zoom_window(relayout, figs.Frame(tuple(layout["xaxis"]["range"]), tuple(layout["yaxis"]["range"])))
        x_col, y_col = figs.X_METRICS[x_metric][0], figs.Y_METRICS[y_metric][0]
        patch = dash.Patch()
        if window is None:
            if not any(key.endswith("autorange") for key in relayout):
                return no_update, no_update
            patch["data"][index - 1] = figs.window_trace(x_col, y_col, None, 0).to_plotly_json()
            return patch, None
        n, rows = in_window(round_tag, x_col, y_col, (10 ** window.x[0], 10 ** window.x[1]),
                                  (10 ** window.y[0], 10 ** window.y[1]), figs.DOT_LIMIT)
    except READ_ERRORS:
        return no_update, "The submissions store cannot be read; the zoomed dots are not shown."
    patch["data"][index - 1] = figs.window_trace(x_col, y_col, rows, n).to_plotly_json()
    note = (f"{n:,} graded submissions in the zoomed window, each drawn as a dot." if n <= figs.DOT_LIMIT else
            f"{n:,} graded submissions in the zoomed window: zoom in until at most {figs.DOT_LIMIT:,} remain to see "
            "them as dots.")
    return patch, note


@callback(
    Output("lb-team-panel", "children"),
    Input("lb-team", "value"),
    Input("lb-revision", "data"),
    Input("lb-token", "value"),
    State("lb-round", "data"),
    prevent_initial_call=True,
)
def _render_team_panel(team: str | None, _revision, token: str | None, round_tag: str):
    """A team's history (score and best so far), its flags, and failed MLPs by kind per submission."""
    if not team:
        return html.Div("Choose a team (or click one in the ranking) to see its history.", className="text-muted small")
    try:
        return _team_panel(team, round_tag, is_organizer(token))
    except READ_ERRORS:  # the board's summary already says the store cannot be read
        return None


def _team_panel(team: str, round_tag: str, organizer: bool) -> dbc.Card:
    view = team_view(team, round_tag, organizer=organizer)  # the team's rows only: never the whole field
    elsewhere = "; ".join(f"{n} in {tag}" for tag, n in sorted(view.other_rounds.items()))
    best = view.best
    if best is None:
        text = f"{team} has no graded submission in {round_tag}" + (f" ({elsewhere})." if elsewhere else ".")
        return dbc.Card(dbc.CardBody(html.Div(text, id="lb-team-summary")), id="lb-team-card")
    flags = " · ".join(map(str, view.flags)) or (
        "No flag on its best public submission." if view.ranked else "Not ranked on this round's public board.")
    failures = [html.Li(f"{sid}: {text}") for sid, text in view.failures.items()]
    body = [
        html.H6(f"Team {team}", className="mb-1"),
        html.Div(f"{len(view.history)} graded submissions in {round_tag}; best {sci(best['adjusted_score'], 4)} "
                 f"({best['submission_id']})." + (f" Other rounds: {elsewhere}." if elsewhere else ""),
                 className="small", id="lb-team-summary"),
        _per_mlp_share_line(view.share),
        html.Div(flags, className="small lb-team-flags", id="lb-team-flags"),
        margins_panel(stored_margins(view.best_mlps, round_tag), "lb-team",
                      title=f"How close its best submission ({best['submission_id']}) came to each cap"
                            + _stored_mlps_phrase(view.best_mlps)),
        dcc.Graph(id="lb-history", figure=figs.history_figure(view.history, team=team), config=GRAPH_CONFIG),
        html.Div([html.Div("Failed MLPs by kind:", className="small fw-semibold"),
                  html.Ul(failures, className="small mb-0")] if failures else
                 "No failed MLP among its per-MLP results.", className="small", id="lb-team-failures"),
    ]
    return dbc.Card(dbc.CardBody(body), id="lb-team-card")


def _stored_mlps_phrase(rows) -> str:
    """" on its 50 public MLPs": the panel reads the public split it stores (a grader record's withheld half
    carries no scores and is not stored, so its import note, over all 100, can name another MLP)."""
    n = 0 if rows is None else len(rows)
    return f" on its {n} public MLP{'s' if n != 1 else ''}" if n else ""


def _per_mlp_share_line(share) -> html.Div | None:
    """F / C of the best submission's MLPs (lowest, median, highest) where residual time is priced."""
    if share is None:
        return None
    return html.Div(f"Instrumented share F / C of its best submission's {share.n_mlps} MLPs: lowest "
                    f"{share.lowest:.2g}, median {share.median:.2g}, highest {share.highest:.2g}.",
                    className="small", id="lb-team-share")


@callback(
    Output("lb-pubpriv", "figure"),
    Output("lb-pubpriv-note", "children"),
    Input("lb-colour", "value"),
    Input("lb-token", "value"),
    Input("lb-revision", "data"),
    Input("lb-team", "value"),
    State("lb-round", "data"),
    prevent_initial_call=True,
)
def _render_public_private(colour: str, token: str | None, _revision, team: str | None, round_tag: str):
    """Organizer only: the figure is built only after the server has checked the token."""
    if not is_organizer(token):
        return _public_private_placeholder(), \
            "Shown with the organizer token (under “Organizer” below): it is built from the withheld MLPs."
    try:
        table = viewer_board(round_tag, "public", organizer=True)
    except READ_ERRORS:
        return {}, None
    fig = figs.public_private_figure(table, colour_by=colour if colour in figs.COLOUR_CHOICES else "flag", team=team)
    return fig, f"{organizer_flag_count(table)} of the teams with private results carry the overfitting signature."


# Clicking a team in the ranking chooses it: its history opens and its dots are highlighted. In the browser,
# since every new page of the ranking's rows fires it (new buttons, no click): no round trip for those.
clientside_callback(
    """function(clicks) {
        const cb = window.dash_clientside.callback_context;
        const fired = (cb.triggered || []).filter(t => t.value);
        if (!fired.length) { return window.dash_clientside.no_update; }
        const id = JSON.parse(fired[0].prop_id.split('.n_clicks')[0]);
        return id.col === 'team' && id.value ? id.value : window.dash_clientside.no_update;
    }""",
    Output("lb-team", "value", allow_duplicate=True),
    Input({"type": "lb-ranking-click", "col": ALL, "value": ALL}, "n_clicks"),
    prevent_initial_call=True,
)


@callback(Output("lb-address", "data"), Output({"type": "lb-round-link", "round": ALL}, "href"),
          Input("lb-team", "value"), Input("lb-y", "value"), Input("lb-x", "value"), Input("lb-split", "value"),
          Input("lb-standings-tab", "active_tab"), Input("lb-ranking-state", "data"), Input("lb-colour", "value"),
          State("lb-round", "data"), State({"type": "lb-round-link", "round": ALL}, "id"),
          prevent_initial_call=True)  # the layout writes the links of the address it was opened at
def _address(team, y, x, split, standings, ranking, colour, round_tag, link_ids):
    """The address (on a change the user made) and the round links follow the team, axes, split, the
    standings view, the ranking's sort, page and filter, and the public-against-private colouring in place
    (a link to another round starts at its first page)."""
    state = TableState.from_store(RANKING_COLUMNS, ranking)
    links = [PATH + _query(link["round"], team, y, x, split, standings, replace(state, page=1), colour)
             for link in link_ids]
    return (no_update if ctx.triggered_id is None
            else _query(round_tag, team, y, x, split, standings, state, colour)), links


keep_address_in_step("lb-address")


# ---------------------------------------------------------------------------
# the final standings (one round's final record: what the final decided and how solid it is)
# ---------------------------------------------------------------------------

#: The views of the standings section, as ``standings=`` in the address; the first is the default.
STANDINGS_TABS = {
    "shakeup": "Shake-up",
    "rank": "P(rank ≤ k) (organizer)",
    "wins": "Win probability (organizer)",
    "fragility": "Fragility (organizer)",
}
STANDINGS_DEFAULT = "shakeup"
#: Views drawn from the private suite's per-MLP scores: built only for a request carrying the token.
ORGANIZER_STANDINGS = ("rank", "wins", "fragility")
NO_FINAL = (
    "No final evaluation has been recorded for {round}. An organizer runs one with "
    "`python -m whestboard final --round {round} --submission TEAM=PATH [--submission TEAM=PATH ...] "
    "--suite-seed S --n-mlps N` (or from the /final page, with the organizer token); its standings appear here."
)
STANDINGS_NOTE = (
    "The final reruns each team's nominated submission on a fresh private suite; close finishes are "
    "resolved by extra private MLPs, then all-layer MSE, then effective compute. Public: the final "
    "standings, the tie-break record and the shake-up against the public board (published standings are "
    "public in the challenge). Organizer only: the bootstrap and fragility views, drawn from the private "
    "suite's per-MLP scores, and the suite's seed."
)


def _standings_section(tab: str, drawn: tuple) -> html.Div:
    """Final rank with the tie-break record, and one of the four views (the address keeps which), holding
    what ``_render_standings`` drew for the first view."""
    summary, figure, style, note = drawn
    return html.Div([
        html.H4("Final standings", className="mt-4"),
        html.P(STANDINGS_NOTE, className="text-muted small"),
        html.Div(summary, id="lb-final-summary"),
        dbc.Tabs([dbc.Tab(label=label, tab_id=key) for key, label in STANDINGS_TABS.items()],
                 id="lb-standings-tab", active_tab=tab, className="mt-2"),
        html.Div(note, id="lb-final-note", className="small text-muted mt-1"),
        dcc.Graph(id="lb-final-figure", figure=figure, config=GRAPH_CONFIG, style=style),
    ], id="lb-final")


@callback(
    Output("lb-final-summary", "children"),
    Output("lb-final-figure", "figure"),
    Output("lb-final-figure", "style"),
    Output("lb-final-note", "children"),
    Input("lb-standings-tab", "active_tab"),
    Input("lb-token", "value"),
    Input("lb-revision", "data"),
    Input("lb-team", "value"),
    State("lb-round", "data"),
    prevent_initial_call=True,
)
def _render_standings(tab: str | None, token: str | None, _revision, team: str | None, round_tag: str):
    """The record's standings for everyone; the per-MLP views only after the server checked the token."""
    tab = tab if tab in STANDINGS_TABS else STANDINGS_DEFAULT
    hidden = {"display": "none"}
    try:
        found = final_view(round_tag)
    except READ_ERRORS as exc:
        return dbc.Alert(f"The final record cannot be read: {type(exc).__name__}: {exc}", color="danger"), \
            {}, hidden, None
    if found is None:
        return dbc.Alert(NO_FINAL.format(round=round_tag), color="secondary", className="small",
                         id="lb-final-missing"), {}, hidden, None
    record, views, shake = found.record, found.views, found.shake
    organizer = is_organizer(token)
    summary = html.Div([_standings_table(record, shake), _tie_break_list(record["tie_breaks"]),
                        pair_list(record, "lb-final-pairs"), _suite_line(record, organizer)])
    if tab in ORGANIZER_STANDINGS and not organizer:
        note = ("Shown with the organizer token (under “Organizer” below): it is drawn from the private "
                "suite's per-MLP scores.")
        return summary, {}, hidden, html.Span(note, id="lb-final-refused")
    figure, note = _standings_figure(tab, shake, views, team)
    return summary, figure, {"height": f"{figure.layout.height or 540}px"}, note


def _standings_figure(tab: str, shake, views, team: str | None):
    if tab in ORGANIZER_STANDINGS and not views.suite.mlp_ids:
        message = "no MLP of the base suite that every finalist has a score on: nothing to resample"
        return empty_figure(message), f"The record holds {message}."
    if tab == "rank":
        return standings_figs.rank_probability_figure(views.bootstrap), _dropped_note(views)
    if tab == "wins":
        return standings_figs.win_matrix_figure(views.bootstrap), _dropped_note(views)
    if tab == "fragility":
        if not views.fragility.left_out:
            return standings_figs.fragility_figure(views.fragility), "A suite of one MLP leaves none to leave out."
        return standings_figs.fragility_figure(views.fragility), _dropped_note(views)
    return standings_figs.shake_up_figure(shake, team=team), \
        "x: the rank on the public board among the finalists; y: the final rank; on the dashed line nothing moved."


def _dropped_note(views) -> str:
    suite = views.suite
    text = (f"Resampled: the {len(suite.mlp_ids)} MLPs of the base suite every finalist has a score on; ties in a "
            "draw share the better rank.")
    if suite.n_dropped:
        text += f" {suite.n_dropped} MLP(s) some finalist has no score on are left out."
    return text


def _standings_table(record: dict, shake) -> dbc.Table:
    moved = shake.set_index("team")
    header = html.Thead(html.Tr([html.Th(h) for h in ("#", "Team", "Score", "Final-layer MSE", "All-layer MSE",
                                                      "Effective compute", "MLPs", "Public rank", "Moved")]))
    rows = []
    for row in sorted(record["standings"], key=lambda r: r["rank"]):  # stable: shared ranks in the final's order
        team = str(row["team"])
        public_rank = moved["public_rank"].get(team, float("nan"))
        change = moved["moved"].get(team, float("nan"))
        rows.append(html.Tr([
            html.Td(rank_text(row)), html.Td(team), html.Td(sci(row.get("score"), 4)),
            html.Td(sci(row.get("final_layer_mse"), 4)), html.Td(sci(row.get("all_layer_mse"), 4)),
            html.Td(sci(row.get("effective_compute"), 4)), html.Td(row.get("n_mlps")),
            html.Td("—" if public_rank != public_rank else int(public_rank)),
            html.Td("—" if change != change else f"{int(change):+d}"),
        ]))
    return dbc.Table([header, html.Tbody(rows)], size="sm", striped=True, className="small mb-2",
                     id="lb-final-standings")


def _tie_break_list(tie_breaks: list[dict]) -> html.Div:
    if not tie_breaks:
        return html.Div("No two neighbours were close: no tie-break was needed.",
                        className="small", id="lb-final-ties")
    items = [html.Li(f"{', '.join(map(str, tie['teams']))}: paired test p = {sci(tie.get('p_value'))}; "
                     f"{tie['extra_mlps']} extra private MLP(s); "
                     f"{DECIDED_BY.get(tie['decided_by'], tie['decided_by'])}.")
             for tie in tie_breaks]
    return html.Div([html.Div("Finishes that needed a tie-break and how they ended:", className="small fw-semibold"),
                     html.Ul(items, className="small mb-1")], id="lb-final-ties")


def _suite_line(record: dict, organizer: bool) -> html.Div:
    text = f"Final of {record['round']} on a private suite of {record['n_mlps']} MLPs"
    text += f" (suite seed {record['suite_seed']})." if organizer else "."
    return html.Div(text, className="small text-muted", id="lb-final-suite")


# ---------------------------------------------------------------------------
# export and organizer actions
# ---------------------------------------------------------------------------


@callback(
    Output("lb-org-result", "children"),
    Output("lb-revision", "data"),
    Input("lb-upload", "contents"),
    Input("lb-edit", "n_clicks"),
    Input("lb-delete", "n_clicks"),
    State("lb-upload", "filename"),
    State("lb-token", "value"),
    State("lb-import-team", "value"),
    State("lb-import-id", "value"),
    State("lb-import-split", "value"),
    State("lb-edit-id", "value"),
    State("lb-edit-team", "value"),
    State("lb-edit-status", "value"),
    State("lb-revision", "data"),
    prevent_initial_call=True,
)
def _organizer_action(contents, _edit, _delete, filenames, token, team, sid, split, edit_id, edit_team, edit_status,
                      revision):
    """Every organizer action checks the token here, on the server, before touching the store."""
    try:
        require_organizer(token)
    except OrganizerDenied as exc:
        return dbc.Alert(f"Refused: {exc}.", color="danger", className="py-2"), no_update
    try:
        if ctx.triggered_id == "lb-upload":
            message = _import(contents, filenames, team, sid, split)
        elif ctx.triggered_id == "lb-delete":
            message = _delete(edit_id)
        else:
            message = _edit(edit_id, edit_team, edit_status)
    except ImportRejected as exc:
        unshown = exc.log.unshown()
        return dbc.Alert([html.Div(exc.log.summary() + ":"),
                          html.Ul([html.Li(p) for p in exc.problems], className="mb-0 small")]
                         + ([html.Div(unshown, className="small")] if unshown else []),
                         color="danger", className="py-2", id="lb-import-problems"), no_update
    except (ValueError, KeyError) as exc:
        text = exc.args[0] if isinstance(exc, KeyError) and exc.args else str(exc)
        return dbc.Alert(f"Nothing changed: {text}", color="danger", className="py-2"), no_update
    except WRITE_ERRORS as exc:  # unreachable store, or a write that lost its race every time
        return dbc.Alert(f"Nothing changed: the submissions store could not be written ({type(exc).__name__}); "
                         "try again.", color="danger", className="py-2"), no_update
    return dbc.Alert(message, color="success", className="py-2"), (revision or 0) + 1


def _import(contents, filenames, team, sid, split=None) -> str:
    uploads = _uploads(contents, filenames)
    report = import_uploads(uploads, team=(team or "").strip() or None, submission_id=(sid or "").strip() or None,
                               split=split or None)
    return " ".join([f"Imported {', '.join(filenames)}: {report.summary()}.", *report.notes])


def _uploads(contents, filenames) -> list[Upload]:
    """The browser's data: URLs as files, checked as the HTTP API checks a request (size first)."""
    if not contents or not isinstance(contents, list) or not isinstance(filenames, list) \
            or len(contents) != len(filenames):
        raise ValueError("no file received; choose the files again")
    encoded = sum(len(data) for data in contents if isinstance(data, str))
    if encoded * 3 // 4 > si_max_bytes():
        raise ValueError(f"the files are larger than {si_max_bytes() // 2**20} MiB together; split the import")
    return [Upload(str(name), _decoded(data, name)) for name, data in zip(filenames, contents, strict=True)]


def _decoded(data, name) -> bytes:
    """The bytes of one ``data:...;base64,...`` URL; ValueError when it is not one."""
    if isinstance(data, str) and "," in data:
        try:
            return base64.b64decode(data.partition(",")[2], validate=True)
        except ValueError:  # binascii.Error: not base64
            pass
    raise ValueError(f"{str(name)[:80]!r} did not arrive as a file; choose it again")


def _delete(submission_id: str | None) -> str:
    submission_id = (submission_id or "").strip()
    if not submission_id:
        raise ValueError("give the submission id to delete")
    if not delete_submission(submission_id):
        raise ValueError(f"no submission {submission_id!r}")
    return f"Deleted {submission_id}."


def _edit(submission_id: str | None, team: str | None, status: str | None) -> str:
    submission_id = (submission_id or "").strip()
    changes = {k: v for k, v in (("team", (team or "").strip()), ("status", status)) if v}
    if not submission_id or not changes:
        raise ValueError("give the submission id and a new team name or status")
    if not edit_submission(submission_id, changes):
        raise ValueError(f"no submission {submission_id!r}")
    return f"Updated {submission_id}: " + ", ".join(f"{k} = {v}" for k, v in changes.items()) + "."


# ---------------------------------------------------------------------------
# what a score was priced with: the versions column, the mixed-versions warning, re-scoring
# ---------------------------------------------------------------------------


def pricing_columns() -> list[Column]:
    """The ranking's column of what priced each score (the board view's ``priced_with``, ``seed_protocol``)."""
    return [
        Column("priced_with", "Priced with", sort_by=("whestbench_version", "flopscope_version"), title=True,
               width="8.5rem", cell=_priced_cell,
               tooltip="The whestbench and flopscope versions that metered and priced the score (flopscope "
                       "releases move FLOP prices), and whestbench's seed protocol of the suite it was scored on; "
                       "“unknown” when the file it came from did not say."),
    ]


RANKING_COLUMNS += pricing_columns()


def _versions_warning_slot(warning) -> html.Div:
    return html.Div(warning, id="lb-versions-warning")


@callback(Output("lb-versions-warning", "children"), Input("lb-revision", "data"), Input("lb-split", "value"),
          Input("lb-token", "value"), State("lb-round", "data"), prevent_initial_call=True)
def _render_versions_warning(_revision, split: str | None, token: str | None, round_tag: str):
    """The board's warning when it ranks scores priced by different versions (the view decides; shown here)."""
    try:
        return _versions_warning(versions_warning(round_tag, split or "public", organizer=is_organizer(token)))
    except READ_ERRORS:
        return None  # the board's own callback says the store cannot be read


def _versions_warning(text: str | None) -> dbc.Alert | None:
    if text is None:
        return None
    return dbc.Alert("⚠ " + text, color="warning", className="py-2 small", id="lb-mixed-versions")


def _rescore_controls() -> list:
    return [
        html.H6("Re-score under the installed versions", className="mt-3"),
        html.P("Scores the stored package of a run (or of a submission made from one) again, on the same MLPs "
               "and budget, as a new record; the old one is kept, each with its versions.",
               className="text-muted small mb-1"),
        dbc.Row([
            dbc.Col(dbc.Input(id="lb-rescore-id", placeholder="submission id or run id", size="sm"), width=6),
            dbc.Col(dbc.Button("Re-score", id="lb-rescore", size="sm", color="primary", outline=True), width="auto"),
        ], className="g-2"),
        html.Div(id="lb-rescore-result", className="mt-2 small"),
        dcc.Store(id="lb-rescore-job"),
        dcc.Interval(id="lb-rescore-poll", interval=2000, disabled=True),
    ]


@callback(Output("lb-rescore-result", "children"), Output("lb-rescore-job", "data"),
          Output("lb-rescore-poll", "disabled"), Input("lb-rescore", "n_clicks"), State("lb-rescore-id", "value"),
          State("lb-token", "value"), prevent_initial_call=True)
def _start_rescore(_clicks, identifier: str | None, token: str | None):
    """Checks the token on the server, as every organizer action, then queues the re-score."""
    try:
        require_organizer(token)
        if not uploads_on():  # a re-score runs the stored package: uploaded code
            return dbc.Alert(f"Nothing queued: {UPLOADS_OFF}.", color="danger", className="py-2",
                             id="lb-rescore-refused"), None, True
        queued = queue_rescore(identifier or "")
    except OrganizerDenied as exc:
        return dbc.Alert(f"Refused: {exc}.", color="danger", className="py-2"), None, True
    except RESCORE_ERRORS as exc:
        return dbc.Alert(f"Nothing queued: {exc}", color="danger", className="py-2", id="lb-rescore-refused"), None, True
    what = f"submission {queued.submission_id} (run {queued.run_id})" if queued.submission_id else f"run {queued.run_id}"
    return f"Queued the re-score of {what} as job {queued.job_id}.", queued.job_id, False


@callback(Output("lb-rescore-result", "children", allow_duplicate=True),
          Output("lb-rescore-poll", "disabled", allow_duplicate=True),
          Output("lb-revision", "data", allow_duplicate=True),
          Input("lb-rescore-poll", "n_intervals"), State("lb-rescore-job", "data"), State("lb-token", "value"),
          State("lb-revision", "data"), prevent_initial_call=True)
def _poll_rescore(_tick, job_id: str | None, token: str | None, revision):
    if not job_id or not is_organizer(token):
        return no_update, True, no_update
    progress = rescore_progress(job_id)
    if not progress.finished:
        return progress.text, False, no_update
    alert = dbc.Alert(progress.text, color="success" if progress.ok else "danger", className="py-2",
                      id="lb-rescore-done")
    return alert, True, (revision or 0) + 1 if progress.ok else no_update
