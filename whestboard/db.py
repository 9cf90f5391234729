"""One SQLAlchemy engine per process for the run store and the submissions store.

SQLite by default (a file under the state folder, WAL mode so several gunicorn
workers read while one writes); any other database through
``WHESTBOARD_DATABASE_URL``. Tables are created on first use.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.orm import DeclarativeBase, Session, sessionmaker

from whestboard import settings


class Base(DeclarativeBase):
    """Declarative base shared by every stored table."""


_lock = threading.Lock()
_engines: dict[str, Engine] = {}
_sessionmakers: dict[str, sessionmaker] = {}


def _sqlite_pragmas(dbapi_conn, _record) -> None:
    cur = dbapi_conn.cursor()
    cur.execute("PRAGMA journal_mode=WAL")
    cur.execute("PRAGMA synchronous=NORMAL")
    cur.execute("PRAGMA busy_timeout=30000")
    cur.execute("PRAGMA foreign_keys=ON")
    cur.close()


def engine(url: str | None = None) -> Engine:
    """The engine for ``url`` (default: the configured store), tables created."""
    url = url or settings.database_url()
    with _lock:
        if url not in _engines:
            kwargs: dict = {"future": True, "pool_pre_ping": True}
            if url.startswith("sqlite"):
                kwargs["connect_args"] = {"check_same_thread": False, "timeout": 30}
            eng = create_engine(url, **kwargs)
            if url.startswith("sqlite"):
                event.listen(eng, "connect", _sqlite_pragmas)
            _import_models()
            Base.metadata.create_all(eng)
            _engines[url] = eng
            _sessionmakers[url] = sessionmaker(eng, expire_on_commit=False)
        return _engines[url]


def _import_models() -> None:
    """Import every module that declares tables so ``create_all`` sees them."""
    import importlib

    for name in ("whestboard.runstore", "whestboard.submissions"):
        try:
            importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name != name:
                raise


@contextmanager
def session(url: str | None = None) -> Iterator[Session]:
    """A transaction: committed on success, rolled back on any error."""
    engine(url)
    maker = _sessionmakers[url or settings.database_url()]
    with maker() as s:
        try:
            yield s
            s.commit()
        except BaseException:
            s.rollback()
            raise


def reset_engines() -> None:
    """Forget cached engines (tests switch databases between cases)."""
    with _lock:
        for eng in _engines.values():
            eng.dispose()
        _engines.clear()
        _sessionmakers.clear()
