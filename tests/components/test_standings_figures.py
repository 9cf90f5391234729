"""The standings figures and the scatter's equal-score lines draw what the core computed."""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd
import pytest
from whestbench.budget import ROUNDS, mc_at_bm

from components.figures import leaderboard as figs
from components.figures import standings as sfigs
from tests.components.test_submissions_figures import REF
from whestboard.leaderboard import bootstrap_standings, fragility, shake_up

TEAMS = ["a", "b", "c", "d", "e"]


def _points(n: int = 120) -> pd.DataFrame:
    """Graded submissions spread over three decades of FLOPs below the budget, scores around 1e-5."""
    rng = np.random.default_rng(0)
    budget = ROUNDS["v1-warmup"].flop_budget
    flops = budget * 10 ** rng.uniform(-3, 0, n)
    score = 1e-5 * 10 ** rng.normal(0, 0.5, n)
    return pd.DataFrame({
        "submission_id": [f"s{i}" for i in range(n)], "team": [f"t{i % 7}" for i in range(n)],
        "round": "v1-warmup", "status": "graded", "submitted_at": pd.Timestamp("2026-05-01", tz="UTC"),
        "mean_flops_used": flops, "mean_effective_compute": flops * 1.1, "adjusted_score": score,
        "final_layer_mse": score * 10, "mean_multiplier": 0.1, "n_failed_mlps": 0,
    })


def _scores() -> np.ndarray:
    rng = np.random.default_rng(2)
    mlp = rng.lognormal(0, 1, 16)
    return np.stack([mlp * rng.lognormal(s, 0.3, 16) for s in (0.0, 0.1, 0.2, 0.4, 0.8)])


def test_shake_up_draws_each_finalist_at_its_two_ranks_with_a_segment_from_the_diagonal():
    public = pd.DataFrame({"team": ["c", "a", "b", "d", "x"], "rank": [1, 2, 3, 4, 5]})
    standings = [{"rank": i + 1, "team": t} for i, t in enumerate(TEAMS)]  # e: not on the public board
    shake = shake_up(public, standings)
    fig = sfigs.shake_up_figure(shake, team="c")
    dots = next(t for t in fig.data if t.name == "finalists")
    on_board = shake.dropna(subset=["public_rank"])
    assert list(dots.x) == on_board["public_rank_among_finalists"].tolist()
    assert list(dots.y) == on_board["final_rank"].tolist()
    segments = {t.name.split()[0]: t for t in fig.data if t.mode == "lines" and t.name != "no movement"}
    rose, fell = int((on_board["moved"] > 0).sum()), int((on_board["moved"] < 0).sum())
    assert segments["rose"].name == f"rose ({rose})" and segments["fell"].name == f"fell ({fell})"
    assert len(segments["rose"].x) == 3 * rose  # start on the diagonal, end at the dot, a gap
    assert list(segments["fell"].y[0::3]) == list(segments["fell"].x[0::3])
    assert "1 finalist(s) with no submission on the public board" in fig.layout.title.text
    assert fig.data[-1].name == "team: c" and list(fig.data[-1].y) == [3]
    assert fig.layout.yaxis.range[0] > fig.layout.yaxis.range[1]  # rank 1 on top


def test_probability_heatmaps_hold_the_bootstrap_and_the_win_matrix_leaves_the_diagonal_blank():
    boot = bootstrap_standings(_scores(), TEAMS, draws=400)
    heat = sfigs.rank_probability_figure(boot).data[0]
    np.testing.assert_allclose(np.array(heat.z, float), np.round(boot.rank_at_most, 4))
    assert list(heat.y) == TEAMS and list(heat.x) == [1, 2, 3, 4, 5]
    wins = sfigs.win_matrix_figure(boot).data[0]
    assert all(wins.z[i][i] is None for i in range(5))
    assert wins.z[0][1] == pytest.approx(round(boot.wins[0, 1], 4))
    assert np.array(wins.customdata, float) == pytest.approx(np.round(boot.ties, 4))


def test_fragility_shows_the_median_and_5_to_95_percent_ranks_per_number_left_out():
    frag = fragility(_scores(), TEAMS, [1, 3], draws=300)
    fig = sfigs.fragility_figure(frag)
    assert len(fig.data) == 2
    for e, trace in enumerate(fig.data):
        for t in range(5):
            cumulative = np.cumsum(frag.rank_share[e][t])
            median = 1 + int((cumulative < 0.5 - 1e-12).sum())
            low, high = 1 + int((cumulative < 0.05 - 1e-12).sum()), 1 + int((cumulative < 0.95 - 1e-12).sum())
            assert trace.y[t] == median
            assert trace.error_y.array[t] == high - median and trace.error_y.arrayminus[t] == median - low
    assert "every subset" in fig.data[0].name  # 16 subsets of 1 are fewer than 300 draws


@pytest.mark.parametrize("y_metric", ["score", "mse"])
def test_equal_score_lines_are_whestbenchs_mc_at_bm_over_powers_of_ten(y_metric):
    cfg = ROUNDS["v1-warmup"]
    ref = dataclasses.replace(REF, mc_at_b=mc_at_bm(REF.mean_avg_variance, cfg))
    fig = figs.scatter_figure(_points(), ref, round_tag="v1-warmup", y_metric=y_metric, x_metric="compute")
    lines = [t for t in fig.data if (t.name or "").startswith("equal score")]
    assert len(lines) == 1
    x = np.array([np.nan if v is None else v for v in lines[0].x], float)
    y = np.array([np.nan if v is None else v for v in lines[0].y], float)
    shown = np.isfinite(x)
    score = y[shown] * (np.maximum(0.1, x[shown] / cfg.flop_budget) if y_metric == "mse" else 1.0)
    multiples = mc_at_bm(REF.mean_avg_variance, cfg) / score
    powers = np.log10(multiples)
    np.testing.assert_allclose(powers, np.round(powers), atol=5e-4)  # 5 significant digits in the JSON
    assert len(set(np.round(powers).astype(int))) >= 2
    labels = [a.text for a in fig.layout.annotations if (a.name or "").startswith("equal-score-")]
    assert labels and all(label.endswith("x") for label in labels)


def test_no_equal_score_line_without_mc_at_b():
    fig = figs.scatter_figure(_points(), REF, round_tag="v1-warmup")
    assert not [t for t in fig.data if (t.name or "").startswith("equal score")]
