"""What a forked process writes to SQLite is kept after its parent closes the file.

A job process is a fork of a process that had the store open (a gunicorn worker, through the job
launcher); a restart closes the parent's connections while the job still writes. SQLite keeps each
file's locks in process memory that a fork copies: a child that opened its own connection while the
inherited one was still open believed it held the parent's locks, so the parent's close found the file
unlocked, checkpointed and deleted the write-ahead log, and every later write of the child went to the
deleted file (a lab run finished during a gunicorn restart named a run nobody could open). Real forks,
real files, what was written read back by a connection opened afresh after both.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Callable

import pytest

from whestboard import cache
from whestboard.store import _blobs, _database


@pytest.fixture
def state(tmp_path, monkeypatch):
    monkeypatch.setenv("WHESTBOARD_STATE_DIR", str(tmp_path))
    monkeypatch.delenv("WHESTBOARD_DATABASE_URL", raising=False)
    monkeypatch.delenv("WHESTBOARD_REDIS_URL", raising=False)
    _database.reset_engines()
    yield tmp_path
    _database.reset_engines()


def _fork_writer(write: Callable[[str], None]) -> tuple[int, int, int]:
    """A child that writes ``"before"``, waits for the parent's word, then writes ``"after"``: its pid, the
    pipe it says it wrote on, the pipe it waits on (a child that dies closes them: nothing hangs)."""
    wrote_r, wrote_w = os.pipe()
    go_r, go_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(wrote_r)
        os.close(go_w)
        code = 1
        try:
            write("before")
            os.write(wrote_w, b"1")
            if os.read(go_r, 1) == b"1":
                write("after")
                code = 0
        finally:
            os._exit(code)
    os.close(wrote_w)
    os.close(go_r)
    return pid, wrote_r, go_w


def _held_locks(pid: int, path) -> list[str]:
    inode = os.stat(path).st_ino
    with open("/proc/locks") as locks:
        return [line for line in locks if f" {pid} " in line and f":{inode} " in line]


def _parent_closes_while_the_child_writes(write: Callable[[str], None], close: Callable[[], None], path) -> list[str]:
    pid, wrote, go_on = _fork_writer(write)
    assert os.read(wrote, 1) == b"1", "the child could not write"
    child_locks = _held_locks(pid, path)
    close()  # the parent closes the file, as an exiting gunicorn worker (or master) does
    os.write(go_on, b"1")
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    return child_locks


def _keys(path, query: str, *args) -> set[str]:
    con = sqlite3.connect(path)
    try:
        return {key for (key,) in con.execute(query, args)}
    finally:
        con.close()


def test_a_childs_store_writes_survive_its_parent_closing_the_store(state):
    namespace = f"fork-{os.getpid()}"
    _blobs.put_blob(namespace, "parent", b"p")  # the parent's pool holds an open connection, as a worker's does
    path = state / "whestboard.sqlite"
    child_locks = _parent_closes_while_the_child_writes(lambda key: _blobs.put_blob(namespace, key, b"c"),
                                                        _database.reset_engines, path)
    assert _keys(path, "SELECT DISTINCT key FROM blob_chunks WHERE namespace = ?", namespace) == {
        "parent", "before", "after"}  # "after": the run record a job writes once the server has restarted
    assert child_locks, "the child wrote without a lock of its own on the database file"


def test_a_childs_cache_writes_survive_its_parent_closing_the_cache_folder(state):
    """The cache service's folder (diskcache, SQLite too), held open by gunicorn's master."""
    cache.shared_backend().set("parent", b"p")
    path = state / "cache" / "cache.db"
    child_locks = _parent_closes_while_the_child_writes(lambda key: cache.shared_backend().set(key, b"c"),
                                                        cache.shared_backend().close, path)
    assert _keys(path, "SELECT key FROM Cache") == {"parent", "before", "after"}
    assert child_locks, "the child wrote to the cache folder without a lock of its own"
