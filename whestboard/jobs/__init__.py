"""One job system: the ledger every job is recorded in, the sandbox queue on it, the job launcher.

Owns: the ``jobs`` table (one row per background callback launch or queued
upload; one heartbeat, one liveness rule, one stale threshold), the machine-wide
sandbox queue (slots, bounds, positions, cancel), the fork-server that starts
Dash's job processes, the record of CPU time a job spent waiting, and the budgets on work
(cost, concurrency, wall time).
May import: ``whestboard.store``, ``whestboard.config``, ``whestboard.logs``.
Knows nothing of what a job computes: bodies are handed in by the caller.
"""

from whestboard.jobs import budgets, contention, launcher, ledger, liveness, queue
from whestboard.jobs.ledger import Claim, Job, Launch, run_tracked
from whestboard.jobs.queue import JobContext, JobView, QueueFull, QueueSettings

__all__ = ["Claim", "Job", "JobContext", "JobView", "Launch", "QueueFull", "QueueSettings", "budgets", "contention",
           "launcher", "ledger", "liveness", "queue", "run_tracked"]
