"""A name someone chose (a team, a submission id, an estimator's or an upload's label) reaches every figure
as text: the raw markup never appears in anything plotly renders, its escaped form does (plotly decodes the
entities back into the same characters). The browser half: tests/pages/test_names_as_text_browser.py."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import numpy as np
import pandas as pd
import pytest

from components.figures import convergence as cfigs
from components.figures import leaderboard as figs
from components.figures import standings as sfigs
from components.figures import upload as ufigs
from components.figures.text import plain, plain_all
from tests.components.test_submissions_figures import REF
from whestboard.leaderboard import bootstrap_standings, fragility, shake_up

HOSTILE = ('<a href="https://evil.example/">link</a><span style="font-size:48px;color:red">BIG</span>'
           '<b>bold</b><br>%{x} & end')
SHOWN = plain(HOSTILE)
#: Keys plotly never draws as text: grouping keys and data the page reads back.
NOT_DRAWN = {"meta", "legendgroup", "uid", "ids"}


def _strings(value, key: str = "") -> Iterator[str]:
    """Every string a figure (as JSON) could draw, with the keys plotly never renders left out."""
    if hasattr(value, "to_plotly_json"):
        value = value.to_plotly_json()
    if isinstance(value, dict):
        for k, v in value.items():
            if k not in NOT_DRAWN:
                yield from _strings(v, k)
    elif isinstance(value, (list, tuple, np.ndarray, pd.Series)):
        for v in list(value):
            yield from _strings(v, key)
    elif isinstance(value, str):
        yield value


def _assert_text_only(figure) -> None:
    strings = list(_strings(figure))
    assert not [s for s in strings if HOSTILE in s or '<a href="https://evil' in s], "raw markup reaches the figure"
    assert any(SHOWN in s for s in strings), "the name is not shown at all"


def test_escaping_turns_plotlys_markup_into_entities_and_keeps_everything_else():
    assert plain(HOSTILE) == ('&lt;a href="https://evil.example/"&gt;link&lt;/a&gt;&lt;span style="font-size:48px;'
                              'color:red"&gt;BIG&lt;/span&gt;&lt;b&gt;bold&lt;/b&gt;&lt;br&gt;%&#123;x} &amp; end')
    assert plain("team-α 1") == "team-α 1" and plain(None) == "" and plain(7) == "7"
    assert plain_all(["<b>", "&lt;b&gt;"]) == ["&lt;b&gt;", "&amp;lt;b&amp;gt;"]  # one-to-one: names stay apart


def _board_points(n: int = 60) -> pd.DataFrame:
    """Graded submissions of seven teams over a day; team t3 and one submission id get the hostile name."""
    rng = np.random.default_rng(0)
    flops = REF.budget * 10 ** rng.uniform(-3, 0, n)
    score = 1e-5 * 10 ** rng.normal(0, 0.3, n)
    points = pd.DataFrame({
        "submission_id": [f"s{i}" for i in range(n)], "team": [f"t{i % 7}" for i in range(n)],
        "round": "v1-warmup", "status": "graded",
        "submitted_at": pd.Timestamp("2026-05-01", tz="UTC") + pd.to_timedelta(np.arange(n), unit="h"),
        "mean_flops_used": flops, "mean_effective_compute": flops * 1.1, "adjusted_score": score,
        "final_layer_mse": score * 10, "mean_multiplier": 0.1, "n_failed_mlps": 0,
    })
    points["vs_mc"] = 1e-6 / points["adjusted_score"]
    points["mc_at_b"], points["mc_basis"] = 1e-6, "own MLPs"
    points.loc[points["team"] == "t3", "team"] = HOSTILE
    points.loc[5, "submission_id"] = HOSTILE
    return points


def test_leaderboard_scatter_timeline_history_and_public_private_draw_names_as_text():
    points = _board_points()
    _assert_text_only(figs.scatter_figure(points, REF, round_tag="v1-warmup", team=HOSTILE))
    _assert_text_only(figs.timeline_figure(points, team=HOSTILE, round_order=["v1-warmup"]))
    history = points[points["team"] == HOSTILE].assign(best_so_far=lambda d: d["adjusted_score"].cummin())
    _assert_text_only(figs.history_figure(history, team=HOSTILE))
    table = pd.DataFrame({"team": [HOSTILE, "b"], "submission_id": ["s1", HOSTILE], "adjusted_score": [1e-5, 2e-5],
                          "private_score": [3e-5, 2e-5], "private_ratio": [3.0, 1.0], "overfit_p": [0.01, 0.5],
                          "overfit": [True, False], "flops_differ": [False, False],
                          "overfit_text": [f"{HOSTILE} overfits", None], "fc_share": [0.5, 0.9]})
    for colour_by in ("flag", "share"):
        _assert_text_only(figs.public_private_figure(table, colour_by=colour_by, team=HOSTILE))


def _scores() -> np.ndarray:
    """Five teams' scores on 16 MLPs, apart by a few tens of percent."""
    rng = np.random.default_rng(2)
    mlp = rng.lognormal(0, 1, 16)
    return np.stack([mlp * rng.lognormal(s, 0.3, 16) for s in (0.0, 0.1, 0.2, 0.4, 0.8)])


def test_the_final_standings_views_draw_names_as_text():
    teams = ["a", HOSTILE, "c", "d", "e"]
    boot = bootstrap_standings(_scores(), teams, draws=200)
    _assert_text_only(sfigs.rank_probability_figure(boot))
    _assert_text_only(sfigs.win_matrix_figure(boot))
    _assert_text_only(sfigs.fragility_figure(fragility(_scores(), teams, [1], draws=50)))
    public = pd.DataFrame({"team": ["c", HOSTILE, "a"], "rank": [1, 2, 3]})
    shake = shake_up(public, [{"rank": i + 1, "team": t} for i, t in enumerate(teams)])
    _assert_text_only(sfigs.shake_up_figure(shake, team=HOSTILE))


def _curve_point(budget: float) -> dict:
    stat = {"mean": 1e-4, "low": 5e-5, "high": 2e-4}
    return {"budget": budget, "n_mlps": 3, "n_failed_mlps": 0, "final_layer_mse": stat, "score": stat,
            "mse_over_variance": stat, "flops_used": {"mean": budget / 2}, "effective_compute": {"mean": budget / 2},
            "below_noise_floor": False, "run_id": "r1", "mc_flops_per_sample": 100.0, "mean_avg_variance": 0.1}


def test_a_budget_curve_named_by_an_upload_draws_its_name_as_text_and_keeps_it_as_its_key():
    crossing = {"flops": 2e6, "budget": 1e7, "mse": 1e-4, "mse_over_variance": 1e-3, "better_after": True}
    traces = cfigs.curve_traces(HOSTILE, [_curve_point(1e6), _curve_point(1e7)], crossing=crossing)
    _assert_text_only({"data": traces})
    assert traces[0]["meta"]["curve"] == HOSTILE and traces[0]["legendgroup"] == HOSTILE  # keys, never drawn


def test_an_uploads_label_draws_as_text():
    _assert_text_only(ufigs.per_layer_figure({"upload": [1e-3, 1e-4], "mean": [2e-3, 2e-4]}, upload_label=HOSTILE))


@pytest.fixture()
def playground_result(tmp_path, monkeypatch):
    from whestboard.data import parse_shape
    from whestboard.scoring import estimator_specs, play, rulebook_for_shape

    monkeypatch.setenv("WHESTBOARD_STATE_DIR", str(tmp_path))
    shape = parse_shape(8, 2, 3)
    result = play(shape, 500, estimator_specs(100)[:2], rulebook_for_shape(shape))
    return dataclasses.replace(result, results=[dataclasses.replace(s, label=HOSTILE if i == 0 else s.label)
                                                for i, s in enumerate(result.results)])


def test_the_playgrounds_figures_draw_an_uploads_label_as_text(playground_result):
    from components.figures import playground as pfigs

    scored = playground_result.results[0]
    _assert_text_only(pfigs.per_layer_mse_figure(playground_result))
    _assert_text_only(pfigs.error_heatmap_figure(playground_result, scored))
    _assert_text_only(pfigs.predicted_vs_true_figure(playground_result, scored, 0))


def test_recorded_runs_on_the_convergence_page_draw_their_label_and_team_as_text_and_keep_their_id():
    from types import SimpleNamespace

    from whestboard.band import RunPoint

    run = RunPoint("run-1", HOSTILE, "file", HOSTILE, "upload", "ds", "", 1e9, 9e8, {"final": 1e-4, "all": 2e-4},
                   5e-5, 0.5, 3, 0, {"final": 0.1, "all": 0.1}, {"final": None, "all": None})
    view = SimpleNamespace(runs=[run])
    for highlight in (None, f"team:{HOSTILE}"):
        for frame in (cfigs.Frame(x=(8.0, 10.0), y=(-6.0, -2.0)), cfigs.Frame(x=(1.0, 2.0), y=(-6.0, -2.0))):
            traces = cfigs.run_traces(view, "final", highlight, frame)
            _assert_text_only({"data": traces})
            assert [row[:2] for t in traces for row in t["customdata"]] == [["run", "run-1"]]  # what a click reads


def test_the_playgrounds_cap_margins_draw_an_uploads_label_as_text(playground_result):
    """The margins panel names each estimator by its label (an upload's file name) in its hover texts and the
    time split's bars: as text too."""
    from components.figures.margins import margins_figure, time_split_figure
    from whestboard.scoring import playground_margins

    margins = playground_margins(playground_result)
    _assert_text_only(margins_figure(margins, "estimator"))
    assert margins.split is not None, "the playground records where predict's time went"
    _assert_text_only(time_split_figure(margins.split, margins.caps.wall_time_limit_s, "estimator"))


def test_operation_names_a_sandbox_reported_draw_as_text():
    """An upload's FLOP breakdown is reported by its own sandbox (the worker meters itself), so its operation
    names are whatever that code wrote: the lab's breakdown draws them as text."""
    from components.figures.lab import flop_breakdown

    breakdown = {"by_namespace": {"fnp": {"operations": {HOSTILE: {"flop_cost": 5_000}, "matmul": {"flop_cost": 9}}}}}
    _assert_text_only(flop_breakdown({"results": {"breakdowns": {"estimator": breakdown}}}))
