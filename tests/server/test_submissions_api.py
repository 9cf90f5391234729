"""Organizer actions are refused by the server without the token, and nothing changes."""

from __future__ import annotations

import io
import sqlite3
from pathlib import Path

import pandas as pd
import pytest
from flask import Flask

from server import api as organizer_api
from tests.leaderboard import submissions_helpers as helpers
from tests.leaderboard.submissions_helpers import submission_row, write_csvs
from whestboard.leaderboard import (
    MAX_COUNTED_PROBLEMS,
    MAX_SHOWN_PROBLEMS,
    ORGANIZER_COLUMNS,
    bearer_token,
    board_revision,
    get_submission,
    import_files,
    is_organizer,
    mlp_frame,
    submission_count,
    submissions_frame,
)
from whestboard.store import reset_engines

sqlite_store = helpers.sqlite_store
TOKEN = "correct horse battery staple"


@pytest.fixture()
def client(sqlite_store, monkeypatch):
    monkeypatch.setenv("WHESTBOARD_ORGANIZER_TOKEN", TOKEN)
    app = Flask(__name__)
    app.register_blueprint(organizer_api.blueprint)
    return app.test_client()


@pytest.fixture(scope="module")
def seeded_store(tmp_path_factory) -> Path:
    """A store with two submissions imported, built once: each test gets a copy of its file, so it
    starts from the same committed rows and snapshots without importing them again."""
    folder = tmp_path_factory.mktemp("seeded")
    url = f"sqlite:///{folder / 'store.sqlite'}"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("WHESTBOARD_STATE_DIR", str(folder / "state"))
        import_files([write_csvs(folder / "seed", [submission_row("s-1", "alpha"), submission_row("s-2", "beta")])],
                     url=url)
    reset_engines()
    return folder / "store.sqlite"


@pytest.fixture()
def seeded(client, sqlite_store, seeded_store):
    with sqlite3.connect(seeded_store) as seed, sqlite3.connect(sqlite_store.removeprefix("sqlite:///")) as copy:
        seed.backup(copy)
    return client


def _snapshot():
    return submissions_frame(), mlp_frame(), board_revision()


def _unchanged(before) -> None:
    pd.testing.assert_frame_equal(submissions_frame(), before[0])
    pd.testing.assert_frame_equal(mlp_frame(), before[1])
    assert board_revision() == before[2]


def _upload(client, headers, tmp_path):
    path = write_csvs(tmp_path / "up", [submission_row("u-1", "gamma")])
    data = {"files": [(io.BytesIO(path.read_bytes()), "up.csv"),
                      (io.BytesIO(path.with_name(path.stem + ".per_mlp.csv").read_bytes()), "up.per_mlp.csv")]}
    return client.post("/api/submissions/import", data=data, headers=headers, content_type="multipart/form-data")


BAD_HEADERS = [
    {},
    {"Authorization": "Bearer wrong"},
    {"Authorization": f"Basic {TOKEN}"},
    {"Authorization": f"Bearer {TOKEN}x"},
]


@pytest.mark.parametrize("headers", BAD_HEADERS, ids=["none", "wrong", "not-bearer", "longer"])
def test_writes_without_the_token_are_refused_and_change_nothing(seeded, tmp_path, headers):
    before = _snapshot()
    assert _upload(seeded, headers, tmp_path).status_code == 403
    assert seeded.delete("/api/submissions/s-1", headers=headers).status_code == 403
    response = seeded.patch("/api/submissions/s-1", json={"team": "mallory"}, headers=headers)
    assert response.status_code == 403
    assert response.get_json()["error"] == "missing or wrong organizer token"
    _unchanged(before)


def test_without_a_configured_token_organizer_actions_are_disabled(seeded, tmp_path, monkeypatch):
    monkeypatch.delenv("WHESTBOARD_ORGANIZER_TOKEN")
    before = _snapshot()
    for headers in ({}, {"Authorization": "Bearer "}, {"Authorization": f"Bearer {TOKEN}"}):
        response = seeded.delete("/api/submissions/s-1", headers=headers)
        assert response.status_code == 403
        assert "disabled" in response.get_json()["error"]
        assert _upload(seeded, headers, tmp_path).status_code == 403
    _unchanged(before)


def test_the_organizer_can_import_edit_and_delete(seeded, tmp_path):
    headers = {"Authorization": f"Bearer {TOKEN}"}
    response = _upload(seeded, headers, tmp_path)
    assert response.status_code == 200, response.get_json()
    assert response.get_json()["inserted"] == ["u-1"]
    assert seeded.patch("/api/submissions/u-1", json={"team": "gamma two"}, headers=headers).status_code == 200
    assert get_submission("u-1").team == "gamma two"
    assert seeded.patch("/api/submissions/u-1", json={"adjusted_score": 0}, headers=headers).status_code == 400
    assert seeded.delete("/api/submissions/u-1", headers=headers).status_code == 200
    assert seeded.delete("/api/submissions/u-1", headers=headers).status_code == 404
    assert submission_count() == 2


def test_a_bad_upload_reports_every_problem_and_imports_nothing(seeded, tmp_path):
    row, _ = submission_row("u-9", "gamma")
    row["adjusted_score"] = "n/a"
    other, _ = submission_row("u-10", "gamma", round_tag="v0")
    body = pd.DataFrame([row, other]).to_csv(index=False).encode()
    before = _snapshot()
    response = seeded.post("/api/submissions/import", headers={"Authorization": f"Bearer {TOKEN}"},
                           data={"files": [(io.BytesIO(body), "bad.csv")]}, content_type="multipart/form-data")
    assert response.status_code == 400
    problems = response.get_json()["problems"]
    assert any("line 2" in p and "adjusted_score" in p for p in problems)
    assert any("line 3" in p and "round is 'v0'" in p for p in problems)
    _unchanged(before)


def test_export_is_public(seeded):
    response = seeded.get("/api/submissions.csv")
    assert response.status_code == 200
    table = pd.read_csv(io.StringIO(response.get_data(as_text=True)))
    assert sorted(table["submission_id"]) == ["s-1", "s-2"]
    assert seeded.get("/api/submissions/per_mlp.csv").status_code == 200


def test_token_check_is_exact(monkeypatch):
    monkeypatch.setenv("WHESTBOARD_ORGANIZER_TOKEN", TOKEN)
    assert is_organizer(TOKEN)
    assert not is_organizer(TOKEN[:-1])
    assert not is_organizer("")
    assert not is_organizer(None)
    assert bearer_token(f"Bearer {TOKEN}") == TOKEN
    assert bearer_token("Bearer") is None


# ---------------------------------------------------------------------------
# hostile input through the API: a message, a small body, nothing stored
# ---------------------------------------------------------------------------

ORGANIZER = {"Authorization": f"Bearer {TOKEN}"}


def _post_files(client, *files):
    return client.post("/api/submissions/import", headers=ORGANIZER, content_type="multipart/form-data",
                       data={"files": [(io.BytesIO(body), name) for name, body in files], "team": "gamma"})


def test_deeply_nested_json_is_refused_with_a_message(seeded):
    before = _snapshot()
    response = _post_files(seeded, ("deep.json", b"[" * 10_000 + b"]" * 10_000))
    assert response.status_code == 400
    body = response.get_json()
    assert body["problems"] == ["deep.json: not a `whest run --json` report: its JSON nests more than 64 levels "
                                "deep (a report nests about 10)"]
    _unchanged(before)


def test_a_flood_of_bad_rows_gets_a_small_answer_with_counts(seeded):
    header = "submission_id,team,round,submitted_at,status,whestbench_version\n"
    body = (header + ",,,,,\n" * 1_000_000).encode()
    before = _snapshot()
    response = _post_files(seeded, ("flood.csv", body))
    assert response.status_code == 400
    assert len(response.data) < 20_000
    answer = response.get_json()
    assert len(answer["problems"]) == MAX_SHOWN_PROBLEMS
    assert answer["problems"][0] == "flood.csv line 2: submission_id is missing"
    assert answer["problem_count"] >= MAX_COUNTED_PROBLEMS and answer["complete"] is False
    assert answer["error"].startswith(f"at least {answer['problem_count']:,} problems found (checking stopped at "
                                      "flood.csv line ")
    # a blank whestbench_version is no problem: it imports as unknown
    assert set(answer["problem_counts"]) == {"submission_id", "team", "round", "submitted_at", "status"}
    _unchanged(before)


def test_nul_bytes_are_refused_row_by_row(seeded):
    row, _ = submission_row("n\x00ul", "nul\x00team")
    before = _snapshot()
    response = _post_files(seeded, ("nul.csv", pd.DataFrame([row]).to_csv(index=False).encode()))
    assert response.status_code == 400
    problems = response.get_json()["problems"]
    assert problems == [
        "nul.csv line 2 (submission_id 'n\\x00ul'): submission_id contains the control character U+0000 at "
        "character 2; text may not hold control characters (NUL, tab, line breaks, ...)",
        "nul.csv line 2 (submission_id 'n\\x00ul'): team contains the control character U+0000 at character 4; "
        "text may not hold control characters (NUL, tab, line breaks, ...)",
    ]
    _unchanged(before)


def test_an_upload_over_the_limit_is_refused_before_it_is_read(seeded, monkeypatch):
    monkeypatch.setenv("WHESTBOARD_UPLOAD_MAX_MB", str(8 / 1024))  # read at the request
    before = _snapshot()
    response = _post_files(seeded, ("big.csv", b"x" * 20_000))
    assert response.status_code == 413
    assert response.get_json()["error"].startswith("request larger than 8 KiB; nothing was changed")
    _unchanged(before)


def test_hostile_edits_are_refused(seeded):
    before = _snapshot()
    deep = seeded.patch("/api/submissions/s-1", data=b"[" * 10_000 + b"]" * 10_000, headers=ORGANIZER,
                        content_type="application/json")
    assert deep.status_code == 400 and deep.get_json()["error"] == "send a JSON object of the fields to change"
    nul = seeded.patch("/api/submissions/s-1", json={"team": "x\x00"}, headers=ORGANIZER)
    assert nul.status_code == 400 and "team contains the control character U+0000" in nul.get_json()["error"]
    odd = seeded.patch("/api/submissions/s-1", json={"team": {"a": 1}, "status": "graded"}, headers=ORGANIZER)
    assert odd.status_code == 400 and odd.get_json()["error"] == "team must be text"
    when = seeded.patch("/api/submissions/s-1", json={"submitted_at": [1]}, headers=ORGANIZER)
    assert when.status_code == 400
    huge = seeded.patch("/api/submissions/s-1", json={"estimator": "x" * 100_000}, headers=ORGANIZER)
    assert huge.status_code == 413 and "64 KiB" in huge.get_json()["error"]
    _unchanged(before)


def test_the_public_export_neutralises_formulas(seeded, tmp_path):
    row, mlps = submission_row("=2+3", "@evil", estimator="-1+1")
    assert _post_files(seeded, ("f.csv", pd.DataFrame([row]).to_csv(index=False).encode()),
                       ("f.per_mlp.csv", pd.DataFrame(mlps).to_csv(index=False).encode())).status_code == 200
    text = seeded.get("/api/submissions.csv").get_data(as_text=True)
    table = pd.read_csv(io.StringIO(text), dtype=str, keep_default_na=False).set_index("submission_id")
    assert table.loc["'=2+3", "team"] == "'@evil" and table.loc["'=2+3", "estimator"] == "'-1+1"
    per_mlp = pd.read_csv(io.StringIO(seeded.get("/api/submissions/per_mlp.csv").get_data(as_text=True)), dtype=str)
    assert set(per_mlp["submission_id"]) == {"s-1", "s-2", "'=2+3"}
    before = _snapshot()
    again = _post_files(seeded, ("all.csv", text.encode()))
    assert again.status_code == 200 and again.get_json()["updated"] == [] and again.get_json()["inserted"] == []
    _unchanged(before)


# ---------------------------------------------------------------------------
# private and rerun results: only with the organizer token
# ---------------------------------------------------------------------------


def _numbers(value) -> list[float]:
    """Every number anywhere in a JSON value."""
    if isinstance(value, dict):
        return [n for v in value.values() for n in _numbers(v)]
    if isinstance(value, list):
        return [n for v in value for n in _numbers(v)]
    return [float(value)] if isinstance(value, int | float) and not isinstance(value, bool) else []


def _private_numbers(values: dict) -> list[float]:
    return [n for k, v in values.items() for n in (v if k.endswith("_mlps") else [v])]


def test_private_and_rerun_rankings_need_the_token(client, tmp_path):
    private = helpers.split_board(tmp_path)
    for split in ("private", "rerun"):
        for headers in ({}, {"Authorization": "Bearer wrong"}):
            response = client.get(f"/api/leaderboard/v1-warmup?split={split}", headers=headers)
            assert response.status_code == 403
            assert response.get_json()["error"] == (f"the {split} split is shown only with the organizer token: "
                                                    "send Authorization: Bearer TOKEN")
    public = client.get("/api/leaderboard/v1-warmup")
    assert public.status_code == 200
    rows = public.get_json()["rows"]
    assert [r["team"] for r in rows] == ["alpha", "beta", "gamma", "delta"]
    assert not set(rows[0]) & set(ORGANIZER_COLUMNS)
    leaked = [n for n in _numbers(public.get_json()) for p in _private_numbers(private) if n == pytest.approx(p)]
    assert leaked == []
    organizer = client.get("/api/leaderboard/v1-warmup?split=private", headers=ORGANIZER).get_json()["rows"]
    assert {r["team"]: r["adjusted_score"] for r in organizer}["alpha"] == pytest.approx(private["alpha_private"])
    rerun = client.get("/api/leaderboard/v1-warmup?split=rerun", headers=ORGANIZER).get_json()["rows"]
    assert [(r["team"], r["failures"]) for r in rerun] == [("beta", "1 time")]
    assert client.get("/api/leaderboard/v1-warmup?split=hidden").status_code == 400
    assert client.get("/api/leaderboard/v9").status_code == 404


def test_the_public_per_mlp_export_holds_only_public_mlps(client, tmp_path):
    private = helpers.split_board(tmp_path)
    public = pd.read_csv(io.StringIO(client.get("/api/submissions/per_mlp.csv").get_data(as_text=True)))
    assert set(public["split"]) == {"public"} and len(public) == 22
    assert not any(v == pytest.approx(p) for v in public["adjusted_score"] for p in _private_numbers(private))
    wrong = client.get("/api/submissions/per_mlp.csv", headers={"Authorization": "Bearer wrong"})
    assert set(pd.read_csv(io.StringIO(wrong.get_data(as_text=True)))["split"]) == {"public"}
    full = pd.read_csv(io.StringIO(client.get("/api/submissions/per_mlp.csv", headers=ORGANIZER)
                                   .get_data(as_text=True)))
    assert full.groupby("split").size().to_dict() == {"private": 22, "public": 22, "rerun": 4}


def test_a_report_imported_through_the_api_can_name_its_split(client, tmp_path):
    helpers.split_board(tmp_path)
    rows = pd.DataFrame([{"submission_id": "a-1", "mlp_index": i, "final_layer_mse": 1e-5, "adjusted_score": 1e-6,
                          "split": "rerun"} for i in range(2)])
    response = client.post("/api/submissions/import", headers=ORGANIZER, content_type="multipart/form-data",
                           data={"files": [(io.BytesIO(rows.to_csv(index=False).encode()), "rerun.per_mlp.csv")]})
    assert response.status_code == 200 and response.get_json()["updated"] == ["a-1"]
    bad = client.post("/api/submissions/import", headers=ORGANIZER, content_type="multipart/form-data",
                      data={"files": [(io.BytesIO(b"{}"), "r.json")], "split": "secret"})
    assert bad.status_code == 400 and bad.get_json()["problems"] == [
        "split is 'secret'; write one of public, private, rerun"]


def test_a_finals_own_rows_leave_the_server_only_in_the_organizers_export(seeded):
    """A final's row (source ``final``, no public numbers, a rerun split) is no submission of the board:
    the public export leaves it out; the organizer's keeps it, as the organizer's per-MLP export keeps its
    rerun results, so the two files import whole."""
    from whestboard.leaderboard import FINAL_SOURCE, MLPResult, Submission, upsert

    upsert([Submission(submission_id="final:v1-warmup:alpha", team="alpha", round="v1-warmup",
                       submitted_at=pd.Timestamp("2026-12-02", tz="UTC").to_pydatetime(), status="graded",
                       whestbench_version="0.16.2",
                       source=FINAL_SOURCE, nominated=True, n_mlps=1)],
           [MLPResult(submission_id="final:v1-warmup:alpha", mlp_index=0, split="rerun", final_layer_mse=0.5,
                      adjusted_score=0.5)])
    organizer = {"Authorization": f"Bearer {TOKEN}"}
    public = seeded.get("/api/submissions.csv").get_data(as_text=True)
    full = seeded.get("/api/submissions.csv", headers=organizer).get_data(as_text=True)
    assert "final:v1-warmup:alpha" not in public and "s-1" in public
    assert "final:v1-warmup:alpha" in full and set(public.splitlines()) < set(full.splitlines())
    assert "final:v1-warmup:alpha" in seeded.get("/api/submissions/per_mlp.csv", headers=organizer).get_data(
        as_text=True)
