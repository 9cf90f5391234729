"""The lab runs mean propagation on an embedded MLP and shows the grader's numbers, in a real browser."""

from __future__ import annotations

import pytest

from tests.browser_helpers import wait_for_dash
from whestboard import registry

DATASET = "v1-warmup"


@pytest.fixture(scope="module")
def warmup():
    served = registry.datasets()
    if DATASET not in served:
        pytest.fail(f"embedded dataset {DATASET} is not served (is data/{DATASET} baked?)")
    return served[DATASET]


def _run(page, mlps: str, estimator_label: str | None = None) -> None:
    page.fill("#lab-mlps", mlps)
    page.locator("#lab-mlps").press("Tab")
    if estimator_label:
        page.click("#lab-estimator")
        page.get_by_text(estimator_label, exact=True).click()
    page.click("#lab-run")


def test_mean_propagation_run_shows_results_and_per_layer_plot(page, warmup):
    index = warmup.indices[0]
    page.goto(page.base_url + f"/lab?dataset={DATASET}")
    wait_for_dash(page)
    _run(page, str(index))
    page.wait_for_selector("#lab-result-panel", timeout=90_000)
    page.wait_for_selector("#lab-per-layer-plot .main-svg")
    page.wait_for_selector("#lab-budget-gauge .main-svg")
    page.wait_for_selector("#lab-flop-breakdown .main-svg")
    table = page.locator("#lab-mlp-table tbody tr")
    assert table.count() == 1
    row = table.first.inner_text()
    assert warmup.mlp_name(index) in row and "ok" in row
    assert "noise floor" in page.locator("#lab-card-mse").inner_text()
    assert "sampling" in page.locator("#lab-card-mc").inner_text()
    # v1-warmup predates dtype-aware billing: the page says how this run was metered instead.
    assert "flopscope" in page.locator("#lab-billing-note").inner_text()
    # The per-layer plot draws one curve per layer point of the round's depth.
    page.wait_for_selector("#lab-heatmap .main-svg")
    page.wait_for_selector("#lab-scatter .main-svg")
    wait_for_dash(page)


def test_repeat_is_answered_from_the_store_and_bad_input_is_a_sentence(page, warmup):
    index = warmup.indices[-1]
    page.goto(page.base_url + f"/lab?dataset={DATASET}&mlps={index}")
    wait_for_dash(page)
    page.click("#lab-run")
    page.wait_for_selector("#lab-result-panel", timeout=90_000)
    wait_for_dash(page)
    page.click("#lab-run")
    page.wait_for_function(
        "() => (document.querySelector('#lab-card-compute') || {}).innerText?.includes('served from the run store')",
        timeout=10_000,
    )
    _run(page, "999")
    page.wait_for_selector("#lab-error")
    assert "not in this dataset" in page.locator("#lab-error").inner_text()
    wait_for_dash(page)
