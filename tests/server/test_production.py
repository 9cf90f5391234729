"""Several gunicorn workers, one truth: the image's command line, shared jobs and caches, killed processes.

Every server here is a real ``gunicorn -c gunicorn.conf.py ...`` with two
workers, configured only through the environment, as the Docker image runs it
(no Docker engine on this machine: the same command line is run directly).
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import threading
import time
from collections import Counter
from pathlib import Path

import psutil
import pytest
import requests

from tests.prod_support import REPO, alternating_client, gunicorn, gunicorn_argv, load_dashclient

dashclient = load_dashclient()
pytestmark = [pytest.mark.slow, pytest.mark.services]


def sum_of_squares(n: int) -> int:
    return sum(k * k for k in range(n))


def ledger(state_dir: Path) -> list[dict]:
    """The job ledger as stored (read with plain sqlite3, as an operator would)."""
    con = sqlite3.connect(state_dir / "whestboard.sqlite")
    con.row_factory = sqlite3.Row
    try:
        return [dict(r) for r in con.execute("SELECT * FROM jobs ORDER BY created_at")]
    except sqlite3.OperationalError as exc:
        if "no such table" in str(exc):
            return []
        raise
    finally:
        con.close()


def json_lines(text: str) -> list[dict]:
    out = []
    for line in text.splitlines():
        if line.startswith("{"):
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                pass
    return out


# --------------------------------------------------------------------------- the image's command line


def test_dockerfile_runs_the_stack_of_serve_sh_as_a_non_root_user_with_a_healthcheck():
    dockerfile = (REPO / "Dockerfile").read_text()
    cmd = next(line for line in dockerfile.splitlines() if line.startswith("CMD "))
    assert json.loads(cmd[4:]) == ["./scripts/serve.sh"]  # nginx before gunicorn (tests/server/test_front_door.py)
    serve = (REPO / "scripts" / "serve.sh").read_text()
    assert '"$GUNICORN" -c gunicorn.conf.py --bind "unix:$FRONT/gunicorn.sock" app:server' in serve
    assert "nginx-light" in dockerfile or "install -y --no-install-recommends nginx" in dockerfile
    assert gunicorn_argv("app:server")[1:] == ["-c", "gunicorn.conf.py", "app:server"]
    users = [line.split()[1] for line in dockerfile.splitlines() if line.startswith("USER ")]
    assert users and users[-1] not in ("root", "0")
    assert "HEALTHCHECK" in dockerfile and "/healthz" in dockerfile
    ignored = (REPO / ".dockerignore").read_text().split()
    assert "data/.state" in ignored and ".venv" in ignored and ".git" in ignored


SECRET = "organizer-secret-7f3a9c"


@pytest.fixture(scope="module")
def app_server(tmp_path_factory):
    """The real app, started exactly as the Docker image starts it: 2 workers, 2 threads."""
    with gunicorn("app:server", tmp_path_factory.mktemp("app-state"), workers=2, threads=2, ready_path="/healthz",
                  WHESTBOARD_ORGANIZER_TOKEN=SECRET) as server:
        yield server


def test_image_command_line_serves_the_app_and_healthz(app_server):
    health = requests.get(app_server.base + "/healthz", timeout=30)
    assert health.status_code == 200, health.text
    report = health.json()
    assert report["ok"] is True
    assert report["checks"]["store"]["ok"] is True and report["checks"]["store"]["backend"] == "sqlite"
    assert report["checks"]["datasets"]["served"], "no embedded dataset served"
    home = requests.get(app_server.base + "/", timeout=30)
    assert home.status_code == 200 and "_dash-config" in home.text
    # Secrets sent by a client never reach the logs.
    requests.get(app_server.base + f"/?token={SECRET}", headers={"Authorization": f"Bearer {SECRET}"}, timeout=30)
    assert len(psutil.Process(app_server.proc.pid).children()) == 2  # WHESTBOARD_WORKERS=2
    time.sleep(0.5)
    log = app_server.log_text()
    requests_logged = [r for r in json_lines(log) if r.get("event") == "request"]
    assert any(r["path"] == "/" and r["status"] == 200 and r["client"] for r in requests_logged)
    assert all({"method", "path", "status", "duration_ms", "client", "verdict"} <= set(r) for r in requests_logged)
    assert SECRET not in log


def whestbench_mean_propagation_flops(dataset_key: str, index: int) -> int:
    """What whestbench's evaluate_estimator bills MeanPropagationEstimator for one MLP under its round's rules."""
    import flopscope.numpy as fnp
    from whestbench.estimators import MeanPropagationEstimator
    from whestbench.scoring import ContestData, ContestSpec, evaluate_estimator

    from whestboard.data import get_dataset
    from whestboard.rules import get_round

    ds = get_dataset(dataset_key)
    rnd = get_round(ds.info.round_tag)
    spec = ContestSpec(width=ds.info.width, depth=ds.info.depth, n_mlps=1, flop_budget=rnd.budget,
                       ground_truth_samples=ds.info.n_samples, wall_time_limit_s=rnd.wall_time_limit_s,
                       residual_wall_time_limit_s=rnd.residual_wall_time_limit_s,
                       lambda_flops_per_second=rnd.lambda_flops_per_second)
    truth, avg_variance = ds.truth(index)
    data = ContestData(spec=spec, mlps=[ds.mlp(index)], all_layer_targets=[fnp.asarray(truth, dtype=fnp.float32)],
                       final_targets=[fnp.asarray(truth[-1], dtype=fnp.float32)], avg_variances=[avg_variance])
    return int(evaluate_estimator(MeanPropagationEstimator(), data)["per_mlp"][0]["flops_used"])


def run_lab(servers, mlp: int):
    """A user on /lab runs mean propagation on one v1-warmup MLP, forcing a fresh (uncached) run.

    ``servers``: one server, or several that the user's requests alternate between.
    """
    servers = servers if isinstance(servers, list | tuple) else [servers]
    client = alternating_client([s.base for s in servers], keepalive=False, timeout=120)
    page = dashclient.PageSession(client, f"/lab?dataset=v1-warmup&mlps={mlp}&estimator=mean").load()
    page.values["lab-fresh"]["value"] = True
    page.click("lab-run", max_seconds=180)
    return client, page


@pytest.fixture(scope="module")
def twin_server(app_server):
    """A second gunicorn on the same state folder: another process a user's requests can land on."""
    with gunicorn("app:server", app_server.state_dir, workers=1, threads=2, ready_path="/healthz",
                  WHESTBOARD_ORGANIZER_TOKEN=SECRET) as server:
        yield server


def test_a_lab_run_across_workers_records_the_graders_flops(app_server, twin_server):
    client, page = run_lab([app_server, twin_server], 3)
    result = page.values["lab-job-result"]["data"]
    assert result.get("run_id") and not result.get("error"), result
    assert page.values["lab-current-run"]["data"] == result["run_id"]
    time.sleep(0.5)
    for server in (app_server, twin_server):
        lab_requests = [r for r in json_lines(server.log_text())
                        if r.get("event") == "request" and str(r.get("what", "")).count("lab-")]
        assert lab_requests, f"{server.base} served none of the lab's callbacks"
    row = ledger(app_server.state_dir)[-1]
    assert (row["kind"], row["status"], row["attempts"]) == ("lab-job-result.data", "finished", 1)
    os.environ["WHESTBOARD_STATE_DIR"] = str(app_server.state_dir)
    try:
        from whestboard.scoring import get_run
        from whestboard.store import reset_engines

        reset_engines()
        report = get_run(result["run_id"])
    finally:
        os.environ.pop("WHESTBOARD_STATE_DIR")
        reset_engines()
    (entry,) = report["results"]["per_mlp"]
    assert entry["mlp_index"] == 3
    assert entry["flops_used"] == whestbench_mean_propagation_flops("v1-warmup", 3)


# --------------------------------------------------------------------------- background jobs across workers


#: Ten users at once (test_concurrent_users_each_get_their_own_answer_computed_once), all from 127.0.0.1.
CONCURRENT_JOBS = {"WHESTBOARD_JOB_PER_CLIENT": "16", "WHESTBOARD_JOB_TOTAL": "16"}


@pytest.fixture(scope="module")
def jobs_server(tmp_path_factory):
    """The test-only Dash app (tests/prod_jobs_app.py) under gunicorn: 2 workers, 2 threads, preloaded.

    The simulated users all come from the loopback address, so to the job budgets they are one client:
    the server allows that client (and the machine) as many jobs at once as the tests start."""
    with gunicorn("tests.server.prod_jobs_app:server", tmp_path_factory.mktemp("jobs-state"), workers=2, threads=2,
                  **CONCURRENT_JOBS) as s:
        yield s


@pytest.fixture(scope="module")
def jobs_twin(jobs_server):
    """A second gunicorn of the same app on the same state folder: another process requests can land on."""
    with gunicorn("tests.server.prod_jobs_app:server", jobs_server.state_dir, workers=1, threads=2,
                  **CONCURRENT_JOBS) as s:
        yield s


def open_page(*servers, keepalive: bool = False):
    """A user on the jobs app; with several servers, consecutive requests alternate between them."""
    client = alternating_client([s.base for s in servers], keepalive=keepalive, timeout=60)
    return client, dashclient.PageSession(client, "/").load()


def assert_served_by_both(served_by: Counter, *servers) -> None:
    """Each server's workers answered some of the requests: no process saw the whole story."""
    for server in servers:
        assert set(served_by) & set(server.worker_pids()), f"{server.base} served none of {dict(served_by)}"


def run_job(servers, n: int, seconds: float, **kw):
    servers = servers if isinstance(servers, list | tuple) else [servers]
    client, page = open_page(*servers, **kw)
    page.values["n"]["value"] = n
    page.values["seconds"]["value"] = seconds
    (response,) = page.click("go", max_seconds=120)
    return client, page, response


def test_progress_and_result_are_visible_from_every_worker(jobs_server, jobs_twin):
    client, page, response = run_job([jobs_server, jobs_twin], 12345, seconds=3)
    assert page.values["result"]["children"].startswith(f"sum={sum_of_squares(12345)} ")
    assert len(response["progress_seen"]) >= 3  # progress was read while it ran
    served_by = Counter(int(r.headers["X-Worker-Pid"]) for r in client.responses)
    assert_served_by_both(served_by, jobs_server, jobs_twin)
    row = ledger(jobs_server.state_dir)[-1]
    assert (row["kind"], row["status"], row["attempts"], row["backend"]) == (
        "result.children", "finished", 1, "diskcache")


def test_concurrent_users_each_get_their_own_answer_computed_once(jobs_server):
    before = {r["id"] for r in ledger(jobs_server.state_dir)}
    inputs = [101, 202, 303, 404, 505, 505, 606, 707, 808, 909]  # two users ask the same thing
    results: dict[int, str] = {}
    errors: list[BaseException] = []

    def user(i: int, n: int) -> None:
        try:
            _, page, response = run_job(jobs_server, n, seconds=1)
            results[i] = page.values["result"]["children"] or repr(response)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=user, args=(i, n)) for i, n in enumerate(inputs)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(180)
    assert not errors, errors
    for i, n in enumerate(inputs):
        assert results[i].startswith(f"sum={sum_of_squares(n)} ")
    new = [r for r in ledger(jobs_server.state_dir) if r["id"] not in before]
    assert len(new) == len(inputs)  # one launch each: nothing lost, nothing launched twice
    assert all(r["status"] == "finished" and r["attempts"] == 1 for r in new)


def test_cached_callbacks_are_computed_once_for_all_workers(jobs_server, jobs_twin):
    n = 777_001
    served_by = Counter()
    for i in range(24):
        client, page = open_page(*((jobs_server, jobs_twin) if i % 2 else (jobs_twin, jobs_server)))
        data = client.fire(next(d for d in page.deps if d["output"] == "cached.children"), {"n": {"value": n}},
                           ["n.value"])
        assert data["response"]["cached"]["children"] == f"cached={sum_of_squares(n)}"
        served_by[int(client.responses[-1].headers["X-Worker-Pid"])] += 1
    assert_served_by_both(served_by, jobs_server, jobs_twin)
    computed = [line for line in (jobs_server.state_dir / "computations.log").read_text().splitlines()
                if line.endswith(f" {n}")]
    assert len(computed) == 1, computed


def test_killed_job_process_is_reported_failed_with_a_reason(jobs_server):
    run_job(jobs_server, 9, seconds=0)  # a finished job recorded before the kill
    recorded_before = [r for r in ledger(jobs_server.state_dir) if r["status"] == "finished"]
    out: dict = {}
    client, page = open_page(jobs_server)
    page.values["n"]["value"], page.values["seconds"]["value"] = 5, 20
    worker = threading.Thread(target=lambda: out.update(r=page.click("go", max_seconds=60)))
    worker.start()
    deadline = time.time() + 30
    while True:
        running = [r for r in ledger(jobs_server.state_dir) if r["status"] == "running"]
        if running or time.time() > deadline:
            break
        time.sleep(0.2)
    assert running, "the job never started"
    job_pid = int(running[-1]["worker"].rsplit(":", 1)[1])
    # Jobs yield the CPU to page views: WHESTBOARD_JOB_NICE (default 10) below the web workers.
    assert psutil.Process(job_pid).nice() == min(19, psutil.Process(jobs_server.proc.pid).nice() + 10)
    os.kill(job_pid, signal.SIGKILL)
    worker.join(60)
    (response,) = out["r"]
    notice = response["sideUpdate"]["whestboard-job-notice"]
    assert notice["is_open"] is True and "worker died" in notice["children"]
    row = next(r for r in ledger(jobs_server.state_dir) if r["id"] == running[-1]["id"])
    assert row["status"] == "failed" and row["reason"].startswith(f"worker died: process {row['worker']} exited")
    # Nothing recorded earlier was lost, and the store is intact.
    after = {r["id"]: r for r in ledger(jobs_server.state_dir)}
    assert all(after[r["id"]]["status"] == "finished" for r in recorded_before)
    con = sqlite3.connect(jobs_server.state_dir / "whestboard.sqlite")
    assert con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    con.close()
    assert any(r.get("event") == "job.failed" and "worker died" in r.get("reason", "")
               for r in json_lines(jobs_server.log_text()))


def test_killed_web_worker_mid_job_loses_nothing(jobs_server):
    """The job outlives the web worker that launched it; the other worker (or its replacement) answers."""
    workers_before = {c.pid for c in psutil.Process(jobs_server.proc.pid).children()}
    client, page = open_page(jobs_server, keepalive=True)  # start and first polls on one worker
    page.values["n"]["value"], page.values["seconds"]["value"] = 4321, 4
    dep = next(d for d in page.deps if d["output"] == "result.children")
    body_values = page.values
    first, _ = client.post(
        {"output": dep["output"], "outputs": {"id": "result", "property": "children"},
         "inputs": [{"id": "go", "property": "n_clicks", "value": 1}], "changedPropIds": ["go.n_clicks"],
         "state": [{"id": "n", "property": "value", "value": body_values["n"]["value"]},
                   {"id": "seconds", "property": "value", "value": 4}]}, {}, "bg-start", dep["output"])
    launcher = int(client.responses[-1].headers["X-Worker-Pid"])
    assert launcher in workers_before
    time.sleep(1.0)
    os.kill(launcher, signal.SIGKILL)
    poller = dashclient.DashClient(jobs_server.base, keepalive=False, timeout=60)
    poller.end_id = client.end_id
    body = {"output": dep["output"], "outputs": {"id": "result", "property": "children"},
            "inputs": [{"id": "go", "property": "n_clicks", "value": None}], "changedPropIds": ["go.n_clicks"],
            "state": [{"id": "n", "property": "value", "value": None},
                      {"id": "seconds", "property": "value", "value": None}]}
    deadline = time.time() + 60
    while True:
        try:
            data, _ = poller.post(body, {"cacheKey": first["cacheKey"], "job": first["job"]}, "bg-poll", "poll")
        except dashclient.CallbackFailed:
            data = {}  # gunicorn is replacing the dead worker
        if "response" in data or time.time() > deadline:
            break
        time.sleep(0.3)
    assert data["response"]["result"]["children"].startswith(f"sum={sum_of_squares(4321)} ")
    assert launcher not in {int(r.headers["X-Worker-Pid"]) for r in poller.responses}
    assert len(psutil.Process(jobs_server.proc.pid).children()) == 2  # gunicorn replaced the worker
