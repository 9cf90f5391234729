"""Infrastructure faults a user can act on: the disk, the broker or the database failed, not their input.

A full disk under the state folder, Redis going away or the database refusing connections used to
reach the user as a bare HTTP 500 with a traceback in the log. :func:`classify` recognises those
failures (anywhere in an exception's chain, or in the message a background job left behind) and
:func:`sentence` says, in one sentence, what failed, that nothing already stored was lost and what to
do. The Dash error hook (``server/hooks.py``), the Flask error handler (``server/http.py``), the job
wrapper (``server/background.py``) and ``/healthz`` use the same words.
"""

from __future__ import annotations

import errno
import shutil
import sqlite3

from whestboard import config

DISK, BROKER, STORE = "disk", "broker", "store"

_SENTENCES = {
    DISK: ("The server's disk is full, so this could not be saved. Nothing already stored was lost or "
           "changed; please try again later."),
    BROKER: ("The job queue (Redis) cannot be reached right now, so the job could not be handed to a worker. "
             "Nothing was lost; please try again in a minute."),
    STORE: ("The database cannot be reached right now. Nothing already stored was lost; please try again "
            "in a minute."),
}
#: Words a job's stored error message carries when it died of one of these (it crossed a process boundary
#: as text, so the exception itself is gone).
_MESSAGE_MARKS = {
    DISK: ("No space left on device", "database or disk is full", "Disk quota exceeded"),
    BROKER: ("Error 111 connecting to", "Connection to Redis lost", "Redis is loading"),
}


def _chain(exc: BaseException):
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        yield exc
        exc = exc.__cause__ or exc.__context__


def _broker_errors() -> tuple[type[BaseException], ...]:
    found: list[type[BaseException]] = []
    try:
        import redis

        found += [redis.exceptions.ConnectionError, redis.exceptions.TimeoutError, redis.exceptions.BusyLoadingError]
    except ImportError:
        pass
    try:
        import kombu.exceptions

        found.append(kombu.exceptions.OperationalError)
    except ImportError:
        pass
    return tuple(found)


def _store_errors() -> tuple[type[BaseException], ...]:
    from sqlalchemy import exc as sa

    return (sa.OperationalError, sa.InterfaceError)


def state_free_mb() -> float:
    """MiB free on the state folder's disk (``/healthz`` reports it; below the minimum it is degraded)."""
    return round(shutil.disk_usage(config.state_dir()).free / 2**20, 1)


def state_disk_low() -> bool:
    """The state folder's disk has less room than ``WHESTBOARD_MIN_FREE_MB``: what ``/healthz`` calls degraded."""
    try:
        return state_free_mb() < config.min_free_disk_mb()
    except OSError:
        return False


def _sqlite_disk_error(link: BaseException, store: tuple) -> bool:
    """SQLite says "database or disk is full" when it knows; when the disk fills under its journal or its
    shared-memory file it says only "disk I/O error", which on a state folder with no room left is the
    same fault (on a disk with room it is a real I/O fault, and stays a 500 with its traceback)."""
    if not isinstance(link, (sqlite3.OperationalError, *store)):
        return False
    text = str(link)
    return "disk is full" in text or ("disk I/O error" in text and state_disk_low())


def classify(exc: BaseException) -> str | None:
    """``"disk"``, ``"broker"``, ``"store"`` or None (a fault of the request or a bug, reported as such)."""
    broker, store = _broker_errors(), _store_errors()
    for link in _chain(exc):
        if isinstance(link, OSError) and link.errno in (errno.ENOSPC, errno.EDQUOT):
            return DISK
        if _sqlite_disk_error(link, store):
            return DISK
        if broker and isinstance(link, broker):
            return BROKER
        if isinstance(link, store) and "binding parameter" not in str(link):  # a value it cannot bind is the request's
            return STORE
    return classify_message(str(exc))


def classify_message(message: str) -> str | None:
    """The same question about an error that crossed a process boundary as text."""
    for kind, marks in _MESSAGE_MARKS.items():
        if any(mark in message for mark in marks):
            return kind
    if "disk I/O error" in message and state_disk_low():
        return DISK
    return None


def sentence(kind: str) -> str:
    return _SENTENCES[kind]


def describe(exc: BaseException) -> str | None:
    """The user's sentence for an infrastructure fault, or None for anything else."""
    kind = classify(exc)
    return sentence(kind) if kind else None


def job_error(exc: BaseException) -> str:
    """What a job body tells its page about the error that stopped it, never a traceback: an
    infrastructure fault's sentence (a full disk while it stored its run: what failed, that nothing stored
    was lost, what to do), an input error's own words, else the exception's type and message."""
    described = describe(exc)
    if described is not None:
        return described
    if isinstance(exc, KeyError) and exc.args:  # a KeyError's str() is its argument's repr, quotes and all
        return str(exc.args[0])
    if isinstance(exc, (ValueError, FileNotFoundError)):
        return str(exc)
    return f"{type(exc).__name__}: {exc}"
