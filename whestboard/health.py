"""What ``/healthz`` reports: datasets readable and the state folder writable."""

from __future__ import annotations

from whestboard import registry, settings


def check() -> dict:
    report: dict = {"ok": True, "checks": {}}
    try:
        found = registry.datasets()
        broken = registry.broken_datasets()
        report["checks"]["datasets"] = {
            "ok": bool(found),
            "served": sorted(found),
            "broken": {b.key: b.reason for b in broken},
        }
    except Exception as exc:  # noqa: BLE001 - health must report, not raise
        report["checks"]["datasets"] = {"ok": False, "error": str(exc)}
    try:
        probe = settings.state_dir() / ".healthz"
        probe.write_text("ok")
        report["checks"]["state_dir"] = {"ok": True}
    except OSError as exc:
        report["checks"]["state_dir"] = {"ok": False, "error": str(exc)}
    report["ok"] = all(c.get("ok") for c in report["checks"].values())
    return report
