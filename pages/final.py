"""The final evaluation, run by the organizer: nominated submissions rerun on a fresh private suite.

URL: ``/final``. Behind the organizer token (checked on the server before anything runs; the job carries
an organizer grant of its exact request, never the token, checked before launch and again in the job). The
form names the round, the suite seed, the suite's size, the reference samples and the bound on extra MLPs, and the nominees (``TEAM=upload:SHA256``, ``TEAM=submission:ID`` or
``TEAM=kept:NAME``, an estimator the operator keeps on the server: never a path, one per line, or packages
dropped here by the organizer, each named after its team; uploads and stored submissions only where uploads
are on). The final runs as a
background job of the app's one job system (``whestboard.final.run_final``: resumable, every pair scored
once), and the page shows the standings and the tie-break record it saved.
"""

from __future__ import annotations

import base64
from pathlib import PurePath

import dash
import dash_bootstrap_components as dbc
from dash import Input, Output, State, callback, dcc, html, no_update

from components.final_pairs import pair_list, rank_text
from server import faults
from server.background import priced, request_client_id
from server.switches import uploads_on
from whestboard.final import (
    DEFAULT_MAX_EXTRA_MLPS,
    FinalError,
    FinalRequest,
    run_final,
    served_nominee,
    workers_text,
)
from whestboard.leaderboard import (
    OrganizerDenied,
    load_final_record,
    organizer_grant,
    require_grant,
    require_organizer,
)
from whestboard.rules import ALL_ROUNDS, get_round
from whestboard.sandbox import UploadError, ingest_upload
from whestboard.scoring import UPLOADS_OFF

dash.register_page(__name__, path="/final", name="Final", order=4.5, title="Final evaluation · Whestboard")

HIDDEN, SHOWN = {"display": "none"}, {"display": "block"}
#: The most nominees one final takes from the page (each a line).
MAX_NOMINEES = 200
COLUMNS = (("rank", "Rank"), ("team", "Team"), ("score", "Score"), ("final_layer_mse", "Final-layer MSE"),
           ("all_layer_mse", "All-layer MSE"), ("effective_compute", "Effective compute"), ("n_mlps", "MLPs"),
           ("n_failed_mlps", "Failed"), ("extra_mlps_scored", "Extra MLPs"))
INTRO = ("Each team's nominated submission is re-executed in the sandbox on a fresh suite of MLPs made from the "
         "private suite seed (whestbench's own suite protocol), under the round's full rulebook. Close neighbours "
         "(paired t-test on the log score ratios: within the reference noise, or within 5%) get extra MLPs from "
         "the same seed, then all-layer MSE, then effective compute; a rank is shared only when the scores are equal "
         "within the noise, and a pair the allowed MLPs cannot decide keeps the score order, marked provisional. "
         "An interrupted final resumes where it stopped.")


def _number(id_: str, label: str, value, help_text: str) -> dbc.Col:
    return dbc.Col([dbc.Label(label, html_for=id_, className="small fw-semibold"),
                    dbc.Input(id=id_, value=value, size="sm", type="text"),
                    dbc.FormText(help_text)], md=2)


def layout(**_query) -> html.Div:
    rounds = [{"label": tag, "value": tag} for tag in ALL_ROUNDS]
    return html.Div([
        html.H2("Final evaluation"),
        html.P(INTRO, className="text-muted"),
        dbc.Card(dbc.CardBody([
            dbc.Input(id="final-token", type="password", placeholder="organizer token", size="sm",
                      className="mb-2", autoComplete="off"),
            dbc.Row([
                dbc.Col([dbc.Label("Round", html_for="final-round", className="small fw-semibold"),
                         dbc.Select(id="final-round", options=rounds, value=rounds[0]["value"], size="sm")], md=2),
                _number("final-seed", "Suite seed", "", "the private seed (keep it secret until published)"),
                _number("final-n", "MLPs", "100", "in the rerun suite"),
                _number("final-samples", "Truth samples", "1000000", "per reference; floor = avg_variance / K"),
                _number("final-extra", "Max extra MLPs", str(DEFAULT_MAX_EXTRA_MLPS), "per close group"),
            ], className="g-3 mb-2"),
            dbc.Label("Nominees, one per line", html_for="final-nominees", className="small fw-semibold"),
            dbc.Textarea(id="final-nominees", placeholder="team-a=upload:<sha256>\nteam-b=submission:<id>",
                         style={"height": "6rem"}, className="mb-2"),
            dcc.Upload(id="final-upload", multiple=True,
                       children=html.Div(["or drop packages here (", html.Code("TEAM.tar.gz"), " or ",
                                          html.Code("TEAM.py"), ": the file's name is the team)"]),
                       style={"border": "1px dashed #999", "borderRadius": "6px", "padding": "10px",
                              "textAlign": "center"}, className="mb-2"),
            html.Div(id="final-uploaded", className="small text-muted mb-2"),
            dbc.Button("Run the final", id="final-run", color="primary", size="sm"),
        ]), className="mb-3"),
        dcc.Store(id="final-job"),
        dcc.Store(id="final-packages", data=[]),
        dcc.Store(id="final-done"),
        html.Div(id="final-form-error"),
        html.Div([
            dbc.Progress(id="final-progress", value=0, label="", striped=True, animated=True, className="mb-2",
                         style={"height": "1.4rem"}),
            html.Div(id="final-status", className="small text-muted mb-2"),
        ], id="final-progress-wrap", style=HIDDEN),
        html.Div(id="final-results"),
    ])


@callback(
    Output("final-packages", "data"),
    Output("final-uploaded", "children"),
    Input("final-upload", "contents"),
    State("final-upload", "filename"),
    State("final-packages", "data"),
    State("final-token", "value"),
    prevent_initial_call=True,
)
def _received(contents, filenames, kept, token):
    """Dropped packages go to the upload store (checked as every upload is); each becomes TEAM=upload:SHA.

    Only for the organizer (the token typed above), and only where uploads are on: nothing is stored else."""
    kept = [line for line in (kept if isinstance(kept, list) else []) if isinstance(line, str)]
    try:
        require_organizer(token)
    except OrganizerDenied as exc:
        return kept, dbc.Alert(f"Refused: {exc}; type the organizer token first.", color="danger", className="py-2",
                               id="final-upload-refused")
    if not uploads_on():
        return kept, dbc.Alert(f"Refused: {UPLOADS_OFF}.", color="danger", className="py-2", id="final-upload-refused")
    contents = [contents] if isinstance(contents, str) else list(contents or [])
    filenames = [filenames] if isinstance(filenames, str) else list(filenames or [])
    try:
        for data, name in zip(contents, filenames, strict=True):
            upload = ingest_upload(base64.b64decode(str(data).partition(",")[2]), str(name),
                                   client=request_client_id())
            team = PurePath(str(name)).name.removesuffix(".tar.gz").removesuffix(".tgz").removesuffix(".py")
            kept = [line for line in kept if not line.startswith(f"{team}=")] + [f"{team}=upload:{upload.sha256}"]
    except (UploadError, ValueError) as exc:
        return kept, dbc.Alert(f"Package refused: {exc}", color="danger", className="py-2")
    return kept, "Packages received: " + ", ".join(kept)


def _request(round_tag, seed, n, samples, extra, lines: list[str]) -> FinalRequest:
    """The final the form describes, through the core's checks (FinalError names the field to fix)."""
    def whole(value, name: str) -> int:
        try:
            return int(str(value).strip().replace("_", ""))
        except ValueError:
            raise FinalError(f"{name} {value!r} is not a whole number") from None

    get_round(round_tag)
    if not isinstance(lines, list) or len(lines) > MAX_NOMINEES:
        raise FinalError(f"the nominees are a list of at most {MAX_NOMINEES} lines, one per team")
    nominees = tuple(served_nominee(line, uploads=uploads_on()) for line in lines)  # never a path on the server
    return FinalRequest(round_tag, nominees, whole(seed, "suite seed"),
                        whole(n, "MLPs"), whole(samples, "truth samples"), whole(extra, "max extra MLPs"))


def _lines(text, packages) -> list[str]:
    lines = [line.strip() for line in str(text or "").splitlines() if line.strip()] + \
        [p for p in (packages if isinstance(packages, list) else []) if isinstance(p, str)]
    if len(lines) > MAX_NOMINEES:
        raise FinalError(f"{len(lines):,} nominees: a final from this page takes at most {MAX_NOMINEES}")
    return lines


@callback(
    Output("final-job", "data"),
    Output("final-form-error", "children"),
    Input("final-run", "n_clicks"),
    State("final-token", "value"),
    State("final-round", "value"),
    State("final-seed", "value"),
    State("final-n", "value"),
    State("final-samples", "value"),
    State("final-extra", "value"),
    State("final-nominees", "value"),
    State("final-packages", "data"),
    prevent_initial_call=True,
)
def _start(_n, token, round_tag, seed, n, samples, extra, text, packages):
    """The token and the form are checked here, on the server, before a job is launched; the job carries
    an organizer grant for exactly this request, never the token (which would sit in the broker)."""
    try:
        require_organizer(token)
        lines = _lines(text, packages)
        _request(round_tag, seed, n, samples, extra, lines)
        job = {"round": round_tag, "seed": seed, "n": n, "samples": samples, "extra": extra, "lines": lines}
        job["grant"] = organizer_grant(token, _grant_subject(job))
    except OrganizerDenied as exc:
        return no_update, dbc.Alert(f"Refused: {exc}.", color="danger", className="py-2", id="final-refused")
    except (FinalError, ValueError, KeyError, FileNotFoundError) as exc:
        message = exc.args[0] if isinstance(exc, KeyError) and exc.args else str(exc)
        return no_update, dbc.Alert(f"Nothing started: {message}", color="danger", className="py-2",
                                    id="final-refused")
    return job, None


def _grant_subject(job: dict) -> dict:
    """What an organizer grant vouches for: the job's every field but the grant."""
    return {key: job.get(key) for key in ("round", "seed", "n", "samples", "extra", "lines")}


def _job_cost(job) -> float | None:
    """Its most work: every nominee on every MLP it may score, each at the round's budget. A job without
    a grant for exactly this request is not launched (a hand-made ``final-job``)."""
    if not job:
        return None
    try:
        require_grant(job.get("grant"), _grant_subject(job))
    except OrganizerDenied as exc:
        raise ValueError(str(exc)) from None
    request = _request(job["round"], job["seed"], job["n"], job["samples"], job["extra"], job["lines"])
    return float(len(request.nominees) * (request.n_mlps + request.max_extra_mlps) * get_round(request.round_tag).budget)


@callback(
    Output("final-done", "data"),
    Input("final-job", "data"),
    background=True,
    running=[(Output("final-run", "disabled"), True, False), (Output("final-progress-wrap", "style"), SHOWN, SHOWN)],
    progress=[Output("final-progress", "value"), Output("final-progress", "label"), Output("final-status", "children")],
    interval=500,
    prevent_initial_call=True,
)
@priced("This final", _job_cost)
def _run_job(set_progress, job):
    """The final, in a job process: progress after every reference and every scored pair."""
    if not job:
        return no_update
    set_progress((0, "starting…", "baking the suite"))
    try:
        require_grant(job.get("grant"), _grant_subject(job), admitted=True)  # its launcher checked the clock
        request = _request(job["round"], job["seed"], job["n"], job["samples"], job["extra"], job["lines"])
        record = run_final(request, on_progress=lambda done, total, label: set_progress(
            (100 * done / max(total, 1), f"{done} of {total}", label)))
    except Exception as exc:  # the page shows a sentence, never a traceback
        message = faults.job_error(exc)
        return {"error": message}
    return {"round": record["round"]}


@callback(Output("final-results", "children"), Input("final-done", "data"), State("final-token", "value"),
          prevent_initial_call=True)
def _show(done, token):
    if not done:
        return no_update
    if done.get("error"):
        return dbc.Alert(["The final could not finish: ", done["error"], " Run it again to resume."],
                         color="danger", id="final-error")
    try:
        require_organizer(token)
    except OrganizerDenied as exc:
        return dbc.Alert(f"Refused: {exc}.", color="danger", className="py-2")
    record = load_final_record(done["round"])
    if record is None:
        return dbc.Alert("The final's record is not in the store; run it again.", color="warning", id="final-error")
    return _render(record)


def _cell(value) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def _render(record: dict) -> html.Div:
    header = html.Thead(html.Tr([html.Th(label) for _, label in COLUMNS]))
    body = html.Tbody([html.Tr([html.Td(rank_text(row) if key == "rank" else _cell(row.get(key))) for key, _ in COLUMNS])
                       for row in record["standings"]])
    ties = [html.Li(f"{', '.join(t['teams'])}: {t['extra_mlps']} extra MLPs, decided by {t['decided_by']}"
                    + (" (provisional)" if t.get("provisional") else "")) for t in record["tie_breaks"]]
    return html.Div([
        html.H5(f"Standings of {record['round']}: suite seed {record['suite_seed']}, {record['n_mlps']} MLPs"),
        html.P(record["noise"]["text"], className="small text-muted", id="final-noise"),
        dbc.Alert(record["noise"]["floor_warning"], color="warning", className="py-2")
        if record["noise"].get("floor_warning") else None,
        dbc.Table([header, body], bordered=False, striped=True, size="sm", id="final-standings"),
        html.H6("Tie-breaks"),
        html.Ul(ties, id="final-ties") if ties else html.P("No close finishes.", id="final-ties"),
        pair_list(record, "final-pairs"),
        html.P(f"Scored {record['scorings']['scored']} (submission, MLP) pairs; "
               f"{record['scorings']['reused']} were scored already.", className="small text-muted"),
        html.P(workers_text(record), className="small text-muted", id="final-workers")
        if workers_text(record) else None,
    ])
