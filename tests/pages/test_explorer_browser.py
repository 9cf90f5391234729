"""The explorer in headless Chromium: list, sort, filter, open an MLP, click into a neuron.

The embedded datasets (``live_server``) cover every round that has been baked;
a second, private server with two tiny toy datasets covers what the embedded
data cannot: the node-link view (width <= 16), switching datasets through the
selector, and CSV downloads. Every page fails on a console error.
"""

from __future__ import annotations

import json
from urllib.parse import parse_qs, urlparse

import numpy as np
import pytest

from components.format import sci
from tests.browser_helpers import wait_for_dash
from tests.conftest import checked_page, serve_app
from whestboard.data import datasets_for_round, heatmap_bins
from whestboard.rules import ALL_ROUNDS

HEATMAP = "div[id='{\"plot\":\"heatmap\",\"type\":\"mlp-clickable\"}']"
NETWORK = "div[id='{\"plot\":\"network\",\"type\":\"mlp-clickable\"}']"


def _dataset_of_round(tag: str):
    datasets = datasets_for_round(tag)
    if not datasets:
        pytest.skip(f"no dataset of round {tag} is baked yet (scripts/bake_embedded.sh)")
    return datasets[0]


def _column_texts(page, column: str, rows: int) -> list[str]:
    texts = []
    for k in range(rows):
        cell = page.locator(f".ag-row[row-index='{k}'] [col-id='{column}']").first
        texts.append(cell.inner_text().strip())
    return texts


def _click_heatmap_cell(page, layer: int, column: int, depth: int, columns: int) -> None:
    """Click the centre of the cell (layer, column); layer 1 is the top row."""
    area = page.locator(f"{HEATMAP} .nsewdrag").first
    area.scroll_into_view_if_needed()
    box = area.bounding_box()
    page.mouse.click(box["x"] + (column + 0.5) / columns * box["width"],
                     box["y"] + (layer - 0.5) / depth * box["height"])


def _expect_drilldown(page, ds, index: int, layer: int, neuron: int) -> None:
    page.wait_for_function(
        "([l, n]) => { const a = document.querySelector('#drilldown-layer'), b = document.querySelector('#drilldown-neuron');"
        " return a && b && a.innerText == String(l) && b.innerText == String(n); }",
        arg=[layer, neuron],
    )
    means, _ = ds.truth(index)
    assert sci(float(means[layer - 1, neuron]), 5) in page.locator("#drilldown-facts").inner_text()


# -- embedded data, every round ------------------------------------------------------------


@pytest.mark.parametrize("round_tag", list(ALL_ROUNDS))
def test_list_sort_filter_open_and_drill_down(page, round_tag):
    ds = _dataset_of_round(round_tag)
    summary = ds.summary()
    page.goto(f"{page.base_url}/explorer?round={round_tag}")
    wait_for_dash(page)
    page.wait_for_selector(".ag-row[row-index='0']")
    assert page.locator("#mlp-grid-count").inner_text() == f"{len(summary)} MLPs shown"
    assert ds.info.key in page.locator("#selector-dataset").inner_text()

    # sort by avg_variance: the first rows are the smallest, in order
    page.locator(".ag-header-cell[col-id='avg_variance'] .ag-header-cell-label").click()
    shown = min(5, len(summary))
    page.wait_for_function(
        "(v) => { const c = document.querySelector(\".ag-row[row-index='0'] [col-id='avg_variance']\");"
        " return c && Math.abs(parseFloat(c.innerText) - v) <= 1e-3 * Math.abs(v); }",
        arg=float(np.sort(summary["avg_variance"])[0]),
    )
    values = [float(t) for t in _column_texts(page, "avg_variance", shown)]
    np.testing.assert_allclose(values, np.sort(summary["avg_variance"].to_numpy())[:shown], rtol=1e-3)

    # filter by one MLP's name
    name = str(summary["mlp_name"].iloc[-1])
    expected = int(sum(name in str(n) for n in summary["mlp_name"]))
    page.fill("#mlp-grid-search", name)
    page.wait_for_function("(n) => document.querySelector('#mlp-grid-count').innerText == n + ' MLPs shown'",
                           arg=expected)
    link = page.locator(".ag-row[row-index='0'] [col-id='mlp'] a").first
    assert link.inner_text() == name

    # open it and click a heatmap cell
    link.click()
    page.wait_for_selector("#mlp-page")
    wait_for_dash(page)
    index = int(summary["index"].iloc[-1])
    assert page.url.endswith(f"/mlp/{ds.info.key}/{index}")
    assert page.locator("#mlp-name").inner_text() == name
    page.wait_for_selector(f"{HEATMAP} .nsewdrag")
    means, _ = ds.truth(index)
    bins = heatmap_bins(means)
    layer, column = ds.info.depth // 2 + 1, bins.columns // 3
    _click_heatmap_cell(page, layer, column, ds.info.depth, bins.columns)
    _expect_drilldown(page, ds, index, layer, bins.neuron_at(layer - 1, column))


def test_ordered_heatmap_click_and_typed_neuron(page):
    ds = _dataset_of_round("v1-warmup")
    index = ds.indices[0]
    page.goto(f"{page.base_url}/mlp/{ds.info.key}/{index}")
    wait_for_dash(page)
    page.wait_for_selector(f"{HEATMAP} .nsewdrag")
    page.locator("#mlp-heatmap-order").click()
    page.wait_for_function("(s) => document.querySelector(s).textContent.includes('sorted')", arg=f"{HEATMAP} .xtitle")
    means, _ = ds.truth(index)
    bins = heatmap_bins(means, ordered=True)
    layer, column = ds.info.depth, bins.columns - 1  # the final layer's largest means
    _click_heatmap_cell(page, layer, column, ds.info.depth, bins.columns)
    neuron = bins.neuron_at(layer - 1, column)
    _expect_drilldown(page, ds, index, layer, neuron)
    assert means[layer - 1, neuron] >= np.sort(means[layer - 1])[-bins.bin_size]

    page.fill("#mlp-layer", "2")
    page.fill("#mlp-neuron", "17")
    _expect_drilldown(page, ds, index, 2, 17)


def _query(page) -> dict:
    return {k: v[0] for k, v in parse_qs(urlparse(page.url).query).items()}


def test_the_grids_sort_filters_and_quick_filter_go_in_the_address_and_come_back(page):
    """Every choice the explorer offers is in its address: a sort (twice: descending), a column filter and the
    quick filter, which filters as you type and says so; the address reopens the same rows."""
    ds = _dataset_of_round("v1-warmup")
    summary = ds.summary()
    page.goto(f"{page.base_url}/explorer?dataset={ds.info.key}")
    wait_for_dash(page)
    page.wait_for_selector(".ag-row[row-index='0']")
    assert "as you type" in page.get_attribute("#mlp-grid-search", "placeholder")
    header = page.locator(".ag-header-cell[col-id='avg_variance'] .ag-header-cell-label")
    header.click()
    page.wait_for_function("() => new URLSearchParams(location.search).get('sort') === 'avg_variance'")
    header.click()
    page.wait_for_function("() => new URLSearchParams(location.search).get('sort') === '-avg_variance'")
    threshold = float(np.median(summary["avg_variance"]))
    page.evaluate("([t]) => dash_ag_grid.getApi('mlp-grid').setFilterModel("
                  "{avg_variance: {filterType: 'number', type: 'greaterThan', filter: t}})", [threshold])
    page.wait_for_function("() => new URLSearchParams(location.search).has('filters')")
    above = summary[summary["avg_variance"] > threshold]
    page.wait_for_function("(n) => document.querySelector('#mlp-grid-count').innerText == n + ' MLPs shown'",
                           arg=len(above))
    name = str(above.sort_values("avg_variance")["mlp_name"].iloc[-1])
    page.locator("#mlp-grid-search").press_sequentially(name[:6], delay=30)  # no Enter: it filters as you type
    expected = int(sum(name[:6].lower() in str(n).lower() or name[:6].lower() in str(i)
                       for n, i in zip(above["mlp_name"], above["index"], strict=True)))
    page.wait_for_function("(q) => new URLSearchParams(location.search).get('q') === q", arg=name[:6])
    page.wait_for_function("(n) => document.querySelector('#mlp-grid-count').innerText == n + ' MLPs shown'",
                           arg=expected)
    query = _query(page)
    assert query["dataset"] == ds.info.key and query["sort"] == "-avg_variance" and query["q"] == name[:6]
    assert json.loads(query["filters"]) == {"avg_variance": {"filterType": "number", "type": "greaterThan",
                                                             "filter": threshold}}
    shared = page.url
    page.goto("about:blank")
    page.goto(shared)
    wait_for_dash(page)
    page.wait_for_selector(".ag-row[row-index='0']")
    assert page.input_value("#mlp-grid-search") == name[:6]
    page.wait_for_function("(n) => document.querySelector('#mlp-grid-count').innerText == n + ' MLPs shown'",
                           arg=expected)
    values = [float(t) for t in _column_texts(page, "avg_variance", expected)]
    assert values == sorted(values, reverse=True) and min(values) > threshold * (1 - 1e-3)
    assert page.evaluate("() => dash_ag_grid.getApi('mlp-grid').getColumnState()"
                         ".find(c => c.colId === 'avg_variance').sort") == "desc"
    # what the address holds is checked: an unknown column or filter is left out, the rest applies
    page.goto(f"{page.base_url}/explorer?dataset={ds.info.key}&sort=nope,-noise_floor&filters=%7Bbad")
    wait_for_dash(page)
    page.wait_for_selector(".ag-row[row-index='0']")
    assert page.locator("#mlp-grid-count").inner_text() == f"{len(summary)} MLPs shown"
    assert page.evaluate("() => dash_ag_grid.getApi('mlp-grid').getColumnState()"
                         ".find(c => c.colId === 'noise_floor').sort") == "desc"


def test_the_mlp_pages_layer_neuron_and_order_go_in_the_address(page):
    """A neuron clicked or typed and the heatmap's order are in the address, which reopens them."""
    ds = _dataset_of_round("v1-warmup")
    index = ds.indices[0]
    page.goto(f"{page.base_url}/mlp/{ds.info.key}/{index}")
    wait_for_dash(page)
    page.wait_for_selector(f"{HEATMAP} .nsewdrag")
    page.fill("#mlp-layer", "3")
    page.fill("#mlp-neuron", "41")
    _expect_drilldown(page, ds, index, 3, 41)
    page.wait_for_function("() => location.search === '?layer=3&neuron=41'")
    page.locator("#mlp-heatmap-order").click()
    page.wait_for_function("() => location.search === '?layer=3&neuron=41&order=value'")
    means, _ = ds.truth(index)
    bins = heatmap_bins(means, ordered=True)
    _click_heatmap_cell(page, ds.info.depth, 0, ds.info.depth, bins.columns)
    neuron = bins.neuron_at(ds.info.depth - 1, 0)
    _expect_drilldown(page, ds, index, ds.info.depth, neuron)
    page.wait_for_function("(q) => location.search === q", arg=f"?layer={ds.info.depth}&neuron={neuron}&order=value")
    shared = page.url
    page.goto("about:blank")
    page.goto(shared)
    wait_for_dash(page)
    _expect_drilldown(page, ds, index, ds.info.depth, neuron)
    assert page.locator("#mlp-heatmap-order").is_checked()
    assert "sorted" in page.locator(f"{HEATMAP} .xtitle").text_content()


def test_unknown_dataset_and_mlp_show_not_found(page):
    ds = _dataset_of_round("v1-warmup")
    for path, expected in ((f"/mlp/{ds.info.key}/99999", f"indices {ds.indices[0]}–{ds.indices[-1]}"),
                           ("/mlp/no-such-data/0", "no dataset called 'no-such-data'"),
                           ("/explorer?dataset=no-such-data", ds.info.key)):
        page.goto(page.base_url + path)
        wait_for_dash(page)
        panel = page.wait_for_selector("#not-found-panel")
        assert expected in panel.inner_text()


# -- private server with toy datasets ---------------------------------------------------------


@pytest.fixture(scope="module")
def toy_server(tmp_path_factory):
    from whestboard.data import bake, plan_from_args

    root = tmp_path_factory.mktemp("toy-data")
    bake(root / "toy-a", plan_from_args(round_tag="v1-warmup", width=8, depth=3, n_mlps=2, n_samples=512,
                                        seeds=[41, 42]), show_progress=False, explicit_seeds=True)
    bake(root / "toy-b", plan_from_args(round_tag=None, width=6, depth=2, n_mlps=3, n_samples=512,
                                        seeds=[51, 52, 53]), show_progress=False, explicit_seeds=True)
    state = tmp_path_factory.mktemp("toy-state")
    with serve_app(state, WHESTBOARD_DATA_DIR=str(root), WHESTBOARD_DATASETS="") as base:
        yield base, root


@pytest.fixture()
def toy_page(browser, toy_server):
    base, root = toy_server
    with checked_page(browser, base, accept_downloads=True) as pg:
        pg.data_root = root
        yield pg


def test_network_view_click_opens_the_neuron(toy_page):
    from whestboard.data import open_dataset

    ds = open_dataset(toy_page.data_root / "toy-a", key="toy-a")
    toy_page.goto(f"{toy_page.base_url}/mlp/toy-a/1")
    wait_for_dash(toy_page)
    toy_page.wait_for_selector(f"{NETWORK} .nsewdrag")
    # the dot of layer 2, neuron 5: x runs over layers 0..3, y over neurons 0..7 (top to bottom)
    area = toy_page.locator(f"{NETWORK} .nsewdrag").first
    area.scroll_into_view_if_needed()
    box = area.bounding_box()
    axis_range = "([s, a]) => document.querySelector(s)._fullLayout[a].range"
    x_range = toy_page.evaluate(axis_range, [f"{NETWORK} .js-plotly-plot", "xaxis"])
    y_range = toy_page.evaluate(axis_range, [f"{NETWORK} .js-plotly-plot", "yaxis"])
    x = box["x"] + (2 - x_range[0]) / (x_range[1] - x_range[0]) * box["width"]
    y = box["y"] + (5 - y_range[1]) / (y_range[0] - y_range[1]) * box["height"]
    toy_page.mouse.click(x, y)
    _expect_drilldown(toy_page, ds, 1, 2, 5)


def test_dataset_selector_navigates_and_keeps_the_choice_in_the_url(toy_page):
    toy_page.goto(f"{toy_page.base_url}/explorer?dataset=toy-a")
    wait_for_dash(toy_page)
    toy_page.wait_for_selector(".ag-row[row-index='0']")
    assert toy_page.locator("#mlp-grid-count").inner_text() == "2 MLPs shown"
    toy_page.locator("#selector-dataset").click()
    toy_page.get_by_role("option", name="toy-b", exact=False).click()
    toy_page.wait_for_url("**/explorer?dataset=toy-b")
    toy_page.wait_for_function("() => document.querySelector('#mlp-grid-count').innerText == '3 MLPs shown'")
    assert "custom" in toy_page.locator("#dataset-facts").inner_text()


def test_csv_download_holds_the_plotted_numbers(toy_page):
    from whestboard.data import open_dataset

    ds = open_dataset(toy_page.data_root / "toy-a", key="toy-a")
    toy_page.goto(f"{toy_page.base_url}/mlp/toy-a/0")
    wait_for_dash(toy_page)
    with toy_page.expect_download() as info:
        toy_page.locator("button[id='{\"plot\":\"ribbon\",\"type\":\"mlp-csv\"}']").click()
    download = info.value
    assert download.suggested_filename == "toy-a-mlp0-ribbon.csv"
    lines = open(download.path()).read().strip().splitlines()
    assert lines[0] == "layer,min,p5,p25,median,p75,p95,max"
    means, _ = ds.truth(0)
    medians = [float(line.split(",")[4]) for line in lines[1:]]
    np.testing.assert_allclose(medians, np.median(means.astype(np.float64), axis=1), rtol=1e-8)
