"""The final's page in a real browser: refused without the organizer token, run with it, standings shown."""

from __future__ import annotations

import pytest

from tests.browser_helpers import wait_for_dash
from tests.conftest import checked_page, serve_app
from tests.final.participants import write_packages

pytestmark = pytest.mark.browser

TOKEN = "final-organizer-token"


@pytest.fixture(scope="module")
def organizer_server(tmp_path_factory):
    with serve_app(tmp_path_factory.mktemp("final-state"), WHESTBOARD_ORGANIZER_TOKEN=TOKEN) as base:
        yield base


@pytest.fixture()
def final_page(browser, organizer_server):
    with checked_page(browser, organizer_server, timeout_ms=240_000) as pg:
        pg.goto(organizer_server + "/final")
        wait_for_dash(pg)
        yield pg


def _fill(page, token: str, nominees: str) -> None:
    page.fill("#final-token", token)
    page.select_option("#final-round", "v1-warmup")
    page.fill("#final-seed", "7")
    page.fill("#final-n", "2")
    page.fill("#final-samples", "1000")
    page.fill("#final-extra", "2")
    page.fill("#final-nominees", nominees)
    page.click("#final-run")


def test_the_final_is_refused_without_the_token(final_page, tmp_path):
    packages = write_packages(tmp_path)
    _fill(final_page, "wrong", f"alpha={packages['mean']}")
    final_page.wait_for_selector("#final-refused")
    assert "Refused" in final_page.locator("#final-refused").inner_text()
    assert final_page.locator("#final-standings").count() == 0


def test_a_path_on_the_server_is_never_a_nominee(final_page, tmp_path):
    packages = write_packages(tmp_path)
    _fill(final_page, TOKEN, f"alpha={packages['mean']}")
    final_page.wait_for_selector("#final-refused")
    refused = final_page.locator("#final-refused").inner_text()
    assert "Nothing started" in refused and "a path on the server is never looked up" in refused


def test_the_drop_zone_takes_packages_only_from_the_organizer(final_page, tmp_path):
    packages = write_packages(tmp_path)
    final_page.set_input_files("#final-upload input[type=file]", str(packages["mean"]))
    final_page.wait_for_selector("#final-upload-refused")
    assert "type the organizer token first" in final_page.locator("#final-upload-refused").inner_text()


def test_an_organizer_runs_a_tiny_final_and_reads_the_standings(final_page, tmp_path):
    packages = write_packages(tmp_path)
    dropped = []
    for team in ("alpha", "beta"):  # the file's name is the team
        (tmp_path / f"{team}.py").write_bytes(packages["mean"].read_bytes())
        dropped.append(str(tmp_path / f"{team}.py"))
    final_page.fill("#final-token", TOKEN)
    final_page.set_input_files("#final-upload input[type=file]", dropped)
    final_page.wait_for_function("() => document.querySelector('#final-uploaded')?.innerText"
                                 ".includes('beta=upload:')")
    assert "alpha=upload:" in final_page.locator("#final-uploaded").inner_text()
    _fill(final_page, TOKEN, "")
    final_page.wait_for_selector("#final-standings")
    table = final_page.locator("#final-standings").inner_text()
    assert "alpha" in table and "beta" in table
    ties = final_page.locator("#final-ties").inner_text()
    assert "alpha, beta" in ties or "beta, alpha" in ties
    assert "shared" in ties and "2 extra MLPs" in ties
    assert "avg_variance / K" in final_page.locator("#final-noise").inner_text()
