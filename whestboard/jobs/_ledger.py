"""The job ledger: every job has one row, so none is ever silently dropped.

One table serves both kinds of job Whestboard runs: Dash background callbacks
(lab runs, band baselines; backend ``diskcache`` or ``celery``) and uploads
waiting in the sandbox queue (backend ``queue``, :mod:`whestboard.jobs._queue`).
Dash alone keeps a background job's state in its result store only: a job whose
process dies leaves no result and the browser's poll quietly gives up. Here:

- ``queued`` when it is launched or submitted (any worker, any machine);
- ``running`` once a process *claims* it with a compare-and-set, so two
  deliveries of one launch (a Celery redelivery, a retry after the result was
  stored) never compute it twice;
- a heartbeat every :data:`HEARTBEAT_S` seconds while it runs;
- ``finished``, ``failed`` (with a reason) or ``cancelled`` when it ends.

**One liveness rule** (:mod:`whestboard.jobs._liveness`): a running job is
*stale* when its process on this host is gone, or when its heartbeat is older
than :data:`STALE_AFTER_S`. A stale job is taken over by the next claim (a
retry, ``attempts`` + 1), queued again (an upload, whose row carries all it
needs, runs once more) or marked ``failed`` with the reason ("worker died
..."), which the user then sees. The store is whatever
:mod:`whestboard.store` points at (SQLite WAL by default, PostgreSQL when
shared), so every worker on every machine sees the same truth.
"""

from __future__ import annotations

import enum
import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Float, Index, Integer, String, Text, func, select, update
from sqlalchemy.orm import Mapped, Session, mapped_column

from whestboard import logs
from whestboard.jobs._liveness import this_worker, worker_is_dead
from whestboard.store import Base, session

HEARTBEAT_S = 5.0
STALE_AFTER_S = 30.0
#: A job nobody starts for this long is reported, not waited on forever: on a busy deployment jobs
#: queue for minutes, but a task no worker knows (workers running other code) is never started.
QUEUED_TOO_LONG_S = 900.0
#: How a job the backend refused (broker, store or disk away at launch) is marked failed.
NOT_STARTED = "not started"
#: How a job is marked failed whose value was left behind while its row never said it finished: what it
#: stored cannot be vouched for (its ending was written where this store does not see it).
NOT_KEPT = "not kept"
LOST_REASONS = ("worker died", "no worker started", NOT_STARTED, NOT_KEPT)
#: The reason a job queued again after its worker died carries until it ends (an upload runs once more).
RERUN = "queued again"
ACTIVE = ("queued", "running")
ENDED = ("finished", "failed", "cancelled")
CANCELLED = "cancelled"


def is_lost(reason: str | None) -> bool:
    """A failure the ledger diagnosed (the job was lost), as opposed to an error the job raised."""
    return bool(reason) and reason.startswith(LOST_REASONS)


class Job(Base):
    """One job: what it is, who holds it, how it ended (and, for queued uploads, what it carries)."""

    __tablename__ = "jobs"
    __table_args__ = (Index("ix_jobs_status_heartbeat", "status", "heartbeat_at"),
                      Index("ix_jobs_backend_status", "backend", "status"))

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    result_key: Mapped[str] = mapped_column(String(128), index=True, default="")
    handle: Mapped[str | None] = mapped_column(String(128), index=True, default=None)
    kind: Mapped[str] = mapped_column(String(200), default="")
    owner: Mapped[str | None] = mapped_column(String(128), index=True, default=None)
    backend: Mapped[str] = mapped_column(String(32), default="")
    status: Mapped[str] = mapped_column(String(16), default="queued")
    reason: Mapped[str | None] = mapped_column(Text, default=None)
    worker: Mapped[str | None] = mapped_column(String(200), default=None)
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    created_at: Mapped[float] = mapped_column(Float)
    started_at: Mapped[float | None] = mapped_column(Float, default=None)
    heartbeat_at: Mapped[float | None] = mapped_column(Float, default=None)
    finished_at: Mapped[float | None] = mapped_column(Float, default=None)
    # what a queued job carries (the sandbox queue); NULL for background callbacks
    spec: Mapped[str | None] = mapped_column(Text, default=None)
    progress: Mapped[str | None] = mapped_column(Text, default=None)
    result: Mapped[str | None] = mapped_column(Text, default=None)
    cancel_requested: Mapped[int] = mapped_column(Integer, default=0)
    slot: Mapped[int | None] = mapped_column(Integer, default=None)

    @property
    def duration_s(self) -> float | None:
        if self.started_at is None:
            return None
        return (self.finished_at or time.time()) - self.started_at


# --------------------------------------------------------------------------- reading


def get_job(job_id: str, url: str | None = None) -> Job | None:
    with session(url) as s:
        return s.get(Job, job_id)


def find_job(result_key: str, handle: str | None, url: str | None = None) -> Job | None:
    """The launch a poll refers to (latest one for that result key and handle)."""
    with session(url) as s:
        q = select(Job).where(Job.result_key == result_key)
        if handle is not None:
            q = q.where(Job.handle == str(handle))
        return s.scalars(q.order_by(Job.created_at.desc()).limit(1)).first()


def recent_jobs(limit: int = 50, url: str | None = None) -> list[Job]:
    with session(url) as s:
        return list(s.scalars(select(Job).order_by(Job.created_at.desc()).limit(limit)))


def count(*, backend: str, status: str | tuple[str, ...], owner: str | None = None,
          created_before: float | None = None, url: str | None = None, within: Session | None = None) -> int:
    """How many jobs of ``backend`` are in ``status`` (of ``owner``, created before a moment); ``within``: read
    in that open transaction (one holding the lock a bound is checked under)."""
    statuses = (status,) if isinstance(status, str) else status
    q = select(func.count()).select_from(Job).where(Job.backend == backend, Job.status.in_(statuses))
    if owner is not None:
        q = q.where(Job.owner == owner)
    if created_before is not None:
        q = q.where(Job.created_at < created_before)
    if within is not None:
        return int(within.scalar(q) or 0)
    with session(url) as s:
        return int(s.scalar(q) or 0)


# --------------------------------------------------------------------------- liveness


def is_stale(job: Job, now: float | None = None, stale_after: float = STALE_AFTER_S, *,
             pid_check: bool = True) -> bool:
    """A running job nobody is working on any more: its process is gone or its heartbeat stopped."""
    if job.status != "running":
        return False
    now = time.time() if now is None else now
    return (pid_check and worker_is_dead(job.worker)) or (job.heartbeat_at or 0) < now - stale_after


def death_reason(job: Job, now: float | None = None) -> str:
    now = time.time() if now is None else now
    ran = f" after {now - job.started_at:.1f} s" if job.started_at else ""
    if worker_is_dead(job.worker):
        return f"worker died: process {job.worker} exited{ran} without a result"
    quiet = now - (job.heartbeat_at or job.created_at)
    return f"worker died: no heartbeat from {job.worker} for {quiet:.0f} s{ran}"


# --------------------------------------------------------------------------- a job's life


def enqueue(job_id: str, *, result_key: str = "", kind: str = "", owner: str | None = None, backend: str = "",
            spec: dict | None = None, url: str | None = None, within: Session | None = None) -> None:
    """Record a job before it is handed to a job process, a broker or the queue. ``within``: in that open
    transaction, the one that counted the slots the job takes under their lock (``jobs._budgets``), so no
    other launch counts between the check and this row."""
    row = Job(id=job_id, result_key=result_key, kind=kind[:200], owner=owner, backend=backend, status="queued",
              created_at=time.time(), spec=json.dumps(spec) if spec is not None else None)
    if within is not None:
        within.add(row)
        within.flush()
    else:
        with session(url) as s:
            s.add(row)
    logs.event("job.queued", job=job_id, what=kind, client=owner, backend=backend)


def set_handle(job_id: str, handle: str, url: str | None = None) -> None:
    """Remember the backend's handle (a process or a Celery task id) the browser polls with."""
    with session(url) as s:
        s.execute(update(Job).where(Job.id == job_id).values(handle=str(handle)))


class Claim(enum.Enum):
    RUN = "run"  # this process now owns the job
    BUSY = "busy"  # another live process is running it
    DONE = "done"  # it already ended: do not compute again


def claim(job_id: str, worker: str | None = None, *, result_key: str = "", url: str | None = None) -> Claim:
    """Atomically take ownership of a queued job, or of a running one whose worker died."""
    worker = worker or this_worker()
    now = time.time()
    with session(url) as s:
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


def claim_next(backend: str, *, slot: int | None = None, worker: str | None = None,
               url: str | None = None) -> str | None:
    """Atomically move the oldest queued job of ``backend`` to running for ``worker``; its id, or None."""
    worker = worker or this_worker()
    for _ in range(5):
        with session(url) as s:
            job_id = s.scalar(select(Job.id).where(Job.backend == backend, Job.status == "queued")
                              .order_by(Job.created_at, Job.id).limit(1))
            if job_id is None:
                return None
            now = time.time()
            won = s.execute(update(Job).where(Job.id == job_id, Job.status == "queued")
                            .values(status="running", worker=worker, slot=slot, attempts=Job.attempts + 1,
                                    started_at=now, heartbeat_at=now)).rowcount
        if won == 1:
            return job_id
    return None


def heartbeat(job_id: str, worker: str | None = None, *, progress: dict | None = None,
              url: str | None = None) -> bool:
    """Refresh the heartbeat (and the progress, if given); False when this worker no longer owns the job."""
    values: dict[str, Any] = {"heartbeat_at": time.time()}
    if progress is not None:
        values["progress"] = json.dumps(progress, default=str)
    with session(url) as s:
        return s.execute(
            update(Job).where((Job.id == job_id) & (Job.worker == (worker or this_worker()))
                              & (Job.status == "running")).values(**values)
        ).rowcount == 1


def finish(job_id: str, *, status: str = "finished", reason: str | None = None, result: dict | None = None,
           worker: str | None = None, url: str | None = None) -> bool:
    """End a job this worker owns; False if someone else took it over meanwhile."""
    if status not in ENDED:
        raise ValueError(f"a job ends as one of {', '.join(ENDED)}, not {status!r}")
    with session(url) as s:
        return s.execute(
            update(Job).where((Job.id == job_id) & (Job.worker == (worker or this_worker()))
                              & (Job.status == "running"))
            .values(status=status, reason=logs.redact(reason) if reason else None, finished_at=time.time(),
                    result=json.dumps(result, default=str) if result is not None else None)
        ).rowcount == 1


def fail_if_dead(job: Job, *, process_gone: bool = False, pid_check: bool = True,
                 stale_after: float = STALE_AFTER_S, url: str | None = None) -> Job:
    """Mark an active job failed when nobody is working on it; returns the row as stored.

    ``process_gone`` is the caller's first-hand knowledge that the job's process
    no longer exists (the diskcache backend checks the process it launched).
    ``pid_check=False`` trusts only the heartbeat: Celery redelivers a task whose
    worker process died, and that retry should get the chance to claim it first.
    """
    now = time.time()
    if job.status not in ACTIVE:
        return job
    if job.status == "queued" and not process_gone:
        if job.backend != "queue" and job.created_at < now - QUEUED_TOO_LONG_S:
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
    with session(url) as s:
        same_worker = Job.worker.is_(None) if job.worker is None else Job.worker == job.worker
        changed = s.execute(
            update(Job).where((Job.id == job.id) & (Job.status == job.status) & same_worker)
            .values(status="failed", reason=reason, finished_at=now)
        ).rowcount
    if changed:
        logs.event("job.failed", job=job.id, what=job.kind, client=job.owner, verdict="failed", reason=reason,
                   attempts=job.attempts, duration_ms=_ms(job.started_at, now))
    return get_job(job.id, url) or job


def fail_unkept(job: Job, url: str | None = None) -> Job:
    """A job that left its value while its row still says ``queued`` or ``running``: failed with why (its
    process's ending never reached this store, so neither may what it stored); the row as stored."""
    reason = (f"{NOT_KEPT}: it finished, but its ending never reached the job ledger, so what it computed "
              "may not have been saved")
    return _mark_failed(job, reason, time.time(), url) if job.status in ACTIVE else job


def fail_unstarted(job_id: str, *, reason: str, url: str | None = None) -> bool:
    """A job that could not be handed to its backend (the broker refused it): failed, with why, at once,
    instead of a row left ``queued`` until the 15-minute rule notices."""
    with session(url) as s:
        changed = s.execute(update(Job).where((Job.id == job_id) & (Job.status == "queued"))
                            .values(status="failed", reason=logs.redact(reason)[:2000], finished_at=time.time())
                            ).rowcount == 1
    if changed:
        logs.event("job.failed", job=job_id, verdict="failed", reason=reason)
    return changed


def cancel_job(handle: str, url: str | None = None) -> int:
    """Cancel the active jobs behind a backend handle: the user cancelled or moved on."""
    with session(url) as s:
        return s.execute(
            update(Job).where((Job.handle == str(handle)) & Job.status.in_(ACTIVE))
            .values(status=CANCELLED, reason=CANCELLED, finished_at=time.time())
        ).rowcount


def request_cancel(job_id: str, *, owner: str | None = None, url: str | None = None) -> bool:
    """Cancel a queued job now, or ask the process running it to stop. False if not allowed or over."""
    with session(url) as s:
        job = s.get(Job, job_id)
        if job is None or (owner is not None and job.owner != owner) or job.status in ENDED:
            return False
        if job.status == "queued":
            dropped = s.execute(update(Job).where(Job.id == job_id, Job.status == "queued")
                                .values(status=CANCELLED, reason="cancelled before it started",
                                        finished_at=time.time())).rowcount
            if dropped:
                return True
        s.execute(update(Job).where(Job.id == job_id).values(cancel_requested=1))
        return True


def cancel_requested(job_id: str, url: str | None = None) -> bool:
    with session(url) as s:
        return bool(s.scalar(select(Job.cancel_requested).where(Job.id == job_id)))


def reap_jobs(stale_after: float = STALE_AFTER_S, *, backend: str | None = None, pid_check: bool = False,
              rerun_below: int = 0, url: str | None = None) -> int:
    """End every running job nobody is working on, even if nobody polls it any more; how many.

    A job whose body can run again from what its row carries (an upload: ``rerun_below`` > 0) is queued
    again while it has been started fewer than ``rerun_below`` times, keeping its place in the queue;
    any other is failed with the reason, which its page shows."""
    now = time.time()
    q = select(Job).where(Job.status == "running")
    if backend is not None:
        q = q.where(Job.backend == backend)
    if not pid_check:
        q = q.where(Job.heartbeat_at < now - stale_after)
    with session(url) as s:
        running = list(s.scalars(q))
    ended = 0
    for job in running:
        if job.attempts < rerun_below and not job.cancel_requested and is_stale(job, now, stale_after,
                                                                                  pid_check=pid_check):
            ended += _queue_again(job, death_reason(job, now), url)
        elif fail_if_dead(job, pid_check=pid_check, stale_after=stale_after, url=url).status == "failed":
            ended += 1
    return ended


def _queue_again(job: Job, reason: str, url: str | None) -> int:
    """Compare-and-set a dead running job back to ``queued`` (its progress forgotten, why kept); 1 if done."""
    with session(url) as s:
        changed = s.execute(
            update(Job).where((Job.id == job.id) & (Job.status == "running") & (Job.worker == job.worker))
            .values(status="queued", worker=None, slot=None, started_at=None, heartbeat_at=None, progress=None,
                    reason=f"{RERUN}: {reason}")
        ).rowcount
    if changed:
        logs.event("job.requeued", job=job.id, what=job.kind, client=job.owner, reason=reason,
                   attempts=job.attempts)
    return changed


def _ms(start: float | None, end: float) -> float | None:
    return None if start is None else round((end - start) * 1000, 1)


# --------------------------------------------------------------------------- running one


class Heartbeat(threading.Thread):
    """Beats for one job while it runs (a missed beat is retried; a dead store shows as stale)."""

    def __init__(self, job_id: str, worker: str, every: float = HEARTBEAT_S, url: str | None = None) -> None:
        super().__init__(daemon=True, name=f"heartbeat-{job_id[:8]}")
        self.job_id, self.worker, self.every, self.url = job_id, worker, every, url
        self.stopped = threading.Event()

    def run(self) -> None:
        while not self.stopped.wait(self.every):
            try:
                heartbeat(self.job_id, self.worker, url=self.url)
            except Exception as exc:  # noqa: BLE001 - a missed beat must not kill the job
                logs.error("job.heartbeat_error", exc, job=self.job_id)

    def stop(self) -> None:
        self.stopped.set()
        self.join(timeout=2)


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
    job = get_job(launch.job_id, url)
    attempt = job.attempts if job else 1
    logs.event("job.start", job=launch.job_id, what=launch.kind, client=launch.owner, worker=worker, attempt=attempt)
    beat = Heartbeat(launch.job_id, worker, heartbeat_every, url)
    beat.start()
    started = time.time()
    try:
        result = compute()
    except benign:
        finish(launch.job_id, reason="no update", worker=worker, url=url)
        logs.event("job.finish", job=launch.job_id, what=launch.kind, client=launch.owner, verdict="no update",
                   duration_ms=_ms(started, time.time()))
        raise
    except BaseException as exc:
        finish(launch.job_id, status="failed", reason=f"{type(exc).__name__}: {exc}", worker=worker, url=url)
        logs.error("job.error", exc, job=launch.job_id, what=launch.kind, client=launch.owner, verdict="error",
                   duration_ms=_ms(started, time.time()))
        raise
    finally:
        beat.stopped.set()
    finish(launch.job_id, worker=worker, url=url)
    logs.event("job.finish", job=launch.job_id, what=launch.kind, client=launch.owner, verdict="ok",
               attempt=attempt, duration_ms=_ms(started, time.time()))
    return result
