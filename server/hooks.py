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


def report_callback_error(err: Exception):
    """Log every callback error with context; show dead jobs to the user, re-raise the rest."""
    logs.error("callback.error", err, what=callback_what(), client=request_client_id())
    if isinstance(err, BackgroundCallbackError) and JOB_FAILED in str(err):
        message = str(err).split("callback: ", 1)[-1].strip()
        set_props(JOB_NOTICE_ID, {"children": message, "is_open": True})
        return None
    raise err


def install() -> None:
    """Register the hook once per process, before the first Dash app is made."""
    global _installed
    if not _installed:
        hooks.error()(report_callback_error)
        _installed = True
