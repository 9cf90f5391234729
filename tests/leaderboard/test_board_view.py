"""The leaderboard's view in the core: what the page shows beside its figures, from the store's rows."""

from __future__ import annotations

import numpy as np

from tests.leaderboard.submissions_helpers import sqlite_store, submission_row, write_csvs  # noqa: F401
from whestboard.leaderboard import _files, _integrity, _view

ROUND = "v2-phase2"


def _import(url, folder, n: int = 60, teams: int = 9) -> None:
    rng = np.random.default_rng(11)
    rows = []
    for i in range(n):
        score = float(10 ** rng.normal(-4, 0.5))
        row, mlps = submission_row(f"v{i:03d}", f"team-{i % teams}", round_tag=ROUND, scores=(score, score * 1.2),
                                   minutes=i)
        rows.append(({**row, "status": "failed"} if i % 17 == 5 else row, mlps))
    _files.import_files([write_csvs(folder, rows)], url=url)


def test_the_view_holds_each_teams_best_in_rank_order_and_the_rounds_counts(sqlite_store, tmp_path):  # noqa: F811
    _import(sqlite_store, tmp_path / "files")
    board = _view.board(ROUND, "public", organizer=False, team="team-3", url=sqlite_store)
    table = _integrity.viewer_board(ROUND, "public", organizer=False, url=sqlite_store)
    expected = table.sort_values(["rank", "submission_id"], kind="mergesort")
    assert [r["submission_id"] for r in board.rows] == expected["submission_id"].tolist()
    assert [r["rank"] for r in board.rows] == expected["rank"].tolist()
    assert board.leader_id == expected["submission_id"].iloc[0] and board.rows[0]["vs_leader"] == "leader"
    assert board.per_team == {f"team-{k}": 60 // 9 + (k < 60 % 9) for k in range(9)}
    assert board.summary[0].startswith(f"60 submissions from 9 teams in {ROUND}")
    assert board.refused is None and not board.team_unknown and board.ties.startswith("Neighbours at the top")
    for row in board.rows:  # JSON-safe: no NaN reaches the page
        assert all(not (isinstance(v, float) and v != v) for v in row.values())


def test_a_private_split_without_the_token_is_refused_in_words_and_nothing_withheld_is_shown(sqlite_store,  # noqa: F811
                                                                                            tmp_path):
    _import(sqlite_store, tmp_path / "files")
    board = _view.board(ROUND, "private", organizer=False, team="nobody", url=sqlite_store)
    assert board.split == "public" and board.refused == "the private split is shown only with the organizer token"
    assert not set(_integrity.ORGANIZER_COLUMNS) & set(board.table.columns)
    assert board.team_unknown
    organizer = _view.board(ROUND, "private", organizer=True, url=sqlite_store)
    assert organizer.split == "private" and organizer.refused is None


def test_the_top_of_a_long_board_is_sent_with_the_chosen_teams_row(sqlite_store, tmp_path, monkeypatch):  # noqa: F811
    _import(sqlite_store, tmp_path / "files", n=40, teams=40)
    monkeypatch.setattr(_view, "RANKING_ROWS", 10)
    table = _integrity.viewer_board(ROUND, "public", organizer=False, url=sqlite_store)
    last = table.sort_values(["rank", "submission_id"])["team"].iloc[-1]
    board = _view.board(ROUND, "public", organizer=False, team=last, url=sqlite_store)
    assert len(board.rows) == 11 and board.rows[-1]["team"] == last
    assert f"top 10 of {len(table):,} teams" in board.summary[-1]


def test_the_ranking_frame_is_built_once_per_store_revision_and_viewer(sqlite_store, tmp_path):  # noqa: F811
    """The board's summary and every page turn of the paged ranking read one frame until the store changes."""
    _import(sqlite_store, tmp_path / "files", n=20, teams=5)
    first = _view.ranking_frame(ROUND, "public", organizer=False, url=sqlite_store)
    assert _view.ranking_frame(ROUND, "public", organizer=False, url=sqlite_store) is first
    organizer = _view.ranking_frame(ROUND, "public", organizer=True, url=sqlite_store)
    assert organizer is not first and set(_integrity.ORGANIZER_COLUMNS) & set(organizer.columns)
    assert not set(_integrity.ORGANIZER_COLUMNS) & set(first.columns)
    row, mlps = submission_row("late", "team-new", round_tag=ROUND, scores=(1e-9, 1e-9), minutes=99)
    _files.import_files([write_csvs(tmp_path / "more", [(row, mlps)])], url=sqlite_store)
    after = _view.ranking_frame(ROUND, "public", organizer=False, url=sqlite_store)
    assert after is not first and after["team"].iloc[0] == "team-new" and len(after) == len(first) + 1
