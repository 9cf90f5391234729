"""One job system: the ledger every job is recorded in, the sandbox queue on it, the job launcher, Celery.

Owns: the ``jobs`` table (one row per background callback launch or queued
upload; one heartbeat, one liveness rule, one stale threshold), the machine-wide
sandbox queue (slots, bounds, positions, cancel), the fork-server that starts
Dash's job processes, the record of CPU time a job spent waiting, the budgets on work
(cost, concurrency, wall time), and the one Celery application (its settings; Dash's background
callbacks and the job bodies packages register by name, spread over ``celery -A worker worker``
processes on any number of machines).
May import: ``whestboard.store``, ``whestboard.config``, ``whestboard.logs``.
Knows nothing of what a job computes: bodies are handed in by the caller.
"""

from whestboard.jobs._budgets import OverBudget, admit, check_cost, deadline
from whestboard.jobs._celery import (
    BROKER_RETRY_MAX_INTERVAL_S,
    RESULT_LOST_AFTER_S,
    RESULT_RETRY_S,
    Spread,
    celery_app,
    celery_settings,
    register_body,
    spread,
)
from whestboard.jobs._contention import CpuWatch, contention_summary
from whestboard.jobs._launcher import Launcher
from whestboard.jobs._ledger import (
    ACTIVE,
    CANCELLED,
    NOT_KEPT,
    NOT_STARTED,
    RERUN,
    STALE_AFTER_S,
    Claim,
    Job,
    Launch,
    cancel_job,
    enqueue,
    fail_if_dead,
    fail_unkept,
    fail_unstarted,
    find_job,
    is_lost,
    reap_jobs,
    recent_jobs,
    run_tracked,
    set_handle,
)
from whestboard.jobs._liveness import (
    handle_running,
    owner_alive,
    pid_alive,
    process_handle,
    process_of,
    this_worker,
)
from whestboard.jobs._queue import (
    JobContext,
    JobView,
    QueueFull,
    QueueSettings,
    cancel_queued_job,
    ensure_executor,
    queue_job,
    queued_job,
    recover_jobs,
    sandbox_turn,
)

__all__ = [
    "ACTIVE",
    "BROKER_RETRY_MAX_INTERVAL_S",
    "celery_app",
    "celery_settings",
    "register_body",
    "RESULT_LOST_AFTER_S",
    "RESULT_RETRY_S",
    "spread",
    "Spread",
    "STALE_AFTER_S",
    "this_worker",
    "admit",
    "cancel_job",
    "cancel_queued_job",
    "CANCELLED",
    "check_cost",
    "Claim",
    "contention_summary",
    "CpuWatch",
    "deadline",
    "enqueue",
    "ensure_executor",
    "fail_if_dead",
    "fail_unkept",
    "fail_unstarted",
    "find_job",
    "handle_running",
    "is_lost",
    "Job",
    "JobContext",
    "JobView",
    "Launch",
    "Launcher",
    "NOT_KEPT",
    "NOT_STARTED",
    "OverBudget",
    "owner_alive",
    "pid_alive",
    "process_handle",
    "process_of",
    "queue_job",
    "queued_job",
    "QueueFull",
    "QueueSettings",
    "reap_jobs",
    "sandbox_turn",
    "RERUN",
    "recent_jobs",
    "recover_jobs",
    "run_tracked",
    "set_handle",
]
