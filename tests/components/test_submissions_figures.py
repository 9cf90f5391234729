"""The leaderboard's figure builders: frame, edge markers, failures apart, highlight last, MC curve."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import numpy as np
import pandas as pd

from components.figures import leaderboard as figs
from whestboard.rules import get_round

RND = get_round("v1-warmup")


def _points(n: int = 200, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    flops = RND.budget * 10 ** rng.uniform(-3, 0, n)
    score = 1e-5 * 10 ** rng.normal(0, 0.3, n)
    df = pd.DataFrame({
        "submission_id": [f"s{i}" for i in range(n)], "team": [f"t{i % 7}" for i in range(n)],
        "round": "v1-warmup", "status": "graded",
        "submitted_at": [datetime(2026, 5, 1, tzinfo=UTC) + timedelta(hours=i) for i in range(n)],
        "mean_flops_used": flops, "mean_effective_compute": flops * 1.1, "adjusted_score": score,
        "final_layer_mse": score * 10, "mean_multiplier": 0.1, "n_failed_mlps": 0,
    })
    df.loc[3, "n_failed_mlps"] = 2
    df.loc[0, "adjusted_score"] = 1e3  # far above the field
    df.loc[1, "mean_flops_used"] = 0.0  # a 0-FLOP fallback: cannot sit on a log axis
    df.loc[2, "status"] = "failed"
    df["vs_mc"] = RND.mc_at_bm(0.2) / df["adjusted_score"]
    df["mc_at_b"], df["mc_basis"] = RND.mc_at_bm(0.2), "own MLPs"
    return df


REF = figs.McReference(budget=RND.budget, mc_flops_per_sample=RND.mc_flops_per_sample, mean_avg_variance=0.2,
                       noise_floor=0.2 / 2**20, dataset_key="v1-warmup")


def _trace(fig, name):
    return [t for t in fig.data if t.name == name]


def test_scatter_pins_outliers_to_the_edge_and_keeps_failures_apart():
    points = _points()
    fig = figs.scatter_figure(points, REF, round_tag="v1-warmup", team="t3")
    assert all(t.type == "scattergl" for t in fig.data if t.mode == "markers")
    edge_names = [t.name for t in fig.data if (t.name or "").startswith("outside the frame")]
    pinned = sum(len(t.x) for t in fig.data if t.name in edge_names)
    inside = sum(len(_trace(fig, n)[0].x) for n in ("submissions", "with failed MLPs"))
    assert pinned + inside == (points["status"] == "graded").sum()  # every graded dot shown exactly once
    assert pinned >= 2  # the 1e3 score and the 0-FLOP one
    counts = sum(int(a.text.split()[0].replace(",", "")) for a in fig.layout.annotations if "outside" in a.text)
    assert counts == pinned
    assert len(_trace(fig, "with failed MLPs")[0].x) == 1
    assert fig.data[-1].name == "team: t3" and len(fig.data[-1].x) == (points["team"] == "t3").sum()
    assert "failed submissions not plotted" in fig.layout.title.text


def test_analytic_monte_carlo_line_is_sigma2_over_n():
    fig = figs.scatter_figure(_points(), REF, round_tag="v1-warmup", y_metric="mse")
    line = [t for t in fig.data if (t.name or "").startswith("Monte Carlo σ²/N")][0]
    x, y = np.asarray(line.x), np.asarray(line.y)
    expected = 0.2 / (x / RND.mc_flops_per_sample)
    np.testing.assert_allclose(y, expected, rtol=1e-4)  # the figure rounds to 5 significant digits
    score = figs.mc_curve(REF, np.array([RND.budget * 0.01, RND.budget]), "score")
    mse = figs.mc_curve(REF, np.array([RND.budget * 0.01, RND.budget]), "mse")
    np.testing.assert_allclose(score, mse * np.array([0.1, 1.0]))


def test_hover_carries_team_id_time_score_mse_multiplier_failures():
    points = _points(5)
    row = figs.hover_columns(points.iloc[[3]])[0]
    assert list(row[:2]) == ["t3", "s3"] and row[2].endswith("UTC")
    assert row[3] == points.loc[3, "adjusted_score"] and row[4] == points.loc[3, "final_layer_mse"]
    assert row[5] == 0.1 and row[6] == 2


def test_timeline_shades_each_round_and_puts_the_highlight_last():
    points = pd.concat([_points(30), _points(20, seed=1).assign(round="v1-phase1", team="other")])
    points["submitted_at"] = pd.to_datetime(points["submitted_at"], utc=True)
    points.loc[points["round"] == "v1-phase1", "submitted_at"] += pd.Timedelta(days=10)
    fig = figs.timeline_figure(points, team="other", round_order=["v1-warmup", "v1-phase1", "v2-phase2"])
    shapes = [s for s in fig.layout.shapes if s.type == "rect"]
    assert len(shapes) == 2
    graded_other = ((points["team"] == "other") & (points["status"] == "graded")).sum()
    assert fig.data[-1].name == "team: other" and len(fig.data[-1].x) == graded_other == 19
    assert any(s.type == "line" and s.y0 == 1.0 for s in fig.layout.shapes)


def test_the_figures_draw_on_the_default_template_without_naming_one(foreign_template):
    scatter = figs.scatter_figure(_points(), REF, round_tag="v1-warmup", team="t3")
    assert scatter.layout.template.layout.paper_bgcolor == foreign_template
    timeline = figs.timeline_figure(_points(), team="t3", round_order=["v1-warmup"])
    assert timeline.layout.template.layout.paper_bgcolor == foreign_template


def test_a_teams_highlight_is_bounded_to_its_lowest_dots(monkeypatch):
    points = _points()
    monkeypatch.setattr(figs, "DOT_LIMIT", 5)
    prep = figs.prepare(points, REF, "score", "flops")
    trace = figs.highlight_trace(prep, "t3")
    own = prep.graded[prep.graded["team"] == "t3"]
    assert len(own) > 5 and len(trace.x) == 5
    assert sorted(row[1] for row in trace.customdata) == sorted(own.nsmallest(5, "adjusted_score")["submission_id"])
    assert trace.name == f"team: t3 (its 5 lowest of {len(own)})"


def test_a_history_of_one_moment_is_drawn_on_a_day_not_a_millisecond():
    """One submission (or a few graded at once, as the grader's records of one batch are): plotly.js zooms a
    single date to a millisecond ("16:18:30.999 ... 16:18:31.0005"); the axis spans a day around it. A history
    over several days keeps plotly's own range."""
    one = pd.DataFrame({"round": ["v1-phase1"], "submission_id": ["324969"], "adjusted_score": [3.9e-10],
                        "best_so_far": [3.9e-10], "submitted_at": ["2026-08-06T16:18:31+00:00"]})
    low, high = (pd.Timestamp(t) for t in figs.history_figure(one, team="a").layout.xaxis.range)
    assert high - low == pd.Timedelta(days=1)
    assert low < pd.Timestamp("2026-08-06 16:18:31") < high
    days = one.assign(submitted_at="2026-08-06T16:18:31+00:00")
    days = pd.concat([days, days.assign(submitted_at="2026-08-09T10:00:00+00:00", submission_id="2")])
    assert figs.history_figure(days, team="a").layout.xaxis.range is None
