"""Scale-out: with WHESTBOARD_REDIS_URL set, web workers hand background jobs to Celery workers via Redis.

A real ``redis-server`` (Debian package) and a real ``celery -A ... worker``
subprocess; the web side is gunicorn with two workers. Web and Celery worker
get separate state folders, so all they share is Redis and the store.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time

import psutil
import pytest
import redis

from tests.prod_support import (
    REPO,
    alternating_client,
    base_env,
    celery_worker,
    gunicorn,
    load_dashclient,
    redis_server,
)

dashclient = load_dashclient()
pytestmark = [pytest.mark.slow, pytest.mark.services]


def sum_of_squares(n: int) -> int:
    return sum(k * k for k in range(n))


@pytest.fixture(scope="module")
def redis_url():
    with redis_server() as url:
        yield url


@pytest.fixture(scope="module")
def stack(redis_url, tmp_path_factory):
    root = tmp_path_factory.mktemp("scaleout")
    store = root / "shared.sqlite"
    db_url = f"sqlite:///{store}"
    with gunicorn("tests.server.prod_jobs_app:server", root / "web", workers=2, threads=2,
                  WHESTBOARD_REDIS_URL=redis_url, WHESTBOARD_DATABASE_URL=db_url) as web, \
            gunicorn("tests.server.prod_jobs_app:server", root / "web", workers=1, threads=2,
                     WHESTBOARD_REDIS_URL=redis_url, WHESTBOARD_DATABASE_URL=db_url) as twin, \
            celery_worker("tests.server.prod_jobs_app:celery", root / "worker", redis_url,
                          WHESTBOARD_DATABASE_URL=db_url) as (worker, worker_log):
        yield {"web": web, "twin": twin, "worker": worker, "worker_log": worker_log, "store": store, "redis": redis_url}


def ledger(store) -> list[dict]:
    con = sqlite3.connect(store)
    con.row_factory = sqlite3.Row
    try:
        return [dict(r) for r in con.execute("SELECT * FROM jobs ORDER BY created_at")]
    finally:
        con.close()


def start_job(*webs, n: int, seconds: float) -> tuple:
    """A user of the web side; with several servers, consecutive requests alternate between them."""
    client = alternating_client([w.base for w in webs], keepalive=False, timeout=60)
    page = dashclient.PageSession(client, "/").load()
    page.values["n"]["value"], page.values["seconds"]["value"] = n, seconds
    return client, page


def test_a_run_started_through_the_web_is_computed_by_a_celery_worker(stack):
    client, page = start_job(stack["web"], stack["twin"], n=31337, seconds=2)
    (response,) = page.click("go", max_seconds=120)
    text = page.values["result"]["children"]
    assert text.startswith(f"sum={sum_of_squares(31337)} ")
    job_pid = int(text.rsplit("pid=", 1)[1])
    celery_children = {p.pid for p in psutil.Process(stack["worker"].pid).children(recursive=True)}
    web_processes = {p.pid for web in (stack["web"], stack["twin"])
                     for p in psutil.Process(web.proc.pid).children(recursive=True)}
    assert job_pid in celery_children and job_pid not in web_processes
    assert response["progress_seen"], "progress from the Celery worker never reached the browser"
    served = {int(r.headers["X-Worker-Pid"]) for r in client.responses}
    for web in (stack["web"], stack["twin"]):  # started through one web process, polled through another
        assert served & {p.pid for p in psutil.Process(web.proc.pid).children()}, f"{web.base} served nothing"
    row = ledger(stack["store"])[-1]
    assert (row["backend"], row["status"], row["attempts"]) == ("celery", "finished", 1)
    assert row["worker"].endswith(f":{job_pid}")


def test_the_cache_is_shared_through_redis(stack):
    n = 424_242
    for _ in range(10):
        client = dashclient.DashClient(stack["web"].base, keepalive=False, timeout=60)
        page = dashclient.PageSession(client, "/").load()
        dep = next(d for d in page.deps if d["output"] == "cached.children")
        data = client.fire(dep, {"n": {"value": n}}, ["n.value"])
        assert data["response"]["cached"]["children"] == f"cached={sum_of_squares(n)}"
    assert redis.Redis.from_url(stack["redis"]).keys("whestboard-cache:*")
    log = stack["web"].state_dir / "computations.log"
    assert [line for line in log.read_text().splitlines() if line.endswith(f" {n}")].__len__() == 1
    assert not (stack["web"].state_dir / "cache").exists()


def test_a_killed_celery_worker_process_is_retried_and_the_user_gets_the_result(stack):
    before = {r["id"] for r in ledger(stack["store"])}
    client, page = start_job(stack["web"], n=2024, seconds=6)
    out: dict = {}
    import threading

    poller = threading.Thread(target=lambda: out.update(r=page.click("go", max_seconds=150)))
    poller.start()
    deadline = time.time() + 60
    running = []
    while not running and time.time() < deadline:
        running = [r for r in ledger(stack["store"]) if r["id"] not in before and r["status"] == "running"]
        time.sleep(0.2)
    assert running, "the Celery worker never picked the job up"
    victim = int(running[0]["worker"].rsplit(":", 1)[1])
    time.sleep(1.0)
    os.kill(victim, signal.SIGKILL)
    poller.join(150)
    assert page.values["result"]["children"].startswith(f"sum={sum_of_squares(2024)} ")
    assert not page.values["result"]["children"].endswith(f"pid={victim}")
    row = next(r for r in ledger(stack["store"]) if r["id"] == running[0]["id"])
    assert (row["status"], row["attempts"]) == ("finished", 2)
    assert "job.takeover" in stack["worker_log"].read_text()


def test_worker_module_exposes_the_apps_celery_application(redis_url, tmp_path):
    """``celery -A worker worker`` finds the Celery app with every page's background callbacks registered."""
    code = ("import worker, celery; assert isinstance(worker.celery, celery.Celery); "
            "print(len([t for t in worker.celery.tasks if t.startswith('background_callback_')]))")
    env = base_env(tmp_path, WHESTBOARD_REDIS_URL=redis_url)
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    from dash.background_callback.managers import BaseBackgroundCallbackManager  # noqa: F401

    pages_with_background = [p for p in (REPO / "pages").glob("*.py") if "background=True" in p.read_text()]
    assert int(done.stdout.strip().splitlines()[-1]) >= len(pages_with_background)
    env.pop("WHESTBOARD_REDIS_URL")
    refused = subprocess.run([sys.executable, "-c", "import worker"], cwd=REPO, env=env, capture_output=True,
                             text=True, timeout=120)
    assert refused.returncode != 0 and "WHESTBOARD_REDIS_URL" in refused.stderr


def test_a_lab_run_through_the_real_app_runs_on_celery_and_reaches_the_user(redis_url, tmp_path):
    """The documented deployment: gunicorn app:server + ``celery -A worker worker``, sharing Redis and the store."""
    from tests.server.test_production import run_lab, whestbench_mean_propagation_flops

    redis_url = redis_url.rsplit("/", 1)[0] + "/1"  # the module's other Celery app keeps using db 0
    db_url = f"sqlite:///{tmp_path / 'shared.sqlite'}"
    with gunicorn("app:server", tmp_path / "web", workers=2, threads=2, ready_path="/healthz",
                  WHESTBOARD_REDIS_URL=redis_url, WHESTBOARD_DATABASE_URL=db_url) as web, \
            celery_worker("worker", tmp_path / "worker", redis_url, WHESTBOARD_DATABASE_URL=db_url) as (worker, _):
        assert web.base and requests_ok(web.base + "/healthz")
        _, page = run_lab(web, 5)
        result = page.values["lab-job-result"]["data"]
        assert result.get("run_id") and not result.get("error"), result
        assert page.values["lab-current-run"]["data"] == result["run_id"]
        assert page.values["lab-results"]["children"], "the finished run was not rendered for the user"
        row = ledger(tmp_path / "shared.sqlite")[-1]
        assert (row["backend"], row["status"], row["kind"]) == ("celery", "finished", "lab-job-result.data")
        job_pid = int(row["worker"].rsplit(":", 1)[1])
        assert job_pid in {p.pid for p in psutil.Process(worker.pid).children(recursive=True)}
        con = sqlite3.connect(tmp_path / "shared.sqlite")
        (report,) = con.execute("SELECT report FROM runs WHERE run_id = ?", (result["run_id"],)).fetchone()
        con.close()
    import json

    (entry,) = json.loads(report)["results"]["per_mlp"]
    assert entry["flops_used"] == whestbench_mean_propagation_flops("v1-warmup", 5)


def requests_ok(url: str) -> bool:
    """/healthz answers 200 and reports Redis configured and reachable."""
    import requests

    answer = requests.get(url, timeout=30)
    checks = answer.json()["checks"]
    return answer.status_code == 200 and checks["redis"]["ok"] and checks["redis"]["configured"]
