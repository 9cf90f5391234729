"""The Dash hook every page gets: callback errors logged with context, dead jobs shown to the user.

Registered by :func:`install`, which ``create_app`` calls before the app is built (Dash reads its hooks
when an app is created).
"""

from __future__ import annotations

from dash import hooks, set_props
from dash.exceptions import BackgroundCallbackError
from flask import request
from werkzeug.exceptions import HTTPException

from components.shell import JOB_NOTICE_ID
from server import faults
from server.background import JOB_FAILED, request_client_id
from whestboard import logs

_installed = False


def callback_what() -> str:
    """Which callback a request asked for, for the logs; never reads a body the server refused."""
    try:
        body = request.get_json(silent=True) or {}
        return str(body.get("output", ""))[:200] if isinstance(body, dict) else ""
    except (RuntimeError, HTTPException, RecursionError):  # outside a request; too large; too deep
        return ""


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
    """Log every callback error with context; show dead jobs and infrastructure faults (a full disk,
    the broker or the database away) to the user as a sentence, re-raise the rest."""
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
