"""One SQLAlchemy engine per process and database, and every table created (or extended) on first use.

SQLite by default (a file under the state folder, WAL mode so several gunicorn
workers read while one writes); any other database through
``WHESTBOARD_DATABASE_URL``. A table is declared by the package that owns it
(runs, submissions, the job ledger) on :class:`Base`; the first session that
needs a database creates whatever tables of ``Base`` it lacks and adds the
columns a newer release declared to a table an older one created, so no
package reaches into another to register its tables and an upgrade needs no
manual migration. Safe when several processes race to do it.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy import Engine, create_engine, event, exc, inspect, text
from sqlalchemy.orm import DeclarativeBase, Session, sessionmaker

from whestboard import config
from whestboard.store import _forksafe


class Base(DeclarativeBase):
    """Declarative base shared by every stored table."""


_lock = threading.Lock()
_engines: dict[str, Engine] = {}
_sessionmakers: dict[str, sessionmaker] = {}
_ensured: dict[str, set[str]] = {}


def _sqlite_pragmas(dbapi_conn, _record) -> None:
    cur = dbapi_conn.cursor()
    cur.execute("PRAGMA journal_mode=WAL")
    cur.execute("PRAGMA synchronous=NORMAL")
    cur.execute("PRAGMA busy_timeout=30000")
    cur.execute("PRAGMA foreign_keys=ON")
    cur.close()


def engine(url: str | None = None) -> Engine:
    """The engine for ``url`` (default: the configured store), with every declared table in place."""
    url = url or config.database_url()
    with _lock:
        if url not in _engines:
            _forksafe.install(forget_inherited_connections)  # no pooled connection crosses a fork
            kwargs: dict = {"pool_pre_ping": True}
            if url.startswith("sqlite"):
                kwargs["connect_args"] = {"check_same_thread": False, "timeout": 30}
            eng = create_engine(url, **kwargs)
            if url.startswith("sqlite"):
                event.listen(eng, "connect", _sqlite_pragmas)
            _engines[url] = eng
            _sessionmakers[url] = sessionmaker(eng, expire_on_commit=False)
            _ensured[url] = set()
        if set(Base.metadata.tables) - _ensured[url]:
            _ensure_tables(_engines[url], _ensured[url])
        return _engines[url]


def _ensure_tables(eng: Engine, ensured: set[str]) -> None:
    """Create missing tables and add missing (nullable or defaulted) columns; idempotent across processes."""
    for name, table in Base.metadata.tables.items():
        if name in ensured:
            continue
        try:
            table.create(eng, checkfirst=True)
        except exc.SQLAlchemyError:
            if not inspect(eng).has_table(name):  # lost a race: fine if it now exists
                raise
        _add_missing_columns(eng, table)
        ensured.add(name)


def _add_missing_columns(eng: Engine, table) -> None:
    present = {c["name"] for c in inspect(eng).get_columns(table.name)}
    for column in table.columns:
        if column.name in present:
            continue
        kind = column.type.compile(dialect=eng.dialect)
        default = column.default.arg if column.default is not None and not callable(column.default.arg) else None
        clause = f" DEFAULT {_sql_literal(default)}" if default is not None else ""
        try:
            with eng.begin() as conn:
                conn.execute(text(f'ALTER TABLE {table.name} ADD COLUMN "{column.name}" {kind}{clause}'))
        except exc.SQLAlchemyError:
            if column.name not in {c["name"] for c in inspect(eng).get_columns(table.name)}:
                raise


def _sql_literal(value) -> str:
    """A column default as SQL both SQLite and PostgreSQL accept (PostgreSQL refuses 0 for a boolean)."""
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    return str(int(value)) if isinstance(value, int) else repr(value)


@contextmanager
def session(url: str | None = None) -> Iterator[Session]:
    """A transaction: committed on success, rolled back on any error."""
    engine(url)
    maker = _sessionmakers[url or config.database_url()]
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
        _ensured.clear()


def forget_inherited_connections() -> None:
    """In a forked child, before it opens a connection of its own: let go of the parent's pooled ones.

    A server's connection (PostgreSQL) is dropped without being closed: closing it would end the
    parent's session on the socket they share. A SQLite connection is closed: SQLite keeps each file's
    locks in process memory, which the fork copied, so a connection the child opened beside the copy
    would count the parent's locks as its own and take none. The parent's close then found the file
    unlocked, checkpointed and deleted the write-ahead log, and every later write of the child went to
    the deleted file (a job's run record, written after a gunicorn restart, was lost so). Closing the
    copy here releases nothing of the parent's (its locks are its process's), and the parent's open
    connection keeps the log from being checkpointed by this close.
    """
    for eng in list(_engines.values()):
        eng.dispose(close=eng.dialect.name == "sqlite")
