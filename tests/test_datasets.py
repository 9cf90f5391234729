"""Both dataset formats yield exactly what whestbench's own loader yields."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tests.upstream import SEEDS, make_official, whestbench_mlps
from whestboard import compact
from whestboard.bake import bake, plan_from_args
from whestboard.datasets import DatasetError, MLPNotFound, WeightsMismatch, open_dataset

WIDTH, DEPTH, SAMPLES = 24, 3, 3000


@pytest.fixture(scope="module")
def official(tmp_path_factory):
    return make_official(tmp_path_factory.mktemp("official") / "ds", width=WIDTH, depth=DEPTH, n_samples=SAMPLES)


@pytest.fixture(scope="module")
def reference(official, tmp_path_factory):
    return whestbench_mlps(official, tmp_path_factory.mktemp("hf"))


@pytest.fixture(scope="module")
def compact_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("compact") / "ds"
    plan = plan_from_args(round_tag=None, width=WIDTH, depth=DEPTH, n_mlps=None, n_samples=SAMPLES, seeds=SEEDS)
    bake(out, plan, explicit_seeds=True, show_progress=False)
    return out


def _assert_matches_whestbench(ds, reference):
    assert ds.info.n_mlps == len(reference)
    summary = ds.summary()
    for i, ref in enumerate(reference):
        mlp = ds.mlp(i)
        assert mlp.seed == ref["mlp"].seed
        assert mlp.name == ref["mlp"].name == ref["mlp_name"]
        assert (mlp.width, mlp.depth) == (WIDTH, DEPTH)
        for got, want in zip(mlp.weights, ref["mlp"].weights, strict=True):
            assert np.asarray(got).dtype == np.float32
            np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
        means, avg_var = ds.truth(i)
        np.testing.assert_array_equal(means, ref["all_layer_means"])
        assert avg_var == ref["avg_variance"]
        assert summary.loc[i, "mlp_seed"] == ref["mlp_seed"]
        assert summary.loc[i, "mlp_name"] == ref["mlp_name"]
        assert summary.loc[i, "avg_variance"] == ref["avg_variance"]


def test_official_directory_matches_whestbench(official, reference):
    ds = open_dataset(official)
    assert ds.info.format == "schema-3.0"
    assert ds.info.n_samples == SAMPLES
    _assert_matches_whestbench(ds, reference)


def test_compact_bake_matches_create_dataset(compact_dir, reference):
    ds = open_dataset(compact_dir)
    assert ds.info.format == "compact"
    _assert_matches_whestbench(ds, reference)


def test_whestbench_engine_bakes_the_same_truth(tmp_path, compact_dir):
    plan = plan_from_args(round_tag=None, width=WIDTH, depth=DEPTH, n_mlps=None, n_samples=SAMPLES, seeds=SEEDS[:2])
    bake(tmp_path / "wb", plan, engine="whestbench", explicit_seeds=True, show_progress=False)
    metered, fast = open_dataset(tmp_path / "wb"), open_dataset(compact_dir)
    for i in range(2):
        np.testing.assert_array_equal(metered.truth(i)[0], fast.truth(i)[0])
        assert metered.truth(i)[1] == fast.truth(i)[1]
    breakdown = metered.provenance(0)["sampling_budget_breakdown"]
    assert breakdown is not None and breakdown["flops_used"] > 0


def test_summary_statistics_come_from_the_truth(official):
    ds = open_dataset(official)
    summary = ds.summary()
    for i in ds.indices:
        means, avg_var = ds.truth(i)
        assert summary.loc[i, "final_mean_avg"] == pytest.approx(float(means[-1].mean()))
        assert summary.loc[i, "dead_fraction"] == pytest.approx(float((means <= 1e-6).mean()))
        assert summary.loc[i, "noise_floor"] == pytest.approx(avg_var / SAMPLES)
    assert ds.noise_floor == pytest.approx(summary["avg_variance"].mean() / SAMPLES)


def test_rebuilt_weights_that_differ_are_refused(tmp_path, compact_dir):
    import shutil

    copy = tmp_path / "tampered"
    shutil.copytree(compact_dir, copy)
    rec = compact.read_mlp_record(copy, 1)
    compact.write_mlp_record(copy, 1, all_layer_means=rec["all_layer_means"], avg_variance=rec["avg_variance"],
                             weights_sha256="0" * 64, provenance=rec["provenance"])
    ds = open_dataset(copy)
    ds.mlp(0)  # untouched MLPs still load
    with pytest.raises(WeightsMismatch, match="does not match"):
        ds.mlp(1)


def test_unknown_index_is_a_clear_error(compact_dir):
    ds = open_dataset(compact_dir)
    with pytest.raises(MLPNotFound, match="indices 0..3"):
        ds.truth(17)


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda p: None, "neither metadata.json"),
        (lambda p: (p / "metadata.json").write_text("{not json"), "not valid JSON"),
        (lambda p: (p / "metadata.json").write_text(json.dumps({"schema_version": "2.0"})), "schema_version 2.0"),
        (
            lambda p: (p / "metadata.json").write_text(
                json.dumps({"schema_version": "3.0", "width": 4, "depth": 2, "n_samples": 10,
                            "seed_protocol": {"version": "3.0"}, "split": "public"})
            ),
            "no parquet files",
        ),
        (lambda p: (p / compact.MANIFEST_NAME).write_text(json.dumps({"format": "other"})), "not a Whestboard compact"),
    ],
)
def test_malformed_directories_say_what_is_wrong(tmp_path, make, message):
    d = tmp_path / "bad"
    d.mkdir()
    make(d)
    with pytest.raises(DatasetError, match=message):
        open_dataset(d)


def test_missing_directory(tmp_path):
    with pytest.raises(DatasetError, match="no such directory"):
        open_dataset(tmp_path / "nowhere")


@pytest.mark.parametrize("width, depth", [(7, 2), (256, 2)])
def test_weights_rebuild_equals_whestbench_sample_mlp(width, depth):
    import flopscope.numpy as fnp
    from whestbench import sample_mlp
    from whestbench.seeds import derive_seed_streams

    from whestboard.bake import build_weights

    seed = 2**40 + 3
    mlp = sample_mlp(width, depth, fnp.random.default_rng(derive_seed_streams(seed)[0]))
    np.testing.assert_array_equal(build_weights(width, depth, seed), np.stack([np.asarray(w) for w in mlp.weights]))
