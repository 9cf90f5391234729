"""The convergence page in headless Chromium: every embedded round, markers where the rulebook puts them.

This module runs its own app server with a private state folder, so the run
it records (for the highlight and the readout) cannot disturb other pages' tests.
"""

from __future__ import annotations

import math
import os
from urllib.parse import parse_qs, urlparse

import pytest

from tests.browser_helpers import wait_for_dash
from tests.conftest import checked_page, serve_app
from whestboard.band import convergence_view
from whestboard.data import data_dir, get_dataset, served_datasets
from whestboard.rules import get_round
from whestboard.scoring import rulebook_for

GRAPH = "#convergence-graph .js-plotly-plot"


def _embedded_rounds() -> list[tuple[str, str]]:
    """(round, dataset key) of every embedded dataset the registry serves now."""
    root = data_dir().resolve()
    out = []
    for key, ds in served_datasets().items():
        if ds.info.path.resolve().parent == root and ds.info.round_tag:
            out.append((ds.info.round_tag, key))
    return out


@pytest.fixture(scope="module")
def convergence_server(tmp_path_factory):
    state = tmp_path_factory.mktemp("convergence-state")
    _record_highlight_run(state)
    with serve_app(state, timeout=240) as base:  # a loaded 2-core machine starts the app slowly
        yield base


def _record_highlight_run(state) -> None:
    """One real run (mean propagation on two MLPs of the first embedded round) in the private store."""
    from whestboard.scoring import RunRequest, resolve_estimator, run_and_record
    from whestboard.store import reset_engines

    rounds = _embedded_rounds()
    if not rounds:
        return
    tag, key = rounds[0]
    old = os.environ.get("WHESTBOARD_STATE_DIR")
    os.environ["WHESTBOARD_STATE_DIR"] = str(state)
    reset_engines()
    try:
        ds = get_dataset(key)
        request = RunRequest(ds, ds.indices[:2], resolve_estimator("mean"), rulebook_for(tag),
                                  source="cli", team="convergence-testers")
        run_and_record(request, use_cache=False)
    finally:
        if old is None:
            os.environ.pop("WHESTBOARD_STATE_DIR", None)
        else:
            os.environ["WHESTBOARD_STATE_DIR"] = old
        reset_engines()


@pytest.fixture()
def cpage(browser, convergence_server):
    with checked_page(browser, convergence_server, timeout_ms=60_000,
                      viewport={"width": 1400, "height": 1000}) as pg:
        yield pg


def _figure(page) -> dict:
    page.wait_for_selector(GRAPH)
    return page.evaluate(f"""() => {{
        const gd = document.querySelector('{GRAPH}');
        const shapes = (gd.layout.shapes || []).map((s, i) => {{
            const path = gd.querySelector(`.shapelayer path[data-index="${{i}}"]`);
            const box = path ? path.getBBox() : null;
            return {{name: s.name, x0: s.x0, x1: s.x1, y0: s.y0, y1: s.y1, px: box ? box.x : null,
                     py: box ? box.y + box.height : null}};
        }});
        return {{shapes, names: gd.data.map(t => t.name), title: gd.layout.yaxis.title.text,
                 meta: gd.layout.meta}};
    }}""")


def _pixel_x(page, value: float, *, absolute: bool = True) -> float:
    """Where Plotly's own x axis puts ``value`` (SVG coordinates, or relative to the plot area)."""
    return page.evaluate(f"() => {{ const xa = document.querySelector('{GRAPH}')._fullLayout.xaxis;"
                         f" return xa.l2p(Math.log10({value})) + {'xa._offset' if absolute else 0}; }}")


def _pixel_y(page, value: float, *, absolute: bool = True) -> float:
    return page.evaluate(f"() => {{ const ya = document.querySelector('{GRAPH}')._fullLayout.yaxis;"
                         f" return ya.l2p(Math.log10({value})) + {'ya._offset' if absolute else 0}; }}")


def _shape(fig: dict, name: str) -> dict:
    return next(s for s in fig["shapes"] if s["name"] == name)


@pytest.mark.parametrize("tag,key", _embedded_rounds() or [pytest.param(None, None, marks=pytest.mark.skip(
    reason="no embedded dataset is baked yet"))])
def test_every_embedded_round_loads_with_markers_at_its_rulebook(cpage, tag, key):
    cpage.goto(f"{cpage.base_url}/convergence?round={tag}")
    wait_for_dash(cpage)
    fig = _figure(cpage)
    rnd = get_round(tag)
    ds = get_dataset(key)
    budget = _shape(fig, "budget")
    assert budget["x0"] == budget["x1"] == rnd.budget
    assert abs(budget["px"] - _pixel_x(cpage, rnd.budget)) < 1.5, "the budget line is not drawn at B"
    floor = _shape(fig, "charging-floor")
    assert floor["x0"] == 0.1 * rnd.budget
    assert abs(floor["px"] - _pixel_x(cpage, 0.1 * rnd.budget)) < 1.5
    noise = _shape(fig, "noise-floor")
    assert noise["y0"] == pytest.approx(ds.noise_floor, rel=1e-12)
    assert abs(noise["py"] - _pixel_y(cpage, ds.noise_floor)) < 1.5
    assert fig["meta"]["round"] == tag and fig["meta"]["dataset"] == key
    assert any(n.startswith("mean σ²/N") for n in fig["names"])
    if (ds.info.path / "band" / "band.json").is_file():
        assert any(n.startswith("median of") for n in fig["names"])
        assert "10–90% of MLPs" in fig["names"] and "25–75% of MLPs" in fig["names"]


#: Every annotation with text in the figure: its text, its name and its drawn box (the text's background).
LABELS = f"""() => {{
    const gd = document.querySelector('{GRAPH}');
    return Array.from(gd.querySelectorAll('g.annotation'), g => {{
        const i = Number(g.getAttribute('data-index'));
        const r = (g.querySelector('rect.bg') || g).getBoundingClientRect();
        return {{text: g.textContent, name: gd.layout.annotations[i].name,
                 box: [r.left, r.top, r.right, r.bottom]}};
    }}).filter(a => a.text);
}}"""


def _overlap(a, b) -> bool:
    return not (a[2] <= b[0] or b[2] <= a[0] or a[3] <= b[1] or b[3] <= a[1])


@pytest.mark.parametrize("tag,key", _embedded_rounds() or [pytest.param(None, None, marks=pytest.mark.skip(
    reason="no embedded dataset is baked yet"))])
def test_no_two_labels_overlap_and_each_baseline_is_named_once(browser, convergence_server, tag, key):
    """At 1440 x 900 (the issue's window): no label box meets another (mean propagation and cumulant
    propagation at K = 1 used to print on top of each other), each baseline's name appears in exactly one
    label, and baselines with the same numbers share that label, which says so."""
    with checked_page(browser, convergence_server, timeout_ms=60_000,
                      viewport={"width": 1440, "height": 900}) as page:
        page.goto(f"{page.base_url}/convergence?round={tag}")
        wait_for_dash(page)
        page.wait_for_selector(GRAPH + " g.annotation")
        labels = page.evaluate(LABELS)
        names = page.evaluate(f"() => document.querySelector('{GRAPH}').data.filter(t => "
                              "(t.name || '').endsWith('(mean, 10–90% of MLPs)')).map(t => [t.name, t.mode])")
    for i, a in enumerate(labels):
        for b in labels[i + 1:]:
            assert not _overlap(a["box"], b["box"]), (tag, a, b)
    # a shared label names each baseline without its own "(= mean propagation)": the group says it
    baselines = [name.removesuffix(" (mean, 10–90% of MLPs)").split(" (= ")[0] for name, _ in names]
    assert baselines and all(mode == "markers" for _, mode in names)  # no trace text printed over another
    texts = [a["text"] for a in labels if (a["name"] or "").startswith("label-baseline-")]
    for label in baselines:
        said = [t for t in texts if label in t.split(" = ") or t == label or t.startswith(label + " (")
                or f" = {label} (" in t or t.startswith(label + " = ")]
        assert len(said) == 1, (tag, label, texts)
    view = convergence_view(get_dataset(key))
    for b in view.baselines:
        twins = [o for o in view.baselines if o is not b and o.mse["final"] == b.mse["final"] and o.n_mlps == b.n_mlps]
        if twins:  # the same estimator under two names: one label names both and says why
            name = b.label.split(" (= ")[0]
            [shared] = [t for t in texts if name in t.split(" = ") or t.startswith(name + " = ")
                        or f" = {name} (" in t]
            assert "(identical " in shared and all(o.label.split(" (= ")[0] in shared for o in twins)


def test_view_toggle_and_highlight_live_in_the_url_and_the_readout_compares_with_sampling(cpage):
    rounds = _embedded_rounds()
    if not rounds:
        pytest.skip("no embedded dataset is baked yet")
    tag, key = rounds[0]
    cpage.goto(f"{cpage.base_url}/convergence?round={tag}&highlight=team:convergence-testers")
    wait_for_dash(cpage)
    entries = cpage.evaluate("() => history.length")
    fig = _figure(cpage)
    assert "highlighted: team:convergence-testers" in fig["names"] or any(
        n.startswith("runs outside") for n in fig["names"])

    # click the highlighted run: the readout states how it compares with sampling at its FLOPs
    point = cpage.evaluate(f"""() => {{
        const gd = document.querySelector('{GRAPH}');
        const i = gd.data.findIndex(t => t.name.startsWith('highlighted'));
        const t = gd.data[i];
        return {{x: t.x[0], y: t.y[0], custom: t.customdata[0]}};
    }}""")
    box = cpage.locator(f"{GRAPH} .nsewdrag").first.bounding_box()
    px = box["x"] + _pixel_x(cpage, point["x"], absolute=False)
    py = box["y"] + _pixel_y(cpage, point["y"], absolute=False)
    cpage.mouse.move(px, py)
    cpage.mouse.click(px, py)
    cpage.wait_for_selector("#convergence-ratio")
    ratio_text = cpage.inner_text("#convergence-ratio")
    ds = get_dataset(key)
    rnd = get_round(tag)
    summary = ds.summary().set_index("index")
    sigma2 = float(summary.loc[ds.indices[:2], "avg_variance"].mean())
    expected = sigma2 * rnd.mc_flops_per_sample / point["x"] / point["y"]
    shown = float(ratio_text.split("x ")[0])
    if "worse" in ratio_text:
        shown = 1 / shown
    assert math.isclose(shown, expected, rel_tol=5e-3), (ratio_text, expected)

    # zooming away from the run pins it to the new frame's edge; a double-click (autorange) brings it back
    budget = get_round(tag).budget
    cpage.evaluate(f"""() => Plotly.relayout(document.querySelector('{GRAPH}'),
        {{'xaxis.range[0]': {math.log10(budget) + 0.1}, 'xaxis.range[1]': {math.log10(budget) + 0.5}}})""")
    cpage.wait_for_function(f"() => document.querySelector('{GRAPH}').data.some("
                            "t => t.name.startsWith('runs outside'))")
    edge = cpage.evaluate(f"""() => document.querySelector('{GRAPH}').data.find(
        t => t.name.startsWith('runs outside')).marker.symbol""")
    assert edge == ["triangle-left"] or edge == "triangle-left" or set(edge) == {"triangle-left"}
    drag = cpage.locator(f"{GRAPH} .nsewdrag").first.bounding_box()
    cpage.mouse.dblclick(drag["x"] + drag["width"] / 2, drag["y"] + drag["height"] / 2)
    cpage.wait_for_function(f"() => document.querySelector('{GRAPH}').data.some("
                            "t => t.name.startsWith('highlighted'))")

    # a zoom of the y axis alone keeps the x range the user sees and pins the run below the new frame
    low = math.log10(point["y"])
    cpage.evaluate(f"""() => Plotly.relayout(document.querySelector('{GRAPH}'),
        {{'yaxis.range[0]': {low + 1}, 'yaxis.range[1]': {low + 2}}})""")
    cpage.wait_for_function(f"() => document.querySelector('{GRAPH}').data.some("
                            "t => t.name.startsWith('runs outside'))")
    edge = cpage.evaluate(f"""() => document.querySelector('{GRAPH}').data.find(
        t => t.name.startsWith('runs outside')).marker.symbol""")
    assert edge == ["triangle-down"] or edge == "triangle-down" or set(edge) == {"triangle-down"}
    cpage.mouse.dblclick(drag["x"] + drag["width"] / 2, drag["y"] + drag["height"] / 2)
    cpage.wait_for_function(f"() => document.querySelector('{GRAPH}').data.some("
                            "t => t.name.startsWith('highlighted'))")

    # the all-layer view rewrites the address in place and changes the y axis
    cpage.get_by_label("all layers").check()
    wait_for_dash(cpage)
    cpage.wait_for_function(f"() => document.querySelector('{GRAPH}').layout.yaxis.title.text.startsWith('all')")
    query = parse_qs(urlparse(cpage.url).query)
    assert query["view"] == ["all"] and query["highlight"] == ["team:convergence-testers"]
    assert query["round"] == [tag]
    # in place: no history entry was added, and a reload opens the same view from the address
    assert cpage.evaluate("() => history.length") == entries
    cpage.reload()
    wait_for_dash(cpage)
    cpage.wait_for_function(f"() => document.querySelector('{GRAPH}').layout.yaxis.title.text.startsWith('all')")
    assert cpage.get_by_label("all layers").is_checked()


@pytest.fixture(scope="module")
def bare_server(tmp_path_factory):
    """A server whose only dataset is a tiny v1-warmup-shaped one with no band and no baselines."""
    from whestboard.data import bake, plan_from_args

    data = tmp_path_factory.mktemp("bare-data")
    bake(data / "tiny-warmup", plan_from_args(round_tag="v1-warmup", width=None, depth=None, n_mlps=None,
                                              n_samples=256, seeds=[101, 202]),
         explicit_seeds=True, show_progress=False)
    state = tmp_path_factory.mktemp("bare-state")
    with serve_app(state, timeout=240, WHESTBOARD_DATA_DIR=str(data)) as base:
        yield base, data / "tiny-warmup", state


def test_a_round_without_data_says_so(browser, bare_server):
    base, _, _ = bare_server  # serves one v1-warmup-shaped dataset and nothing of the other rounds
    with checked_page(browser, base, timeout_ms=120_000) as page:
        page.goto(f"{base}/convergence?round=v2-phase2")
        wait_for_dash(page)
        panel = page.wait_for_selector("#not-found-panel")
        assert "v2-phase2" in panel.inner_text()


def test_missing_baselines_are_computed_in_the_background_with_progress(browser, bare_server, monkeypatch):
    base, path, state = bare_server
    with checked_page(browser, base, timeout_ms=120_000, viewport={"width": 1400, "height": 1000}) as page:
        page.goto(f"{base}/convergence?dataset=tiny-warmup")
        wait_for_dash(page)
        assert "No Monte Carlo band has been measured" in page.inner_text("#convergence-status")
        page.wait_for_selector("#convergence-compute")
        page.click("#convergence-compute")
        page.wait_for_selector("#convergence-baseline-panel", state="hidden")
        page.wait_for_function(f"() => document.querySelector('{GRAPH}').data.some("
                               "t => t.name.startsWith('Covariance propagation'))")
        names = page.evaluate(f"() => document.querySelector('{GRAPH}').data.map(t => t.name)")
        assert any(n.startswith("Mean propagation") for n in names)
    # Kept in the server's store, where every machine reads them; the dataset's folder is never written.
    assert not (path / "band" / "baselines" / "cov.json").exists()
    from whestboard.band import load_baselines
    from whestboard.data import open_dataset
    from whestboard.store import reset_engines

    monkeypatch.setenv("WHESTBOARD_STATE_DIR", str(state))
    reset_engines()
    try:
        assert {"mean", "cov"} <= set(load_baselines(open_dataset(path)))
    finally:
        monkeypatch.undo()
        reset_engines()
