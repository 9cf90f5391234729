"""The leaderboard in a browser: what priced each score, the mixed-versions warning, re-scoring refused in words."""

from __future__ import annotations

import pandas as pd
import pytest
import requests

from tests.browser_helpers import wait_for_dash
from tests.conftest import checked_page, serve_app
from tests.leaderboard.submissions_helpers import submission_row

pytestmark = pytest.mark.browser
TOKEN = "provenance-organizer-token"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with serve_app(tmp_path_factory.mktemp("provenance-state"), WHESTBOARD_ORGANIZER_TOKEN=TOKEN) as base:
        yield base


@pytest.fixture()
def page(browser, server):
    with checked_page(browser, server) as pg:
        yield pg


def _open(page) -> None:
    page.goto(page.base_url + "/leaderboard?round=v1-warmup")
    wait_for_dash(page)
    page.wait_for_selector("#lb-ranking tbody tr")
    wait_for_dash(page)


#: Every shown ranking row's team, versions and seed protocol (the "Priced with" cell: the versions, then the
#: seed protocol beneath them); each board here fits on the table's first page: see ``_priced``.
PRICED = ("() => Array.from(document.querySelectorAll('#lb-ranking tbody tr'), tr => {"
          " const cell = tr.querySelector('[data-col=priced_with]');"
          " return [tr.querySelector('[data-col=team]').innerText, cell.firstChild.textContent,"
          "         cell.querySelector('.cell-note').innerText.replace(/^seed protocol /, '')]; })")


def _priced(page) -> list[list[str]]:
    """Every ranked team's pricing cells: the board is on one page (the pager says how many teams it has)."""
    rows = page.evaluate(PRICED)
    assert page.locator("#lb-ranking-pager").inner_text().endswith(f"of {len(rows)}"), "the board is paged"
    return rows


def _import(base: str, rows: list[dict], tmp_path) -> None:
    path = tmp_path / "subs.csv"
    pd.DataFrame(rows).to_csv(path, index=False)
    answer = requests.post(base + "/api/submissions/import", files=[("files", (path.name, path.read_bytes()))],
                           headers={"Authorization": f"Bearer {TOKEN}"}, timeout=60)
    assert answer.status_code == 200, answer.text


def test_the_board_shows_what_priced_each_score_and_warns_when_versions_differ(page, tmp_path):
    _open(page)  # the shipped baselines: one pair of versions, no warning
    assert page.locator("#lb-mixed-versions").count() == 0
    shipped = _priced(page)
    assert shipped and {priced for _, priced, _ in shipped} == {"whestbench 0.16.2 · flopscope 0.12.4"}

    old, _ = submission_row("old-flopscope", "zeta", scores=(1e-9, 1e-9), flopscope_version="0.11.0")
    unknown, _ = submission_row("no-versions", "eta", scores=(2e-9, 2e-9))
    del unknown["whestbench_version"], unknown["flopscope_version"]
    _import(page.base_url, [old, unknown], tmp_path)
    _open(page)
    warning = page.locator("#lb-mixed-versions").inner_text()
    assert "ranks together scores priced by different versions" in warning
    assert "whestbench 0.16.2 · flopscope 0.11.0: 1 submission" in warning
    assert "whestbench unknown · flopscope unknown: 1 submission" in warning
    priced = {team: (versions, protocol) for team, versions, protocol in _priced(page)}
    assert priced["zeta"] == ("whestbench 0.16.2 · flopscope 0.11.0", "unknown")
    assert priced["eta"] == ("whestbench unknown · flopscope unknown", "unknown")

    page.click("#lb-organizer .accordion-button")
    page.fill("#lb-rescore-id", "no-versions")
    page.click("#lb-rescore")
    page.wait_for_selector("#lb-rescore-result .alert")
    assert "Refused" in page.locator("#lb-rescore-result").inner_text()  # no token: the server refuses
    page.fill("#lb-token", TOKEN)
    page.press("#lb-token", "Enter")
    wait_for_dash(page)
    page.click("#lb-rescore")
    page.wait_for_selector("#lb-rescore-refused")
    assert "submission no-versions was imported from a file: no package of it is stored here" in \
        page.locator("#lb-rescore-refused").inner_text()
