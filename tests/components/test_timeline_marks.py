"""A large timeline's dots: every team's best per round, found on the few rows that can be it, equals the sort of all."""

from __future__ import annotations

import numpy as np
import pandas as pd

from components.figures import leaderboard as figs


def _field(n: int, seed: int) -> pd.DataFrame:
    """Ties everywhere: few distinct values, times and teams; ids not in id order."""
    rng = np.random.default_rng(seed)
    ids = [f"id-{i:05d}" for i in rng.permutation(n)]
    return pd.DataFrame({
        "submission_id": ids,
        "team": [f"team-{t}" for t in rng.integers(0, 40, n)],
        "round": rng.choice(["v1-warmup", "v1-phase1", "v2-phase2"], n),
        "submitted_at": pd.Timestamp("2026-11-01", tz="UTC") + pd.to_timedelta(rng.integers(0, 50, n), unit="h"),
        "vs_mc": rng.choice([0.5, 1.0, 2.0, 4.0], n),
    })


def test_every_teams_best_per_round_is_the_first_of_its_pair_in_the_whole_sort():
    for seed in range(3):
        field = _field(3000, seed)
        ordered = field.sort_values(["vs_mc", "submitted_at", "submission_id"], ascending=[False, True, True])
        expected = ordered.drop_duplicates(["round", "team"])["submission_id"].tolist()
        got = figs.timeline_team_bests(field)["submission_id"].tolist()
        assert got == expected
        assert len(got) == field.groupby(["round", "team"]).ngroups


def test_the_marks_found_once_are_what_the_ids_and_the_figure_use():
    field = _field(500, 7)
    marks = figs.timeline_marks(field)
    assert field["submission_id"].iloc[marks.bests].tolist() == figs.timeline_team_bests(field)["submission_id"].tolist()
    assert field["submission_id"].iloc[marks.records].tolist() == figs.timeline_records(field)["submission_id"].tolist()
    assert figs.timeline_drawn_ids(field, marks) == figs.timeline_drawn_ids(field)
