"""A final spread over Celery workers: every pair scored once, by the workers, with the local standings.

Two ``celery -A worker worker`` processes stand for two machines: each has its own state folder (its
own upload cache, its own scratch), and all they share with the coordinator is PostgreSQL and Redis.
The nominees are given as local paths (a lone file, a folder, a tarball), so their packages must reach
the workers through the artifact store. The final must come out as a final run in one process does on
the same suite, and each pair must be scored exactly once, in a worker: the ledger holds one job per
team batch, claimed once, and every stored result names the worker process that scored it.
"""

from __future__ import annotations

import logging
import time

import psutil
import pytest

from tests.final.participants import write_packages
from tests.prod_support import celery_worker, free_port, postgres_server, redis_server
from whestboard.final import PAIR_RESULTS, FinalRequest, Nominee, run_final, standings_text, workers_text
from whestboard.jobs import recent_jobs, this_worker
from whestboard.store import blob_keys, blob_meta, reset_engines

ROUND = "v1-warmup"  # a round every process knows (the workers do not share the tests' small round)
SEED, N, K, EXTRA = 20261203, 3, 1_000, 2
#: Columns that are the same whoever scores: v1-warmup prices residual wall time (lambda = 1e11 FLOP/s),
#: so effective compute is a measurement of this run's wall time, not a number two runs share.
SAME_COLUMNS = ("rank", "team", "score", "final_layer_mse", "all_layer_mse", "n_mlps", "n_failed_mlps",
                "extra_mlps_scored", "noise_floor", "code_sha256", "estimator", "suite")


def _request(packages) -> FinalRequest:
    nominees = tuple(Nominee(team, str(packages[team])) for team in ("mean", "covariance", "copycat"))
    return FinalRequest(ROUND, nominees, SEED, N, K, EXTRA)


def _use_store(monkeypatch, state, **env: str) -> None:
    monkeypatch.setenv("WHESTBOARD_STATE_DIR", str(state))
    for name in ("WHESTBOARD_DATABASE_URL", "WHESTBOARD_REDIS_URL"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    reset_engines()


def _worker_processes(procs) -> set[str]:
    """``host:pid`` of every process of the Celery workers (the prefork children run the tasks)."""
    host = this_worker().split(":", 1)[0]
    pids = set()
    for proc in procs:
        parent = psutil.Process(proc.pid)
        pids |= {parent.pid, *(c.pid for c in parent.children(recursive=True))}
    return {f"{host}:{pid}" for pid in pids}


@pytest.mark.slow
@pytest.mark.services
def test_a_final_spread_over_two_workers_scores_each_pair_once_there(tmp_path, monkeypatch, private_state):
    packages = write_packages(tmp_path / "packages")
    request = _request(packages)
    with postgres_server() as db_url, redis_server() as redis_url:
        shared = {"WHESTBOARD_DATABASE_URL": db_url}
        with celery_worker("worker", tmp_path / "one", redis_url, **shared) as (one, _), \
                celery_worker("worker", tmp_path / "two", redis_url, **shared) as (two, _):
            workers = _worker_processes([one, two])
            _use_store(monkeypatch, tmp_path / "coordinator", WHESTBOARD_REDIS_URL=redis_url, **shared)
            started = time.time()
            spread = run_final(request)
            took = time.time() - started
            scorers = {blob_meta(PAIR_RESULTS, key)["scored_by"] for key in blob_keys(PAIR_RESULTS)}
            pairs = len(blob_keys(PAIR_RESULTS))
            batches = [job for job in recent_jobs(100) if job.id.startswith("final-")]
    total = sum(row["n_mlps"] + row["extra_mlps_scored"] for row in spread["standings"])
    # the copies are the one close group (mean propagation is worse on every MLP, which the t-test on the
    # log ratios sees on 3), rerun on the extra MLPs as a second phase of batches
    (tie,) = spread["tie_breaks"]
    assert sorted(tie["teams"]) == ["copycat", "covariance"] and tie["extra_mlps"] == EXTRA
    assert total == 3 * N + 2 * EXTRA and pairs == total

    # by the workers, not the coordinator: each result names a worker process, the coordinator read them all
    assert scorers <= workers and this_worker() not in scorers
    assert spread["scorings"] == {"scored": 0, "reused": total}
    assert sum(spread["workers"]["scored_by"].values()) == total
    assert [phase["local"] for phase in spread["workers"]["phases"]] == [None, None]
    assert workers_text(spread) in standings_text(spread) and all(w in workers_text(spread) for w in scorers)
    # exactly once: one ledger job per team batch (3 base, 2 extra), each claimed once, by a worker
    assert len(batches) == 5 and {(job.status, job.attempts) for job in batches} == {("finished", 1)}
    assert {job.worker for job in batches} <= workers

    # the standings are a local run's on the same suite (a store of its own, no workers)
    _use_store(monkeypatch, tmp_path / "local")
    local = run_final(request)
    assert local["workers"] == {"configured": False, "phases": [], "scored_by": {this_worker(): total}}
    assert workers_text(local) is None
    assert [{c: row[c] for c in SAME_COLUMNS} for row in spread["standings"]] == \
        [{c: row[c] for c in SAME_COLUMNS} for row in local["standings"]]
    assert [t["teams"] for t in spread["tie_breaks"]] == [t["teams"] for t in local["tie_breaks"]]
    assert spread["per_mlp"] == local["per_mlp"]
    print(f"spread final: {total} pairs in {took:.1f} s over 2 workers ({spread['workers']['scored_by']}); "
          f"local: {local['duration_s']:.1f} s")


@pytest.mark.slow
def test_with_the_broker_unreachable_the_final_completes_here_saying_why(tmp_path, monkeypatch, private_state):
    packages = write_packages(tmp_path / "packages")
    nominees = tuple(Nominee(team, str(packages[team])) for team in ("mean", "covariance"))
    _use_store(monkeypatch, private_state, WHESTBOARD_REDIS_URL=f"redis://127.0.0.1:{free_port()}/0")
    logged: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = logged.append
    logging.getLogger("whestboard").addHandler(handler)
    started = time.time()
    try:
        record = run_final(FinalRequest(ROUND, nominees, SEED + 1, 2, K, 0))
    finally:
        logging.getLogger("whestboard").removeHandler(handler)
    assert time.time() - started < 120  # bounded: the refusal is seen at once, not waited out
    (phase,) = record["workers"]["phases"]
    assert phase["batches"] == 0 and "the broker refused the tasks" in phase["local"]
    assert record["scorings"] == {"scored": 4, "reused": 0}
    assert phase["local"] in workers_text(record)
    (line,) = [r for r in logged if r.getMessage() == "final.local"]  # one log line, saying what and why
    assert line.levelno == logging.WARNING and line.fields["msg"] == phase["local"]
    assert "scoring the missing pairs in this process" in phase["local"]


@pytest.mark.slow
@pytest.mark.services
def test_with_no_worker_taking_the_batches_the_final_stops_waiting_and_scores_them_here(
        tmp_path, monkeypatch, private_state):
    """Redis is up and takes the tasks, but no worker runs them (none started, or all dead): the wait
    ends after ``WHESTBOARD_FINAL_WORKER_IDLE_S`` of silence and the coordinator scores every pair."""
    packages = write_packages(tmp_path / "packages")
    nominees = tuple(Nominee(team, str(packages[team])) for team in ("mean", "covariance"))
    with redis_server() as redis_url:
        _use_store(monkeypatch, private_state, WHESTBOARD_REDIS_URL=redis_url, WHESTBOARD_FINAL_WORKER_IDLE_S="2")
        record = run_final(FinalRequest(ROUND, nominees, SEED + 2, 2, K, 0))
    (phase,) = record["workers"]["phases"]
    assert phase["batches"] == 2 and "no worker showed progress for 2 s" in phase["local"]
    assert record["scorings"] == {"scored": 4, "reused": 0}
    assert record["workers"]["scored_by"] == {this_worker(): 4}


@pytest.mark.slow
@pytest.mark.services
def test_a_worker_killed_mid_batch_leaves_the_rest_to_the_coordinator_and_nothing_is_scored_twice(
        tmp_path, monkeypatch, private_state):
    """SIGKILL of the only worker (its whole process group) once it has stored a pair: its batch's row
    says running for a process that is gone, so the coordinator stops waiting, takes the batch over (a
    second attempt of the same ledger job) and scores only the pairs the worker had not stored."""
    import os
    import signal
    import threading

    packages = write_packages(tmp_path / "packages")
    nominees = tuple(Nominee(team, str(packages[team])) for team in ("mean", "covariance"))
    n = 4
    with postgres_server() as db_url, redis_server() as redis_url:
        shared = {"WHESTBOARD_DATABASE_URL": db_url}
        with celery_worker("worker", tmp_path / "one", redis_url, **shared) as (one, _):
            workers = _worker_processes([one])
            _use_store(monkeypatch, tmp_path / "coordinator", WHESTBOARD_REDIS_URL=redis_url,
                       WHESTBOARD_FINAL_WORKER_IDLE_S="3", **shared)

            def kill_at_first_pair() -> None:
                deadline = time.time() + 240
                while not blob_keys(PAIR_RESULTS) and time.time() < deadline:
                    time.sleep(0.05)
                os.killpg(one.pid, signal.SIGKILL)

            killer = threading.Thread(target=kill_at_first_pair, daemon=True)
            killer.start()
            record = run_final(FinalRequest(ROUND, nominees, SEED + 3, n, K, 0))
            killer.join(5)
            by = {key: blob_meta(PAIR_RESULTS, key)["scored_by"] for key in blob_keys(PAIR_RESULTS)}
            batches = [job for job in recent_jobs(100) if job.id.startswith("final-")]
    by_worker = sum(1 for who in by.values() if who in workers)
    assert len(by) == 2 * n and 1 <= by_worker < 2 * n
    assert set(by.values()) - workers == {this_worker()}  # the rest, scored here
    assert record["scorings"] == {"scored": 2 * n - by_worker, "reused": by_worker}
    (phase,) = record["workers"]["phases"]
    assert "no worker showed progress for 3 s" in phase["local"]
    assert {job.status for job in batches} == {"finished"} and max(job.attempts for job in batches) == 2


@pytest.mark.parametrize("spec", ["/etc", "tests/final", "mean", "kept:anything", "upload:short"])
def test_a_batch_through_the_broker_names_an_upload_never_a_path(spec, tmp_path, monkeypatch):
    """What a Celery worker takes from the broker is read as a page's spec: a batch naming a folder of the
    worker's machine (which its sandbox would look up and copy into the upload store) is refused unread."""
    from whestboard.final._dispatch import score_batch
    from whestboard.store import blob_keys

    monkeypatch.setenv("WHESTBOARD_STATE_DIR", str(tmp_path))
    monkeypatch.delenv("WHESTBOARD_DATABASE_URL", raising=False)
    payload = {"round": "v1-warmup", "suite_seed": 1, "n_mlps": 1, "truth_samples": 100, "team": "mallory",
               "spec": spec, "code_sha256": "0" * 64, "indices": [0]}
    with pytest.raises(ValueError, match="upload:SHA256|unknown estimator|not an estimator this server keeps"):
        score_batch(payload)
    assert blob_keys("upload") == []
