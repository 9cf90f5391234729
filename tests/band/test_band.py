"""The band's one-pass kernel, stream and prices, checked against whestbench and flopscope themselves."""

from __future__ import annotations

import math

import flopscope as flops
import flopscope.numpy as fnp
import numpy as np
import pytest
from threadpoolctl import threadpool_limits
from whestbench import MLP, sample_layer_statistics
from whestbench.budget import mc_flops_per_sample, mc_samples_at_budget
from whestbench.seeds import derive_seed_streams
from whestbench.simulation import _pick_chunk_size

from whestboard.band._measure import (
    BandError,
    band_rng,
    band_seed_sequence,
    checkpoint_means,
    compare_with_sampling,
    make_plan,
    per_layer_mse,
)
from whestboard.data import build_weights
from whestboard.rules import ALL_ROUNDS

SEED = 2**61 + 12345


def _mlp(weights: np.ndarray) -> MLP:
    return MLP(width=weights.shape[1], depth=weights.shape[0], weights=[fnp.asarray(w) for w in weights])


def _whestbench_run(weights: np.ndarray, n: int, seed: int) -> tuple[np.ndarray, int]:
    """whestbench's own sampler at N on the band's stream: (means, FLOPs flopscope billed)."""
    with flops.BudgetContext(flop_budget=10**15, quiet=True) as ctx:
        means, _final, _var = sample_layer_statistics(
            _mlp(weights), n, rng=fnp.random.default_rng(band_seed_sequence(seed))
        )
    return np.asarray(means, dtype=np.float32), int(ctx.flops_used)


# ---------------------------------------------------------------------------
# stream
# ---------------------------------------------------------------------------


def test_band_stream_is_a_fourth_child_independent_of_the_protocols_three():
    weight_ss, sample_ss, estimator_seed = derive_seed_streams(SEED)
    children = np.random.SeedSequence(SEED).spawn(4)
    band_ss = band_seed_sequence(SEED)
    assert band_ss.spawn_key == (3,) and band_ss.entropy == SEED
    # the protocol's streams are exactly spawn(4)[:3], so nothing whestbench uses moved
    assert children[0].generate_state(4).tobytes() == weight_ss.generate_state(4).tobytes()
    assert children[1].generate_state(4).tobytes() == sample_ss.generate_state(4).tobytes()
    assert int(children[2].generate_state(1)[0]) == estimator_seed
    states = [ss.generate_state(8).tobytes() for ss in (*children[:3], band_ss)]
    assert len(set(states)) == 4
    band_draw = band_rng(SEED).standard_normal(10_000, dtype=np.float32)
    reference_draw = np.random.default_rng(sample_ss).standard_normal(10_000, dtype=np.float32)
    assert abs(np.corrcoef(band_draw, reference_draw)[0, 1]) < 0.05  # 5 standard errors at n = 10,000


# ---------------------------------------------------------------------------
# one pass == separate runs
# ---------------------------------------------------------------------------


def test_one_pass_checkpoints_equal_separate_whestbench_runs_on_the_same_stream():
    """Chunk-end checkpoints and the last are bit-exact; those inside a chunk agree to float32 rounding.

    Inside a chunk the separate run multiplies a shorter matrix, and OpenBLAS
    rounds a row differently depending on the number of rows in the call, so
    bit equality is not available there; the sums are otherwise formed in the
    same order. Both sides run with one BLAS thread (the band's setting).
    """
    width, depth = 128, 3
    chunk = _pick_chunk_size(width)
    assert chunk == 8192
    weights = build_weights(width, depth, SEED)
    checkpoints = [16, 100, 1024, chunk, chunk + 1808, 2 * chunk, 2 * chunk + 3000]
    with threadpool_limits(limits=1, user_api="blas"):
        one_pass = checkpoint_means(list(weights), checkpoints, band_rng(SEED))
        truth, _ = _whestbench_run(weights, 3 * chunk, SEED + 1)
        for k, n in enumerate(checkpoints):
            separate, _ = _whestbench_run(weights, n, SEED)
            if n % chunk == 0 or n == checkpoints[-1]:
                np.testing.assert_array_equal(one_pass.layer_means[k], separate, err_msg=f"N={n}")
            else:
                np.testing.assert_allclose(one_pass.layer_means[k], separate, rtol=2e-6, atol=1e-7,
                                           err_msg=f"N={n}")
            np.testing.assert_allclose(per_layer_mse(one_pass.layer_means[k:k + 1], truth)[0],
                                       per_layer_mse(separate[None], truth)[0], rtol=1e-4)
    assert list(one_pass.n) == checkpoints


def test_checkpoints_inside_the_first_chunk_and_repeated_runs_are_deterministic():
    weights = build_weights(32, 2, 7)
    with threadpool_limits(limits=1, user_api="blas"):
        a = checkpoint_means(list(weights), [16, 32, 64, 5000], band_rng(7))
        b = checkpoint_means(list(weights), [16, 32, 64, 5000], band_rng(7))
    np.testing.assert_array_equal(a.layer_means, b.layer_means)
    with pytest.raises(BandError):
        checkpoint_means(list(weights), [0, 10], band_rng(7))


# ---------------------------------------------------------------------------
# prices
# ---------------------------------------------------------------------------


def _sum_of_squares_bill(width: int, n: int) -> int:
    """What flopscope bills for sample_layer_statistics' sum of squares over n samples (its own ops)."""
    with flops.BudgetContext(flop_budget=10**15, quiet=True) as ctx:
        total = fnp.zeros(width, dtype=fnp.float64)
        chunk = _pick_chunk_size(width)
        for start in range(0, n, chunk):
            x = fnp.ones((min(chunk, n - start), width), dtype=fnp.float32)
            x_f64 = fnp.asarray(x, dtype=fnp.float64)
            total = total + fnp.sum(x_f64**2, axis=0)
    return int(ctx.flops_used) - _ones_bill(width, n)


def _ones_bill(width: int, n: int) -> int:
    with flops.BudgetContext(flop_budget=10**15, quiet=True) as ctx:
        chunk = _pick_chunk_size(width)
        for start in range(0, n, chunk):
            fnp.ones((min(chunk, n - start), width), dtype=fnp.float32)
    return int(ctx.flops_used)


@pytest.mark.parametrize("width,depth", [(32, 3), (128, 2)])
def test_checkpoint_flops_equal_flopscopes_bill_minus_the_sum_of_squares(width, depth):
    """band FLOPs(N) = bill(sample_layer_statistics, N) - bill(its sum of squares, N) - a per-call constant.

    The constant is the once-per-run finalisation (means from sums, the
    variance); it must not grow with N, which is what makes the band's price
    exactly linear in N, as ``mc_flops_per_sample`` says. One flopscope quirk
    is pinned too: a run whose last chunk has a single row pays 2 FLOPs more
    per axis-0 sum (flopscope bills a one-row sum 2 instead of 0), i.e. 2 per
    layer; ``mc_flops_per_sample`` ignores it, and so does the band.
    """
    plan = make_plan(width, depth, budget=10**10, dtype_aware_billing=True)
    chunk = _pick_chunk_size(width)
    weights = build_weights(width, depth, 3)
    residues = {}
    for n in (2, 17, 1000, chunk, chunk + 2, 2 * chunk + 500, chunk + 1):
        _, billed = _whestbench_run(weights, n, 3)
        squares = _sum_of_squares_bill(width, n)
        one_row_quirk = 2 if n % chunk == 1 else 0
        assert squares == 36 * width * n + one_row_quirk  # WHESTBENCH.md: 36 w per sample
        residues[n] = billed - squares - plan.flops(n)
    finalisation = residues[2]
    assert all(r == finalisation for n, r in residues.items() if n % chunk != 1)
    assert residues[chunk + 1] == finalisation + 2 * depth
    assert 0 < finalisation < plan.flops_per_sample


def test_round_plans_use_the_rounds_own_prices_and_budget():
    for rnd in ALL_ROUNDS.values():
        plan = make_plan(rnd.width, rnd.depth, budget=rnd.budget, dtype_aware_billing=rnd.dtype_aware_billing,
                         round_tag=rnd.tag)
        per_sample = mc_flops_per_sample(rnd.width, rnd.depth, dtype_aware_billing=rnd.dtype_aware_billing)
        assert plan.flops_per_sample == per_sample == rnd.mc_flops_per_sample
        assert plan.samples_at_budget == mc_samples_at_budget(rnd.config)
        assert plan.n_at_budget == math.floor(mc_samples_at_budget(rnd.config)) in plan.checkpoints
        assert plan.n_at_charging_floor in plan.checkpoints
        assert plan.n_max == math.floor(4 * mc_samples_at_budget(rnd.config))
        assert plan.checkpoints[0] == 16 and list(plan.checkpoints) == sorted(set(plan.checkpoints))
        powers = [n for n in plan.checkpoints if n & (n - 1) == 0]
        assert powers == [2**k for k in range(4, plan.n_max.bit_length())]
        assert plan.flops(plan.n_at_budget) <= rnd.budget < plan.flops(plan.n_at_budget + 1)
    phase2 = make_plan(1024, 16, budget=2**41, dtype_aware_billing=True)
    assert phase2.n_at_budget == 65374  # 65,374.4 samples: the floor, a whole number of samples


def test_plan_rejects_what_cannot_be_measured():
    with pytest.raises(BandError, match="between 1"):
        make_plan(32, 2, budget=10**9, dtype_aware_billing=True, max_budget_multiple=0.5)
    with pytest.raises(BandError, match="buys only"):
        make_plan(32, 2, budget=1000, dtype_aware_billing=True)


def test_equal_flops_comparison_at_the_budget_is_whestbenchs_mc_at_b():
    rnd = ALL_ROUNDS["v2-phase2"]
    sigma2 = 0.0123
    floor = sigma2 / 2**20
    cmp = compare_with_sampling(rnd.budget, 1e-7, mean_sigma2=sigma2, flops_per_sample=rnd.mc_flops_per_sample,
                                noise_floor=floor)
    assert cmp.sampling_mse == pytest.approx(rnd.mc_at_bm(sigma2), rel=1e-12)
    assert cmp.times_better == pytest.approx(rnd.mc_at_bm(sigma2) / 1e-7, rel=1e-12)
    assert cmp.times_better_corrected == pytest.approx(rnd.mc_at_bm(sigma2) / (1e-7 - floor), rel=1e-12)
    near = compare_with_sampling(rnd.budget, 1.5 * floor, mean_sigma2=sigma2,
                                 flops_per_sample=rnd.mc_flops_per_sample, noise_floor=floor)
    assert near.at_noise_floor and near.times_better_corrected is None


def test_a_pass_without_variance_prefix_has_the_same_means():
    weights = build_weights(32, 2, 9)
    with threadpool_limits(limits=1, user_api="blas"):
        with_prefix = checkpoint_means(list(weights), [16, 20000], band_rng(9))
        without = checkpoint_means(list(weights), [16, 20000], band_rng(9), variance_samples=0)
    np.testing.assert_array_equal(with_prefix.layer_means, without.layer_means)
    assert without.variance_samples == 0 and np.isnan(without.layer_avg_variance).all()
    assert with_prefix.variance_samples == 16384 and np.isfinite(with_prefix.layer_avg_variance).all()


def test_the_variance_prefix_equals_float64_sums_and_squares_of_its_rows():
    """The prefix reuses chunk sums and one squares buffer: its figures are still exactly the float64
    sums of the first samples' activations and their squares, over whole and partial chunks."""
    width, depth, limit = 32, 2, 20_000  # chunk 16,384 at width 32: one whole chunk and part of a second
    weights = build_weights(width, depth, 11)
    with threadpool_limits(limits=1, user_api="blas"):
        pass_ = checkpoint_means(list(weights), [40_000], band_rng(11), variance_samples=limit)
        x = band_rng(11).standard_normal((limit, width), dtype=np.float32)
    chunk = _pick_chunk_size(width)
    expected = []
    for w in weights:
        rows = [np.maximum(x[s:s + chunk] @ w, 0.0) for s in range(0, limit, chunk)]
        x = np.concatenate(rows)
        mean = x.astype(np.float64).mean(axis=0)
        expected.append(np.mean(np.square(x, dtype=np.float64).mean(axis=0) - mean**2))
    assert pass_.variance_samples == limit
    np.testing.assert_allclose(pass_.layer_avg_variance, expected, rtol=1e-9)
