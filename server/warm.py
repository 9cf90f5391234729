"""Load once, before forking, what every request and every job would otherwise load for itself.

A lab run is a process forked fresh from the job launcher, so whatever the
launcher has not loaded, each run loads again: the reference tables of the
dataset (every MLP's record, to hash the chosen ones), library versions from
package metadata, the reference estimators' source (their code hash), and the
modules flopscope imports lazily on first use. Measured under a 50-user load
test, that was about a sixth of a run's CPU. Done in gunicorn's master after
the app is preloaded, the work is shared copy-on-write by every worker, job
launcher and job; a second call finds everything loaded and costs microseconds.
"""

from __future__ import annotations

import importlib
import time

from whestboard import logs
from whestboard.data import served_datasets
from whestboard.rules import library_versions
from whestboard.scoring import BUILTIN_KINDS, resolve_estimator

LAZY_MODULES = ("flopscope.stats", "flopscope.numpy.random", "whestbench.scoring", "whestboard.data._bake",
                "whestboard.scoring._runs")


def warm_process() -> float:
    """Warm this process; returns the seconds it took. Never raises: a cold cache is only slower."""
    started = time.perf_counter()
    try:
        for name in LAZY_MODULES:
            importlib.import_module(name)

        library_versions()
        for kind in BUILTIN_KINDS:
            resolve_estimator(kind)
        for dataset in served_datasets().values():
            if dataset.info.n_mlps:
                dataset.truth(dataset.indices[0])  # reads the whole reference table once
    except Exception as exc:  # noqa: BLE001 - the request that needs it will report the problem
        logs.error("warm.failed", exc)
    return time.perf_counter() - started
