"""Load once, before forking, what every request and every job would otherwise load for itself.

A lab run is a process forked fresh from the job launcher, so whatever the
launcher has not loaded, each run loads again: the reference tables of the
dataset (every MLP's record, to hash the chosen ones), library versions from
package metadata, the reference estimators' source (their code hash), and the
modules flopscope imports lazily on first use. Measured under a 50-user load
test, that was about a sixth of a run's CPU. Done in gunicorn's master after
the app is preloaded, the work is shared copy-on-write by every worker, job
launcher and job; a second call finds everything loaded and costs microseconds.
A page registers what its own first view needs (``register_warmer``): the
leaderboard's board, scatter and timeline of every round, which at 500,000
submissions took a first visitor seconds, and each web worker again; and the
index of every field's domain (``server.domains``), which draws every page's layout.
"""

from __future__ import annotations

import importlib
import time

from server import domains
from whestboard import logs
from whestboard.data import served_datasets
from whestboard.rules import library_versions
from whestboard.scoring import BUILTIN_KINDS, resolve_estimator

LAZY_MODULES = ("flopscope.stats", "flopscope.numpy.random", "whestbench.scoring", "whestboard.data._bake",
                "whestboard.scoring._runs")


_WARMERS: list = []


def register_warmer(warm) -> None:
    """Have ``warm()`` run with the rest (a page's own views: what its first visitor would otherwise wait for)."""
    _WARMERS.append(warm)


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
    # The pages' own first views, then the index of every field's domain, built from every page's layout
    # (on a worker's first callback request that was 0.4 s at 500,000 submissions).
    for warm in (*_WARMERS, domains.index):
        try:
            warm()
        except Exception as exc:  # noqa: BLE001 - likewise: the page computes it on its first visit instead
            logs.error("warm.failed", exc, what=getattr(warm, "__qualname__", str(warm)))
    return time.perf_counter() - started
