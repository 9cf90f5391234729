"""Rankings: best per team, bootstrap intervals, the paired test against the leader, MC@B."""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd
import pytest

from tests.leaderboard import submissions_helpers as helpers
from tests.leaderboard.submissions_helpers import submission_row, write_csvs
from whestboard.leaderboard import _files, _ranking, _store

sqlite_store = helpers.sqlite_store


def test_sign_flip_p_value_is_exact_for_small_n():
    d = np.array([0.3, -0.1, 0.5, 0.2, 0.4, -0.05, 0.25])
    observed = abs(d.mean())
    flips = [abs(np.dot(signs, d)) / d.size for signs in itertools.product((1, -1), repeat=d.size)]
    expected = np.mean([f >= observed - 1e-15 for f in flips])
    assert _ranking.sign_flip_p_value(d) == pytest.approx(expected, abs=1e-12)


def test_sign_flip_p_value_sampled_for_large_n_is_close_to_exact_tail():
    rng = np.random.default_rng(1)
    d = rng.normal(0.15, 1.0, size=40)
    p = _ranking.sign_flip_p_value(d)
    # Under the sign-flip null, mean(s*d) has variance sum(d^2)/n^2: the normal tail is a close check.
    from math import erfc, sqrt

    z = abs(d.mean()) / (np.sqrt((d**2).sum()) / d.size)
    assert p == pytest.approx(erfc(z / sqrt(2)), abs=0.02)
    assert _ranking.sign_flip_p_value(np.zeros(5)) == 1.0


def test_bootstrap_interval_covers_the_mean_about_95_percent():
    rng = np.random.default_rng(7)
    hits = 0
    trials = 300
    for t in range(trials):
        sample = rng.lognormal(mean=-11, sigma=0.5, size=50)
        low, high = _ranking.bootstrap_interval(sample, draws=1000, seed=t)
        hits += low <= np.exp(-11 + 0.5**2 / 2) <= high
    assert 0.88 <= hits / trials <= 0.99
    low, high = _ranking.bootstrap_interval(np.array([2.0, 2.0, 2.0]))
    assert low == high == 2.0


def test_pairing_separates_what_unpaired_intervals_cannot():
    """MLPs differ 100x more than the two estimators do; only the paired test sees the gap."""
    rng = np.random.default_rng(3)
    mlp_effect = rng.lognormal(-10, 1.0, size=50)
    leader = pd.Series(mlp_effect, index=range(50))
    other = pd.Series(mlp_effect * 1.05 + rng.normal(0, 1e-8, size=50), index=range(50))
    lead_ci, other_ci = _ranking.bootstrap_interval(leader.to_numpy()), _ranking.bootstrap_interval(other.to_numpy())
    assert other_ci[0] < lead_ci[1]  # the intervals overlap...
    comparison = _ranking.paired_comparison(other, leader)
    assert comparison.n_shared == 50 and comparison.p_value < 0.05 and not comparison.indistinguishable


def _board(tmp_path):
    rows = [
        submission_row("lead", "alpha", scores=(1.0e-6, 2.0e-6, 3.0e-6, 4.0e-6, 5.0e-6, 6.0e-6), flops=(1e9,) * 6,
                       failed=(False,) * 6, minutes=1),
        submission_row("alpha-old", "alpha", scores=(9e-6,) * 6, flops=(1e9,) * 6, failed=(False,) * 6),
        # tied with the leader: tiny differences of both signs
        submission_row("close", "beta", scores=(1.1e-6, 1.9e-6, 3.1e-6, 3.9e-6, 5.1e-6, 6.05e-6), flops=(1e9,) * 6,
                       failed=(False,) * 6, minutes=2),
        # clearly behind on every one of 8 MLPs (same first 6 shared)
        submission_row("far", "gamma", scores=(5e-6, 6e-6, 7e-6, 8e-6, 9e-6, 1e-5), flops=(1e9,) * 6,
                       failed=(False,) * 6, minutes=3),
    ]
    path = write_csvs(tmp_path / "board", rows)
    no_mlps = tmp_path / "nomlps.csv"
    row, _ = submission_row("bare", "delta", scores=(8e-6, 8e-6))
    pd.DataFrame([row]).to_csv(no_mlps, index=False)
    failed_row, _ = submission_row("crashed", "epsilon")
    failed_row.update(status="failed", adjusted_score="", final_layer_mse="", mean_multiplier="",
                      n_failed_mlps="", mean_flops_used="")
    failed = tmp_path / "failed.csv"
    pd.DataFrame([failed_row]).to_csv(failed, index=False)
    _files.import_files([path, no_mlps, failed])


def test_rank_round_best_per_team_with_verdicts(sqlite_store, tmp_path):
    _board(tmp_path)
    subs = _store.submissions_frame(round_tag="v1-warmup")
    table = _ranking.rank_round(subs, _store.mlp_frame()).set_index("team")
    assert list(table.index) == ["alpha", "beta", "gamma", "delta"]  # epsilon's only submission failed
    assert table.loc["alpha", "submission_id"] == "lead"
    assert table.loc["alpha", "verdict"] == _ranking.VERDICT_LEADER
    assert table.loc["beta", "verdict"] == _ranking.VERDICT_TIED
    assert table.loc["gamma", "verdict"] == _ranking.VERDICT_BEHIND
    assert table.loc["delta", "verdict"] == _ranking.VERDICT_NO_MLPS
    assert table.loc["gamma", "p_value"] == pytest.approx(2 / 2**6)  # every flip but the two extremes is smaller
    assert table["rank"].tolist() == [1, 2, 3, 4]
    scores = _store.mlp_frame(["lead"])["adjusted_score"].to_numpy()
    # an independent percentile bootstrap of the mean over the leader's MLPs, same draws and seed
    picks = np.random.default_rng(_ranking.SEED).integers(0, scores.size, size=(_ranking.BOOTSTRAP_DRAWS, scores.size))
    expected = np.quantile(scores[picks].mean(axis=1), [0.025, 0.975])
    assert table.loc["alpha", "ci_low"] == pytest.approx(expected[0], rel=1e-12)
    assert table.loc["alpha", "ci_high"] == pytest.approx(expected[1], rel=1e-12)
    assert table.loc["alpha", "ci_low"] <= scores.mean() <= table.loc["alpha", "ci_high"]
    assert np.isnan(table.loc["delta", "ci_low"])


def test_mc_reference_uses_the_variance_of_the_scored_mlps(sqlite_store, tmp_path):
    from whestbench.budget import ROUNDS, mc_at_bm

    own, _ = submission_row("own", "a", mean_avg_variance=0.2)
    per_mlp_row, per_mlp = submission_row("permlp", "b")
    for m, v in zip(per_mlp, (0.1, 0.3), strict=True):
        m["avg_variance"] = v
    fallback, _ = submission_row("fallback", "c")
    path = write_csvs(tmp_path / "mc", [(own, []), (per_mlp_row, per_mlp)])
    extra = tmp_path / "fb.csv"
    pd.DataFrame([fallback]).to_csv(extra, index=False)
    _files.import_files([path, extra])
    subs = _store.submissions_frame()
    ref = _ranking.mc_reference(subs, _ranking.mlp_variance_of(_store.mlp_frame()), {"v1-warmup": 0.25})
    cfg = ROUNDS["v1-warmup"]
    assert ref.loc["own", "mc_at_b"] == pytest.approx(mc_at_bm(0.2, cfg), rel=1e-12)
    assert ref.loc["permlp", "mc_at_b"] == pytest.approx(mc_at_bm(0.2, cfg), rel=1e-12)
    assert ref.loc["fallback", "mc_at_b"] == pytest.approx(mc_at_bm(0.25, cfg), rel=1e-12)
    assert ref.loc["own", "mc_basis"] == "own MLPs" and ref.loc["fallback", "mc_basis"] == "round dataset"
    sql = _store.mlp_variance_summary()
    assert sql["permlp"] == pytest.approx(0.2)


def test_bootstrap_intervals_of_a_matrix_equal_each_rows_own_interval():
    rng = np.random.default_rng(12)
    matrix = rng.lognormal(-10, 1.0, size=(7, 30))
    matrix[2, 5:] = np.nan  # fewer known MLPs
    matrix[4, :] = np.nan  # none
    matrix[5, 1:] = np.nan  # one
    got = _ranking.bootstrap_intervals(matrix)
    for i, row in enumerate(matrix):
        known = row[~np.isnan(row)]
        expected = _ranking.bootstrap_interval(known) if known.size else (np.nan, np.nan)
        np.testing.assert_allclose(got[i], expected, rtol=1e-12)
