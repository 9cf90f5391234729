"""The paired statistics on constructed cases whose answer is known.

Every draw is seeded, so each test gives the same result on every run. Where a test checks a rate
(coverage, power), the number of repetitions and the tolerance are chosen so that, if the code were
right, the observed rate would leave the band with probability under 1e-4 (computed in each test's
comment from the binomial standard error): a seed that happens to fail is a bug, not bad luck.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from whestboard.compare._paired import (
    LIMIT_NOISE,
    mlps_needed,
    noise_split,
    paired_stat,
    reference_noise_variance,
)
from whestboard.leaderboard import SEED, bootstrap_interval

N_NEURONS = 64
N_REF = 1000


def _population(rng, n_mlps: int, delta: float):
    """MLPs whose two estimators' true final-layer MSEs differ by ``delta`` in expectation.

    B predicts y + u with an MLP-dependent error scale (so MSEs spread over a decade across MLPs);
    A predicts B + v with E[v^2] = delta, so E[true MSE_A - true MSE_B] = delta exactly. The reference
    is y + e with Var(e_i) = sigma_m^2 / N_ref, sigma_m^2 the MLP's avg_variance.
    """
    sigma2 = np.exp(rng.normal(0.0, 0.5, n_mlps))  # avg_variance per MLP, median 1
    floor = sigma2 / N_REF
    truth = np.abs(rng.normal(0.5, 0.3, (n_mlps, N_NEURONS)))
    scale = np.sqrt(0.1 * floor * np.exp(rng.normal(0.0, 1.0, n_mlps)))
    b = truth + rng.normal(0.0, 1.0, truth.shape) * scale[:, None]
    a = b + rng.normal(0.0, math.sqrt(delta), truth.shape)
    reference = truth + rng.normal(0.0, 1.0, truth.shape) * np.sqrt(floor)[:, None]
    mse_a = ((a - reference) ** 2).mean(axis=1)
    mse_b = ((b - reference) ** 2).mean(axis=1)
    return a, b, mse_a, mse_b, sigma2


DELTA = 0.1 / N_REF  # a tenth of the median MLP's noise floor (avg_variance / N_ref = 1e-3)


def test_a_difference_below_the_floor_is_resolved_paired_while_unpaired_intervals_overlap():
    rng = np.random.default_rng(11)
    a, b, mse_a, mse_b, sigma2 = _population(rng, 60, DELTA)
    stat = paired_stat(mse_a, mse_b, metric="final_layer_mse")
    assert DELTA < np.median(sigma2 / N_REF)  # the difference sits below the floor...
    assert stat.resolved and stat.ci_low > 0  # ...and the paired interval still excludes zero
    assert stat.ci_low <= DELTA <= stat.ci_high
    assert stat.p_value < 0.01
    low_a, high_a = bootstrap_interval(mse_a)
    low_b, high_b = bootstrap_interval(mse_b)
    assert low_a < high_b and low_b < high_a  # the unpaired intervals overlap
    noise = np.array([reference_noise_variance(a[m], b[m], sigma2[m], N_REF) for m in range(60)])
    split = noise_split(mse_a - mse_b, noise, sigma2 / N_REF)
    # Per MLP the reference's part (sd ~ 2 sqrt(delta floor / n) ~ 0.08e-3) exceeds the spread of the
    # true differences (sd ~ sqrt(4 s^2 delta / n) ~ 0.03e-3): the noise limits this interval.
    assert split.limited_by == LIMIT_NOISE
    assert 0 < split.reference <= split.total
    assert "below the reference's noise floor" in split.sentence(stat.mean_difference)


def test_paired_interval_covers_the_true_difference_in_about_95_percent_of_draws():
    # 2000 draws: binomial sd of the coverage is sqrt(0.95 * 0.05 / 2000) = 0.0049. The percentile
    # bootstrap at 40 MLPs covers ~0.94; the band [0.915, 0.98] is >= 5 sd from 0.94..0.95 on each
    # side, a false failure under 1e-6.
    rng = np.random.default_rng(2026)
    covered = 0
    draws = 2000
    for _ in range(draws):
        _, _, mse_a, mse_b, _ = _population(rng, 40, DELTA)
        low, high = bootstrap_interval(mse_a - mse_b, draws=1000)
        covered += low <= DELTA <= high
    assert 0.915 <= covered / draws <= 0.98


def test_reference_noise_variance_matches_redrawn_references():
    # 4000 redrawn references: the sd of an sd estimate is sd / sqrt(2 * 4000) = 1.1%; a 6% band is
    # more than 5 of those, a false failure under 1e-6.
    rng = np.random.default_rng(5)
    truth = rng.normal(0.5, 0.3, N_NEURONS)
    a, b = truth + rng.normal(0, 0.02, N_NEURONS), truth + rng.normal(0, 0.02, N_NEURONS)
    sigma2 = 0.7
    refs = truth + rng.normal(0, math.sqrt(sigma2 / N_REF), (4000, N_NEURONS))
    differences = ((a - refs) ** 2).mean(axis=1) - ((b - refs) ** 2).mean(axis=1)
    predicted = math.sqrt(reference_noise_variance(a, b, sigma2, N_REF))
    assert differences.std(ddof=1) == pytest.approx(predicted, rel=0.06)
    # ...and the e^2 terms cancel: the mean difference is the true one.
    true_difference = ((a - truth) ** 2).mean() - ((b - truth) ** 2).mean()
    assert differences.mean() == pytest.approx(true_difference, abs=6 * predicted / math.sqrt(4000))


def _exact_sign_flip(d: np.ndarray) -> float:
    observed = abs(d.mean())
    stats = [abs(np.dot(signs, d)) / d.size for signs in itertools.product((1.0, -1.0), repeat=d.size)]
    return sum(s >= observed * (1 - 1e-12) for s in stats) / len(stats)


def test_sign_flip_and_bootstrap_equal_independent_computations():
    rng = np.random.default_rng(3)
    a = np.exp(rng.normal(-10, 1, 12))
    b = a * np.exp(rng.normal(0.15, 0.3, 12))
    stat = paired_stat(a, b, metric="score")
    assert stat.p_value == pytest.approx(_exact_sign_flip(a - b), abs=1e-12)
    picks = np.random.default_rng(SEED).integers(0, 12, size=(4000, 12))
    means = (a - b)[picks].mean(axis=1)
    assert (stat.ci_low, stat.ci_high) == pytest.approx(tuple(np.quantile(means, [0.025, 0.975])), rel=1e-12)
    logs = (np.log(a) - np.log(b))[picks].mean(axis=1)
    assert stat.ratio == pytest.approx(math.exp(np.mean(np.log(a / b))), rel=1e-12)
    assert (stat.ratio_low, stat.ratio_high) == pytest.approx(tuple(np.exp(np.quantile(logs, [0.025, 0.975]))),
                                                              rel=1e-12)
    assert (stat.wins, stat.losses, stat.ties) == (int((a < b).sum()), int((a > b).sum()), 0)
    assert stat.mean_difference == pytest.approx(float(np.mean(a - b)), rel=1e-14)


def test_sign_flip_beyond_16_mlps_equals_an_independent_monte_carlo():
    rng = np.random.default_rng(4)
    d = rng.normal(0.3, 1.0, 40)
    stat = paired_stat(d + 5.0, np.full(40, 5.0), metric="score")
    signs = np.random.default_rng(SEED).choice((1.0, -1.0), size=(10000, 40))
    scaled = d / np.abs(d).max()
    hits = (np.abs(signs @ scaled) / 40 >= abs(scaled.mean()) * (1 - 1e-12)).sum()
    assert stat.p_value == pytest.approx((hits + 1) / 10001, abs=1e-12)


def test_mlps_needed_agrees_with_a_simulated_test():
    # The formula sizes a two-sided 95% test for 80% power. 4000 simulated experiments at that size:
    # binomial sd of the rejection rate is sqrt(0.8 * 0.2 / 4000) = 0.0063; the band +-0.04 is > 6 sd,
    # a false failure under 1e-9. (A t rather than z critical value at ~64 MLPs costs ~1% of power.)
    rng = np.random.default_rng(8)
    pilot = rng.normal(0.0, 1.0, 500)
    pilot = (pilot - pilot.mean()) / pilot.std(ddof=1) * 2.0 + 0.7  # exactly mean 0.7, sd 2.0
    needed = mlps_needed(pilot)
    assert needed == pytest.approx(((1.959964 + 0.841621) * 2.0 / 0.7) ** 2, rel=1e-5)

    def rejection_rate(n: int) -> float:
        samples = rng.normal(0.7, 2.0, (4000, n))
        z = samples.mean(axis=1) / (samples.std(axis=1, ddof=1) / math.sqrt(n))
        return float((np.abs(z) > 1.959964).mean())

    assert rejection_rate(math.ceil(needed)) == pytest.approx(0.8, abs=0.04)
    assert rejection_rate(math.ceil(needed / 4)) < 0.45  # a quarter of the MLPs resolves it far less often


def test_degenerate_inputs_say_nothing_rather_than_something_wrong():
    empty = paired_stat(np.array([]), np.array([]), metric="score")
    assert empty.n == 0 and not empty.resolved and math.isnan(empty.p_value)
    one = paired_stat(np.array([2.0]), np.array([1.0]), metric="score")
    assert not one.resolved and math.isnan(one.mlps_needed)
    same = paired_stat(np.array([1.0, 2.0, 3.0]), np.array([1.0, 2.0, 3.0]), metric="score")
    assert same.p_value == 1.0 and same.ties == 3 and math.isinf(same.mlps_needed)
    with pytest.raises(ValueError, match="aligned"):
        paired_stat(np.zeros(3), np.zeros(4), metric="score")
