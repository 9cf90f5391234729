"""HTTP API for the submissions store: public export, organizer-only import, edit and delete.

The organizer check happens here, on the server, for every write: a request
without ``Authorization: Bearer <WHESTBOARD_ORGANIZER_TOKEN>`` gets 403 and the
store is not touched. The page's upload and edit controls call the same
core functions with the same check (pages/leaderboard.py).

    POST   /api/submissions/import     multipart files (+ team, submission_id, round, flopscope_version)
    PATCH  /api/submissions/<id>       JSON {"team": ..., "status": ..., "submitted_at": ..., "estimator": ...}
    DELETE /api/submissions/<id>
    GET    /api/submissions.csv        every submission, import schema (public, streamed, formulas escaped)
    GET    /api/submissions/per_mlp.csv  public split only; every split with the organizer token
    GET    /api/leaderboard/<round>?split=public|private|rerun   a split's ranking (private, rerun: organizer)
    POST   /api/rescore                JSON {"id": SUBMISSION_OR_RUN_ID}: re-score its stored package (a queued job;
                                       refused where uploads are off: the package is uploaded code)
    GET    /api/rescore/<job_id>       where that re-score stands (its new submission is written once it ends)
    DELETE /api/kept/<name>            drop a dataset kept from the playground (any visitor's)
"""

from __future__ import annotations

import logging

from flask import Blueprint, Flask, Response, jsonify, request
from sqlalchemy.exc import SQLAlchemyError
from werkzeug.exceptions import RequestEntityTooLarge

from server.switches import uploads_on
from whestboard import config
from whestboard.data import KeepRefused, drop_kept
from whestboard.leaderboard import (
    PUBLIC,
    RESCORE_ERRORS,
    SPLITS,
    ImportRejected,
    OrganizerDenied,
    Upload,
    bearer_token,
    delete_submission,
    edit_submission,
    import_uploads,
    is_organizer,
    iter_mlp_results_csv,
    iter_submissions_csv,
    json_records,
    parse_time,
    queue_rescore,
    require_organizer,
    rescore_progress,
    seed_from_shipped,
    viewer_board,
)
from whestboard.rules import ALL_ROUNDS
from whestboard.scoring import UPLOADS_OFF
from whestboard.store import DuplicateKey, strict_json

#: The upload limit when this module was imported, for the leaderboard page until it asks
#: ``config.upload_max_bytes()`` itself; this module reads the setting at every request.
MAX_UPLOAD_BYTES = config.upload_max_bytes()
#: An edit is a few short fields.
MAX_EDIT_BYTES = 64 * 1024

blueprint = Blueprint("organizer_api", __name__)
log = logging.getLogger(__name__)


def _denied(exc: OrganizerDenied):
    return jsonify({"ok": False, "error": str(exc)}), 403


def _check_organizer():
    """None when the request carries the organizer token, else the 403 response."""
    try:
        require_organizer(bearer_token(request.headers.get("Authorization")))
    except OrganizerDenied as exc:
        return _denied(exc)
    return None


@blueprint.errorhandler(RequestEntityTooLarge)
def _too_large(_exc=None):
    """Also for a body sent without Content-Length: Werkzeug stops reading at the request's limit."""
    limit = request.max_content_length or config.upload_max_bytes()
    size = f"{limit / 2**20:g} MiB" if limit >= 2**20 else f"{limit / 2**10:g} KiB"
    return jsonify({"ok": False, "error": f"request larger than {size}; nothing was changed "
                                          "(split an import into several files and requests)"}), 413


def _store_failed(exc: SQLAlchemyError):
    """The store could not be written (unreachable, or a write lost its race every time): nothing changed."""
    log.error("submissions store write failed: %s: %s", type(exc).__name__, exc)
    return jsonify({"ok": False, "error": f"the submissions store could not be written ({type(exc).__name__}); "
                                          "nothing was changed; try again, and check /healthz"}), 503


@blueprint.post("/api/submissions/import")
def import_submissions():
    refused = _check_organizer()
    if refused:
        return refused
    request.max_content_length = config.upload_max_bytes()  # one import request, all its files together
    if request.content_length and request.content_length > request.max_content_length:
        return _too_large()
    uploads = [Upload(f.filename or "upload", f.read()) for f in request.files.getlist("files")]
    if not uploads:
        return jsonify({"ok": False, "error": "send the files as multipart field 'files'"}), 400
    form = request.form
    try:
        report = import_uploads(
            uploads,
            team=form.get("team") or None,
            submission_id=form.get("submission_id") or None,
            round_tag=form.get("round") or None,
            flopscope_version=form.get("flopscope_version") or None,
            split=form.get("split") or None,
        )
    except ImportRejected as exc:
        return jsonify(exc.log.as_json()), 400
    except (KeyError, ValueError) as exc:
        return jsonify({"ok": False, "error": str(exc)}), 400
    except SQLAlchemyError as exc:
        return _store_failed(exc)
    return jsonify({"ok": True, "inserted": report.inserted, "updated": report.updated,
                    "unchanged": report.unchanged, "summary": report.summary(), "notes": report.notes})


@blueprint.patch("/api/submissions/<path:submission_id>")
def edit_submission_route(submission_id: str):
    refused = _check_organizer()
    if refused:
        return refused
    request.max_content_length = MAX_EDIT_BYTES
    try:
        changes = request.get_json(silent=True) if not request.data else strict_json(request.data)
    except RecursionError:  # nested deeper than the JSON parser goes: not an object of fields
        changes = None
    except DuplicateKey as exc:
        return jsonify({"ok": False, "error": str(exc)}), 400
    except ValueError:
        changes = None
    if not isinstance(changes, dict) or not changes:
        return jsonify({"ok": False, "error": "send a JSON object of the fields to change"}), 400
    try:
        if "submitted_at" in changes:
            changes["submitted_at"] = parse_time(changes["submitted_at"])
        found = edit_submission(submission_id, changes)
    except ValueError as exc:
        return jsonify({"ok": False, "error": str(exc)}), 400
    except SQLAlchemyError as exc:
        return _store_failed(exc)
    if not found:
        return jsonify({"ok": False, "error": f"no submission {submission_id!r}"}), 404
    return jsonify({"ok": True})


@blueprint.delete("/api/submissions/<path:submission_id>")
def delete_submission_route(submission_id: str):
    refused = _check_organizer()
    if refused:
        return refused
    try:
        found = delete_submission(submission_id)
    except SQLAlchemyError as exc:
        return _store_failed(exc)
    if not found:
        return jsonify({"ok": False, "error": f"no submission {submission_id!r}"}), 404
    return jsonify({"ok": True})


EXPORT_PATH = "/api/submissions.csv"
MLP_EXPORT_PATH = "/api/submissions/per_mlp.csv"


@blueprint.get(EXPORT_PATH)
def export_submissions():
    """Public: the board's submissions. With the organizer's bearer token: the rows a final wrote too, which
    the organizer's per-MLP export names (their rerun results), so the two files import whole."""
    return _streamed_csv(iter_submissions_csv(with_final=viewer_is_organizer()), "whestboard-submissions.csv")


@blueprint.get(MLP_EXPORT_PATH)
def export_mlp_results():
    """Public: the public split's MLPs. With the organizer's bearer token: every split (private, rerun too)."""
    splits = None if viewer_is_organizer() else (PUBLIC,)
    return _streamed_csv(iter_mlp_results_csv(splits=splits), "whestboard-submissions.per_mlp.csv")


def viewer_is_organizer() -> bool:
    """Whether this request carries the organizer token (what private and rerun results need)."""
    return is_organizer(bearer_token(request.headers.get("Authorization")))


@blueprint.get("/api/leaderboard/<round_tag>")
def leaderboard_split(round_tag: str):
    """A round's ranking of one split with its integrity flags; private and rerun need the organizer token.

    Without the token only the public split is served, and without any column computed
    from withheld MLPs (``integrity.public_columns``): the check is here, on the server.
    """
    split = request.args.get("split", PUBLIC)
    if round_tag not in ALL_ROUNDS:
        return jsonify({"ok": False, "error": f"no round {round_tag!r}; known rounds: {', '.join(ALL_ROUNDS)}"}), 404
    if split not in SPLITS:
        return jsonify({"ok": False, "error": f"split must be one of {', '.join(SPLITS)}"}), 400
    try:
        table = viewer_board(round_tag, split, organizer=viewer_is_organizer())
    except PermissionError as exc:
        return jsonify({"ok": False, "error": f"{exc}: send Authorization: Bearer TOKEN"}), 403
    except SQLAlchemyError as exc:
        log.error("leaderboard read failed: %s: %s", type(exc).__name__, exc)
        return jsonify({"ok": False, "error": f"the submissions store cannot be read ({type(exc).__name__})"}), 503
    return jsonify({"ok": True, "round": round_tag, "split": split, "rows": json_records(table)})


@blueprint.post("/api/rescore")
def rescore():
    """Queue the re-score of a stored package under the installed versions (a new record; the old one kept)."""
    refused = _check_organizer()
    if refused:
        return refused
    if not uploads_on():  # a re-score runs a stored package: uploaded code
        return jsonify({"ok": False, "error": f"not re-scored: {UPLOADS_OFF}"}), 403
    request.max_content_length = MAX_EDIT_BYTES
    body = request.get_json(silent=True)
    identifier = body.get("id") if isinstance(body, dict) else None
    if not isinstance(identifier, str) or not identifier.strip():
        return jsonify({"ok": False, "error": 'send JSON {"id": "<submission id or run id>"}'}), 400
    try:
        queued = queue_rescore(identifier)
    except RESCORE_ERRORS as exc:
        return jsonify({"ok": False, "error": str(exc.args[0]) if exc.args else str(exc)}), 400
    except SQLAlchemyError as exc:
        return _store_failed(exc)
    return jsonify({"ok": True, "job": queued.job_id, "run_id": queued.run_id, "submission_id": queued.submission_id})


@blueprint.get("/api/rescore/<job_id>")
def rescore_status(job_id: str):
    refused = _check_organizer()
    if refused:
        return refused
    progress = rescore_progress(job_id)
    return jsonify({"ok": progress.ok, "finished": progress.finished, "message": progress.text})


@blueprint.delete("/api/kept/<name>")
def drop_kept_dataset(name: str):
    """Drop a dataset kept from the playground, whoever kept it (the organizer's; a visitor drops their own
    on the playground page)."""
    refused = _check_organizer()
    if refused:
        return refused
    try:
        drop_kept(name, owner=None, organizer=True)
    except KeepRefused as exc:
        return jsonify({"ok": False, "error": str(exc)}), 404
    except SQLAlchemyError as exc:
        return _store_failed(exc)
    return jsonify({"ok": True, "dropped": name})


def _streamed_csv(pieces, filename: str) -> Response:
    """Public downloads stream a few thousand rows at a time: a worker never holds the whole store's CSV.

    The first piece (the header, and the store's first read) is taken before the
    response starts, so an unreachable store is a 503 with a message, not a broken download.
    """
    try:
        head = next(pieces)
    except SQLAlchemyError as exc:
        log.error("submissions export failed: %s: %s", type(exc).__name__, exc)
        return jsonify({"ok": False, "error": f"the submissions store cannot be read ({type(exc).__name__}); "
                                              "try again, and check /healthz"}), 503

    def body():
        yield head
        yield from pieces

    return Response(body(), mimetype="text/csv", headers={"Content-Disposition": f"attachment; filename={filename}"})


def register(server: Flask) -> None:
    """Mount the API and import the shipped baselines into an empty store (once, idempotent)."""
    server.register_blueprint(blueprint)
    try:
        seed_from_shipped()
    except Exception:  # a broken store must not stop the other pages from serving
        log.exception("could not import the shipped baseline submissions")
