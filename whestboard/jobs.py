"""The job ledger: every background job has a row, so none is ever silently dropped.

Dash's background callbacks keep their state in the result store only: a job
whose process dies leaves no result, the browser's poll sees "not running, no
result" and quietly gives up. Whestboard records each launch here instead:

- ``queued`` when a web worker launches it (any worker, any machine);
- ``running`` once a job process *claims* it with a compare-and-set, so two
  deliveries of the same launch (a Celery redelivery, a retry after the result
  was stored) never compute it twice by accident;
- a heartbeat every few seconds while it runs;
- ``finished`` or ``failed`` with a reason when it ends.

A running job whose process is gone (same host, pid dead) or whose heartbeat
stopped is *stale*: the next claim takes it over (a retry, ``attempts`` + 1)
and a poll that finds it without a result marks it ``failed`` with the reason
("worker died ..."), which the user then sees. The store is whatever
``whestboard.db`` points at (SQLite WAL by default, PostgreSQL when shared), so
every worker on every machine sees the same truth.
"""

from __future__ import annotations

import enum
import os
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Float, Index, Integer, String, Text, exc, inspect, select, update
from sqlalchemy.orm import Mapped, mapped_column

from whestboard import db, forksafe, logs

forksafe.install()

HEARTBEAT_S = 5.0
STALE_AFTER_S = 30.0
# A job nobody starts for this long is reported, not waited on forever: on a busy deployment jobs
# queue for minutes, but a task no worker knows (workers running other code) is never started.
QUEUED_TOO_LONG_S = 900.0
LOST_REASONS = ("worker died", "no worker started")


def is_lost(reason: str | None) -> bool:
    """A failure the ledger diagnosed (the job was lost), as opposed to an error the job raised."""
    return bool(reason) and reason.startswith(LOST_REASONS)
ACTIVE = ("queued", "running")


class Job(db.Base):
    """One launch of a background job."""

    __tablename__ = "jobs"
    __table_args__ = (Index("ix_jobs_status_heartbeat", "status", "heartbeat_at"),)

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    result_key: Mapped[str] = mapped_column(String(128), index=True)
    handle: Mapped[str | None] = mapped_column(String(128), index=True, default=None)
    kind: Mapped[str] = mapped_column(String(200), default="")
    owner: Mapped[str | None] = mapped_column(String(64), default=None)
    backend: Mapped[str] = mapped_column(String(32), default="")
    status: Mapped[str] = mapped_column(String(16), default="queued")
    reason: Mapped[str | None] = mapped_column(Text, default=None)
    worker: Mapped[str | None] = mapped_column(String(200), default=None)
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    created_at: Mapped[float] = mapped_column(Float)
    started_at: Mapped[float | None] = mapped_column(Float, default=None)
    heartbeat_at: Mapped[float | None] = mapped_column(Float, default=None)
    finished_at: Mapped[float | None] = mapped_column(Float, default=None)

    @property
    def duration_s(self) -> float | None:
        if self.started_at is None:
            return None
        return (self.finished_at or time.time()) - self.started_at


_tables_ready: set[str] = set()
_tables_lock = threading.Lock()


def ensure_table(url: str | None = None) -> None:
    """Create the jobs table if missing; safe when several processes race to do it."""
    key = url or "<default>"
    if key in _tables_ready:
        return
    with _tables_lock:
        eng = db.engine(url)
        try:
            Job.__table__.create(eng, checkfirst=True)
        except exc.SQLAlchemyError:
            if not inspect(eng).has_table(Job.__tablename__):  # lost a race: fine if it now exists
                raise
        _tables_ready.add(key)


def _session(url: str | None = None):
    """A store transaction, with the jobs table created on first use of that store."""
    ensure_table(url)
    return db.session(url)


def this_worker() -> str:
    """``host:pid`` of the calling process: who holds a running job."""
    return f"{socket.gethostname()}:{os.getpid()}"


def _worker_is_dead(worker: str | None) -> bool:
    """True only when we can see for sure: same host and the pid no longer exists."""
    if not worker or ":" not in worker:
        return False
    host, _, pid = worker.rpartition(":")
    if host != socket.gethostname() or not pid.isdigit():
        return False
    import psutil

    try:
        return psutil.Process(int(pid)).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def is_stale(
    job: Job, now: float | None = None, stale_after: float = STALE_AFTER_S, *, pid_check: bool = True
) -> bool:
    """A running job nobody is working on any more: its process is gone or its heartbeat stopped."""
    if job.status != "running":
        return False
    now = time.time() if now is None else now
    return (pid_check and _worker_is_dead(job.worker)) or (job.heartbeat_at or 0) < now - stale_after


def death_reason(job: Job, now: float | None = None) -> str:
    now = time.time() if now is None else now
    ran = f" after {now - job.started_at:.1f} s" if job.started_at else ""
    if _worker_is_dead(job.worker):
        return f"worker died: process {job.worker} exited{ran} without a result"
    quiet = now - (job.heartbeat_at or job.created_at)
    return f"worker died: no heartbeat from {job.worker} for {quiet:.0f} s{ran}"


def enqueue(
    job_id: str, *, result_key: str, kind: str = "", owner: str | None = None, backend: str = "", url: str | None = None
) -> None:
    """Record a launch before it is handed to a job process or queue."""
    with _session(url) as s:
        s.add(Job(id=job_id, result_key=result_key, kind=kind[:200], owner=owner, backend=backend,
                  status="queued", created_at=time.time()))
    logs.event("job.queued", job=job_id, what=kind, client=owner, backend=backend)


def set_handle(job_id: str, handle: str, url: str | None = None) -> None:
    """Remember the backend's handle (a pid or a Celery task id) the browser polls with."""
    with _session(url) as s:
        s.execute(update(Job).where(Job.id == job_id).values(handle=str(handle)))


def get(job_id: str, url: str | None = None) -> Job | None:
    with _session(url) as s:
        return s.get(Job, job_id)


def find(result_key: str, handle: str | None, url: str | None = None) -> Job | None:
    """The launch a poll refers to (latest one for that result key and handle)."""
    with _session(url) as s:
        q = select(Job).where(Job.result_key == result_key)
        if handle is not None:
            q = q.where(Job.handle == str(handle))
        return s.scalars(q.order_by(Job.created_at.desc()).limit(1)).first()


def recent(limit: int = 50, url: str | None = None) -> list[Job]:
    with _session(url) as s:
        return list(s.scalars(select(Job).order_by(Job.created_at.desc()).limit(limit)))


class Claim(enum.Enum):
    RUN = "run"  # this process now owns the job
    BUSY = "busy"  # another live process is running it
    DONE = "done"  # it already ended (finished or failed): do not compute again


def claim(job_id: str, worker: str | None = None, *, result_key: str = "", url: str | None = None) -> Claim:
    """Atomically take ownership of a queued job, or of a running one whose worker died."""
    worker = worker or this_worker()
    now = time.time()
    with _session(url) as s:
        job = s.get(Job, job_id)
        if job is None:  # launched by something that did not enqueue: record it now
            s.add(Job(id=job_id, result_key=result_key, status="running", worker=worker, attempts=1,
                      created_at=now, started_at=now, heartbeat_at=now))
            return Claim.RUN
        if job.status == "queued":
            cond = Job.status == "queued"
        elif job.status == "running" and is_stale(job, now):
            cond = (Job.status == "running") & (Job.worker == job.worker)
            logs.event("job.takeover", job=job_id, what=job.kind, reason=death_reason(job, now),
                       attempt=job.attempts + 1)
        elif job.status == "running":
            return Claim.BUSY
        else:
            return Claim.DONE
        won = s.execute(
            update(Job).where((Job.id == job_id) & cond)
            .values(status="running", worker=worker, attempts=Job.attempts + 1, started_at=now, heartbeat_at=now)
            .execution_options(synchronize_session=False)
        ).rowcount
    return Claim.RUN if won == 1 else claim(job_id, worker, result_key=result_key, url=url)


def heartbeat(job_id: str, worker: str | None = None, url: str | None = None) -> bool:
    """Refresh the heartbeat; False when this worker no longer owns the job."""
    with _session(url) as s:
        return s.execute(
            update(Job).where((Job.id == job_id) & (Job.worker == (worker or this_worker())) & (Job.status == "running"))
            .values(heartbeat_at=time.time())
        ).rowcount == 1


def finish(job_id: str, *, ok: bool, reason: str | None = None, worker: str | None = None, url: str | None = None) -> bool:
    """End a job this worker owns; False if someone else took it over meanwhile."""
    now = time.time()
    with _session(url) as s:
        done = s.execute(
            update(Job).where((Job.id == job_id) & (Job.worker == (worker or this_worker())) & (Job.status == "running"))
            .values(status="finished" if ok else "failed", reason=logs.redact(reason) if reason else None,
                    finished_at=now)
        ).rowcount == 1
    return done


def fail_if_dead(
    job: Job, *, process_gone: bool = False, pid_check: bool = True, stale_after: float = STALE_AFTER_S,
    url: str | None = None,
) -> Job:
    """Mark an active job failed when nobody is working on it; returns the row as stored.

    ``process_gone`` is the caller's first-hand knowledge that the job's process
    no longer exists (the diskcache backend checks the pid it launched).
    ``pid_check=False`` trusts only the heartbeat: Celery redelivers a task whose
    worker process died, and that retry should get the chance to claim it first.
    """
    now = time.time()
    if job.status not in ACTIVE:
        return job
    if job.status == "queued" and not process_gone:
        if job.created_at < now - QUEUED_TOO_LONG_S:
            return _mark_failed(job, f"no worker started the job within {QUEUED_TOO_LONG_S / 60:.0f} min "
                                     "(are job workers running, with the same code as the web app?)", now, url)
        return job  # waiting for a free worker is not dying
    if not (process_gone or is_stale(job, now, stale_after, pid_check=pid_check)):
        return job
    if job.status == "queued":
        reason = "worker died: the job process exited before it started"
    elif process_gone and not is_stale(job, now, stale_after):
        reason = f"worker died: process {job.worker} ended without a result"
    else:
        reason = death_reason(job, now)
    return _mark_failed(job, reason, now, url)


def _mark_failed(job: Job, reason: str, now: float, url: str | None) -> Job:
    """Compare-and-set to ``failed`` (only if nobody changed the row meanwhile); the row as stored."""
    with _session(url) as s:
        same_worker = Job.worker.is_(None) if job.worker is None else Job.worker == job.worker
        changed = s.execute(
            update(Job).where((Job.id == job.id) & (Job.status == job.status) & same_worker)
            .values(status="failed", reason=reason, finished_at=now)
        ).rowcount
    if changed:
        logs.event("job.failed", job=job.id, what=job.kind, client=job.owner, verdict="failed", reason=reason,
                   attempts=job.attempts, duration_ms=_ms(job.started_at, now))
    return get(job.id, url) or job


CANCELLED = "cancelled"


def cancel(handle: str, url: str | None = None) -> int:
    """Mark the active jobs behind a backend handle failed: the user cancelled or moved on."""
    now = time.time()
    with _session(url) as s:
        return s.execute(
            update(Job).where((Job.handle == str(handle)) & Job.status.in_(ACTIVE))
            .values(status="failed", reason=CANCELLED, finished_at=now)
        ).rowcount


def reap(stale_after: float = STALE_AFTER_S, url: str | None = None) -> int:
    """Fail every running job whose heartbeat stopped, even if nobody polls it any more."""
    cutoff = time.time() - stale_after
    with _session(url) as s:
        silent = list(s.scalars(select(Job).where((Job.status == "running") & (Job.heartbeat_at < cutoff))))
    return sum(1 for job in silent
               if fail_if_dead(job, pid_check=False, stale_after=stale_after, url=url).status == "failed")


def _ms(start: float | None, end: float) -> float | None:
    return None if start is None else round((end - start) * 1000, 1)


class _Heartbeat(threading.Thread):
    def __init__(self, job_id: str, worker: str, every: float, url: str | None) -> None:
        super().__init__(daemon=True, name=f"heartbeat-{job_id[:8]}")
        self.job_id, self.worker, self.every, self.url = job_id, worker, every, url
        self.stopped = threading.Event()

    def run(self) -> None:
        while not self.stopped.wait(self.every):
            try:
                heartbeat(self.job_id, self.worker, self.url)
            except Exception as exc:  # noqa: BLE001 - a missed beat must not kill the job
                logs.error("job.heartbeat_error", exc, job=self.job_id)


@dataclass(frozen=True)
class Launch:
    """What a job process needs to know about the launch it is running."""

    job_id: str
    result_key: str
    kind: str = ""
    owner: str | None = None


def run_tracked(
    launch: Launch,
    compute: Callable[[], Any],
    *,
    already_done: Callable[[], Any],
    benign: tuple[type[BaseException], ...] = (),
    heartbeat_every: float = HEARTBEAT_S,
    url: str | None = None,
) -> Any:
    """Run ``compute`` for ``launch`` at most once at a time, recording how it ended.

    A duplicate delivery waits while the owner is alive, takes over if it dies,
    and returns ``already_done()`` (the stored result) once the job has ended.
    ``benign`` exceptions (Dash's PreventUpdate) end the job as finished.
    """
    worker = this_worker()
    while True:
        outcome = claim(launch.job_id, worker, result_key=launch.result_key, url=url)
        if outcome is Claim.RUN:
            break
        if outcome is Claim.DONE:
            logs.event("job.duplicate", job=launch.job_id, what=launch.kind, verdict="skipped")
            return already_done()
        time.sleep(min(1.0, heartbeat_every))
    job = get(launch.job_id, url)
    attempt = job.attempts if job else 1
    logs.event("job.start", job=launch.job_id, what=launch.kind, client=launch.owner, worker=worker, attempt=attempt)
    beat = _Heartbeat(launch.job_id, worker, heartbeat_every, url)
    beat.start()
    started = time.time()
    try:
        result = compute()
    except benign:
        finish(launch.job_id, ok=True, reason="no update", worker=worker, url=url)
        logs.event("job.finish", job=launch.job_id, what=launch.kind, client=launch.owner, verdict="no update",
                   duration_ms=_ms(started, time.time()))
        raise
    except BaseException as exc:
        reason = f"{type(exc).__name__}: {exc}"
        finish(launch.job_id, ok=False, reason=reason, worker=worker, url=url)
        logs.error("job.error", exc, job=launch.job_id, what=launch.kind, client=launch.owner, verdict="error",
                   duration_ms=_ms(started, time.time()))
        raise
    finally:
        beat.stopped.set()
    finish(launch.job_id, ok=True, worker=worker, url=url)
    logs.event("job.finish", job=launch.job_id, what=launch.kind, client=launch.owner, verdict="ok",
               attempt=attempt, duration_ms=_ms(started, time.time()))
    return result
