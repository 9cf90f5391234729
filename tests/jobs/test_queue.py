"""The sandbox job queue across processes: bounds, positions, exclusive claims and slots, cancel, recovery.

Several gunicorn workers share one queue, so the tests that matter start real
processes against the same state folder (SQLite WAL + flock slot files). Like gunicorn's workers
(forks of a master that imported the app), they are forks of one process that imported whestboard
(tests/preloaded.py), which never opened this state folder.
"""

from __future__ import annotations

import json
import os
import select
import textwrap
import time
from pathlib import Path

import pytest

from tests.conftest import HOSTILE
from tests.preloaded import ForkedRun
from whestboard.data import bake, plan_from_args
from whestboard.jobs import _ledger, _queue
from whestboard.jobs._liveness import this_worker
from whestboard.sandbox import SandboxedEstimator, SandboxLimits, SubmissionFiles, ingest_upload
from whestboard.scoring import job_spec, json_report, run_upload_job, upload_comparison
from whestboard.store import reset_engines, session

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture()
def state(tmp_path, monkeypatch):
    monkeypatch.setenv("WHESTBOARD_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.delenv("WHESTBOARD_DATABASE_URL", raising=False)
    for name in ("WHESTBOARD_SANDBOX_CONCURRENCY", "WHESTBOARD_SANDBOX_PER_CLIENT", "WHESTBOARD_SANDBOX_QUEUE_MAX"):
        monkeypatch.delenv(name, raising=False)
    reset_engines()
    yield tmp_path / "state"
    reset_engines()


def run_python(preloaded, code: str, state: Path, *args: str) -> ForkedRun:
    """A separate process (as another gunicorn worker would be) on the same state folder."""
    environment = {**os.environ, "WHESTBOARD_STATE_DIR": str(state)}
    return preloaded.start("python", textwrap.dedent(code), *args, env=environment, cwd=REPO)


def test_positions_are_fifo_and_bounds_are_enforced(state):
    settings = _queue.QueueSettings(concurrency=1, per_client=2, max_queued=3)
    first = _queue.queue_job("alice", {"n": 1}, settings=settings)
    second = _queue.queue_job("bob", {"n": 2}, settings=settings)
    third = _queue.queue_job("alice", {"n": 3}, settings=settings)
    assert [_queue.queued_job(j).position for j in (first, second, third)] == [1, 2, 3]
    with pytest.raises(_queue.QueueFull, match="limit 2"):
        _queue.queue_job("alice", {"n": 4}, settings=settings)
    with pytest.raises(_queue.QueueFull, match="queue is full"):
        _queue.queue_job("carol", {"n": 5}, settings=settings)
    assert _queue.cancel_queued_job(first, client="bob") is False  # not yours
    assert _queue.cancel_queued_job(first, client="alice") is True
    assert _queue.queued_job(first).status == "cancelled" and _queue.queued_job(first).position is None
    assert [_queue.queued_job(j).position for j in (second, third)] == [1, 2]
    assert _queue.counts() == {"queued": 2, "running": 0}


def test_settings_come_from_the_environment(monkeypatch):
    monkeypatch.setenv("WHESTBOARD_SANDBOX_CONCURRENCY", "3")
    monkeypatch.setenv("WHESTBOARD_SANDBOX_PER_CLIENT", "5")
    assert _queue.QueueSettings.from_env() == _queue.QueueSettings(concurrency=3, per_client=5, max_queued=20)
    monkeypatch.setenv("WHESTBOARD_SANDBOX_CONCURRENCY", "0")
    with pytest.raises(ValueError, match="at least 1"):
        _queue.QueueSettings.from_env()


def test_concurrent_processes_claim_each_job_exactly_once(state, preloaded):
    jobs = [_queue.queue_job(f"client-{n}", {"n": n}, settings=_queue.QueueSettings(max_queued=50))
            for n in range(12)]
    claimer = """
        import json
        from whestboard.jobs import _queue as jobqueue
        taken = []
        while (job := jobqueue.claim_next(slot=0)) is not None:
            taken.append(job.id)
        print(json.dumps(taken))
    """
    procs = [run_python(preloaded, claimer, state) for _ in range(3)]
    claimed = []
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        claimed += json.loads(out)
    assert sorted(claimed) == sorted(jobs)  # every job once, none twice


def test_slots_are_machine_wide_and_freed_when_the_holder_dies(state, preloaded, tmp_path):
    held = tmp_path / "held"
    os.mkfifo(held)  # the holder says which slot it holds through it; reading waits for that, not a poll
    holder = run_python(preloaded, """
        import sys, time
        from whestboard.jobs import _queue as jobqueue
        slot = jobqueue.try_acquire_slot(1)
        with open(sys.argv[1], "w") as held:
            print(slot.index, file=held)
        time.sleep(120)
    """, state, str(held))
    said = os.open(held, os.O_RDONLY | os.O_NONBLOCK)  # open now; what the holder writes wakes select
    try:
        assert select.select([said], [], [], 60)[0], "the holder never said which slot it holds"
        assert os.read(said, 64).decode().strip() == "0"
    finally:
        os.close(said)
    try:
        assert _queue.try_acquire_slot(1) is None  # concurrency 1: the other process holds it
        second = _queue.try_acquire_slot(2)
        assert second is not None and second.index == 1  # concurrency 2: the next slot
        second.release()
    finally:
        holder.kill()
        holder.wait()
    slot = _queue.try_acquire_slot(1)
    assert slot is not None and slot.index == 0  # the kernel released the dead holder's lock
    slot.release()


def test_with_concurrency_one_jobs_never_overlap_across_processes(state, tmp_path, preloaded):
    log = tmp_path / "spans.jsonl"
    submitted = [_queue.queue_job(f"c{n}", {"n": n}, kind="test") for n in range(4)]
    worker = f"""
        import json, time
        from whestboard.jobs import _queue as jobqueue
        def body(ctx):
            start = time.time(); time.sleep(0.4)
            with open({str(log)!r}, "a") as out:
                out.write(json.dumps([ctx.job.id, start, time.time()]) + "\\n")
            return {{"ok": True}}
        executor = jobqueue.Executor(body)
        deadline = time.time() + 60
        while jobqueue.counts() != {{"queued": 0, "running": 0}} and time.time() < deadline:
            if not executor.run_one():
                time.sleep(0.05)
    """
    procs = [run_python(preloaded, worker, state) for _ in range(2)]
    for proc in procs:
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
    spans = sorted(json.loads(line) for line in log.read_text().splitlines())
    assert [s[0] for s in spans] == sorted(submitted)
    ordered = sorted(spans, key=lambda s: s[1])
    assert all(a[2] <= b[1] for a, b in zip(ordered, ordered[1:], strict=False))  # one at a time
    assert all(_queue.queued_job(s[0]).status == "finished" for s in spans)


def test_a_job_whose_process_died_runs_once_more_from_its_place_then_fails_with_the_reason(state):
    """A restart or a killed web worker costs an upload one start, not the user's submission: it is queued
    again ahead of later jobs; a job whose worker dies every time ends with the reason."""
    job_id = _queue.queue_job("alice", {})
    later = _queue.queue_job("bob", {})
    corpse = f"{this_worker().rpartition(':')[0]}:999999999"
    assert _queue.claim_next(slot=0, worker="somewhere-else:1").id == job_id  # another host: judged by its beat
    assert _queue.recover_stale() == 0
    with session() as s:
        s.get(_ledger.Job, job_id).worker = corpse
    assert _queue.recover_stale() == 1
    job = _queue.queued_job(job_id)
    assert (job.status, job.position, job.progress) == ("queued", 1, {})
    assert job.error.startswith(f"{_ledger.RERUN}: worker died: process {corpse} exited")
    assert _queue.claim_next(slot=0, worker=corpse).id == job_id  # its place kept: before bob's
    assert _queue.recover_stale() == 1
    job = _queue.queued_job(job_id)
    assert job.status == "failed" and job.error.startswith(f"worker died: process {corpse} exited")
    assert _queue.queued_job(later).status == "queued"


def test_a_starting_server_ends_what_the_last_one_left_running_without_a_process(state):
    """gunicorn's master at start (jobs.recover_jobs): the upload whose worker died is queued again, the
    background job whose process died is failed with the reason its page shows; a background job whose
    process outlived the restart, another machine's job and a Celery job are left alone."""
    host = this_worker().rpartition(":")[0]
    corpse, alive = f"{host}:999999999", this_worker()
    rows = {"upload": ("queue", corpse), "dead": ("diskcache", corpse), "alive": ("diskcache", alive),
            "elsewhere": ("diskcache", "another-machine:1"), "celery": ("celery", corpse)}
    for name, (backend, worker) in rows.items():
        _ledger.enqueue(name, kind=name, backend=backend)
        assert _ledger.claim(name, worker) is _ledger.Claim.RUN
    assert _queue.recover_jobs() == 2
    found = {name: _ledger.get_job(name) for name in rows}
    assert (found["upload"].status, found["upload"].reason.split(": ")[0]) == ("queued", _ledger.RERUN)
    assert found["dead"].status == "failed" and found["dead"].reason.startswith(f"worker died: process {corpse}")
    assert {name: found[name].status for name in ("alive", "elsewhere", "celery")} == dict.fromkeys(
        ("alive", "elsewhere", "celery"), "running")


def test_cancel_stops_a_running_sandbox_within_a_second(state, tmp_path):
    folder = tmp_path / "loop"
    folder.mkdir()
    (folder / "estimator.py").write_text((HOSTILE / "infinite_loop.py").read_text())
    job_id = _queue.queue_job("alice", {}, kind="test")
    stopped: dict = {}

    def body(ctx):
        from whestbench.generation import sample_mlp
        from whestbench.sdk import SetupContext

        estimator = SandboxedEstimator(
            SubmissionFiles(root=folder), SetupContext(width=8, depth=2, flop_budget=10**8, api_version="1.0"),
            SandboxLimits(memory_mb=1024, wall_time_limit_s=60.0, grace_s=5.0),
            should_cancel=ctx.should_cancel)
        with estimator:
            stopped["worker"] = estimator.worker
            _queue.cancel_queued_job(ctx.job.id, client="alice")  # the user presses Cancel while predict spins
            stopped["asked"] = time.monotonic()
            estimator.predict(sample_mlp(8, 2), 10**8)
        return {"ok": True}

    assert _queue.Executor(body).run_one()
    elapsed = time.monotonic() - stopped["asked"]
    job = _queue.queued_job(job_id)
    assert job.status == "cancelled" and job.error == "cancelled while running"
    assert elapsed < 2.0  # not the 60 s wall cap
    assert stopped["worker"].process.poll() is not None


@pytest.fixture()
def served(tmp_path, monkeypatch):
    root = tmp_path / "data"
    bake(root / "toy-warmup", plan_from_args(round_tag="v1-warmup", width=16, depth=3, n_mlps=3, n_samples=512,
                                             seeds=[5, 6, 7]), show_progress=False, explicit_seeds=True)
    monkeypatch.setenv("WHESTBOARD_DATA_DIR", str(root))
    monkeypatch.setenv("WHESTBOARD_DATASETS", "")
    return "toy-warmup"


def test_an_upload_job_checks_scores_records_and_compares(state, served):
    from whestboard.scoring import get_run

    source = (HOSTILE / "good.py").read_text().replace("        rows = []\n",
                                                        "        rows = []\n        print('hello from', mlp.name)\n")
    upload = ingest_upload(source.encode(), "talkative.py")
    job_id = _queue.queue_job("alice", job_spec(upload.sha256, served, "0:2", team="Chatterers"))
    assert _queue.Executor(run_upload_job).run_one()
    job = _queue.queued_job(job_id)
    assert job.status == "finished", job.error
    result = job.result
    assert result["contract"]["ok"] and [v["verdict"] for v in result["verdicts"]] == ["ok", "ok"]
    assert result["output"].count("hello from") == 2 and not result["output_truncated"]
    assert result["confinement"]["seccomp"] is True
    report = get_run(result["run_id"])
    assert report["source"] == "upload" and report["team"] == "Chatterers"
    assert report["estimator"]["code_sha256"] == upload.sha256 and report["mlp_indices"] == [0, 1]
    assert set(result["baselines"]) == {"mean", "cov"} and all(result["baselines"].values())
    comparison = upload_comparison(result)
    assert set(comparison["series"]) == {"upload", "mean", "cov"} and comparison["noise_floor"] > 0
    payload = json_report(result)
    assert payload["schema_version"] == "1.1" and payload["results"] == report["results"]
    assert payload["whestboard"]["sandbox"]["verdicts"] == result["verdicts"]


def test_an_upload_that_fails_the_contract_is_not_scored(state, served):
    from whestboard.scoring import list_runs

    upload = ingest_upload((HOSTILE / "nan.py").read_bytes(), "nan.py")
    job_id = _queue.queue_job("alice", job_spec(upload.sha256, served, "0"))
    assert _queue.Executor(run_upload_job).run_one()
    job = _queue.queued_job(job_id)
    assert job.status == "failed" and job.error.startswith("contract failed at predict: non-finite")
    assert "Fix: " not in job.error and "guard divisions" in job.error
    assert list_runs() == []


def test_submissions_at_once_never_take_a_clients_places_past_its_bound(state):
    """Twelve processes submit for one client at once: exactly its two places are taken, and the queue's own
    bound holds the same way (counted and recorded under one lock)."""
    _queue.queue_job("bob", {"n": 0})

    def race(clients: list[str], settings: _queue.QueueSettings) -> list[int]:
        children = []
        for client in clients:
            pid = os.fork()
            if pid == 0:
                code = 0
                try:
                    _queue.queue_job(client, {"n": 1}, settings=settings)
                except _queue.QueueFull:
                    code = 1
                except BaseException:  # noqa: BLE001 - reported through the exit status
                    code = 2
                os._exit(code)
            children.append(pid)
        return [os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) for pid in children]

    assert sorted(race(["alice"] * 12, _queue.QueueSettings(per_client=2, max_queued=50))) == [0] * 2 + [1] * 10
    assert sorted(race([f"c{i}" for i in range(12)], _queue.QueueSettings(per_client=2, max_queued=6))) == \
        [0] * 3 + [1] * 9
    assert _queue.counts() == {"queued": 6, "running": 0}
