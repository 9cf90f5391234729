"""The paper's figure on /convergence in headless Chromium: the section shows the figure with its sampling
line and one point per cumulant variant (where the measured view puts them), another shape redraws it,
and the browser logs no error.

The app runs on a private state folder and a paper folder baked here by the same core the CLI uses.
"""

from __future__ import annotations

import pytest

from tests.browser_helpers import wait_for_dash
from tests.conftest import checked_page, serve_app
from whestboard.band import measure_paper_shape, paper_view
from whestboard.scoring import CUMULANT_KINDS

pytestmark = pytest.mark.browser
GRAPH = "#paper-graph .js-plotly-plot"


@pytest.fixture(scope="module")
def paper_server(tmp_path_factory):
    folder = tmp_path_factory.mktemp("paper-figure")
    for width in (8, 12):
        measure_paper_shape(width, 3, (0, 1), n_ref=2048, out=folder, log=lambda _: None)
    state = tmp_path_factory.mktemp("paper-state")
    with serve_app(state, timeout=240, WHESTBOARD_PAPER_DIR=str(folder)) as base:
        yield base, folder


@pytest.fixture()
def ppage(browser, paper_server):
    base, _ = paper_server
    with checked_page(browser, base, timeout_ms=60_000, viewport={"width": 1400, "height": 1000}) as pg:
        yield pg


def _traces(page) -> list[dict]:
    page.wait_for_selector(GRAPH)
    return page.evaluate(f"""() => document.querySelector('{GRAPH}').data.map(t => ({{
        name: t.name, x: Array.from(t.x || []), y: Array.from(t.y || []), group: t.legendgroup || null,
        custom: t.customdata ? t.customdata[0] : null}}))""")


def _title(page) -> str:
    return page.evaluate(f"() => document.querySelector('{GRAPH}').layout.title.text")


def test_the_section_shows_the_sampling_line_and_every_variant_where_the_view_puts_it(ppage, paper_server):
    _, folder = paper_server
    view = paper_view(folder)
    ppage.goto(f"{ppage.base_url}/convergence?paper=12x3")
    wait_for_dash(ppage)
    ppage.locator("#paper-section").scroll_into_view_if_needed()
    assert "The paper's figure" in ppage.inner_text("#paper-section")
    traces = _traces(ppage)
    shape = view.shape("12x3")
    assert "12 x 3" in _title(ppage)
    sampling = next(t for t in traces if t["name"] == "sampling: MSE / Var = 1/m")
    for x, y in zip(sampling["x"], sampling["y"], strict=True):
        assert x * y == pytest.approx(shape.flops_per_sample, rel=1e-9)
    drawn = {t["group"]: t for t in traces if t["group"]}
    assert set(drawn) == set(CUMULANT_KINDS) == {p.spec for p in shape.points}
    for point in shape.points:
        trace = drawn[point.spec]
        assert trace["name"].startswith(point.label)
        if trace["custom"] and trace["x"][0] == point.flops:
            assert trace["y"][0] == pytest.approx(point.mse_over_var, rel=1e-12)
    floor = next(t for t in traces if t["name"].startswith("each point's noise floor"))
    assert floor["y"] == pytest.approx([p.noise_floor for p in shape.points])
    # the section's own picture, for a person: the graph is laid out with its legend, not an empty frame
    box = ppage.locator(GRAPH).bounding_box()
    assert box["width"] > 600 and box["height"] > 400
    assert ppage.locator(f"{GRAPH} .legend").count() == 1


def test_choosing_another_shape_redraws_the_figure(ppage):
    ppage.goto(f"{ppage.base_url}/convergence?paper=12x3")
    wait_for_dash(ppage)
    ppage.locator("#paper-section").scroll_into_view_if_needed()
    assert "12 x 3" in _title(ppage)
    ppage.click("#paper-shape")
    ppage.get_by_text("8 x 3 (2 MLPs)", exact=True).click()
    ppage.wait_for_function(f"() => document.querySelector('{GRAPH}').layout.title.text.includes('8 x 3')")
    assert any(t["name"] == "sampling: MSE / Var = 1/m" for t in _traces(ppage))


def test_the_chosen_shape_is_in_the_address_and_a_reload_opens_on_it(ppage):
    """Every choice a page offers is in its address: the section opens on its first shape here (8 x 3: the
    round has none of its own measured), and choosing another writes ``paper=`` (the shape the page opens on
    is left out), which a reload, or the link shared, opens on."""
    ppage.goto(f"{ppage.base_url}/convergence")
    wait_for_dash(ppage)
    ppage.locator("#paper-section").scroll_into_view_if_needed()
    assert "8 x 3" in _title(ppage)
    ppage.click("#paper-shape")
    ppage.get_by_text("12 x 3 (2 MLPs)", exact=True).click()
    ppage.wait_for_function("() => new URLSearchParams(location.search).get('paper') === '12x3'")
    ppage.reload()
    wait_for_dash(ppage)
    ppage.locator("#paper-section").scroll_into_view_if_needed()
    assert "12 x 3" in _title(ppage)
    ppage.click("#paper-shape")
    ppage.get_by_text("8 x 3 (2 MLPs)", exact=True).click()
    ppage.wait_for_function("() => !new URLSearchParams(location.search).has('paper')")
