"""Upload: drop an estimator, watch it pass the contract check and get scored in the sandbox."""

from __future__ import annotations

import base64
import json

import dash
import dash_bootstrap_components as dbc
from dash import Input, Output, State, callback, dcc, html, no_update
from flask import current_app, request

from components.figures.upload import per_layer_figure
from components.selectors import not_found_panel, resolve_selection, selector_row
from components.upload_panels import UPLOAD_RULES, disabled_panel, error_alert, job_card, upload_summary
from whestboard import config as settings
from whestboard import logs
from whestboard.jobs import queue as jobqueue
from whestboard.sandbox import ingest as uploads
from whestboard.scoring import uploads as upload_runs

dash.register_page(__name__, path="/upload", name="Upload", order=5, title="Upload · Whestboard")

MAX_UPLOAD_BYTES = uploads.MAX_SUBMISSION_BYTES
POLL_MS = 1000


def _allowed() -> bool:
    """The deployment switch, checked on the server for every upload request (not only in the layout)."""
    return settings.uploads_allowed(under_gunicorn=bool(current_app.config.get("WHESTBOARD_UNDER_GUNICORN")))


def _client() -> str:
    address = request.access_route[0] if request.access_route else request.remote_addr
    return logs.client_id(address, None, settings.state_dir())


def _form(selection) -> html.Div:
    return html.Div([
        selector_row(selection, target_path="/upload"),
        dbc.Row([
            dbc.Col([dbc.Label("MLPs", html_for="upload-mlps"),
                     dbc.Input(id="upload-mlps", value="0:4", size="sm",
                               placeholder="0:8, 3 or 0,2,5 (empty: all)")], width=3),
            dbc.Col([dbc.Label("Team (optional)", html_for="upload-team"),
                     dbc.Input(id="upload-team", size="sm", maxlength=100)], width=3),
        ], className="g-2 mb-2"),
        dcc.Upload(
            id="upload-file", max_size=MAX_UPLOAD_BYTES, accept=".py,.tar.gz,.tgz", multiple=False,
            children=html.Div(["Drop estimator.py or the .tar.gz from `whest package` here, or ",
                                html.A("choose a file", href="#")]),
            className="border border-2 rounded p-4 text-center text-muted mb-2",
            style={"borderStyle": "dashed"},
        ),
        html.Div(id="upload-file-status"),
        dbc.Button("Check and score", id="upload-run", color="primary", disabled=True, className="me-2"),
        dbc.Button("Cancel", id="upload-cancel", color="secondary", outline=True, disabled=True),
        html.Div(id="upload-submit-status", className="mt-2"),
    ])


def layout(dataset: str | None = None, round: str | None = None, **_query) -> html.Div:  # noqa: A002
    intro = html.P([
        "Your estimator runs in its own confined worker process under the round's rules, exactly as the grader "
        "scores it. ", UPLOAD_RULES, " Results join the ", html.A("convergence page", href="/convergence"),
        " and can be compared in the ", html.A("lab", href="/lab"), ".",
    ], className="text-muted")
    if not _allowed():
        return html.Div([html.H2("Score your estimator"), intro, disabled_panel()])
    selection = resolve_selection(dataset=dataset, round=round)
    if not selection.ok:
        return html.Div([html.H2("Score your estimator"), not_found_panel("Dataset not found", selection.problem)])
    return html.Div([
        html.H2("Score your estimator"), intro, _form(selection),
        dcc.Store(id="upload-sha", storage_type="session"),
        dcc.Store(id="upload-job", storage_type="session"),
        dcc.Store(id="upload-dataset", data=selection.dataset_key),
        dcc.Interval(id="upload-poll", interval=POLL_MS, disabled=True),
        html.Hr(),
        html.Div(id="upload-job-card"),
        dcc.Graph(id="upload-layers", style={"display": "none"}, config={"displaylogo": False}),
        dbc.Button("Download JSON report", id="upload-download-button", color="secondary", outline=True,
                   size="sm", style={"display": "none"}),
        dcc.Download(id="upload-download"),
    ])


def _decode(contents: str) -> bytes:
    """The uploaded bytes; the size is checked on the base64 text before anything is decoded."""
    _, _, encoded = contents.partition(",")
    uploads.check_size(len(encoded) * 3 // 4 - encoded.count("=", -2))
    try:
        return base64.b64decode(encoded, validate=True)
    except ValueError:
        raise uploads.UploadError("the upload arrived garbled; try again") from None


@callback(Output("upload-sha", "data"), Output("upload-file-status", "children"), Output("upload-run", "disabled"),
          Input("upload-file", "contents"), State("upload-file", "filename"), prevent_initial_call=True)
def _accept(contents: str | None, filename: str | None):
    if not _allowed():
        return None, error_alert("Uploads are disabled on this server."), True
    if not contents:
        return None, error_alert(f"No file received (the limit is {MAX_UPLOAD_BYTES // 2**20} MiB)."), True
    try:
        upload = uploads.ingest(_decode(contents), filename or "")
    except uploads.UploadError as exc:
        return None, error_alert(str(exc)), True
    return upload.sha256, upload_summary(upload), False


@callback(Output("upload-job", "data"), Output("upload-submit-status", "children"),
          Input("upload-run", "n_clicks"), State("upload-sha", "data"), State("upload-dataset", "data"),
          State("upload-mlps", "value"), State("upload-team", "value"), prevent_initial_call=True)
def _submit(_clicks, sha: str | None, dataset_key: str | None, mlps: str | None, team: str | None):
    if not _allowed():
        return no_update, error_alert("Uploads are disabled on this server.")
    if not sha or not dataset_key:
        return no_update, error_alert("Upload an estimator first.")
    try:
        uploads.load(sha)
        job_id = jobqueue.submit(_client(), upload_runs.job_spec(sha, dataset_key, mlps or "", team=team))
    except (KeyError, jobqueue.QueueFull, ValueError) as exc:
        return no_update, error_alert(str(exc.args[0]) if exc.args else str(exc))
    jobqueue.ensure_executor(upload_runs.run_upload_job)
    return job_id, None


@callback(Output("upload-job-card", "children"), Output("upload-poll", "disabled"),
          Output("upload-cancel", "disabled"), Output("upload-layers", "figure"), Output("upload-layers", "style"),
          Output("upload-download-button", "style"),
          Input("upload-poll", "n_intervals"), Input("upload-job", "data"))
def _show_job(_tick, job_id: int | None):
    hidden = {"display": "none"}
    if not job_id:
        return None, True, True, no_update, hidden, hidden
    job = jobqueue.get(job_id)
    if job is None:
        return error_alert(f"Job {job_id} is not known to this server."), True, True, no_update, hidden, hidden
    if not job.finished:
        jobqueue.ensure_executor(upload_runs.run_upload_job)
        return job_card(job), False, False, no_update, hidden, hidden
    data = upload_runs.comparison(job.result or {})
    if data is None:
        return job_card(job), True, True, no_update, hidden, hidden
    figure = per_layer_figure(data["series"], upload_label=data["label"], noise_floor=data["noise_floor"])
    return job_card(job), True, True, figure, {}, {}


@callback(Output("upload-submit-status", "children", allow_duplicate=True), Input("upload-cancel", "n_clicks"),
          State("upload-job", "data"), prevent_initial_call=True)
def _cancel(_clicks, job_id: int | None):
    if not job_id:
        return no_update
    done = jobqueue.cancel(job_id, client=_client())
    return dbc.Alert("Cancelling…" if done else "This job already ended.", color="secondary", className="py-2")


@callback(Output("upload-download", "data"), Input("upload-download-button", "n_clicks"), State("upload-job", "data"),
          prevent_initial_call=True)
def _download(_clicks, job_id: int | None):
    job = jobqueue.get(job_id) if job_id else None
    payload = upload_runs.json_report(job.result or {}) if job else None
    if payload is None:
        return no_update
    return dcc.send_string(json.dumps(payload, indent=2, default=str), f"whestboard-run-{payload['whestboard']['run_id']}.json")
