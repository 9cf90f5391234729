"""The job ledger against SQLite and a real PostgreSQL: claims, takeovers, deaths, duplicates, forks."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
import uuid

import pytest
from sqlalchemy import text, update

from tests.prod_support import postgres_server
from whestboard.jobs import _ledger
from whestboard.store import Base, engine, reset_engines, session


@pytest.fixture(scope="session")
def pg_url():
    with postgres_server() as url:
        yield url
        reset_engines()


@pytest.fixture(params=["sqlite", "postgresql"])
def store(request, tmp_path):
    """A store URL: a fresh SQLite file, or the session's PostgreSQL cluster."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'store.sqlite'}"
    return request.getfixturevalue("pg_url")


def new_job(store: str, **kw) -> str:
    job_id = uuid.uuid4().hex
    _ledger.enqueue(job_id, result_key=kw.pop("result_key", "key-" + job_id[:6]), kind="test.children", url=store, **kw)
    return job_id


def dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def set_row(store: str, job_id: str, **values) -> None:
    with session(store) as s:
        s.execute(update(_ledger.Job).where(_ledger.Job.id == job_id).values(**values))


def test_claim_is_exclusive_and_final(store):
    job_id = new_job(store)
    assert _ledger.claim(job_id, "host-a:1", url=store) is _ledger.Claim.RUN
    assert _ledger.claim(job_id, "host-b:2", url=store) is _ledger.Claim.BUSY
    assert _ledger.finish(job_id, worker="host-a:1", url=store)
    assert _ledger.claim(job_id, "host-b:2", url=store) is _ledger.Claim.DONE
    row = _ledger.get_job(job_id, url=store)
    assert (row.status, row.attempts, row.worker) == ("finished", 1, "host-a:1")


def test_concurrent_claims_have_exactly_one_winner(store):
    job_id = new_job(store)
    outcomes: list[_ledger.Claim] = []
    barrier = threading.Barrier(8)

    def contend(i: int) -> None:
        barrier.wait()
        outcomes.append(_ledger.claim(job_id, f"remote-{i}:1", url=store))

    threads = [threading.Thread(target=contend, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert outcomes.count(_ledger.Claim.RUN) == 1
    assert outcomes.count(_ledger.Claim.BUSY) == 7
    assert _ledger.get_job(job_id, url=store).attempts == 1


def test_job_of_a_dead_process_is_taken_over_as_a_retry(store):
    job_id = new_job(store)
    corpse = f"{socket.gethostname()}:{dead_pid()}"
    assert _ledger.claim(job_id, corpse, url=store) is _ledger.Claim.RUN
    assert _ledger.claim(job_id, "host-b:2", url=store) is _ledger.Claim.RUN  # the pid is gone: take over
    row = _ledger.get_job(job_id, url=store)
    assert (row.status, row.worker, row.attempts) == ("running", "host-b:2", 2)
    assert not _ledger.finish(job_id, worker=corpse, url=store)  # the dead owner cannot finish it


def test_silent_remote_worker_is_taken_over_after_its_heartbeat_stops(store):
    job_id = new_job(store)
    assert _ledger.claim(job_id, "other-machine:7", url=store) is _ledger.Claim.RUN
    assert _ledger.claim(job_id, "host-b:2", url=store) is _ledger.Claim.BUSY  # alive as far as we can tell
    set_row(store, job_id, heartbeat_at=time.time() - _ledger.STALE_AFTER_S - 1)
    assert _ledger.claim(job_id, "host-b:2", url=store) is _ledger.Claim.RUN


def test_run_tracked_computes_once_and_duplicates_get_the_stored_result(store):
    launch = _ledger.Launch(job_id=new_job(store), result_key="k")
    calls = []

    def compute():
        calls.append(1)
        time.sleep(0.4)
        return 42

    results = {}
    first = threading.Thread(target=lambda: results.update(a=_ledger.run_tracked(
        launch, compute, already_done=lambda: "stored", url=store, heartbeat_every=0.1)))
    first.start()
    time.sleep(0.1)
    # A second delivery of the same launch while the first runs: it waits, then reads the stored result.
    results["b"] = _ledger.run_tracked(launch, compute, already_done=lambda: "stored", url=store, heartbeat_every=0.1)
    first.join()
    assert results == {"a": 42, "b": "stored"}
    assert len(calls) == 1
    row = _ledger.get_job(launch.job_id, url=store)
    assert row.status == "finished" and row.attempts == 1 and row.heartbeat_at >= row.started_at


def test_errors_are_recorded_with_their_reason(store):
    launch = _ledger.Launch(job_id=new_job(store), result_key="k")

    def broken():
        raise ValueError("width must be positive, token=abc123")

    with pytest.raises(ValueError):
        _ledger.run_tracked(launch, broken, already_done=lambda: None, url=store)
    row = _ledger.get_job(launch.job_id, url=store)
    assert row.status == "failed"
    assert row.reason == "ValueError: width must be positive, token=***"


def test_benign_exceptions_finish_the_job(store):
    class NoUpdate(Exception):
        pass

    launch = _ledger.Launch(job_id=new_job(store), result_key="k")
    with pytest.raises(NoUpdate):
        _ledger.run_tracked(launch, lambda: (_ for _ in ()).throw(NoUpdate()), already_done=lambda: None,
                         benign=(NoUpdate,), url=store)
    assert _ledger.get_job(launch.job_id, url=store).status == "finished"


def test_a_dead_running_job_is_reported_failed_with_a_reason(store):
    job_id = new_job(store)
    corpse = f"{socket.gethostname()}:{dead_pid()}"
    _ledger.claim(job_id, corpse, url=store)
    row = _ledger.fail_if_dead(_ledger.get_job(job_id, url=store), url=store)
    assert row.status == "failed"
    assert row.reason.startswith(f"worker died: process {corpse} exited")


def test_queued_jobs_are_waiting_not_dead_unless_their_process_is_gone(store):
    job_id = new_job(store)
    assert _ledger.fail_if_dead(_ledger.get_job(job_id, url=store), url=store).status == "queued"
    row = _ledger.fail_if_dead(_ledger.get_job(job_id, url=store), process_gone=True, url=store)
    assert (row.status, row.reason) == ("failed", "worker died: the job process exited before it started")


def test_celery_style_checks_trust_only_the_heartbeat(store):
    job_id = new_job(store)
    _ledger.claim(job_id, f"{socket.gethostname()}:{dead_pid()}", url=store)
    # A redelivery may still claim it: without pid checks it is not dead yet.
    assert _ledger.fail_if_dead(_ledger.get_job(job_id, url=store), pid_check=False, url=store).status == "running"
    set_row(store, job_id, heartbeat_at=time.time() - _ledger.STALE_AFTER_S - 5)
    row = _ledger.fail_if_dead(_ledger.get_job(job_id, url=store), pid_check=False, url=store)
    assert row.status == "failed" and "no heartbeat" in row.reason or "exited" in row.reason


def test_reap_fails_silent_jobs_nobody_polls(store):
    job_id = new_job(store)
    _ledger.claim(job_id, "gone-machine:3", url=store)
    set_row(store, job_id, heartbeat_at=time.time() - 1000)
    assert _ledger.reap_jobs(url=store) >= 1
    row = _ledger.get_job(job_id, url=store)
    assert row.status == "failed" and row.reason.startswith("worker died: no heartbeat from gone-machine:3")


def test_cancel_marks_the_jobs_behind_a_handle(store):
    job_id = new_job(store)
    _ledger.set_handle(job_id, "4242", url=store)
    assert _ledger.cancel_job("4242", url=store) == 1
    assert _ledger.get_job(job_id, url=store).reason == "cancelled"
    assert _ledger.find_job(_ledger.get_job(job_id, url=store).result_key, "4242", url=store).id == job_id


def _connection_identity(store: str) -> str:
    """Which server-side session answered: PostgreSQL's backend pid, or the SQLite handle's address."""
    with session(store) as s:
        if store.startswith("postgresql"):
            return str(s.execute(text("SELECT pg_backend_pid()")).scalar_one())
        return str(id(s.connection().connection.dbapi_connection))


def test_pooled_connections_never_cross_a_fork(store):
    """A forked child (gunicorn worker, Dash job) opens its own connection; the parent's keeps working."""
    parent_before = _connection_identity(store)
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: use the store, report which connection answered, exit without pytest teardown
        code = 1
        try:
            os.close(read_end)
            os.write(write_end, _connection_identity(store).encode())
            reset_engines()  # a worker shutting down closes its pool: must not touch the parent's sockets
            code = 0
        finally:
            os._exit(code)
    os.close(write_end)
    child = os.read(read_end, 100).decode()
    os.close(read_end)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    if store.startswith("postgresql"):
        assert child != parent_before, "the child reused the parent's PostgreSQL session"
    for _ in range(3):  # the parent's pool still works after the child closed its own
        with session(store) as s:
            assert s.execute(text("SELECT 2")).scalar_one() == 2


def test_every_store_table_lives_in_postgresql_and_healthz_sees_it(pg_url, tmp_path, monkeypatch):
    """The shared store for several machines: all of the app's tables, and /healthz's probe, on PostgreSQL."""
    from sqlalchemy import inspect

    import whestboard.leaderboard  # noqa: F401 - declares the submissions tables
    import whestboard.scoring  # noqa: F401 - declares the runs table
    from server import health

    tables = set(inspect(engine(pg_url)).get_table_names())
    assert {t.name for t in Base.metadata.sorted_tables} <= tables
    assert {"jobs", "runs", "submissions", "submission_mlp_results"} <= tables
    monkeypatch.setenv("WHESTBOARD_STATE_DIR", str(tmp_path))
    monkeypatch.setenv("WHESTBOARD_DATABASE_URL", pg_url)
    store = health.check()["checks"]["store"]
    assert store["ok"] is True and store["backend"] == "postgresql"


def test_a_job_no_worker_ever_starts_is_reported_not_waited_on_forever(store):
    job_id = new_job(store)
    assert _ledger.fail_if_dead(_ledger.get_job(job_id, url=store), pid_check=False, url=store).status == "queued"
    set_row(store, job_id, created_at=time.time() - _ledger.QUEUED_TOO_LONG_S - 1)
    row = _ledger.fail_if_dead(_ledger.get_job(job_id, url=store), pid_check=False, url=store)
    assert row.status == "failed" and row.reason.startswith("no worker started the job")
    assert _ledger.is_lost(row.reason) and not _ledger.is_lost("ValueError: bad width")


def test_a_jobs_table_of_an_earlier_release_gains_the_queue_columns(tmp_path):
    """Upgrading keeps the rows: the columns the queue added are created on the old table in place."""
    import sqlite3

    path = tmp_path / "old.sqlite"
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE jobs (id VARCHAR(64) PRIMARY KEY, result_key VARCHAR(128), handle VARCHAR(128), "
                "kind VARCHAR(200), owner VARCHAR(64), backend VARCHAR(32), status VARCHAR(16), reason TEXT, "
                "worker VARCHAR(200), attempts INTEGER, created_at FLOAT, started_at FLOAT, heartbeat_at FLOAT, "
                "finished_at FLOAT)")
    con.execute("INSERT INTO jobs VALUES ('old', 'k', NULL, 'lab', NULL, 'diskcache', 'finished', NULL, 'h:1', 1, "
                "1.0, 1.0, 1.0, 2.0)")
    con.commit()
    con.close()
    url = f"sqlite:///{path}"
    reset_engines()
    assert _ledger.get_job("old", url=url).status == "finished"  # the old row, read through the new model
    new_job(url, spec={"upload": "abc"})
    columns = {row[1] for row in sqlite3.connect(path).execute("PRAGMA table_info(jobs)")}
    assert {"spec", "progress", "result", "cancel_requested", "slot"} <= columns
    reset_engines()
