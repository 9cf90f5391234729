"""The leaderboard's final standings in a real browser, with and without the organizer token."""

from __future__ import annotations

import io
import os
from urllib.parse import parse_qs, urlparse

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

TOKEN = "standings-browser-token"
SUITE_SEED = 424_242_421
TEAMS = {"a-1": "alpha", "b-1": "beta", "c-1": "gamma", "d-1": "delta"}
SCREENSHOTS = os.environ.get("WHESTBOARD_SCREENSHOTS")  # a folder: the views are saved there to look at


@pytest.fixture(scope="module")
def final_server(tmp_path_factory):
    """The app with the token set, the split board imported and a final record built from its per-MLP scores."""
    state = tmp_path_factory.mktemp("standings-state")
    with serve_app(state, WHESTBOARD_ORGANIZER_TOKEN=TOKEN) as base:
        path, _ = helpers.split_board_files(tmp_path_factory.mktemp("standings-files"))
        files = [("files", (p.name, p.read_bytes())) for p in (path, path.with_name(path.stem + ".per_mlp.csv"))]
        imported = requests.post(base + "/api/submissions/import", files=files, timeout=60,
                                 headers={"Authorization": f"Bearer {TOKEN}"})
        assert imported.status_code == 200, imported.text
        per_mlp = pd.read_csv(io.StringIO(requests.get(base + "/api/submissions/per_mlp.csv", timeout=30).text))
        public = per_mlp[per_mlp["split"].fillna("public") == "public"]
        record = final_record_from(public, TEAMS, round_tag="v1-warmup", suite_seed=SUITE_SEED)
        with pytest.MonkeyPatch.context() as mp:  # the server's own store, as the final command writes it
            mp.setenv("WHESTBOARD_DATABASE_URL", f"sqlite:///{state / 'whestboard.sqlite'}")
            reset_engines()
            save_final_record(record)
        reset_engines()
        yield base, record


@pytest.fixture()
def final_page(browser, final_server):
    with checked_page(browser, final_server[0]) as pg:
        yield pg


def _open(page, query: str) -> None:
    page.goto(page.base_url + "/leaderboard" + query)
    wait_for_dash(page)
    page.wait_for_selector("#lb-final-standings")
    wait_for_dash(page)


def _shot(page, name: str) -> None:
    if SCREENSHOTS:
        page.locator("#lb-final").screenshot(path=os.path.join(SCREENSHOTS, name + ".png"))


def test_the_public_sees_the_standings_and_the_shake_up_but_not_the_per_mlp_views(final_page, final_server):
    page, (_, record) = final_page, final_server
    _open(page, "?round=v1-warmup")
    page.wait_for_selector("#lb-final-figure .main-svg")
    assert "Shake-up" in page.locator("#lb-final-figure .gtitle").text_content()
    rows = page.locator("#lb-final-standings tbody tr")
    assert rows.count() == len(record["standings"])
    for i, row in enumerate(sorted(record["standings"], key=lambda r: r["rank"])):
        assert rows.nth(i).locator("td").nth(1).inner_text() == row["team"]
        assert rows.nth(i).locator("td").nth(0).inner_text() == str(row["rank"])
    ties = page.locator("#lb-final-ties").inner_text()
    for tie in record["tie_breaks"]:
        assert ", ".join(tie["teams"]) + ": paired test p" in ties
    assert str(SUITE_SEED) not in page.locator("#lb-final").inner_text()
    _shot(page, "shakeup")

    page.get_by_role("tab", name="Win probability (organizer)").click()
    page.wait_for_selector("#lb-final-refused")
    page.wait_for_function("() => new URLSearchParams(location.search).get('standings') === 'wins'")
    assert not page.locator("#lb-final-figure").is_visible()


def test_the_organizer_opens_the_bootstrap_views_and_the_address_keeps_the_view(final_page, final_server):
    page, (_, record) = final_page, final_server
    _open(page, "?round=v1-warmup&standings=rank")
    page.wait_for_selector("#lb-final-refused")
    page.click("#lb-organizer .accordion-button")
    page.fill("#lb-token", TOKEN)
    page.press("#lb-token", "Enter")
    page.wait_for_selector("#lb-final-figure .main-svg .heatmaplayer, #lb-final-figure .main-svg .hm")
    wait_for_dash(page)
    assert "P(rank ≤ k)" in page.locator("#lb-final-figure .gtitle").text_content()
    assert f"suite seed {SUITE_SEED}" in page.locator("#lb-final-suite").inner_text()
    _shot(page, "rank")
    for tab, title, name in (("Win probability (organizer)", "Win probability", "wins"),
                             ("Fragility (organizer)", "Fragility of the top", "fragility"),
                             ("Shake-up", "Shake-up", "shakeup")):
        page.get_by_role("tab", name=tab).click()
        page.wait_for_function("t => (document.querySelector('#lb-final-figure .gtitle') || {}).textContent"
                               "?.includes(t)", arg=title)
        wait_for_dash(page)
        _shot(page, name + "-organizer")
    assert parse_qs(urlparse(page.url).query).get("standings") is None  # the default view leaves the address
    assert page.locator("#lb-final-standings tbody tr").count() == len(record["standings"])
