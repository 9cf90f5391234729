"""Comparisons of real runs: the verdict and the anatomy equal what the grader reported for each run."""

from __future__ import annotations

import json
import math
import shutil
from datetime import UTC, datetime

import numpy as np
import pytest

from tests.conftest import state_built_once
from tests.upstream import make_official
from whestboard.compare import (
    CompareError,
    anatomy_inputs,
    anatomy_of,
    heatmap_of,
    load_report_file,
    load_side,
    verdict,
)
from whestboard.compare._anatomy import class_shares, error_by_truth, squared_errors, worst_neurons
from whestboard.compare._paired import reference_noise_variance
from whestboard.compare._sides import candidates
from whestboard.data import compute_mlp_stats, get_dataset, open_dataset
from whestboard.leaderboard import MLPResult, Submission, upsert
from whestboard.scoring import (
    RunOutcome,
    RunRequest,
    get_run_predictions,
    resolve_estimator,
    rulebook_for,
    run_and_record,
    whest_shaped,
)

pytestmark = [pytest.mark.filterwarnings("ignore::whestbench.scoring.ScoringExhaustionWarning"),
              pytest.mark.usefixtures("private_state")]
SEEDS = [11, 22, 33, 44, 55, 66]


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    return open_dataset(make_official(tmp_path_factory.mktemp("cmp") / "ds", width=24, depth=3, n_samples=3000,
                                      seeds=SEEDS))


def _run(dataset, kind: str, mlps: str = "0:6") -> RunOutcome:
    return run_and_record(RunRequest(dataset, mlps, resolve_estimator(kind), rulebook_for(None)))


@pytest.fixture(scope="module")
def recorded_two_runs(dataset, tmp_path_factory):
    """A state folder in which ``run_and_record`` stored the mean and the cov run of MLPs 0:6, once per module."""
    return state_built_once(tmp_path_factory, "cmp-state", lambda: (_run(dataset, "mean"), _run(dataset, "cov")))


@pytest.fixture
def two_runs(recorded_two_runs, private_state):
    """The two recorded runs, in a copy of their state folder that is this test's own: what one test adds
    to its store (submissions, further runs) never reaches another."""
    state, runs = recorded_two_runs
    shutil.copytree(state, private_state, dirs_exist_ok=True)
    return runs


def test_verdict_pairs_the_runs_grader_numbers(two_runs):
    mean_run, cov_run = two_runs
    a, b = load_side(f"run:{mean_run.run_id}"), load_side(f"run:{cov_run.run_id}")
    out = verdict(a, b)
    per_a = {e["mlp_index"]: e for e in mean_run.report["results"]["per_mlp"]}
    per_b = {e["mlp_index"]: e for e in cov_run.report["results"]["per_mlp"]}
    assert out["n_shared"] == 6 and out["per_mlp"]["mlp_index"] == list(range(6))
    diffs = [per_a[i]["adjusted_final_layer_score"] - per_b[i]["adjusted_final_layer_score"] for i in range(6)]
    assert out["score"]["mean_difference"] == pytest.approx(np.mean(diffs), rel=1e-12)
    assert out["score"]["mean_a"] == pytest.approx(mean_run.report["results"]["adjusted_final_layer_score"], rel=1e-6)
    assert out["score"]["wins"] + out["score"]["losses"] + out["score"]["ties"] == 6
    # The reference-noise part, recomputed from the stored predictions independently.
    preds_a, preds_b = get_run_predictions(mean_run.run_id), get_run_predictions(cov_run.run_id)
    noise = [reference_noise_variance(preds_a[i][-1], preds_b[i][-1], per_a[i]["avg_variance"], 3000) for i in range(6)]
    assert out["noise"]["available"] and out["noise"]["reference"] == pytest.approx(math.sqrt(sum(noise)) / 6)
    assert out["noise"]["limited_by"] in out["noise"]["sentence"]
    json.dumps(out, allow_nan=False)  # what compare --json prints: strict JSON


def test_anatomy_equals_the_grader_and_the_mlp_page(dataset, two_runs):
    mean_run, cov_run = two_runs
    a, b = load_side(f"run:{mean_run.run_id}"), load_side(f"run:{cov_run.run_id}")
    inputs = anatomy_inputs(a, b, dataset)
    out = anatomy_of(inputs)
    results = mean_run.report["results"]
    np.testing.assert_allclose(out["per_layer_mse_a"], results["per_layer_mse"], rtol=1e-5)
    shares = out["shares_a"]
    parts = shares["parts"]
    assert parts["dead"] + parts["kinked"] + parts["always_on"] == shares["total"]  # exactly
    width = dataset.info.width
    grader_total = width * sum(e["final_layer_mse"] for e in results["per_mlp"])
    assert shares["total"] == pytest.approx(grader_total, rel=1e-5)
    assert sum(shares["counts"].values()) == 6 * width
    for m, index in enumerate(inputs.indices):  # the MLP page's neuron classes, final layer
        means, avg_variance = dataset.truth(index)
        stats = compute_mlp_stats(means, dataset.weights(index), avg_variance, 3000)
        np.testing.assert_array_equal(inputs.dead[m], stats.dead[-1])
        np.testing.assert_array_equal(inputs.always_on[m], stats.always_on[-1])
    difference = out["shares_difference"]
    assert difference["total"] == pytest.approx(shares["total"] - out["shares_b"]["total"], rel=1e-9, abs=1e-15)
    heat = heatmap_of(inputs, 2)
    expected = squared_errors(inputs.pred_a[2], inputs.truth[2]) - squared_errors(inputs.pred_b[2], inputs.truth[2])
    np.testing.assert_allclose(heat.values, expected)  # 24 neurons: one column each
    with pytest.raises(CompareError, match="not among the compared MLPs"):
        heatmap_of(inputs, 99)


def test_shares_add_up_exactly_on_many_values():
    rng = np.random.default_rng(1)
    values = np.exp(rng.normal(-20, 4, (300, 1024)))
    dead, on = rng.random((300, 1024)) < 0.3, rng.random((300, 1024)) < 0.3
    shares = class_shares(values, dead, on)
    assert shares.parts["dead"] + shares.parts["kinked"] + shares.parts["always_on"] == shares.total
    assert shares.total == pytest.approx(math.fsum(values.ravel().tolist()), rel=1e-13)  # pairwise summation
    assert sum(shares.share(c) for c in ("dead", "kinked", "always_on")) == pytest.approx(1.0, abs=1e-15)
    assert sum(shares.counts.values()) == values.size


def test_error_bins_and_worst_neurons_by_brute_force():
    rng = np.random.default_rng(2)
    truth = np.abs(rng.normal(0, 1, (4, 3, 16))).astype(np.float32)
    truth[0, -1, :4] = 0.0
    pred_a = (truth + rng.normal(0, 0.1, truth.shape)).astype(np.float32)
    pred_b = (truth + rng.normal(0, 0.1, truth.shape)).astype(np.float32)
    sq = squared_errors(pred_a[:, -1], truth[:, -1])
    bins = error_by_truth(truth[:, -1], sq)
    assert bins.counts.sum() == sq.size and bins.counts[0] == 4
    assert bins.mean_a[0] == pytest.approx(sq[0, :4].mean())
    worst = worst_neurons(pred_a, truth, [10, 11, 12, 13], pred_b, k=5)
    excess = (squared_errors(pred_a, truth) - squared_errors(pred_b, truth)).ravel()
    order = np.argsort(-excess)[:5]
    assert [(w["mlp_index"] - 10, w["layer"] - 1, w["neuron"]) for w in worst] == [
        tuple(int(x) for x in np.unravel_index(p, truth.shape)) for p in order]


def test_a_score_json_report_pairs_like_its_stored_run(dataset, two_runs, tmp_path):
    mean_run, cov_run = two_runs
    path = tmp_path / "mean.json"
    path.write_text(json.dumps(whest_shaped(mean_run.report)))
    from_file = load_report_file(path)
    from_store = load_side(f"run:{mean_run.run_id}")
    assert from_file.entries == from_store.entries and from_file.dataset_key == from_store.dataset_key
    other = load_side(f"run:{cov_run.run_id}")
    assert verdict(from_file, other)["score"] == verdict(from_store, other)["score"]


def test_lists_offer_what_shares_mlps_with_the_first_choice(dataset, two_runs):
    mean_run, cov_run = two_runs
    apart = _run(dataset, "mean", "0:6")  # served from the store: the same run id, not a new one
    assert apart.run_id == mean_run.run_id
    disjoint = _run(dataset, "cov", "5")
    first = load_side(f"run:{mean_run.run_id}")
    listed = {c["id"] for c in candidates(first)}
    assert f"run:{cov_run.run_id}" in listed and f"run:{disjoint.run_id}" in listed
    assert f"run:{mean_run.run_id}" not in listed
    only_five = load_side(f"run:{disjoint.run_id}")
    assert verdict(first, only_five)["n_shared"] == 1


def test_submissions_with_per_mlp_results_pair_by_dataset_and_index(dataset, two_runs):
    mean_run, _ = two_runs
    key = dataset.info.key
    per_mlp = mean_run.report["results"]["per_mlp"]
    sub = Submission("team-x-1", "team x", "v1-warmup", datetime(2026, 11, 1, tzinfo=UTC), "graded", "0.16.2",
                     dataset=key, adjusted_score=1.0, final_layer_mse=1.0)
    rows = [MLPResult("team-x-1", e["mlp_index"], e["final_layer_mse"] * 2, e["adjusted_final_layer_score"] * 2)
            for e in per_mlp[:4]]
    bare = Submission("team-y-1", "team y", "v1-warmup", datetime(2026, 11, 1, tzinfo=UTC), "graded", "0.16.2",
                      dataset=key)
    upsert([sub, bare], rows)
    side = load_side("sub:team-x-1")
    out = verdict(side, load_side(f"run:{mean_run.run_id}"))
    assert out["n_shared"] == 4 and out["score"]["ratio"] == pytest.approx(2.0)
    assert not out["noise"]["available"] and "predictions" in out["noise"]["reason"]
    first = load_side(f"run:{mean_run.run_id}")
    assert "sub:team-x-1" in {c["id"] for c in candidates(first)}
    with pytest.raises(CompareError, match="no per-MLP results"):
        load_side("sub:team-y-1")


def test_a_submission_is_paired_on_its_public_suite_only(dataset, two_runs):
    """Private and rerun results are the organizer's: they never enter a comparison, and the same MLP index
    in two splits must not be mixed into one suite."""
    mean_run, _ = two_runs
    per_mlp = mean_run.report["results"]["per_mlp"]
    made = datetime(2026, 11, 2, tzinfo=UTC)
    both = Submission("team-z-1", "team z", "v1-warmup", made, "graded", "0.16.2", dataset=dataset.info.key)
    hidden = Submission("team-w-1", "team w", "v1-warmup", made, "graded", "0.16.2", dataset=dataset.info.key)
    public = [MLPResult("team-z-1", e["mlp_index"], e["final_layer_mse"], e["adjusted_final_layer_score"])
              for e in per_mlp[:3]]
    private = [MLPResult(sid, e["mlp_index"], e["final_layer_mse"] * 100, e["adjusted_final_layer_score"] * 100,
                         split="private") for sid in ("team-z-1", "team-w-1") for e in per_mlp[:5]]
    upsert([both, hidden], public + private)
    side = load_side("sub:team-z-1")
    assert sorted(side.entries) == [e["mlp_index"] for e in per_mlp[:3]]
    out = verdict(side, load_side(f"run:{mean_run.run_id}"))
    assert out["n_shared"] == 3 and out["score"]["ratio"] == pytest.approx(1.0)
    listed = {c["id"] for c in candidates(load_side(f"run:{mean_run.run_id}"))}
    assert "sub:team-z-1" in listed and "sub:team-w-1" not in listed
    with pytest.raises(CompareError, match="no per-MLP results"):
        load_side("sub:team-w-1")


@pytest.mark.parametrize(("side_id", "message"), [
    ("nonsense", "run:<run id>"),
    ("run:feedface", "no run 'feedface'"),
    ("sub:nobody", "no submission 'nobody'"),
    ("base:nowhere:mean", "no served dataset 'nowhere'"),
    ("base:v1-warmup:magic", "a baseline is base:"),
])
def test_what_cannot_be_compared_is_said_in_a_sentence(side_id, message):
    with pytest.raises(CompareError, match=message):
        load_side(side_id)


def test_a_run_against_an_embedded_baseline_pairs_on_its_mlps():
    """The baseline carries no predictions: the verdict pairs on its results, the anatomy is A's alone
    with B's per-layer MSE from B's own results."""
    dataset = get_dataset("v1-warmup")
    outcome = run_and_record(RunRequest(dataset, "0:3", resolve_estimator("mean"), rulebook_for("v1-warmup")))
    a, b = load_side(f"run:{outcome.run_id}"), load_side("base:v1-warmup:mean")
    out = verdict(a, b)
    assert out["n_shared"] == 3 and not out["noise"]["available"]
    # The same estimator under the same rulebook: the stored baseline is this run, MLP for MLP.
    assert out["final_layer_mse"]["mean_difference"] == pytest.approx(0.0, abs=1e-12)
    anatomy = anatomy_of(anatomy_inputs(a, b, dataset))
    assert not anatomy["has_b"] and "shares_difference" not in anatomy
    np.testing.assert_allclose(anatomy["per_layer_mse_b"], np.mean([b.entries[i]["per_layer_mse"] for i in range(3)],
                                                                   axis=0))
    np.testing.assert_allclose(anatomy["per_layer_mse_a"], anatomy["per_layer_mse_b"], rtol=1e-5)


def test_runs_from_different_blas_set_ups_say_so(dataset, two_runs, tmp_path):
    """Two runs of this machine share one BLAS set-up; a report from another kernel is named as different."""
    mean_run, cov_run = two_runs
    a, b = load_side(f"run:{mean_run.run_id}"), load_side(f"run:{cov_run.run_id}")
    assert a.environment == mean_run.report["environment"] and a.environment["blas"]
    assert verdict(a, b)["blas"]["same"] is True
    elsewhere = whest_shaped(cov_run.report)
    other_kernel = {**cov_run.report["environment"], "kernel_env": {"OPENBLAS_CORETYPE": "Prescott"},
                    "blas": [{**lib, "kernel": "Katmai"} for lib in cov_run.report["environment"]["blas"]]}
    elsewhere["whestboard"]["environment"] = other_kernel
    path = tmp_path / "elsewhere.json"
    path.write_text(json.dumps(elsewhere))
    out = verdict(a, load_report_file(path))
    assert out["blas"]["same"] is False and "Katmai" in out["blas"]["sentence"]
    assert out["score"] == verdict(a, b)["score"]  # the verdict's numbers are untouched; the note is beside them
    b.environment = None
    assert verdict(a, b)["blas"]["same"] is None


def test_the_fewest_mlps_for_a_verdict_is_where_the_sign_flip_test_can_first_reject():
    from whestboard.compare._paired import FEWEST_MLPS_FOR_A_VERDICT
    from whestboard.leaderboard import ALPHA, sign_flip_p_value

    n = FEWEST_MLPS_FOR_A_VERDICT
    clear = np.arange(1.0, n + 1)  # every difference the same sign: the strongest evidence n MLPs can give
    assert sign_flip_p_value(clear) < ALPHA <= sign_flip_p_value(clear[:-1])


def test_a_comparison_on_too_few_mlps_says_so_instead_of_a_verdict(dataset, two_runs, capsys):
    from components.compare_panels import verdict_panel
    from whestboard.cli import main

    mean_run, cov_run = _run(dataset, "mean", "0:2"), _run(dataset, "cov", "0:2")
    out = verdict(load_side(f"run:{mean_run.run_id}"), load_side(f"run:{cov_run.run_id}"))
    for stat in (out["score"], out["final_layer_mse"]):
        assert stat["verdict"] == "too few MLPs" and not stat["resolved"] and not stat["verdict_possible"]
        assert stat["fewest_mlps_for_a_verdict"] == 6 and stat["mlps_to_ask_for"] >= 6
    capsys.readouterr()
    assert main(["compare", f"run:{mean_run.run_id}", f"run:{cov_run.run_id}"]) == 0
    text = capsys.readouterr().out
    assert "No verdict on score: 2 shared MLP(s)" in text and "at least 6" in text
    assert "lower (better)" not in text and "[95%" not in text
    page = str(verdict_panel(out))
    assert "No verdict on score" in page and "lower (better)" not in page
    six = verdict(*(load_side(f"run:{run.run_id}") for run in two_runs))  # the same runs on MLPs 0:6
    assert six["score"]["verdict_possible"] and six["score"]["verdict"] != "too few MLPs"


def test_a_cumulant_baseline_is_a_side_despite_the_colon_in_its_kind():
    """``base:v1-warmup:cumulant:3`` names the shipped K = 3 baseline; paired with covariance propagation on
    the same MLPs, the verdict's difference is the one of their stored per-MLP MSEs."""
    a, b = load_side("base:v1-warmup:cumulant:3"), load_side("base:v1-warmup:cov")
    assert a.side_id == "base:v1-warmup:cumulant:3" and "K = 3" in a.label
    out = verdict(a, b)
    shared = sorted(set(a.entries) & set(b.entries))
    assert out["n_shared"] == len(shared) > 0
    expected = np.mean([a.entries[i]["final_layer_mse"] - b.entries[i]["final_layer_mse"] for i in shared])
    assert out["final_layer_mse"]["mean_difference"] == pytest.approx(expected, rel=1e-9)
