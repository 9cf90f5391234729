"""How much of a run's wall time was spent not computing: the honesty note for timed rules.

The grader's verdict depends on time as well as FLOPs: a wall-clock cap, and
in some rounds residual time outside flopscope priced at lambda FLOPs per
second or capped. On a busy machine (many users, other jobs) a run waits for
the CPU, and that wait lands in its wall and residual time, so its effective
compute, multiplier and even its verdict can differ from what a quiet grading
machine would report. FLOP counts never do.

The measure is simple and conservative: wall seconds minus CPU seconds of the
processes doing the work (this one, plus the sandbox worker for an uploaded
estimator). Whatever was not computing counts: waiting for a core, but also an
estimator that sleeps or blocks on I/O, which the page says in those words.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

#: A run is called contended when it waited at least this long and this share of its wall time.
MIN_WAIT_S = 0.05
MIN_WAIT_SHARE = 0.2

_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def process_cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds of another process so far (None when it is gone or unreadable)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / _TICKS  # utime, stime: fields 14 and 15 of stat(5)
    except (OSError, ValueError, IndexError):
        return None


@dataclass
class CpuWatch:
    """Wall and CPU time across a block, for this process and optionally one helper process."""

    helper_pid: int | None = None
    wall_s: float = 0.0
    cpu_s: float = 0.0

    def __enter__(self) -> CpuWatch:
        self._wall0 = time.perf_counter()
        self._cpu0 = time.process_time()
        self._helper0 = process_cpu_seconds(self.helper_pid) if self.helper_pid else None
        return self

    def __exit__(self, *exc) -> None:
        self.wall_s = time.perf_counter() - self._wall0
        self.cpu_s = time.process_time() - self._cpu0
        if self._helper0 is not None:
            helper = process_cpu_seconds(self.helper_pid)
            if helper is not None:
                self.cpu_s += helper - self._helper0

    @property
    def waited_s(self) -> float:
        """Wall time not spent computing (never negative: multi-threaded BLAS can out-run the clock)."""
        return max(0.0, self.wall_s - self.cpu_s)


def is_contended(waited_s: float, wall_s: float) -> bool:
    return waited_s >= MIN_WAIT_S and wall_s > 0 and waited_s >= MIN_WAIT_SHARE * wall_s


def contention_summary(per_mlp: list[dict], limits=None) -> dict:
    """The run-level note stored in a report's ``machine`` section.

    ``waiting_mattered`` lists the MLPs that failed a time rule they would have met without their wait
    (``whestboard.rules._failures.waiting_mattered``; needs the run's ``limits``).
    """
    from whestboard.rules import waiting_mattered

    waited = sum(float(e.get("cpu_wait_s") or 0.0) for e in per_mlp)
    wall = sum(float(e.get("scoring_wall_s") or 0.0) for e in per_mlp)
    timed_failures = [e["mlp_index"] for e in per_mlp
                      if any(e.get(k) for k in ("time_exhausted", "residual_wall_time_exhausted",
                                                "combined_budget_exhausted"))]
    try:
        load = os.getloadavg()[0]
    except OSError:
        load = None
    return {
        "cpu_wait_s": waited,
        "scoring_wall_s": wall,
        "contended": is_contended(waited, wall),
        "timed_failures": timed_failures,
        "waiting_mattered": [e["mlp_index"] for e in per_mlp if waiting_mattered(e, limits)],
        "load_avg_1m": load,
        "cpu_count": os.cpu_count(),
    }
