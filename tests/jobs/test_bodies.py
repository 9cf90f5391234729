"""Job bodies by name: registered by the package that owns the work, found by a worker that has not
imported it yet, and spread only where a broker is configured (the caller is told why not otherwise)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.conftest import REPO
from whestboard.jobs import register_body, spread
from whestboard.jobs._celery import run_body


def test_a_body_runs_by_its_kind_and_an_unknown_kind_is_refused_in_words():
    register_body("test-double", lambda payload: payload["x"] * 2)
    assert run_body("test-double", {"x": 21}) == 42
    with pytest.raises(LookupError, match="no job body 'nobody-registered-this'"):
        run_body("nobody-registered-this", {}, "os")  # only whestboard's modules are imported for a body


def test_a_worker_that_never_imported_the_package_finds_its_body_through_the_task():
    """What a ``celery -A worker worker`` process does with a task: the task names the registering module."""
    code = ("import sys; from whestboard.jobs._celery import run_body, _bodies; assert 'final-team' not in _bodies; "
            "run_body('final-team', {}, 'whestboard.final._dispatch')")
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert "KeyError: 'round'" in done.stderr  # the final's body ran (and asked its payload for a round)


def test_without_redis_nothing_is_sent_and_the_caller_is_told_why(monkeypatch):
    monkeypatch.delenv("WHESTBOARD_REDIS_URL", raising=False)
    sent = spread("test-double", [{"x": 1}])
    assert sent.handles == [] and sent.local == "WHESTBOARD_REDIS_URL is not set"
