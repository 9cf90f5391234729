"""Columnar snapshots of the narrow scans: equal to the table's read, fresh after every write, shared across processes."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from tests.leaderboard import submissions_helpers as helpers
from tests.leaderboard.submissions_helpers import submission_row, write_csvs
from whestboard.leaderboard import _files, _snapshot, _store
from whestboard.store import blob_keys, get_blob, put_blob

postgres_server, store_url = helpers.postgres_server, helpers.store_url
ROUND = "v2-phase2"
REPO = Path(__file__).resolve().parents[2]


def _rows(start: int, n: int) -> list:
    rng = np.random.default_rng(start)
    rows = []
    for i in range(start, start + n):
        score = float(10 ** rng.normal(-4, 0.7))
        row, mlps = submission_row(f"s{i:04d}", f"team-{i % 7}", round_tag=ROUND if i % 3 else "v1-warmup",
                                   scores=(score, score * 2), flops=(float(10 ** rng.uniform(8, 12)),) * 2,
                                   minutes=int(rng.integers(0, 10_000)))
        rows.append(({**row, "status": "failed"} if i % 11 == 0 else row, mlps))
    return rows


@pytest.fixture()
def field(store_url, tmp_path):
    """60 submissions of 7 teams in two rounds, some failed, imported (which writes the snapshots)."""
    _files.import_files([write_csvs(tmp_path / "files", _rows(0, 60))], url=store_url)
    return store_url


def _snapshot_key(url: str, name: str) -> str:
    return _snapshot.key(name, _store.board_revision(url=url))


def _assert_identical(got: pd.DataFrame, expected: pd.DataFrame) -> None:
    assert list(got.columns) == list(expected.columns)
    assert got.dtypes.to_dict() == expected.dtypes.to_dict()
    pd.testing.assert_frame_equal(got, expected, check_exact=True)


def test_an_import_writes_snapshots_equal_to_the_tables_reads(field):
    for name, direct in ((f"round_scan:{ROUND}", _store._round_scan_rows(ROUND, field)),
                         ("round_scan:v1-warmup", _store._round_scan_rows("v1-warmup", field)),
                         ("timeline_field", _store._timeline_scan(field))):
        assert _snapshot_key(field, name) in blob_keys(_snapshot.NAMESPACE, url=field), name
        kept = _snapshot.read(field, name, _store.board_revision(url=field))
        _assert_identical(kept, direct)
        assert len(kept) > 10
    _assert_identical(_store.round_scan(ROUND, url=field), _store._round_scan_rows(ROUND, field))
    _assert_identical(_store.timeline_field(url=field), _store._timeline_scan(field))
    assert _store.timeline_field(url=field)["submitted_at"].dt.tz is not None


def test_every_write_changes_the_revision_and_the_next_read_is_fresh(field, tmp_path):
    revisions = [_store.board_revision(url=field)]
    scan = _store.round_scan(ROUND, url=field)
    sid = scan["submission_id"].iloc[0]

    assert _store.edit_submission(sid, {"team": "renamed-team"}, url=field)
    revisions.append(_store.board_revision(url=field))
    assert _store.round_scan(ROUND, url=field).set_index("submission_id").loc[sid, "team"] == "renamed-team"
    assert "renamed-team" in set(_store.timeline_field(url=field)["team"])

    _files.import_files([write_csvs(tmp_path / "more", _rows(100, 6), stem="more")], url=field)
    revisions.append(_store.board_revision(url=field))
    assert {"s0101", "s0103"} <= set(_store.round_scan(ROUND, url=field)["submission_id"])

    assert _store.delete_submission(sid, url=field)
    revisions.append(_store.board_revision(url=field))
    assert sid not in set(_store.round_scan(ROUND, url=field)["submission_id"])
    assert sid not in set(_store.timeline_field(url=field)["submission_id"])

    assert len(set(revisions)) == len(revisions)
    _assert_identical(_store.round_scan(ROUND, url=field), _store._round_scan_rows(ROUND, field))
    _assert_identical(_store.timeline_field(url=field), _store._timeline_scan(field))
    # one snapshot per scan: writing a scan's new one removed its older revisions' blobs
    kept = blob_keys(_snapshot.NAMESPACE, url=field)
    scans = [k.rsplit("@", 1)[0] for k in kept]
    assert sorted(scans) == sorted(set(scans)) == sorted([f"round_scan:{ROUND}", "round_scan:v1-warmup",
                                                           "timeline_field"])
    assert {_snapshot_key(field, f"round_scan:{ROUND}"), _snapshot_key(field, "timeline_field")} <= set(kept)


def test_a_torn_snapshot_is_a_miss_and_is_written_again(field):
    name = f"round_scan:{ROUND}"
    target = _snapshot_key(field, name)
    put_blob(_snapshot.NAMESPACE, target, get_blob(_snapshot.NAMESPACE, target, url=field)[:100], url=field)
    assert _snapshot.read(field, name, _store.board_revision(url=field)) is None
    _store._DERIVED.clear()
    _assert_identical(_store.round_scan(ROUND, url=field), _store._round_scan_rows(ROUND, field))
    _assert_identical(_snapshot.read(field, name, _store.board_revision(url=field)), _store._round_scan_rows(ROUND, field))


_CHILD = """
import sys
from whestboard.leaderboard import _store as store
def refuse(*args, **kwargs):
    raise AssertionError("the table was scanned")
store._columns_in_parts = refuse
url, round_tag, out = sys.argv[1], sys.argv[2], sys.argv[3]
store.round_scan(round_tag, url=url).to_pickle(out + "/scan.pkl")
store.timeline_field(url=url).to_pickle(out + "/timeline.pkl")
"""


def test_a_second_process_reads_the_snapshot_the_first_wrote(field, tmp_path, preloaded):
    """A second process whose table reads raise serves both scans, equal to the table's: from the files.
    It is forked from one that imported whestboard and never read a board (tests/preloaded.py), so
    nothing it serves can come from memory."""
    child = preloaded.start("python", _CHILD, field, ROUND, str(tmp_path), cwd=REPO)
    _, err = child.communicate(timeout=120)
    assert child.returncode == 0, err[-3000:]
    _assert_identical(pd.read_pickle(tmp_path / "scan.pkl"), _store._round_scan_rows(ROUND, field))
    _assert_identical(pd.read_pickle(tmp_path / "timeline.pkl"), _store._timeline_scan(field))


def test_a_snapshot_that_cannot_be_written_never_fails_a_committed_import(store_url, tmp_path, monkeypatch):
    """The rows are committed before the snapshots are written: a failure there is logged, not the import's."""
    def broken(**_):
        raise OSError("disk full while writing a snapshot")

    monkeypatch.setattr(_store, "refresh_snapshots", broken)
    report = _files.import_files([write_csvs(tmp_path / "files", _rows(0, 20))], url=store_url)
    assert len(report.inserted) == 20
    monkeypatch.undo()
    assert not [k for k in blob_keys(_snapshot.NAMESPACE, url=store_url)]  # none was written
    _assert_identical(_store.round_scan(ROUND, url=store_url), _store._round_scan_rows(ROUND, store_url))
