"""Pieces of the upload page: the upload card, the job card and its verdict table (data in, HTML out)."""

from __future__ import annotations

import time

import dash_bootstrap_components as dbc
from dash import html

from components.compare_panels import compare_url
from components.figures.lab import summary_cards
from components.figures.margins import margins_panel
from components.figures.upload import LABELS
from components.format import integer, sci
from components.url_state import href
from whestboard.jobs import RERUN
from whestboard.rules import error_hint, margins_from_dict

VERDICT_COLORS = {"ok": "success", "budget": "danger", "combined": "danger", "time": "danger",
                  "residual": "danger", "exception": "danger", "shape": "warning", "non-finite": "warning",
                  "memory": "danger", "fork": "dark", "disk": "dark", "crash": "dark"}

DISABLED_WHY = (
    "Uploads are off on this server. It runs under gunicorn, i.e. as a shared deployment, and uploaded "
    "estimators are arbitrary code: an operator turns them on with WHESTBOARD_ALLOW_UPLOADS=1 after reading "
    "the sandbox's threat model (docs/uploads.md). On your own machine `python app.py` "
    "has them on, and the command line scores a file in the same sandbox: "
)
UPLOAD_RULES = (
    "It first passes a contract check (the class resolves as whestbench's loader resolves it, setup() returns "
    "within 5 s, and predict() on a small MLP returns a finite (depth, width) array within the budget, the wall "
    "cap and the residual-time rule). Limits: a .py, the files of a submission folder (estimator.py with its "
    "helpers and data, shipped as `whest package --estimator DIR` ships them) or a `whest package` .tar.gz, "
    "at most 50 files and 50 MiB; 8 GiB of memory; no processes, threads or network; no access to the app's "
    "files; under Phase 2 rules no numpy, as on the grader; one job at a time per machine, in order of "
    "arrival."
)
CLI_EXAMPLE = "python -m whestboard score --estimator estimator.py --dataset v1-warmup"
#: How many MLPs the page proposes by default (all of them on a dataset this small or smaller).
DEFAULT_MLP_COUNT = 4
#: The session-uploads store's length (newest last), as the shell's contract says.
SESSION_UPLOADS_MAX = 20
LONE_FILE_NOTE = ("Only this file ships, as `whest package --estimator FILE` ships it. If setup() reads files next "
                  "to it, or it imports helper modules, select them together with it (or upload the `whest "
                  "package` tarball of the folder).")


def default_mlps(indices: list[int]) -> str:
    """A selection the dataset has: its first MLPs (all of them when it holds at most ``DEFAULT_MLP_COUNT``)."""
    first = sorted(indices)[:DEFAULT_MLP_COUNT]
    if not first:
        return ""
    if first == list(range(first[0], first[-1] + 1)):
        return f"{first[0]}:{first[-1] + 1}"
    return ",".join(map(str, first))


def session_entries(current: list | None, entry: dict) -> list | None:
    """``current`` with ``entry`` appended (newest last, at most 20), or None when it is already there."""
    entries = [e for e in (current or []) if isinstance(e, dict)]
    if entry in entries:
        return None
    return (entries + [entry])[-SESSION_UPLOADS_MAX:]


def disabled_panel() -> dbc.Alert:
    return dbc.Alert([html.H5("Uploads are disabled", className="alert-heading"), DISABLED_WHY,
                      html.Code(CLI_EXAMPLE)], color="warning", id="upload-disabled")


def upload_summary(upload) -> html.Div:
    """What was accepted and exactly which files ship (the entry first marked), with a note for a lone file."""
    items = [html.Li([html.Code(f.name), f" ({integer(f.size)} B)", " — entry" if f.name == upload.entry else ""],
                     className="shipped-file") for f in upload.files]
    note = LONE_FILE_NOTE if upload.kind == "py" else None
    return dbc.Alert(
        [html.Strong(upload.filename), f" accepted ({upload.kind}, {len(upload.files)} file(s), "
                                        f"{integer(upload.total_bytes)} bytes). ",
         html.Span(["sha256 ", html.Code(upload.sha256, id="upload-sha-text")]),
         html.Div("Files that ship:", className="small mt-1"),
         html.Ul(items, className="small mb-1", id="upload-shipped"),
         html.Div(note, className="small text-muted", id="upload-lone-note") if note else None],
        color="info", className="py-2",
    )


def whest_error_panel(result: dict) -> html.Div:
    """A failure before any MLP was scored, named by whest run's code: what happened, said once, and what to
    change for this case (``rules.explained_error``); whest's own message, which covers every case, folded."""
    error = result.get("whest_error")
    if not error:
        return html.Div()
    sentence = error.get("sentence") or error.get("message", "")
    own = error.get("message", "")
    return dbc.Alert([html.Strong(["whest run would fail too: ", html.Code(error.get("code", ""),
                                                                             id="upload-error-code")]),
                      html.Div(sentence, className="small", id="upload-error-message"),
                      html.Div(["What to do: ", error.get("hint") or error_hint(error.get("code"))],
                               className="mt-1", id="upload-error-hint"),
                      html.Details([html.Summary("whest run's own message", className="small"),
                                    html.Div(own, className="small")], className="mt-1")
                      if own and own != sentence else None],
                     color="danger", className="py-2", id="upload-whest-error")


def error_alert(message: str) -> dbc.Alert:
    return dbc.Alert(message, color="danger", className="py-2", id="upload-error")


def _phase_text(job) -> str:
    progress = job.progress or {}
    if job.status == "queued":
        again = (f"Its run stopped ({job.error[len(RERUN) + 2:]}), so it runs again from the start. "
                 if (job.error or "").startswith(RERUN) else "")
        return again + f"Waiting in the queue: position {job.position}" + (" (next)" if job.position == 1 else "")
    if job.status == "running":
        return progress.get("message") or "running"
    if job.status == "finished":
        return "Done" + (" (identical run served from the store)" if (job.result or {}).get("cached") else "")
    if job.status == "cancelled":
        return f"Cancelled: {job.error or ''}"
    return f"Failed: {job.error or 'unknown error'}"


def progress_bar(job) -> dbc.Progress:
    progress = job.progress or {}
    total = max(1, int(progress.get("total") or 1))
    done = int(progress.get("done") or 0)
    if job.status == "finished":
        value, label = 100, "done"
    elif job.status == "queued":
        value, label = 0, f"queued #{job.position}"
    elif progress.get("phase") == "contract":
        value, label = 3, "contract check"
    elif progress.get("phase") == "baselines":
        value, label = 100, "comparing with baselines"
    else:
        value, label = round(100 * done / total), f"{done}/{total} MLPs"
    animated = job.status in ("queued", "running")
    color = {"failed": "danger", "cancelled": "secondary"}.get(job.status, "primary")
    return dbc.Progress(value=value, label=label, striped=animated, animated=animated, color=color,
                        id="upload-progress", className="mb-2", style={"height": "1.4rem"})


def verdict_table(verdicts: list[dict]) -> dbc.Table | html.Div:
    if not verdicts:
        return html.Div()
    header = html.Thead(html.Tr([html.Th(h) for h in ("MLP", "name", "verdict", "FLOPs", "final MSE", "wall s",
                                                      "residual s", "what happened")]))
    rows = []
    for v in verdicts:
        rows.append(html.Tr([
            html.Td(v["mlp_index"]), html.Td(v.get("mlp_name", "")),
            html.Td(dbc.Badge(v["verdict"], color=VERDICT_COLORS.get(v["verdict"], "secondary"),
                              className="verdict-badge")),
            html.Td(integer(v.get("flops_used"))), html.Td(sci(v.get("final_layer_mse"))),
            html.Td(sci(v.get("wall_time_s"))), html.Td(sci(v.get("residual_wall_time_s"))),
            html.Td([v.get("message") or "", _tampering_flag(v.get("meter_tampering"))], className="small"),
        ], className="verdict-row"))
    return html.Div([_tampering_summary(verdicts),
                     dbc.Table([header, html.Tbody(rows)], size="sm", hover=True, id="upload-verdicts")])


def _tampering_flag(sentence: str | None) -> html.Div | str:
    """The sandbox's integrity flag beside the grader's verdict (which it does not change)."""
    if not sentence:
        return ""
    return html.Div([dbc.Badge("meter tampering", color="danger", className="me-1"), sentence],
                    className="meter-tampering text-danger")


def _tampering_summary(verdicts: list[dict]) -> html.Div:
    flagged = [v for v in verdicts if v.get("meter_tampering")]
    if not flagged:
        return html.Div()
    return dbc.Alert([html.Strong(f"Meter tampering seen on {len(flagged)} of {len(verdicts)} MLP(s). "),
                      "The scores below are the grader's, as it would bill them; they were not earned under "
                      "flopscope's meter. Organizers see this flag on the leaderboard."],
                     color="danger", id="upload-meter-tampering")


def contract_list(contract: dict | None, named: str | None = None) -> html.Div:
    """The contract's steps; a failed step whose failure ``named`` (its whest code) the panel above already
    says points there instead of saying it again."""
    if not contract:
        return html.Div()
    items = []
    for step in contract.get("steps", []):
        mark = "✓" if step["ok"] else "✗"
        said_above = not step["ok"] and named and step.get("code") == named
        message = f"failed with {named}: what happened and what to do are above" if said_above else \
            step.get("message", "")
        body = [html.Strong(f"{mark} {step['name']}: "), message]
        if not step["ok"] and step.get("fix") and not said_above:
            body += [html.Br(), html.Em(f"Fix: {step['fix']}")]
        if not step["ok"] and step.get("traceback"):
            body.append(html.Details([html.Summary("Traceback (your files)", className="small"),
                                      html.Pre(step["traceback"], className="small bg-light p-2 mt-1")]))
        items.append(html.Li(body, className="text-success" if step["ok"] else "text-danger"))
    return html.Div([html.H6("Contract check"), html.Ul(items, className="list-unstyled", id="upload-contract")])


def _output_block(result: dict) -> html.Div:
    output = result.get("output")
    if output is None:
        return html.Div()
    note = " (middle omitted: only the head and tail are kept)" if result.get("output_truncated") else ""
    return html.Details([html.Summary(f"Estimator output (stdout + stderr){note}"),
                         html.Pre(output or "(nothing printed)", id="upload-output", className="small bg-light p-2",
                                  style={"maxHeight": "20rem", "overflowY": "auto"})])


def _confinement_line(result: dict) -> html.Div:
    facts = result.get("confinement") or {}
    if not facts:
        return html.Div()
    rl = facts.get("rlimits", {})
    parts = [facts.get("identity", ""), f"memory {sci(rl.get('RLIMIT_AS', 0) / 2**30)} GiB",
             f"private /tmp {facts['private_tmp']}" if facts.get("private_tmp") else "",
             f"Landlock ABI {facts.get('landlock_abi')}" if facts.get("landlock_abi") else "no Landlock",
             "seccomp on" if facts.get("seccomp") else "no seccomp"]
    missing = facts.get("missing") or {}
    text = "Sandbox: " + ", ".join(p for p in parts if p) + (
        f"; not applied: {', '.join(missing)}" if missing else "")
    return html.Div(text, className="small text-muted", id="upload-confinement")


def result_summary(report: dict) -> html.Div:
    """What the upload's result leads with, as the lab's does (the same cards from the same report: score, mean
    MSE, MC@B and "x better than sampling", charged compute), and the link to its place on the band."""
    dataset = (report.get("dataset") or {}).get("key", "")
    label = (report.get("estimator") or {}).get("label", "")
    band = href("/convergence", {"dataset": dataset, "highlight": f"estimator:{label}"})
    return html.Div([
        summary_cards(report, prefix="upload"),
        html.Div(["Where it stands against Monte Carlo and the baselines at every budget: ",
                  html.A("its place on the convergence band", href=band, id="upload-band-link"),
                  f" ({dataset}, highlighted)."], className="small mt-1"),
    ], id="upload-result-summary", className="mb-3")


def job_card(job, *, now: float | None = None, report: dict | None = None) -> html.Div:
    """Status, progress, the result's summary (``report``: the recorded run, once there is one), verdicts,
    output and links of one job."""
    now = now or time.time()
    result = job.result or {}
    verdicts = result.get("verdicts") or (job.progress or {}).get("verdicts") or []
    waited = (job.started_at or now) - job.created_at
    header = html.Div([html.Strong(f"Job {job.id}: "), html.Span(_phase_text(job), id="upload-phase"),
                       html.Span(f"  (waited {waited:.0f} s)", className="text-muted small")])
    links = []
    if result.get("run_id"):
        label = (result.get("upload") or {}).get("filename", "")
        dataset = job.spec.get("dataset", "")
        links = [html.Div([
            "Run ", html.Code(result["run_id"], id="upload-run-id"), " recorded: see its dot on the ",
            html.A("convergence page", id="upload-convergence-link",
                   href=href("/convergence", {"dataset": dataset, "highlight": f"estimator:{label}"})),
            " (highlighted) or compare in the ", html.A("lab", href=href("/lab", {"dataset": dataset})),
            ".",
        ], className="mb-2"), _compare_links(result)]
    margins = [margins_panel(margins_from_dict(result["margins"]), "upload")] if result.get("margins") else []
    summary = result_summary(report) if report is not None else html.Div()
    return html.Div([header, progress_bar(job), summary, *links, whest_error_panel(result), _rule_line(result),
                     contract_list(result.get("contract"), (result.get("whest_error") or {}).get("code")),
                     verdict_table(verdicts), *margins, _output_block(result),
                     _confinement_line(result)])


def _compare_links(result: dict) -> html.Div:
    """Paired comparisons of the upload's run with each baseline scored on the same MLPs."""
    run = f"run:{result['run_id']}"
    baselines = [(name, run_id) for name, run_id in (result.get("baselines") or {}).items() if run_id]
    if not baselines:
        return html.Div([html.A("Compare this run with another", href=compare_url(run), id="upload-compare-link")],
                        className="mb-2")
    parts: list = ["Paired comparison with "]
    for k, (name, run_id) in enumerate(baselines):
        parts += [", " if k else "", html.A(LABELS.get(name, name), href=compare_url(run, f"run:{run_id}"),
                                            id=f"upload-compare-{name}")]
    return html.Div([*parts, " on the same MLPs, or with ",
                     html.A("any other run", href=compare_url(run), id="upload-compare-link"), "."], className="mb-2")


def _rule_line(result: dict) -> html.Div:
    """Which grader import rule the run was held to, and what shipped."""
    rule = (result.get("grader_environment") or {}).get("rule")
    shipped = result.get("shipped") or {}
    parts = [f"Imports: {rule}." if rule else "",
             f" Shipped {len(shipped.get('files') or [])} file(s) ({shipped.get('mode')})." if shipped else ""]
    text = "".join(parts).strip()
    return html.Div(text, className="small text-muted", id="upload-rule") if text else html.Div()
