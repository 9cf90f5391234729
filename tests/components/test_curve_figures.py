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
    curve_requests,
    fixed_cost,
    resolve_estimator,
    run_curve,
    sampling_crossing,
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
    points = run_curve(curve_requests(ds, "", resolve_estimator(spec), "v2-phase2", budgets)).summaries()
    return {"label": spec, "points": points, "crossing": sampling_crossing(points), "fixed_cost": fixed_cost(points)}


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


def test_a_resolved_crossing_is_marked_where_the_curve_passes_sampling(dataset, mc_curve):
    """Covariance propagation below its own cost fails (the zero prediction, far above sampling); from the
    budget that pays for it, it is far below: one resolved crossing, between those two points."""
    view = convergence_view(dataset)
    cost = curve_of(dataset, "cov", [PER_SAMPLE * 10_000])["points"][0]["flops_used"]["mean"]
    cov = curve_of(dataset, "cov", [int(cost / 3), int(cost / 2), int(cost) + 1, int(cost * 3)])
    crossing = cov["crossing"]
    assert crossing is not None and crossing["better_after"]
    f = [p["flops_used"]["mean"] for p in cov["points"]]
    assert f[1] < crossing["flops"] < f[2]
    star = next(t for t in figs.curve_figure(view, [cov]).data if t.name == "cov crosses sampling")
    assert list(star.x) == [crossing["flops"]] and list(star.y) == [crossing["mse"]]
    assert mc_curve["crossing"] is None  # sampling does not cross itself: its noise stays inside its intervals


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
