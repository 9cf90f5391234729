"""Deployment settings read from the environment, in one place.

Every variable is documented in the README; nothing else in the code reads
``os.environ`` for configuration.
"""

from __future__ import annotations

import os
from pathlib import Path

from whestboard.registry import data_dir


def state_dir() -> Path:
    """Writable folder for the store, caches and job queues (``WHESTBOARD_STATE_DIR``)."""
    path = Path(os.environ.get("WHESTBOARD_STATE_DIR") or data_dir() / ".state")
    path.mkdir(parents=True, exist_ok=True)
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
