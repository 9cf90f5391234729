"""A team name holding plotly's HTML subset, imported as any submission is, reads as text in every figure
of the leaderboard: the scatter's and the timeline's highlight, the team's history, public against private,
and the final standings' four views. No ``<a>`` from the name in any figure's SVG, no text restyled by it,
and the name's literal characters where it is shown."""

from __future__ import annotations

import io
from urllib.parse import quote

import pandas as pd
import pytest
import requests

from tests.browser_helpers import wait_for_dash
from tests.conftest import checked_page, serve_app
from tests.leaderboard import submissions_helpers as helpers
from tests.leaderboard.standings_helpers import final_record_from
from whestboard.leaderboard import save_final_record
from whestboard.store import reset_engines

pytestmark = pytest.mark.browser

TOKEN = "names-browser-token"
HOSTILE = ('<a href="https://evil.example/">link</a><span style="font-size:48px;color:red">BIG</span>'
           '<b>bold</b><br>end')
TEAMS = {"a-1": HOSTILE, "b-1": "beta", "c-1": "gamma", "d-1": "delta"}

#: What the name could make of a figure's SVG: links, and text it restyled.
SVG_PROBE = """sel => {
    const svg = Array.from(document.querySelectorAll(sel + ' .main-svg'));
    const all = q => svg.flatMap(s => Array.from(s.querySelectorAll(q)));
    return {
        links: all('a').map(a => a.getAttribute('href') || a.getAttribute('xlink:href')),
        restyled: all('[style]').filter(e => /48px|color:\\s*red|fill:\\s*red/.test(e.getAttribute('style'))).length,
        bold: all('tspan').filter(t => (t.getAttribute('style') || '').includes('font-weight:bold')
                                     && t.textContent === 'bold').length,
        texts: all('text').map(t => t.textContent),
    };
}"""


@pytest.fixture(scope="module")
def named_server(tmp_path_factory):
    """The split board with one team renamed to the hostile name, imported through the API, and a final
    record over its teams."""
    state = tmp_path_factory.mktemp("names-state")
    with serve_app(state, WHESTBOARD_ORGANIZER_TOKEN=TOKEN) as base:
        path, _ = helpers.split_board_files(tmp_path_factory.mktemp("names-files"))
        table = pd.read_csv(path)
        table.loc[table["team"] == "alpha", "team"] = HOSTILE
        table.to_csv(path, index=False)
        files = [("files", (p.name, p.read_bytes())) for p in (path, path.with_name(path.stem + ".per_mlp.csv"))]
        imported = requests.post(base + "/api/submissions/import", files=files, timeout=60,
                                 headers={"Authorization": f"Bearer {TOKEN}"})
        assert imported.status_code == 200, imported.text
        served = pd.read_csv(io.StringIO(requests.get(base + "/api/submissions.csv", timeout=30).text))
        assert HOSTILE in set(served["team"])  # stored as typed: the store keeps text, the figures escape it
        per_mlp = pd.read_csv(io.StringIO(requests.get(base + "/api/submissions/per_mlp.csv", timeout=30).text))
        public = per_mlp[per_mlp["split"].fillna("public") == "public"]
        record = final_record_from(public, TEAMS, round_tag="v1-warmup", suite_seed=11)
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv("WHESTBOARD_DATABASE_URL", f"sqlite:///{state / 'whestboard.sqlite'}")
            reset_engines()
            save_final_record(record)
        reset_engines()
        yield base


@pytest.fixture()
def named_page(browser, named_server):
    with checked_page(browser, named_server, timeout_ms=60_000) as pg:
        yield pg


def _probe(page, selector: str) -> dict:
    page.wait_for_selector(selector + " .main-svg")
    found = page.evaluate(SVG_PROBE, selector)
    assert found["links"] == [], f"{selector}: the name became a link: {found['links']}"
    assert found["restyled"] == 0 and found["bold"] == 0, f"{selector}: the name restyled text"
    return found


def _hover_the_name(page, selector: str) -> str:
    """Hover the point whose hover names the team (``customdata[0]``); the hover label's text."""
    page.evaluate("""sel => {
        const gd = document.querySelector(sel + ' .js-plotly-plot');
        const curve = gd.data.findIndex(t => (t.customdata || []).some(row => String(row[0]).includes('evil')));
        const point = gd.data[curve].customdata.findIndex(row => String(row[0]).includes('evil'));
        window.Plotly.Fx.hover(gd, [{curveNumber: curve, pointNumber: point}]);
    }""", selector)
    page.wait_for_selector(selector + " .hoverlayer .hovertext")
    found = page.evaluate(SVG_PROBE, selector)
    assert found["links"] == [] and found["restyled"] == 0 and found["bold"] == 0, "the hover label holds markup"
    return page.locator(selector + " .hoverlayer .hovertext").first.text_content()


def test_a_team_named_in_plotlys_html_reads_as_text_in_every_leaderboard_figure(named_page):
    page = named_page
    page.goto(page.base_url + "/leaderboard?round=v1-warmup&team=" + quote(HOSTILE, safe=""))
    wait_for_dash(page)
    scatter = _probe(page, "#lb-scatter")
    assert f"team: {HOSTILE}" in scatter["texts"]  # the legend entry, character for character

    page.locator("#lb-timeline").scroll_into_view_if_needed()
    page.wait_for_function("() => (document.querySelector('#lb-timeline .js-plotly-plot') || {}).data?.length > 2")
    wait_for_dash(page)
    timeline = _probe(page, "#lb-timeline")
    assert f"team: {HOSTILE}" in timeline["texts"] and f"team: {HOSTILE}, best so far" in timeline["texts"]

    history = _probe(page, "#lb-history")
    assert f"{HOSTILE}: score over time and best so far" in history["texts"]

    page.click("#lb-organizer .accordion-button")
    page.fill("#lb-token", TOKEN)
    page.press("#lb-token", "Enter")
    page.wait_for_function("() => document.querySelector('#lb-pubpriv .js-plotly-plot')?.data?.length > 2")
    wait_for_dash(page)
    pubpriv = _probe(page, "#lb-pubpriv")
    assert f"team: {HOSTILE}" in pubpriv["texts"]
    assert HOSTILE in _hover_the_name(page, "#lb-pubpriv")  # a hover template filled with the name

    for tab, title in (("Shake-up", "Shake-up"), ("P(rank ≤ k) (organizer)", "P(rank ≤ k)"),
                       ("Win probability (organizer)", "Win probability"),
                       ("Fragility (organizer)", "Fragility of the top")):
        page.get_by_role("tab", name=tab).click()
        page.wait_for_function("t => (document.querySelector('#lb-final-figure .gtitle') || {}).textContent"
                               "?.includes(t)", arg=title)
        wait_for_dash(page)
        found = _probe(page, "#lb-final-figure")
        if tab == "Shake-up":
            assert f"team: {HOSTILE}" in found["texts"], tab
        else:  # the teams are the heatmaps' and the fragility's tick labels
            assert HOSTILE in found["texts"], tab
