"""Database connections never cross a fork.

gunicorn forks workers from a preloaded master, and Dash's DiskcacheManager
forks a child per background job. A pooled connection inherited across a fork
is shared by two processes: for PostgreSQL the child's traffic corrupts the
parent's session, for SQLite the docs forbid it outright. This is SQLAlchemy's
documented remedy: every pooled connection remembers the process that opened
it, and a checkout from any other process discards it (without closing the
parent's socket) and opens a fresh one. Installed once, for every engine.

SQLite needs one step more, taken by the child hook before the child opens a
connection of its own: the inherited ones are closed, not just dropped. SQLite
keeps a file's locks in process memory, which the fork copied, so a connection
opened beside an inherited one takes no lock of its own, and the parent's close
may then delete the write-ahead log the child still writes to
(``whestboard.store._database.forget_inherited_connections``).
"""

from __future__ import annotations

import os
from collections.abc import Callable

from sqlalchemy import event, exc
from sqlalchemy.engine import Engine

_installed = False


def _remember_pid(_dbapi_connection, connection_record) -> None:
    connection_record.info["pid"] = os.getpid()


def _refuse_foreign(_dbapi_connection, connection_record, connection_proxy) -> None:
    pid = os.getpid()
    if connection_record.info.get("pid", pid) != pid:
        # Detach without closing: the socket still belongs to the parent.
        connection_record.dbapi_connection = connection_proxy.dbapi_connection = None
        raise exc.DisconnectionError(
            f"connection opened in process {connection_record.info['pid']} checked out in {pid}"
        )


def install(forget_in_child: Callable[[], None]) -> None:
    """Register the pid guard on every SQLAlchemy engine and ``forget_in_child`` (drop the inherited
    pools) to run in every forked child, once per process; the store calls it with its first engine."""
    global _installed
    if _installed:
        return
    event.listen(Engine, "connect", _remember_pid)
    event.listen(Engine, "checkout", _refuse_foreign)
    os.register_at_fork(after_in_child=forget_in_child)
    _installed = True
