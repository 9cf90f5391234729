"""Upload: drop an estimator (a file, several files or a tarball), watch it pass the contract check and get scored.

The page opens on a dataset the user added (``WHESTBOARD_DATASETS``) when there is one, with an MLP
selection that dataset has; the selection is checked as it is typed. Every job that ends is added to
the tab's session uploads (``components.shell.SESSION_UPLOADS_ID``), which other pages offer.
"""

from __future__ import annotations

import base64
import json
from dataclasses import replace

import dash
import dash_bootstrap_components as dbc
from dash import Input, Output, State, callback, dcc, html, no_update

from components.figures.upload import per_layer_figure
from components.selectors import index_range, not_found_panel, resolve_selection, selector_row
from components.shell import SESSION_UPLOADS_ID
from components.upload_panels import (
    UPLOAD_RULES,
    default_mlps,
    disabled_panel,
    error_alert,
    job_card,
    session_entries,
    upload_summary,
)
from components.url_state import address_store, keep_address_in_step, query_string
from server import faults
from server.background import visitor_id
from server.identity import client_address
from server.switches import uploads_on
from whestboard import config
from whestboard.data import get_dataset, served_datasets
from whestboard.jobs import QueueFull, cancel_queued_job, check_cost, ensure_executor, queue_job, queued_job
from whestboard.sandbox import (
    MAX_SUBMISSION_FILES,
    UploadError,
    check_size,
    ingest_several,
    ingest_upload,
    is_archive,
    load_upload,
)
from whestboard.scoring import (
    RunError,
    json_report,
    parse_upload_run,
    run_upload_job,
    select_mlps,
    selection_text,
    upload_comparison,
    upload_run,
)

dash.register_page(__name__, path="/upload", name="Upload", order=5, title="Upload · Whestboard")

POLL_MS = 1000


def _allowed() -> bool:
    """The deployment switch, checked on the server for every upload request (not only in the layout)."""
    return uploads_on()


def _client() -> str:
    return visitor_id(client_address())


def _user_dataset_key(round_tag: str | None) -> str | None:
    """The first served dataset the user added (``WHESTBOARD_DATASETS``), of ``round_tag`` when one is named."""
    added = [path.resolve() for path in config.extra_dataset_paths()]
    served = served_datasets()
    for path in added:
        for key, ds in served.items():
            if ds.path.resolve() == path and round_tag in (None, ds.info.round_tag):
                return key
    return None


def _selection(dataset: str | None, round_tag: str | None):
    """The URL's choice; with no dataset named, a dataset the user added wins over the embedded one."""
    if not (dataset or "").strip():
        added = _user_dataset_key((round_tag or "").strip() or None)
        if added is not None:
            return resolve_selection(dataset=added)
    return resolve_selection(dataset=dataset, round=round_tag)


def _form(selection, mlps: str | None = None, team: str | None = None) -> html.Div:
    """The form, opened on the address's MLPs and team (the dataset's first MLPs and no team without them)."""
    dataset = get_dataset(selection.dataset_key)
    return html.Div([
        selector_row(selection, target_path="/upload"),
        dbc.Row([
            dbc.Col([dbc.Label("MLPs", html_for="upload-mlps"),
                     dbc.Input(id="upload-mlps", value=default_mlps(dataset.indices) if mlps is None else mlps[:200],
                               size="sm", debounce=False,
                               placeholder="0:8, 3 or 0,2,5 (empty: all)"),
                     dbc.FormFeedback(id="upload-mlps-feedback", type="invalid"),
                     dbc.FormText(f"this dataset holds MLPs {index_range(dataset)}",
                                  id="upload-mlps-help")], width=3),
            dbc.Col([dbc.Label("Team (optional)", html_for="upload-team"),
                     dbc.Input(id="upload-team", value=(team or "")[:100] or None, size="sm", maxlength=100)],
                    width=3),
        ], className="g-2 mb-2"),
        dcc.Upload(
            id="upload-file", max_size=config.upload_max_bytes(), multiple=True,
            children=html.Div(["Drop estimator.py, the files of your submission folder (estimator.py with its "
                               "helpers and data files) or the .tar.gz from `whest package` here, or ",
                               html.A("choose files", href="#")]),
            className="border border-2 rounded p-4 text-center text-muted mb-2",
            style={"borderStyle": "dashed"},
        ),
        html.Div(id="upload-file-status"),
        dbc.Button("Check and score", id="upload-run", color="primary", disabled=True, className="me-2"),
        dbc.Button("Cancel", id="upload-cancel", color="secondary", outline=True, disabled=True),
        html.Div(id="upload-submit-status", className="mt-2"),
    ])


def layout(dataset: str | None = None, round: str | None = None, mlps: str | None = None,  # noqa: A002
           team: str | None = None, **_query) -> html.Div:
    intro = html.P([
        "Your estimator runs in its own confined worker process under the round's rules, exactly as the grader "
        "scores it. ", UPLOAD_RULES, " Results join the ", html.A("convergence page", href="/convergence"),
        " and can be compared in the ", html.A("lab", href="/lab"), ".",
    ], className="text-muted")
    if not _allowed():
        return html.Div([html.H2("Score your estimator"), intro, disabled_panel()])
    selection = _selection(dataset, round)
    if not selection.ok:
        return html.Div([html.H2("Score your estimator"), not_found_panel("Dataset not found", selection.problem)])
    return html.Div([
        html.H2("Score your estimator"), intro, _form(selection, mlps, team),
        address_store("upload-address"),
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
    check_size(len(encoded) * 3 // 4 - encoded.count("=", -2))
    try:
        return base64.b64decode(encoded, validate=True)
    except ValueError:
        raise UploadError("the upload arrived garbled; try again") from None


def _ingest(contents: list[str], filenames: list[str]):
    """One upload from what was dropped: a lone file as itself, several files as one folder submission."""
    if len(contents) == 1:
        return ingest_upload(_decode(contents[0]), filenames[0] or "", client=_client())
    if len(contents) > MAX_SUBMISSION_FILES:
        raise UploadError(f"{len(contents)} files, over whestbench's {MAX_SUBMISSION_FILES}-file cap")
    named, total = [], 0
    for body, name in zip(contents, filenames, strict=True):
        data = _decode(body)
        total += len(data)
        check_size(total)
        named.append((name or "", data))
    if any(is_archive(name) for name, _ in named):
        raise UploadError("a `whest package` tarball is a whole submission: upload it alone")
    return ingest_several(named, client=_client())


@callback(Output("upload-sha", "data"), Output("upload-file-status", "children"), Output("upload-run", "disabled"),
          Input("upload-file", "contents"), State("upload-file", "filename"), prevent_initial_call=True)
def _accept(contents: list[str] | str | None, filenames: list[str] | str | None):
    if not _allowed():
        return None, error_alert("Uploads are disabled on this server."), True
    contents = [contents] if isinstance(contents, str) else [c for c in (contents or []) if c]
    filenames = [filenames] if isinstance(filenames, str) else list(filenames or [])
    if not contents or len(filenames) != len(contents):
        return None, error_alert(f"No file received (the limit is {config.upload_max_bytes() / 2**20:g} MiB a file)."), True
    try:
        upload = _ingest(contents, filenames)
    except UploadError as exc:
        return None, error_alert(str(exc)), True
    return upload.sha256, upload_summary(upload), False


@callback(Output("upload-address", "data"), Input("upload-mlps", "value"), Input("upload-team", "value"),
          State("upload-dataset", "data"), prevent_initial_call=True)
def _sync_url(mlps: str | None, team: str | None, dataset_key: str | None):
    """The MLPs and team are in the address, as every choice a page offers (the file cannot be); an empty
    selection, every MLP, is written as the dataset's whole range (an empty value would reopen on the first four)."""
    if not (mlps or "").strip() and dataset_key:
        try:
            mlps = selection_text(get_dataset(dataset_key).indices)
        except (KeyError, FileNotFoundError):
            mlps = None
    return query_string({"dataset": dataset_key, "mlps": mlps, "team": team or None})


keep_address_in_step("upload-address")


@callback(Output("upload-mlps", "invalid"), Output("upload-mlps-feedback", "children"),
          Input("upload-mlps", "value"), State("upload-dataset", "data"))
def _check_mlps(text: str | None, dataset_key: str | None):
    """The selection checked as it is typed, by the parser the job uses."""
    if not dataset_key:
        return False, None
    try:
        select_mlps(get_dataset(dataset_key), text or "")
    except (RunError, KeyError) as exc:
        return True, str(exc.args[0]) if exc.args else str(exc)
    return False, None


@callback(Output("upload-job", "data"), Output("upload-submit-status", "children"),
          Input("upload-run", "n_clicks"), State("upload-sha", "data"), State("upload-dataset", "data"),
          State("upload-mlps", "value"), State("upload-team", "value"), prevent_initial_call=True)
def _submit(_clicks, sha: str | None, dataset_key: str | None, mlps: str | None, team: str | None):
    if not _allowed():
        return no_update, error_alert("Uploads are disabled on this server.")
    if not sha or not dataset_key:
        return no_update, error_alert("Upload an estimator first.")
    try:
        asked = parse_upload_run({"upload": sha, "dataset": dataset_key, "mlps": mlps or "", "team": team})
        load_upload(asked.upload)
        check_cost("This upload's run", asked.cost)  # the queue bounds how many
        job_id = queue_job(_client(), asked.payload())
    except (KeyError, QueueFull, ValueError) as exc:  # budgets.OverBudget is a ValueError
        return no_update, error_alert(str(exc.args[0]) if exc.args else str(exc))
    ensure_executor(run_upload_job)
    return job_id, None


@callback(Output("upload-job-card", "children"), Output("upload-poll", "disabled"),
          Output("upload-cancel", "disabled"), Output("upload-layers", "figure"), Output("upload-layers", "style"),
          Output("upload-download-button", "style"), Output(SESSION_UPLOADS_ID, "data"),
          Input("upload-poll", "n_intervals"), Input("upload-job", "data"), State(SESSION_UPLOADS_ID, "data"))
def _show_job(_tick, job_id: int | None, session_uploads: list | None):
    hidden = {"display": "none"}
    if not job_id:
        return None, True, True, no_update, hidden, hidden, no_update
    job = queued_job(job_id)
    if job is None:
        return (error_alert(f"Job {job_id} is not known to this server."), True, True, no_update, hidden, hidden,
                no_update)
    if not job.finished:
        ensure_executor(run_upload_job)
        return job_card(job), False, False, no_update, hidden, hidden, no_update
    if job.status == "failed" and faults.classify_message(job.error or ""):  # said in the faults' words
        job = replace(job, error=faults.sentence(faults.classify_message(job.error)))
    session = _session_after(session_uploads, job)
    card = job_card(job, report=upload_run(job.result or {}))
    data = upload_comparison(job.result or {})
    if data is None:
        return card, True, True, no_update, hidden, hidden, session
    figure = per_layer_figure(data["series"], upload_label=data["label"], noise_floor=data["noise_floor"])
    return card, True, True, figure, {}, {}, session


def _session_after(session_uploads: list | None, job):
    """The tab's session uploads with this ended job added (newest last, at most 20); no_update if it is there."""
    spec, result = job.spec or {}, job.result or {}
    dataset_key = spec.get("dataset")
    round_tag = (result.get("grader_environment") or {}).get("round_tag")
    if round_tag is None and dataset_key:
        try:
            round_tag = get_dataset(dataset_key).info.round_tag
        except KeyError:
            round_tag = None
    entry = {"upload": spec.get("upload"), "label": (result.get("upload") or {}).get("filename") or "",
             "run_id": result.get("run_id"), "dataset": dataset_key, "round": round_tag}
    updated = session_entries(session_uploads, entry)
    return no_update if updated is None else updated


@callback(Output("upload-submit-status", "children", allow_duplicate=True), Input("upload-cancel", "n_clicks"),
          State("upload-job", "data"), prevent_initial_call=True)
def _cancel(_clicks, job_id: int | None):
    if not job_id:
        return no_update
    done = cancel_queued_job(job_id, client=_client())
    return dbc.Alert("Cancelling…" if done else "This job already ended.", color="secondary", className="py-2")


@callback(Output("upload-download", "data"), Input("upload-download-button", "n_clicks"), State("upload-job", "data"),
          prevent_initial_call=True)
def _download(_clicks, job_id: int | None):
    job = queued_job(job_id) if job_id else None
    payload = json_report(job.result or {}) if job else None
    if payload is None:
        return no_update
    return dcc.send_string(json.dumps(payload, indent=2, default=str), f"whestboard-run-{payload['whestboard']['run_id']}.json")
