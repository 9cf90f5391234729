"""A fair, bounded queue of sandbox jobs shared by every web worker process on a machine.

Uploaded estimators are expensive (a full-size MLP may take its whole 120 s
wall cap) and the machine is small, so jobs wait their turn:

* **state in the database** (``whestboard.db``: SQLite WAL by default) – every
  gunicorn worker sees the same queue, positions and cancel requests;
* **concurrency by file locks** – ``WHESTBOARD_SANDBOX_CONCURRENCY`` slot files
  under the state folder; a process runs a job only while it holds a slot's
  ``flock``, which the kernel releases if the process dies. Default 1;
* **bounds** – at most ``WHESTBOARD_SANDBOX_PER_CLIENT`` queued-or-running jobs
  per client (default 2) and ``WHESTBOARD_SANDBOX_QUEUE_MAX`` waiting in all
  (default 20); a submission beyond either is refused with the reason;
* **position** – a waiting job's 1-based place among the queued (FIFO by id);
* **cancel** – a queued job is dropped at once; a running one is flagged and the
  executor kills its sandbox worker within a fraction of a second;
* **recovery** – a running job whose process is gone (same host, dead pid) or
  whose heartbeat stopped is marked failed with that reason.

Each process that serves the upload page runs one :class:`Executor` thread: it
polls for queued jobs, takes a free slot and runs the job body it was given.
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy import Float, Integer, String, Text, func, select, update
from sqlalchemy.orm import Mapped, mapped_column

from whestboard import db
from whestboard.processes import pid_alive

ACTIVE = ("queued", "running")
FINISHED = ("done", "failed", "cancelled")
HEARTBEAT_S = 3.0
STALE_AFTER_S = 60.0
POLL_S = 1.0


class QueueFull(ValueError):
    """A submission the queue refuses (per-client limit or full queue); the message says which."""


def _env_int(name: str, default: int, minimum: int) -> int:
    raw = os.environ.get(name)
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ValueError(f"{name} must be a whole number, got {raw!r}") from None
    if value < minimum:
        raise ValueError(f"{name} must be at least {minimum}, got {value}")
    return value


@dataclass(frozen=True)
class QueueSettings:
    """Concurrency and bounds, from ``WHESTBOARD_SANDBOX_*`` (see README)."""

    concurrency: int = 1
    per_client: int = 2
    max_queued: int = 20

    @classmethod
    def from_env(cls) -> QueueSettings:
        return cls(
            concurrency=_env_int("WHESTBOARD_SANDBOX_CONCURRENCY", 1, 1),
            per_client=_env_int("WHESTBOARD_SANDBOX_PER_CLIENT", 2, 1),
            max_queued=_env_int("WHESTBOARD_SANDBOX_QUEUE_MAX", 20, 1),
        )


class SandboxJob(db.Base):
    """One sandbox job: what to run, where it stands, what came out."""

    __tablename__ = "sandbox_jobs"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    client: Mapped[str] = mapped_column(String(128), index=True)
    kind: Mapped[str] = mapped_column(String(40), default="upload")
    status: Mapped[str] = mapped_column(String(16), index=True, default="queued")
    spec: Mapped[str] = mapped_column(Text, default="{}")
    progress: Mapped[str] = mapped_column(Text, default="{}")
    result: Mapped[str | None] = mapped_column(Text, default=None)
    error: Mapped[str | None] = mapped_column(Text, default=None)
    cancel_requested: Mapped[int] = mapped_column(Integer, default=0)
    worker: Mapped[str | None] = mapped_column(String(200), default=None)
    slot: Mapped[int | None] = mapped_column(Integer, default=None)
    created_at: Mapped[float] = mapped_column(Float)
    started_at: Mapped[float | None] = mapped_column(Float, default=None)
    heartbeat_at: Mapped[float | None] = mapped_column(Float, default=None)
    finished_at: Mapped[float | None] = mapped_column(Float, default=None)


@dataclass
class JobView:
    """A job as the page and the executor see it (plain data, detached from the session)."""

    id: int
    client: str
    kind: str
    status: str
    spec: dict
    progress: dict
    result: dict | None
    error: str | None
    cancel_requested: bool
    created_at: float
    started_at: float | None
    finished_at: float | None
    position: int | None = None  # 1-based among queued jobs; None once it left the queue
    extra: dict = field(default_factory=dict)

    @property
    def finished(self) -> bool:
        return self.status in FINISHED


_tables_ready: set[str] = set()
_tables_lock = threading.Lock()


def _session():
    from whestboard import settings

    url = settings.database_url()
    if url not in _tables_ready:
        with _tables_lock:
            SandboxJob.__table__.create(db.engine(), checkfirst=True)
            _tables_ready.add(url)
    return db.session()


def this_worker() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def _view(row: SandboxJob, position: int | None = None) -> JobView:
    return JobView(
        id=row.id, client=row.client, kind=row.kind, status=row.status, spec=json.loads(row.spec or "{}"),
        progress=json.loads(row.progress or "{}"), result=json.loads(row.result) if row.result else None,
        error=row.error, cancel_requested=bool(row.cancel_requested), created_at=row.created_at,
        started_at=row.started_at, finished_at=row.finished_at, position=position,
    )


# --- the queue ----------------------------------------------------------------------------------


def submit(client: str, spec: dict, *, kind: str = "upload", settings: QueueSettings | None = None) -> int:
    """Queue a job for ``client``; :class:`QueueFull` when a bound is reached."""
    settings = settings or QueueSettings.from_env()
    with _session() as s:
        mine = s.scalar(select(func.count()).select_from(SandboxJob)
                        .where(SandboxJob.client == client, SandboxJob.status.in_(ACTIVE)))
        if mine >= settings.per_client:
            raise QueueFull(f"you already have {mine} job(s) queued or running (limit {settings.per_client}); "
                            "wait for one to finish or cancel it")
        waiting = s.scalar(select(func.count()).select_from(SandboxJob).where(SandboxJob.status == "queued"))
        if waiting >= settings.max_queued:
            raise QueueFull(f"the queue is full ({waiting} jobs waiting); try again in a few minutes")
        row = SandboxJob(client=client, kind=kind, status="queued", spec=json.dumps(spec), created_at=time.time())
        s.add(row)
        s.flush()
        job_id = row.id
    _wake.set()
    return job_id


def get(job_id: int) -> JobView | None:
    """The job with its current queue position (None for an unknown id)."""
    with _session() as s:
        row = s.get(SandboxJob, int(job_id))
        if row is None:
            return None
        position = None
        if row.status == "queued":
            position = 1 + s.scalar(select(func.count()).select_from(SandboxJob)
                                    .where(SandboxJob.status == "queued", SandboxJob.id < row.id))
        return _view(row, position)


def jobs_for(client: str, limit: int = 20) -> list[JobView]:
    with _session() as s:
        rows = s.scalars(select(SandboxJob).where(SandboxJob.client == client)
                         .order_by(SandboxJob.id.desc()).limit(limit)).all()
        return [_view(r) for r in rows]


def counts() -> dict[str, int]:
    """How many jobs are queued and running right now (for the page's header)."""
    with _session() as s:
        rows = s.execute(select(SandboxJob.status, func.count()).where(SandboxJob.status.in_(ACTIVE))
                         .group_by(SandboxJob.status)).all()
    found = dict(rows)
    return {status: int(found.get(status, 0)) for status in ACTIVE}


def cancel(job_id: int, client: str | None = None) -> bool:
    """Cancel a queued job now, or ask the executor to stop a running one. False if not allowed/over."""
    with _session() as s:
        row = s.get(SandboxJob, int(job_id))
        if row is None or (client is not None and row.client != client) or row.status in FINISHED:
            return False
        if row.status == "queued":
            changed = s.execute(update(SandboxJob).where(SandboxJob.id == row.id, SandboxJob.status == "queued")
                                .values(status="cancelled", finished_at=time.time(),
                                        error="cancelled before it started")).rowcount
            if changed:
                return True
        s.execute(update(SandboxJob).where(SandboxJob.id == row.id).values(cancel_requested=1))
        return True


def cancel_requested(job_id: int) -> bool:
    with _session() as s:
        return bool(s.scalar(select(SandboxJob.cancel_requested).where(SandboxJob.id == int(job_id))))


def set_progress(job_id: int, progress: dict) -> None:
    with _session() as s:
        s.execute(update(SandboxJob).where(SandboxJob.id == int(job_id))
                  .values(progress=json.dumps(progress, default=str), heartbeat_at=time.time()))


def heartbeat(job_id: int) -> None:
    with _session() as s:
        s.execute(update(SandboxJob).where(SandboxJob.id == int(job_id)).values(heartbeat_at=time.time()))


def finish(job_id: int, status: str, *, result: dict | None = None, error: str | None = None) -> None:
    if status not in FINISHED:
        raise ValueError(f"a job ends as one of {FINISHED}, not {status!r}")
    with _session() as s:
        s.execute(update(SandboxJob).where(SandboxJob.id == int(job_id))
                  .values(status=status, finished_at=time.time(), error=error,
                          result=json.dumps(result, default=str) if result is not None else None))


def claim_next(slot: int, worker: str | None = None) -> JobView | None:
    """Atomically move the oldest queued job to running for ``worker`` (compare-and-set on status)."""
    worker = worker or this_worker()
    for _ in range(5):
        with _session() as s:
            job_id = s.scalar(select(SandboxJob.id).where(SandboxJob.status == "queued")
                              .order_by(SandboxJob.id).limit(1))
            if job_id is None:
                return None
            now = time.time()
            won = s.execute(update(SandboxJob).where(SandboxJob.id == job_id, SandboxJob.status == "queued")
                            .values(status="running", worker=worker, slot=slot, started_at=now,
                                    heartbeat_at=now)).rowcount
        if won == 1:
            return get(job_id)
    return None


def _pid_is_dead(worker: str | None) -> bool:
    if not worker or ":" not in worker:
        return False
    host, _, pid = worker.rpartition(":")
    if host != socket.gethostname() or not pid.isdigit():
        return False
    return not pid_alive(int(pid))


def recover_stale(now: float | None = None) -> int:
    """Fail running jobs whose process died or stopped beating; returns how many."""
    now = time.time() if now is None else now
    recovered = 0
    with _session() as s:
        rows = s.scalars(select(SandboxJob).where(SandboxJob.status == "running")).all()
        for row in rows:
            dead = _pid_is_dead(row.worker)
            silent = (row.heartbeat_at or row.started_at or now) < now - STALE_AFTER_S
            if not (dead or silent):
                continue
            reason = (f"the process running it ({row.worker}) exited" if dead
                      else f"no heartbeat from {row.worker} for {now - (row.heartbeat_at or now):.0f} s")
            recovered += s.execute(update(SandboxJob).where(SandboxJob.id == row.id, SandboxJob.status == "running")
                                   .values(status="failed", finished_at=now, error=f"job lost: {reason}")).rowcount
    return recovered


# --- slots (machine-wide concurrency) -------------------------------------------------------------


class Slot:
    """An exclusive ``flock`` on one of the slot files; released on close or process death."""

    def __init__(self, index: int, fd: int) -> None:
        self.index = index
        self._fd = fd

    def release(self) -> None:
        if self._fd >= 0:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = -1


def slots_dir() -> Path:
    from whestboard import settings

    path = settings.state_dir() / "sandbox-slots"
    path.mkdir(parents=True, exist_ok=True)
    return path


def try_acquire_slot(concurrency: int) -> Slot | None:
    for index in range(concurrency):
        fd = os.open(slots_dir() / f"slot-{index}.lock", os.O_CREAT | os.O_RDWR | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue
        return Slot(index, fd)
    return None


# --- executor -----------------------------------------------------------------------------------------


@dataclass
class JobContext:
    """What a job body gets: its job, a progress reporter and the cancel question."""

    job: JobView

    def report(self, **progress: Any) -> None:
        set_progress(self.job.id, progress)

    def should_cancel(self) -> bool:
        return cancel_requested(self.job.id)


JobBody = Callable[[JobContext], dict]
_wake = threading.Event()


class Executor:
    """One per process: takes queued jobs whenever a machine-wide slot is free."""

    def __init__(self, body: JobBody, settings: QueueSettings | None = None) -> None:
        self.body = body
        self.settings = settings or QueueSettings.from_env()
        self.pid = os.getpid()
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._loop, name="sandbox-jobs", daemon=True)

    def start(self) -> Executor:
        self.thread.start()
        return self

    def alive(self) -> bool:
        return self.pid == os.getpid() and self.thread.is_alive()

    def stop(self, timeout: float = 10.0) -> None:
        self.stopping.set()
        _wake.set()
        self.thread.join(timeout)

    def _loop(self) -> None:
        while not self.stopping.is_set():
            try:
                ran = self.run_one()
            except Exception:  # noqa: BLE001 - the executor must outlive any one job's failure
                import traceback

                traceback.print_exc()
                ran = False
            if not ran:
                _wake.wait(POLL_S)
                _wake.clear()

    def run_one(self) -> bool:
        """Run the next job if a slot is free; False when there was nothing to do."""
        recover_stale()
        if counts()["queued"] == 0:
            return False
        slot = try_acquire_slot(self.settings.concurrency)
        if slot is None:
            return False
        try:
            job = claim_next(slot.index)
            if job is None:
                return False
            self._run(job)
            return True
        finally:
            slot.release()

    def _run(self, job: JobView) -> None:
        beating = threading.Event()
        beat = threading.Thread(target=_beat, args=(job.id, beating), daemon=True, name=f"job-{job.id}-heartbeat")
        beat.start()
        try:
            result = self.body(JobContext(job))
            status = "cancelled" if result.get("cancelled") else ("done" if result.get("ok") else "failed")
            finish(job.id, status, result=result, error=result.get("error"))
        except BaseException as exc:  # noqa: BLE001 - a job always ends with a status and a reason
            cancelled = cancel_requested(job.id)
            finish(job.id, "cancelled" if cancelled else "failed",
                   error="cancelled while running" if cancelled else f"{type(exc).__name__}: {exc}")
            if not (cancelled or isinstance(exc, Exception)):
                raise
        finally:
            beating.set()
            beat.join(timeout=2)


def _beat(job_id: int, stop: threading.Event) -> None:
    while not stop.wait(HEARTBEAT_S):
        try:
            heartbeat(job_id)
        except Exception:  # noqa: BLE001 - a missed beat is retried; a dead store shows as stale
            pass


_executor_lock = threading.Lock()
_executor: Executor | None = None


def ensure_executor(body: JobBody) -> Executor:
    """Start this process's executor if it is not running (after a fork it never is)."""
    global _executor
    with _executor_lock:
        if _executor is None or not _executor.alive():
            _executor = Executor(body).start()
        return _executor
