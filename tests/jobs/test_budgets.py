"""Budgets on work: a job's estimated cost, the client's and the machine's concurrent jobs, wall time."""

from __future__ import annotations

import os
import threading
import time
import uuid

import pytest
from sqlalchemy import func, select, update

from whestboard.data import default_samples, parse_shape, playground_work
from whestboard.jobs import _budgets, _ledger
from whestboard.store import session

LIMITS = _budgets.Limits(max_flops=5e13, per_client=2, total=3, wall_s=1800)


@pytest.fixture
def store(tmp_path, monkeypatch):
    monkeypatch.setenv("WHESTBOARD_STATE_DIR", str(tmp_path))
    monkeypatch.delenv("WHESTBOARD_DATABASE_URL", raising=False)
    return tmp_path


def _job(owner: str, *, backend: str = "diskcache", running_since: float | None = None) -> str:
    job_id = uuid.uuid4().hex
    _ledger.enqueue(job_id, kind="test.children", owner=owner, backend=backend)
    if running_since is not None:
        assert _ledger.claim(job_id, "test-worker") is _ledger.Claim.RUN
        with session() as s:
            s.execute(update(_ledger.Job).where(_ledger.Job.id == job_id)
                      .values(started_at=running_since, heartbeat_at=time.time()))
    return job_id


def test_the_playground_abuse_is_refused_and_every_documented_shape_admitted():
    abuse = playground_work(parse_shape(1024, 32, 1), 100_000_000, 1_000)
    with pytest.raises(_budgets.OverBudget, match=r"above this server's limit of 5e\+13 per job"):
        _budgets.check_cost("This playground job", abuse, limits=LIMITS)
    for width, depth in ((1024, 16), (1024, 32), (256, 8), (8, 4)):  # the default truth samples of each
        shape = parse_shape(width, depth, 1)
        _budgets.check_cost("This playground job", playground_work(
            shape, default_samples(width, depth), 1_000), limits=LIMITS)


def test_the_default_limits_come_from_the_environment(monkeypatch):
    monkeypatch.setenv("WHESTBOARD_JOB_MAX_FLOPS", "1e9")
    monkeypatch.setenv("WHESTBOARD_JOB_PER_CLIENT", "5")
    limits = _budgets.Limits.from_env()
    assert (limits.max_flops, limits.per_client) == (1e9, 5)
    monkeypatch.setenv("WHESTBOARD_JOB_WALL_S", "soon")
    with pytest.raises(ValueError, match="WHESTBOARD_JOB_WALL_S='soon' is not a number of seconds"):
        _budgets.Limits.from_env()


def test_a_nan_cost_is_refused():
    with pytest.raises(_budgets.OverBudget):
        _budgets.check_cost("This job", float("nan"), limits=LIMITS)


def test_per_client_and_total_caps_count_the_ledger(store):
    _job("alice"), _job("alice")
    with pytest.raises(_budgets.OverBudget, match="You already have 2 job"):
        _budgets.check_slots("alice", limits=LIMITS)
    _budgets.check_slots("bob", limits=LIMITS)  # two of three machine-wide slots taken
    _job("carol")
    with pytest.raises(_budgets.OverBudget, match="running 3 jobs, its limit"):
        _budgets.check_slots("bob", limits=LIMITS)
    _job("dave", backend="queue")  # the sandbox queue bounds its own uploads
    assert _budgets.active_jobs() == 3


def test_a_job_past_its_wall_time_is_failed_with_the_reason(store):
    late = _job("alice", running_since=time.time() - 2000)
    fresh = _job("bob", running_since=time.time() - 10)
    assert _budgets.cancel_overdue(limits=LIMITS) == 1
    row = _ledger.get_job(late)
    assert row.status == "failed" and row.cancel_requested == 1
    assert "wall-time limit of 1,800 s" in row.reason
    assert _ledger.get_job(fresh).status == "running"
    _budgets.check_slots("alice", limits=LIMITS)  # the overdue one no longer holds a slot


def test_the_deadline_interrupts_a_running_body():
    started = time.perf_counter()
    with pytest.raises(_budgets.OverTime, match="wall-time limit of 0 s"):
        with _budgets.deadline("job", limits=_budgets.Limits(wall_s=0.3)):
            while time.perf_counter() - started < 10:
                time.sleep(0.01)
    assert time.perf_counter() - started < 3


def test_a_body_within_its_deadline_is_untouched():
    with _budgets.deadline("job", limits=_budgets.Limits(wall_s=5)):
        value = sum(range(1000))
    assert value == 499500
    time.sleep(0.1)  # no stray interrupt arrives afterwards


def test_the_deadline_outside_the_main_thread_leaves_it_to_cancel_overdue():
    seen = []

    def body():
        with _budgets.deadline("job", limits=_budgets.Limits(wall_s=0.01)):
            time.sleep(0.2)
            seen.append("done")

    worker = threading.Thread(target=body)
    worker.start()
    worker.join(5)
    assert seen == ["done"]


def test_the_deadline_interrupts_a_body_whose_process_ignores_sigint():
    """A job forked by the launcher ignores SIGINT; the deadline must still end it, and leave SIGINT as it was."""
    import signal

    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        started = time.perf_counter()
        with pytest.raises(_budgets.OverTime):
            with _budgets.deadline("job", limits=_budgets.Limits(wall_s=0.3)):
                while time.perf_counter() - started < 10:
                    time.sleep(0.01)
        assert time.perf_counter() - started < 3
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, previous)


def _race(admissions: list[tuple[str, _budgets.Limits]]) -> list[int]:
    """Each admission in a forked process of its own, all at once (as launches land on several workers): the
    exit status of each, 0 admitted and recorded, 1 refused, 2 anything else."""
    children = []
    for owner, limits in admissions:
        pid = os.fork()
        if pid == 0:
            code = 0
            try:
                _budgets.admit("This job", 1.0, owner, limits=limits,
                               enqueue={"job_id": uuid.uuid4().hex, "kind": "race.children", "backend": "diskcache"})
            except _budgets.OverBudget:
                code = 1
            except BaseException:  # noqa: BLE001 - reported through the exit status
                code = 2
            os._exit(code)
        children.append(pid)
    return [os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) for pid in children]


def _owners() -> dict[str, int]:
    with session() as s:
        rows = s.execute(select(_ledger.Job.owner, func.count()).group_by(_ledger.Job.owner)).all()
    return {owner: n for owner, n in rows}


def test_launches_at_once_never_share_a_clients_last_slot(store):
    """Twelve processes launch for one client at once: exactly its two slots are taken and recorded (a check
    made apart from the ledger row once let 3 of 8 concurrent launches from one address through)."""
    _job("bob")  # the store is in use already, as on a live server
    codes = _race([("alice", _budgets.Limits(per_client=2, total=100))] * 12)
    assert sorted(codes) == [0] * 2 + [1] * 10
    assert _owners() == {"alice": 2, "bob": 1}


def test_launches_at_once_never_take_the_deployment_past_its_total(store):
    codes = _race([(f"client-{i}", _budgets.Limits(per_client=2, total=3)) for i in range(12)])
    assert sorted(codes) == [0] * 3 + [1] * 9
    assert sum(_owners().values()) == 3
