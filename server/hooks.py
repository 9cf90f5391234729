"""The Dash hook every page gets: callback errors logged with context, dead jobs shown to the user.

Registered by :func:`install`, which ``create_app`` calls before the app is built (Dash reads its hooks
when an app is created).
"""

from __future__ import annotations

import logging
import traceback

from dash import hooks, set_props
from dash.exceptions import BackgroundCallbackError
from flask import abort, request
from sqlalchemy.exc import InterfaceError, ProgrammingError
from werkzeug.exceptions import HTTPException

from components.shell import JOB_NOTICE_ID
from server import faults
from server.background import JOB_FAILED, JOB_REFUSED, request_client_id
from whestboard import logs

_installed = False


def callback_what() -> str:
    """Which callback a request asked for, for the logs; never reads a body the server refused."""
    try:
        body = request.get_json(silent=True) or {}
        return str(body.get("output", ""))[:200] if isinstance(body, dict) else ""
    except (RuntimeError, HTTPException, RecursionError):  # outside a request; too large; too deep
        return ""


#: What a callback raises when a hand-made request gives it a value the page never holds (a Store's data
#: of the wrong shape): the request's fault, answered 400, not the server's.
INPUT_ERRORS = (TypeError, ValueError, KeyError, AttributeError, IndexError, OverflowError, NotImplementedError,
                ProgrammingError, InterfaceError)  # the last two: a value the database cannot bind


def refuse_unusable_inputs(err: Exception) -> None:
    """Answer 400 with a sentence; the log names the exception and where it was raised, without a traceback."""
    where = traceback.extract_tb(err.__traceback__)[-1] if err.__traceback__ else None
    logs.event("callback.refused", level=logging.WARNING, what=callback_what(), client=request_client_id(),
               verdict="refused", reason=f"{type(err).__name__}: {str(err)[:200]}",
               at=f"{where.filename.rsplit('/', 1)[-1]}:{where.lineno}" if where else None)
    abort(400, description="this callback could not use the values it was sent, which are not ones this page "
                           "sends; reload the page and try again")


def user_message(err: Exception) -> str | None:
    """The sentence the user sees for an error they can act on, or None for a bug (re-raised, a 500)."""
    if isinstance(err, BackgroundCallbackError):
        text = str(err).split("callback: ", 1)[-1].strip()
        if JOB_FAILED in text:
            return text.split("\nTraceback", 1)[0].strip()
        kind = faults.classify_message(text)
        return f"{JOB_FAILED}{kind} failure). {faults.sentence(kind)}" if kind else None
    return faults.describe(err)


def report_callback_error(err: Exception):
    """Log every callback error with context; show dead jobs, refused ones and infrastructure faults (a full
    disk, the broker or the database away) to the user as a sentence; answer 400 to values a callback
    cannot use; re-raise the rest."""
    if isinstance(err, BackgroundCallbackError) and JOB_REFUSED in str(err):  # the budgets said no
        set_props(JOB_NOTICE_ID, {"children": str(err).split(JOB_REFUSED, 1)[-1].strip(), "is_open": True})
        return None
    if (isinstance(err, INPUT_ERRORS) and not isinstance(err, BackgroundCallbackError)
            and faults.classify(err) is None):
        refuse_unusable_inputs(err)
    logs.error("callback.error", err, what=callback_what(), client=request_client_id())
    message = user_message(err)
    if message is not None:
        set_props(JOB_NOTICE_ID, {"children": message, "is_open": True})
        return None
    raise err


def install() -> None:
    """Register the hook once per process, before the first Dash app is made."""
    global _installed
    if not _installed:
        hooks.error()(report_callback_error)
        _installed = True
