"""The playground's MLPs are whestbench's own: same weights, seed and name as ``create_dataset`` gives a seed."""

from __future__ import annotations

import flopscope.numpy as fnp
import numpy as np
import pytest
from whestbench.generation import sample_mlp
from whestbench.seeds import derive_seed_streams
from whestbench.simulation import sample_layer_statistics

from tests.upstream import make_official
from whestboard.data import _bake, _compact, _generated, _registry
from whestboard.data._datasets import open_dataset
from whestboard.store import blob_exists, put_blob

SHAPES = [(4, 1, 0), (24, 3, 1234567), (64, 2, 2**62 + 7), (17, 5, 42)]
OFFICIAL_SEEDS = [1234567, 42, 2**62 + 7, 99]
pytestmark = pytest.mark.usefixtures("private_state")


@pytest.mark.parametrize(("width", "depth", "seed"), SHAPES)
def test_weights_are_whestbench_sample_mlp_bit_for_bit(width, depth, seed):
    weight_ss, _sample_ss, estimator_seed = derive_seed_streams(seed)
    expected = sample_mlp(width, depth, fnp.random.default_rng(weight_ss), seed=estimator_seed)
    made = _generated.generate(_generated.parse_shape(width, depth, seed))
    want = np.stack([np.asarray(w) for w in expected.weights])
    assert made.weights.dtype == np.float32 and made.weights.shape == (depth, width, width)
    assert made.weights.tobytes() == want.tobytes()
    assert made.estimator_seed == estimator_seed == int(made.mlp.seed)
    assert made.weights.tobytes() == _bake.build_weights(width, depth, seed).tobytes()  # the compact format's twin


@pytest.fixture(scope="module")
def official(tmp_path_factory):
    return open_dataset(make_official(tmp_path_factory.mktemp("gen") / "ds", width=24, depth=3, n_samples=3000,
                                      seeds=OFFICIAL_SEEDS))


def test_an_official_rows_seed_reproduces_its_mlp_and_truth(official):
    summary = official.summary()
    for index in official.indices:
        seed = int(summary.loc[summary["index"] == index, "mlp_seed"].iloc[0])
        shape = _generated.parse_shape(24, 3, seed)
        made = _generated.generate(shape)
        assert made.weights.tobytes() == np.ascontiguousarray(official.weights(index)).tobytes()
        assert made.name == official.mlp_name(index)
        assert made.estimator_seed == official.estimator_seed(index)
        means, avg_variance = official.truth(index)
        drawn = _generated.generated_truth(shape, 3000)
        assert drawn.means.tobytes() == means.tobytes()
        assert drawn.avg_variance == avg_variance


def test_truth_is_sample_layer_statistics_on_the_seeds_sampling_stream():
    shape = _generated.parse_shape(16, 3, 777)
    made = _generated.generate(shape)
    _w, sample_ss, _ = derive_seed_streams(777)
    means, _final, avg_variance = sample_layer_statistics(made.mlp, 5000, rng=fnp.random.default_rng(sample_ss))
    drawn = _generated.generated_truth(shape, 5000)
    assert drawn.means.tobytes() == np.asarray(means, dtype=np.float32).tobytes()
    assert drawn.avg_variance == float(avg_variance)
    assert drawn.layer_variances[-1] == pytest.approx(drawn.avg_variance, rel=1e-6)
    assert drawn.noise_floor == drawn.avg_variance / 5000


def test_truth_agrees_with_an_independent_monte_carlo_within_its_stated_error():
    """Observed per-layer MSE between the truth and a second, larger sample is what the two noise floors
    predict (sigma^2/N + sigma^2/M), layer by layer."""
    shape, n, m = _generated.parse_shape(64, 4, 31337), 20_000, 200_000
    drawn = _generated.generated_truth(shape, n)
    weights = _generated.generate(shape).weights
    rng = np.random.default_rng(2024)
    sums = np.zeros((shape.depth, shape.width))
    for _ in range(m // 10_000):
        x = rng.standard_normal((10_000, shape.width)).astype(np.float32)
        for layer, w in enumerate(weights):
            x = np.maximum(x @ w, 0.0)
            sums[layer] += x.sum(axis=0, dtype=np.float64)
    independent = sums / m
    observed = np.mean((drawn.means - independent) ** 2, axis=1)
    expected = drawn.layer_variances / n + drawn.layer_variances / m
    ratio = observed / expected
    assert np.all((ratio > 0.4) & (ratio < 2.5)), ratio


def test_the_truth_is_cached_in_the_shared_store_for_other_processes():
    shape = _generated.parse_shape(8, 2, 5)
    assert _generated.cached_truth(shape, 2000) is None
    drawn = _generated.generated_truth(shape, 2000)
    key = _generated.truth_key(shape, 2000)
    assert blob_exists(_generated.TRUTHS, key)
    assert _generated._read_truth(key, shape, 2000).means.tobytes() == drawn.means.tobytes()
    put_blob(_generated.TRUTHS, key, b"torn")  # a damaged entry is drawn again, never trusted
    assert _generated._read_truth(key, shape, 2000) is None


@pytest.mark.parametrize(("width", "depth", "seed", "message"), [
    (2, 4, 1, "width 2 is outside 4–1024"),
    (2048, 4, 1, "width 2048 is outside 4–1024"),
    (8, 0, 1, "depth 0 is outside 1–32"),
    (8, 33, 1, "depth 33 is outside 1–32"),
    ("abc", 4, 1, "width 'abc' is not a number"),
    (8, 4, "1e400", "seed '1e400' is not a whole number"),
    (8, 4, -1, "seed -1 is outside 0–9223372036854775807"),
    (8, 4.5, 1, "depth '4.5' is not a whole number"),
    (8, 4, "9" * 80, "seed is too long to be a number"),
])
def test_bad_shapes_are_sentences(width, depth, seed, message):
    with pytest.raises(_generated.GeneratedMLPError, match=message):
        _generated.parse_shape(width, depth, seed)


def test_default_samples_follow_the_shape():
    assert _generated.default_samples(8, 4) == 300_000
    assert _generated.default_samples(64, 8) == 30_000
    assert _generated.default_samples(256, 8) == 10_000
    assert _generated.default_samples(512, 8) == _generated.default_samples(1024, 16) == 10_000
    small = _generated.parse_shape(256, 8, 1)
    assert not _generated.needs_background(small, _generated.default_samples(256, 8), 1000)
    assert _generated.needs_background(_generated.parse_shape(1024, 16, 1), 10_000, 1000)


def test_kept_mlp_is_served_like_any_dataset_with_the_truth_shown():
    shape = _generated.parse_shape(12, 3, 4242)
    drawn = _generated.generated_truth(shape, 4000)
    directory = _generated.keep_generated(shape, 4000)
    assert directory.parent == _generated.config.kept_datasets_dir()
    served = _registry.served_datasets()
    assert directory.name in served
    ds = served[directory.name]
    assert ds.indices == [0] and ds.info.n_samples == 4000 and ds.info.shape_label == "12 x 3"
    means, avg_variance = ds.truth(0)
    assert means.tobytes() == drawn.means.tobytes() and avg_variance == drawn.avg_variance
    assert ds.weights(0).tobytes() == _generated.generate(shape).weights.tobytes()
    assert ds.mlp_name(0) == _generated.generate(shape).name
    assert _generated.keep_generated(shape, 4000) == directory  # a second keep finds it
    # what the bake command makes of the same seed and sample count is the same record
    plan = _bake.plan_from_args(round_tag=None, width=12, depth=3, n_mlps=None, n_samples=4000, seeds=[4242])
    baked = _bake.bake(directory.parent.parent / "baked", plan, explicit_seeds=True, show_progress=False)
    record = _compact.read_mlp_record(directory.parent.parent / "baked", 0)
    assert record["all_layer_means"].tobytes() == drawn.means.tobytes()
    assert baked["mlp_names"] == [ds.mlp_name(0)]
