"""Faults, injected into the real thing: a broker outage mid-task, kill -9 of the Celery main process,
SIGTERM to the gunicorn master mid-job and a full disk under the state folder.

Real ``redis-server``, real ``celery -A ... worker``, real gunicorn, loopback only. After each fault the
user's view (what the page shows) and the store (the job ledger, the SQLite file) are checked, and how
long recovery took is printed (docs/production.md, "Faults and recovery", has the figures). Kill -9 of a
job process, a web worker and a Celery child process is in test_production.py and test_redis_celery.py.
"""

from __future__ import annotations

import base64
import os
import shutil
import signal
import sqlite3
import subprocess
import threading
import time
from pathlib import Path

import psutil
import pytest
import requests

from components.shell import JOB_NOTICE_ID
from server import faults
from tests.prod_support import (
    celery_worker,
    free_port,
    gunicorn,
    load_dashclient,
    patient_client,
    restartable_redis,
    start_gunicorn,
    stop_process,
)
from tests.server.test_redis_celery import ledger as ledger_rows
from tests.server.test_redis_celery import sum_of_squares

dashclient = load_dashclient()
pytestmark = [pytest.mark.slow, pytest.mark.services]
JOBS_APP = "tests.server.prod_jobs_app"


def wait_for_running(store: Path, known: set[str], timeout: float = 60.0) -> dict:
    deadline = time.time() + timeout
    while time.time() < deadline:
        running = [r for r in ledger_rows(store) if r["id"] not in known and r["status"] == "running"]
        if running:
            return running[0]
        time.sleep(0.2)
    raise AssertionError("no job process claimed the job")


class UserClick:
    """A user's click on the jobs app's Run button, polled in the background until it answers."""

    def __init__(self, client, n: int, seconds: float, max_seconds: float = 240.0) -> None:
        self.page = dashclient.PageSession(client, "/").load()
        self.page.values["n"]["value"], self.page.values["seconds"]["value"] = n, seconds
        self.n, self.error, self.answered_at = n, None, None
        self.thread = threading.Thread(target=self._click, args=(max_seconds,), daemon=True)
        self.thread.start()

    def _click(self, max_seconds: float) -> None:
        try:
            self.page.click("go", max_seconds=max_seconds)
        except Exception as exc:  # noqa: BLE001 - the test reads it
            self.error = exc
        self.answered_at = time.time()

    def join(self, timeout: float) -> None:
        self.thread.join(timeout)
        assert not self.thread.is_alive(), "the user's poll never ended"
        assert self.error is None, f"the user saw an error: {self.error}"

    @property
    def result(self) -> str | None:
        return self.page.values["result"].get("children")

    @property
    def notice(self) -> str | None:
        return self.page.values.get(JOB_NOTICE_ID, {}).get("children")


# --------------------------------------------------------------------------- SIGTERM to gunicorn


def test_sigterm_restart_of_gunicorn_mid_job_binds_at_once_and_the_user_gets_the_result(tmp_path):
    """The job process must not hold the listening socket: the restarted server binds at once, and the
    poll (waiting out the restart, as the page does) collects the result the job stored meanwhile."""
    port, state = free_port(), tmp_path / "web"
    base = f"http://127.0.0.1:{port}"
    proc, _ = start_gunicorn(f"{JOBS_APP}:server", state, port, workers=2, threads=2)
    restarted = None
    job_pid = None
    try:
        store = state / "whestboard.sqlite"
        user = UserClick(patient_client(base, keepalive=False, timeout=60), n=777, seconds=10)
        row = wait_for_running(store, set())
        job_pid = int(row["worker"].rsplit(":", 1)[1])
        listening = [c for c in psutil.Process(job_pid).net_connections("tcp") if c.status == psutil.CONN_LISTEN]
        assert listening == [], f"the job process holds the server's socket: {listening}"
        signalled = time.time()
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
        stopped_s = time.time() - signalled
        assert psutil.pid_exists(job_pid), f"the job died with its server ({stopped_s:.1f} s to stop)"
        restarted, log = start_gunicorn(f"{JOBS_APP}:server", state, port, workers=2, threads=2)
        serving_s = time.time() - signalled
        assert "Address already in use" not in log.read_text(errors="replace")
        user.join(120)
        assert user.result == f"sum={sum_of_squares(777)} pid={job_pid}"
        (row,) = [r for r in ledger_rows(store) if r["id"] == row["id"]]
        assert (row["status"], row["attempts"]) == ("finished", 1)
        print(f"\nSIGTERM: old master gone in {stopped_s:.1f} s, new server serving {serving_s:.1f} s after the "
              f"signal, result {user.answered_at - signalled:.1f} s after it")
        assert requests.get(base + "/", timeout=30).status_code == 200
    finally:
        stop_process(proc)
        if restarted is not None:
            stop_process(restarted)
        if job_pid and psutil.pid_exists(job_pid):
            os.kill(job_pid, signal.SIGKILL)


# --------------------------------------------------------------------------- Redis away mid-task


@pytest.fixture
def celery_stack(tmp_path):
    with restartable_redis() as broker:
        db_url = f"sqlite:///{tmp_path / 'shared.sqlite'}"
        with gunicorn(f"{JOBS_APP}:server", tmp_path / "web", workers=1, threads=4, WHESTBOARD_REDIS_URL=broker.url,
                      WHESTBOARD_DATABASE_URL=db_url, WHESTBOARD_MIN_FREE_MB="0") as web, \
                celery_worker(f"{JOBS_APP}:celery", tmp_path / "worker", broker.url,
                              WHESTBOARD_DATABASE_URL=db_url) as (worker, worker_log):
            yield {"broker": broker, "web": web, "worker": worker, "worker_log": worker_log,
                   "store": tmp_path / "shared.sqlite"}


def test_redis_down_30s_mid_task_the_worker_reconnects_and_the_user_gets_the_result(celery_stack):
    web, broker, store = celery_stack["web"], celery_stack["broker"], celery_stack["store"]
    user = UserClick(dashclient.DashClient(web.base, timeout=60), n=4242, seconds=12)
    row = wait_for_running(store, set())
    time.sleep(1.0)
    broker.stop()
    down_at = time.time()

    health = requests.get(web.base + "/healthz", timeout=30)
    assert health.status_code == 200, health.text  # pages still render: degraded, not out of the balancer
    assert health.json()["degraded_by"] == ["redis"], (health.headers, health.text[:500])
    assert requests.get(web.base + "/", timeout=30).status_code == 200

    refused = UserClick(dashclient.DashClient(web.base, timeout=60), n=5, seconds=0, max_seconds=60)
    refused.join(60)  # answered, not a bare 500
    assert refused.notice.endswith(faults.sentence(faults.BROKER)), refused.notice
    (unsent,) = [r for r in ledger_rows(store) if r["id"] != row["id"]]
    assert unsent["status"] == "failed" and unsent["reason"].startswith("not started: ")

    time.sleep(max(0.0, 30.0 - (time.time() - down_at)))
    assert celery_stack["worker"].poll() is None, "the Celery worker exited while Redis was down"
    broker.start()
    up_at = time.time()
    user.join(180)
    assert user.result.startswith(f"sum={sum_of_squares(4242)} ")
    (row,) = [r for r in ledger_rows(store) if r["id"] == row["id"]]
    assert (row["status"], row["attempts"]) == ("finished", 1)

    after = UserClick(dashclient.DashClient(web.base, timeout=60), n=99, seconds=0)
    after.join(120)  # the same worker, reconnected, runs the next job
    assert after.result.startswith(f"sum={sum_of_squares(99)} ")
    assert celery_stack["worker"].poll() is None
    assert not [r for r in ledger_rows(store) if r["status"] in ("queued", "running")]
    assert requests.get(web.base + "/healthz", timeout=30).json()["degraded"] is False
    print(f"\nRedis down {up_at - down_at:.0f} s: the result reached the user {user.answered_at - up_at:.1f} s "
          f"after Redis came back; the next job took {after.answered_at - up_at:.1f} s from then")


@pytest.fixture
def supervised_stack(tmp_path):
    """Two web workers (a poll may land on either) and the Celery worker as ``./scripts/serve.sh worker``
    runs it: supervised, Celery's default gossip, mingle and heartbeat on."""
    with restartable_redis() as broker:
        db_url = f"sqlite:///{tmp_path / 'shared.sqlite'}"
        with gunicorn(f"{JOBS_APP}:server", tmp_path / "web", workers=2, threads=4, WHESTBOARD_REDIS_URL=broker.url,
                      WHESTBOARD_DATABASE_URL=db_url, WHESTBOARD_MIN_FREE_MB="0", WHESTBOARD_JOB_PER_CLIENT="50",
                      WHESTBOARD_JOB_TOTAL="50") as web, \
                celery_worker(f"{JOBS_APP}:celery", tmp_path / "worker", broker.url, concurrency=2, supervised=True,
                              WHESTBOARD_DATABASE_URL=db_url) as (supervisor, worker_log):
            yield {"broker": broker, "web": web, "supervisor": supervisor, "worker_log": worker_log,
                   "store": tmp_path / "shared.sqlite"}


#: What a user may be told about a launch the outage took: refused at once, or lost by the queue.
OUTAGE_ENDINGS = (faults.sentence(faults.BROKER), "please run it again.")


def test_launches_during_a_broker_outage_each_run_or_end_with_a_sentence(supervised_stack):
    """14 users launch through a 30 s Redis outage (3 just before, 8 during, 3 after): every launch runs
    or ends with a sentence, none stays queued, the worker is alive at the end and runs the next job."""
    web, broker, store = supervised_stack["web"], supervised_stack["broker"], supervised_stack["store"]

    def launch(n: int, seconds: float) -> UserClick:
        return UserClick(dashclient.DashClient(web.base, timeout=60), n=n, seconds=seconds, max_seconds=180)

    clicks = []
    for n in range(3):
        clicks.append(launch(1000 + n, 4))
        time.sleep(1.0)
    broker.stop()
    down_at = time.time()
    for n in range(8):
        clicks.append(launch(2000 + n, 1))
        time.sleep(3.5)
    time.sleep(max(0.0, 30.0 - (time.time() - down_at)))
    broker.start()
    up_at = time.time()
    for n in range(3):
        clicks.append(launch(3000 + n, 1))
        time.sleep(1.0)
    for click in clicks:
        click.join(180)
    outcomes = []
    for click in clicks:
        if click.result is not None:
            assert click.result.startswith(f"sum={sum_of_squares(click.n)} "), click.result
            outcomes.append("ran")
        else:
            assert click.notice and click.notice.endswith(OUTAGE_ENDINGS), (click.n, click.notice)
            outcomes.append("sentence")
    assert all(click.answered_at - up_at < 60 for click in clicks), [c.answered_at - up_at for c in clicks]
    assert outcomes[-3:] == ["ran"] * 3, outcomes  # after recovery everything runs
    assert supervised_stack["supervisor"].poll() is None
    assert not [r for r in ledger_rows(store) if r["status"] in ("queued", "running")], ledger_rows(store)
    log = supervised_stack["worker_log"].read_text(errors="replace")
    assert "Unrecoverable error" not in log, log[-3000:]
    print(f"\nRedis down {up_at - down_at:.0f} s, 14 launches: {outcomes.count('ran')} ran, "
          f"{outcomes.count('sentence')} ended with a sentence; the last answer "
          f"{max(c.answered_at for c in clicks) - up_at:.1f} s after Redis came back; supervisor restarts: "
          f"{log.count('supervise.restart') // 2}")


def test_the_supervisor_restarts_a_killed_celery_worker_and_the_next_job_runs(supervised_stack):
    web, supervisor = supervised_stack["web"], supervised_stack["supervisor"]
    log = supervised_stack["worker_log"]
    (celery_main,) = psutil.Process(supervisor.pid).children()
    os.kill(celery_main.pid, signal.SIGKILL)
    killed_at = time.time()
    deadline = killed_at + 90
    while log.read_text(errors="replace").count("ready.") < 2:
        assert time.time() < deadline and supervisor.poll() is None, log.read_text()[-3000:]
        time.sleep(0.2)
    ready_s = time.time() - killed_at
    (restarted,) = psutil.Process(supervisor.pid).children()
    assert restarted.pid != celery_main.pid
    after = UserClick(dashclient.DashClient(web.base, timeout=60), n=77, seconds=0, max_seconds=120)
    after.join(120)
    assert after.result.startswith(f"sum={sum_of_squares(77)} "), (after.result, after.notice)
    print(f"\nkill -9 of the supervised Celery main process: a new worker ready {ready_s:.1f} s later, the next "
          f"job answered {after.answered_at - killed_at:.1f} s after the kill")


def test_kill_9_of_the_celery_main_process_ends_the_job_with_a_result_or_a_reason_within_a_minute(celery_stack):
    web, store, worker = celery_stack["web"], celery_stack["store"], celery_stack["worker"]
    user = UserClick(dashclient.DashClient(web.base, timeout=60), n=31, seconds=20, max_seconds=120)
    row = wait_for_running(store, set())
    os.kill(worker.pid, signal.SIGKILL)
    killed_at = time.time()
    user.join(90)
    took = user.answered_at - killed_at
    (row,) = [r for r in ledger_rows(store) if r["id"] == row["id"]]
    assert row["status"] in ("finished", "failed"), row
    if row["status"] == "finished":  # the pool process finished its task on its own and stored the result
        assert user.result.startswith(f"sum={sum_of_squares(31)} ")
    else:
        assert row["reason"].startswith("worker died") and "worker died" in (user.notice or "")
    assert took < 60, f"the user waited {took:.0f} s"
    print(f"\nkill -9 of the Celery main process: job {row['status']} for the user {took:.1f} s after the kill")


# --------------------------------------------------------------------------- a full disk


@pytest.fixture
def small_state_disk(tmp_path):
    """A 24 MiB tmpfs as the state folder (CI runs as root; elsewhere the test is skipped)."""
    mount = tmp_path / "state"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=24m", "tmpfs", str(mount)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here: {done.stderr.decode(errors='replace').strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], capture_output=True)


def fill(disk: Path) -> list[Path]:
    """Write zeros until the disk refuses even a 4 KiB page (so SQLite's journal cannot grow either)."""
    fillers = []
    for size in (1 << 20, 4096):
        filler = disk / f"filler-{size}"
        fillers.append(filler)
        fd = os.open(filler, os.O_WRONLY | os.O_CREAT)
        try:
            while True:
                os.write(fd, b"\0" * size)
        except OSError:
            pass
        finally:
            os.close(fd)
    return fillers


def _upload_page(web, name: str, source: bytes):
    """A user drops ``source`` on the upload page; the page as it answered."""
    page = dashclient.PageSession(dashclient.DashClient(web.base, timeout=60), "/upload?dataset=v1-warmup").load()
    page.values["upload-file"]["filename"] = [name]
    page.click("upload-file", "contents",
               value=["data:text/x-python;base64," + base64.b64encode(source).decode()])
    return page


def _estimator(tag: str) -> bytes:
    return (f"from whestbench import BaseEstimator\nimport flopscope.numpy as fnp\n\n\nclass Mine(BaseEstimator):\n"
            f"    def predict(self, mlp, budget):  # {tag}\n        return fnp.zeros((mlp.depth, mlp.width))\n"
            ).encode()


def _timed(action) -> tuple[float, object]:
    started = time.time()
    page = action()
    return time.time() - started, page


def test_a_full_state_disk_answers_every_lab_playground_and_upload_with_its_sentence(small_state_disk):
    """Two web workers on a state folder that fills up: 4 lab runs, 4 playground jobs, 4 new uploads and
    the run of an upload taken before the disk filled each end within seconds with the full-disk
    sentence; nothing half-written is left, and once space is back the next run is stored."""
    from tests.server.test_production import run_lab

    disk = faults.sentence(faults.DISK)
    settings = dict(workers=2, threads=4, ready_path="/healthz", log_dir=small_state_disk.parent,
                    WHESTBOARD_MIN_FREE_MB="4", WHESTBOARD_ALLOW_UPLOADS="1", WHESTBOARD_JOB_PER_CLIENT="50")
    with gunicorn("app:server", small_state_disk, **settings) as before:
        _, page = run_lab(before, 2)
        first_run = page.values["lab-job-result"]["data"]["run_id"]
        taken_sha = _upload_page(before, "before.py", _estimator("before")).values["upload-sha"].get("data")
        assert taken_sha
    fillers = fill(small_state_disk)
    # Workers that meet the full disk fresh (a restart during the fault): nothing of the job store's is open yet.
    with gunicorn("app:server", small_state_disk, **settings) as web:
        health = requests.get(web.base + "/healthz", timeout=30)
        assert health.status_code == 200 and "state_dir" in health.json()["degraded_by"], health.text
        assert requests.get(web.base + "/lab", timeout=30).status_code == 200
        taken = _upload_page(web, "before.py", _estimator("before"))  # already stored: accepted again
        assert taken.values["upload-sha"].get("data") == taken_sha, taken.values.get(JOB_NOTICE_ID)

        answers = {}
        for i in range(4):
            answers[f"lab {i}"] = _timed(lambda i=i: run_lab(web, 4 + i)[1])
            answers[f"playground {i}"] = _timed(lambda i=i: dashclient.PageSession(
                dashclient.DashClient(web.base, timeout=60),
                f"/playground?width=256&depth=8&seed={50 + i}&samples=100000&round=v1-warmup").load())
            answers[f"upload {i}"] = _timed(lambda i=i: _upload_page(web, f"mine{i}.py", _estimator(str(i))))
        taken.values["upload-mlps"]["value"] = "0"
        answers["run of an upload taken before"] = _timed(lambda: (taken.click("upload-run"), taken)[1])
        for what, (took, answered) in answers.items():
            notice = answered.values.get(JOB_NOTICE_ID, {}).get("children") or ""
            assert notice.endswith(disk), (what, notice, answered.values.get("upload-submit-status"))
            assert took < 10, f"{what} took {took:.1f} s to answer"
            assert not (answered.values.get("lab-job-result", {}).get("data") or {}).get("run_id"), what
            assert not answered.values.get("upload-job", {}).get("data"), what
        assert not answers["playground 0"][1].values.get("pg-job-done", {}).get("data"), "a playground result?"

        for filler in fillers:
            filler.unlink()
        _, page = run_lab(web, 4)
        assert page.values["lab-job-result"]["data"].get("run_id"), "no run once space was back"
        assert not [r for r in ledger_rows(small_state_disk / "whestboard.sqlite")
                    if r["status"] in ("queued", "running")]
        uploads = small_state_disk / "uploads"
        half_written = [p.name for p in uploads.iterdir() if p.name.startswith(".") and p.name != ".copies.lock"]
        assert not half_written, "a half-written upload"  # .copies.lock: the copies' writer lock, not an upload
        con = sqlite3.connect(small_state_disk / "whestboard.sqlite")
        try:
            assert con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
            assert con.execute("SELECT count(*) FROM runs WHERE run_id = ?", (first_run,)).fetchone()[0] == 1
        finally:
            con.close()
        print("\nfull disk: " + ", ".join(f"{what} {took:.2f} s" for what, (took, _) in answers.items()))
    shutil.rmtree(small_state_disk / "dash-jobs", ignore_errors=True)
