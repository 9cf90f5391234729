"""Grader records through the page's import and ``POST /api/submissions/import``, and their margins on the team panel.

Each request is made as the browser or a script makes it (the page's callback posted to
``/_dash-update-component``, a multipart POST to the API), on the real app over a fresh store.
"""

from __future__ import annotations

import base64
import io
import json

import pytest

from tests.leaderboard import aicrowd_records as records
from tests.pages.served_app import app_on_fresh_store
from whestboard.leaderboard import board_revision, get_submission, mlp_frame, stored_margins, submission_count

TOKEN = "records-organizer-token"
ORGANIZER = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    folder = tmp_path_factory.mktemp("records-pages")
    files = records.write_records(folder / "records")
    with app_on_fresh_store(folder, WHESTBOARD_ORGANIZER_TOKEN=TOKEN) as (http, _):
        yield http, files


def _strings(value) -> list[str]:
    if isinstance(value, dict):
        return [t for v in value.values() for t in _strings(v)]
    if isinstance(value, list):
        return [t for v in value for t in _strings(v)]
    return [value] if isinstance(value, str) else []


def _texts(component) -> list[str]:
    """The texts a rendered component tree shows, in order (its children only, not its props' names)."""
    if isinstance(component, dict):
        return _texts(component.get("props", {}).get("children"))
    if isinstance(component, list):
        return [t for child in component for t in _texts(child)]
    return [str(component)] if isinstance(component, str | int | float) else []


def page_import(http, name: str, body: bytes, team: str, token: str = TOKEN) -> str:
    """The organizer's upload on the leaderboard page, posted as the renderer posts it; the alert's text."""
    key = next(k for k in http.callback_map if k.startswith("..lb-org-result.children"))
    inputs = [("lb-upload", "contents", ["data:application/json;base64," + base64.b64encode(body).decode()]),
              ("lb-edit", "n_clicks", None), ("lb-delete", "n_clicks", None)]
    state = [("lb-upload", "filename", [name]), ("lb-token", "value", token), ("lb-import-team", "value", team),
             ("lb-import-id", "value", None), ("lb-import-split", "value", "public"), ("lb-edit-id", "value", None),
             ("lb-edit-team", "value", None), ("lb-edit-status", "value", None), ("lb-revision", "data", 0)]
    payload = {"output": key, "outputs": [{"id": "lb-org-result", "property": "children"},
                                          {"id": "lb-revision", "property": "data"}],
               "inputs": [{"id": i, "property": p, "value": v} for i, p, v in inputs],
               "state": [{"id": i, "property": p, "value": v} for i, p, v in state],
               "changedPropIds": ["lb-upload.contents"]}
    response = http.post("/_dash-update-component", json=payload)
    assert response.status_code == 200, response.data[:500]
    return " ".join(_strings(response.get_json()["response"]["lb-org-result"]))


def api_import(http, name: str, body: bytes, team: str):
    return http.post("/api/submissions/import", headers=ORGANIZER, content_type="multipart/form-data",
                     data={"files": [(io.BytesIO(body), name)], "team": team})


def team_panel(http, team: str, round_tag: str) -> list[str]:
    key = "lb-team-panel.children"
    payload = {"output": key, "outputs": {"id": "lb-team-panel", "property": "children"},
               "inputs": [{"id": "lb-team", "property": "value", "value": team},
                          {"id": "lb-revision", "property": "data", "value": 0},
                          {"id": "lb-token", "property": "value", "value": None}],
               "state": [{"id": "lb-round", "property": "data", "value": round_tag}],
               "changedPropIds": ["lb-team.value"]}
    response = http.post("/_dash-update-component", json=payload)
    assert response.status_code == 200, response.data[:500]
    return _texts(response.get_json()["response"]["lb-team-panel"]["children"])


def test_the_pages_import_takes_a_record_and_says_what_it_checked(served):
    http, files = served
    body = files["333364-phase2.json"].read_bytes()
    alert = page_import(http, "333364-phase2.json", body, "alpha")
    assert alert.startswith("Imported 333364-phase2.json: 1 added, 0 updated, 0 unchanged.")
    assert ("333364-phase2.json (submission 333364): public score 5.358e-09 recomputed from its 50 scored MLPs with "
            "whestbench.budget.score_multiplier as") in alert
    sub = get_submission("333364")
    assert sub.team == "alpha" and sub.adjusted_score == json.loads(body)["results"]["aggregates"]["public"]["score"]
    # re-imported unchanged through the page: the same id, nothing added
    again = page_import(http, "333364-phase2.json", body, "alpha")
    assert again.startswith("Imported 333364-phase2.json: 0 added, 0 updated, 1 unchanged.")
    # without the token nothing is read at all
    assert page_import(http, "333364-phase2.json", body, "alpha", token="wrong").startswith("Refused:")


def test_the_pages_import_refuses_a_failed_record_and_changes_nothing(served):
    http, files = served
    before = (submission_count(), board_revision())
    alert = page_import(http, "333489-smoke-failed.json", files["333489-smoke-failed.json"].read_bytes(), "alpha")
    assert "1 problem(s) found; nothing was imported" in alert
    assert ("333489-smoke-failed.json (submission 333489): it failed in the grader's smoke test, before any MLP was "
            "scored: FLOPSCOPE_SERVER_ERROR (the record's own error is empty)") in alert
    assert (submission_count(), board_revision()) == before


def test_the_api_imports_records_and_answers_with_what_it_checked(served):
    http, files = served
    body = files["324969-phase1-wrapped.json"].read_bytes()
    answer = api_import(http, "324969.json", body, "gamma")
    assert answer.status_code == 200, answer.data[:500]
    data = answer.get_json()
    assert data["inserted"] == ["324969"] and data["notes"][0].endswith(
        "equal to relative 1e-06 (the record is at full precision)")
    again = api_import(http, "324969.json", body, "gamma").get_json()
    assert (again["inserted"], again["updated"], again["unchanged"]) == ([], [], ["324969"])
    refused = api_import(http, "333363.json", files["333363-failed.json"].read_bytes(), "gamma")
    assert refused.status_code == 400
    assert refused.get_json()["problems"] == [
        "333363.json (submission 333363): the grader failed it with SUBMISSION_VALIDATION_ERROR: Prohibited file in "
        "submission: vendor/numpy/_core/_multiarray_umath.so; a failed submission has no score, so nothing was "
        "imported"]
    assert get_submission("333363") is None


def test_the_team_panel_shows_how_close_the_best_submission_came_to_each_cap(served):
    http, files = served
    assert api_import(http, "f.json", files["333412-failures.json"].read_bytes(), "beta").status_code == 200
    shown = " ".join(team_panel(http, "beta", "v2-phase2"))
    margins = stored_margins(mlp_frame(["333412"], splits=("public",)), "v2-phase2")
    wall = next(m for m in margins.margins if m.key == "wall")
    label, used = wall.closest_passing
    # the panel reads the public half the store keeps; the import note spoke of all 100 MLPs
    assert "How close its best submission (333412) came to each cap on its 50 public MLPs" in shown
    assert (f"predict wall time 121.8 s of 120.0 s (102%, {wall.worst_label}) 1.84 s past it; the closest that "
            f"passed: {used:.1f} s ({used / 120:.0%}, {label}) 2 of 50 over") in shown
    assert "Where predict's wall time went (mean per MLP over 50): participant code 0.1" in shown
    # and a Phase 1 record's priced residual time, on its own team's panel
    shown = " ".join(team_panel(http, "gamma", "v1-phase1"))
    assert "charged compute C = F + 1e11 R" in shown and "more residual time)" in shown
    assert "predict wall time 57.9 s of 60.0 s (96%" in shown and "edge" in shown
