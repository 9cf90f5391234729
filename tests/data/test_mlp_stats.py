"""The explorer's statistics equal what numpy and whestbench compute on the same tiny MLPs."""

from __future__ import annotations

import numpy as np
import pytest

from whestboard.data import _mlp_stats
from whestboard.data._bake import build_weights
from whestboard.data._datasets import DEAD_MEAN_THRESHOLD
from whestboard.data._sampling import layer_statistics


def _mlp(width: int = 16, depth: int = 4, seed: int = 11, n_samples: int = 4096):
    weights = build_weights(width, depth, seed)
    means, avg_var = layer_statistics(list(weights), n_samples, np.random.default_rng(seed))
    return weights, means, avg_var


def _crafted_mlp():
    """He weights, except that layer 2 has one neuron with only positive inputs
    (never clipped: always on) and one with only negative inputs (never fires: dead)."""
    weights = build_weights(12, 3, 5).copy()
    weights[1][:, 0] = np.abs(weights[1][:, 0])
    weights[1][:, 1] = -np.abs(weights[1][:, 1])
    means, avg_var = layer_statistics(list(weights), 2048, np.random.default_rng(3))
    return weights, means, avg_var


def _forward64(weights: np.ndarray, x: np.ndarray):
    """Pre-activations and activations of every layer, in float64."""
    pre, post = [], []
    h = x
    for w in weights.astype(np.float64):
        z = h @ w
        h = np.maximum(z, 0.0)
        pre.append(z)
        post.append(h)
    return pre, post


# -- ground-truth means ------------------------------------------------------


def test_ribbon_quantiles_are_numpy_percentiles_per_layer():
    _, means, _ = _mlp()
    expected = np.stack([np.percentile(means[layer].astype(np.float64), [0, 5, 25, 50, 75, 95, 100])
                         for layer in range(means.shape[0])])
    np.testing.assert_allclose(_mlp_stats.ribbon_quantiles(means), expected, rtol=0, atol=0)
    assert np.array_equal(_mlp_stats.ribbon_quantiles(means)[:, 3], np.median(means.astype(np.float64), axis=1))


def test_clipped_mean_is_the_mean_negative_part_of_the_pre_activation():
    """E[h] - W^T E[h_prev] equals mean(max(-z, 0)) over the very samples the means came from."""
    weights = build_weights(10, 4, 21)
    x = np.random.default_rng(0).standard_normal((3000, 10))
    x -= x.mean(axis=0)  # the stats take E[x] = 0 exactly, as the reference's input mean should be
    pre, post = _forward64(weights, x)
    means = np.stack([h.mean(axis=0) for h in post])
    expected = np.stack([np.maximum(-z, 0.0).mean(axis=0) for z in pre])
    clipped = _mlp_stats.clipped_means(means.astype(np.float32), weights)
    np.testing.assert_allclose(clipped, expected, atol=2e-6)
    np.testing.assert_allclose(_mlp_stats.reference_pre_activation_means(means, weights),
                               np.stack([z.mean(axis=0) for z in pre]), atol=1e-12)


def test_dead_and_always_on_follow_the_reference():
    weights, means, _ = _crafted_mlp()
    clipped = _mlp_stats.clipped_means(means, weights)
    dead = _mlp_stats.dead_mask(means)
    always_on = _mlp_stats.always_on_mask(means, clipped)
    assert np.array_equal(dead, means <= DEAD_MEAN_THRESHOLD)
    expected_on = (means > DEAD_MEAN_THRESHOLD) & (clipped <= _mlp_stats.ALWAYS_ON_RELATIVE_CLIP * means)
    assert np.array_equal(always_on, expected_on)
    assert always_on[1, 0] and not dead[1, 0]  # positive inputs only: the ReLU never clips it
    assert dead[1, 1] and not always_on[1, 1]  # negative inputs only: never fires
    assert not always_on[0].any()  # a Gaussian pre-activation is negative half the time
    assert not (dead & always_on).any()


def test_final_histogram_matches_numpy():
    _, means, _ = _mlp()
    counts, edges = _mlp_stats.final_histogram(means[-1], bins=12)
    expected_counts, expected_edges = np.histogram(means[-1].astype(np.float64), bins=12,
                                                   range=(float(means[-1].min()), float(means[-1].max())))
    assert np.array_equal(counts, expected_counts)
    np.testing.assert_allclose(edges, expected_edges)
    assert counts.sum() == means.shape[1]


# -- heatmap aggregation -----------------------------------------------------


def _lower_median(values: np.ndarray) -> float:
    return float(np.sort(values)[(len(values) - 1) // 2])


def test_heatmap_bins_average_consecutive_neurons():
    rng = np.random.default_rng(1)
    means = rng.random((3, 64))
    bins = _mlp_stats.heatmap_bins(means, max_columns=16)
    assert bins.columns == 16 and bins.bin_size == 4 and not bins.ordered
    blocks = means.reshape(3, 16, 4)
    np.testing.assert_allclose(bins.values, blocks.mean(axis=-1))
    assert np.array_equal(bins.low, blocks.min(axis=-1))
    assert np.array_equal(bins.high, blocks.max(axis=-1))
    for layer in range(3):
        for column in range(16):
            neuron = bins.neuron_at(layer, column)
            assert 4 * column <= neuron < 4 * column + 4
            assert means[layer, neuron] == _lower_median(blocks[layer, column])


def test_heatmap_bins_ordered_sorts_each_layer_and_maps_back_to_neurons():
    rng = np.random.default_rng(2)
    means = rng.random((4, 70))
    bins = _mlp_stats.heatmap_bins(means, max_columns=16, ordered=True)
    assert bins.ordered and bins.bin_size == 5 and bins.columns == 14
    sorted_means = np.sort(means, axis=1)
    np.testing.assert_allclose(bins.values, sorted_means.reshape(4, 14, 5).mean(axis=-1))
    for layer in range(4):
        ranks = np.argsort(np.argsort(means[layer], kind="stable"), kind="stable")
        for column in range(14):
            neuron = bins.neuron_at(layer, column)
            assert 5 * column <= ranks[neuron] < 5 * column + 5
            assert means[layer, neuron] == _lower_median(sorted_means[layer, 5 * column:5 * column + 5])


def test_heatmap_bins_uneven_last_bin_and_narrow_layers():
    rng = np.random.default_rng(3)
    means = rng.random((2, 10))
    bins = _mlp_stats.heatmap_bins(means, max_columns=4)  # bins of 3: 3 + 3 + 3 + 1
    assert list(bins.starts) == [0, 3, 6, 9] and list(bins.stops) == [3, 6, 9, 10]
    np.testing.assert_allclose(bins.values[:, -1], means[:, 9])
    narrow = _mlp_stats.heatmap_bins(means, max_columns=256)
    assert narrow.bin_size == 1
    np.testing.assert_array_equal(narrow.values, means)
    assert np.array_equal(narrow.representative, np.tile(np.arange(10), (2, 1)))


# -- weights -------------------------------------------------------------------


def test_weight_stats_match_numpy():
    weights = build_weights(32, 3, 7)
    stats = _mlp_stats.weight_stats(weights)
    w64 = weights.astype(np.float64)
    np.testing.assert_allclose(stats.entry_mean, [w.mean() for w in w64], rtol=1e-9, atol=1e-15)
    np.testing.assert_allclose(stats.entry_std, [w.std() for w in w64], rtol=1e-9)
    norms = np.linalg.norm(w64, axis=1)  # ||W[:, j]|| for every neuron j
    np.testing.assert_allclose(stats.incoming_norm_quantiles,
                               np.percentile(norms, [0, 25, 50, 75, 100], axis=1).T, rtol=1e-9)
    assert stats.he_std == pytest.approx(np.sqrt(2 / 32))
    exact = np.array([np.linalg.norm(w, 2) for w in w64])
    np.testing.assert_allclose(stats.spectral_norm, exact, rtol=1e-4)


def test_spectral_estimate_is_a_tight_lower_bound_on_wide_matrices():
    w = build_weights(256, 1, 9)[0]
    exact = np.linalg.norm(w.astype(np.float64), 2)
    estimate = _mlp_stats.spectral_norm_estimate(w)
    assert estimate <= exact * (1 + 1e-6)
    assert estimate >= 0.99 * exact


def test_spectral_estimate_handles_tiny_and_rank_deficient_matrices():
    assert _mlp_stats.spectral_norm_estimate(np.eye(3, dtype=np.float32) * 2) == pytest.approx(2.0, rel=1e-6)
    rank_one = np.outer(np.arange(1, 5), np.ones(4)).astype(np.float32)
    assert _mlp_stats.spectral_norm_estimate(rank_one) == pytest.approx(np.linalg.norm(rank_one, 2), rel=1e-5)


# -- mean field -------------------------------------------------------------------


def test_mean_field_equals_whestbench_mean_propagation():
    import flopscope as flops
    import flopscope.numpy as fnp
    from whestbench import MLP
    from whestbench.estimators import MeanPropagationEstimator

    weights = build_weights(24, 5, 13)
    mlp = MLP(width=24, depth=5, weights=[fnp.asarray(w) for w in weights])
    with flops.BudgetContext(flop_budget=10**12, quiet=True):
        expected = np.asarray(MeanPropagationEstimator().predict(mlp, 10**12), dtype=np.float64)
    mf = _mlp_stats.mean_field(weights)
    np.testing.assert_allclose(mf.post_mean, expected, rtol=1e-12, atol=1e-15)


def test_mean_field_first_layer_is_the_exact_gaussian():
    weights = build_weights(16, 2, 17)
    mf = _mlp_stats.mean_field(weights)
    w64 = weights[0].astype(np.float64)
    np.testing.assert_array_equal(mf.pre_mean[0], np.zeros(16))
    np.testing.assert_allclose(mf.pre_var[0], (weights[0] * weights[0]).astype(np.float64).sum(axis=0), rtol=1e-12)
    np.testing.assert_allclose(mf.post_mean[0], np.sqrt(np.sum(w64 * w64, axis=0) / (2 * np.pi)), rtol=1e-6)
    np.testing.assert_allclose(mf.active_probability[0], 0.5)


# -- whole MLP and drill-down ---------------------------------------------------------------


def test_compute_mlp_stats_collects_everything():
    weights, means, avg_var = _crafted_mlp()
    stats = _mlp_stats.compute_mlp_stats(means, weights, avg_var, 2048)
    assert (stats.depth, stats.width) == means.shape
    assert stats.noise_floor == pytest.approx(avg_var / 2048)
    np.testing.assert_array_equal(stats.dead_fraction, (means <= DEAD_MEAN_THRESHOLD).mean(axis=1))
    np.testing.assert_array_equal(stats.always_on_fraction, stats.always_on.mean(axis=1))
    np.testing.assert_allclose(stats.mean_field.post_mean, _mlp_stats.mean_field(weights).post_mean)
    with pytest.raises(ValueError, match="do not fit"):
        _mlp_stats.compute_mlp_stats(means, weights[:2], avg_var, 2048)


def test_neuron_detail_lists_the_largest_weights_and_the_mean_field():
    weights, means, avg_var = _crafted_mlp()
    stats = _mlp_stats.compute_mlp_stats(means, weights, avg_var, 2048)
    layer, neuron = 1, 4
    detail = _mlp_stats.neuron_detail(stats, weights, layer, neuron, k=5)
    column = weights[layer][:, neuron]
    expected_in = np.argsort(-np.abs(column.astype(np.float64)), kind="stable")[:5]
    assert [c.neuron for c in detail.incoming] == list(expected_in)
    assert [c.weight for c in detail.incoming] == [float(column[i]) for i in expected_in]
    assert [c.mean for c in detail.incoming] == [float(means[layer - 1, i]) for i in expected_in]
    row = weights[layer + 1][neuron, :]
    expected_out = np.argsort(-np.abs(row.astype(np.float64)), kind="stable")[:5]
    assert [c.neuron for c in detail.outgoing] == list(expected_out)
    assert [c.mean for c in detail.outgoing] == [float(means[layer + 1, j]) for j in expected_out]
    assert detail.truth_mean == float(means[layer, neuron])
    assert detail.reference_pre_mean == pytest.approx(float(means[layer - 1].astype(np.float64) @ column))
    assert detail.mf_post_mean == stats.mean_field.post_mean[layer, neuron]
    assert detail.mf_pre_var == stats.mean_field.pre_var[layer, neuron]


def test_neuron_detail_edges_of_the_network():
    weights, means, avg_var = _crafted_mlp()
    stats = _mlp_stats.compute_mlp_stats(means, weights, avg_var, 2048)
    first = _mlp_stats.neuron_detail(stats, weights, 0, 0)
    assert all(c.mean == 0.0 for c in first.incoming)  # inputs have mean 0
    last = _mlp_stats.neuron_detail(stats, weights, stats.depth - 1, 0)
    assert last.outgoing == ()
    assert _mlp_stats.neuron_detail(stats, weights, 1, 0).always_on
    assert _mlp_stats.neuron_detail(stats, weights, 1, 1).dead
    with pytest.raises(IndexError):
        _mlp_stats.neuron_detail(stats, weights, stats.depth, 0)
    with pytest.raises(IndexError):
        _mlp_stats.neuron_detail(stats, weights, 0, stats.width)


# -- cached access through a dataset -------------------------------------------------------------


@pytest.fixture()
def tiny_dataset(tmp_path):
    from whestboard.data._bake import bake, plan_from_args
    from whestboard.data._datasets import open_dataset

    plan = plan_from_args(round_tag=None, width=8, depth=3, n_mlps=2, n_samples=512, seeds=[101, 202])
    bake(tmp_path / "tiny", plan, show_progress=False, explicit_seeds=True)
    return open_dataset(tmp_path / "tiny")


def test_stats_for_computes_once_from_the_dataset(tiny_dataset):
    _mlp_stats.STATS_CACHE.clear()
    first = _mlp_stats.stats_for(tiny_dataset, 1)
    assert _mlp_stats.stats_for(tiny_dataset, 1) is first
    means, avg_var = tiny_dataset.truth(1)
    expected = _mlp_stats.compute_mlp_stats(means, tiny_dataset.weights(1), avg_var, 512)
    np.testing.assert_array_equal(first.means, expected.means)
    np.testing.assert_array_equal(first.clipped, expected.clipped)
    assert first.noise_floor == avg_var / 512
    summary = _mlp_stats.summary_for(tiny_dataset)
    assert _mlp_stats.summary_for(tiny_dataset) is summary
    assert list(summary["index"]) == [0, 1]


@pytest.mark.services
def test_stats_for_shares_results_with_other_processes(tiny_dataset, monkeypatch):
    import redis

    from tests.prod_support import redis_server

    with redis_server() as url:
        monkeypatch.setenv("WHESTBOARD_REDIS_URL", url)
        _mlp_stats.STATS_CACHE.clear()
        computed = _mlp_stats.stats_for(tiny_dataset, 0)
        keys = redis.Redis.from_url(url).keys("whestboard-cache:mlp-stats-shared:*")
        assert len(keys) == 1
        _mlp_stats.STATS_CACHE.clear()  # as a fresh worker: nothing in process, weights must not be needed
        monkeypatch.setattr(tiny_dataset, "weights", lambda i: pytest.fail("weights rebuilt despite the shared cache"))
        shared = _mlp_stats.stats_for(tiny_dataset, 0)
        assert shared is not computed  # read back from Redis, not this process's object
        np.testing.assert_array_equal(shared.means, computed.means)
        assert shared.noise_floor == computed.noise_floor
        assert _mlp_stats.stats_cache_key(tiny_dataset, 0)[0] == _mlp_stats.STATS_FORMAT  # a new format is a new key
