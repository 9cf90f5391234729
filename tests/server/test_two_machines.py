"""Two machines for real: every feature driven through machine 1 and seen from machine 2.

Each "machine" is its own gunicorn with its own state folder and its own copy of ``data/``; the only
Celery worker runs on machine 2; all they share is one PostgreSQL and one Redis (tests/prod_support.py
starts the real servers). A user's requests are replayed by benchmarks/dashclient.py as the browser
sends them. Before the artifact store, each of these broke: an upload claimed by the other machine's
queue failed "no upload", a playground job's result landed in the worker's folder, computed baselines
stayed beside the worker's copy of the dataset, a kept dataset was unknown to the worker, and cancel
from the other machine said "This job already ended".
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from sqlalchemy import create_engine, text

from tests.prod_support import REPO, load_dashclient, two_machines
from whestboard.scoring import estimator_specs

dashclient = load_dashclient()
pytestmark = [pytest.mark.slow, pytest.mark.services]

DATASET = "v1-warmup"
PLAYGROUND = "/playground?width=256&depth=8&seed=20261201&samples=100000&round=v1-warmup"
#: Inside whestbench's 5 s setup timeout, and unpriced (residual time in predict is billed by the round).
SLOW_SECONDS = 3.5


def estimator_source(tag: str, sleep_s: float = 0) -> bytes:
    """A valid estimator (zeros) whose ``setup`` takes ``sleep_s``; ``tag`` makes its bytes (and sha256) its
    own."""
    return f"""# {tag}
import time

import flopscope.numpy as fnp
from whestbench import BaseEstimator


class Estimator(BaseEstimator):
    def setup(self, context):
        time.sleep({sleep_s})

    def predict(self, mlp, budget):
        return fnp.zeros((mlp.depth, mlp.width), dtype=fnp.float32)
""".encode()


def without_mean_baseline(folder: Path) -> None:
    """Each machine's copy of the embedded data lacks the shipped mean-propagation baseline."""
    (folder / DATASET / "band" / "baselines" / "mean.json").unlink()


@pytest.fixture(scope="module")
def machines(tmp_path_factory):
    with two_machines(tmp_path_factory.mktemp("two-machines"), prepare_data=without_mean_baseline) as running:
        yield running


def session(server, path: str):
    client = dashclient.DashClient(server.base, keepalive=False, timeout=180)
    return dashclient.PageSession(client, path).load()


def text_of(tree) -> str:
    """The visible text of a component tree (what a reader of the page sees)."""
    if isinstance(tree, str | int | float):
        return str(tree)
    if isinstance(tree, list):
        return " ".join(text_of(t) for t in tree)
    if isinstance(tree, dict):
        return text_of(tree.get("props", {}).get("children", "")) if "props" in tree else ""
    return ""


def jobs(db_url: str, **where) -> list[dict]:
    eng = create_engine(db_url)
    try:
        with eng.connect() as con:
            rows = [dict(r._mapping) for r in con.execute(text("SELECT * FROM jobs ORDER BY created_at"))]
    finally:
        eng.dispose()
    return [r for r in rows if all(r.get(k) == v for k, v in where.items())]


def process_tree(proc) -> set[int]:
    return {p.pid for p in psutil.Process(proc.pid).children(recursive=True)}


def worker_pid(row: dict) -> int:
    return int(str(row["worker"]).rsplit(":", 1)[1])


# --------------------------------------------------------------------------- uploads


def submit_upload(server, source: bytes, name: str = "estimator.py") -> tuple[str, str]:
    """On the upload page: drop the file, pick MLP 0, press Run; (sha256, queued job id)."""
    page = session(server, f"/upload?dataset={DATASET}")
    page.values.setdefault("upload-file", {})["filename"] = name
    page.click("upload-file", "contents", value="data:text/x-python;base64," + base64.b64encode(source).decode())
    sha = page.values["upload-sha"]["data"]
    assert sha == hashlib.sha256(source).hexdigest(), text_of(page.values["upload-file-status"].get("children"))
    page.values["upload-mlps"]["value"] = "0"
    page.click("upload-run")
    job_id = page.values["upload-job"]["data"]
    assert job_id, text_of(page.values["upload-submit-status"].get("children"))
    return sha, job_id


def upload_page_with_job(server, job_id: str):
    page = session(server, f"/upload?dataset={DATASET}")
    page.values["upload-job"]["data"] = job_id
    return page


def wait_upload(server, job_id: str, timeout: float = 300):
    """Poll the job's card on ``server`` (the page's interval) until it ends; the page."""
    page = upload_page_with_job(server, job_id)
    deadline = time.time() + timeout
    while True:
        page.click("upload-poll", "n_intervals")
        if page.values["upload-poll"].get("disabled"):
            return page
        assert time.time() < deadline, text_of(page.values["upload-job-card"].get("children"))
        time.sleep(0.5)


@pytest.fixture(scope="module")
def uploaded(machines):
    """Two uploads submitted at once through machine 1, the first slow enough to hold machine 1's only
    sandbox slot: the second is claimed by machine 2's executor, which has no copy of its files."""
    slow_sha, slow_job = submit_upload(machines.one, estimator_source("slow", SLOW_SECONDS))
    quick_sha, quick_job = submit_upload(machines.one, estimator_source("quick"))
    pages = {job: wait_upload(machines.two, job) for job in (slow_job, quick_job)}
    return {"slow": (slow_sha, slow_job), "quick": (quick_sha, quick_job), "pages": pages}


def test_two_concurrent_uploads_through_machine_1_both_finish_and_show_on_machine_2(machines, uploaded):
    rows = {r["id"]: r for r in jobs(machines.db_url, backend="queue")}
    machine_of = {}
    for name in ("slow", "quick"):
        _, job_id = uploaded[name]
        row = rows[job_id]
        result = json.loads(row["result"])
        assert (row["status"], result.get("ok")) == ("finished", True), (row["status"], result.get("error"))
        assert result["run_id"], result
        card = text_of(uploaded["pages"][job_id].values["upload-job-card"]["children"])
        assert "no upload" not in card and result["run_id"] in json.dumps(uploaded["pages"][job_id].values)
        pid = worker_pid(row)
        machine_of[name] = "one" if pid in process_tree(machines.one.proc) else (
            "two" if pid in process_tree(machines.two.proc) else "?")
    assert machine_of["quick"] == "two", machine_of  # machine 2 scored files it never received
    for name in ("slow", "quick"):  # and machine 1's page shows the same ending
        page = upload_page_with_job(machines.one, uploaded[name][1])
        page.click("upload-poll", "n_intervals")
        assert page.values["upload-poll"]["disabled"] is True


def test_cancel_works_from_either_machine(machines, uploaded):
    for submit_on, cancel_on in ((machines.one, machines.two), (machines.two, machines.one)):
        _, job_id = submit_upload(submit_on, estimator_source(f"cancel-{submit_on.base}", SLOW_SECONDS))
        page = upload_page_with_job(cancel_on, job_id)
        page.click("upload-cancel")
        status = text_of(page.values["upload-submit-status"].get("children"))
        assert status == "Cancelling…", status
        deadline = time.time() + 90
        while (row := jobs(machines.db_url, id=job_id)[0])["status"] not in ("cancelled", "failed", "finished"):
            assert time.time() < deadline, row
            time.sleep(0.5)
        assert row["status"] == "cancelled", row


# --------------------------------------------------------------------------- lab, playground, kept dataset


def run_lab(server, dataset: str, mlp: int = 0, *, fresh: bool = True) -> dict:
    """Run mean propagation on one MLP on /lab; ``fresh=False`` is a user asking for the same run again,
    which the page answers with the stored one."""
    page = session(server, f"/lab?dataset={dataset}&mlps={mlp}&estimator=mean")
    page.values["lab-fresh"]["value"] = fresh
    page.click("lab-run", max_seconds=240)
    result = page.values["lab-job-result" if fresh else "lab-plan-result"].get("data") or {}
    assert result.get("run_id") and not result.get("error"), (result, text_of(page.values["lab-form-error"]))
    assert page.values["lab-current-run"]["data"] == result["run_id"]  # and the page drew it
    return result


def assert_shows_run(server, dataset: str, mlp: int, run_id: str) -> None:
    again = run_lab(server, dataset, mlp, fresh=False)
    assert (again["run_id"], again["cached"]) == (run_id, True), f"{server.base} answered {again}"


def assert_ran_on_machine_2(machines, kind: str) -> None:
    row = [r for r in jobs(machines.db_url) if str(r["kind"]).startswith(kind)][-1]
    assert (row["backend"], row["status"]) == ("celery", "finished"), row
    assert worker_pid(row) in process_tree(machines.worker) | {machines.worker.pid}, row


def test_a_lab_run_through_machine_1_runs_on_machine_2_and_both_serve_it(machines):
    result = run_lab(machines.one, DATASET, 3)
    assert_ran_on_machine_2(machines, "lab-job-result.data")
    for server in (machines.one, machines.two):
        assert_shows_run(server, DATASET, 3, result["run_id"])


def test_a_large_playground_job_with_an_upload_shows_on_both_machines(machines, uploaded):
    page = session(machines.one, PLAYGROUND)  # too large for a web worker: a background job on machine 2
    assert_ran_on_machine_2(machines, "pg-job-done.data")
    shown = text_of(page.values["pg-results"]["children"])
    assert "mean propagation" in shown and "no longer in the cache" not in shown, shown
    spec = uploaded["quick"][0]  # the dropdown's value: a session upload's sha256
    page.click("pg-uploads", "value", value=[spec], max_seconds=240)
    with_upload = text_of(page.values["pg-results"]["children"])
    assert "no longer in the cache" not in with_upload and "was left out" not in with_upload, with_upload
    n_jobs = len(jobs(machines.db_url, kind="pg-job-done.data"))
    assert n_jobs == 2
    other = session(machines.two, PLAYGROUND)  # drawn from the shared store: no job, same numbers
    assert text_of(other.values["pg-results"]["children"]) == shown
    other.click("pg-uploads", "value", value=[spec])
    assert text_of(other.values["pg-results"]["children"]) == with_upload
    assert len(jobs(machines.db_url, kind="pg-job-done.data")) == n_jobs


def test_a_kept_dataset_is_served_by_the_worker_and_the_other_machine(machines):
    page = session(machines.one, PLAYGROUND)
    page.click("pg-keep")
    notice = text_of(page.values["pg-keep-out"]["children"])
    key = "playground-256x8-20261201-100000"
    assert key in notice, notice
    result = run_lab(machines.one, key)  # scored by the worker on machine 2, which never baked it
    assert_ran_on_machine_2(machines, "lab-job-result.data")
    for server in (machines.one, machines.two):
        assert_shows_run(server, key, 0, result["run_id"])


def kept_on(server, key: str) -> tuple[bool, bool]:
    """(listed on the home page, served by the explorer) on ``server``, as a visitor's fresh pages show."""
    home = text_of(session(server, "/").values["_pages_content"]["children"])
    explorer = session(server, f"/explorer?dataset={key}").values
    grid_rows = explorer.get("mlp-grid", {}).get("rowData") or []
    not_found = "Dataset not found" in text_of(explorer["_pages_content"]["children"])
    return key in home, len(grid_rows) == 1 and not not_found  # the kept dataset's one MLP


def wait_until(check, want, timeout: float) -> float:
    started = time.time()
    while (got := check()) != want:
        assert time.time() - started < timeout, f"after {timeout:.0f} s: {got}, wanted {want}"
        time.sleep(0.25)
    return time.time() - started


def test_a_dataset_kept_on_machine_1_is_listed_and_served_by_machine_2_and_forgotten_likewise(machines):
    """Machine 2 has shown its home page and explorer before (so it has synced already); the dataset kept
    on machine 1 appears on both of machine 2's pages within seconds, no restart, and goes likewise."""
    key = "playground-64x4-99-100000"
    assert kept_on(machines.two, key) == (False, False)
    page = session(machines.one, "/playground?width=64&depth=4&seed=99&samples=100000")
    page.click("pg-keep")
    assert key in text_of(page.values["pg-keep-out"]["children"])
    shown_s = wait_until(lambda: kept_on(machines.two, key), (True, True), timeout=5)
    env = dict(os.environ, WHESTBOARD_STATE_DIR=str(machines.one.state_dir), WHESTBOARD_DATABASE_URL=machines.db_url,
               WHESTBOARD_DATA_DIR=str(machines.data_dirs[0]))
    env.pop("WHESTBOARD_REDIS_URL", None)
    forgot = subprocess.run([sys.executable, "-m", "whestboard", "datasets", "--forget", key], cwd=REPO, env=env,
                            capture_output=True, text=True, timeout=120)
    assert forgot.returncode == 0, forgot.stdout + forgot.stderr
    gone_s = wait_until(lambda: kept_on(machines.two, key), (False, False), timeout=5)
    assert kept_on(machines.one, key) == (False, False)
    again = subprocess.run([sys.executable, "-m", "whestboard", "datasets", "--forget", key], cwd=REPO, env=env,
                           capture_output=True, text=True, timeout=120)
    assert again.returncode == 2 and "no dataset called" in again.stdout, again.stdout
    print(f"\nkept on machine 1: listed and served by machine 2 {shown_s:.1f} s later; forgotten: gone from "
          f"machine 2 {gone_s:.1f} s later")


def test_baselines_computed_through_machine_1_show_on_machine_2(machines):
    for server in (machines.one, machines.two):
        assert session(server, f"/convergence?dataset={DATASET}").values[
            "convergence-baseline-panel"]["style"] == {"display": "block"}, "the mean baseline should be missing"
    page = session(machines.one, f"/convergence?dataset={DATASET}")
    page.click("convergence-compute", max_seconds=540)
    assert not page.values["convergence-baseline-error"].get("children")
    assert_ran_on_machine_2(machines, "convergence-refresh.data")
    for server in (machines.one, machines.two):
        shown = session(server, f"/convergence?dataset={DATASET}").values["convergence-baseline-panel"]["style"]
        assert shown == {"display": "none"}, f"{server.base} still offers to compute the baselines"
    for folder in machines.data_dirs:  # the data copies stay read-only inputs
        assert not (folder / DATASET / "band" / "baselines" / "mean.json").exists()


# --------------------------------------------------------------------------- the state folder is a cache


FRESH_MACHINE = """
import json, sys
from whestboard.band import load_baselines
from whestboard.data import get_dataset, parse_shape
from whestboard.sandbox import load_upload
from whestboard.scoring import cached_playground, estimator_specs, rulebook_for_shape

args = json.loads(sys.argv[1])
upload = load_upload(args["sha"])
shape = parse_shape(256, 8, 20261201)
played = cached_playground(shape, 100000, estimator_specs(1000, [args["sha"]]), rulebook_for_shape(shape, "v1-warmup"))
print(json.dumps({
    "upload_files": sorted(f.name for f in upload.files),
    "upload_source": (upload.submission.root / upload.entry).read_text(),
    "playground": None if played is None else [s.label for s in played.results],
    "kept": get_dataset("playground-256x8-20261201-100000").info.n_samples,
    "baselines": {k: (b.source, len(b.per_mlp)) for k, b in load_baselines(get_dataset("v1-warmup")).items()},
}))
"""


def test_an_empty_state_folder_loses_nothing(machines, uploaded, tmp_path):
    """A third process on machine 2's data copy with a brand-new state folder (machine 2's deleted) finds
    every upload, playground result, kept dataset and computed baseline the others made."""
    shutil.rmtree(machines.two.state_dir / "uploads", ignore_errors=True)
    sha = uploaded["quick"][0]
    env = dict(os.environ, WHESTBOARD_STATE_DIR=str(tmp_path / "fresh-state"),
               WHESTBOARD_DATA_DIR=str(machines.data_dirs[1]), WHESTBOARD_DATABASE_URL=machines.db_url)
    env.pop("WHESTBOARD_REDIS_URL", None)
    out = subprocess.run([sys.executable, "-c", FRESH_MACHINE, json.dumps({"sha": sha})], cwd=REPO, env=env,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    found = json.loads(out.stdout.strip().splitlines()[-1])
    assert found["upload_files"] == ["estimator.py"]
    assert found["upload_source"].encode() == estimator_source("quick")
    # every estimator of the playground's list (derived: the list grows with the baselines), the upload last
    assert len(found["playground"]) == len(estimator_specs(1000, [sha])), found
    assert found["playground"][:3] == ["mean propagation", "covariance propagation", "combined"], found
    assert found["playground"][-2:] == ["Monte Carlo, 1,000 samples", "estimator.py"], found
    assert found["kept"] == 100000
    assert found["baselines"]["mean"] == ["file", 32] and found["baselines"]["cov"] == ["file", 32], found


def test_the_compose_stack_shares_nothing_but_postgresql_and_redis():
    """docker-compose.yml: the app and every worker replica get their own state folder (no named volume
    between them), and the same database and broker."""
    import yaml

    services = yaml.safe_load((REPO / "docker-compose.yml").read_text())["services"]
    for name in ("app", "worker"):
        env = services[name]["environment"]
        assert env["WHESTBOARD_DATABASE_URL"].startswith("postgresql") and env["WHESTBOARD_REDIS_URL"], name
        assert not services[name].get("volumes"), f"{name} mounts {services[name].get('volumes')}"
    assert services["app"]["environment"]["WHESTBOARD_DATABASE_URL"] == \
        services["worker"]["environment"]["WHESTBOARD_DATABASE_URL"]
