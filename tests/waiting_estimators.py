"""Estimators that wait, for the tests of results kept as data (a sleep stands for a busy machine's cores).

"Waiting" is what the rules measure: wall time not spent computing. An estimator that sleeps waits exactly as
one on a machine whose cores are busy does; one that computes the same time in pure Python fails a time cap
for real.
"""

from __future__ import annotations

import time

import flopscope.numpy as fnp

from whestboard.scoring import EstimatorHandle

BUDGET = 10**8  # v2-phase2's rules (residual time capped at 0.4 s) at a budget small MLPs can use


class Waits:
    """Sleeps 0.6 s in predict (past the 0.4 s residual cap) on the first ``times`` calls for each MLP, shared
    by every instance (each attempt starts a fresh estimator); then predicts zeros at once."""

    def __init__(self, calls: dict, times: int, computes: bool = False) -> None:
        self.calls, self.times, self.computes = calls, times, computes

    def predict(self, mlp, budget):
        key = int(mlp.seed)
        self.calls[key] = self.calls.get(key, 0) + 1
        if self.calls[key] <= self.times:
            if self.computes:
                stop, total = time.process_time() + 0.6, 0
                while time.process_time() < stop:
                    total += 1
            else:
                time.sleep(0.6)
        return fnp.zeros((mlp.depth, mlp.width), dtype=fnp.float32)


def handle(times: int, *, computes: bool = False, calls: dict | None = None) -> EstimatorHandle:
    calls = {} if calls is None else calls
    return EstimatorHandle(label="waits" if not computes else "computes", kind="test", code_sha256="0" * 64,
                           factory=lambda: Waits(calls, times, computes))


