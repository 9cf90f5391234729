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
no file) for one MLP that the pages already show as damaged. 503 stays for what
makes an instance useless: no dataset served, no writable state folder, no store,
no Redis.
"""

from __future__ import annotations

import time

from whestboard import config as settings
from whestboard import logs
from whestboard.data import registry
from whestboard.store import database as db


def _datasets() -> dict:
    found = registry.datasets()
    broken = registry.broken_datasets()
    damaged = {key: {str(d.path): d.reason for d in mlps} for key, mlps in registry.damaged_mlps().items()}
    return {
        "ok": bool(found),
        "degraded": bool(damaged or broken),
        "served": sorted(found),
        "broken": {b.key: b.reason for b in broken},
        "damaged": damaged,
    }


def _state_dir() -> dict:
    probe = settings.state_dir() / ".healthz"
    probe.write_text("ok")
    return {"ok": True}


def _store() -> dict:
    """One round trip to the run/submission store through the shared engine."""
    from sqlalchemy import text


    started = time.perf_counter()
    with db.session() as s:
        s.execute(text("SELECT 1")).scalar_one()
    backend = db.engine().url.get_backend_name()
    return {"ok": True, "backend": backend, "ms": round((time.perf_counter() - started) * 1000, 1)}


def _redis() -> dict:
    url = settings.redis_url()
    if not url:
        return {"ok": True, "configured": False}
    import redis

    started = time.perf_counter()
    client = redis.Redis.from_url(url, socket_connect_timeout=2, socket_timeout=2)
    try:
        client.ping()
    finally:
        client.close()
    return {"ok": True, "configured": True, "ms": round((time.perf_counter() - started) * 1000, 1)}


CHECKS = {"datasets": _datasets, "state_dir": _state_dir, "store": _store, "redis": _redis}


def check() -> dict:
    report: dict = {"ok": True, "checks": {}}
    for name, probe in CHECKS.items():
        try:
            report["checks"][name] = probe()
        except Exception as exc:  # noqa: BLE001 - health must report, not raise
            report["checks"][name] = {"ok": False, "error": logs.redact(f"{type(exc).__name__}: {exc}")}
    report["ok"] = all(c.get("ok") for c in report["checks"].values())
    report["degraded"] = any(c.get("degraded") for c in report["checks"].values())
    return report
