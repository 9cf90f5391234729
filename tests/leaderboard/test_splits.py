"""Splits (public, private, rerun), nominations and failure kinds: import, validation, export, idempotence."""

from __future__ import annotations

import pandas as pd
import pytest
import sqlalchemy

from tests.leaderboard import submissions_helpers as helpers
from tests.leaderboard.submissions_helpers import submission_row, write_csvs
from whestboard.leaderboard import _files, _store
from whestboard.store import engine, reset_engines

postgres_server, store_url, sqlite_store = helpers.postgres_server, helpers.store_url, helpers.sqlite_store


def _with_private(sid: str, team: str, public=(1e-5, 3e-5), private=(2e-5, 4e-5), **extra):
    """A submission whose aggregates are its public MLPs', plus private per-MLP rows (same indices)."""
    row, mlps = submission_row(sid, team, scores=public, **extra)
    for m in mlps:
        m["split"] = "public"
    for i, score in enumerate(private):
        mlps.append({"submission_id": sid, "mlp_index": i, "final_layer_mse": score * 10, "adjusted_score": score,
                     "flops_used": 1e9, "multiplier": 0.1, "failed": False, "split": "private"})
    return row, mlps


def test_splits_and_nominations_import_and_aggregates_are_the_public_ones(store_url, tmp_path):
    rows = [_with_private("a-1", "alpha", nominated="true"), _with_private("b-1", "beta", private=(9e-5, 1e-4))]
    _files.import_files([write_csvs(tmp_path, rows)], url=store_url)
    subs = _store.submissions_frame(url=store_url).set_index("submission_id")
    assert subs.loc["a-1", "nominated"] and not subs.loc["b-1", "nominated"]
    assert subs.loc["b-1", "adjusted_score"] == pytest.approx(2e-5)  # the public mean, never the private one
    per_mlp = _store.mlp_frame(url=store_url)
    assert sorted(per_mlp["split"].unique()) == ["private", "public"]
    private = per_mlp[(per_mlp["submission_id"] == "b-1") & (per_mlp["split"] == "private")]
    assert private["adjusted_score"].tolist() == [9e-5, 1e-4]
    summary = _store.split_summary(["private"], url=store_url).set_index("submission_id")
    assert summary.loc["b-1", "adjusted_score"] == pytest.approx(9.5e-5)
    assert summary.loc["b-1", "n_mlps"] == 2 and summary.loc["b-1", "n_failed_mlps"] == 0


def test_bad_split_nomination_and_failure_values_are_row_problems_and_nothing_is_written(store_url, tmp_path):
    good = _with_private("ok-1", "alpha")
    bad_row, bad_mlps = _with_private("bad-1", "beta", nominated="perhaps")
    bad_mlps[0]["split"] = "secret"
    bad_mlps[1]["failure"] = "budget"  # a kind on an MLP that did not fail
    bad_mlps[2]["failure"] = "gremlins"
    bad_mlps[2]["failed"] = True
    with pytest.raises(_files.ImportRejected) as err:
        _files.import_files([write_csvs(tmp_path, [good, (bad_row, bad_mlps)])], url=store_url)
    text = "\n".join(err.value.problems)
    assert "subs.csv line 3 (submission_id 'bad-1'): nominated is 'perhaps'; write true or false" in text
    assert "subs.per_mlp.csv line 6 (submission_id 'bad-1'): split is 'secret'; write one of public, private, " \
           "rerun" in text
    assert "line 7 (submission_id 'bad-1'): failure is 'budget' but failed is false" in text
    assert "line 8 (submission_id 'bad-1'): failure is 'gremlins'; write one of budget, combined, time" in text
    assert err.value.log.counts["split"] == 1 and err.value.log.counts["failure"] == 2
    assert _store.submission_count(url=store_url) == 0 and _store.mlp_frame(url=store_url).empty


def test_the_same_mlp_twice_in_one_split_is_refused_but_once_per_split_is_fine(sqlite_store, tmp_path):
    row, mlps = _with_private("d-1", "alpha")
    with pytest.raises(_files.ImportRejected, match=r"list MLP 0 of 'd-1' \(private split\) twice"):
        _files.import_files([write_csvs(tmp_path / "dup", [(row, [*mlps, mlps[-2]])])])
    _files.import_files([write_csvs(tmp_path / "ok", [(row, mlps)])])
    assert len(_store.mlp_frame()) == 4


def test_old_files_import_as_before_all_public(store_url, tmp_path):
    row, mlps = submission_row("old-1", "alpha", scores=(1e-5, 3e-5))
    assert "split" not in mlps[0] and "nominated" not in row
    _files.import_files([write_csvs(tmp_path, [(row, mlps)])], url=store_url)
    per_mlp = _store.mlp_frame(url=store_url)
    assert per_mlp["split"].tolist() == ["public", "public"] and per_mlp["failure"].isna().all()
    assert not _store.get_submission("old-1", url=store_url).nominated


def test_public_aggregates_are_checked_against_the_public_mlps_only(sqlite_store, tmp_path):
    row, mlps = _with_private("x-1", "alpha")
    row["adjusted_score"] = (1e-5 + 3e-5 + 2e-5 + 4e-5) / 4  # the mean over both splits is not the board's score
    row["n_mlps"] = 4
    with pytest.raises(_files.ImportRejected) as err:
        _files.import_files([write_csvs(tmp_path, [(row, mlps)])])
    text = "\n".join(err.value.problems)
    assert "n_mlps is 4 but the per-MLP file has 2 MLPs for it" in text
    assert "adjusted_score is 2.5e-05 but its per-MLP values average to 2e-05" in text


def test_export_round_trips_every_split_and_reimport_changes_nothing(store_url, tmp_path):
    rows = [_with_private("a-1", "alpha", nominated=True), _with_private("b-1", "beta")]
    rows[1][1][0]["failed"] = True
    rows[1][1][0]["failure"] = "time"
    rows[1][0]["n_failed_mlps"] = 1
    rows[1][1][0]["multiplier"] = 1.0
    rows[1][0]["mean_multiplier"] = 0.55
    _files.import_files([write_csvs(tmp_path / "in", rows)], url=store_url)
    before = (_store.submissions_frame(url=store_url), _store.mlp_frame(url=store_url), _store.board_revision(url=store_url))
    out, sibling = _files.export_submissions(tmp_path / "out" / "all.csv", url=store_url)
    exported = pd.read_csv(sibling)
    assert list(exported.columns) == list(_store.MLP_RESULT_FIELDS)
    assert sorted(exported["split"].unique()) == ["private", "public"]
    assert exported.loc[exported["failure"].notna(), "failure"].tolist() == ["time"]
    for _ in range(2):  # idempotent: the export, imported again (twice), changes nothing
        report = _files.import_files([out], url=store_url)
        assert report.inserted == [] and report.updated == [] and sorted(report.unchanged) == ["a-1", "b-1"]
    pd.testing.assert_frame_equal(_store.submissions_frame(url=store_url), before[0])
    pd.testing.assert_frame_equal(_store.mlp_frame(url=store_url), before[1])
    assert _store.board_revision(url=store_url) == before[2]


def test_a_private_suite_added_later_replaces_only_its_split(store_url, tmp_path):
    public_only = submission_row("p-1", "alpha", scores=(1e-5, 3e-5))
    _files.import_files([write_csvs(tmp_path / "pub", [public_only])], url=store_url)
    later = pd.DataFrame([{"submission_id": "p-1", "mlp_index": i, "final_layer_mse": 1e-4, "adjusted_score": s,
                           "split": "private"} for i, s in enumerate((5e-5, 7e-5))])
    path = tmp_path / "later.per_mlp.csv"
    later.to_csv(path, index=False)
    assert _files.import_files([path], url=store_url).updated == ["p-1"]
    assert _files.import_files([path], url=store_url).unchanged == ["p-1"]
    # the public file again: the private rows stay
    assert _files.import_files([write_csvs(tmp_path / "pub", [public_only])], url=store_url).unchanged == ["p-1"]
    per_mlp = _store.mlp_frame(url=store_url)
    assert per_mlp.groupby("split").size().to_dict() == {"private": 2, "public": 2}
    ghost = later.assign(submission_id="ghost")
    ghost.to_csv(tmp_path / "ghost.per_mlp.csv", index=False)
    with pytest.raises(_files.ImportRejected, match="name submission_id 'ghost', which is neither in this import nor "
                                                "stored; import its submission first"):
        _files.import_files([tmp_path / "ghost.per_mlp.csv"], url=store_url)
    public_orphan = later.assign(split="public")
    public_orphan.to_csv(tmp_path / "orphan.per_mlp.csv", index=False)
    with pytest.raises(_files.ImportRejected, match="which is not in this import's submissions file"):
        _files.import_files([tmp_path / "orphan.per_mlp.csv"], url=store_url)


def test_a_store_created_before_splits_gains_the_columns_and_its_new_key(store_url, tmp_path):
    """An older store's tables get ``nominated``, ``split`` (existing rows: public) and ``failure`` on first use."""
    url = store_url
    old = sqlalchemy.create_engine(url)
    with old.begin() as conn:
        for statement in """
            CREATE TABLE submissions (id VARCHAR(200) PRIMARY KEY, team VARCHAR(200), round_tag VARCHAR(32),
                submitted_at TIMESTAMP, status VARCHAR(16), mean_flops_used FLOAT, final_layer_mse FLOAT,
                adjusted_score FLOAT, mean_multiplier FLOAT, n_failed_mlps INTEGER, whestbench_version VARCHAR(64),
                flopscope_version VARCHAR(64), n_mlps INTEGER, mean_effective_compute FLOAT, dataset VARCHAR(500),
                mean_avg_variance FLOAT, estimator VARCHAR(500), source VARCHAR(64));
            CREATE TABLE submission_mlp_results (submission_id VARCHAR(200) REFERENCES submissions (id)
                ON DELETE CASCADE, mlp_index INTEGER, mlp_name VARCHAR(200), final_layer_mse FLOAT,
                adjusted_score FLOAT, flops_used FLOAT, effective_compute FLOAT, multiplier FLOAT, failed BOOLEAN,
                avg_variance FLOAT, PRIMARY KEY (submission_id, mlp_index));
            INSERT INTO submissions VALUES ('s', 't', 'v1-warmup', '2026-05-01 12:00:00', 'graded', 1e9, 1e-4, 1e-5,
                0.1, 0, '0.16.2', NULL, 1, NULL, NULL, NULL, NULL, NULL);
            INSERT INTO submission_mlp_results VALUES ('s', 0, NULL, 1e-4, 1e-5, 1e9, NULL, 0.1, FALSE, NULL)
        """.split(";"):
            conn.execute(sqlalchemy.text(statement))
    old.dispose()
    try:
        assert _store.submissions_frame(url=url)["nominated"].tolist() == [False]
        per_mlp = _store.mlp_frame(url=url)
        assert per_mlp["split"].tolist() == ["public"] and per_mlp["failure"].isna().all()
        # its old key (submission, MLP index) is replaced by (submission, split, MLP index) before a write,
        # so the rerun of MLP 0 is stored beside its public result
        rerun = pd.DataFrame([{"submission_id": "s", "mlp_index": 0, "final_layer_mse": 2e-4,
                               "adjusted_score": 2e-5, "split": "rerun"}])
        rerun.to_csv(tmp_path / "rerun.per_mlp.csv", index=False)
        assert _files.import_files([tmp_path / "rerun.per_mlp.csv"], url=url).updated == ["s"]
        per_mlp = _store.mlp_frame(url=url).set_index("split")
        assert per_mlp.loc["public", "adjusted_score"] == 1e-5 and per_mlp.loc["rerun", "adjusted_score"] == 2e-5
        key = sqlalchemy.inspect(engine(url)).get_pk_constraint("submission_mlp_results")["constrained_columns"]
        assert key == ["submission_id", "split", "mlp_index"]
        assert _files.import_files([tmp_path / "rerun.per_mlp.csv"], url=url).unchanged == ["s"]
    finally:
        reset_engines()
