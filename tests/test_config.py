"""Settings read by ``whestboard.config`` when asked, not when imported."""

from __future__ import annotations

import pytest

from whestboard import config


def test_upload_limit_is_read_when_asked(monkeypatch):
    monkeypatch.delenv("WHESTBOARD_UPLOAD_MAX_MB", raising=False)
    assert config.upload_max_bytes() == 64 << 20
    from whestbench.limits import MAX_SUBMISSION_BYTES

    assert config.upload_max_bytes() >= MAX_SUBMISSION_BYTES  # every documented upload gets through
    monkeypatch.setenv("WHESTBOARD_UPLOAD_MAX_MB", "0.5")
    assert config.upload_max_bytes() == 512 << 10
    monkeypatch.setenv("WHESTBOARD_UPLOAD_MAX_MB", "lots")
    with pytest.raises(ValueError, match="WHESTBOARD_UPLOAD_MAX_MB='lots' is not a number of MiB"):
        config.upload_max_bytes()


def test_cache_bytes_is_read_when_asked(monkeypatch):
    monkeypatch.delenv("WHESTBOARD_CACHE_BYTES", raising=False)
    assert config.cache_bytes() == 1 << 30
    monkeypatch.setenv("WHESTBOARD_CACHE_BYTES", "4096")
    assert config.cache_bytes() == 4096


def test_kept_estimators_are_named_by_their_file_or_folder(monkeypatch, tmp_path):
    monkeypatch.setenv("WHESTBOARD_KEPT_ESTIMATORS", f"{tmp_path / 'house.py'}:{tmp_path / 'team'}:"
                                                     f"{tmp_path / 'pkg.tar.gz'}")
    assert config.kept_estimators() == {"house": tmp_path / "house.py", "team": tmp_path / "team",
                                        "pkg": tmp_path / "pkg.tar.gz"}
    monkeypatch.setenv("WHESTBOARD_KEPT_ESTIMATORS", f"{tmp_path / 'a' / 'x.py'}:{tmp_path / 'b' / 'x'}")
    with pytest.raises(ValueError, match="WHESTBOARD_KEPT_ESTIMATORS names 'x' twice"):
        config.kept_estimators()
    monkeypatch.delenv("WHESTBOARD_KEPT_ESTIMATORS")
    assert config.kept_estimators() == {}


def test_the_uploads_switch_is_opt_in_in_a_served_process(monkeypatch):
    import sys

    monkeypatch.delenv("WHESTBOARD_ALLOW_UPLOADS", raising=False)
    monkeypatch.setattr(sys, "argv", ["/venv/bin/celery", "-A", "worker", "worker"])
    assert config.served_process() and not config.uploads_allowed()
    monkeypatch.setattr(sys, "argv", ["app.py"])
    assert config.uploads_allowed() is (not config.served_process())
    monkeypatch.setenv("WHESTBOARD_ALLOW_UPLOADS", "0")
    assert not config.uploads_allowed(under_gunicorn=False)
