"""A background job's value reaches the page only once the job ledger, read by the polling process,
says the job finished; otherwise the poll answers a sentence. Never an exception, which the page
would meet as silence.

The real manager (``server.background``'s diskcache manager over a state folder of the test's own, the
job ledger in its SQLite store); a job is what a job process leaves behind: its ledger row and its value
under the launch's key. The servers' tests (tests/server/test_durable_jobs.py) reproduce the faults that
leave such states behind, and a poll meeting a full disk.
"""

from __future__ import annotations

import subprocess
import uuid

import pytest

from server import background
from whestboard.jobs import NOT_KEPT, Job, Launch, enqueue, find_job, process_handle, run_tracked, set_handle
from whestboard.store import reset_engines, session


@pytest.fixture
def manager(tmp_path, monkeypatch):
    monkeypatch.setenv("WHESTBOARD_STATE_DIR", str(tmp_path))
    monkeypatch.delenv("WHESTBOARD_DATABASE_URL", raising=False)
    monkeypatch.delenv("WHESTBOARD_REDIS_URL", raising=False)
    reset_engines()
    made = background.background_callback_manager()
    yield made
    background._diskcache_managers.remove(made)
    reset_engines()


def _ended_process() -> str:
    """The handle of a process that has exited (a job process after its run)."""
    done = subprocess.Popen(["true"])
    handle = process_handle(done.pid)
    done.wait()
    return handle


def _launch(manager, *, compute=None) -> tuple[str, str, str]:
    """A launch as the manager records it; with ``compute``, run through the ledger as a job process runs
    it (claimed, then finished after the body): its key, handle and job id."""
    key, job_id = uuid.uuid4().hex, uuid.uuid4().hex
    handle = _ended_process()
    enqueue(job_id, result_key=key, kind="test-result.children", backend="diskcache")
    set_handle(job_id, handle)
    if compute is not None:
        run_tracked(Launch(job_id, key), compute, already_done=lambda: None)
    return key, handle, job_id


def _launch_running() -> tuple[str, str, subprocess.Popen]:
    """A launch whose job process is still alive (queued in the ledger): its key, handle and process."""
    key, job_id = uuid.uuid4().hex, uuid.uuid4().hex
    alive = subprocess.Popen(["sleep", "60"])
    handle = process_handle(alive.pid)
    enqueue(job_id, result_key=key, kind="test-result.children", backend="diskcache")
    set_handle(job_id, handle)
    return key, handle, alive


def test_a_value_whose_job_finished_in_the_ledger_is_delivered(manager):
    key, handle, _ = _launch(manager, compute=lambda: {"run_id": "abc"})
    manager.handle.set(key, {"run_id": "abc"})
    assert manager.get_result(key, handle) == {"run_id": "abc"}


def test_a_value_beside_a_row_that_never_said_finished_is_a_sentence_and_the_row_is_failed(manager):
    """What a job left when its ending went where this server's store does not see it (a write-ahead log
    its parent's close deleted): the value names a run nobody can open; the page says so instead."""
    key, handle, job_id = _launch(manager)
    with session() as s:  # its process claimed it, and nothing of its ending reached this store
        s.get(Job, job_id).status = "running"
    manager.handle.set(key, {"run_id": "never-recorded"})
    answer = manager.get_result(key, handle)
    message = answer["background_callback_error"]["msg"]
    assert message.startswith(f"{background.JOB_FAILED}{NOT_KEPT}: it finished, but its ending never reached")
    assert message.endswith("please run it again.")
    row = find_job(key, handle)
    assert row.id == job_id and row.status == "failed" and row.reason.startswith(NOT_KEPT)


def test_an_error_the_job_left_is_passed_on_whatever_the_ledger_says(manager):
    key, handle, _ = _launch(manager)
    error = {"background_callback_error": {"msg": "The job failed (disk failure). ...", "tb": ""}}
    manager.handle.set(key, error)
    assert manager.get_result(key, handle) == error



def test_a_job_that_exits_without_its_value_between_a_poll_and_dash_asking_keeps_the_page_polling(manager):
    """A poll reads no value while the job's process is still alive; the process then exits without leaving
    one (its disk full, or killed) before Dash asks whether the job runs. Dash would take "not running, no
    value" as a cancel and the page would wait in silence (a playground job on a filled disk, 1 of 4 once
    more); the poll goes on instead, and the next one says how the job ended."""
    key, handle, alive = _launch_running()
    try:
        assert manager.get_result(key, handle) is manager.UNDEFINED  # alive: nothing yet
    finally:
        alive.kill()
        alive.wait()
    assert manager.job_running(handle) is True  # exited meanwhile, no value: poll once more
    answer = manager.get_result(key, handle)
    assert "worker died" in answer["background_callback_error"]["msg"], answer
    assert find_job(key, handle).status == "failed"


def test_a_cancelled_job_that_exits_closes_the_loop_as_dash_expects(manager):
    key, handle, alive = _launch_running()
    try:
        assert manager.get_result(key, handle) is manager.UNDEFINED
        manager.terminate_job(handle)  # the user's cancel: the row says so, the process is killed
    finally:
        alive.kill()
        alive.wait()
    manager.get_result(key, handle)
    assert manager.job_running(handle) is False
