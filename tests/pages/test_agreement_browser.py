"""Pages that agree with each other and with themselves, tried in Chromium the way the issue tried them.

* The same shipped baseline tells one story on /convergence and /leaderboard, and whatever has failed MLPs is
  drawn as failed (its own marker and legend entry, what failed written beside it) on both.
* The lab's "Sweep the budget" on covariance propagation with the defaults: the budgets it cannot pay for are
  failed points, drawn and named as such, and no crossing with sampling is claimed from them.
* Compare on two 4-MLP runs says one thing: no verdict, no interval, "MLPs needed" as many as the sentence asks
  for; its two budget curves open on A's and B's estimators, dataset and MLPs, and follow B when B changes.
* The README's compare example says why its interval is not taken apart, and the link it gives opens the lab.
* One budget-curve panel on three pages; an empty one keeps a sensible frame with its placeholder clear of the
  noise floor.

The oracle is the core, reading the server's own state folder and the shipped data (``whestboard.scoring``,
``whestboard.band``, ``whestboard.rules``).
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from contextlib import contextmanager

import pandas as pd
import pytest

from tests.browser_helpers import wait_for_dash
from tests.conftest import REPO, checked_page, serve_app
from whestboard.band import BASELINE_LABELS

pytestmark = pytest.mark.browser
LADDER = "0.01B:1B:5"  # the lab's and compare's default ladder
GRAPH = "{} .js-plotly-plot"


def _cli(state, *argv) -> str:
    env = dict(os.environ, WHESTBOARD_STATE_DIR=str(state))
    done = subprocess.run([sys.executable, "-m", "whestboard", *argv], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """A server whose run store holds mean and covariance propagation on the same four MLPs of v1-warmup."""
    state = tmp_path_factory.mktemp("agree-state")
    run_ids = [json.loads(_cli(state, "score", "--dataset", "v1-warmup", "--estimator", kind, "--mlps", "0:4",
                               "--json"))["whestboard"]["run_id"] for kind in ("mean", "cov")]
    with serve_app(state, timeout=240) as base:
        yield base, state, run_ids


@pytest.fixture()
def page(browser, server):
    with checked_page(browser, server[0], timeout_ms=300_000, viewport={"width": 1440, "height": 900}) as pg:
        yield pg


@contextmanager
def _in_state(state):
    """This process reads the server's state folder for the block (the core is the oracle)."""
    from whestboard.store import reset_engines

    old = os.environ.get("WHESTBOARD_STATE_DIR")
    os.environ["WHESTBOARD_STATE_DIR"] = str(state)
    reset_engines()
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("WHESTBOARD_STATE_DIR", None)
        else:
            os.environ["WHESTBOARD_STATE_DIR"] = old
        reset_engines()


def _traces(page, graph: str) -> list[dict]:
    page.wait_for_selector(GRAPH.format(graph))
    # x and y as Plotly holds them after decoding (a figure built from numpy arrives as typed-array objects)
    return page.evaluate("""sel => { const gd = document.querySelector(sel);
        const values = v => v ? Array.from(v) : [];
        return Array.from(gd.data, (t, i) => ({
            name: t.name || '', x: values(gd._fullData[i].x), y: values(gd._fullData[i].y),
            text: Array.isArray(t.text) ? t.text : (t.text ? [t.text] : []), meta: t.meta || {},
            symbol: t.marker ? t.marker.symbol : null})); }""", GRAPH.format(graph))


def _layout(page, graph: str) -> dict:
    return page.evaluate("sel => { const gd = document.querySelector(sel); return {meta: gd.layout.meta, "
                         "x: gd._fullLayout.xaxis.range, y: gd._fullLayout.yaxis.range, "
                         "annotations: (gd.layout.annotations || []).map(a => [a.name, a.text]), "
                         "shapes: (gd.layout.shapes || []).map(s => s.name), title: gd.layout.title.text}; }",
                         GRAPH.format(graph))


def _served_submissions(base: str) -> pd.DataFrame:
    import io

    import requests
    return pd.read_csv(io.StringIO(requests.get(base + "/api/submissions.csv", timeout=60).text))


# ---------------------------------------------------------------------------
# 1. the same baseline, one story
# ---------------------------------------------------------------------------


def test_the_same_baseline_tells_one_story_on_convergence_and_the_leaderboard(page, server):
    """v2-phase2's cumulant K = 2: the issue saw it drawn at MSE 0.173 ("9.63e+03x worse than sampling", one MLP
    failed while the machine was busy) on /convergence and tied first with 0 failed MLPs on /leaderboard."""
    from whestboard.band import load_baselines
    from whestboard.data import get_dataset

    base, _, _ = server
    shipped = load_baselines(get_dataset("v2-phase2"))
    page.goto(base + "/convergence?round=v2-phase2")
    wait_for_dash(page)
    page.wait_for_function("() => document.querySelector('#convergence-graph .js-plotly-plot')?.data?.length > 3")
    drawn = {t["meta"]["baseline"]: t for t in _traces(page, "#convergence-graph") if t["meta"].get("baseline")}
    assert set(drawn) == set(shipped)
    for kind, result in shipped.items():  # a failed baseline is drawn as failed; none is, once data/ is re-baked
        assert drawn[kind]["meta"]["failed"] == bool(result.n_failed) == ("failed" in drawn[kind]["name"])
    k2 = shipped["cumulant:2"].summary()
    assert drawn["cumulant:2"]["y"] == [pytest.approx(k2["mean"], rel=1e-12)] and k2["n_failed"] == 0
    assert drawn["cumulant:2"]["symbol"] == "diamond"
    assert k2["mean"] == pytest.approx(shipped["cov"].summary()["mean"], rel=1e-12)  # K = 2 is covariance propagation

    served = _served_submissions(base)
    row = served[served["submission_id"] == "baseline:v2-phase2:v2-phase2:cumulant:2"].iloc[0]
    assert int(row["n_failed_mlps"]) == 0
    assert float(row["adjusted_score"]) == pytest.approx(k2["adjusted_score"], rel=1e-9)  # the same MLPs, the same score
    page.goto(base + "/leaderboard?round=v2-phase2")
    wait_for_dash(page)
    page.wait_for_selector("#lb-scatter .main-svg")
    failed = next(t for t in _traces(page, "#lb-scatter") if t["name"] == "with failed MLPs")
    assert failed["x"] == [] and "baseline: cumulant propagation" in page.inner_text("#lb-ranking")


def test_a_submission_with_failed_mlps_is_drawn_as_failed_on_the_leaderboard(page, server):
    from whestboard.rules import failures_sentence

    base, _, _ = server
    served = _served_submissions(base)
    graded = served[(served["round"] == "v1-warmup") & (served["status"] == "graded")]
    expected = graded[graded["n_failed_mlps"].fillna(0) > 0]["submission_id"].tolist()
    assert expected, "the shipped sweep has Monte Carlo at all of B on v1-warmup: every MLP fails the combined budget"
    rows = pd.read_csv(REPO / "data" / "submissions" / "baselines.per_mlp.csv")
    page.goto(base + "/leaderboard?round=v1-warmup")
    wait_for_dash(page)
    page.wait_for_selector("#lb-scatter .main-svg")
    failed = next(t for t in _traces(page, "#lb-scatter") if t["name"] == "with failed MLPs")
    assert sorted(failed["meta"]["failed_submissions"]) == sorted(expected)
    assert failed["symbol"] == "x-thin-open" and len(failed["x"]) == len(expected)
    for sid, text in zip(failed["meta"]["failed_submissions"], failed["text"], strict=True):
        mine = rows[(rows["submission_id"] == sid) & (rows["split"] == "public")]
        kinds = [k if f else None for k, f in zip(mine["failure"], mine["failed"], strict=True)]
        assert text == failures_sentence(kinds)


# ---------------------------------------------------------------------------
# 3. a crossing from a failed point
# ---------------------------------------------------------------------------


def _stored(state, spec: str, mlps: str) -> list[dict]:
    from whestboard.data import get_dataset
    from whestboard.scoring import (
        curve_requests,
        parse_budget_ladder,
        resolve_estimator,
        rulebook_for,
        stored_points,
    )

    with _in_state(state):
        ds = get_dataset("v1-warmup")
        ladder = parse_budget_ladder(LADDER, rulebook_for("v1-warmup").round_budget)
        return stored_points(curve_requests(ds, mlps, resolve_estimator(spec), "v1-warmup", ladder))


def _sweep_in_the_lab(page, base: str) -> None:
    page.goto(base + "/lab?dataset=v1-warmup&mlps=0:4&estimator=cov")
    wait_for_dash(page)
    assert page.input_value("#lab-budgets") == LADDER
    page.click("#lab-sweep")
    page.wait_for_selector("#lab-sweep-panel", timeout=600_000)
    wait_for_dash(page)


def test_the_labs_sweep_draws_failed_points_as_failed_and_claims_no_crossing_from_them(page, server):
    from whestboard.scoring import carries_claims, sampling_crossing

    base, state, _ = server
    _sweep_in_the_lab(page, base)
    points = _stored(state, "cov", "0:4")
    assert len(points) == 5
    first = points[0]  # B = 6.8e8 buys less than covariance propagation's 1.08e9 FLOPs: every MLP fails
    assert first["budget"] == 680_000_000 and first["failures"] == "4 of 4 MLPs failed: FLOP budget"
    failed = [p for p in points if not carries_claims(p)]
    ran = [p for p in points if carries_claims(p)]
    traces = _traces(page, "#lab-curve-graph")
    cross = next(t for t in traces if t["meta"].get("failed_curve") == "cov")
    assert cross["name"] == "cov: failed points (the grader's fallback, not a result)"
    assert cross["symbol"] == "x-thin-open" and cross["text"] == [p["failures"] for p in failed]
    assert cross["x"] == pytest.approx([p["flops_used"]["mean"] for p in failed], rel=1e-12)
    line = next(t for t in traces if t["meta"].get("curve") == "cov")
    assert line["x"] == pytest.approx([p["flops_used"]["mean"] for p in ran], rel=1e-12)  # never through a failure
    assert not any("crosses sampling" in t["name"] for t in traces)
    assert sampling_crossing(points) is None
    notes = page.inner_text("#lab-curve-notes")
    assert "crosses sampling at" not in notes and "cov at B = 6.80e+08: 4 of 4 MLPs failed: FLOP budget." in notes
    assert notes.count("Drawn as a failed point") == len(failed)
    rows = page.locator("#lab-curve-points tbody tr.table-danger")
    assert rows.count() == len(failed) and "4 of 4 MLPs failed: FLOP budget" in rows.first.inner_text()

    # the same runs on the convergence page: drawn as failed, named, never among the ordinary dots
    with _in_state(state):
        from whestboard.scoring import list_runs
        runs = list_runs(round_tag="v1-warmup")
    n_failed_runs = sum(1 for r in runs if r["n_failed"])
    page.goto(base + "/convergence?round=v1-warmup")
    wait_for_dash(page)
    page.wait_for_function("() => document.querySelector('#convergence-graph .js-plotly-plot')?.data?.length > 3")
    traces = _traces(page, "#convergence-graph")
    failed_runs = [t for t in traces if t["meta"].get("failed_runs")]
    assert sum(len(t["x"]) for t in failed_runs) == n_failed_runs == len(failed)
    labels = [text for t in failed_runs for text in t["text"] if text]
    assert labels and all("MLPs failed" in text for text in labels)
    ordinary = next((t for t in traces if t["name"].startswith("recorded runs")), {"x": []})
    assert len(ordinary["x"]) == len(runs) - n_failed_runs - sum(
        len(t["x"]) for t in traces if t["name"].startswith("runs outside the frame"))


# ---------------------------------------------------------------------------
# 4. compare says one thing
# ---------------------------------------------------------------------------


def test_compare_on_four_mlps_says_one_thing_and_its_curves_open_on_a_and_b(page, server):
    base, _, (mean_id, cov_id) = server
    page.goto(base + f"/compare?a=run:{mean_id}&b=run:{cov_id}")
    page.wait_for_selector("#compare-verdict-panel")
    wait_for_dash(page)
    for card in ("compare-score", "compare-mse"):
        sentence = page.inner_text(f"#{card}-sentence")
        assert sentence.startswith("No verdict") and "cannot reach 95% on fewer than 6" in sentence
        asked = int(sentence.split("at least ")[1].split(" shared MLPs")[0])
        assert page.inner_text(f"#{card}-7").split(" ")[0] == str(asked)  # "MLPs needed" is what the sentence asks
        assert page.inner_text(f"#{card}-3").startswith("none on 4 MLP(s)")  # no interval
        assert "no interval on 4 MLP(s)" in page.inner_text(f"#{card}-4")
    assert "No 95% interval on 4 shared MLP(s)" in page.inner_text("#compare-noise")
    assert "limited by" not in page.inner_text("#compare-verdict")

    # the two curves open on A's and B's estimators, their dataset and their four MLPs
    page.wait_for_selector("#compare-curve-graph .js-plotly-plot")
    assert page.inner_text("#compare-curve-dataset") == "v1-warmup"
    assert page.inner_text("#compare-curve-a") == "Mean propagation (whestbench)"
    assert page.inner_text("#compare-curve-b") == "Covariance propagation (whestbench)"
    assert page.input_value("#compare-curve-mlps") == "0:4"
    layout = _layout(page, "#compare-curve-graph")
    assert layout["meta"]["curves"] == ["A: mean", "B: cov"]
    diff = _layout(page, "#compare-curve-diff")
    assert diff["x"][0] == pytest.approx(math.log10(6.8e8) - 0.3) and diff["x"][1] == pytest.approx(math.log10(6.8e10) + 0.3)

    # B changes: the curves follow it
    page.click("#compare-b")
    page.get_by_role("option", name=f"{BASELINE_LABELS['cumulant:3']} · baseline · v1-warmup · 32 MLPs").click()
    page.wait_for_function("() => document.querySelector('#compare-curve-b').innerText.includes('K = 3')")
    wait_for_dash(page)
    assert page.input_value("#compare-curve-mlps") == "0:4"
    page.wait_for_function("() => { const gd = document.querySelector('#compare-curve-graph .js-plotly-plot');"
                           " return gd && gd.layout.meta.curves[1] === 'B: cumulant:3'; }")


def test_the_readme_compare_example_says_why_and_links_what_to_do(page, server):
    base, _, _ = server
    page.goto(base + "/compare?a=base%3Av1-warmup%3Amean&b=base%3Av1-warmup%3Acov")
    page.wait_for_selector("#compare-verdict-panel")
    wait_for_dash(page)
    assert page.inner_text("#compare-score-sentence").startswith("B's score is lower (better)")
    noise = page.inner_text("#compare-noise")
    assert "keep per-MLP results, not predictions" in noise
    assert "Score mean on v1-warmup MLPs 0:32 and cov on v1-warmup MLPs 0:32" in noise
    title = page.evaluate("() => document.querySelector('#compare-noise-split .js-plotly-plot').layout.title.text")
    assert title == "What limits the interval: needs both sides' predictions"
    page.click("#compare-rescore-B")
    page.wait_for_url("**/lab?**")
    wait_for_dash(page)
    assert page.input_value("#lab-mlps") == "0:32"
    assert page.inner_text("#lab-estimator") == "Covariance propagation (whestbench)"


# ---------------------------------------------------------------------------
# one budget-curve panel
# ---------------------------------------------------------------------------


def _boxes_overlap(a: dict, b: dict) -> bool:
    return not (a["x"] + a["width"] <= b["x"] or b["x"] + b["width"] <= a["x"]
                or a["y"] + a["height"] <= b["y"] or b["y"] + b["height"] <= a["y"])


def test_one_budget_curve_panel_on_three_pages_and_an_empty_one_keeps_a_sensible_frame(page, server):
    base, _, (mean_id, cov_id) = server
    page.goto(base + "/convergence?round=v1-warmup")
    wait_for_dash(page)
    page.locator("#curve-body").scroll_into_view_if_needed()
    layout = _layout(page, "#curve-graph")
    budget = layout["meta"]["budget"]
    assert layout["meta"]["empty"] and layout["meta"]["curves"] == []
    assert layout["x"] == pytest.approx([math.log10(0.1 * budget / 10), math.log10(budget * 10)])
    floor = next(s for s in page.evaluate("() => document.querySelector('#curve-graph .js-plotly-plot').layout.shapes")
                 if s["name"] == "noise-floor")["y0"]
    assert layout["y"][0] < math.log10(floor) < layout["y"][1]
    assert ["no-curve", "choose an estimator and sweep the budget to draw its curve"] in layout["annotations"]
    note = page.locator("#curve-graph .annotation", has_text="choose an estimator").bounding_box()
    index = next(i for i, s in enumerate(page.evaluate(
        "() => document.querySelector('#curve-graph .js-plotly-plot').layout.shapes")) if s["name"] == "noise-floor")
    line = page.locator(f"#curve-graph .shapelayer path[data-index='{index}']").first.bounding_box()
    assert note is not None and line is not None and not _boxes_overlap(note, line)

    panels = {}
    _sweep_in_the_lab(page, base)  # served from the run records when the lab's sweep ran before
    panels["lab"] = _layout(page, "#lab-curve-graph")
    assert page.locator("#lab-curve-notes").count() == 1 and page.locator("#lab-curve-points").count() == 1
    page.goto(base + f"/compare?a=run:{mean_id}&b=run:{cov_id}")
    wait_for_dash(page)
    panels["compare"] = _layout(page, "#compare-curve-graph")
    assert page.locator("#compare-curve-notes").count() == 1
    page.goto(base + "/convergence?round=v1-warmup&curves=cov&mlps=0:4")
    wait_for_dash(page)
    page.wait_for_function("() => document.querySelector('#curve-graph .js-plotly-plot')?.layout?.meta?.curves?.length === 1")
    panels["convergence"] = _layout(page, "#curve-graph")
    for name, drawn in panels.items():  # one component: the same frame, markers and meta on every page
        assert set(drawn["meta"]) == {"x", "y", "curves", "budget", "empty"}, name
        assert drawn["title"].startswith("Budget curves · v1-warmup"), name
        assert {"noise-floor", "budget", "charging-floor"} <= set(drawn["shapes"]), name
        assert not drawn["meta"]["empty"], name
    assert panels["lab"]["meta"]["curves"] == panels["convergence"]["meta"]["curves"] == ["cov"]
