"""Organizer grants: what a job carries instead of the organizer token."""

from __future__ import annotations

import pytest

from whestboard.leaderboard import GRANT_TTL_S, OrganizerDenied, organizer_grant, require_grant
from whestboard.store import reset_engines

TOKEN = "grant-test-organizer-token"
SUBJECT = {"round": "v1-warmup", "seed": "7", "n": "2", "samples": "1000", "extra": "2",
           "lines": ["alpha=upload:" + "a" * 64]}


@pytest.fixture(autouse=True)
def store(tmp_path, monkeypatch):
    monkeypatch.setenv("WHESTBOARD_STATE_DIR", str(tmp_path))
    monkeypatch.delenv("WHESTBOARD_DATABASE_URL", raising=False)
    monkeypatch.setenv("WHESTBOARD_ORGANIZER_TOKEN", TOKEN)
    reset_engines()
    yield
    reset_engines()


def test_a_grant_is_issued_only_for_the_token_and_holds_nothing_of_it():
    with pytest.raises(OrganizerDenied, match="wrong organizer token"):
        organizer_grant("guess", SUBJECT)
    grant = organizer_grant(TOKEN, SUBJECT, now=1_000_000)
    assert TOKEN not in grant and TOKEN.encode().hex() not in grant
    require_grant(grant, dict(SUBJECT), now=1_000_000 + GRANT_TTL_S)  # the same request, within its time


@pytest.mark.parametrize("change", ["seed", "lines", "round"])
def test_a_grant_covers_its_own_request_only(change):
    grant = organizer_grant(TOKEN, SUBJECT)
    other = dict(SUBJECT, **{change: ["mallory=upload:" + "b" * 64] if change == "lines" else "other"})
    with pytest.raises(OrganizerDenied, match="no organizer grant for what it asks"):
        require_grant(grant, other)


def test_a_grant_expires_and_dies_with_a_new_token(monkeypatch):
    grant = organizer_grant(TOKEN, SUBJECT, now=1_000_000)
    with pytest.raises(OrganizerDenied, match="expired"):
        require_grant(grant, SUBJECT, now=1_000_000 + GRANT_TTL_S + 1)
    fresh = organizer_grant(TOKEN, SUBJECT)
    monkeypatch.setenv("WHESTBOARD_ORGANIZER_TOKEN", "the rotated token")
    with pytest.raises(OrganizerDenied, match="no organizer grant"):
        require_grant(fresh, SUBJECT)
    monkeypatch.delenv("WHESTBOARD_ORGANIZER_TOKEN")
    with pytest.raises(OrganizerDenied, match="disabled"):
        require_grant(fresh, SUBJECT)


@pytest.mark.parametrize("forged", [None, "", "123", "9999999999.", "9999999999." + "0" * 64, TOKEN, 42])
def test_anything_but_an_issued_grant_is_refused(forged):
    with pytest.raises(OrganizerDenied):
        require_grant(forged, SUBJECT)


def test_a_launched_job_keeps_its_grant_while_it_waits_for_a_worker():
    """The launcher refuses an expired grant; the job it admitted checks its request and the token, not the
    clock (tests/server/test_edge_requests.py runs the final's job body on one)."""
    issued = organizer_grant(TOKEN, SUBJECT, now=1_000_000)
    with pytest.raises(OrganizerDenied, match="expired"):
        require_grant(issued, SUBJECT, now=1_000_000 + GRANT_TTL_S + 1)
    require_grant(issued, SUBJECT, now=1_000_000 + 10 * GRANT_TTL_S, admitted=True)
    with pytest.raises(OrganizerDenied, match="no organizer grant"):
        require_grant(issued, dict(SUBJECT, seed="8"), admitted=True)
