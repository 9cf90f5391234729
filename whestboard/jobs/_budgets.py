"""Budgets on work: what one job may cost, how many jobs a client and the machine may run, for how long.

One mechanism for every background job (playground, lab, band baselines, uploads):

* **cost** - the caller estimates a job's work before it starts (FLOPs, or truth samples x shape in
  the sampler's matmul-FLOP units) and :func:`check_cost` refuses it with a sentence above
  ``WHESTBOARD_JOB_MAX_FLOPS``;
* **concurrency** - :func:`check_slots` counts the ledger's active background jobs: at most
  ``WHESTBOARD_JOB_PER_CLIENT`` per client and ``WHESTBOARD_JOB_TOTAL`` on the whole deployment
  (uploads wait in the sandbox queue, bounded by its own ``WHESTBOARD_SANDBOX_*`` slots);
* **wall time** - :func:`deadline` cancels the job running in this process once it has run
  ``WHESTBOARD_JOB_WALL_S`` seconds, and :func:`cancel_overdue` fails any running job past it (for a job
  whose process cannot interrupt itself), each with a reason the user is shown.

Knows nothing of what a job computes: the estimate comes from the domain that knows (the playground's
sampler, a run's MLPs x budget).
"""

from __future__ import annotations

import _thread
import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from sqlalchemy import func, select, update
from sqlalchemy.orm import Session

from whestboard import config, logs
from whestboard.jobs import _ledger
from whestboard.store import locked, session


class OverBudget(ValueError):
    """A job refused before it starts (too costly, or too many running); the message says which and why."""


class OverTime(RuntimeError):
    """A running job cancelled at its wall-time limit; the message is the reason shown to the user."""


@dataclass(frozen=True)
class Limits:
    """The limits of one deployment (docs/production.md lists them with their defaults)."""

    max_flops: float = 5e13
    per_client: int = 2
    total: int = 4
    wall_s: float = 1800.0

    @classmethod
    def from_env(cls) -> Limits:
        values = config.job_budgets()
        return cls(max_flops=float(values["max_flops"]), per_client=int(values["per_client"]),
                   total=int(values["total"]), wall_s=float(values["wall_s"]))


def check_cost(what: str, flops: float, *, limits: Limits | None = None) -> None:
    """Refuse ``what`` (a phrase: "This playground job") if its estimated work exceeds the limit."""
    limits = limits or Limits.from_env()
    if not flops <= limits.max_flops:  # also refuses NaN
        raise OverBudget(
            f"{what} would cost about {flops:.3g} FLOPs, above this server's limit of {limits.max_flops:.3g} "
            f"per job ({flops / limits.max_flops:,.0f} x over): ask for less work (fewer samples, a smaller "
            "shape or fewer MLPs), or run it on your own machine; the operator sets WHESTBOARD_JOB_MAX_FLOPS.")


#: Uploads wait their turn in the sandbox queue, which has its own slots and bounds (jobs.queue).
QUEUED_BACKEND = "queue"


#: The lock (``store.locked``) every launch holds while it counts the slots and records its job.
SLOTS_LOCK = "job-slots"


def active_jobs(owner: str | None = None, *, within: Session | None = None) -> int:
    """Jobs launched straight away (background callbacks) still queued or running, of ``owner`` when given;
    ``within``: counted in that open transaction."""
    q = select(func.count()).select_from(_ledger.Job).where(_ledger.Job.status.in_(_ledger.ACTIVE),
                                                           _ledger.Job.backend != QUEUED_BACKEND)
    if owner is not None:
        q = q.where(_ledger.Job.owner == owner)
    if within is not None:
        return int(within.scalar(q) or 0)
    with session() as s:
        return int(s.scalar(q) or 0)


def check_slots(owner: str | None, *, limits: Limits | None = None, enqueue: dict | None = None) -> None:
    """Refuse a new job when its client, or the whole deployment, already runs as many as allowed.

    ``enqueue``: the job's ledger row (``_ledger.enqueue``'s keywords with ``job_id``), recorded in the
    transaction that counted, under :data:`SLOTS_LOCK`, which every process of every machine takes: two
    launches at once cannot both see the last free slot and both take it (8 at once from one address once
    held 3 of its 2)."""
    limits = limits or Limits.from_env()
    cancel_overdue(limits=limits)
    _ledger.reap_jobs()
    with locked(SLOTS_LOCK) as s:
        if owner is not None:
            mine = active_jobs(owner, within=s)
            if mine >= limits.per_client:
                raise OverBudget(f"You already have {mine} job(s) queued or running (this server allows "
                                 f"{limits.per_client} per visitor): wait for one to finish or cancel it.")
        everyone = active_jobs(within=s)
        if everyone >= limits.total:
            raise OverBudget(f"This server is running {everyone} jobs, its limit (WHESTBOARD_JOB_TOTAL = "
                             f"{limits.total}): try again in a few minutes.")
        if enqueue is not None:
            _ledger.enqueue(**enqueue, owner=owner, within=s)


def admit(what: str, flops: float | None, owner: str | None, *, limits: Limits | None = None,
          enqueue: dict | None = None) -> None:
    """Both checks, cost first: the one question asked wherever a job is created; with ``enqueue``, the job
    is recorded in the ledger as its slot is counted (:func:`check_slots`)."""
    limits = limits or Limits.from_env()
    if flops is not None:
        check_cost(what, flops, limits=limits)
    check_slots(owner, limits=limits, enqueue=enqueue)


def overtime_reason(seconds: float) -> str:
    return (f"cancelled: it ran past this server's wall-time limit of {seconds:,.0f} s per job "
            "(WHESTBOARD_JOB_WALL_S); ask for less work")


def cancel_overdue(*, limits: Limits | None = None, now: float | None = None) -> int:
    """Fail every running job that started more than the wall-time limit ago; how many.

    Queued uploads' executors stop their sandbox when asked (``cancel_requested``), so the flag is set too.
    """
    limits = limits or Limits.from_env()
    now = time.time() if now is None else now
    cutoff = now - limits.wall_s
    reason = overtime_reason(limits.wall_s)
    with session() as s:
        overdue = list(s.scalars(select(_ledger.Job).where(_ledger.Job.status == "running",
                                                          _ledger.Job.started_at < cutoff)))
        for job in overdue:
            s.execute(update(_ledger.Job).where(_ledger.Job.id == job.id, _ledger.Job.status == "running")
                      .values(status="failed", reason=reason, finished_at=now, cancel_requested=1))
    for job in overdue:
        logs.event("job.overtime", job=job.id, what=job.kind, client=job.owner, verdict="failed", reason=reason)
    return len(overdue)


@contextmanager
def deadline(job_id: str, *, limits: Limits | None = None) -> Iterator[None]:
    """Run the body (in this process's main thread) for at most the wall-time limit, else raise OverTime.

    A timer interrupts the main thread at the limit (between two bytecodes, so a long numpy call ends
    first); the job then ends with the reason, recorded by the ledger like any failure.
    """
    limits = limits or Limits.from_env()
    if threading.current_thread() is not threading.main_thread():
        yield  # only the main thread can be interrupted; cancel_overdue covers the rest
        return
    fired = threading.Event()

    def expire() -> None:
        fired.set()
        _thread.interrupt_main()

    # interrupt_main does nothing while SIGINT is ignored (as a forked job's launcher sets it), so the
    # deadline holds Python's handler for its own span and puts back what was there
    previous = signal.getsignal(signal.SIGINT)
    if previous is not signal.default_int_handler:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    timer = threading.Timer(limits.wall_s, expire)
    timer.daemon = True
    timer.start()
    try:
        yield
    except KeyboardInterrupt:
        if fired.is_set():
            raise OverTime(overtime_reason(limits.wall_s)) from None
        raise
    finally:
        timer.cancel()
        if previous is not signal.default_int_handler:
            signal.signal(signal.SIGINT, previous if previous is not None else signal.SIG_DFL)
