"""Structured logs never carry secrets; /healthz reports a broken store without leaking its password."""

from __future__ import annotations

import io
import json
import logging

import pytest

from server import health
from whestboard import logs
from whestboard.store import reset_engines


@pytest.mark.parametrize(
    ("raw", "secret"),
    [
        ("postgresql+psycopg://whest:hunter2@db:5432/whestboard", "hunter2"),
        ("redis://:s3cretpw@redis:6379/0", "s3cretpw"),
        ("Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.payload.sig", "eyJhbGciOiJIUzI1NiJ9"),
        ("GET /leaderboard?token=organizer-xyz-123&round=v2", "organizer-xyz-123"),
        ('{"organizer_token": "tok-999-abc"}', "tok-999-abc"),
        ("WHESTBOARD_ORGANIZER_TOKEN=letmein-42", "letmein-42"),
        ("password=pa55word", "pa55word"),
    ],
)
def test_redact_masks_secrets(raw, secret):
    masked = logs.redact(raw)
    assert secret not in masked
    assert "***" in masked


def test_redact_keeps_what_is_needed_to_debug():
    text = "postgresql+psycopg://whest:hunter2@db:5432/whestboard"
    assert logs.redact(text) == "postgresql+psycopg://whest:***@db:5432/whestboard"
    assert logs.redact("GET /explorer?dataset=v1-warmup&mlp=3") == "GET /explorer?dataset=v1-warmup&mlp=3"


def test_scrub_masks_secret_named_fields_at_any_depth():
    clean = logs.scrub({"headers": {"Authorization": "Basic dXNlcjpwYXNz", "User-Agent": "x"},
                        "cookies": {"session": "abc"}, "args": ["redis://:pw1234@r:1/0"], "cacheKey": "k1"})
    assert clean["headers"]["Authorization"] == "***"
    assert clean["headers"]["User-Agent"] == "x"
    assert clean["cookies"] == "***"
    assert clean["args"] == ["redis://:***@r:1/0"]
    assert clean["cacheKey"] == "k1"


def _capture(fn) -> list[dict]:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logs.JsonFormatter())
    logger = logs.get_logger()
    logger.addHandler(handler)
    try:
        fn()
    finally:
        logger.removeHandler(handler)
    return [json.loads(line) for line in stream.getvalue().splitlines()]


def test_events_are_one_json_object_per_line():
    records = _capture(lambda: logs.event("job.finish", job="j1", what="lab-result.children", client="abc",
                                          verdict="ok", duration_ms=12.5, token="tok-should-vanish"))
    assert len(records) == 1
    rec = records[0]
    assert rec["event"] == "job.finish" and rec["verdict"] == "ok" and rec["duration_ms"] == 12.5
    assert rec["token"] == "***"
    assert {"ts", "level", "pid"} <= set(rec)


def test_errors_carry_context_and_traceback_without_secrets():
    def boom():
        try:
            raise RuntimeError("could not connect to postgresql://u:hunter2@db/x")
        except RuntimeError as exc:
            logs.error("request.error", exc, path="/lab", what="lab-run.n_clicks")

    (rec,) = _capture(boom)
    assert rec["path"] == "/lab" and rec["error_type"] == "RuntimeError"
    assert "Traceback" in rec["error"] and "boom" in rec["error"]
    assert "hunter2" not in json.dumps(rec)


def test_client_ids_are_stable_and_do_not_reveal_the_address():
    key = bytes(range(32))
    a = logs.client_id("203.0.113.7", key)
    assert logs.client_id("203.0.113.7", bytes(range(32))) == a
    assert logs.client_id("203.0.113.8", key) != a
    assert logs.client_id("203.0.113.7", bytes(32)) != a  # another key, another id
    assert len(a) == 12 and "203" not in a


def test_healthz_reports_an_unreachable_store_without_its_password(tmp_path, monkeypatch):
    monkeypatch.setenv("WHESTBOARD_STATE_DIR", str(tmp_path))
    monkeypatch.setenv("WHESTBOARD_DATABASE_URL", "postgresql+psycopg://whest:hunter2@127.0.0.1:1/nowhere")
    try:
        report = health.check()
    finally:
        reset_engines()
    assert report["ok"] is False
    assert report["checks"]["store"]["ok"] is False
    assert "hunter2" not in json.dumps(report)
    assert report["checks"]["state_dir"]["ok"] is True


def test_healthz_checks_the_configured_store(tmp_path, monkeypatch):
    monkeypatch.setenv("WHESTBOARD_STATE_DIR", str(tmp_path))
    monkeypatch.delenv("WHESTBOARD_DATABASE_URL", raising=False)
    monkeypatch.delenv("WHESTBOARD_REDIS_URL", raising=False)
    report = health.check()
    assert report["checks"]["store"] == {"ok": True, "backend": "sqlite", "ms": report["checks"]["store"]["ms"]}
    assert report["checks"]["redis"] == {"ok": True, "configured": False}


def test_healthz_and_the_home_page_name_a_listed_dataset_this_machine_lacks(tmp_path, monkeypatch):
    """WHESTBOARD_DATASETS names read-only inputs each machine must have itself: one that is missing here
    is said to be missing here, with what to do, and the instance is degraded rather than down."""
    monkeypatch.setenv("WHESTBOARD_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.delenv("WHESTBOARD_DATABASE_URL", raising=False)
    monkeypatch.delenv("WHESTBOARD_REDIS_URL", raising=False)
    missing = tmp_path / "official-full-split"
    monkeypatch.setenv("WHESTBOARD_DATASETS", str(missing))
    try:
        report = health.check()
    finally:
        reset_engines()
    reason = report["checks"]["datasets"]["broken"]["official-full-split"]
    assert reason.startswith(f"{missing} is not on this machine: each machine serving Whestboard needs its own")
    assert "WHESTBOARD_DATASETS" in reason
    assert report["checks"]["datasets"]["degraded"] is True and report["checks"]["store"]["ok"] is True
