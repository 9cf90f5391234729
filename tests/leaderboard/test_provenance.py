"""What a score was priced with: versions and seed protocol imported, stored, exported, shown and warned about."""

from __future__ import annotations

import json
from importlib.metadata import version

import pandas as pd
import pytest
import sqlalchemy

from tests.leaderboard import submissions_helpers as helpers
from tests.leaderboard.submissions_helpers import submission_row, write_csvs
from whestboard.leaderboard import _files, _store, _view
from whestboard.store import reset_engines

sqlite_store = helpers.sqlite_store
store_url = helpers.store_url
postgres_server = helpers.postgres_server


def _board_rows(*versions: tuple[str | None, str | None]) -> list[tuple[dict, list[dict]]]:
    """One submission per team, each priced by the (whestbench, flopscope) pair given (None: column blank)."""
    rows = []
    for i, (whestbench, flopscope) in enumerate(versions):
        row, mlps = submission_row(f"s-{i}", f"team-{i}", scores=(1e-5 * (i + 1), 2e-5 * (i + 1)), minutes=i)
        row.update(whestbench_version=whestbench or "", flopscope_version=flopscope or "")
        rows.append((row, mlps))
    return rows


def test_versions_and_seed_protocol_import_and_export_as_they_are(sqlite_store, tmp_path):
    row, mlps = submission_row("a-1", "alpha", seed_protocol="3.0")
    _files.import_files([write_csvs(tmp_path / "in", [(row, mlps)])])
    sub = _store.get_submission("a-1")
    assert (sub.whestbench_version, sub.flopscope_version, sub.seed_protocol) == ("0.16.2", "0.12.4", "3.0")
    out, _ = _files.export_submissions(tmp_path / "out" / "subs.csv")
    exported = pd.read_csv(out, dtype=str, keep_default_na=False).iloc[0]
    assert (exported["whestbench_version"], exported["flopscope_version"], exported["seed_protocol"]) == (
        "0.16.2", "0.12.4", "3.0")
    assert _files.import_files([out]).unchanged == ["a-1"]  # what export writes imports back to the same row


def test_a_file_without_versions_imports_them_as_unknown(sqlite_store, tmp_path):
    row, mlps = submission_row("a-1", "alpha")
    for column in ("whestbench_version", "flopscope_version"):
        del row[column]
    _files.import_files([write_csvs(tmp_path, [(row, mlps)])])
    sub = _store.get_submission("a-1")
    assert sub.whestbench_version == _store.UNKNOWN and sub.flopscope_version is None and sub.seed_protocol is None
    shown = _view.board("v1-warmup", "public", organizer=False).rows[0]
    assert shown["priced_with"] == "whestbench unknown · flopscope unknown" and shown["seed_protocol"] == "unknown"


def test_a_whest_run_report_gives_the_versions_it_states_and_leaves_the_rest_unknown(sqlite_store, run_report,
                                                                                     tmp_path):
    """whestbench 0.16 writes its version at the top and the host's flopscope in ``run_meta.host``."""
    report = json.loads(run_report.read_text())
    sid = _files.import_files([run_report], team="gamma").inserted[0]
    sub = _store.get_submission(sid)
    assert sub.whestbench_version == report["whestbench_version"] == version("whestbench")
    assert sub.flopscope_version == report["run_meta"]["host"]["flopscope_version"] == version("flopscope")
    assert "seed_protocol" not in json.dumps(report) and sub.seed_protocol is None
    assert _files.import_files([run_report], team="gamma", flopscope_version=version("flopscope")).unchanged == [sid]
    with pytest.raises(_files.ImportRejected, match="the report says flopscope '0.12.4' priced it, not '0.11.0'"):
        _files.import_files([run_report], team="gamma", flopscope_version="0.11.0")
    del report["run_meta"]["host"]["flopscope_version"]
    bare = tmp_path / "bare.json"
    bare.write_text(json.dumps(report))
    other = _files.import_files([bare], team="delta", submission_id="bare").inserted
    assert other == ["bare"] and _store.get_submission("bare").flopscope_version is None  # unknown, not guessed


@pytest.mark.parametrize(("versions", "warned"), [
    ((("0.16.2", "0.12.4"),) * 3, False),
    ((("0.16.2", "0.12.4"), ("0.16.2", "0.12.4"), ("0.16.2", "0.12.0")), True),
    ((("0.16.2", "0.12.4"), ("0.16.0", "0.12.4")), True),
    ((("0.16.2", "0.12.4"), (None, None)), True),
    (((None, None), (None, None)), False),
])
def test_the_board_warns_exactly_when_ranked_scores_were_priced_by_different_versions(sqlite_store, tmp_path,
                                                                                     versions, warned):
    _files.import_files([write_csvs(tmp_path, _board_rows(*versions))])
    view = _view.board("v1-warmup", "public", organizer=False)
    expected = pd.Series([_view.versions_text(w, f) for w, f in versions]).value_counts()
    assert {p.label: p.n_submissions for p in view.priced} == expected.to_dict()
    assert (view.mixed_versions is not None) is warned
    assert _view.versions_warning("v1-warmup", "public", organizer=False) == view.mixed_versions
    if warned:
        for label, n in expected.items():
            assert f"{label}: {n} submission{'' if n == 1 else 's'}" in view.mixed_versions


def test_the_warning_counts_the_ranked_submissions_not_every_one(sqlite_store, tmp_path):
    """A team's older submission priced by another flopscope is not ranked, so it does not mix the board."""
    rows = _board_rows(("0.16.2", "0.12.4"), ("0.16.2", "0.12.4"))
    worse, mlps = submission_row("s-old", "team-0", scores=(9e-5, 9e-5), minutes=30)
    worse.update(flopscope_version="0.11.0")
    _files.import_files([write_csvs(tmp_path, [*rows, (worse, mlps)])])
    view = _view.board("v1-warmup", "public", organizer=False)
    assert view.mixed_versions is None and [p.n_submissions for p in view.priced] == [2]


def test_a_store_made_before_the_provenance_columns_opens_and_gains_them(store_url, tmp_path):
    old = sqlalchemy.create_engine(store_url)
    with old.begin() as conn:
        conn.execute(sqlalchemy.text("""
            CREATE TABLE submissions (id VARCHAR(200) PRIMARY KEY, team VARCHAR(200), round_tag VARCHAR(32),
                submitted_at TIMESTAMP, status VARCHAR(16), mean_flops_used FLOAT, final_layer_mse FLOAT,
                adjusted_score FLOAT, mean_multiplier FLOAT, n_failed_mlps INTEGER,
                whestbench_version VARCHAR(64) NOT NULL, flopscope_version VARCHAR(64), n_mlps INTEGER,
                mean_effective_compute FLOAT, dataset VARCHAR(500), mean_avg_variance FLOAT, estimator VARCHAR(500),
                source VARCHAR(64), nominated BOOLEAN)"""))
        conn.execute(sqlalchemy.text("""
            INSERT INTO submissions VALUES ('old', 't', 'v1-warmup', '2026-05-01 12:00:00', 'graded', 1e9, 1e-4,
                1e-5, 0.1, 0, '0.16.0', '0.12.0', 1, NULL, NULL, NULL, NULL, NULL, FALSE)"""))
    old.dispose()
    try:
        frame = _store.submissions_frame(url=store_url)
        assert frame[["seed_protocol", "run_id", "rescore_of"]].isna().all().all()
        columns = {c["name"] for c in sqlalchemy.inspect(_store.engine(store_url)).get_columns("submissions")}
        assert {"seed_protocol", "run_id", "rescore_of"} <= columns
        row, mlps = submission_row("new", "u", seed_protocol="3.0")
        del row["whestbench_version"]  # unknown: the old table's NOT NULL column holds the word
        _files.import_files([write_csvs(tmp_path, [(row, mlps)])], url=store_url)
        assert _store.get_submission("new", url=store_url).seed_protocol == "3.0"
        assert _store.get_submission("new", url=store_url).whestbench_version == _store.UNKNOWN
        view = _view.board("v1-warmup", "public", organizer=False, url=store_url)
        assert {p.label for p in view.priced} == {"whestbench 0.16.0 · flopscope 0.12.0",
                                                  "whestbench unknown · flopscope 0.12.4"}
        assert view.mixed_versions is not None
    finally:
        reset_engines()
