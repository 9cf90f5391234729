"""A fair, bounded queue of sandbox jobs shared by every web worker process on a machine.

Uploaded estimators are expensive (a full-size MLP may take its whole 120 s
wall cap) and the machine is small, so jobs wait their turn. The queue is the
job ledger's rows of backend ``queue`` (:mod:`whestboard.jobs._ledger`: one
table, one heartbeat, one liveness rule for every job); on top of it:

* **concurrency by file locks** – ``WHESTBOARD_SANDBOX_CONCURRENCY`` slot files
  under the state folder; a process runs a job only while it holds a slot's
  ``flock``, which the kernel releases if the process dies. Default 1;
* **bounds** – at most ``WHESTBOARD_SANDBOX_PER_CLIENT`` queued-or-running jobs
  per client (default 2) and ``WHESTBOARD_SANDBOX_QUEUE_MAX`` waiting in all
  (default 20); a submission beyond either is refused with the reason (counted and
  recorded under one lock of the shared store, so submissions at once cannot overshoot);
* **position** – a waiting job's 1-based place among the queued (first in, first out);
* **cancel** – a queued job is dropped at once; a running one is flagged and the
  executor kills its sandbox worker within a fraction of a second;
* **recovery** – a running job whose process is gone or whose heartbeat stopped
  (the ledger's rule) is queued again in its place and runs once more from the
  start; a second such death marks it failed with that reason.

Each process that serves the upload page runs one :class:`Executor` thread: it
polls for queued jobs, takes a free slot and runs the job body it was given.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import secrets
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from whestboard import config, logs
from whestboard.jobs import _ledger
from whestboard.jobs._liveness import this_worker
from whestboard.store import locked

BACKEND = "queue"
#: The lock (``store.locked``) a submission holds while it counts the queue's places and records its job.
QUEUE_LOCK = "sandbox-queue"
POLL_S = 1.0


class QueueFull(ValueError):
    """A submission the queue refuses (per-client limit or full queue); the message says which."""


@dataclass(frozen=True)
class QueueSettings:
    """Concurrency and bounds, from ``WHESTBOARD_SANDBOX_*`` (docs/uploads.md)."""

    concurrency: int = 1
    per_client: int = 2
    max_queued: int = 20

    @classmethod
    def from_env(cls) -> QueueSettings:
        return cls(**config.sandbox_queue_settings())


@dataclass
class JobView:
    """A queued job as the page and the executor see it (plain data, detached from the store)."""

    id: str
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
        return self.status in _ledger.ENDED


def _view(row: _ledger.Job, position: int | None = None) -> JobView:
    return JobView(
        id=row.id, client=row.owner or "", kind=row.kind, status=row.status, spec=json.loads(row.spec or "{}"),
        progress=json.loads(row.progress or "{}"), result=json.loads(row.result) if row.result else None,
        error=row.reason, cancel_requested=bool(row.cancel_requested), created_at=row.created_at,
        started_at=row.started_at, finished_at=row.finished_at, position=position,
    )


def _new_id() -> str:
    """Sortable by submission time, unique across processes."""
    return f"q{time.time_ns():016x}{secrets.token_hex(4)}"


# --- the queue ----------------------------------------------------------------------------------


def queue_job(client: str, spec: dict, *, kind: str = "upload", settings: QueueSettings | None = None) -> str:
    """Queue a job for ``client``; :class:`QueueFull` when a bound is reached."""
    settings = settings or QueueSettings.from_env()
    job_id = _new_id()
    with locked(QUEUE_LOCK) as s:  # counted and recorded in one transaction: two at once never both take a last place
        mine = _ledger.count(backend=BACKEND, status=_ledger.ACTIVE, owner=client, within=s)
        if mine >= settings.per_client:
            raise QueueFull(f"you already have {mine} job(s) queued or running (limit {settings.per_client}); "
                            "wait for one to finish or cancel it")
        waiting = _ledger.count(backend=BACKEND, status="queued", within=s)
        if waiting >= settings.max_queued:
            raise QueueFull(f"the queue is full ({waiting} jobs waiting); try again in a few minutes")
        _ledger.enqueue(job_id, kind=kind, owner=client, backend=BACKEND, spec=spec, within=s)
    _wake.set()
    return job_id


def queued_job(job_id: str) -> JobView | None:
    """The job with its current queue position (None for an unknown id)."""
    row = _ledger.get_job(str(job_id))
    if row is None or row.backend != BACKEND:
        return None
    position = None
    if row.status == "queued":
        position = 1 + _ledger.count(backend=BACKEND, status="queued", created_before=row.created_at)
    return _view(row, position)


def counts() -> dict[str, int]:
    """How many jobs are queued and running right now (for the page's header)."""
    return {status: _ledger.count(backend=BACKEND, status=status) for status in _ledger.ACTIVE}


def cancel_queued_job(job_id: str, client: str | None = None) -> bool:
    """Cancel a queued job now, or ask the executor to stop a running one. False if not allowed/over."""
    return _ledger.request_cancel(str(job_id), owner=client)


def cancel_requested(job_id: str) -> bool:
    return _ledger.cancel_requested(str(job_id))


def claim_next(slot: int, worker: str | None = None) -> JobView | None:
    """Atomically move the oldest queued job to running for ``worker`` (compare-and-set on status)."""
    job_id = _ledger.claim_next(BACKEND, slot=slot, worker=worker)
    return queued_job(job_id) if job_id else None


#: How many times an upload is started before its worker's deaths end it: one whose worker died (a
#: restart, a killed web worker) runs once more from the start, and never in a loop.
ATTEMPTS = 2


def recover_stale() -> int:
    """Running jobs whose process died or stopped beating: queued again (once), else failed; how many."""
    return _ledger.reap_jobs(backend=BACKEND, pid_check=True, rerun_below=ATTEMPTS)


def recover_jobs() -> int:
    """What a server does as it starts: every job the ledger holds as running whose process on this
    machine is gone is ended (an upload queued again to run from the start, once; a background job failed
    with the reason its page shows); how many. A job whose process lives on (a background callback's
    outlives a gunicorn restart) is left to finish, and its page collects it; a Celery job is left to
    Celery's redelivery and the heartbeat rule."""
    return recover_stale() + _ledger.reap_jobs(backend="diskcache", pid_check=True)


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
    path = config.state_dir() / "sandbox-slots"
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


@contextmanager
def sandbox_turn(*, on_wait: Callable[[], None] | None = None, poll_s: float = 0.5,
                 settings: QueueSettings | None = None) -> Iterator[Slot]:
    """Hold one of this machine's sandbox slots for as long as the body runs uploaded code.

    The queue's own rule (``WHESTBOARD_SANDBOX_CONCURRENCY`` sandboxes at once, default one) for uploaded
    code run outside the queue, by a playground job: it waits, calling ``on_wait`` between tries, until
    a queued upload or another job's upload leaves a slot. The kernel releases the slot if the process
    dies (a cancelled job is killed), so a wait never outlives its holder.
    """
    settings = settings or QueueSettings.from_env()
    while (slot := try_acquire_slot(settings.concurrency)) is None:
        if on_wait is not None:
            on_wait()
        time.sleep(poll_s)
    try:
        yield slot
    finally:
        slot.release()


# --- executor -----------------------------------------------------------------------------------------


@dataclass
class JobContext:
    """What a job body gets: its job, a progress reporter and the cancel question."""

    job: JobView
    worker: str = field(default_factory=this_worker)

    def report(self, **progress: Any) -> None:
        _ledger.heartbeat(self.job.id, self.worker, progress=progress)

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
            except Exception as exc:  # noqa: BLE001 - the executor must outlive any one job's failure
                logs.error("queue.executor_error", exc)
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
        worker = this_worker()
        beat = _ledger.Heartbeat(job.id, worker)
        beat.start()
        logs.event("job.start", job=job.id, what=job.kind, client=job.client, worker=worker, backend=BACKEND)
        try:
            result = self.body(JobContext(job, worker))
            status = "cancelled" if result.get("cancelled") else ("finished" if result.get("ok") else "failed")
            _record_ending(job.id, status=status, reason=result.get("error"), result=result, worker=worker)
        except BaseException as exc:  # noqa: BLE001 - a job always ends with a status and a reason
            cancelled = _asked_to_cancel(job.id)
            _record_ending(job.id, status="cancelled" if cancelled else "failed", worker=worker,
                           reason="cancelled while running" if cancelled else f"{type(exc).__name__}: {exc}")
            if not (cancelled or isinstance(exc, Exception)):
                raise
        finally:
            beat.stop()
        logs.event("job.finish", job=job.id, what=job.kind, client=job.client, backend=BACKEND,
                   level=logging.INFO)


#: How long an executor keeps trying to record how a job ended while the store refuses writes.
ENDING_RETRY_S = 600.0


def _asked_to_cancel(job_id: str) -> bool:
    try:
        return cancel_requested(job_id)
    except Exception:  # noqa: BLE001 - the store may be what failed the job
        return False


def _record_ending(job_id: str, **ending: Any) -> None:
    """``ledger.finish``, retried while the store refuses the write (a full disk under SQLite): the
    heartbeat beats on meanwhile, so the job is recorded with its own reason once space is back, not
    mistaken later for one whose worker died. A result too large for the store is dropped last."""
    deadline = time.time() + ENDING_RETRY_S
    while True:
        try:
            _ledger.finish(job_id, **ending)
            return
        except Exception as exc:  # noqa: BLE001 - retried, then raised
            if time.time() > deadline:
                raise
            logs.error("job.ending_unrecorded", exc, job=job_id)
            if ending.get("result") is not None and time.time() > deadline - ENDING_RETRY_S / 2:
                ending = {**ending, "result": None}
            time.sleep(POLL_S)


_executor_lock = threading.Lock()
_executor: Executor | None = None


def ensure_executor(body: JobBody) -> Executor:
    """Start this process's executor if it is not running (after a fork it never is)."""
    global _executor
    with _executor_lock:
        if _executor is None or not _executor.alive():
            _executor = Executor(body).start()
        return _executor
