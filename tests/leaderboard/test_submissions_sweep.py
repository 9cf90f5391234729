"""The baseline sweep grades through the runs core, records honest submissions, and resumes."""

from __future__ import annotations

import copy
import shutil
from datetime import UTC, datetime

import numpy as np
import pytest

from tests.leaderboard import submissions_helpers as helpers
from whestboard.data import bake_one, get_dataset, plan_from_args, prepare_bake
from whestboard.leaderboard import _store, _sweep
from whestboard.store import reset_engines

sqlite_store = helpers.sqlite_store
SEEDS = [11, 22, 33]


@pytest.fixture(scope="module")
def baked_two_of_three(tmp_path_factory):
    """The bake behind ``tiny_round_data``, done once: its folder (copied, never used in place) and manifest."""
    folder = tmp_path_factory.mktemp("sweep-bake") / "v1-warmup"
    plan = plan_from_args(round_tag="v1-warmup", width=None, depth=None, n_mlps=None, n_samples=2048, seeds=SEEDS)
    manifest = prepare_bake(folder, plan, engine="numpy", explicit_seeds=True)
    for index in (0, 1):
        bake_one(folder, manifest, index, engine="numpy")
    return folder, manifest


@pytest.fixture()
def tiny_round_data(baked_two_of_three, tmp_path, monkeypatch, sqlite_store):
    """A v1-warmup-shaped embedded dataset (256 x 8) with two of its three MLPs baked, few samples: a copy
    of this test's own, which it may bake on."""
    baked, manifest = baked_two_of_three
    data = tmp_path / "data"
    monkeypatch.setenv("WHESTBOARD_DATA_DIR", str(data))
    folder = data / "v1-warmup"
    shutil.copytree(baked, folder)
    yield folder, copy.deepcopy(manifest)
    reset_engines()


def _expected_mean_propagation(dataset, index):
    """Final-layer MSE of whestbench's MeanPropagationEstimator, computed by whestbench itself."""
    from whestbench.estimators import MeanPropagationEstimator
    from whestbench.scoring import ContestData, ContestSpec, evaluate_estimator

    means, avg_var = dataset.truth(index)
    spec = ContestSpec(width=256, depth=8, n_mlps=1, flop_budget=68_000_000_000, ground_truth_samples=2048,
                       wall_time_limit_s=60.0, residual_wall_time_limit_s=None, lambda_flops_per_second=1e11)
    data = ContestData(spec=spec, mlps=[dataset.mlp(index)], all_layer_targets=[means],
                       final_targets=[means[-1]], avg_variances=[avg_var])
    return evaluate_estimator(MeanPropagationEstimator(), data)["per_mlp"][0]


def test_sweep_records_real_grades_and_resumes(tiny_round_data, tmp_path):
    from whestbench.budget import score_multiplier

    folder, manifest = tiny_round_data
    out = tmp_path / "out" / "baselines.csv"
    before = datetime.now(UTC)
    _sweep.run_sweep(out=out, round_tags=["v1-warmup"], only=["mean", "mc:0.001B"], show_progress=False,
                    log=lambda _: None)
    subs, mlps = _sweep.read_output(out)
    mean_id = _sweep.submission_id("v1-warmup", "v1-warmup", "mean")
    assert set(subs) == {mean_id, _sweep.submission_id("v1-warmup", "v1-warmup", "mc:0.001B")}
    mean = subs[mean_id]
    assert mean.team == "baseline: mean propagation" and mean.source == "sweep" and mean.n_mlps == 2
    assert before <= mean.submitted_at <= datetime.now(UTC)  # the time it was graded
    dataset = get_dataset("v1-warmup")
    for result in mlps[mean_id]:
        expected = _expected_mean_propagation(dataset, result.mlp_index)
        assert result.final_layer_mse == expected["final_layer_mse"]
        assert result.flops_used == expected["flops_used"]
        assert result.avg_variance == dataset.truth(result.mlp_index)[1]
        assert result.multiplier == score_multiplier(result.effective_compute, 68_000_000_000, failed=False)
        assert result.adjusted_score == pytest.approx(result.final_layer_mse * result.multiplier, rel=1e-12)
    assert mean.mean_avg_variance == pytest.approx(np.mean([dataset.truth(i)[1] for i in (0, 1)]), rel=1e-12)
    assert _store.submission_count() == 2  # also written to the app's store

    text = out.read_text()
    _sweep.run_sweep(out=out, round_tags=["v1-warmup"], only=["mean", "mc:0.001B"], show_progress=False,
                    log=lambda _: None)
    assert out.read_text() == text  # everything already graded: nothing re-run

    bake_one(folder, manifest, 2, engine="numpy")  # the bake moved on: regrade on all three
    _sweep.run_sweep(out=out, round_tags=["v1-warmup"], only=["mean"], show_progress=False, log=lambda _: None)
    subs, mlps = _sweep.read_output(out)
    assert subs[mean_id].n_mlps == 3 and len(mlps[mean_id]) == 3
    assert _store.submission_count() == 2 and _store.get_submission(mean_id).n_mlps == 3


def test_sweep_plan_skips_estimators_too_slow_for_the_limit(tiny_round_data):
    dataset = get_dataset("v1-warmup")
    entries = _sweep.plan([dataset], _sweep.sweep_family(), {}, max_seconds_per_mlp=1.0, flop_rate=1e9)
    actions = {e.member.key: e.action for e in entries}
    assert actions["mc:1B"] == "too slow"  # 6.8e10 FLOPs at 1e9 FLOP/s: 68 s per MLP
    assert actions["mean"] == "grade"
    with pytest.raises(ValueError, match="unknown sweep estimator"):
        _sweep.select(["nope"])


def test_baseline_variant_files_are_graded_as_whestbench_grades_them(tiny_round_data, tmp_path):
    from whestbench.loader import load_estimator_from_path
    from whestbench.scoring import ContestData, ContestSpec, evaluate_estimator

    out = tmp_path / "variants.csv"
    _sweep.run_sweep(out=out, round_tags=["v1-warmup"], only=["cov-half"], show_progress=False, to_store=False,
                    log=lambda _: None)
    subs, mlps = _sweep.read_output(out)
    (sid,) = subs
    assert subs[sid].team == "baseline: truncated covariance"
    dataset = get_dataset("v1-warmup")
    estimator, _ = load_estimator_from_path(_sweep.BASELINE_DIR / "truncated_covariance.py")
    for result in mlps[sid]:
        means, avg_var = dataset.truth(result.mlp_index)
        spec = ContestSpec(width=256, depth=8, n_mlps=1, flop_budget=68_000_000_000, ground_truth_samples=2048,
                           wall_time_limit_s=60.0, residual_wall_time_limit_s=None, lambda_flops_per_second=1e11)
        data = ContestData(spec=spec, mlps=[dataset.mlp(result.mlp_index)], all_layer_targets=[means],
                           final_targets=[means[-1]], avg_variances=[avg_var])
        expected = evaluate_estimator(estimator, data)["per_mlp"][0]
        assert result.final_layer_mse == expected["final_layer_mse"]
        assert result.flops_used == expected["flops_used"]


def test_the_papers_simple_variant_at_k3_is_swept_as_whestbench_grades_it(tiny_round_data, tmp_path):
    """``cumulant:3:simple`` is a member of the sweep and its recorded grade is whestbench's own."""
    from whestbench.scoring import ContestData, ContestSpec, evaluate_estimator

    from whestboard.scoring import CumulantPropagationEstimator

    assert "cumulant:3:simple" in {m.key for m in _sweep.sweep_family()}
    out = tmp_path / "out" / "baselines.csv"
    _sweep.run_sweep(out=out, round_tags=["v1-warmup"], only=["cumulant:3:simple"], show_progress=False,
                     log=lambda _: None)
    subs, mlps = _sweep.read_output(out)
    key = _sweep.submission_id("v1-warmup", "v1-warmup", "cumulant:3:simple")
    assert subs[key].team == "baseline: cumulant propagation" and subs[key].n_mlps == 2
    dataset = get_dataset("v1-warmup")
    for result in mlps[key]:
        means, avg_var = dataset.truth(result.mlp_index)
        spec = ContestSpec(width=256, depth=8, n_mlps=1, flop_budget=68_000_000_000, ground_truth_samples=2048,
                           wall_time_limit_s=60.0, residual_wall_time_limit_s=None, lambda_flops_per_second=1e11)
        data = ContestData(spec=spec, mlps=[dataset.mlp(result.mlp_index)], all_layer_targets=[means],
                           final_targets=[means[-1]], avg_variances=[avg_var])
        expected = evaluate_estimator(CumulantPropagationEstimator(3, "simple"), data)["per_mlp"][0]
        assert result.final_layer_mse == expected["final_layer_mse"]
        assert result.flops_used == expected["flops_used"] <= 68_000_000_000
