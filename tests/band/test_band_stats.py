"""The measured band tracks sigma^2 / N within sampling error, and its noise correction is right.

Tolerance. For one MLP, the ratio r = MSE_N / (sigma^2 / N) has expectation 1
(the band's N-sample mean is unbiased with per-neuron variance Var/N; sigma^2
is the mean of those variances). Different MLPs have independent weights and
streams, so the mean of r over M MLPs has standard error sd(r) / sqrt(M) by
the central limit theorem; we require |mean(r) - 1| < 4 standard errors at
every checkpoint. A 4-sigma miss has probability ~6e-5 per checkpoint, ~1e-3
over the ~12 checkpoints together (fewer in effect: one pass makes them
positively correlated). The seeds are fixed, so the test is deterministic; the
bound is what says a failure would be a real bias, not bad luck.
"""

from __future__ import annotations

import numpy as np
import pytest
from whestbench.budget import mc_flops_per_sample

from whestboard.band._folder import compute_band, load_band
from whestboard.data import bake, open_dataset, plan_from_args

WIDTH, DEPTH, N_MLPS, N_REF = 32, 3, 32, 2**14
N_MAX = 2**14
Z_LIMIT = 4.0


@pytest.fixture(scope="module")
def measured(tmp_path_factory):
    out = tmp_path_factory.mktemp("stats") / "ds"
    seeds = [1000 + 7 * i for i in range(N_MLPS)]
    bake(out, plan_from_args(round_tag=None, width=WIDTH, depth=DEPTH, n_mlps=None, n_samples=N_REF, seeds=seeds),
         explicit_seeds=True, show_progress=False)
    dataset = open_dataset(out)
    per_sample = mc_flops_per_sample(WIDTH, DEPTH, dtype_aware_billing=True)
    compute_band(dataset, budget=per_sample * N_MAX // 4, max_budget_multiple=4.0, show_progress=False)
    band = load_band(dataset)
    assert band is not None and band.complete and band.plan.n_max == N_MAX
    return dataset, band


def _z(ratios: np.ndarray) -> np.ndarray:
    """Per checkpoint: (mean ratio - 1) in standard errors of the mean across MLPs."""
    mean = ratios.mean(axis=0)
    se = ratios.std(axis=0, ddof=1) / np.sqrt(ratios.shape[0])
    return (mean - 1.0) / se


def test_corrected_final_layer_mse_tracks_sigma2_over_n(measured):
    _dataset, band = measured
    n = band.mlps[0].n.astype(np.float64)
    ratios = np.stack([b.mse("final") / (b.avg_variance / n) for b in band.mlps])
    z = _z(ratios)
    assert np.all(np.abs(z) < Z_LIMIT), dict(zip(band.mlps[0].n.tolist(), z.round(2).tolist(), strict=True))


def test_raw_mse_carries_the_references_noise_on_top(measured):
    """Against a 2^14-sample reference the floor equals sigma^2/N at N = 2^14: visible, and matched."""
    _dataset, band = measured
    n = band.mlps[0].n.astype(np.float64)
    ratios = np.stack([b.final_mse_raw / (b.avg_variance / n + b.avg_variance / N_REF) for b in band.mlps])
    z = _z(ratios)
    assert np.all(np.abs(z) < Z_LIMIT)
    # without the correction the largest checkpoint would read twice too high: far outside the tolerance
    uncorrected = np.stack([b.final_mse_raw / (b.avg_variance / n) for b in band.mlps])
    assert _z(uncorrected)[-1] > Z_LIMIT


def test_all_layer_mse_tracks_the_layer_averaged_sigma2_over_n(measured):
    _dataset, band = measured
    n = band.mlps[0].n.astype(np.float64)
    ratios = np.stack([b.mse("all") / (b.sigma2("all") / n) for b in band.mlps])
    assert np.all(np.abs(_z(ratios)) < Z_LIMIT)


def test_early_variance_estimate_agrees_with_the_references_avg_variance(measured):
    """The band's own 2^14-sample estimate of the final layer's variance vs the reference's (also 2^14)."""
    _dataset, band = measured
    ratio = np.array([b.layer_avg_variance[-1] / b.avg_variance for b in band.mlps])
    assert np.all(np.abs(ratio - 1) < 0.1)
    assert abs(ratio.mean() - 1) < 0.02


def test_band_table_aggregates_exactly_the_per_mlp_values(measured):
    _dataset, band = measured
    table = band.table("final")
    corrected = np.stack([b.mse("final") for b in band.mlps])
    np.testing.assert_array_equal(table["p50"].to_numpy(), np.percentile(corrected, 50, axis=0))
    np.testing.assert_array_equal(table["p10"].to_numpy(), np.percentile(corrected, 10, axis=0))
    np.testing.assert_allclose(table["mean"].to_numpy(), corrected.mean(axis=0))
    sigma2 = np.mean([b.avg_variance for b in band.mlps])
    np.testing.assert_allclose(table["expected"].to_numpy(), sigma2 / table["n"].to_numpy())
    assert (table["n_mlps"] == N_MLPS).all()
    assert (table["p10"] <= table["p25"]).all() and (table["p75"] <= table["p90"]).all()
