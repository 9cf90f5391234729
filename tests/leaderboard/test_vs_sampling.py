"""The board's "vs Sampling" column is whestbench's MC@B_m of the same MLPs' mean avg_variance over the score."""

from __future__ import annotations

import numpy as np
import pytest
from whestbench.budget import ROUNDS, mc_at_bm, mc_flops_per_sample_for_round, mc_samples_at_budget

from tests.leaderboard import submissions_helpers as helpers
from tests.leaderboard.submissions_helpers import submission_row, write_csvs
from whestboard.leaderboard import _files, board

sqlite_store = helpers.sqlite_store

PUBLIC_VARIANCE = (0.11, 0.13, 0.17, 0.19)
PRIVATE_VARIANCE = (0.31, 0.37, 0.41, 0.43)


def _import(tmp_path) -> tuple[list[float], list[float]]:
    """One submission whose own mean_avg_variance (0.9) covers neither half: the halves' MLPs must decide."""
    public, private = [2e-6, 3e-6, 4e-6, 5e-6], [6e-6, 7e-6, 8e-6, 9e-6]
    row, mlps = submission_row("s-1", "alpha", scores=public, flops=(1e9,) * 4, failed=(False,) * 4,
                               mean_avg_variance=0.9)
    for m, v in zip(mlps, PUBLIC_VARIANCE, strict=True):
        m["avg_variance"] = v
    mlps += [{"submission_id": "s-1", "mlp_index": i, "final_layer_mse": s * 10, "adjusted_score": s,
              "flops_used": 1e9, "split": "private", "avg_variance": v}
             for i, (s, v) in enumerate(zip(private, PRIVATE_VARIANCE, strict=True))]
    _files.import_files([write_csvs(tmp_path, [(row, mlps)])])
    return public, private


def test_vs_sampling_is_whestbenchs_mc_at_bm_of_the_ranked_mlps_over_their_mean_score(sqlite_store, tmp_path):
    public, private = _import(tmp_path)
    cfg = ROUNDS["v1-warmup"]
    shown = board("v1-warmup", "public", organizer=False).table.set_index("submission_id")
    assert shown.loc["s-1", "vs_mc"] == pytest.approx(mc_at_bm(float(np.mean(PUBLIC_VARIANCE)), cfg)
                                                      / np.mean(public), rel=1e-12)
    withheld = board("v1-warmup", "private", organizer=True).table.set_index("submission_id")
    assert withheld.loc["s-1", "vs_mc"] == pytest.approx(mc_at_bm(float(np.mean(PRIVATE_VARIANCE)), cfg)
                                                         / np.mean(private), rel=1e-12)


def test_mc_at_bm_is_the_mean_variance_over_the_samples_the_budget_buys():
    """What whestbench publishes as sampling_mse: sigma^2 / N with N = B / (FLOPs per sample), fractional."""
    for cfg in ROUNDS.values():
        n = mc_samples_at_budget(cfg)
        assert n == cfg.flop_budget / mc_flops_per_sample_for_round(cfg)
        assert mc_at_bm(0.25, cfg) == 0.25 / n
