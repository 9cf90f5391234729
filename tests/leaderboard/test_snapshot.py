"""Columnar snapshots of the narrow scans: equal to the table's read, fresh after every write, shared across processes."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from tests.leaderboard import submissions_helpers as helpers
from tests.leaderboard.submissions_helpers import submission_row, write_csvs
from whestboard.leaderboard import files as si
from whestboard.leaderboard import snapshot, store
from whestboard.store import blobs

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
    si.import_files([write_csvs(tmp_path / "files", _rows(0, 60))], url=store_url)
    return store_url


def _snapshot_key(url: str, name: str) -> str:
    return snapshot.key(name, store.revision(url=url))


def _assert_identical(got: pd.DataFrame, expected: pd.DataFrame) -> None:
    assert list(got.columns) == list(expected.columns)
    assert got.dtypes.to_dict() == expected.dtypes.to_dict()
    pd.testing.assert_frame_equal(got, expected, check_exact=True)


def test_an_import_writes_snapshots_equal_to_the_tables_reads(field):
    for name, direct in ((f"round_scan:{ROUND}", store._round_scan_rows(ROUND, field)),
                         ("round_scan:v1-warmup", store._round_scan_rows("v1-warmup", field)),
                         ("timeline_field", store._timeline_scan(field))):
        assert _snapshot_key(field, name) in blobs.keys(snapshot.NAMESPACE, url=field), name
        kept = snapshot.read(field, name, store.revision(url=field))
        _assert_identical(kept, direct)
        assert len(kept) > 10
    _assert_identical(store.round_scan(ROUND, url=field), store._round_scan_rows(ROUND, field))
    _assert_identical(store.timeline_field(url=field), store._timeline_scan(field))
    assert store.timeline_field(url=field)["submitted_at"].dt.tz is not None


def test_every_write_changes_the_revision_and_the_next_read_is_fresh(field, tmp_path):
    revisions = [store.revision(url=field)]
    scan = store.round_scan(ROUND, url=field)
    sid = scan["submission_id"].iloc[0]

    assert store.edit(sid, {"team": "renamed-team"}, url=field)
    revisions.append(store.revision(url=field))
    assert store.round_scan(ROUND, url=field).set_index("submission_id").loc[sid, "team"] == "renamed-team"
    assert "renamed-team" in set(store.timeline_field(url=field)["team"])

    si.import_files([write_csvs(tmp_path / "more", _rows(100, 6), stem="more")], url=field)
    revisions.append(store.revision(url=field))
    assert {"s0101", "s0103"} <= set(store.round_scan(ROUND, url=field)["submission_id"])

    assert store.delete_submission(sid, url=field)
    revisions.append(store.revision(url=field))
    assert sid not in set(store.round_scan(ROUND, url=field)["submission_id"])
    assert sid not in set(store.timeline_field(url=field)["submission_id"])

    assert len(set(revisions)) == len(revisions)
    _assert_identical(store.round_scan(ROUND, url=field), store._round_scan_rows(ROUND, field))
    _assert_identical(store.timeline_field(url=field), store._timeline_scan(field))
    # one snapshot per scan: writing a scan's new one removed its older revisions' blobs
    kept = blobs.keys(snapshot.NAMESPACE, url=field)
    scans = [k.rsplit("@", 1)[0] for k in kept]
    assert sorted(scans) == sorted(set(scans)) == sorted([f"round_scan:{ROUND}", "round_scan:v1-warmup",
                                                           "timeline_field"])
    assert {_snapshot_key(field, f"round_scan:{ROUND}"), _snapshot_key(field, "timeline_field")} <= set(kept)


def test_a_torn_snapshot_is_a_miss_and_is_written_again(field):
    name = f"round_scan:{ROUND}"
    target = _snapshot_key(field, name)
    blobs.put(snapshot.NAMESPACE, target, blobs.get(snapshot.NAMESPACE, target, url=field)[:100], url=field)
    assert snapshot.read(field, name, store.revision(url=field)) is None
    store._cached.clear()
    _assert_identical(store.round_scan(ROUND, url=field), store._round_scan_rows(ROUND, field))
    _assert_identical(snapshot.read(field, name, store.revision(url=field)), store._round_scan_rows(ROUND, field))


_CHILD = """
import sys
from whestboard.leaderboard import store
def refuse(*args, **kwargs):
    raise AssertionError("the table was scanned")
store._columns_in_parts = refuse
url, round_tag, out = sys.argv[1], sys.argv[2], sys.argv[3]
store.round_scan(round_tag, url=url).to_pickle(out + "/scan.pkl")
store.timeline_field(url=url).to_pickle(out + "/timeline.pkl")
"""


def test_a_second_process_reads_the_snapshot_the_first_wrote(field, tmp_path):
    """A fresh interpreter whose table reads raise serves both scans, equal to the table's: from the files."""
    done = subprocess.run([sys.executable, "-c", _CHILD, field, ROUND, str(tmp_path)], cwd=REPO,
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    _assert_identical(pd.read_pickle(tmp_path / "scan.pkl"), store._round_scan_rows(ROUND, field))
    _assert_identical(pd.read_pickle(tmp_path / "timeline.pkl"), store._timeline_scan(field))
