"""The convergence figure and readout, built from a real (tiny) band, baselines and run summaries."""

from __future__ import annotations

import math

import numpy as np
import pytest
from whestbench.budget import mc_flops_per_sample

from components.figures import convergence as figs
from whestboard.band import RunPoint, band_frame, compute_band, compute_baselines, convergence_view, load_band
from whestboard.data import bake, open_dataset, plan_from_args

WIDTH, DEPTH = 32, 2
PER_SAMPLE = mc_flops_per_sample(WIDTH, DEPTH, dtype_aware_billing=True)
BUDGET = PER_SAMPLE * 10_000


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    path = tmp_path_factory.mktemp("figs") / "ds"
    bake(path, plan_from_args(round_tag=None, width=WIDTH, depth=DEPTH, n_mlps=None, n_samples=8192,
                              seeds=[21, 22, 23, 24, 25, 26]), explicit_seeds=True, show_progress=False)
    ds = open_dataset(path)
    compute_band(ds, budget=BUDGET, show_progress=False)
    compute_baselines(ds, budget=BUDGET)
    return ds


def _run(run_id: str, flops: float, mse: float, *, team: str | None = None, label: str = "mean",
         indices=(0, 1, 2), dataset_key: str = "ds") -> dict:
    """A run summary shaped like ``whestboard.scoring._run_records.list_runs`` returns it."""
    return {"run_id": run_id, "created_at": "2026-01-01T00:00:00+00:00", "dataset_key": dataset_key,
            "round_tag": None, "estimator_label": label, "estimator_kind": "file", "code_sha256": "0" * 64,
            "team": team, "source": "upload", "budget": BUDGET, "mlp_indices": list(indices),
            "n_mlps": len(indices), "mean_flops_used": flops * 0.9, "mean_effective_compute": flops,
            "final_layer_mse": mse, "all_layers_mse": mse * 2, "adjusted_score": mse * 0.5, "mean_multiplier": 0.5,
            "n_failed": 0, "per_layer_mse": [mse * 3, mse], "noise_floor": None, "whestbench_version": "0.16.2",
            "flopscope_version": "0.12.4"}


@pytest.fixture(scope="module")
def view(dataset):
    runs = [
        _run("inside", BUDGET / 2, 3e-4, team="alpha"),
        _run("hot", BUDGET / 5, 1e-4, team="beta", label="clever.py"),
        _run("above", BUDGET, 50.0, team="beta", label="clever.py"),
        _run("below", BUDGET / 3, 1e-30),
        _run("right", BUDGET * 1e6, 1e-4),
        _run("elsewhere", BUDGET / 2, 2e-4, dataset_key="not-served"),
    ]
    return convergence_view(dataset, runs=runs)


def _trace(fig, prefix: str):
    return next(t for t in fig.data if t.name.startswith(prefix))


def _shape(fig, name: str):
    return next(s for s in fig.layout.shapes if s.name == name)


def test_markers_sit_at_the_budget_its_tenth_and_the_noise_floor(dataset, view):
    fig = figs.convergence_figure(view)
    assert _shape(fig, "budget").x0 == _shape(fig, "budget").x1 == BUDGET
    assert _shape(fig, "charging-floor").x0 == 0.1 * BUDGET
    floor = np.mean(dataset.summary()["avg_variance"]) / dataset.info.n_samples
    assert _shape(fig, "noise-floor").y0 == pytest.approx(floor, rel=1e-12)
    assert _shape(fig, "below-noise-floor").y1 == pytest.approx(floor, rel=1e-12)


def test_analytic_line_is_sigma2_over_n_solid_where_measured_dashed_beyond(dataset, view):
    fig = figs.convergence_figure(view)
    sigma2 = float(np.mean(dataset.summary()["avg_variance"]))
    band = load_band(dataset)
    measured = _trace(fig, "mean σ²/N (avg_variance of the MLPs), measured range")
    assert list(measured.x) == [band.mlps[0].flops[0], band.mlps[0].flops[-1]]
    np.testing.assert_allclose(measured.y, sigma2 * PER_SAMPLE / np.asarray(measured.x), rtol=1e-12)
    extrapolated = _trace(fig, "mean σ²/N, extrapolated")
    assert extrapolated.line.dash == "dash" and measured.line.dash is None
    xs = np.asarray(extrapolated.x, dtype=float)
    assert np.nanmin(xs) < 10 ** fig.layout.xaxis.range[0] and np.nanmax(xs) > 10 ** fig.layout.xaxis.range[1]
    finite = np.isfinite(xs)
    np.testing.assert_allclose(np.asarray(extrapolated.y, dtype=float)[finite], sigma2 * PER_SAMPLE / xs[finite])


def test_band_traces_are_the_band_tables_percentiles(dataset, view):
    fig = figs.convergence_figure(view)
    table = load_band(dataset).table("final")
    median = _trace(fig, "median of 6 MLPs")
    np.testing.assert_array_equal(median.x, table["flops"].to_numpy(float))
    np.testing.assert_array_equal(median.y, np.where(table["p50"] > 0, table["p50"], np.nan))
    lower = next(t for t in fig.data if t.name == "10–90% of MLPs")
    assert lower.fill == "tonexty"
    np.testing.assert_array_equal(lower.y, np.where(table["p10"] > 0, table["p10"], np.nan))
    assert [c[1] for c in median.customdata] == table["n"].tolist()


def test_runs_inside_highlighted_and_pinned_to_the_edges(view):
    fig = figs.convergence_figure(view, highlight="team:beta")
    inside = _trace(fig, "recorded runs")
    assert sorted(c[1] for c in inside.customdata) == ["elsewhere", "inside"]
    hot = _trace(fig, "highlighted: team:beta")
    assert [c[1] for c in hot.customdata] == ["hot"] and hot.x[0] == BUDGET / 5 and hot.y[0] == 1e-4
    edge = _trace(fig, "runs outside the frame")
    symbols = dict(zip([c[1] for c in edge.customdata], edge.marker.symbol, strict=True))
    assert symbols == {"above": "triangle-up", "below": "triangle-down", "right": "triangle-right"}
    x0, x1 = fig.layout.xaxis.range
    y0, y1 = fig.layout.yaxis.range
    for x, y in zip(edge.x, edge.y, strict=True):
        assert x0 < math.log10(x) < x1 and y0 < math.log10(y) < y1
    above = next(i for i, c in enumerate(edge.customdata) if c[1] == "above")
    assert edge.marker.color[above] == figs.HIGHLIGHT  # a highlighted run stays highlighted at the edge
    assert "outside the frame (top)" in edge.customdata[above][-1]


def test_baselines_are_labelled_points_with_error_bars_across_mlps(view):
    fig = figs.convergence_figure(view)
    labels = {a.name: a for a in fig.layout.annotations if (a.name or "").startswith("label-baseline-")}
    for b in view.baselines:
        trace = _trace(fig, b.label)
        stats = b.mse["final"]
        assert trace.mode == "markers" and trace.y[0] == stats["mean"] and trace.x[0] == b.flops
        [label] = [a for a in labels.values() if b.kind in a.name.removeprefix("label-baseline-").split("+")]
        named = b.label.split(" (= ")[0]  # a group's label drops "(= mean propagation)": the group says it
        assert named in label.text and label.showarrow and label.ay != 0  # a leader line from above or below
        assert trace.error_y.array[0] == pytest.approx(stats["p90"] - stats["mean"])
        assert trace.error_y.arrayminus[0] == pytest.approx(stats["mean"] - stats["p10"])


def test_readout_of_a_run_uses_its_own_mlps_variance(dataset, view):
    summary = dataset.summary().set_index("index")
    sigma2 = float(summary.loc[[0, 1, 2], "avg_variance"].mean())
    expected = sigma2 * PER_SAMPLE / (BUDGET / 5) / 1e-4
    cmp = view.compare(BUDGET / 5, 1e-4, "final", sigma2=view.run("hot").sigma2["final"],
                       noise_floor=view.run("hot").noise_floor["final"])
    assert cmp.times_better == pytest.approx(expected, rel=1e-12)
    panel = figs.readout_panel(view, "final", ["run", "hot"])
    text = str(panel)
    assert f"{expected:.3g}x better than sampling at equal FLOPs" in text
    assert "its own MLPs" in text
    assert "not served" in view.run("elsewhere").sigma2_basis
    assert "1x by definition" in str(figs.readout_panel(view, "final", _trace(
        figs.convergence_figure(view), "median").customdata[3]))
    assert "Click a run" in str(figs.readout_panel(view, "final", None))


def test_all_layer_view_uses_all_layer_band_variance_and_values(dataset, view):
    fig = figs.convergence_figure(view, "all")
    band = load_band(dataset)
    assert fig.layout.yaxis.title.text.startswith("all-layer")
    measured = _trace(fig, "mean σ²/N (layer-averaged variance of the MLPs), measured range")
    np.testing.assert_allclose(measured.y[0] * measured.x[0] / PER_SAMPLE, band.mean_sigma2("all"), rtol=1e-12)
    inside = _trace(fig, "recorded runs")
    assert {c[1]: c[5] for c in inside.customdata}["inside"] == 6e-4  # the all-layer MSE of the run
    assert _shape(fig, "noise-floor").y0 == pytest.approx(band.mean_sigma2("all") / dataset.info.n_samples)


def test_without_a_band_only_the_extrapolated_line_is_drawn_and_the_page_says_why(tmp_path):
    path = tmp_path / "bare"
    bake(path, plan_from_args(round_tag="v1-warmup", width=None, depth=None, n_mlps=None, n_samples=64,
                              seeds=[3]), explicit_seeds=True, show_progress=False)
    view = convergence_view(open_dataset(path), runs=[])
    fig = figs.convergence_figure(view)
    names = [t.name for t in fig.data]
    assert names == ["mean σ²/N (avg_variance of the MLPs), no band drawn"]
    assert "No Monte Carlo band" in view.notes[0]
    assert _shape(fig, "budget").x0 == 68_000_000_000
    assert figs.convergence_figure(view, "all").data == ()  # no all-layer variance without a band


def test_highlight_matching():
    run = RunPoint("r", "Clever.py", "file", "Beta", "upload", "ds", "", 1.0, 1.0, {"final": 1.0, "all": 1.0},
                   1.0, 1.0, 1, 0, {"final": 1.0, "all": 1.0}, {"final": 0.0, "all": 0.0})
    assert run.matches("team:beta") and run.matches("estimator:clever.py") and run.matches("beta")
    assert not run.matches("team:clever.py") and not run.matches(None) and not run.matches("estimator:beta")


def test_band_frame_for_other_pages_is_the_rounds_band_table():
    from whestboard.data import datasets_for_round

    for tag in ("v1-warmup", "v1-phase1", "v2-phase2"):
        frame = band_frame(tag)
        bands = [load_band(ds) for ds in datasets_for_round(tag)]
        if frame is None:
            assert not any(b is not None and b.mlps for b in bands)
        else:
            assert {"flops", "p10", "p25", "p50", "p75", "p90", "mean"} <= set(frame.columns)


def test_zoom_moves_the_frame_and_what_counts_as_outside(view):
    zoomed = figs.frame_for(view, "final", {"metric": "final", "x": [5.0, 6.0]})
    assert zoomed.x == (5.0, 6.0) and zoomed.y == figs.default_frame(view, "final").y
    assert figs.frame_for(view, "all", {"metric": "final", "x": [5.0, 6.0]}) == figs.default_frame(view, "all")
    fig = figs.convergence_figure(view, visible=zoomed)
    assert list(fig.layout.xaxis.range) == list(figs.default_frame(view, "final").x)  # double-click target
    edge = _trace(fig, "runs outside the frame")
    assert len(edge.customdata) == len(view.runs)  # every run lies right of 10^6 FLOPs
    assert set(edge.marker.symbol) <= {"triangle-right", "triangle-up", "triangle-down"}


def test_ratio_wording():
    assert figs.better_or_worse(3.2) == "3.2x better"
    assert figs.better_or_worse(0.5) == "2x worse"
    assert figs.better_or_worse(1.0) == "1x better"


@pytest.mark.parametrize("metric", ["final", "all"])
def test_cached_static_part_plus_run_traces_is_the_whole_figure(view, metric):
    """What the page sends (a cached static figure and fresh run dots) equals the figure built in one go."""
    import json

    import plotly.io as pio

    visible = figs.Frame(x=(8.0, 10.0), y=(-6.0, -2.0))
    whole = figs.convergence_figure(view, metric, highlight="team:beta", visible=visible)
    parts = figs.with_runs(figs.static_figure(view, metric, visible=visible).to_plotly_json(),
                           figs.run_traces(view, metric, "team:beta", visible))
    assert json.loads(pio.to_json(parts, validate=False)) == json.loads(pio.to_json(whole))
    assert [t["name"] for t in parts["data"]][-1].startswith("runs outside the frame")


def test_the_figure_draws_on_the_default_template_without_naming_one(view, foreign_template):
    fig = figs.convergence_figure(view, "final", highlight=None)
    assert fig.layout.template.layout.paper_bgcolor == foreign_template


def test_a_baseline_or_run_with_failed_mlps_is_drawn_as_failed_and_compared_with_nothing(tmp_path, private_state):
    """Covariance propagation under a budget below its cost fails on every MLP (flopscope stops it): as a
    baseline and as a recorded run it is a cross with its own legend entry naming what failed, written beside
    it, and its readout says so instead of "x worse than sampling"."""
    from whestboard.scoring import RunRequest, list_runs, resolve_estimator, rulebook_for, run_and_record

    path = tmp_path / "ds"
    bake(path, plan_from_args(round_tag=None, width=WIDTH, depth=DEPTH, n_mlps=None, n_samples=8192,
                              seeds=[27, 28, 29]), explicit_seeds=True, show_progress=False)
    ds = open_dataset(path)
    small = PER_SAMPLE * 20  # below covariance propagation's cost on 32 x 2, above mean propagation's
    compute_band(ds, budget=small, show_progress=False)
    compute_baselines(ds, kinds=("mean", "cov"), budget=small)
    run_and_record(RunRequest(ds, "0:2", resolve_estimator("cov"), rulebook_for(None, small)))
    view = convergence_view(ds, runs=list_runs(dataset_key=ds.info.key))
    cov = view.baseline("cov")
    assert cov.n_failed == 3 and cov.failures == "3 of 3 MLPs failed: FLOP budget"
    assert view.baseline("mean").failures is None and view.runs[0].failures == "2 of 2 MLPs failed: FLOP budget"

    fig = figs.convergence_figure(view, "final")
    drawn = next(t for t in fig.data if (t.meta or {}).get("baseline") == "cov")
    assert drawn.meta["failed"] and drawn.name == f"{cov.label}: failed ({cov.failures}), not a result"
    assert drawn.marker.symbol == "x-thin-open"
    label = next(a for a in fig.layout.annotations if a.name == "label-baseline-cov")  # placed apart from others
    assert label.text == f"{cov.label}: FAILED, {cov.failures}"
    ok = next(t for t in fig.data if (t.meta or {}).get("baseline") == "mean")
    assert not ok.meta["failed"] and ok.marker.symbol == "diamond"
    runs = [t for t in fig.data if (t.meta or {}).get("failed_runs")]
    assert len(runs) == 1 and runs[0].name.startswith("runs with failed MLPs")
    assert list(runs[0].text) == ["2 of 2 MLPs failed: FLOP budget"]
    assert not any(t.name == "recorded runs (1)" for t in fig.data)  # never among the ordinary dots

    said = str(figs.readout_panel(view, "final", ["baseline", "cov"]))
    assert "Failed: 3 of 3 MLPs failed: FLOP budget" in said and "than sampling" not in said
    said = str(figs.readout_panel(view, "final", ["run", view.runs[0].run_id]))
    assert "Failed: 2 of 2 MLPs failed: FLOP budget" in said and "than sampling" not in said
    assert "than sampling" in str(figs.readout_panel(view, "final", ["baseline", "mean"]))
