"""What ``/healthz`` reports: datasets readable, state folder writable, store (and Redis) reachable.

Load balancers and Docker's HEALTHCHECK only read the status code (200 or
503); people read the JSON, so each check says what failed and why, with any
URL's password redacted.

**Degraded is still 200.** A damaged MLP file (or a dataset folder that cannot
be opened at all) leaves ``"ok": true`` and adds ``"degraded": true``, with
``checks.datasets.damaged`` naming each damaged file and its reason per dataset
(``broken`` lists unopenable folders, as before). Every instance reads the same
data folder, so a 503 would not route anyone to a healthier instance: it would
take the whole site out of the balancer (and restart containers, which repairs
no file) for one MLP that the pages already show as damaged.

**Liveness and readiness.** An answer at all means the process is alive (``"live": true``);
the status code is readiness. 503 is kept for what makes an instance useless: no dataset
served, or no store to read runs and submissions from. What only some features need is
``degraded`` (200, ``"degraded_by"`` naming it): Redis away (pages render; jobs and the shared
cache wait for it, and lab runs say so in a sentence), or a state folder that cannot be
written or has less than ``WHESTBOARD_MIN_FREE_MB`` free (pages render; saving answers "the
disk is full"). Every instance shares Redis, so a 503 for it would pull them all out of the
balancer while their pages were being served fine.
"""

from __future__ import annotations

import time

from server import faults
from whestboard import config, logs
from whestboard.data import broken_datasets, damaged_mlps, served_datasets
from whestboard.store import engine, session


def _datasets() -> dict:
    found = served_datasets()
    broken = broken_datasets()
    damaged = {key: {str(d.path): d.reason for d in mlps} for key, mlps in damaged_mlps().items()}
    return {
        "ok": bool(found),
        "degraded": bool(damaged or broken),
        "served": sorted(found),
        "broken": {b.key: b.reason for b in broken},
        "damaged": damaged,
    }


def _state_dir() -> dict:
    """Writable, with room to write: a full disk degrades the instance (reads still work)."""
    folder = config.state_dir()
    free_mb = faults.state_free_mb()
    needed_mb = config.min_free_disk_mb()
    report: dict = {"ok": True, "free_mb": free_mb, "min_free_mb": needed_mb}
    try:
        (folder / ".healthz").write_text("ok")
    except OSError as exc:
        report["degraded"] = True
        report["error"] = logs.redact(f"{type(exc).__name__}: {exc}")
    if free_mb < needed_mb:
        report["degraded"] = True
        report.setdefault("error", f"only {free_mb:g} MiB free in the state folder (needs {needed_mb:g})")
    return report


def _store() -> dict:
    """One round trip to the run/submission store through the shared engine."""
    from sqlalchemy import text


    started = time.perf_counter()
    with session() as s:
        s.execute(text("SELECT 1")).scalar_one()
    backend = engine().url.get_backend_name()
    return {"ok": True, "backend": backend, "ms": round((time.perf_counter() - started) * 1000, 1)}


def _redis() -> dict:
    url = config.redis_url()
    if not url:
        return {"ok": True, "configured": False}
    import redis

    started = time.perf_counter()
    client = redis.Redis.from_url(url, socket_connect_timeout=2, socket_timeout=2)
    try:
        client.ping()
    except (redis.ConnectionError, redis.TimeoutError) as exc:
        return {"ok": True, "configured": True, "degraded": True, "error": logs.redact(f"{type(exc).__name__}: {exc}")}
    finally:
        client.close()
    return {"ok": True, "configured": True, "ms": round((time.perf_counter() - started) * 1000, 1)}


CHECKS = {"datasets": _datasets, "state_dir": _state_dir, "store": _store, "redis": _redis}


def check() -> dict:
    """Every check; ``ok`` is readiness (the status code), ``degraded_by`` names what only some features need."""
    report: dict = {"live": True, "ok": True, "checks": {}}
    for name, probe in CHECKS.items():
        try:
            report["checks"][name] = probe()
        except Exception as exc:  # noqa: BLE001 - health must report, not raise
            report["checks"][name] = {"ok": False, "error": logs.redact(f"{type(exc).__name__}: {exc}")}
    report["ok"] = all(c.get("ok") for c in report["checks"].values())
    report["degraded_by"] = sorted(name for name, c in report["checks"].items() if c.get("degraded"))
    report["degraded"] = bool(report["degraded_by"])
    return report


def respond():
    """The ``/healthz`` view: the report as JSON, 200 while the instance can serve, else 503."""
    from flask import jsonify

    report = check()
    return jsonify(report), (200 if report["ok"] else 503)
