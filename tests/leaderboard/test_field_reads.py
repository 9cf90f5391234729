"""The store's narrow reads for a large round, on SQLite and PostgreSQL: each equals the full frame's answer."""

from __future__ import annotations

import numpy as np
import pytest

from tests.leaderboard import submissions_helpers as helpers
from tests.leaderboard.submissions_helpers import submission_row, write_csvs
from whestboard.leaderboard import _files, _ranking, _store

postgres_server, store_url = helpers.postgres_server, helpers.store_url
ROUND = "v2-phase2"


@pytest.fixture()
def field(store_url, tmp_path):
    """300 submissions of 12 teams in two rounds, ties on a team's best score, some failed."""
    rng = np.random.default_rng(3)
    rows = []
    for i in range(300):
        score = float(10 ** rng.normal(-4, 0.7)) if i % 50 else 1e-6  # every 50th ties at the lowest score
        row, mlps = submission_row(f"f{i:04d}", f"team-{i % 12:02d}", round_tag=ROUND if i % 3 else "v1-warmup",
                                   scores=(score, score), flops=(float(10 ** rng.uniform(8, 12)),) * 2,
                                   minutes=int(rng.integers(0, 10_000)))
        rows.append(({**row, "status": "failed"} if i % 41 == 0 else row, mlps))
    _files.import_files([write_csvs(tmp_path / "files", rows)], url=store_url)
    return store_url


def test_a_rounds_field_and_counts_are_its_graded_rows(field):
    full = _store.submissions_frame(round_tag=ROUND, url=field)
    graded = full[full["status"] == "graded"].sort_values("submission_id", ignore_index=True)
    narrow = _store.round_field(ROUND, url=field)
    assert narrow["submission_id"].tolist() == graded["submission_id"].tolist()
    for column in ("adjusted_score", "final_layer_mse", "mean_flops_used"):
        assert narrow[column].tolist() == graded[column].tolist()
    per_team, n_graded = _store.round_counts(ROUND, url=field)
    assert per_team == full["team"].value_counts().to_dict() and n_graded == len(graded)
    assert _store.rounds_present(url=field) == {ROUND, "v1-warmup"}


def test_the_best_candidates_give_the_whole_rounds_best_per_team(field):
    full = _store.submissions_frame(round_tag=ROUND, url=field)
    expected = _ranking.best_per_team(full)
    got = _ranking.best_per_team(_store.best_candidates(ROUND, url=field))
    assert got["submission_id"].tolist() == expected["submission_id"].tolist()
    assert len(_store.best_candidates(ROUND, url=field)) < len(full) / 5


def test_a_window_holds_exactly_the_dots_inside_it_and_none_past_the_limit(field):
    graded = _store.round_field(ROUND, url=field)
    x, y = graded["mean_flops_used"], graded["adjusted_score"]
    x_range, y_range = (float(x.quantile(0.2)), float(x.quantile(0.7))), (float(y.quantile(0.1)), float(y.quantile(0.8)))
    inside = graded[(x >= x_range[0]) & (x <= x_range[1]) & (y >= y_range[0]) & (y <= y_range[1])]
    n, rows = _store.in_window(ROUND, "mean_flops_used", "adjusted_score", x_range, y_range, len(inside), url=field)
    assert n == len(inside) > 0 and sorted(rows["submission_id"]) == sorted(inside["submission_id"])
    n, rows = _store.in_window(ROUND, "mean_effective_compute", "adjusted_score", x_range, y_range, len(inside) - 1,
                              url=field)
    assert n == len(inside) and rows.empty  # compute falls back to the FLOPs, as the scatter draws it


def test_the_timeline_field_carries_every_graded_submissions_time(field):
    full = _store.submissions_frame(url=field)
    graded = full[full["status"] == "graded"].sort_values("submission_id", ignore_index=True)
    narrow = _store.timeline_field(url=field)
    assert narrow["submission_id"].tolist() == graded["submission_id"].tolist()
    assert narrow["submitted_at"].tolist() == graded["submitted_at"].tolist()
    assert narrow["round"].tolist() == graded["round"].tolist()
