"""The lab's figures plot exactly the report's numbers, each MSE beside the noise floor."""

from __future__ import annotations

import math

import numpy as np
import pytest

from components.figures import lab as figs
from tests.upstream import make_official
from whestboard.data import open_dataset
from whestboard.scoring import RunRequest, execute, layer_comparison, resolve_estimator, rulebook_for
from whestboard.store import reset_engines

pytestmark = pytest.mark.filterwarnings("ignore::whestbench.scoring.ScoringExhaustionWarning")


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    return open_dataset(make_official(tmp_path_factory.mktemp("figs") / "ds", width=16, depth=3, n_samples=2000,
                                      seeds=[31, 32, 33]))


@pytest.fixture(scope="module")
def outcome(dataset):
    return execute(RunRequest(dataset, None, resolve_estimator("cov"), rulebook_for(None, 10**7)))


def test_budget_gauge_marks_b_and_the_charging_floor(outcome):
    fig = figs.budget_gauge(outcome.report)
    per_mlp = outcome.report["results"]["per_mlp"]
    assert list(fig.data[0].x) == [e["effective_compute"] for e in per_mlp]
    assert sorted(shape.x0 for shape in fig.layout.shapes) == [10**6, 10**7]
    labels = {a.text: a.x for a in fig.layout.annotations}
    assert labels["B"] == pytest.approx(7.0) and labels["10% of B (charging floor)"] == pytest.approx(6.0)


def test_flop_breakdown_adds_up_to_flopscopes_total(outcome):
    fig = figs.flop_breakdown(outcome.report, top=3)
    total = outcome.report["results"]["breakdowns"]["estimator"]["flops_used"]
    assert sum(fig.data[0].x) == total == sum(e["flops_used"] for e in outcome.report["results"]["per_mlp"])
    assert len(fig.data[0].y) == 4 and "other operations" in fig.data[0].y[0]


def test_per_layer_plot_shows_the_reports_mse_the_floor_and_monte_carlo(outcome):
    fig = figs.per_layer_mse(outcome.report)
    traces = {t.name: t for t in fig.data}
    assert list(traces["mean over MLPs"].y) == outcome.report["results"]["per_layer_mse"]
    assert set(traces["reference noise floor"].y) == {outcome.report["noise"]["noise_floor"]}
    mc = np.mean([e["mc_mse_at_same_flops"] for e in outcome.report["results"]["per_mlp"]])
    assert set(traces["Monte Carlo, same FLOPs"].y) == {mc}
    assert fig.layout.yaxis.type == "log"


def test_versus_sampling_compares_to_mc_at_b(outcome):
    fig = figs.versus_sampling(outcome.report)
    bars = dict(zip(fig.data[0].y, fig.data[0].x, strict=True))
    assert bars["MC@B (all of B on sampling)"] == outcome.report["mc_reference"]["mc_at_budget"]
    assert bars["final-layer MSE"] == outcome.report["results"]["final_layer_mse"]
    assert bars["reference noise floor"] == outcome.report["noise"]["noise_floor"]


def test_layer_figures_show_prediction_minus_truth(outcome, dataset):
    comparison = layer_comparison(outcome.report, outcome.predictions, dataset, 1)
    heat = figs.signed_error_heatmap(comparison)
    for row, index in enumerate(comparison["indices"]):
        truth, _ = dataset.truth(index)
        expected = outcome.predictions[index][1].astype(np.float64) - truth[1].astype(np.float64)
        np.testing.assert_array_equal(np.asarray(heat.data[0].z[row]), expected)
    scatter = figs.predicted_vs_true(comparison)
    np.testing.assert_array_equal(np.asarray(scatter.data[0].y), outcome.predictions[comparison["indices"][0]][1])


def test_tables_put_the_floor_beside_each_mse_and_flag_failures(dataset, tmp_path, monkeypatch):
    monkeypatch.setenv("WHESTBOARD_STATE_DIR", str(tmp_path))
    reset_engines()
    failing = execute(RunRequest(dataset, "0", resolve_estimator("cov"), rulebook_for(None, 1000)))
    table = figs.per_mlp_table(failing.report)
    row = table.children[1].children[0]
    assert "table-danger" in row.className
    assert "over the FLOP budget" in row.children[-1].children
    alert = figs.failures_alert(failing.report)
    assert alert is not None and "all-zero prediction" in str(alert)
    live = figs.live_rows(failing.report["results"]["per_mlp"])
    assert live[0]["noise_floor"] == failing.report["results"]["per_mlp"][0]["noise_floor"]
    assert figs.live_table([]) is None
    reset_engines()


def test_below_floor_badge_appears_only_when_flagged(outcome):
    entry = dict(outcome.report["results"]["per_mlp"][0])
    entry["below_noise_floor"] = True
    assert figs.floor_badge(entry) is not None
    entry["below_noise_floor"] = False
    assert figs.floor_badge(entry) is None
    assert math.isfinite(outcome.report["noise"]["noise_floor"])


def test_the_figures_draw_on_the_default_template_without_naming_one(outcome, foreign_template):
    for fig in (figs.budget_gauge(outcome.report), figs.per_layer_mse(outcome.report)):
        assert fig.layout.template.layout.paper_bgcolor == foreign_template


def test_a_run_with_failed_mlps_is_drawn_as_failed_against_sampling():
    """Covariance propagation at a budget below its cost (v1-warmup, B = 6.8e8 < 1.08e9 FLOPs) fails on every
    MLP: the lab's figure against sampling names the failure and draws the run's bars in the failure colour."""
    from components.figures.style import FAILED_COLOR
    from whestboard.data import get_dataset
    from whestboard.scoring import RunRequest, execute, resolve_estimator, rulebook_for

    report = execute(RunRequest(get_dataset("v1-warmup"), "0:2", resolve_estimator("cov"),
                                rulebook_for("v1-warmup", 680_000_000))).report
    assert all(e["budget_exhausted"] for e in report["results"]["per_mlp"])
    fig = figs.versus_sampling(report)
    assert fig.layout.title.text == "Against sampling · 2 of 2 MLPs failed: FLOP budget (their MSE is the grader's fallback)"
    colours = dict(zip(fig.data[0].y, fig.data[0].marker.color, strict=True))
    assert colours["final-layer MSE"] == colours["score (MSE x multiplier)"] == FAILED_COLOR
    assert colours["MC@B (all of B on sampling)"] != FAILED_COLOR
