"""Runs report the grader's numbers: split per MLP, they equal one ``evaluate_estimator`` call."""

from __future__ import annotations

import dataclasses
import functools
import math
import threading

import flopscope as flops
import flopscope.numpy as fnp
import numpy as np
import pytest
from whestbench.budget import ROUNDS, mc_flops_per_sample, score_multiplier
from whestbench.estimators import CombinedEstimator, CovariancePropagationEstimator, MeanPropagationEstimator
from whestbench.scoring import ContestData, ContestSpec, evaluate_estimator

from tests.upstream import make_official, whestbench_mlps
from whestboard.data import open_dataset
from whestboard.scoring import Rulebook, _inputs, _run_records, _runs, rulebook_for
from whestboard.scoring._estimators import (
    mc_finalize,
    mc_finalize_flops,
    metered_mc_flops_per_sample,
    parse_mc_spec,
    resolve_estimator,
)

WIDTH, DEPTH, SAMPLES = 24, 3, 3000
SEEDS = [101, 202, 303, 404]
TIMING = {"wall_time_s", "flopscope_backend_time_s", "flopscope_overhead_time_s", "residual_wall_time_s"}
WHESTBOARD_EXTRAS = {
    "failed", "failure_reason", "fallback", "score_multiplier", "estimator_seed", "avg_variance",
    "n_reference_samples", "noise_floor", "final_layer_mse_corrected", "below_noise_floor",
    "mc_samples_at_same_flops", "mc_mse_at_same_flops", "whestbench_version", "flopscope_version", "numpy_version",
    "scoring_wall_s", "cpu_wait_s", "meter_tampering", "setup_wall_s",
}
pytestmark = [pytest.mark.filterwarnings("ignore::whestbench.scoring.ScoringExhaustionWarning"),
              pytest.mark.usefixtures("private_state")]
REFERENCE_CLASSES = {"mean": MeanPropagationEstimator, "cov": CovariancePropagationEstimator,
                     "combined": CombinedEstimator}


@pytest.fixture(scope="module")
def official(tmp_path_factory):
    return make_official(tmp_path_factory.mktemp("runs") / "ds", width=WIDTH, depth=DEPTH, n_samples=SAMPLES,
                         seeds=SEEDS)


@pytest.fixture(scope="module")
def reference(official, tmp_path_factory):
    """MLPs and targets exactly as whestbench's own loader yields them."""
    return whestbench_mlps(official, tmp_path_factory.mktemp("hf"))


@pytest.fixture(scope="module")
def dataset(official):
    return open_dataset(official)


@pytest.fixture(scope="module")
def solo_run(dataset):
    """``solo_run(spec, budget)``: a run of every MLP with nothing else scoring, executed once per module.

    The split-run tests check each against the grader; the thread test takes from the same runs the FLOP
    counts that concurrent runs must reproduce. A run is read, never changed, by whoever asks for it."""
    @functools.cache
    def run(spec: str, budget: int | None = None) -> _runs.RunOutcome:
        return _runs.execute(_runs.RunRequest(dataset, None, resolve_estimator(spec), rulebook_for(None, budget)))
    return run


def grader_call(reference, rulebook: Rulebook, estimator) -> dict:
    """One ``evaluate_estimator`` call over every MLP, its inputs built from whestbench's loader."""
    spec = ContestSpec(
        width=WIDTH, depth=DEPTH, n_mlps=len(reference), flop_budget=rulebook.flop_budget,
        ground_truth_samples=SAMPLES, wall_time_limit_s=rulebook.wall_time_limit_s,
        residual_wall_time_limit_s=rulebook.residual_wall_time_limit_s,
        lambda_flops_per_second=rulebook.lambda_flops_per_second,
    )
    data = ContestData(
        spec=spec,
        mlps=[r["mlp"] for r in reference],
        all_layer_targets=[fnp.asarray(r["all_layer_means"], dtype=fnp.float32) for r in reference],
        final_targets=[fnp.asarray(r["all_layer_means"][-1], dtype=fnp.float32) for r in reference],
        avg_variances=[r["avg_variance"] for r in reference],
    )
    return evaluate_estimator(estimator, data)


def ops_flops(breakdown: dict | None) -> dict:
    """FLOPs and calls per namespace and operation: the untimed part of a breakdown."""
    if breakdown is None:
        return {}
    return {
        (ns, op): (info["flop_cost"], info["calls"])
        for ns, bucket in breakdown["by_namespace"].items()
        for op, info in bucket["operations"].items()
    } | {"flops_used": breakdown["flops_used"], "flop_budget": breakdown["flop_budget"]}


def assert_entries_equal(ours: dict, theirs: dict) -> None:
    """Every field the grader reports, exactly, except wall-clock timings (and traceback text)."""
    assert set(theirs) <= set(ours)
    assert set(ours) - set(theirs) <= WHESTBOARD_EXTRAS
    for key, value in theirs.items():
        if key in TIMING or key == "traceback":
            continue
        if key == "breakdowns":
            assert ops_flops(ours[key]["estimator"]) == ops_flops(value["estimator"])
        else:
            assert ours[key] == value, key
    assert (ours.get("traceback") is None) == (theirs.get("traceback") is None)


def assert_aggregates_equal(ours: dict, theirs: dict) -> None:
    for key, value in theirs.items():
        if key == "per_mlp":
            for a, b in zip(ours[key], value, strict=True):
                assert_entries_equal(a, b)
        elif key == "breakdowns":
            assert ops_flops(ours[key]["estimator"]) == ops_flops(value["estimator"])
        else:
            assert ours[key] == value, key


@pytest.mark.parametrize("kind", ["mean", "cov", "combined"])
@pytest.mark.parametrize("budget", [None, 20_000])
def test_split_run_equals_one_grader_call(solo_run, reference, kind, budget):
    rulebook = rulebook_for(None, budget)
    outcome = solo_run(kind, budget)
    expected = grader_call(reference, rulebook, REFERENCE_CLASSES[kind]())
    assert_aggregates_equal(outcome.report["results"], expected)
    assert outcome.report["complete"] and not outcome.cancelled


def test_budget_too_small_reads_as_the_grader_fallback(dataset, reference):
    rulebook = rulebook_for(None, 20_000)
    outcome = _runs.execute(_runs.RunRequest(dataset, None, resolve_estimator("cov"), rulebook))
    for entry, ref in zip(outcome.report["results"]["per_mlp"], reference, strict=True):
        assert entry["budget_exhausted"] and entry["failed"]
        assert "over the FLOP budget" in entry["failure_reason"]
        assert entry["score_multiplier"] == 1.0
        assert entry["final_layer_mse"] == float(fnp.mean(fnp.asarray(ref["all_layer_means"][-1]) ** 2))
        assert not outcome.predictions[entry["mlp_index"]].any()


def test_scored_predictions_are_the_ones_behind_the_mse(dataset, reference):
    outcome = _runs.execute(_runs.RunRequest(dataset, "1:3", resolve_estimator("cov"), rulebook_for(None)))
    for entry in outcome.report["results"]["per_mlp"]:
        truth = fnp.asarray(reference[entry["mlp_index"]]["all_layer_means"], dtype=fnp.float32)
        pred = fnp.asarray(outcome.predictions[entry["mlp_index"]], dtype=fnp.float32)
        assert float(fnp.mean((pred[-1] - truth[-1]) ** 2)) == entry["final_layer_mse"]
        assert [float(x) for x in fnp.mean((pred - truth) ** 2, axis=1)] == entry["per_layer_mse"]


def test_every_mse_comes_with_the_reference_noise_floor(dataset, reference):
    outcome = _runs.execute(_runs.RunRequest(dataset, None, resolve_estimator("mean"), rulebook_for(None)))
    floors = []
    for entry in outcome.report["results"]["per_mlp"]:
        ref = reference[entry["mlp_index"]]
        floor = ref["avg_variance"] / SAMPLES
        floors.append(floor)
        assert entry["noise_floor"] == floor
        assert entry["final_layer_mse_corrected"] == max(0.0, entry["final_layer_mse"] - floor)
        assert entry["below_noise_floor"] == (entry["final_layer_mse_corrected"] < floor)
        per_sample = mc_flops_per_sample(WIDTH, DEPTH, dtype_aware_billing=True)
        # sigma^2 * c / F (the code) and sigma^2 / (F / c) (the definition) round differently: each is two
        # float64 operations, so they agree to a few ulp (2**-52 = 2.2e-16 each), not bit for bit; which
        # last bit comes out depends on avg_variance, which the BLAS kernel that baked the data moves.
        expected_mc_mse = ref["avg_variance"] / (entry["flops_used"] / per_sample)
        assert entry["mc_mse_at_same_flops"] == pytest.approx(expected_mc_mse, rel=4 * 2.0**-52, abs=0)
        assert entry["flopscope_version"] and entry["whestbench_version"]
    noise = outcome.report["noise"]
    assert noise["noise_floor"] == pytest.approx(np.mean(floors), rel=1e-12)
    results = outcome.report["results"]
    assert noise["final_layer_mse_corrected"] == max(0.0, results["final_layer_mse"] - noise["noise_floor"])
    mc = outcome.report["mc_reference"]
    mean_var = np.mean([r["avg_variance"] for r in reference])
    assert mc["mc_at_budget"] == pytest.approx(mean_var / (2**41 / mc["mc_flops_per_sample"]), rel=1e-12)
    assert mc["score_vs_mc"] == pytest.approx(mc["mc_at_budget"] / results["adjusted_final_layer_score"])


def test_below_noise_floor_is_flagged_when_the_error_hides_in_reference_noise(dataset):
    """A coarse reference (few samples) makes a good estimator unresolvable."""
    outcome = _runs.execute(_runs.RunRequest(dataset, None, resolve_estimator("mc:20000"), rulebook_for(None)))
    flagged = [e for e in outcome.report["results"]["per_mlp"] if e["below_noise_floor"]]
    assert flagged, "20000 MC samples against a 3000-sample reference must sit under its noise floor"
    for e in flagged:
        assert e["final_layer_mse"] < 2 * e["noise_floor"]


# ---------------------------------------------------------------------------
# Monte Carlo accounting
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("n", [2, 1000, 1025, 2049])
def test_monte_carlo_is_billed_mc_flops_per_sample_per_sample(dataset, n):
    outcome = _runs.execute(_runs.RunRequest(dataset, "0", resolve_estimator(f"mc:{n}"), rulebook_for(None)))
    entry = outcome.report["results"]["per_mlp"][0]
    per_sample = mc_flops_per_sample(WIDTH, DEPTH, dtype_aware_billing=True)
    assert entry["flops_used"] == n * per_sample + mc_finalize_flops(WIDTH, DEPTH)
    assert not entry["failed"]


def test_finalize_cost_is_flopscopes_own_count_and_under_one_sample():
    with flops.BudgetContext(flop_budget=10**12, quiet=True) as ctx:
        mc_finalize([fnp.zeros(WIDTH, dtype=fnp.float64) for _ in range(DEPTH)], 7)
    assert mc_finalize_flops(WIDTH, DEPTH) == ctx.flops_used
    assert ctx.flops_used < metered_mc_flops_per_sample(WIDTH, DEPTH)


def test_budget_fraction_spends_the_most_whole_samples_that_fit(dataset):
    budget = 10_000_000
    outcome = _runs.execute(_runs.RunRequest(dataset, "0", resolve_estimator("mc:0.5B"), rulebook_for(None, budget)))
    used = outcome.report["results"]["per_mlp"][0]["flops_used"]
    per_sample = metered_mc_flops_per_sample(WIDTH, DEPTH)
    n = (used - mc_finalize_flops(WIDTH, DEPTH)) // per_sample
    assert used == n * per_sample + mc_finalize_flops(WIDTH, DEPTH)
    assert used <= 0.5 * budget < used + per_sample


def test_monte_carlo_is_seeded_from_the_mlp_and_converges(dataset, reference):
    request = _runs.RunRequest(dataset, None, resolve_estimator("mc:4000"), rulebook_for(None))
    first, second = _runs.execute(request), _runs.execute(request)
    for index, pred in first.predictions.items():
        np.testing.assert_array_equal(pred, second.predictions[index])
    for entry in first.report["results"]["per_mlp"]:
        expected = reference[entry["mlp_index"]]["avg_variance"] * (1 / 4000 + 1 / SAMPLES)
        assert expected / 5 < entry["final_layer_mse"] < expected * 5


def test_installed_flopscope_cannot_bill_like_the_warmup_round():
    """Documented limitation: unit dtype rates still bill the float32->float64 cast, so k != 1."""
    from flopscope import _weights
    from whestbench.generation import sample_mlp

    mlp = sample_mlp(WIDTH, DEPTH, np.random.default_rng(0), seed=1)
    estimator = resolve_estimator("mc:1000").factory()
    saved = dict(_weights._ACTIVE_DTYPE_RATES)
    _weights._ACTIVE_DTYPE_RATES.clear()
    try:
        with flops.BudgetContext(flop_budget=10**12, quiet=True) as ctx:
            estimator.predict(mlp, 10**12)
    finally:
        _weights._ACTIVE_DTYPE_RATES.update(saved)
    warmup_price = 1000 * mc_flops_per_sample(WIDTH, DEPTH, dtype_aware_billing=False)
    assert ctx.flops_used - warmup_price > 1000 * DEPTH * WIDTH - 1  # every sample's casts still billed
    rulebook = rulebook_for("v1-warmup")
    assert rulebook.billing_note and "process-wide" in rulebook.billing_note
    assert rulebook_for("v2-phase2").billing_note is None


# ---------------------------------------------------------------------------
# rulebook and inputs
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("tag", list(ROUNDS))
def test_rulebook_restores_every_setting_of_the_round(tag):
    rb, cfg = rulebook_for(tag), ROUNDS[tag]
    assert (rb.flop_budget, rb.wall_time_limit_s, rb.residual_wall_time_limit_s, rb.lambda_flops_per_second,
            rb.residual_mode, rb.dtype_aware_billing) == (
        cfg.flop_budget, cfg.wall_time_limit_s, cfg.residual_wall_time_limit_s, cfg.lambda_flops_per_second,
        cfg.residual_mode, cfg.dtype_aware_billing)
    spec = rb.contest_spec(width=cfg.width, depth=cfg.depth, n_mlps=1, n_samples=10)
    assert spec.flop_budget == cfg.flop_budget and spec.lambda_flops_per_second == cfg.lambda_flops_per_second
    custom = rulebook_for(tag, 12345)
    assert custom.flop_budget == 12345 and custom.custom_budget and custom.wall_time_limit_s == cfg.wall_time_limit_s


def test_budget_and_selection_parsing():
    b = 2**41
    assert _inputs.parse_budget("", b) is None
    assert _inputs.parse_budget("0.5B", b) == b // 2
    assert _inputs.parse_budget("2**41", b) == 2**41
    assert _inputs.parse_budget("68_000_000_000", b) == 68_000_000_000
    assert _inputs.parse_budget("2.2e12", b) == 2_200_000_000_000
    for bad in ("lots", "-5", "0"):
        with pytest.raises(_inputs.RunError):
            _inputs.parse_budget(bad, b)
    available = [0, 1, 2, 3, 5]
    assert _inputs.parse_mlp_selection("0:3", available) == [0, 1, 2]
    assert _inputs.parse_mlp_selection("0:4,5", available) == [0, 1, 2, 3, 5]
    assert _inputs.parse_mlp_selection("", available) == available
    with pytest.raises(_inputs.RunError, match="4"):
        _inputs.parse_mlp_selection("0:5", available)
    with pytest.raises(ValueError, match="unknown estimator"):
        resolve_estimator("gradient-descent")
    with pytest.raises(ValueError, match="at least 2"):
        resolve_estimator("mc:1")


# ---------------------------------------------------------------------------
# hostile input: every refusal is a sentence, computed without building anything big
# ---------------------------------------------------------------------------

THIRTY_TWO = list(range(32))


@pytest.mark.parametrize(("text", "expected"), [
    ("0:8", list(range(8))), ("3", [3]), ("0,2,5", [0, 2, 5]), ("0:4,7", [0, 1, 2, 3, 7]),
    (" 0 : 4 , 7 ", [0, 1, 2, 3, 7]), ("28:", [28, 29, 30, 31]), (":3", [0, 1, 2]), ("0:12:5", [0, 5, 10]),
    ("0:4,2:6", [0, 1, 2, 3, 4, 5]), (7, [7]), ([4, 1, 4], [1, 4]), (range(30, 32), [30, 31]),
])
def test_selection_reads_every_documented_form(text, expected):
    assert _inputs.parse_mlp_selection(text, THIRTY_TWO) == expected


@pytest.mark.parametrize(("text", "message"), [
    ("0:100000000", "MLPs 32..99999999 are not in this dataset (it has 32 MLPs: 0..31)"),
    ("0:" + "9" * 40, "MLPs 32..9999999999999999999999999999999999999998 are not in this dataset"),
    ("40", "MLP 40 is not in this dataset (it has 32 MLPs: 0..31)"),
    ("32:", "MLP 32 is not in this dataset"),
    ("30:64:3", "MLPs 33..63 (step 3) are not in this dataset"),
    ("1,40,50:60", "MLPs 40, 50..59 are not in this dataset"),
    ("-3", "'-3' has a negative number: indices and steps count up from 0"),
    ("0:8:-1", "'0:8:-1' has a negative number"),
    ("0:8:0", "'0:8:0' has step 0: a step must be 1 or more"),
    ("5:3", "MLP range '5:3' selects no MLP (the stop is excluded)"),
    ("1.5", "cannot read MLP selection part '1.5'"),
    ("0:1:2:3", "cannot read MLP selection part '0:1:2:3'"),
    ("0:" + "9" * 41, "cannot read MLP selection part '0:" + "9" * 38 + "'… (43 characters)"),
    (",".join(["0"] * 33), "more than 32 comma-separated parts but the dataset has only 32 MLPs"),
    ("1" * 10**6, "the MLP selection is 1,000,000 characters long, more than the 576"),
    (",,", "the MLP selection is empty"),
    ([1, "a"], "indices are whole numbers"),
    ([True], "indices are whole numbers"),
    ([-1], "has a negative index"),
    (list(range(33)), "lists more than 32 MLPs"),
    ({"0": 1}, "cannot read MLP selection {'0': 1}"),
    (2.5, "cannot read MLP selection 2.5"),
])
def test_a_bad_selection_is_refused_with_a_sentence(text, message):
    with pytest.raises(_inputs.RunError) as refused:
        _inputs.parse_mlp_selection(text, THIRTY_TWO)
    assert message in str(refused.value)
    assert len(str(refused.value)) < 400  # a message, never an echo of the input
    if not isinstance(text, str) or "not in this dataset" not in message:
        return
    assert "write indices such as 0:8" in str(refused.value)  # and what to write instead


def test_a_huge_range_is_answered_without_enumerating_it():
    """Ranges are arithmetic: three thousand overlapping parts of ~10**40 indices each cost no memory."""
    import tracemalloc

    available = list(range(10_000))
    text = ",".join(f"{start}:" + "9" * 40 for start in range(3000))
    tracemalloc.start()
    try:
        _inputs.parse_mlp_selection(text, available)
    except _inputs.RunError as exc:
        refusal = str(exc)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert refusal.startswith("MLPs 10000.." + "9" * 39 + "8 are not in this dataset (it has 10000 MLPs: 0..9999)")
    assert peak < 8 * 2**20  # the parts and the dataset's indices: nothing per index a range names


@pytest.mark.parametrize("listed", [[4, 1, 4], [0, 3, 4, 9], [3, 4, 40, 41, 40], [9, 8, 7, 6, 4, 3], [2, 6, 7, 8, 9, 12],
                                    list(range(8)), [0], [99]])
def test_a_list_of_indices_reads_as_the_same_indices_written_out(listed):
    """Every run request checks its MLPs again as a list (a sweep: once a point): the list is read by set
    arithmetic, never marked index by index, and says exactly what the written selection says."""
    available = [0, 1, 2, 5, 6, 7, 8, 12]
    written = ",".join(str(i) for i in listed)
    try:
        expected = _inputs.parse_mlp_selection(written, available)
    except _inputs.RunError as exc:
        with pytest.raises(_inputs.RunError) as refused:
            _inputs.parse_mlp_selection(listed, available)
        assert str(refused.value) == str(exc)
    else:
        assert _inputs.parse_mlp_selection(listed, available) == expected


def test_gaps_in_a_partly_baked_dataset_are_named():
    with pytest.raises(_inputs.RunError, match=r"MLPs 3, 4 are not in this dataset \(it has 4 MLPs: 0, 1, 2, 5\)"):
        _inputs.parse_mlp_selection("0:5", [0, 1, 2, 5])
    assert _inputs.parse_mlp_selection("0:3,5", [0, 1, 2, 5]) == [0, 1, 2, 5]


B_WARMUP = ROUNDS["v1-warmup"].flop_budget


@pytest.mark.parametrize(("text", "expected"), [
    ("2**41", 2**41), ("2 ** 36", 2**36), ("0.5B", B_WARMUP // 2), ("B", B_WARMUP), ("1000B", 1000 * B_WARMUP),
    ("+5e10", 5 * 10**10), ("68,000,000,000", 68 * 10**9), (12345, 12345), (2.5e10, 25 * 10**9), ("1**1e400", 1),
])
def test_budget_reads_every_documented_form(text, expected):
    assert _inputs.parse_budget(text, B_WARMUP) == expected


@pytest.mark.parametrize(("text", "message"), [
    ("2**99999999", "budget per MLP '2**99999999' is more than 1e300 FLOPs, above the most a run accepts, "
                    "1000 x B = 6.8e+13 FLOPs"),
    ("1e400", "budget per MLP '1e400' is more than 1e300 FLOPs"),
    ("1e400B", "budget per MLP '1e400B' is more than 1e300 FLOPs"),
    ("1001B", "budget per MLP '1001B' is 6.81e+13 FLOPs, above the most a run accepts"),
    ("10**16", "budget per MLP '10**16' is 1e+16 FLOPs"),
    pytest.param(10**5000, "an integer of about 5,001 digits is more than 1e300 FLOPs", id="10**5000"),
    (float("inf"), "budget per MLP inf is more than 1e300 FLOPs"),
    ("inf", "budget per MLP 'inf' is more than 1e300 FLOPs"),
    ("nan", "budget per MLP 'nan' is not a number"),
    (float("nan"), "budget per MLP nan is not a number"),
    ("-1", "budget per MLP '-1' is below 1 FLOP"),
    ("-0.5B", "budget per MLP '-0.5B' is below 1 FLOP"),
    ("0", "budget per MLP '0' is below 1 FLOP"),
    ("2**-5", "budget per MLP '2**-5' is below 1 FLOP"),
    ("1e-400", "budget per MLP '1e-400' is below 1 FLOP"),
    ("much", "cannot read budget per MLP 'much'"),
    ("9" * 100, "is too long to be a budget"),
    (True, "budget per MLP True is not a number"),
    ([1], "budget per MLP [1] is not a number"),
])
def test_a_bad_budget_is_refused_with_a_sentence(text, message):
    with pytest.raises(_inputs.RunError) as refused:
        _inputs.parse_budget(text, B_WARMUP)
    assert message in str(refused.value)
    assert len(str(refused.value)) < 400
    assert "B" in str(refused.value).split(message, 1)[1]  # says what to write instead


def test_an_exponent_is_bounded_before_the_power_is_computed():
    """"2**99999999" would be a 12 MB integer or an OverflowError; it is refused from its logarithm."""
    import tracemalloc

    refusals = []
    tracemalloc.start()
    for text in ("2**99999999", "9.9**9e99", "10**301", "1e308**1e308"):
        try:
            _inputs.parse_budget(text, B_WARMUP)
        except _inputs.RunError as exc:
            refusals.append(str(exc))
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert len(refusals) == 4 and all("more than 1e300 FLOPs" in r for r in refusals)
    assert peak < 2**20  # 2**99999999 alone is 12.5 MB as an int


def test_rulebook_refuses_a_budget_past_the_cap_whoever_asks():
    assert rulebook_for("v1-warmup", 1000 * B_WARMUP).flop_budget == 1000 * B_WARMUP
    with pytest.raises(_inputs.RunError, match="above the most a run accepts"):
        rulebook_for("v1-warmup", 1000 * B_WARMUP + 1)
    with pytest.raises(_inputs.RunError, match="below 1 FLOP"):
        rulebook_for("v1-warmup", 0)


@pytest.mark.parametrize(("spec", "params"), [
    ("mc:1000", {"n_samples": 1000}), ("mc:1e5", {"n_samples": 100_000}), ("mc:1_000", {"n_samples": 1000}),
    ("mc:1e9", {"n_samples": 10**9}), ("mc:0.5B", {"budget_fraction": 0.5}), ("mc:1B", {"budget_fraction": 1.0}),
])
def test_monte_carlo_spec_reads_counts_and_fractions(spec, params):
    assert parse_mc_spec(spec) == params


@pytest.mark.parametrize(("spec", "message"), [
    ("mc:1e400", "Monte Carlo samples '1e400' is more than 1e300 samples, more than the 1e9 behind the public"),
    ("mc:1e30", "Monte Carlo samples '1e30' is 1e+30 samples"),
    ("mc:1000000001", "Monte Carlo samples '1000000001' is 1e+09 samples"),
    ("mc:1.5", "Monte Carlo samples '1.5' is not a whole number of samples"),
    ("mc:0", "Monte Carlo samples '0': Monte Carlo needs at least 2 samples"),
    ("mc:-5", "Monte Carlo samples '-5' is negative"),
    ("mc:nan", "cannot read Monte Carlo samples 'nan'"),
    ("mc:2B", "Monte Carlo samples '2B' asks for 2 of the budget; a fraction must be above 0 and at most 1"),
    ("mc:0B", "asks for 0 of the budget"),
    ("mc:1e400B", "asks for inf of the budget"),
    ("mc:" + "9" * 100, "is too long to be a sample count"),
    ("mc:", "cannot read Monte Carlo samples ''"),
])
def test_a_bad_monte_carlo_spec_is_refused_with_a_sentence(spec, message):
    with pytest.raises(_inputs.RunError) as refused:
        resolve_estimator(spec)
    assert message in str(refused.value)
    assert "write a whole number of samples from 2 to 1e9" in str(refused.value)
    assert len(str(refused.value)) < 400


def test_an_unknown_estimator_is_named_briefly():
    with pytest.raises(_inputs.RunError, match=r"unknown estimator 'xxxx.*… \(100,000 characters\)"):
        resolve_estimator("x" * 100_000)
    with pytest.raises(_inputs.RunError, match="unknown estimator 5"):
        resolve_estimator(5)


def test_mc_fraction_too_small_for_two_samples_fails_that_mlp_with_a_reason(dataset):
    outcome = _runs.execute(_runs.RunRequest(dataset, "0", resolve_estimator("mc:0.01B"), rulebook_for(None, 10**5)))
    entry = outcome.report["results"]["per_mlp"][0]
    assert entry["failed"] and entry["error_code"] == "ValueError"
    assert "need at least 2" in entry["failure_reason"]


# ---------------------------------------------------------------------------
# cache and store
# ---------------------------------------------------------------------------


def test_cache_key_tracks_everything_that_changes_the_numbers(dataset, tmp_path):
    base = _runs.RunRequest(dataset, "0:2", resolve_estimator("mean"), rulebook_for(None))
    key = _runs.cache_key(base)
    assert _runs.cache_key(dataclasses.replace(base)) == key
    assert _runs.cache_key(dataclasses.replace(base, indices=[0, 1, 2])) != key
    assert _runs.cache_key(dataclasses.replace(base, estimator=resolve_estimator("cov"))) != key
    assert _runs.cache_key(dataclasses.replace(base, rulebook=rulebook_for(None, 10**9))) != key
    assert _runs.cache_key(dataclasses.replace(base, rulebook=rulebook_for("v1-phase1"))) != key
    path = tmp_path / "est.py"
    code = "from whestbench.estimators import MeanPropagationEstimator\nclass Estimator(MeanPropagationEstimator):\n    pass\n"
    path.write_text(code)
    first = _runs.cache_key(dataclasses.replace(base, estimator=resolve_estimator(str(path))))
    path.write_text(code + "# edited\n")
    assert _runs.cache_key(dataclasses.replace(base, estimator=resolve_estimator(str(path)))) != first


def test_repeated_run_is_served_from_the_store(dataset):
    request = _runs.RunRequest(dataset, "0:2", resolve_estimator("cov"), rulebook_for(None), source="cli")
    first = _runs.run_and_record(request)
    assert first.run_id and not first.cached
    seen = []
    again = _runs.run_and_record(request, on_progress=lambda done, total, entry: seen.append((done, total)))
    assert again.cached and again.run_id == first.run_id
    assert seen == [(1, 2), (2, 2)]
    assert again.report["results"]["final_layer_mse"] == first.report["results"]["final_layer_mse"]
    for index, pred in first.predictions.items():
        np.testing.assert_array_equal(again.predictions[index], pred)
    fresh = _runs.run_and_record(request, use_cache=False)
    assert fresh.run_id != first.run_id and not fresh.cached


def test_store_public_api(dataset):
    _runs.run_and_record(_runs.RunRequest(dataset, "0:2", resolve_estimator("mean"), rulebook_for(None), source="cli",
                             team="blue"))
    outcome = _runs.run_and_record(_runs.RunRequest(dataset, "1", resolve_estimator("mc:100"), rulebook_for("v1-phase1", 10**9),
                                       source="lab"))
    listed = _run_records.list_runs()
    assert [r["run_id"] for r in listed] == [outcome.run_id, listed[1]["run_id"]]
    expected_keys = {
        "run_id", "created_at", "dataset_key", "round_tag", "estimator_label", "estimator_kind", "code_sha256",
        "team", "source", "budget", "mlp_indices", "n_mlps", "mean_flops_used", "mean_effective_compute",
        "final_layer_mse", "all_layers_mse", "adjusted_score", "mean_multiplier", "n_failed", "per_layer_mse",
        "noise_floor", "whestbench_version", "flopscope_version", "seed_protocol", "rescore_of",
    }
    assert all(set(r) == expected_keys for r in listed)
    newest, older = listed
    results = outcome.report["results"]
    assert newest["estimator_kind"] == "mc" and newest["round_tag"] == "v1-phase1" and newest["budget"] == 10**9
    assert newest["mlp_indices"] == [1] and newest["n_mlps"] == 1 and newest["source"] == "lab"
    assert newest["final_layer_mse"] == results["final_layer_mse"]
    assert newest["adjusted_score"] == results["adjusted_final_layer_score"]
    assert newest["per_layer_mse"] == results["per_layer_mse"]
    assert newest["mean_flops_used"] == results["per_mlp"][0]["flops_used"]
    assert newest["noise_floor"] == outcome.report["noise"]["noise_floor"]
    assert older["team"] == "blue" and older["estimator_kind"] == "mean" and older["round_tag"] == "v2-phase2"
    assert _run_records.list_runs(round_tag="v1-phase1") == [newest]
    assert _run_records.list_runs(dataset_key="nope") == []
    full = _run_records.get_run(outcome.run_id)
    assert full["results"]["per_mlp"][0]["flops_used"] == results["per_mlp"][0]["flops_used"]
    assert full["run_id"] == outcome.run_id
    assert _run_records.get_run("missing") is None
    assert math.isfinite(full["noise"]["noise_floor"])


def test_record_run_rejects_an_unknown_source(dataset):
    outcome = _runs.execute(_runs.RunRequest(dataset, "0", resolve_estimator("mean"), rulebook_for(None),
                                           source="elsewhere"))
    with pytest.raises(ValueError, match="source"):
        _run_records.record_run(outcome.report)


def test_cancel_stops_between_mlps_and_records_nothing(dataset):
    calls = []

    def cancel_after_first() -> bool:
        return len(calls) >= 1

    outcome = _runs.run_and_record(
        _runs.RunRequest(dataset, None, resolve_estimator("mean"), rulebook_for(None)),
        on_progress=lambda done, total, entry: calls.append(done),
        should_cancel=cancel_after_first,
    )
    assert outcome.cancelled and not outcome.report["complete"]
    assert len(outcome.report["results"]["per_mlp"]) == 1
    assert _run_records.list_runs() == []


def test_an_injected_estimator_object_is_scored_like_any_other(dataset, reference):
    """What the sandbox does: a handle whose factory returns any object with predict()."""
    class Remote:
        enforces_wall_time_limit = True

        def __init__(self) -> None:
            self.inner = MeanPropagationEstimator()

        def predict(self, mlp, budget):
            return self.inner.predict(mlp, budget)

        def last_predict_stats(self):
            return None

    handle = _runs.EstimatorHandle(label="remote", kind="upload", code_sha256="0" * 64, factory=Remote)
    outcome = _runs.execute(_runs.RunRequest(dataset, None, handle, rulebook_for(None), source="upload"))
    expected = grader_call(reference, rulebook_for(None), Remote())
    assert_aggregates_equal(outcome.report["results"], expected)


def test_score_multiplier_and_floor_follow_the_budget(dataset):
    budget = 10**5
    outcome = _runs.execute(_runs.RunRequest(dataset, "0", resolve_estimator("mean"), rulebook_for(None, budget)))
    entry = outcome.report["results"]["per_mlp"][0]
    assert entry["score_multiplier"] == score_multiplier(entry["effective_compute"], budget, failed=False)
    assert entry["adjusted_final_layer_score"] == entry["final_layer_mse"] * entry["score_multiplier"]
    assert outcome.report["rulebook"]["charging_floor"] == 0.1 * budget


def test_two_threads_scoring_at_once_both_get_exact_flop_counts(dataset, solo_run):
    """flopscope meters per thread: concurrent runs must not leak FLOPs into each other."""
    specs = ["cov", "mc:3000", "mean", "combined"]
    alone = {s: [e["flops_used"] for e in solo_run(s).report["results"]["per_mlp"]] for s in specs}
    together: dict[str, list] = {}
    barrier = threading.Barrier(2)

    def worker(spec_pair):
        barrier.wait()
        for _ in range(3):
            for s in spec_pair:
                out = _runs.execute(_runs.RunRequest(dataset, None, resolve_estimator(s), rulebook_for(None)))
                together.setdefault(s, []).append([e["flops_used"] for e in out.report["results"]["per_mlp"]])

    threads = [threading.Thread(target=worker, args=(pair,)) for pair in (specs[:2], specs[2:])]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for s in specs:
        assert together[s] == [alone[s]] * 3, s
