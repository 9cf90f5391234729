"""One job system: the ledger every job is recorded in, the sandbox queue on it, the job launcher.

Owns: the ``jobs`` table (one row per background callback launch or queued
upload; one heartbeat, one liveness rule, one stale threshold), the machine-wide
sandbox queue (slots, bounds, positions, cancel), the fork-server that starts
Dash's job processes, and the record of CPU time a job spent waiting.
May import: ``whestboard.store``, ``whestboard.config``, ``whestboard.logs``.
Knows nothing of what a job computes: bodies are handed in by the caller.
"""

from whestboard.jobs import contention, launcher, ledger, liveness, queue
from whestboard.jobs.ledger import Claim, Job, Launch, run_tracked
from whestboard.jobs.queue import JobContext, JobView, QueueFull, QueueSettings

__all__ = ["Claim", "Job", "JobContext", "JobView", "Launch", "QueueFull", "QueueSettings", "contention",
           "launcher", "ledger", "liveness", "queue", "run_tracked"]
