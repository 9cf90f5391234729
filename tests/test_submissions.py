"""Import, upsert and export of graded submissions, on SQLite and on a real PostgreSQL server."""

from __future__ import annotations

import pandas as pd
import pytest

from tests import submissions_helpers as helpers
from tests.submissions_helpers import submission_row, write_csvs
from whestboard import submission_import as si
from whestboard import submissions as store

# fixtures shared by the submissions tests
postgres_server, store_url, sqlite_store = helpers.postgres_server, helpers.store_url, helpers.sqlite_store


def _three(folder):
    rows = [
        submission_row("a-1", "alpha", scores=(1e-5, 2e-5), minutes=0),
        submission_row("a-2", "alpha", scores=(5e-6, 9e-6), minutes=5),
        submission_row("b-1", "beta", scores=(4e-5, 1e-4), failed=(False, True), minutes=7),
    ]
    return write_csvs(folder, rows), rows


def test_valid_file_imports_every_row(store_url, tmp_path):
    path, rows = _three(tmp_path)
    report = si.import_files([path], url=store_url)
    assert sorted(report.inserted) == ["a-1", "a-2", "b-1"]
    df = store.frame(url=store_url).set_index("submission_id")
    for row, _mlps in rows:
        got = df.loc[row["submission_id"]]
        assert got["team"] == row["team"]
        assert got["adjusted_score"] == row["adjusted_score"]
        assert got["final_layer_mse"] == row["final_layer_mse"]
        assert got["mean_multiplier"] == row["mean_multiplier"]
        assert got["n_failed_mlps"] == row["n_failed_mlps"]
        assert got["submitted_at"] == pd.Timestamp(row["submitted_at"])
    per_mlp = store.mlp_frame(url=store_url)
    assert len(per_mlp) == sum(len(m) for _, m in rows)
    assert per_mlp.loc[per_mlp["submission_id"] == "b-1", "failed"].tolist() == [False, True]


def test_importing_twice_changes_nothing(store_url, tmp_path):
    path, _ = _three(tmp_path)
    si.import_files([path], url=store_url)
    before = (store.frame(url=store_url), store.mlp_frame(url=store_url), store.revision(url=store_url))
    report = si.import_files([path], url=store_url)
    assert report.inserted == [] and report.updated == []
    assert sorted(report.unchanged) == ["a-1", "a-2", "b-1"]
    pd.testing.assert_frame_equal(store.frame(url=store_url), before[0])
    pd.testing.assert_frame_equal(store.mlp_frame(url=store_url), before[1])
    assert store.revision(url=store_url) == before[2]
    assert store.count(url=store_url) == 3


def test_reimport_updates_instead_of_duplicating(store_url, tmp_path):
    path, _ = _three(tmp_path)
    si.import_files([path], url=store_url)
    regraded = write_csvs(tmp_path / "v2", [submission_row("a-1", "alpha renamed", scores=(3e-6, 3e-6))])
    report = si.import_files([regraded], url=store_url)
    assert report.updated == ["a-1"]
    assert store.count(url=store_url) == 3
    got = store.get("a-1", url=store_url)
    assert got.team == "alpha renamed" and got.adjusted_score == 3e-6
    per_mlp = store.mlp_frame(["a-1"], url=store_url)
    assert per_mlp["adjusted_score"].tolist() == [3e-6, 3e-6]


def test_bad_rows_are_each_reported_and_nothing_is_imported(store_url, tmp_path):
    good, _ = submission_row("ok-1", "alpha")
    bad_round, _ = submission_row("bad-round", "alpha", round_tag="v9-nope")
    bad_score, _ = submission_row("bad-score", "beta")
    bad_score["adjusted_score"] = "lots"
    no_team, _ = submission_row("no-team", "")
    bad_time, _ = submission_row("bad-time", "gamma")
    bad_time["submitted_at"] = "yesterday"
    negative, _ = submission_row("neg", "delta")
    negative["final_layer_mse"] = -1.0
    path = tmp_path / "bad.csv"
    pd.DataFrame([good, bad_round, bad_score, no_team, bad_time, negative]).to_csv(path, index=False)
    with pytest.raises(si.ImportRejected) as err:
        si.import_files([path], url=store_url)
    problems = err.value.problems
    assert any("line 3" in p and "round is 'v9-nope'" in p for p in problems)
    assert any("line 4" in p and "adjusted_score is 'lots', not a number" in p for p in problems)
    assert any("line 5" in p and "team is missing" in p for p in problems)
    assert any("line 6" in p and "submitted_at is 'yesterday'" in p for p in problems)
    assert any("line 7" in p and "final_layer_mse is -1" in p for p in problems)
    assert not any("line 2" in p for p in problems)
    assert store.count(url=store_url) == 0
    assert store.mlp_frame(url=store_url).empty


def test_per_mlp_results_must_agree_with_their_submission(store_url, tmp_path):
    row, mlps = submission_row("x-1", "alpha", scores=(1e-5, 3e-5))
    row["adjusted_score"] = 9e-5  # not the mean of its MLPs
    orphan = dict(mlps[0], submission_id="ghost")
    path = tmp_path / "s.csv"
    pd.DataFrame([row]).to_csv(path, index=False)
    pd.DataFrame([*mlps, mlps[0], orphan]).to_csv(tmp_path / "s.per_mlp.csv", index=False)
    with pytest.raises(si.ImportRejected) as err:
        si.import_files([path], url=store_url)
    text = "\n".join(err.value.problems)
    assert "adjusted_score is 9e-05 but its per-MLP values average to" in text
    assert "list MLP 0 of 'x-1' twice" in text
    assert "'ghost', which is not in this import's submissions file" in text
    assert store.count(url=store_url) == 0


def test_unknown_and_missing_columns_are_named(sqlite_store, tmp_path):
    path = tmp_path / "cols.csv"
    pd.DataFrame([{"submission_id": "a", "teem": "x"}]).to_csv(path, index=False)
    with pytest.raises(si.ImportRejected) as err:
        si.import_files([path])
    text = "\n".join(err.value.problems)
    assert "missing column(s) team, round, submitted_at, status, whestbench_version" in text
    assert "unknown column(s) teem" in text


def test_duplicate_ids_in_one_import_are_refused(sqlite_store, tmp_path):
    row, _ = submission_row("dup", "alpha")
    path = tmp_path / "dup.csv"
    pd.DataFrame([row, row]).to_csv(path, index=False)
    with pytest.raises(si.ImportRejected, match="'dup' appears 2 times"):
        si.import_files([path])
    assert store.count() == 0


def test_parquet_imports_like_csv(sqlite_store, tmp_path):
    csv_path, rows = _three(tmp_path / "csv")
    pq = tmp_path / "pq"
    pq.mkdir()
    pd.read_csv(csv_path).to_parquet(pq / "subs.parquet")
    pd.read_csv(tmp_path / "csv" / "subs.per_mlp.csv").to_parquet(pq / "subs.per_mlp.parquet")
    report = si.import_files([pq / "subs.parquet"])
    assert len(report.inserted) == 3
    assert len(store.mlp_frame()) == sum(len(m) for _, m in rows)


def test_export_round_trips_exactly(store_url, tmp_path):
    path, _ = _three(tmp_path)
    si.import_files([path], url=store_url)
    out, sibling = si.export(tmp_path / "out" / "all.csv", url=store_url)
    assert sibling is not None and sibling.name == "all.per_mlp.csv"
    report = si.import_files([out], url=store_url)
    assert report.inserted == [] and report.updated == [] and len(report.unchanged) == 3
    exported = pd.read_csv(out)
    assert list(exported.columns) == list(store.SUBMISSION_FIELDS)


def test_edit_and_delete(store_url, tmp_path):
    path, _ = _three(tmp_path)
    si.import_files([path], url=store_url)
    assert store.edit("a-1", {"team": "alpha prime", "status": "failed"}, url=store_url)
    assert store.get("a-1", url=store_url).team == "alpha prime"
    with pytest.raises(ValueError, match="cannot edit adjusted_score"):
        store.edit("a-1", {"adjusted_score": 0.0}, url=store_url)
    assert not store.edit("nope", {"team": "x"}, url=store_url)
    assert store.delete_submission("b-1", url=store_url)
    assert not store.delete_submission("b-1", url=store_url)
    assert store.count(url=store_url) == 2
    assert "b-1" not in set(store.mlp_frame(url=store_url)["submission_id"])


def test_shipped_baselines_seed_an_empty_store_once(sqlite_store):
    shipped = si.shipped_files()
    if not shipped:
        pytest.skip("no shipped sweep output under data/submissions yet")
    report = si.seed_from_shipped()
    assert report is not None and report.inserted
    n = store.count()
    assert si.seed_from_shipped() is None  # once per store
    first = report.inserted[0]
    store.delete_submission(first)
    si.seed_from_shipped()
    assert store.count() == n - 1  # a deleted baseline does not come back


def test_shipped_baselines_leave_a_store_that_has_submissions_alone(sqlite_store, tmp_path):
    path, _ = _three(tmp_path)
    si.import_files([path])
    assert si.seed_from_shipped() is None
    assert store.count() == 3 and store.was_seeded()
