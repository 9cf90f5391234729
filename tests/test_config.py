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
