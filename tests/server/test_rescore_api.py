"""The re-score API: organizer only, and a submission imported from a file is refused in words."""

from __future__ import annotations

import pytest

from tests.leaderboard import submissions_helpers as helpers
from tests.server.test_submissions_api import BAD_HEADERS, TOKEN, client, seeded, seeded_store  # noqa: F401 - fixtures
from whestboard.jobs import recent_jobs
from whestboard.leaderboard import submissions_frame

sqlite_store = helpers.sqlite_store
AUTH = {"Authorization": f"Bearer {TOKEN}"}


@pytest.mark.parametrize("headers", BAD_HEADERS, ids=["none", "wrong", "not-bearer", "longer"])
def test_a_rescore_without_the_token_is_refused(seeded, headers):  # noqa: F811
    assert seeded.post("/api/rescore", json={"id": "s-1"}, headers=headers).status_code == 403
    assert seeded.get("/api/rescore/q1", headers=headers).status_code == 403


def test_a_submission_from_a_file_has_no_package_to_rescore(seeded):  # noqa: F811
    before = submissions_frame()
    answer = seeded.post("/api/rescore", json={"id": "s-1"}, headers=AUTH)
    assert answer.status_code == 400
    assert answer.get_json()["error"].startswith("submission s-1 was imported from a file: no package of it is "
                                                 "stored here, so it cannot be re-scored")
    unknown = seeded.post("/api/rescore", json={"id": "nope"}, headers=AUTH)
    assert unknown.status_code == 400 and "no run 'nope'" in unknown.get_json()["error"]
    assert seeded.post("/api/rescore", json={}, headers=AUTH).status_code == 400
    assert submissions_frame().equals(before) and recent_jobs() == []
    status = seeded.get("/api/rescore/q-unknown", headers=AUTH).get_json()
    assert status == {"ok": False, "finished": True, "message": "Job q-unknown is not known to this server."}
