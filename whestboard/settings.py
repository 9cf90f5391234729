"""Deployment settings read from the environment, in one place.

Every variable is documented in the README; nothing else in the code reads
``os.environ`` for configuration.
"""

from __future__ import annotations

import os
from pathlib import Path

from whestboard.registry import data_dir

_made: set[Path] = set()


def state_dir() -> Path:
    """Writable folder for the store, caches and job queues (``WHESTBOARD_STATE_DIR``).

    Asked for on every request: created once per process and path, not once per call.
    """
    path = Path(os.environ.get("WHESTBOARD_STATE_DIR") or data_dir() / ".state")
    if path not in _made or not path.is_dir():
        path.mkdir(parents=True, exist_ok=True)
        _made.add(path)
    return path


def database_url() -> str:
    """SQLAlchemy URL of the store; an SQLite file under the state folder by default."""
    return os.environ.get("WHESTBOARD_DATABASE_URL") or f"sqlite:///{state_dir() / 'whestboard.sqlite'}"


def redis_url() -> str | None:
    return os.environ.get("WHESTBOARD_REDIS_URL") or None


def organizer_token() -> str | None:
    return os.environ.get("WHESTBOARD_ORGANIZER_TOKEN") or None


def uploads_allowed(*, under_gunicorn: bool) -> bool:
    """Uploads run arbitrary code: on for a local ``python app.py``, opt-in under gunicorn."""
    flag = os.environ.get("WHESTBOARD_ALLOW_UPLOADS")
    if flag is not None:
        return flag.strip().lower() in ("1", "true", "yes", "on")
    return not under_gunicorn


def job_niceness() -> int:
    """How much lower than the web workers background jobs run (``WHESTBOARD_JOB_NICE``, 0-19, default 10)."""
    raw = os.environ.get("WHESTBOARD_JOB_NICE", "").strip()
    try:
        value = int(raw) if raw else 10
    except ValueError as exc:
        raise ValueError(f"WHESTBOARD_JOB_NICE={raw!r} is not a whole number from 0 to 19") from exc
    return min(max(value, 0), 19)


def compression_enabled() -> bool:
    """Whether the app compresses its responses (``WHESTBOARD_COMPRESS``, default on)."""
    return os.environ.get("WHESTBOARD_COMPRESS", "1").strip().lower() not in ("0", "false", "no", "off")
