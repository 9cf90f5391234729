"""Budget-curve figures from real curves (scored runs on a tiny baked dataset with its band), in every view."""

from __future__ import annotations

import copy

import numpy as np
import pytest
from whestbench.budget import mc_flops_per_sample

from components.figures import compare as compare_figs
from components.figures import convergence as figs
from tests.conftest import state_built_once
from whestboard.band import compute_band, convergence_view
from whestboard.compare import paired_curves
from whestboard.data import bake, open_dataset, plan_from_args
from whestboard.scoring import (
    curve_data,
    curve_requests,
    resolve_estimator,
    run_curve,
    stored_reports,
)

WIDTH, DEPTH = 32, 2
PER_SAMPLE = mc_flops_per_sample(WIDTH, DEPTH, dtype_aware_billing=True)
pytestmark = pytest.mark.usefixtures("private_state")


@pytest.fixture(scope="module")
def baked_folder(tmp_path_factory):
    """The dataset and its band (written beside it), baked once: the tests only read them, and each
    records its runs in a state folder of its own."""
    path = tmp_path_factory.mktemp("curve") / "ds"
    bake(path, plan_from_args(round_tag=None, width=WIDTH, depth=DEPTH, n_mlps=None, n_samples=8192,
                              seeds=[31, 32, 33, 34, 35, 36]), explicit_seeds=True, show_progress=False)
    compute_band(open_dataset(path), budget=PER_SAMPLE * 10_000, show_progress=False)
    return path


@pytest.fixture()
def dataset(baked_folder):
    """The baked dataset, opened afresh for each test."""
    return open_dataset(baked_folder)


def curve_of(ds, spec: str, budgets: list[int]) -> dict:
    """The curve as every page draws it: ``scoring.curve_data`` of the points scored."""
    return curve_data(spec, run_curve(curve_requests(ds, "", resolve_estimator(spec), "v2-phase2", budgets)).summaries())


MC_BUDGETS = [PER_SAMPLE * n for n in (50, 500, 5000)]


@pytest.fixture(scope="module")
def scored_mc_curve(baked_folder, tmp_path_factory):
    """Sampling's curve at ``MC_BUDGETS``, scored once in a state folder of its own, for the tests that
    only draw or inspect it (the paired-difference test scores its own, into its own store)."""
    _, curve = state_built_once(tmp_path_factory, "mc-state",
                                lambda: curve_of(open_dataset(baked_folder), "mc:1B", MC_BUDGETS))
    return curve


@pytest.fixture()
def mc_curve(scored_mc_curve) -> dict:
    """A copy of the scored sampling curve, so no test sees what another did to it."""
    return copy.deepcopy(scored_mc_curve)


def _named(fig, label: str):
    return next(t for t in fig.data if (t.meta or {}).get("curve") == label)


def test_every_view_draws_the_points_summaries_and_the_reference(dataset, mc_curve):
    view = convergence_view(dataset)
    budgets, mc = MC_BUDGETS, mc_curve
    for y_axis, stat in (("mse", "final_layer_mse"), ("score", "score"), ("var", "mse_over_variance")):
        for x_axis in ("flops", "ratio"):
            fig = figs.curve_figure(view, [mc], x_axis=x_axis, y_axis=y_axis)
            trace = _named(fig, "mc:1B")
            assert list(trace.y) == [p[stat]["mean"] for p in mc["points"]]
            flops = [p["flops_used"]["mean"] for p in mc["points"]]
            assert list(trace.x) == (flops if x_axis == "flops" else [f / b for f, b in zip(flops, budgets, strict=True)])
            floor = next(s for s in fig.layout.shapes if s.name == "noise-floor").y0
            expected = {"mse": view.noise_floor["final"], "score": 0.1 * view.noise_floor["final"],
                        "var": 1.0 / view.reference_samples}[y_axis]
            assert floor == pytest.approx(expected, rel=1e-12)
            lo, hi = fig.layout.yaxis.range
            assert 10 ** lo <= min(trace.y) and max(trace.y) <= 10 ** hi
    names = [t.name for t in figs.curve_figure(view, [mc], y_axis="var").data]
    assert "sampling: MSE/Var = 1/m" in names


def test_a_fixed_cost_estimator_is_a_vertical_line_that_says_so(dataset):
    view = convergence_view(dataset)
    mean = curve_of(dataset, "mean", [PER_SAMPLE * n for n in (50, 500, 5000)])
    assert mean["fixed_cost"]
    fig = figs.curve_figure(view, [mean])
    trace = _named(fig, "mean")
    assert len(set(trace.x)) == 1 and figs.FIXED_NOTE in trace.name
    assert any(figs.FIXED_NOTE in (t.text or ()) for t in fig.data if t.mode == "text")


def test_a_failed_point_is_drawn_as_failed_and_no_crossing_is_read_from_it(dataset, mc_curve):
    """Covariance propagation below its own cost fails on every MLP (the zero prediction, far above sampling);
    from the budget that pays for it, it is far below. The failed points are a cross of their own, named, never
    joined to the line, and no crossing is interpolated from them (the points that carry claims are all below)."""
    view = convergence_view(dataset)
    cost = curve_of(dataset, "cov", [PER_SAMPLE * 10_000])["points"][0]["flops_used"]["mean"]
    budgets = [int(cost / 3), int(cost / 2), int(cost) + 1, int(cost * 3)]
    cov = curve_of(dataset, "cov", budgets)
    assert [p["failed"] for p in cov["points"]] == [True, True, False, False]
    assert cov["crossing"] is None and cov["failed_points"] == budgets[:2] and cov["claims_from"] == 2
    assert cov["fixed_cost"]  # the two points that ran spent identical FLOPs: the failed ones were stopped early
    fig = figs.curve_figure(view, [cov])
    line = _named(fig, "cov")
    assert list(line.x) == [p["flops_used"]["mean"] for p in cov["points"][2:]]
    failed = next(t for t in fig.data if (t.meta or {}).get("failed_curve") == "cov")
    assert failed.name.startswith("cov: failed points") and failed.marker.symbol == figs.FAILED_MARKER["symbol"]
    assert list(failed.text) == ["6 of 6 MLPs failed: FLOP budget"] * 2
    assert list(failed.y) == [p["final_layer_mse"]["mean"] for p in cov["points"][:2]]
    assert not any(t.name == "cov crosses sampling" for t in fig.data)
    notes = [str(li.children) for li in figs.curve_notes([cov])]
    assert sum("Drawn as a failed point" in n for n in notes) == 2
    assert any("does not cross sampling" in n for n in notes)
    assert mc_curve["crossing"] is None  # sampling does not cross itself: its noise stays inside its intervals


class _WastefulMean:
    """Mean propagation that also burns half of its budget: its error stays put while its cost grows, so
    sampling at the same FLOPs passes it (a crossing between two points that both ran)."""

    def predict(self, mlp, budget):
        import flopscope
        import flopscope.numpy as fnp
        from whestbench.estimators import MeanPropagationEstimator

        out = MeanPropagationEstimator().predict(mlp, budget)
        x = fnp.ones(int(min(10**7, max(16, budget // 8))), dtype=fnp.float32)
        while flopscope.current_budget().flops_used < budget // 2:
            x = fnp.add(x, x)
        return out


def test_a_crossing_between_points_that_ran_is_marked_where_the_curve_passes_sampling(dataset):
    from whestboard.scoring import EstimatorHandle

    view = convergence_view(dataset)
    handle = EstimatorHandle(label="wasteful-mean", kind="test", code_sha256="1" * 64, factory=_WastefulMean)
    budgets = [PER_SAMPLE * n for n in (20, 200, 2000, 20000)]
    curve = curve_data("wasteful", run_curve(curve_requests(dataset, "", handle, "v2-phase2", budgets)).summaries())
    crossing = curve["crossing"]
    assert curve["claims_from"] == 4 and crossing is not None and not crossing["better_after"]
    f = [p["flops_used"]["mean"] for p in curve["points"]]
    sampling = [p["mean_avg_variance"] * p["mc_flops_per_sample"] / p["flops_used"]["mean"] for p in curve["points"]]
    side = [p["final_layer_mse"]["high"] < s for p, s in zip(curve["points"], sampling, strict=True)]
    k = side.index(False)  # the first point sampling beats: the crossing lies before it
    assert side[:k] == [True] * k and f[k - 1] < crossing["flops"] < f[k]
    star = next(t for t in figs.curve_figure(view, [curve]).data if t.name == "wasteful crosses sampling")
    assert list(star.x) == [crossing["flops"]] and list(star.y) == [crossing["mse"]]


def test_the_paired_difference_per_budget_is_a_minus_b_mlp_by_mlp(dataset):
    budgets = [PER_SAMPLE * n for n in (50, 500, 5000)]
    a = stored_reports(curve_requests(dataset, "", resolve_estimator("mc:1B"), "v2-phase2", budgets))
    assert a == {}
    curve_of(dataset, "mc:1B", budgets)
    curve_of(dataset, "mean", budgets[:2])
    a, b = (stored_reports(curve_requests(dataset, "", resolve_estimator(s), "v2-phase2", budgets))
            for s in ("mc:1B", "mean"))
    rows = paired_curves(a, b, metric="mse")
    assert [r["budget"] for r in rows] == budgets and rows[-1]["missing"] == "B"
    fig = compare_figs.curve_difference_figure(rows, "mse")
    for r, y in zip(rows[:2], fig.data[0].y, strict=True):
        per_a = {e["mlp_index"]: e["final_layer_mse"] for e in a[r["budget"]]["results"]["per_mlp"]}
        per_b = {e["mlp_index"]: e["final_layer_mse"] for e in b[r["budget"]]["results"]["per_mlp"]}
        assert y == pytest.approx(np.mean([per_a[m] - per_b[m] for m in per_a]), rel=1e-12)
    assert any("no B point" in (n.text or "") for n in fig.layout.annotations)
