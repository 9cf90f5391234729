"""Nothing lost across a restart, a killed worker or a full disk: a job that answers with a result answered
with what the server kept, and every other job ends with a sentence saying why.

Each test is an operator's fault met by the five kinds of job a person starts, each through the real
server (``gunicorn -c gunicorn.conf.py app:server``, the image's command; SQLite and the state folder's
diskcache on one machine, or Redis and a Celery worker) and a page that keeps polling through the fault:

- a lab run (the issue's: v2-phase2, MLPs 0:2, Monte Carlo at 0.5 B; smaller where the fault is not a
  restart), a playground job, an uploaded estimator's run, a band job (the convergence page's baselines)
  and a curve sweep (the lab's "Sweep the budget");
- the faults: SIGTERM to the gunicorn master three seconds after the lab run reports progress, then a new
  gunicorn on the same port (a graceful restart); SIGKILL of every web worker; SIGKILL of the Celery pool
  process running each job; the state folder's small disk filled while they run.

What a person sees is read back as they would see it: a lab run or an upload's run opens by its id on the
restarted server (the compare page, ``/compare?a=run:ID``), a playground's plots come back when its
address is opened again, the baselines no longer wait to be computed, the swept curve has no missing
point; or the page shows a sentence (the job notice, or the page's own error) in the failure vocabulary
of ``server/faults.py`` and the job ledger. Silence (no result and no sentence) fails. Each test prints
how long each answer took after the fault (docs/production.md, "Faults and recovery").
"""

from __future__ import annotations

import base64
import os
import signal
import sqlite3
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest

from components.shell import JOB_NOTICE_ID
from server import faults
from tests.prod_support import (
    celery_worker,
    free_port,
    load_dashclient,
    machine_data,
    patient_client,
    redis_server,
    start_gunicorn,
    stop_process,
)
from tests.server.test_faults import fill, small_state_disk  # noqa: F401 - the fixture is used by name

dashclient = load_dashclient()
pytestmark = [pytest.mark.slow, pytest.mark.services]

#: How long a person's page waits for one job: the issue's lab run on a busy two-core machine.
PATIENCE_S = 900
#: The sentences a job may end with: the faults' own, and the ledger's ("... please run it again.").
ENDINGS = (*(faults.sentence(kind) for kind in (faults.DISK, faults.BROKER, faults.STORE)), "please run it again.")
SWEPT = "v1-warmup"


def _ids(tree) -> set[str]:
    """Every component id in a rendered tree (a callback's children)."""
    found: set[str] = set()

    def walk(node) -> None:
        if isinstance(node, list):
            for child in node:
                walk(child)
        elif isinstance(node, dict):
            props = node.get("props") or {}
            if isinstance(props.get("id"), str):
                found.add(props["id"])
            walk(props.get("children"))

    walk(tree)
    return found


def _text(tree) -> str:
    """The words a rendered tree shows."""
    if isinstance(tree, str):
        return tree
    if isinstance(tree, list):
        return "".join(_text(child) for child in tree)
    if isinstance(tree, dict):
        return _text((tree.get("props") or {}).get("children"))
    return ""


def _notice(page) -> str:
    return _text(page.values.get(JOB_NOTICE_ID, {}).get("children"))


def _opens_by_id(base: str, run_id: str) -> str:
    """What a person sees opening ``/compare?a=run:ID`` on the server: the run's label, or a failure."""
    page = dashclient.PageSession(dashclient.DashClient(base, timeout=120), f"/compare?a=run:{run_id}").load()
    label = next(o["label"] for o in page.values["compare-a"]["options"] if o["value"] == f"run:{run_id}")
    assert not label.endswith("(not found)"), f"run {run_id} does not open on the restarted server"
    return label


@dataclass
class Answer:
    """How a job ended for the person who started it: ``kept`` (what it made opens) or ``sentence``."""

    verdict: str
    text: str
    after_fault_s: float = 0.0


class Job:
    """A person starting one kind of job and watching it to its end, in a thread of their own."""

    name = ""
    ledger_kind = ""  # the ledger row's kind starts with this (Dash's first output, or "upload")

    def __init__(self) -> None:
        self.page = None
        self.error: BaseException | None = None
        self.ended_at: float | None = None
        self.progress_at: float | None = None
        self.thread: threading.Thread | None = None

    def start(self, base: str) -> Job:
        client = patient_client(base, keepalive=False, timeout=PATIENCE_S)
        watched, job = client.post, self

        def post(body, args, kind, label):  # the moment the page first shows progress
            data, status = watched(body, args, kind, label)
            if kind == "bg-poll" and data.get("progress") and job.progress_at is None:
                job.progress_at = time.time()
            return data, status

        client.post = post
        self.thread = threading.Thread(target=self._run, args=(client,), daemon=True, name=self.name)
        self.thread.start()
        return self

    def _run(self, client) -> None:
        try:
            self.page = self.act(client)
        except BaseException as exc:  # noqa: BLE001 - the test reads it
            self.error = exc
        self.ended_at = time.time()

    def act(self, client):
        raise NotImplementedError

    def answer(self, base: str, fault_at: float) -> Answer:
        """Wait for the page's answer and read it as a person would; silence fails."""
        self.thread.join(PATIENCE_S + 60)
        assert not self.thread.is_alive(), f"{self.name}: the page never stopped polling"
        assert self.error is None, f"{self.name}: the page met an error: {self.error!r}"
        notice = _notice(self.page)
        if notice:
            assert notice.endswith(ENDINGS), f"{self.name}: {notice!r}"
            found = Answer("sentence", notice)
        else:
            found = self.read(base)
        found.after_fault_s = self.ended_at - fault_at
        return found

    def read(self, base: str) -> Answer:
        raise NotImplementedError

    def sentence(self, text: str) -> Answer:
        """The page's own error line: it must end in the failure vocabulary, not a bare exception."""
        assert text.endswith(ENDINGS), f"{self.name}: {text!r}"
        return Answer("sentence", text)


class LabRun(Job):
    name, ledger_kind = "lab run", "lab-job-result."

    def __init__(self, query: str) -> None:
        super().__init__()
        self.query = query

    def act(self, client):
        page = dashclient.PageSession(client, f"/lab?{self.query}").load()
        page.values["lab-fresh"]["value"] = True
        page.click("lab-run", max_seconds=PATIENCE_S)
        return page

    def read(self, base: str) -> Answer:
        result = self.page.values.get("lab-job-result", {}).get("data") or {}
        shown = self.page.values["lab-results"].get("children")
        if result.get("error"):
            return self.sentence(result["error"])
        assert result.get("run_id"), f"lab run: no result and no sentence ({shown!r})"
        assert "lab-result-panel" in _ids(shown), f"lab run: result {result} shown as {_text(shown)!r}"
        return Answer("kept", f"run {result['run_id']} opens as {_opens_by_id(base, result['run_id'])!r}")


class PlaygroundJob(Job):
    name, ledger_kind = "playground job", "pg-job-done."

    def __init__(self, seed: int, samples: int = 300_000) -> None:
        super().__init__()
        self.path = f"/playground?width=256&depth=8&seed={seed}&samples={samples}&round=v1-warmup"
        self.name = f"playground job {seed}"

    def act(self, client):
        return dashclient.PageSession(client, self.path).load()  # opening the address starts the job

    def read(self, base: str) -> Answer:
        shown = self.page.values["pg-results"].get("children")
        done = self.page.values.get("pg-job-done", {}).get("data") or {}
        if done.get("error") or "pg-job-error" in _ids(shown):
            return self.sentence(_text(shown))
        assert "pg-focus" in _ids(shown), f"{self.name}: no plots and no sentence ({_text(shown)!r})"
        again = dashclient.PageSession(dashclient.DashClient(base, timeout=120), self.path).load()
        assert not again.values.get("pg-job-request", {}).get("data"), f"{self.name}: opened again, it runs again"
        assert "pg-focus" in _ids(again.values["pg-results"].get("children")), f"{self.name}: not kept"
        return Answer("kept", "its plots come back at once when its address is opened again")


def _estimator(tag: str) -> bytes:
    return (f"from whestbench import BaseEstimator\nimport flopscope.numpy as fnp\n\n\nclass Mine(BaseEstimator):\n"
            f"    def predict(self, mlp, budget):  # {tag}\n        return fnp.zeros((mlp.depth, mlp.width))\n"
            ).encode()


class UploadRun(Job):
    name, ledger_kind = "upload", "upload"

    def __init__(self, tag: str, mlps: str = "0:16") -> None:
        super().__init__()
        self.tag, self.mlps = tag, mlps

    def act(self, client):
        page = dashclient.PageSession(client, "/upload?dataset=v1-warmup").load()
        page.values["upload-file"]["filename"] = [f"{self.tag}.py"]
        page.click("upload-file", "contents",
                   value=["data:text/x-python;base64," + base64.b64encode(_estimator(self.tag)).decode()])
        page.values["upload-mlps"]["value"] = self.mlps
        page.click("upload-run")
        deadline = time.time() + PATIENCE_S
        while not page.values.get("upload-poll", {}).get("disabled", True) and time.time() < deadline:
            time.sleep(1.0)  # the page's interval
            page.click("upload-poll", "n_intervals")
        return page

    def read(self, base: str) -> Answer:
        phase = _text(self.page.values.get("upload-phase", {}).get("children"))
        status = _text(self.page.values.get("upload-submit-status", {}).get("children"))
        if not phase:
            return self.sentence(status)
        if phase.startswith("Failed: "):
            return Answer("sentence", phase)  # the ledger's reason, as its card shows it
        assert phase.startswith("Done"), f"upload: {phase!r}"
        run_id = _text(self.page.values["upload-run-id"].get("children"))
        return Answer("kept", f"run {run_id} opens as {_opens_by_id(base, run_id)!r}")


class BandJob(Job):
    name, ledger_kind = "band job", "convergence-refresh."

    def act(self, client):
        page = dashclient.PageSession(client, f"/convergence?dataset={SWEPT}").load()
        assert page.values["convergence-baseline-panel"]["style"] == {"display": "block"}, "nothing to compute"
        page.click("convergence-compute", max_seconds=PATIENCE_S)
        return page

    def read(self, base: str) -> Answer:
        error = _text(self.page.values["convergence-baseline-error"].get("children"))
        if error:
            return self.sentence(error)
        assert self.page.values["convergence-refresh"].get("data"), "band job: no result and no sentence"
        again = dashclient.PageSession(dashclient.DashClient(base, timeout=120), f"/convergence?dataset={SWEPT}").load()
        assert again.values["convergence-baseline-panel"]["style"] == {"display": "none"}, "baselines not kept"
        return Answer("kept", "the convergence page no longer offers to compute them")


class CurveSweep(Job):
    name, ledger_kind = "curve sweep", "lab-sweep-results."
    QUERY = {"dataset": SWEPT, "mlps": "0:4", "estimator": "mc", "mc": "0.5B", "budgets": "0.01B:1B:5"}

    def act(self, client):
        query = "&".join(f"{k}={v}" for k, v in self.QUERY.items())
        page = dashclient.PageSession(client, f"/lab?{query}").load()
        page.click("lab-sweep", max_seconds=PATIENCE_S)
        return page

    def read(self, base: str) -> Answer:
        shown = self.page.values["lab-sweep-results"].get("children")
        if "lab-sweep-error" in _ids(shown):
            return self.sentence(_text(shown).removeprefix("The sweep could not finish: "))
        assert "lab-sweep-panel" in _ids(shown), f"curve sweep: no curve and no sentence ({_text(shown)!r})"
        q = self.QUERY
        again = dashclient.PageSession(dashclient.DashClient(base, timeout=120),
                                       f"/convergence?dataset={SWEPT}&curves=mc:0.5B&budgets={q['budgets']}"
                                       f"&mlps={q['mlps']}").load()
        readout = again.values["curve-body"].get("children")
        assert "curve-missing" not in _ids(readout), f"curve sweep: points not kept ({_text(readout)!r})"
        return Answer("kept", "every point of its curve is drawn when the convergence page opens it")


# --------------------------------------------------------------------------- the stack


def _ledger(store: Path) -> list[dict]:
    con = sqlite3.connect(store)
    con.row_factory = sqlite3.Row
    try:
        return [dict(r) for r in con.execute("SELECT * FROM jobs ORDER BY created_at")]
    except sqlite3.OperationalError:
        return []
    finally:
        con.close()


def _all_running(store: Path, jobs: list[Job], timeout: float = PATIENCE_S) -> None:
    """Wait until every job is running (or has ended already, on a fast machine)."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        rows = _ledger(store)
        waiting = [j.name for j in jobs if j.ended_at is None and not any(
            r["kind"].startswith(j.ledger_kind) and r["status"] == "running" for r in rows)]
        if not waiting:
            return
        for job in jobs:
            assert job.error is None, f"{job.name}: {job.error!r}"
        time.sleep(0.2)
    raise AssertionError(f"never running: {waiting}; ledger {[(r['kind'], r['status']) for r in _ledger(store)]}")


def _without_cov_baseline(folder: Path) -> None:
    (folder / SWEPT / "band" / "baselines" / "cov.json").unlink()  # the band job computes it


def _settings(root: Path, **extra: str) -> dict:
    data = machine_data(root, _without_cov_baseline)
    return dict(workers=2, threads=4, ready_path="/healthz", WHESTBOARD_ALLOW_UPLOADS="1",
                WHESTBOARD_DATA_DIR=str(data), WHESTBOARD_JOB_PER_CLIENT="50", WHESTBOARD_JOB_TOTAL="50",
                WHESTBOARD_SANDBOX_PER_CLIENT="10", **extra)


def _report(what: str, answers: dict[str, Answer], store: Path) -> None:
    kept = sum(a.verdict == "kept" for a in answers.values())
    print(f"\n{what}: {kept} of {len(answers)} jobs ended with a result that was kept, {len(answers) - kept} with "
          "a sentence; " + "; ".join(f"{name}: {a.verdict} {a.after_fault_s:.1f} s after the fault ({a.text[:90]})"
                                      for name, a in answers.items())
          + "; ledger: " + ", ".join(f"{r['kind'].split('.')[0]} {r['status']} x{r['attempts']}" for r in _ledger(store)))


def _no_job_left_running(store: Path) -> None:
    left = [(r["kind"], r["status"], r["reason"]) for r in _ledger(store) if r["status"] in ("queued", "running")]
    assert not left, left


# --------------------------------------------------------------------------- SIGTERM: a graceful restart


def test_a_graceful_restart_mid_jobs_loses_nothing(tmp_path):
    """The issue's case: the lab run's page polls through the restart and the run it is given opens by its
    id on the new server; the other kinds, started before the restart too, end kept or with a sentence."""
    port, state = free_port(), tmp_path / "state"
    settings = _settings(tmp_path / "machine")
    proc, _ = start_gunicorn("app:server", state, port, **settings)
    base, restarted = f"http://127.0.0.1:{port}", None
    lab = LabRun("dataset=v2-phase2&mlps=0:2&estimator=mc&mc=0.5B")
    jobs = [lab, PlaygroundJob(61, samples=1_000_000), UploadRun("restart"), BandJob(), CurveSweep()]
    try:
        for job in jobs:
            job.start(base)
        _all_running(state / "whestboard.sqlite", jobs)
        while lab.progress_at is None:
            assert lab.ended_at is None, "the lab run ended before it reported progress"
            time.sleep(0.1)
        time.sleep(max(0.0, lab.progress_at + 3.0 - time.time()))
        fault_at = time.time()
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=120)
        restarted, _ = start_gunicorn("app:server", state, port, **settings)
        serving_s = time.time() - fault_at
        answers = {job.name: job.answer(base, fault_at) for job in jobs}
        assert answers["lab run"].verdict == "kept", answers["lab run"]  # its process outlives the restart
        _no_job_left_running(state / "whestboard.sqlite")
        _report(f"SIGTERM to the gunicorn master (new server serving {serving_s:.1f} s after it)", answers,
                state / "whestboard.sqlite")
    finally:
        stop_process(proc)
        if restarted is not None:
            stop_process(restarted)


# --------------------------------------------------------------------------- SIGKILL of the web workers


def _web_workers(master: psutil.Process) -> list[psutil.Process]:
    return [c for c in master.children() if c.status() != psutil.STATUS_ZOMBIE]


def test_killed_web_workers_mid_jobs_lose_nothing(tmp_path):
    """Every web worker killed with SIGKILL while the jobs run (gunicorn's master starts new ones): the
    background jobs' processes live on and their pages collect them from the new workers; the upload,
    which ran in a killed worker, runs again from the start."""
    port, state = free_port(), tmp_path / "state"
    proc, _ = start_gunicorn("app:server", state, port, **_settings(tmp_path / "machine"))
    base = f"http://127.0.0.1:{port}"
    jobs = [LabRun(f"dataset={SWEPT}&mlps=0:4&estimator=mc&mc=0.5B"), PlaygroundJob(62, samples=1_000_000),
            UploadRun("killed"), BandJob(), CurveSweep()]
    try:
        for job in jobs:
            job.start(base)
        _all_running(state / "whestboard.sqlite", jobs)
        killed = _web_workers(psutil.Process(proc.pid))
        fault_at = time.time()
        for worker in killed:
            os.kill(worker.pid, signal.SIGKILL)
        answers = {job.name: job.answer(base, fault_at) for job in jobs}
        assert {w.pid for w in _web_workers(psutil.Process(proc.pid))}.isdisjoint({w.pid for w in killed})
        assert all(a.verdict == "kept" for a in answers.values()), answers
        upload = next(r for r in _ledger(state / "whestboard.sqlite") if r["backend"] == "queue")
        assert (upload["status"], upload["attempts"]) == ("finished", 2), upload  # run again, once
        _no_job_left_running(state / "whestboard.sqlite")
        _report("SIGKILL of every web worker", answers, state / "whestboard.sqlite")
    finally:
        stop_process(proc)


# --------------------------------------------------------------------------- SIGKILL of Celery pool processes


def test_killed_celery_pool_processes_mid_jobs_lose_nothing(tmp_path):
    """Redis and a Celery worker (two pool processes) run the background jobs: the pool process running
    each one is killed with SIGKILL; Celery hands the task again to a pool process, whose claim takes over
    from the dead one and computes it again (attempt 2), and the page gets what that run kept. The upload
    runs in the web workers' queue, not on Celery: it is started beside them and ends as usual."""
    store = tmp_path / "shared.sqlite"
    with redis_server() as redis_url:
        env = dict(_settings(tmp_path / "machine"), WHESTBOARD_REDIS_URL=redis_url,
                   WHESTBOARD_DATABASE_URL=f"sqlite:///{store}")
        port = free_port()
        proc, _ = start_gunicorn("app:server", tmp_path / "web", port, **env)
        worker_env = {k: v for k, v in env.items() if k.startswith("WHESTBOARD_") and k != "WHESTBOARD_REDIS_URL"}
        try:
            with celery_worker("worker", tmp_path / "worker", redis_url, concurrency=2, **worker_env) as (worker, _):
                base = f"http://127.0.0.1:{port}"
                dash_jobs = [LabRun(f"dataset={SWEPT}&mlps=0:4&estimator=mc&mc=0.5B"),
                             PlaygroundJob(63, samples=1_000_000), BandJob(), CurveSweep()]
                upload = UploadRun("celery", mlps="0:4")
                answers = {}
                for batch in (dash_jobs[:2], dash_jobs[2:]):  # two pool processes: two jobs at a time
                    for job in batch:
                        job.start(base)
                    _all_running(store, batch)
                    pids = {int(r["worker"].rsplit(":", 1)[1]) for r in _ledger(store)
                            if r["status"] == "running" and r["backend"] == "celery"}
                    assert pids <= {c.pid for c in psutil.Process(worker.pid).children()}, pids
                    fault_at = time.time()
                    for pid in pids:
                        os.kill(pid, signal.SIGKILL)
                    answers.update({job.name: job.answer(base, fault_at) for job in batch})
                upload.start(base)
                answers[upload.name] = upload.answer(base, time.time())
                assert all(a.verdict == "kept" for a in answers.values()), answers
                retried = [r for r in _ledger(store) if r["backend"] == "celery"]
                assert all((r["status"], r["attempts"]) == ("finished", 2) for r in retried), retried
                _no_job_left_running(store)
                _report("SIGKILL of the Celery pool process running each job", answers, store)
        finally:
            stop_process(proc)


# --------------------------------------------------------------------------- a full disk


def test_a_disk_that_fills_mid_jobs_ends_every_job_kept_or_with_its_sentence(small_state_disk, tmp_path):  # noqa: F811
    """The issue's second case: the state folder's small disk fills while four playground jobs and one of
    each other kind run; each ends with what it kept or with the full-disk sentence, none in silence, and
    once space is back the next job is kept."""
    settings = _settings(tmp_path / "machine", WHESTBOARD_MIN_FREE_MB="4")
    port = free_port()
    proc, _ = start_gunicorn("app:server", small_state_disk, port, log_dir=tmp_path, **settings)
    base, fillers = f"http://127.0.0.1:{port}", []
    upload = UploadRun("full", mlps="0:4")
    jobs = [*(PlaygroundJob(70 + i) for i in range(4)), LabRun(f"dataset={SWEPT}&mlps=0:4&estimator=mc&mc=0.5B"),
            BandJob(), CurveSweep()]
    try:
        for job in (*jobs, upload):
            job.start(base)
        _all_running(small_state_disk / "whestboard.sqlite", [*jobs, upload])
        fault_at = time.time()
        fillers = fill(small_state_disk)
        answers = {job.name: job.answer(base, fault_at) for job in jobs}
        # An upload's ending is retried while the store refuses writes (its card says it is running): it ends
        # once space is back, with its reason or by running again.
        for filler in fillers:
            filler.unlink()
        fillers, space_at = [], time.time()
        answers[upload.name] = upload.answer(base, space_at)
        for what, answer in answers.items():
            assert answer.verdict == "kept" or answer.text.endswith(faults.sentence(faults.DISK)), (what, answer)
        after = LabRun(f"dataset={SWEPT}&mlps=5&estimator=mean").start(base)
        assert after.answer(base, time.time()).verdict == "kept"
        store = small_state_disk / "whestboard.sqlite"
        _report("the state folder's disk filled mid-jobs (the upload's time counted from when space was back)",
                answers, store)
        # The job processes the disk stopped could not end their rows: the next server's master ends them.
        left = {r["id"] for r in _ledger(store) if r["status"] == "running"}
        stop_process(proc)
        proc, _ = start_gunicorn("app:server", small_state_disk, port, log_dir=tmp_path, **settings)
        _no_job_left_running(store)
        ended = [r for r in _ledger(store) if r["id"] in left]
        assert all(r["status"] == "failed" and r["reason"].startswith("worker died: process ") for r in ended), ended
        print(f"a restart ended the {len(ended)} rows the full disk had left running, each with its reason")
    finally:
        for filler in fillers:
            filler.unlink()
        stop_process(proc)
