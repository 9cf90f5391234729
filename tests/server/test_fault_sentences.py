"""Which failures reach the user as a sentence (server/faults.py), from real failing calls, and how
/healthz reads Redis away and a state folder short of space: degraded, still 200."""

from __future__ import annotations

import errno
import json

import pytest
import redis

from server import faults, health
from tests.prod_support import free_port
from whestboard.store import reset_engines, session


def test_writing_to_a_full_device_is_a_disk_fault():
    with pytest.raises(OSError) as caught:
        with open("/dev/full", "wb", buffering=0) as device:
            device.write(b"x")
    assert caught.value.errno == errno.ENOSPC
    assert faults.classify(caught.value) == faults.DISK
    assert faults.describe(caught.value) == faults.sentence(faults.DISK)


def test_a_disk_fault_is_found_behind_the_error_that_wraps_it():
    try:
        try:
            with open("/dev/full", "wb", buffering=0) as device:
                device.write(b"x")
        except OSError as exc:
            raise RuntimeError("saving the run failed") from exc
    except RuntimeError as wrapped:
        assert faults.classify(wrapped) == faults.DISK


def test_redis_refusing_connections_is_a_broker_fault():
    from redis.backoff import NoBackoff
    from redis.retry import Retry

    # No retries: redis-py retries a refused connection with backoff (3 s here), then raises the same error
    client = redis.Redis(port=free_port(), socket_connect_timeout=2, retry=Retry(NoBackoff(), 0))
    with pytest.raises(redis.ConnectionError) as caught:
        client.ping()
    assert faults.classify(caught.value) == faults.BROKER
    # the same failure as a background job leaves it behind: text only
    assert faults.classify_message(f"An error occurred inside a background callback: {caught.value}") == faults.BROKER


def test_an_unreachable_database_is_a_store_fault(monkeypatch, tmp_path):
    from sqlalchemy import text

    monkeypatch.setenv("WHESTBOARD_STATE_DIR", str(tmp_path))
    url = f"postgresql+psycopg://whest:pw@127.0.0.1:{free_port()}/nowhere"
    try:
        with pytest.raises(Exception) as caught:
            with session(url) as s:
                s.execute(text("SELECT 1"))
    finally:
        reset_engines()
    assert faults.classify(caught.value) == faults.STORE


def test_a_bug_is_not_an_infrastructure_fault():
    assert faults.classify(KeyError("mlp 7")) is None
    assert faults.classify(ValueError("width must be positive")) is None
    assert faults.describe(ZeroDivisionError()) is None


def test_healthz_is_degraded_not_down_while_redis_is_away(tmp_path, monkeypatch):
    monkeypatch.setenv("WHESTBOARD_STATE_DIR", str(tmp_path))
    monkeypatch.delenv("WHESTBOARD_DATABASE_URL", raising=False)
    monkeypatch.setenv("WHESTBOARD_REDIS_URL", f"redis://:s3cret@127.0.0.1:{free_port()}/0")
    monkeypatch.setenv("WHESTBOARD_MIN_FREE_MB", "0")  # whatever this machine's disk holds
    report = health.check()
    assert report["live"] is True and report["ok"] is True
    assert report["degraded_by"] == ["redis"] and report["checks"]["redis"]["ok"] is True
    assert "ConnectionError" in report["checks"]["redis"]["error"] and "s3cret" not in json.dumps(report)


def test_healthz_is_degraded_when_the_state_folder_is_short_of_space(tmp_path, monkeypatch):
    monkeypatch.setenv("WHESTBOARD_STATE_DIR", str(tmp_path))
    monkeypatch.delenv("WHESTBOARD_REDIS_URL", raising=False)
    monkeypatch.delenv("WHESTBOARD_DATABASE_URL", raising=False)
    monkeypatch.setenv("WHESTBOARD_MIN_FREE_MB", "1e12")  # more than any disk has
    report = health.check()
    state = report["checks"]["state_dir"]
    assert report["ok"] is True and report["degraded_by"] == ["state_dir"]
    assert state["degraded"] is True and state["free_mb"] < 1e12 and "MiB free" in state["error"]
    monkeypatch.setenv("WHESTBOARD_MIN_FREE_MB", "0")
    assert health.check()["degraded_by"] == []


def _sqlite_io_error() -> Exception:
    """What SQLite itself raises when the disk fills under its shared-memory file (the text is SQLite's)."""
    import sqlite3

    return sqlite3.OperationalError("disk I/O error")


def test_sqlites_io_error_on_a_state_folder_out_of_room_is_the_disk_fault(tmp_path, monkeypatch):
    import shutil

    monkeypatch.setenv("WHESTBOARD_STATE_DIR", str(tmp_path))
    free_mb = shutil.disk_usage(tmp_path).free / 2**20
    monkeypatch.setenv("WHESTBOARD_MIN_FREE_MB", str(free_mb * 2))  # this disk is "full" for the rule
    assert faults.state_disk_low()
    assert faults.classify(_sqlite_io_error()) == faults.DISK
    assert faults.classify_message("sqlite3.OperationalError: disk I/O error") == faults.DISK


def test_sqlites_io_error_on_a_disk_with_room_stays_a_bug(tmp_path, monkeypatch):
    monkeypatch.setenv("WHESTBOARD_STATE_DIR", str(tmp_path))
    monkeypatch.setenv("WHESTBOARD_MIN_FREE_MB", "0")
    assert not faults.state_disk_low()
    assert faults.classify(_sqlite_io_error()) is None
    assert faults.classify_message("disk I/O error") is None
