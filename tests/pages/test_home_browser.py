"""The home page lists every served dataset and renders without browser errors."""

from __future__ import annotations

from tests.browser_helpers import wait_for_dash
from whestboard.data import served_datasets


def test_home_lists_every_dataset(page):
    page.goto(page.base_url + "/")
    wait_for_dash(page)
    page.wait_for_selector("#datasets-table")
    rows = page.locator("#datasets-table tbody tr")
    keys = sorted(served_datasets())
    assert rows.count() == len(keys)
    text = page.locator("#datasets-table").inner_text()
    for key in keys:
        assert key in text
    assert page.locator("#rounds-table tbody tr").count() == 3


def test_unknown_path_shows_not_found(page):
    page.goto(page.base_url + "/no-such-page")
    wait_for_dash(page)
    page.wait_for_selector("#not-found")
