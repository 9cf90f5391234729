"""The app over a fresh SQLite store and state folder, as the page tests that speak HTTP (no browser) use it."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest


@contextmanager
def app_on_fresh_store(folder: Path, **env: str) -> Iterator[tuple]:
    """``(test client, monkeypatch)`` of the app with its store and state in ``folder`` (and ``env`` set);
    the client carries the app's ``callback_map``. Everything is undone on leaving."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("WHESTBOARD_DATABASE_URL", f"sqlite:///{folder / 'store.sqlite'}")
        mp.setenv("WHESTBOARD_STATE_DIR", str(folder / "state"))
        for name, value in env.items():
            mp.setenv(name, value)
        import app

        dash_app = app.the_app()
        http = dash_app.server.test_client()
        http.get("/")
        http.callback_map = dash_app.callback_map
        yield http, mp
