"""Explorer pages without a browser: URL resolution, not-found panels, page sections and CSVs."""

from __future__ import annotations

import io

import numpy as np
import pandas as pd
import pytest

from whestboard.data import bake, plan_from_args


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """Two tiny datasets served as the embedded data: one tagged v1-warmup, one custom."""
    root = tmp_path_factory.mktemp("data")
    bake(root / "toy-warmup", plan_from_args(round_tag="v1-warmup", width=8, depth=3, n_mlps=2,
                                             n_samples=256, seeds=[7, 8]), show_progress=False, explicit_seeds=True)
    bake(root / "a-custom", plan_from_args(round_tag=None, width=6, depth=2, n_mlps=3, n_samples=256,
                                           seeds=[1, 2, 3]), show_progress=False, explicit_seeds=True)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("WHESTBOARD_DATA_DIR", str(root))
        mp.setenv("WHESTBOARD_DATASETS", "")
        mp.setenv("WHESTBOARD_STATE_DIR", str(tmp_path_factory.mktemp("state")))
        import app

        app.the_app()  # registers the pages

        yield root


def _find(component, component_id):
    """The component with ``component_id`` anywhere in a Dash layout tree, or None."""
    if getattr(component, "id", None) == component_id:
        return component
    for child in component._traverse() if hasattr(component, "_traverse") else ():
        if getattr(child, "id", None) == component_id:
            return child
    return None


def _text(component) -> str:
    parts = []

    def walk(node):
        if isinstance(node, str | int | float):
            parts.append(str(node))
        elif isinstance(node, list | tuple):
            for item in node:
                walk(item)
        elif hasattr(node, "children"):
            walk(node.children)

    walk(component)
    return " ".join(parts)


# -- selectors -------------------------------------------------------------------------


def test_resolve_selection_defaults_and_errors(served):
    from components.selectors import resolve_selection

    assert resolve_selection(dataset="a-custom").dataset_key == "a-custom"
    assert resolve_selection(dataset="a-custom").round_tag is None
    chosen = resolve_selection(dataset="toy-warmup", round="v2-phase2")  # the dataset's own round wins
    assert (chosen.dataset_key, chosen.round_tag) == ("toy-warmup", "v1-warmup")
    assert resolve_selection(round="v1-warmup").dataset_key == "toy-warmup"
    bare = resolve_selection()
    assert bare.ok and bare.dataset_key == "toy-warmup"  # a round's data before custom data
    missing = resolve_selection(dataset="nope")
    assert not missing.ok and "'nope'" in missing.problem
    assert "no round" in resolve_selection(round="v9").problem
    assert "v2-phase2" in resolve_selection(round="v2-phase2").problem


def test_navigation_target_keeps_choices_in_the_url(served):
    from components.selectors import navigation_target, page_url

    assert page_url("/explorer", "a b", None) == "/explorer?dataset=a+b"
    on_warmup = {"path": "/explorer", "dataset": "toy-warmup", "round": "v1-warmup"}
    on_custom = {"path": "/lab", "dataset": "a-custom", "round": None}
    assert navigation_target("v1-warmup", "toy-warmup", on_warmup) is None  # values reported on mount
    assert navigation_target(None, "a-custom", on_custom) is None
    assert navigation_target("v1-warmup", "a-custom", on_warmup) == "/explorer?dataset=a-custom"
    assert navigation_target(None, "toy-warmup", on_custom) == "/lab?dataset=toy-warmup&round=v1-warmup"
    assert navigation_target("v1-warmup", "a-custom", on_custom) == "/lab?dataset=toy-warmup&round=v1-warmup"
    assert navigation_target("v2-phase2", "toy-warmup", on_warmup) is None  # nothing served there
    assert navigation_target("v1-warmup", "gone", on_warmup) is None


def test_selector_row_offers_served_datasets_and_disables_empty_rounds(served):
    from components.selectors import DATASET_ID, ROUND_ID, Selection, selector_row

    row = selector_row(Selection("toy-warmup", "v1-warmup"))
    rounds = {o["value"]: o for o in _find(row, ROUND_ID).options}
    assert not rounds["v1-warmup"]["disabled"] and rounds["v2-phase2"]["disabled"]
    datasets = _find(row, DATASET_ID)
    assert {o["value"] for o in datasets.options} == {"toy-warmup", "a-custom"}
    assert datasets.value == "toy-warmup"


# -- explorer list ------------------------------------------------------------------------


def test_explorer_list_shows_every_mlp_with_links_and_noise_floor(served):
    from pages import explorer
    from whestboard.data import get_dataset

    page = explorer.layout(dataset="toy-warmup")
    grid = _find(page, "mlp-grid")
    summary = get_dataset("toy-warmup").summary()
    assert [row["index"] for row in grid.rowData] == list(summary["index"])
    assert grid.rowData[1]["mlp"] == f"[{summary['mlp_name'][1]}](/mlp/toy-warmup/1)"
    assert grid.rowData[0]["mlp_seed"] == "7"  # int63 seeds travel as text
    np.testing.assert_allclose([r["avg_variance"] for r in grid.rowData], summary["avg_variance"])
    assert all(c.get("headerTooltip") for c in grid.columnDefs)
    floor = get_dataset("toy-warmup").noise_floor
    assert float(_text(_find(page, "dataset-noise-floor"))) == pytest.approx(floor, rel=5e-3)


def test_explorer_unknown_dataset_lists_what_is_served(served):
    from pages import explorer

    page = explorer.layout(dataset="nope")
    panel = _find(page, "not-found-panel")
    assert panel is not None
    text = _text(panel)
    assert "nope" in text and "toy-warmup" in text and "a-custom" in text


# -- MLP page -------------------------------------------------------------------------------


@pytest.mark.parametrize("dataset,index,expected", [
    ("nope", "0", "no dataset called 'nope'"),
    ("a-custom", "7", "indices 0–2"),
    ("a-custom", "x1", "indices 0–2"),
])
def test_mlp_page_not_found(served, dataset, index, expected):
    from pages import mlp

    page = mlp.layout(dataset=dataset, index=index)
    panel = _find(page, "not-found-panel")
    assert panel is not None, "expected the not-found panel"
    assert expected in _text(panel)


def test_mlp_page_has_every_section_and_a_network_for_narrow_mlps(served):
    from pages import mlp

    page = mlp.layout(dataset="toy-warmup", index="1")
    for component_id in ("mlp-facts", "mlp-ribbon", "mlp-fractions", "mlp-histogram", "mlp-weights",
                         {"type": "mlp-clickable", "plot": "heatmap"}, {"type": "mlp-clickable", "plot": "network"},
                         "mlp-heatmap-order", "mlp-layer", "mlp-neuron", "mlp-download", "mlp-ident"):
        assert _find(page, component_id) is not None, component_id
    assert _find(page, "drilldown-hint") is not None


def test_mlp_page_opens_the_neuron_named_in_the_url(served):
    from pages import mlp
    from whestboard.data import get_dataset

    page = mlp.layout(dataset="toy-warmup", index="0", layer="2", neuron="5")
    means, _ = get_dataset("toy-warmup").truth(0)
    assert _text(_find(page, "drilldown-layer")) == "2"
    assert _text(_find(page, "drilldown-neuron")) == "5"
    from components.format import sci

    assert sci(float(means[1, 5]), 5) in _text(_find(page, "drilldown-facts"))
    out_of_range = mlp.layout(dataset="toy-warmup", index="0", layer="9", neuron="0")
    assert _find(out_of_range, "drilldown-out-of-range") is not None


@pytest.mark.parametrize("plot,rows", [("ribbon", 3), ("fractions", 3), ("weights", 3), ("heatmap", 24),
                                       ("histogram", 40), ("network", 3 * 8 * 8)])
def test_every_plot_has_a_csv(served, plot, rows):
    from components.figures.explorer import csv_text
    from pages import mlp
    from whestboard.data import get_dataset

    ds = get_dataset("toy-warmup")
    table = pd.read_csv(io.StringIO(csv_text(mlp.plot_table(plot, ds, 1))))
    assert len(table) == rows
    if plot == "heatmap":
        means, _ = ds.truth(1)
        np.testing.assert_array_equal(table["truth_mean"].to_numpy(np.float32).reshape(means.shape), means)


# -- a damaged MLP record -------------------------------------------------------------------


def test_a_damaged_mlp_is_shown_as_damaged_with_its_file_and_reason_on_every_explorer_page(
        served, tmp_path, monkeypatch):
    import shutil

    from pages import explorer, home, mlp
    from whestboard.data import get_dataset, mlp_path

    root = tmp_path / "data"
    shutil.copytree(served / "toy-warmup", root / "toy-warmup")
    record = mlp_path(root / "toy-warmup", 1)
    record.write_bytes(record.read_bytes()[:100])
    monkeypatch.setenv("WHESTBOARD_DATA_DIR", str(root))
    reason = "the archive is truncated or corrupt (BadZipFile: File is not a zip file)"
    ds = get_dataset("toy-warmup")
    assert ds.indices == [0] and ds.damaged[1].reason == reason

    page = mlp.layout(dataset="toy-warmup", index="1")
    assert _find(page, "mlp-page") is None
    assert f"{record} : {reason}" in _text(_find(page, "mlp-damaged"))
    assert _find(mlp.layout(dataset="toy-warmup", index="0"), "mlp-page") is not None

    page = explorer.layout(dataset="toy-warmup")
    assert reason in _text(_find(page, "dataset-damaged"))
    rows = _find(page, "mlp-grid").rowData
    assert [(r["index"], r["damaged"], r["status"]) for r in rows] == [
        (0, False, "ok"), (1, True, f"damaged: {record}: {reason}")]
    assert rows[1]["avg_variance"] is None and rows[1]["mlp"] == f"[{ds.damaged[1].name}](/mlp/toy-warmup/1)"
    assert "status" in [c["field"] for c in _find(page, "mlp-grid").columnDefs]
    assert "1 readable of 2 (1 damaged)" in _text(_find(page, "dataset-mlp-count"))
    assert float(_text(_find(page, "dataset-noise-floor"))) == pytest.approx(ds.truth(0)[1] / 256, rel=5e-3)

    shown = _text(home.layout())
    assert str(record) in shown and reason in shown and "1 readable of 2 (1 damaged)" in shown


def test_a_healthy_dataset_has_no_status_column(served):
    from pages import explorer

    assert "status" not in [c["field"] for c in _find(explorer.layout(dataset="toy-warmup"), "mlp-grid").columnDefs]
