"""Cumulant propagation (``cumulant:K``) against independent oracles.

* K = 1 and K = 2 against whestbench's own mean and covariance propagation;
* every variant against ARC's reference implementation (its per-layer means on whestbench's MLPs, run
  once outside the project and committed as a fixture);
* every K against a 10^6-sample Monte Carlo mean on small networks, each error beside that
  reference's noise floor;
* the FLOPs a run reports against flopscope's own count of the same predict.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path

import flopscope as flops
import flopscope.numpy as fnp
import numpy as np
import pytest
from whestbench.estimators import CovariancePropagationEstimator, MeanPropagationEstimator
from whestbench.generation import sample_mlp
from whestbench.scoring import evaluate_estimator
from whestbench.seeds import derive_seed_streams

from whestboard.rules import get_round
from whestboard.scoring import CUMULANT_KINDS, RunError, parse_cumulant_spec, resolve_estimator, rulebook_for
from whestboard.scoring._cumulant import (
    IMPLEMENTED,
    PLAN_SHARE,
    CumulantPropagationEstimator,
    order3_flops,
    third_order_window,
)
from whestboard.scoring._runs import MLPCase, contest_data, score_one

#: K = 1 and K = 2 run whestbench's operations in the same order, and the grader reads predictions
#: as float32: a few float32 ulps (2^-23 = 1.2e-7 relative) is the most two such runs may differ by.
FLOAT32_RTOL = 8 * 2.0**-23


def mlp(width: int, depth: int, seed: int):
    return sample_mlp(width, depth, fnp.random.default_rng(seed))


def predict(estimator, net, budget: int = 10**13) -> np.ndarray:
    with flops.BudgetContext(flop_budget=10**15, quiet=True):
        return np.asarray(estimator.predict(net, budget), dtype=np.float64)


@pytest.mark.parametrize("width,depth,seed", [(16, 3, 1), (48, 6, 2), (64, 8, 3)])
def test_order_one_is_whestbench_mean_propagation(width, depth, seed):
    net = mlp(width, depth, seed)
    ours = predict(CumulantPropagationEstimator(1, "diagonal"), net)
    theirs = predict(MeanPropagationEstimator(), net)
    np.testing.assert_allclose(ours.astype(np.float32), theirs.astype(np.float32), rtol=FLOAT32_RTOL, atol=0)


@pytest.mark.parametrize("width,depth,seed", [(16, 3, 1), (48, 6, 2), (64, 8, 3)])
def test_order_two_is_whestbench_covariance_propagation(width, depth, seed):
    net = mlp(width, depth, seed)
    ours = predict(CumulantPropagationEstimator(2), net)
    theirs = predict(CovariancePropagationEstimator(), net)
    np.testing.assert_allclose(ours.astype(np.float32), theirs.astype(np.float32), rtol=FLOAT32_RTOL, atol=0)


# ---------------------------------------------------------------------------
# ARC's reference implementation as the oracle (its outputs, committed)
# ---------------------------------------------------------------------------

#: ARC's ``mlp_kprop`` run once, outside the project (torch, float64), on whestbench's MLPs 64 x 4 and
#: 256 x 8 (AUGMENT at K = 3 also 32 x 4 and 128 x 4), seeds 0-2 (seed protocol 3.0): ``scripts/arc_reference_means.py``, its command and the reference
#: commit recorded in the file.
REFERENCE = json.loads((Path(__file__).parent / "fixtures" / "arc_reference_means.json").read_text())
#: The issue's bound: float32 rounding of the per-layer means (the factors are float32, as the grader bills).
REFERENCE_ATOL = 1e-6
#: The reference's (kind, factor) per Whestboard variant name; factored = unfactored for SIMPLE and BASE.
AS_NAMED = {"SIMPLE": "simple", "BASE": "base", "AUGMENT": "augment"}


def named(case: dict) -> str:
    """The spec that computes a reference case: factored AUGMENT at K = 3 is an estimate of its own."""
    variant = AS_NAMED[case["kind"]]
    if case["kind"] == "AUGMENT" and case["factor"] and case["k_max"] == 3:
        variant = "augment-factored"
    return f"cumulant:{case['k_max']}:{variant}"


def whestbench_mlp(width: int, depth: int, seed: int):
    weight_ss, _sample_ss, _ = derive_seed_streams(seed)
    return sample_mlp(width, depth, fnp.random.default_rng(weight_ss))


@functools.cache
def reference_mlp(width: int, depth: int, seed: int):
    return whestbench_mlp(width, depth, seed)


def reference_cases():
    return [pytest.param(case, id=f"{case['width']}x{case['depth']}-s{case['seed']}-K{case['k_max']}-{case['kind']}"
                         f"{'-factored' if case['factor'] else ''}") for case in REFERENCE["cases"]]


def test_the_reference_covers_every_variant_on_the_issues_shapes():
    """Every (K <= 3, kind) the reference has on 64 x 4 and 256 x 8, seeds 0-2, factored and not at K = 3.
    On 256 x 8 the reference's unfactored SIMPLE and BASE at K = 3 ran for seed 0 only (25 and 10 minutes on
    this shared machine; they are the factored ones, which run on every seed and are checked below to be the
    same where both ran). AUGMENT at K = 3, factored and not, on every seed, also on 32 x 4 and 128 x 4."""
    seen = {(c["width"], c["depth"], c["seed"], c["k_max"], c["kind"], c["factor"]) for c in REFERENCE["cases"]}
    for seed in (0, 1, 2):
        for k in (1, 2, 3):
            for kind in AS_NAMED:
                assert (64, 4, seed, k, kind, False) in seen
                assert (64, 4, seed, k, kind, True) in seen or k < 3
                if k < 3:
                    assert (256, 8, seed, k, kind, False) in seen
                else:
                    assert (256, 8, seed, k, kind, True) in seen
                    assert (256, 8, seed, k, kind, False) in seen or seed > 0 and kind != "AUGMENT"
        for width in (32, 128):
            for factor in (False, True):
                assert (width, 4, seed, 3, "AUGMENT", factor) in seen
    assert REFERENCE["reference_commit"].startswith("93d091a")


@pytest.mark.parametrize("case", reference_cases())
def test_each_variant_matches_arcs_per_layer_means(case):
    """The issue's table rerun: every (K, kind, factored) of the reference, per layer, within float32 rounding;
    what is not implemented is refused in words, never run as something else."""
    spec = named(case)
    order, variant = parse_cumulant_spec(spec)
    if (order, variant) not in IMPLEMENTED:
        with pytest.raises(RunError, match="not implemented"):
            resolve_estimator(spec)
        return
    net = reference_mlp(case["width"], case["depth"], case["seed"])
    ours = predict(resolve_estimator(spec).factory(), net)
    reference = np.asarray(case["means"], dtype=np.float64)
    assert ours.shape == reference.shape
    worst = np.abs(ours - reference).max(axis=1)
    assert worst.max() <= REFERENCE_ATOL, (spec, worst)


def test_the_variants_are_different_estimates():
    """The comparison above could not tell the variants apart if they were equal: they are not (by the
    reference's own numbers, far above the tolerance)."""
    by_key = {(c["width"], c["depth"], c["seed"], c["k_max"], c["kind"], c["factor"]): np.asarray(c["means"])
              for c in REFERENCE["cases"]}
    for width, depth in ((64, 4), (256, 8)):
        k3 = {kind: by_key[(width, depth, 0, 3, kind, True)] for kind in ("SIMPLE", "BASE")}
        assert np.abs(k3["SIMPLE"] - k3["BASE"]).max() > 100 * REFERENCE_ATOL
        k1 = {kind: by_key[(width, depth, 0, 1, kind, False)] for kind in AS_NAMED}
        assert np.abs(k1["SIMPLE"] - k1["BASE"]).max() > 100 * REFERENCE_ATOL
        diagonal = predict(CumulantPropagationEstimator(1, "diagonal"), reference_mlp(width, depth, 0))
        assert np.abs(diagonal - k1["SIMPLE"]).max() > 100 * REFERENCE_ATOL  # cumulant:1 is not the paper's SIMPLE
        np.testing.assert_array_equal(k1["AUGMENT"], k1["SIMPLE"])  # the reference's own: same terms at K = 1
        k2 = {kind: by_key[(width, depth, 0, 2, kind, False)] for kind in AS_NAMED}
        assert np.abs(k2["AUGMENT"] - k2["SIMPLE"]).max() > 100 * REFERENCE_ATOL
        for kind in ("SIMPLE", "BASE"):  # the reference's factored and unfactored estimates are one estimate
            if (width, depth, 0, 3, kind, False) in by_key:
                np.testing.assert_allclose(by_key[(width, depth, 0, 3, kind, False)], k3[kind], rtol=0, atol=1e-12)
        # ... but not for AUGMENT at K = 3, which factored drops the diagrams that do not factor: two names
        augment = {factor: by_key[(width, depth, 0, 3, "AUGMENT", factor)] for factor in (False, True)}
        assert np.abs(augment[False] - augment[True]).max() > 100 * REFERENCE_ATOL
        assert np.abs(augment[True] - k3["SIMPLE"]).max() > 100 * REFERENCE_ATOL


# ---------------------------------------------------------------------------
# against Monte Carlo
# ---------------------------------------------------------------------------

#: Every threshold below is a multiple of the reference's noise floor (avg variance / N), so a smaller N only
#: raises them: at 10^6 the closest case (K = 3 at width 16, depth 2) still sits about 140 floors above it.
MC_SAMPLES = 10**6
#: Rows drawn and propagated at a time: 4096 x 16 float64 (512 KiB) stays in cache through every layer,
#: where one 10^6-row pass streams each layer's 128 MB through memory. The stream of normals is the same
#: either way (the generator fills draws in order), so the reference differs only in float64 rounding.
MC_CHUNK_ROWS = 4096


def monte_carlo(weights: list[np.ndarray], seed: int) -> tuple[np.ndarray, float]:
    """Final-layer mean of MC_SAMPLES samples in float64 and the noise floor of its MSE (avg variance / N)."""
    rng = np.random.default_rng(seed)
    total, squares, done = 0.0, 0.0, 0
    while done < MC_SAMPLES:
        x = rng.standard_normal((min(MC_CHUNK_ROWS, MC_SAMPLES - done), weights[0].shape[0]))
        for w in weights:
            x = x @ w
            np.maximum(x, 0.0, out=x)
        total, squares, done = total + x.sum(axis=0), squares + np.einsum("ij,ij->j", x, x), done + len(x)
    mean = total / MC_SAMPLES
    return mean, float(np.mean(squares / MC_SAMPLES - mean**2)) / MC_SAMPLES


@pytest.mark.parametrize("width,depth,seed", [(8, 3, 21), (12, 3, 22), (16, 2, 23)])
def test_higher_orders_approach_monte_carlo(width, depth, seed):
    net = mlp(width, depth, seed)
    weights = [np.asarray(w, dtype=np.float64) for w in net.weights]
    truth, floor = monte_carlo(weights, seed)
    mse = {k: float(np.mean((predict(CumulantPropagationEstimator(k), net)[-1] - truth) ** 2)) for k in (1, 2, 3)}
    for k in (1, 2):
        # each step down is resolvable: larger than ten times what the reference's noise could fake
        assert mse[k] - mse[k + 1] > 10 * floor, (mse, floor)
    assert mse[3] > floor, "an MSE below the reference's noise floor cannot be told from zero"
    simple = float(np.mean((predict(CumulantPropagationEstimator(3, "simple"), net)[-1] - truth) ** 2))
    assert simple < mse[2] - 10 * floor, (simple, mse, floor)


# ---------------------------------------------------------------------------
# FLOPs, budget and refusals
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("spec", CUMULANT_KINDS)
def test_reported_flops_are_the_graders_count(spec):
    """A run's ``flops_used`` is what whestbench's ``evaluate_estimator`` meters for the same estimator
    on the same MLP, and at least flopscope's count of ``predict`` alone (the grader also bills its
    handling of the returned array)."""
    net = mlp(24, 4, 31)
    rulebook = rulebook_for("v2-phase2")
    case = MLPCase(0, net, np.zeros((4, 24), dtype=np.float32), 1.0, 10**6)
    handle = resolve_estimator(spec)
    graded = evaluate_estimator(handle.factory(), contest_data([case], rulebook))
    entry, _ = score_one(handle, case, rulebook)
    assert not entry["failed"], entry.get("failure_reason")
    assert int(entry["flops_used"]) == int(graded["per_mlp"][0]["flops_used"])
    with flops.BudgetContext(flop_budget=10**15, quiet=True) as ctx:
        handle.factory().predict(net, rulebook.flop_budget)
    assert 0 < ctx.flops_used <= int(entry["flops_used"])


@pytest.mark.parametrize("variant", ["base", "simple", "augment", "augment-factored"])
@pytest.mark.parametrize("width,depth", [(32, 5), (64, 8), (8, 3)])
def test_planned_flops_bound_what_is_metered(width, depth, variant):
    """The window is chosen from ``order3_flops`` before anything runs: it must never undercount."""
    if width == 8 and not variant.startswith("augment"):
        pytest.skip("the bound of BASE and SIMPLE is checked from width 32")
    net = mlp(width, depth, 41)
    for window in (0, 1, 2, depth - 1):
        estimator = CumulantPropagationEstimator(3, variant)
        estimator.window_for = lambda *_, window=window: window
        with flops.BudgetContext(flop_budget=10**15, quiet=True) as ctx:
            estimator.predict(net, 10**15)
        planned = order3_flops(width, depth, window, variant)
        assert ctx.flops_used <= planned <= 1.25 * ctx.flops_used, (window, ctx.flops_used, planned)


@pytest.mark.parametrize("variant", ["base", "simple", "augment", "augment-factored"])
def test_the_window_fits_each_rounds_budget(variant):
    for tag in ("v1-warmup", "v1-phase1", "v2-phase2"):
        rnd = get_round(tag)
        width, depth, budget = rnd.width, rnd.depth, rnd.budget
        window = third_order_window(width, depth, budget, variant)
        assert order3_flops(width, depth, window, variant) <= PLAN_SHARE * budget
        if window < depth - 1:  # a longer history would not have fitted, in FLOPs or in memory
            assert (order3_flops(width, depth, window + 1, variant) > PLAN_SHARE * budget
                    or third_order_window(width, depth, None, variant) == window)
    assert third_order_window(64, 8, 10**6, variant) == 0
    if variant == "augment":  # a dense 1024^3 third cumulant (4 GiB in float32) is never held
        assert third_order_window(1024, 16, None, variant) == 0 < third_order_window(256, 32, None, variant)


@pytest.mark.parametrize("spec", ["cumulant:4", "cumulant:4:augment", "cumulant:x", "cumulant:2:augment-factored",
                                  "cumulant:1:nonsense", "cumulant", "cumulant:2:diagonal"])
def test_what_is_not_implemented_is_refused_with_what_to_write(spec):
    with pytest.raises(RunError, match="cumulant|augment|K ="):
        resolve_estimator(spec)


def test_specs_name_one_estimator_each():
    assert resolve_estimator("cumulant:3").label == resolve_estimator("Cumulant:3:base").label == "cumulant:3"
    assert resolve_estimator("cumulant:1:base").label == "cumulant:1:base"
    assert resolve_estimator("cumulant:1:diagonal").label == "cumulant:1"
    assert resolve_estimator("cumulant:3:simple").label == "cumulant:3:simple"
    assert resolve_estimator("Cumulant:3:Augment").label == "cumulant:3:augment"
    assert resolve_estimator("cumulant:3:augment-factored").label == "cumulant:3:augment-factored"
    hashes = {resolve_estimator(kind).code_sha256 for kind in CUMULANT_KINDS}
    assert len(hashes) == len(CUMULANT_KINDS)


@pytest.mark.slow
@pytest.mark.parametrize("tag", ["v1-warmup", "v1-phase1", "v2-phase2"])
def test_the_papers_simple_variant_scores_on_every_round(tag):
    """``cumulant:3:simple`` through the runs core (what the lab, the sweep and ``score`` call) on an MLP of
    each round's embedded data, under the round's whole rulebook: its FLOPs within the budget and the run
    not failed -- unless the core itself says waiting for a CPU on a busy machine caused it, the wall-time
    rules' own verdict -- and its estimate better than covariance propagation's on the same MLP."""
    from whestboard.data import get_dataset
    from whestboard.scoring import RunRequest, execute

    dataset = get_dataset(tag)
    index = dataset.indices[0]
    rulebook = rulebook_for(tag)
    entry = execute(RunRequest(dataset, [index], resolve_estimator("cumulant:3:simple"), rulebook)).report[
        "results"]["per_mlp"][0]
    assert 0 < entry["flops_used"] <= rulebook.flop_budget and not entry["budget_exhausted"]
    if entry.get("failed"):
        assert "score again on a quieter machine" in entry["failure_reason"], entry["failure_reason"]
    truth = np.asarray(dataset.truth(index)[0], dtype=np.float64)[-1]
    net = dataset.mlp(index)
    mse = {spec: float(np.mean((predict(resolve_estimator(spec).factory(), net, rulebook.flop_budget)[-1] - truth)
                               ** 2)) for spec in ("cumulant:3:simple", "cumulant:2")}
    assert mse["cumulant:3:simple"] < mse["cumulant:2"], mse


@pytest.mark.slow
@pytest.mark.parametrize("spec", ["cumulant:3:augment", "cumulant:3:augment-factored"])
def test_augment_at_order_three_scores_on_a_round_through_score(spec, capsys, private_state):
    """``python -m whestboard score --json`` with AUGMENT at K = 3 on v1-warmup's first MLP, under the round's
    whole rulebook, as a participant would run it: scored like any estimator (not failed -- unless the core
    itself says waiting for a CPU on a busy machine caused it), its FLOPs within the budget and within the
    bound of the window the budget buys, and its estimate better than covariance propagation's against the
    shipped reference."""
    import json as json_module

    from whestboard.cli import main
    from whestboard.data import get_dataset

    assert main(["score", "--dataset", "v1-warmup", "--estimator", spec, "--mlps", "0", "--json", "--no-cache"]) == 0
    report = json_module.loads(capsys.readouterr().out)
    entry = report["results"]["per_mlp"][0]
    rnd = get_round("v1-warmup")
    variant = parse_cumulant_spec(spec)[1]
    window = third_order_window(rnd.width, rnd.depth, rnd.budget, variant)
    assert 0 < entry["flops_used"] <= order3_flops(rnd.width, rnd.depth, window, variant) + 10**6 <= rnd.budget
    if entry.get("failed"):
        assert "score again on a quieter machine" in entry["failure_reason"], entry["failure_reason"]
        return
    dataset = get_dataset("v1-warmup")
    truth = np.asarray(dataset.truth(dataset.indices[0])[0], dtype=np.float64)[-1]
    covariance = predict(resolve_estimator("cumulant:2").factory(), dataset.mlp(dataset.indices[0]), rnd.budget)
    assert entry["final_layer_mse"] < float(np.mean((covariance[-1] - truth) ** 2))
