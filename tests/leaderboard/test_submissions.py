"""Import, upsert and export of graded submissions, on SQLite and on a real PostgreSQL server."""

from __future__ import annotations

import dataclasses

import pandas as pd
import pytest

from tests.leaderboard import submissions_helpers as helpers
from tests.leaderboard.submissions_helpers import submission_row, write_csvs
from whestboard.leaderboard import _files, _store

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
    report = _files.import_files([path], url=store_url)
    assert sorted(report.inserted) == ["a-1", "a-2", "b-1"]
    df = _store.submissions_frame(url=store_url).set_index("submission_id")
    for row, _mlps in rows:
        got = df.loc[row["submission_id"]]
        assert got["team"] == row["team"]
        assert got["adjusted_score"] == row["adjusted_score"]
        assert got["final_layer_mse"] == row["final_layer_mse"]
        assert got["mean_multiplier"] == row["mean_multiplier"]
        assert got["n_failed_mlps"] == row["n_failed_mlps"]
        assert got["submitted_at"] == pd.Timestamp(row["submitted_at"])
    per_mlp = _store.mlp_frame(url=store_url)
    assert len(per_mlp) == sum(len(m) for _, m in rows)
    assert per_mlp.loc[per_mlp["submission_id"] == "b-1", "failed"].tolist() == [False, True]


def test_importing_twice_changes_nothing(store_url, tmp_path):
    path, _ = _three(tmp_path)
    _files.import_files([path], url=store_url)
    before = (_store.submissions_frame(url=store_url), _store.mlp_frame(url=store_url), _store.board_revision(url=store_url))
    report = _files.import_files([path], url=store_url)
    assert report.inserted == [] and report.updated == []
    assert sorted(report.unchanged) == ["a-1", "a-2", "b-1"]
    pd.testing.assert_frame_equal(_store.submissions_frame(url=store_url), before[0])
    pd.testing.assert_frame_equal(_store.mlp_frame(url=store_url), before[1])
    assert _store.board_revision(url=store_url) == before[2]
    assert _store.submission_count(url=store_url) == 3


def test_reimport_updates_instead_of_duplicating(store_url, tmp_path):
    path, _ = _three(tmp_path)
    _files.import_files([path], url=store_url)
    regraded = write_csvs(tmp_path / "v2", [submission_row("a-1", "alpha renamed", scores=(3e-6, 3e-6))])
    report = _files.import_files([regraded], url=store_url)
    assert report.updated == ["a-1"]
    assert _store.submission_count(url=store_url) == 3
    got = _store.get_submission("a-1", url=store_url)
    assert got.team == "alpha renamed" and got.adjusted_score == 3e-6
    per_mlp = _store.mlp_frame(["a-1"], url=store_url)
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
    with pytest.raises(_files.ImportRejected) as err:
        _files.import_files([path], url=store_url)
    problems = err.value.problems
    assert any("line 3" in p and "round is 'v9-nope'" in p for p in problems)
    assert any("line 4" in p and "adjusted_score is 'lots', not a number" in p for p in problems)
    assert any("line 5" in p and "team is missing" in p for p in problems)
    assert any("line 6" in p and "submitted_at is 'yesterday'" in p for p in problems)
    assert any("line 7" in p and "final_layer_mse is -1" in p for p in problems)
    assert not any("line 2" in p for p in problems)
    assert _store.submission_count(url=store_url) == 0
    assert _store.mlp_frame(url=store_url).empty


def test_per_mlp_results_must_agree_with_their_submission(store_url, tmp_path):
    row, mlps = submission_row("x-1", "alpha", scores=(1e-5, 3e-5))
    row["adjusted_score"] = 9e-5  # not the mean of its MLPs
    orphan = dict(mlps[0], submission_id="ghost")
    path = tmp_path / "s.csv"
    pd.DataFrame([row]).to_csv(path, index=False)
    pd.DataFrame([*mlps, mlps[0], orphan]).to_csv(tmp_path / "s.per_mlp.csv", index=False)
    with pytest.raises(_files.ImportRejected) as err:
        _files.import_files([path], url=store_url)
    text = "\n".join(err.value.problems)
    assert "adjusted_score is 9e-05 but its per-MLP values average to" in text
    assert "list MLP 0 of 'x-1' twice" in text
    assert "'ghost', which is not in this import's submissions file" in text
    assert _store.submission_count(url=store_url) == 0


def test_unknown_and_missing_columns_are_named(sqlite_store, tmp_path):
    path = tmp_path / "cols.csv"
    pd.DataFrame([{"submission_id": "a", "teem": "x"}]).to_csv(path, index=False)
    with pytest.raises(_files.ImportRejected) as err:
        _files.import_files([path])
    text = "\n".join(err.value.problems)
    assert "missing column(s) team, round, submitted_at, status\n" in text + "\n"  # versions may be unknown
    assert "unknown column(s) teem" in text


def test_duplicate_ids_in_one_import_are_refused(sqlite_store, tmp_path):
    row, _ = submission_row("dup", "alpha")
    path = tmp_path / "dup.csv"
    pd.DataFrame([row, row]).to_csv(path, index=False)
    with pytest.raises(_files.ImportRejected, match="'dup' appears 2 times"):
        _files.import_files([path])
    assert _store.submission_count() == 0


def test_parquet_imports_like_csv(sqlite_store, tmp_path):
    csv_path, rows = _three(tmp_path / "csv")
    pq = tmp_path / "pq"
    pq.mkdir()
    pd.read_csv(csv_path).to_parquet(pq / "subs.parquet")
    pd.read_csv(tmp_path / "csv" / "subs.per_mlp.csv").to_parquet(pq / "subs.per_mlp.parquet")
    report = _files.import_files([pq / "subs.parquet"])
    assert len(report.inserted) == 3
    assert len(_store.mlp_frame()) == sum(len(m) for _, m in rows)


def test_export_round_trips_exactly(store_url, tmp_path):
    path, _ = _three(tmp_path)
    _files.import_files([path], url=store_url)
    out, sibling = _files.export_submissions(tmp_path / "out" / "all.csv", url=store_url)
    assert sibling is not None and sibling.name == "all.per_mlp.csv"
    report = _files.import_files([out], url=store_url)
    assert report.inserted == [] and report.updated == [] and len(report.unchanged) == 3
    exported = pd.read_csv(out)
    assert list(exported.columns) == list(_store.SUBMISSION_FIELDS)


def test_edit_and_delete(store_url, tmp_path):
    path, _ = _three(tmp_path)
    _files.import_files([path], url=store_url)
    assert _store.edit_submission("a-1", {"team": "alpha prime", "status": "failed"}, url=store_url)
    assert _store.get_submission("a-1", url=store_url).team == "alpha prime"
    with pytest.raises(ValueError, match="cannot edit adjusted_score"):
        _store.edit_submission("a-1", {"adjusted_score": 0.0}, url=store_url)
    assert not _store.edit_submission("nope", {"team": "x"}, url=store_url)
    assert _store.delete_submission("b-1", url=store_url)
    assert not _store.delete_submission("b-1", url=store_url)
    assert _store.submission_count(url=store_url) == 2
    assert "b-1" not in set(_store.mlp_frame(url=store_url)["submission_id"])


def test_shipped_baselines_seed_an_empty_store_once(sqlite_store):
    shipped = _files.shipped_files()
    if not shipped:
        pytest.skip("no shipped sweep output under data/submissions yet")
    report = _files.seed_from_shipped()
    assert report is not None and report.inserted
    n = _store.submission_count()
    assert _files.seed_from_shipped() is None  # once per store
    first = report.inserted[0]
    _store.delete_submission(first)
    _files.seed_from_shipped()
    assert _store.submission_count() == n - 1  # a deleted baseline does not come back


def test_shipped_baselines_leave_a_store_that_has_submissions_alone(sqlite_store, tmp_path):
    path, _ = _three(tmp_path)
    _files.import_files([path])
    assert _files.seed_from_shipped() is None
    assert _store.submission_count() == 3 and _store.was_seeded()


# ---------------------------------------------------------------------------
# hostile input: formulas, control characters, floods, races
# ---------------------------------------------------------------------------

#: Text a spreadsheet would run, or that looks like the export's own escape.
HOSTILE_TEXT = ["=HYPERLINK(\"http://x\",\"y\")", "+1+2", "-3+4", "@SUM(A1:A9)", "'quoted", "'=already escaped",
                "''=two quotes", "'s-Hertogenbosch", "'", "=cmd|' /C calc'!A0", "a,b \"c\""]


@pytest.mark.parametrize("value", [*HOSTILE_TEXT, "\tTAB", "\rCR", "'\tq", "plain", ""])
def test_formula_escape_is_undone_by_the_import(value):
    escaped = _files.escape_formula(value)
    assert _files.unescape_formula(escaped) == value
    assert escaped[:1] not in _files.FORMULA_TRIGGERS
    if value[:1] in (*_files.FORMULA_TRIGGERS, "'"):
        assert escaped == "'" + value


def _csv_cells(text: str) -> list[dict]:
    import csv
    import io

    return list(csv.DictReader(io.StringIO(text)))


def test_export_neutralises_formulas_and_round_trips_exactly(store_url, tmp_path):
    rows = []
    for i, value in enumerate(HOSTILE_TEXT):
        row, mlps = submission_row(f"{value}#{i}", value, estimator=value, dataset=value, minutes=i)
        rows.append((row, [dict(m, mlp_name=value) for m in mlps]))
    # written as every export writes (a plain CSV would read ''=... as the escape of '=...)
    folder = tmp_path / "in"
    folder.mkdir()
    (folder / "h.csv").write_text(_files.csv_text(pd.DataFrame([r for r, _ in rows]), _store.SUBMISSION_TEXT_LIMITS))
    (folder / "h.per_mlp.csv").write_text(_files.csv_text(pd.DataFrame([m for _, ms in rows for m in ms]),
                                                      _store.MLP_TEXT_LIMITS))
    _files.import_files([folder / "h.csv"], url=store_url)
    stored = _store.submissions_frame(url=store_url)
    assert sorted(stored["team"]) == sorted(HOSTILE_TEXT)

    out, sibling = _files.export_submissions(tmp_path / "out" / "all.csv", url=store_url)
    for path, text_fields in ((out, _store.SUBMISSION_TEXT_LIMITS), (sibling, _store.MLP_TEXT_LIMITS)):
        for cell_row in _csv_cells(path.read_text()):
            for name in text_fields:
                cell = cell_row[name]
                assert cell[:1] not in _files.FORMULA_TRIGGERS, (name, cell)
                assert cell == _files.escape_formula(_files.unescape_formula(cell))
    exported = {r["submission_id"]: r for r in _csv_cells(out.read_text())}
    assert exported["'=HYPERLINK(\"http://x\",\"y\")#0"]["team"] == "'=HYPERLINK(\"http://x\",\"y\")"
    assert exported["''s-Hertogenbosch#7"]["team"] == "''s-Hertogenbosch"

    before = (_store.submissions_frame(url=store_url), _store.mlp_frame(url=store_url), _store.board_revision(url=store_url))
    report = _files.import_files([out], url=store_url)
    assert report.inserted == [] and report.updated == [] and len(report.unchanged) == len(HOSTILE_TEXT)
    pd.testing.assert_frame_equal(_store.submissions_frame(url=store_url), before[0])
    pd.testing.assert_frame_equal(_store.mlp_frame(url=store_url), before[1])
    assert _store.board_revision(url=store_url) == before[2]


def test_an_older_file_keeps_a_leading_quote_unless_it_escapes_a_formula(sqlite_store, tmp_path):
    path = write_csvs(tmp_path, [submission_row("q-1", "'s-Hertogenbosch"), submission_row("q-2", "'=1+1")])
    _files.import_files([path])
    assert _store.get_submission("q-1").team == "'s-Hertogenbosch"
    assert _store.get_submission("q-2").team == "=1+1"  # what a spreadsheet shows for '=1+1


def test_a_stored_tab_is_neutralised_on_export_and_refused_on_import(sqlite_store, tmp_path):
    """A value stored before control characters were refused still leaves the store harmless."""
    path = write_csvs(tmp_path / "in", [submission_row("t-1", "clean")])
    batch = _files.load_batch([path])
    legacy = [dataclasses.replace(batch.submissions[0], team="\t=1+1")]
    _store.upsert(legacy, batch.mlp_results)
    text = _files.submissions_csv()
    assert _csv_cells(text)[0]["team"] == "'\t=1+1"
    (tmp_path / "again.csv").write_text(text)
    with pytest.raises(_files.ImportRejected) as err:
        _files.import_files([tmp_path / "again.csv"])
    assert err.value.problems == [f"{tmp_path / 'again.csv'} line 2 (submission_id 't-1'): team contains the "
                                  "control character U+0009 at character 1; text may not hold control "
                                  "characters (NUL, tab, line breaks, ...)"]


@pytest.mark.parametrize(("column", "value", "code", "at"), [
    ("submission_id", "nul\x00id", "U+0000", 4), ("team", "team\x00", "U+0000", 5),
    ("estimator", "esc \x1b[31m", "U+001B", 5), ("team", "two\nlines", "U+000A", 4),
    ("dataset", "bell\x07", "U+0007", 5), ("source", "c1\x85", "U+0085", 3), ("team", "del\x7f", "U+007F", 4),
])
def test_control_characters_in_text_are_refused_with_file_line_and_column(store_url, tmp_path, column, value,
                                                                          code, at):
    _files.import_files([write_csvs(tmp_path / "seed", [submission_row("keep", "alpha")])], url=store_url)
    before = (_store.submissions_frame(url=store_url), _store.mlp_frame(url=store_url), _store.board_revision(url=store_url))
    good, _ = submission_row("fine", "beta")
    bad, _ = submission_row("bad", "gamma")
    bad[column] = value
    path = tmp_path / "ctl.csv"
    pd.DataFrame([good, bad]).to_csv(path, index=False)
    with pytest.raises(_files.ImportRejected) as err:
        _files.import_files([path], url=store_url)
    [problem] = err.value.problems
    assert problem.startswith(f"{path} line 3 (submission_id ")
    assert f"{column} contains the control character {code} at character {at}" in problem
    pd.testing.assert_frame_equal(_store.submissions_frame(url=store_url), before[0])
    pd.testing.assert_frame_equal(_store.mlp_frame(url=store_url), before[1])
    assert _store.board_revision(url=store_url) == before[2]


def test_edits_follow_the_same_text_rules(sqlite_store, tmp_path):
    _files.import_files([write_csvs(tmp_path, [submission_row("e-1", "alpha")])])
    with pytest.raises(ValueError, match="team contains the control character U\\+0000"):
        _store.edit_submission("e-1", {"team": "x\x00"})
    with pytest.raises(ValueError, match="team is 201 characters long"):
        _store.edit_submission("e-1", {"team": "x" * 201})
    with pytest.raises(ValueError, match="team must be text"):
        _store.edit_submission("e-1", {"team": ["x"]})
    assert _store.get_submission("e-1").team == "alpha"
    assert _store.edit_submission("e-1", {"team": "  =alpha  "}) and _store.get_submission("e-1").team == "=alpha"


def _many_bad_rows(path, n_rows: int) -> None:
    header = "submission_id,team,round,submitted_at,status,whestbench_version\n"
    path.write_text(header + "".join(f"id-{i},team,v0,yesterday,graded,0.16\n" for i in range(n_rows)))


def test_a_flood_of_problems_is_reported_bounded_with_counts(sqlite_store, tmp_path):
    path = tmp_path / "flood.csv"
    _many_bad_rows(path, 200_000)
    with pytest.raises(_files.ImportRejected) as err:
        _files.import_files([path])
    log = err.value.log
    assert len(err.value.problems) == _files.MAX_SHOWN_PROBLEMS
    assert err.value.problems[0] == f"{path} line 2 (submission_id 'id-0'): round is 'v0'; known rounds: " \
                                    "v1-warmup, v1-phase1, v2-phase2"
    assert log.total >= _files.MAX_COUNTED_PROBLEMS and log.stopped_at.startswith(f"{path} line ")
    # every row has the same problems: the counts by field say so
    assert set(log.counts) == {"round", "submitted_at", "mean_flops_used", "final_layer_mse", "adjusted_score",
                               "mean_multiplier", "n_failed_mlps"}
    assert len(str(err.value)) < 20_000
    assert "at least 1,00" in str(err.value) and "… and " in str(err.value)
    assert _store.submission_count() == 0


def test_a_few_problems_are_all_counted_and_listed(sqlite_store, tmp_path):
    path = tmp_path / "few.csv"
    _many_bad_rows(path, 3)
    with pytest.raises(_files.ImportRejected) as err:
        _files.import_files([path])
    assert err.value.log.total == 21 and err.value.log.stopped_at is None
    assert str(err.value).startswith("21 problem(s) found; nothing was imported:")
    assert len(err.value.problems) == 21


def test_a_huge_cell_is_echoed_cut_short(sqlite_store, tmp_path):
    row, _ = submission_row("big", "alpha")
    row["adjusted_score"] = "9" * 100 + "x" * 5_000_000
    path = tmp_path / "big.csv"
    pd.DataFrame([row]).to_csv(path, index=False)
    with pytest.raises(_files.ImportRejected) as err:
        _files.import_files([path])
    [problem] = err.value.problems
    assert "adjusted_score is '" + "9" * 60 + "'… (5,000,100 characters), not a number" in problem
    assert len(problem) < 300


def test_a_file_over_the_size_limit_is_refused_unread(sqlite_store, tmp_path, monkeypatch):
    monkeypatch.setenv("WHESTBOARD_UPLOAD_MAX_MB", str(1000 / 2**20))  # read when the import checks
    path = write_csvs(tmp_path, [submission_row(f"s-{i}", "alpha") for i in range(20)])
    with pytest.raises(_files.ImportRejected, match=r"KiB|MiB; an import reads at most"):
        _files.import_files([path])
    assert _store.submission_count() == 0


def test_a_header_that_is_not_one_is_refused(sqlite_store, tmp_path):
    path = tmp_path / "wide.csv"
    path.write_text("a," * 200_000 + "\n1\n")
    with pytest.raises(_files.ImportRejected, match="the first line is over 64 KiB long"):
        _files.import_files([path])
    wide = tmp_path / "wide2.csv"
    wide.write_text(",".join(f"col{i}" for i in range(5_000)) + ",submission_id\n")
    with pytest.raises(_files.ImportRejected) as err:
        _files.import_files([wide])
    assert "unknown column(s) col0, col1" in str(err.value) and "and 4,980 more" in str(err.value)
    assert len(str(err.value)) < 5_000


def test_concurrent_imports_of_one_new_file_all_succeed(store_url, tmp_path, monkeypatch):
    """Twelve imports read "not stored yet" before any writes: all succeed, the store ends as after one.

    (Twelve: each holds one of the engine pool's 15 connections while it waits for the others.)
    """
    import threading

    path, rows = _three(tmp_path)
    n = 12
    barrier = threading.Barrier(n, timeout=60)
    first_read = threading.local()
    real = _store.existing_rows

    def read_then_wait(s, ids):
        found = real(s, ids)
        if not getattr(first_read, "done", False):  # every import's first read happens before any write
            first_read.done = True
            barrier.wait()
        return found

    monkeypatch.setattr(_store, "existing_rows", read_then_wait)
    reports, errors = [], []

    def one_import():
        try:
            reports.append(_files.import_files([path], url=store_url))
        except Exception as exc:  # noqa: BLE001 - the assertion below names it
            errors.append(exc)

    threads = [threading.Thread(target=one_import) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert errors == []
    assert len(reports) == n
    assert sorted(sorted(r.inserted) for r in reports if r.inserted) == [["a-1", "a-2", "b-1"]]
    assert sum(len(r.unchanged) == 3 for r in reports) == n - 1
    assert _store.submission_count(url=store_url) == 3
    assert len(_store.mlp_frame(url=store_url)) == sum(len(m) for _, m in rows)
    assert _store.board_revision(url=store_url).endswith(":1")  # one change counted, once


def test_tables_over_the_row_limit_are_refused(sqlite_store, tmp_path, monkeypatch):
    monkeypatch.setattr(_files, "MAX_TABLE_ROWS", 5)
    monkeypatch.setattr(_files, "CHUNK_ROWS", 2)  # the limit holds across chunks
    rows = [submission_row(f"r-{i}", "alpha") for i in range(6)]
    csv_path = write_csvs(tmp_path / "csv", rows)
    with pytest.raises(_files.ImportRejected, match="subs.csv: more than 5 rows; an import takes at most that many"):
        _files.import_files([csv_path])
    pq = tmp_path / "rows.parquet"
    pd.read_csv(csv_path).to_parquet(pq)
    with pytest.raises(_files.ImportRejected, match="rows.parquet: 6 rows; an import takes at most 5 per file"):
        _files.import_files([pq])
    assert _store.submission_count() == 0


def test_unreadable_tables_are_refused_with_a_message(sqlite_store, tmp_path):
    junk = tmp_path / "junk.parquet"
    junk.write_bytes(b"PAR1" + bytes(range(256)) * 40)
    ragged = tmp_path / "ragged.csv"
    row, _ = submission_row("ok", "alpha")
    ragged.write_text(pd.DataFrame([row] * 3).to_csv(index=False) + "a,b,c," * 30 + "\n")
    with pytest.raises(_files.ImportRejected) as err:
        _files.import_files([junk, ragged])
    text = "\n".join(err.value.problems)
    assert "junk.parquet: not a readable Parquet file" in text
    assert "ragged.csv: not a readable CSV file (Error tokenizing data. C error: Expected 13 fields in line 5, saw 91)" in text
    assert _store.submission_count() == 0


def test_a_pinned_request_reads_the_revision_once_and_again_after_its_own_write(sqlite_store, tmp_path):
    path, _ = _three(tmp_path)
    _files.import_files([path], url=sqlite_store)
    before = _store.board_revision(url=sqlite_store)
    with _store.revision_pinned():
        assert _store.board_revision(url=sqlite_store) == before
        _files.import_files([write_csvs(tmp_path / "more", [submission_row("c-1", "gamma", minutes=9)])],
                            url=sqlite_store)
        after = _store.board_revision(url=sqlite_store)  # its own write: read afresh
        assert after != before
        with _store.revision_pinned():  # a second request meanwhile reads what the store holds
            assert _store.board_revision(url=sqlite_store) == after
    assert _store.board_revision(url=sqlite_store) == after


def test_a_teams_rows_are_read_once_per_revision_and_follow_an_edit(sqlite_store, tmp_path):
    path, _ = _three(tmp_path)
    _files.import_files([path], url=sqlite_store)
    first = _store.team_submissions("alpha", url=sqlite_store)
    assert sorted(first["submission_id"]) == ["a-1", "a-2"]
    assert _store.team_submissions("alpha", url=sqlite_store) is first  # the same revision: not read again
    assert set(_store.team_mlp_results("alpha", url=sqlite_store)["submission_id"]) == {"a-1", "a-2"}
    _store.edit_submission("a-2", {"team": "beta"}, url=sqlite_store)
    assert _store.team_submissions("alpha", url=sqlite_store)["submission_id"].tolist() == ["a-1"]
    assert set(_store.team_mlp_results("alpha", url=sqlite_store)["submission_id"]) == {"a-1"}
