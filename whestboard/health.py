"""What ``/healthz`` reports: datasets readable, state folder writable, store (and Redis) reachable.

Load balancers and Docker's HEALTHCHECK only read the status code (200 or
503); people read the JSON, so each check says what failed and why, with any
URL's password redacted.
"""

from __future__ import annotations

import time

from whestboard import logs, registry, settings


def _datasets() -> dict:
    found = registry.datasets()
    broken = registry.broken_datasets()
    return {"ok": bool(found), "served": sorted(found), "broken": {b.key: b.reason for b in broken}}


def _state_dir() -> dict:
    probe = settings.state_dir() / ".healthz"
    probe.write_text("ok")
    return {"ok": True}


def _store() -> dict:
    """One round trip to the run/submission store through the shared engine."""
    from sqlalchemy import text

    from whestboard import db

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
    return report
