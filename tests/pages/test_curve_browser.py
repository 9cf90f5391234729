"""Budget curves on /convergence in headless Chromium: choose an estimator, sweep, read the crossing, MSE/Var.

The page's own server, with a private state folder; the points it sweeps are read back from that folder's
run records by the core (``stored_points``, ``sampling_crossing``), the oracle for what the page says.
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from urllib.parse import parse_qs, urlparse

import pytest

from tests.browser_helpers import wait_for_dash
from tests.conftest import checked_page, serve_app

pytestmark = pytest.mark.browser
ROUND = "v1-warmup"
LADDER = "0.01B:0.4B:3"
MLPS = "0:2"
SPEC = "mc:0.5B"
GRAPH = "#curve-graph .js-plotly-plot"


@pytest.fixture(scope="module")
def curve_server(tmp_path_factory):
    state = tmp_path_factory.mktemp("curve-state")
    with serve_app(state, timeout=240) as base:
        yield base, state


@pytest.fixture()
def cpage(browser, curve_server):
    base, _ = curve_server
    with checked_page(browser, base, timeout_ms=120_000, viewport={"width": 1400, "height": 1200}) as pg:
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


def _stored(state, spec: str = SPEC) -> list[dict]:
    """The points the page's sweep recorded, read with the core from the server's state folder."""
    from whestboard.data import get_dataset
    from whestboard.scoring import (
        curve_requests,
        parse_budget_ladder,
        resolve_estimator,
        rulebook_for,
        stored_points,
    )

    with _in_state(state):
        ds = get_dataset(ROUND)
        ladder = parse_budget_ladder(LADDER, rulebook_for(ROUND).round_budget)
        return stored_points(curve_requests(ds, MLPS, resolve_estimator(spec), ROUND, ladder))


def _figure(page, label: str = SPEC) -> dict:
    """What the graph draws; ``curve`` is ``label``'s line (the points whose MLPs all ran), empty without one."""
    page.wait_for_selector(GRAPH)
    return page.evaluate(f"""() => {{
        const gd = document.querySelector('{GRAPH}');
        const line = gd.data.find(t => t.meta && t.meta.curve === '{label}') || {{x: [], y: []}};
        return {{names: gd.data.map(t => t.name), y: gd.layout.yaxis.title.text, meta: gd.layout.meta,
                 curve: {{x: Array.from(line.x), y: Array.from(line.y)}},
                 shapes: (gd.layout.shapes || []).map(s => s.name)}};
    }}""")


def test_choose_sweep_read_the_crossing_and_switch_to_mse_over_variance(cpage, curve_server):
    from whestboard.scoring import carries_claims, sampling_crossing

    _, state = curve_server
    cpage.goto(f"{cpage.base_url}/convergence?round={ROUND}&budgets={LADDER}&mlps={MLPS}")
    wait_for_dash(cpage)
    assert "noise-floor" in _figure(cpage)["shapes"]

    for option in ("Monte Carlo, 0.5B of each budget", "Covariance propagation (whestbench)"):
        cpage.click("#curve-estimators")
        cpage.get_by_text(option, exact=True).click()
        cpage.keyboard.press("Escape")
    # three points of each not scored yet: the note follows each choice, so wait for the second one's
    cpage.wait_for_function("() => (document.querySelector('#curve-missing') || {}).innerText"
                            "?.includes('6 point(s) not scored yet')")
    assert "6 point(s) not scored yet" in cpage.inner_text("#curve-missing")

    cpage.click("#curve-sweep")
    cpage.wait_for_selector("#curve-done", timeout=300_000)
    # three points per curve, on its line or, when an MLP failed (covariance propagation below its cost), apart
    cpage.wait_for_function(f"""() => {{ const gd = document.querySelector('{GRAPH}'); if (!gd) return false;
        const drawn = label => gd.data.filter(t => t.meta && (t.meta.curve === label || t.meta.failed_curve === label))
            .reduce((n, t) => n + t.x.length, 0);
        return drawn('{SPEC}') === 3 && drawn('cov') === 3; }}""")
    wait_for_dash(cpage)

    stored = _stored(state)
    assert [p["budget"] for p in stored] == sorted(p["budget"] for p in stored) and len(stored) == 3
    points = [p for p in stored if carries_claims(p)]  # the line: the points whose MLPs all ran
    fig = _figure(cpage)
    assert fig["curve"]["y"] == pytest.approx([p["final_layer_mse"]["mean"] for p in points], rel=1e-12)
    assert fig["curve"]["x"] == pytest.approx([p["flops_used"]["mean"] for p in points], rel=1e-12)

    said = cpage.locator("#curve-notes .curve-crossing").all_inner_texts()
    for spec in (SPEC, "cov"):  # what the page says of each curve is what the core finds in the run records
        crossing = sampling_crossing(_stored(state, spec))
        line = next(text for text in said if text.startswith(spec))
        if crossing is None:
            assert "does not cross sampling" in line or "no crossing with sampling can be read" in line
            assert f"{spec} crosses sampling" not in fig["names"]
        else:
            assert "crosses sampling at" in line and ("better" if crossing["better_after"] else "worse") in line
            assert f"{spec} crosses sampling" in fig["names"]
    assert not cpage.query_selector("#curve-missing")

    cpage.get_by_label("MSE / Var").check()
    cpage.wait_for_function(f"() => document.querySelector('{GRAPH}').layout.meta.y === 'var'")
    fig = _figure(cpage)
    assert "MSE / avg_variance" in fig["y"] and "sampling: MSE/Var = 1/m" in fig["names"]
    assert fig["curve"]["y"] == pytest.approx([p["mse_over_variance"]["mean"] for p in points], rel=1e-12)
    cpage.wait_for_function("() => location.search.includes('y=var')")
    query = parse_qs(urlparse(cpage.url).query)
    assert query["curves"] == [f"{SPEC}|cov"] and query["y"] == ["var"] and query["budgets"] == [LADDER]
    assert query["mlps"] == [MLPS]

    cpage.reload()  # every choice came back from the address, points from the run records
    wait_for_dash(cpage)
    cpage.wait_for_function(f"() => {{ const gd = document.querySelector('{GRAPH}'); return gd && gd.layout.meta.y"
                            f" === 'var' && gd.data.some(t => t.meta && (t.meta.curve || t.meta.failed_curve)); }}")


def test_the_lab_sweeps_the_budget_beside_run_and_a_fixed_cost_estimator_is_a_vertical_line(cpage, curve_server):
    from whestboard.scoring import carries_claims

    cpage.goto(f"{cpage.base_url}/lab?round={ROUND}&mlps={MLPS}&estimator=mean&budgets={LADDER}")
    wait_for_dash(cpage)
    assert cpage.is_visible("#lab-run") and cpage.is_visible("#lab-sweep")
    cpage.click("#lab-sweep")
    cpage.wait_for_selector("#lab-sweep-panel", timeout=300_000)
    graph = "#lab-curve-graph .js-plotly-plot"
    cpage.wait_for_selector(graph)
    curve = cpage.evaluate(f"""() => {{
        const gd = document.querySelector('{graph}');
        const t = gd.data.find(t => t.meta && t.meta.curve);
        return {{x: t.x, name: t.name, fixed: t.meta.fixed_cost, texts: gd.data.map(d => d.text || [])}};
    }}""")
    ran = [p for p in _stored(curve_server[1], "mean") if carries_claims(p)]  # a busy machine may fail an MLP
    assert len(curve["x"]) == len(ran) >= 2 and len(set(curve["x"])) == 1  # identical FLOPs at every budget
    assert curve["fixed"] and "fixed cost: does not use more budget" in curve["name"]
    assert any("fixed cost: does not use more budget" in text for texts in curve["texts"] for text in texts)
    assert "fixed cost" in cpage.inner_text("#lab-curve-notes")
    link = cpage.get_attribute("#lab-curve-link", "href")
    assert "curves=mean" in link and "mlps=0%3A2" in link


def test_compare_draws_two_curves_and_their_paired_difference_per_budget(cpage, curve_server):
    import numpy as np

    from whestboard.data import get_dataset
    from whestboard.scoring import (
        curve_requests,
        parse_budget_ladder,
        resolve_estimator,
        rulebook_for,
        stored_reports,
    )
    _, state = curve_server
    cpage.goto(f"{cpage.base_url}/compare?cdataset={ROUND}&ca={SPEC}&cb=combined&cbudgets={LADDER}&cmlps={MLPS}")
    wait_for_dash(cpage)
    cpage.wait_for_selector("#compare-curve-missing")  # the combined baseline is not scored at these budgets yet
    cpage.click("#compare-curve-sweep")
    cpage.wait_for_selector("#compare-curve-done", timeout=300_000)
    cpage.wait_for_function("() => document.querySelectorAll('#compare-curve-table tbody tr').length === 3"
                            " && !document.querySelector('#compare-curve-missing')")
    wait_for_dash(cpage)
    shown = cpage.evaluate("() => { const gd = document.querySelector('#compare-curve-diff .js-plotly-plot');"
                           " const t = gd.data.find(t => t.name && t.name.startsWith('A − B')) || {x: [], y: []};"
                           " return {x: Array.from(t.x), y: Array.from(t.y)}; }")
    with _in_state(state):
        ds = get_dataset(ROUND)
        ladder = parse_budget_ladder(LADDER, rulebook_for(ROUND).round_budget)
        a, b = (stored_reports(curve_requests(ds, MLPS, resolve_estimator(s), ROUND, ladder)) for s in (SPEC, "combined"))
    expected, budgets = [], []
    for budget in ladder:  # the oracle: per-MLP scores straight from the two runs, differenced MLP by MLP
        sa = {e["mlp_index"]: e["adjusted_final_layer_score"] for e in a[budget]["results"]["per_mlp"] if not e["failed"]}
        sb = {e["mlp_index"]: e["adjusted_final_layer_score"] for e in b[budget]["results"]["per_mlp"] if not e["failed"]}
        both = sorted(set(sa) & set(sb))  # an MLP that failed on either side is left out of the pair
        if both:
            budgets.append(budget)
            expected.append(float(np.mean([sa[m] - sb[m] for m in both])))
    assert shown["x"] == budgets
    assert shown["y"] == pytest.approx(expected, rel=1e-12)
    assert len(cpage.query_selector_all("#compare-curve-table tbody tr")) == 3
    cpage.wait_for_function("() => location.search.includes('cb=combined')")
