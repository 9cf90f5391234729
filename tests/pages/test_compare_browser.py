"""The compare page in a real browser: pick two runs, read the verdict the CLI prints, open the anatomy."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

from components.format import sci
from tests.browser_helpers import wait_for_dash
from tests.conftest import REPO, checked_page, serve_app

DATASET = "v1-warmup"
MLPS = "0:6"  # the fewest MLPs a paired verdict can rest on (whestboard.compare._paired)


def _cli(state, *argv) -> str:
    env = dict(os.environ, WHESTBOARD_STATE_DIR=str(state))
    done = subprocess.run([sys.executable, "-m", "whestboard", *argv], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return done.stdout


def _pick(page, dropdown: str, run_id: str) -> None:
    """Open a dropdown and click the run whose label carries the start of its id (waits for the option)."""
    page.click(dropdown)
    page.get_by_role("option", name=re.compile(run_id[:8])).click()


@pytest.fixture(scope="module")
def scored(tmp_path_factory):
    """A server whose run store holds mean and covariance propagation on the same six MLPs."""
    state = tmp_path_factory.mktemp("compare-state")
    run_ids = [json.loads(_cli(state, "score", "--dataset", DATASET, "--estimator", kind, "--mlps", MLPS,
                               "--json"))["whestboard"]["run_id"] for kind in ("mean", "cov")]
    expected = json.loads(_cli(state, "compare", f"run:{run_ids[0]}", f"run:{run_ids[1]}", "--json"))
    with serve_app(state) as base:
        yield base, run_ids, expected


def test_pick_two_runs_read_the_verdict_and_open_the_anatomy(browser, scored):
    base, (mean_id, cov_id), expected = scored
    with checked_page(browser, base) as page:
        page.goto(base + "/compare")
        wait_for_dash(page)
        entries = page.evaluate("() => history.length")
        _pick(page, "#compare-a", mean_id)
        page.wait_for_function("() => (document.querySelector('#compare-hint') || {}).innerText?.includes('Pick B')")
        wait_for_dash(page)
        _pick(page, "#compare-b", cov_id)  # offered once B's list, filtered by A, has come back
        page.wait_for_selector("#compare-verdict-panel")
        page.wait_for_function("id => new URLSearchParams(location.search).get('b') === 'run:' + id", arg=cov_id)
        assert f"a=run%3A{mean_id}" in page.url or f"a=run:{mean_id}" in page.url
        assert page.evaluate("() => history.length") == entries  # rewritten in place, no entry added
        # The page's numbers are the CLI's: mean A, mean B, A - B and the interval, for both metrics.
        for card, key in (("compare-score", "score"), ("compare-mse", "final_layer_mse")):
            stat = expected[key]
            assert page.inner_text(f"#{card}-0") == sci(stat["mean_a"], 4)
            assert page.inner_text(f"#{card}-1") == sci(stat["mean_b"], 4)
            assert page.inner_text(f"#{card}-2") == sci(stat["mean_difference"], 4)
            assert page.inner_text(f"#{card}-3") == f"[{sci(stat['ci_low'], 4)}, {sci(stat['ci_high'], 4)}]"
            assert page.inner_text(f"#{card}-6") == sci(stat["p_value"], 4)
        assert "Paired on 6 shared MLP(s)" in page.inner_text("#compare-sides")
        assert expected["noise"]["limited_by"] in page.inner_text("#compare-noise")
        page.wait_for_selector("#compare-scatter .main-svg")
        page.wait_for_selector("#compare-intervals .main-svg")
        page.click("#compare-anatomy-open")
        page.wait_for_selector("#compare-anatomy-panel", timeout=60_000)
        for graph in ("compare-per-layer", "compare-by-truth", "compare-shares", "compare-heatmap"):
            page.wait_for_selector(f"#{graph} .main-svg")
        assert page.locator("#compare-worst tbody tr").count() > 0
        wait_for_dash(page)


def test_an_address_with_both_ids_opens_the_verdict_and_a_bad_id_is_a_sentence(browser, scored):
    base, (mean_id, cov_id), expected = scored
    with checked_page(browser, base) as page:
        page.goto(base + f"/compare?a=run:{mean_id}&b=run:{cov_id}")
        page.wait_for_selector("#compare-verdict-panel")
        assert page.inner_text("#compare-score-2") == sci(expected["score"]["mean_difference"], 4)
        wait_for_dash(page)
        page.goto(base + f"/compare?a=run:{mean_id}&b=run:nosuchrun")
        page.wait_for_selector("#compare-error")
        assert "no run 'nosuchrun'" in page.inner_text("#compare-error")
        wait_for_dash(page)


def test_hostile_addresses_are_answered_in_the_page(browser, scored):
    base, (mean_id, _), _ = scored
    with checked_page(browser, base) as page:
        for query in (f"a=run:{mean_id}&a=sub:x&b=base:nowhere:mean", "a=" + "x" * 5000, "a=base:v1-warmup:magic&b=run:1"):
            page.goto(base + "/compare?" + query)
            wait_for_dash(page)
            assert page.locator("#compare-error, #compare-hint").count() == 1
