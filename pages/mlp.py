"""One MLP: how its activations spread, die and saturate with depth, and why.

URL: ``/mlp/<dataset>/<index>`` (optionally ``?layer=L&neuron=J`` to open the
drill-down on a neuron, ``&order=value`` for the heatmap's neurons sorted by value). Choosing a
neuron (typed, or clicked in the heatmap or the network) or the order rewrites the address in place
(``components.url_state``), so the view can be shared. Statistics come from ``whestboard.data._mlp_stats`` and are
computed once per (dataset, MLP) and kept in this process and in the cache service's
shared backend; figures are cached per process on top, in the same service.
"""

from __future__ import annotations

import dash
import dash_bootstrap_components as dbc
from dash import ALL, Input, Output, State, callback, ctx, dcc, html, no_update

from components.explorer_panels import damaged_mlp_panel, drilldown_hint, graph_card, mlp_facts, neuron_panel
from components.figures import explorer as figs
from components.selectors import Selection, index_range, not_found_panel, page_url, selector_row
from components.url_state import address_store, keep_address_in_step, query_string
from whestboard.cache import memoize
from whestboard.data import (
    Dataset,
    DatasetError,
    DatasetNotFound,
    HeatmapBins,
    MLPDamaged,
    MLPStats,
    final_histogram,
    get_dataset,
    heatmap_bins,
    neuron_detail,
    stats_cache_key,
    stats_for,
)


def _title(dataset: str | None = None, index: str | None = None, **_) -> str:
    return f"MLP {index} · {dataset} · Whestboard"


dash.register_page(__name__, path_template="/mlp/<dataset>/<index>", name="MLP", nav=False, title=_title)

CLICKABLE = {"type": "mlp-clickable", "plot": ALL}
HEATMAP_ID = {"type": "mlp-clickable", "plot": "heatmap"}


# ---------------------------------------------------------------------------
# data access, cached per process
# ---------------------------------------------------------------------------


class _NotServed(LookupError):
    """The URL names a dataset or MLP that is not served; carries the panel to show."""

    def __init__(self, panel) -> None:
        super().__init__("not served")
        self.panel = panel


def _resolve(dataset: str | None, index) -> tuple[Dataset, int]:
    try:
        ds = get_dataset(dataset or "")
    except DatasetNotFound:
        raise _NotServed(not_found_panel("Dataset not found", f"There is no dataset called {dataset!r}.")) from None
    indices = ds.indices
    hint = (f"Dataset {ds.info.key} serves {len(indices)} MLPs, indices {index_range(ds)}."
            if indices else f"Dataset {ds.info.key} serves no readable MLP.")
    try:
        number = int(str(index))
    except ValueError:
        number = None
    if number in ds.damaged:
        raise _NotServed(html.Div([_crumbs(ds, number), damaged_mlp_panel(ds.damaged[number])]))
    if number is None or number not in set(indices):
        raise _NotServed(not_found_panel("MLP not found", f"{ds.info.key} has no MLP {index!r}.", hint=hint))
    return ds, number


@memoize("mlp-page-figures", max_entries=32, shared=False)
def static_figures(cache_key: tuple, dataset_key: str, index: int) -> dict:
    ds = get_dataset(dataset_key)
    stats = _stats(ds, index)
    counts, edges = _histogram(stats)
    out = {
        "ribbon": figs.ribbon_figure(stats.ribbon),
        "fractions": figs.fractions_figure(stats.dead_fraction, stats.always_on_fraction),
        "histogram": figs.histogram_figure(counts, edges, int(stats.dead[-1].sum())),
        "weights": figs.weight_stats_figure(stats.weights),
    }
    if stats.width <= figs.NETWORK_MAX_WIDTH:
        out["network"] = figs.network_figure(stats.means, ds.weights(index))
    return out


@memoize("mlp-page-heatmaps", max_entries=64, shared=False)
def heatmap_of(cache_key: tuple, dataset_key: str, index: int, ordered: bool) -> tuple[HeatmapBins, object]:
    stats = _stats(get_dataset(dataset_key), index)
    bins = heatmap_bins(stats.means, ordered=ordered)
    return bins, figs.heatmap_figure(bins)


def _stats(ds: Dataset, index: int) -> MLPStats:
    """Statistics from this process, else the cache service's shared backend, else computed."""
    return stats_for(ds, index)


def _histogram(stats):
    return final_histogram(stats.means[-1])


def _ident(ds: Dataset, index: int) -> dict:
    return {"dataset": ds.info.key, "index": index}


def _from_ident(ident: dict) -> tuple[Dataset, int]:
    return _resolve(ident.get("dataset"), ident.get("index"))


# ---------------------------------------------------------------------------
# layout
# ---------------------------------------------------------------------------


def _header(ds: Dataset, index: int) -> html.Div:
    indices = ds.indices
    position = indices.index(index)
    previous = indices[position - 1] if position > 0 else None
    following = indices[position + 1] if position + 1 < len(indices) else None
    nav = [
        dbc.Button("← previous", href=f"/mlp/{ds.info.key}/{previous}", size="sm", color="link",
                   disabled=previous is None, id="mlp-previous"),
        dbc.Button("next →", href=f"/mlp/{ds.info.key}/{following}", size="sm", color="link",
                   disabled=following is None, id="mlp-next"),
    ]
    return html.Div([_crumbs(ds, index), html.Div([html.H2(ds.mlp_name(index), className="me-3 mb-0", id="mlp-name"),
                                       *nav], className="d-flex align-items-center mb-2")])


def _crumbs(ds: Dataset, index: int) -> html.Div:
    return html.Div([dcc.Link("Explorer", href=page_url("/explorer", ds.info.key)), " / ",
                     dcc.Link(ds.info.key, href=page_url("/explorer", ds.info.key, ds.info.round_tag)),
                     f" / MLP {index}"], className="small text-muted")


def _neuron_picker(depth: int, width: int, layer, neuron) -> dbc.InputGroup:
    return dbc.InputGroup(
        [
            dbc.InputGroupText("layer"),
            dbc.Input(id="mlp-layer", type="number", min=1, max=depth, step=1, value=layer,
                      placeholder=f"1–{depth}"),
            dbc.InputGroupText("neuron"),
            dbc.Input(id="mlp-neuron", type="number", min=0, max=width - 1, step=1, value=neuron,
                      placeholder=f"0–{width - 1}"),
        ],
        size="sm",
        className="mb-2",
    )


def _initial_drilldown(ds: Dataset, index: int, layer, neuron):
    chosen = _parse_neuron(layer, neuron)
    if chosen is None:
        return None, None, drilldown_hint()
    return chosen[0], chosen[1], _drilldown_content(ds, index, *chosen)


def _parse_neuron(layer, neuron) -> tuple[int, int] | None:
    try:
        return int(layer), int(neuron)
    except (TypeError, ValueError):
        return None


def _drilldown_content(ds: Dataset, index: int, layer: int, neuron: int):
    stats = _stats(ds, index)
    if not (1 <= layer <= stats.depth and 0 <= neuron < stats.width):
        return dbc.Alert(f"Pick a layer in 1–{stats.depth} and a neuron in 0–{stats.width - 1}.",
                         color="warning", className="py-2", id="drilldown-out-of-range")
    detail = neuron_detail(stats, ds.weights(index), layer - 1, neuron)
    link = page_url(f"/mlp/{ds.info.key}/{index}", None, None, layer=layer, neuron=neuron)
    return html.Div([neuron_panel(detail, stats.depth),
                     html.A("link to this neuron", href=link, className="small")])


def _warm_weights(ds: Dataset, index: int) -> None:
    """Load the weights in the background: statistics may have come from the shared cache
    without them, and the drill-down will want them by the time the user clicks."""
    ds.warm_weights(index)


#: ``order=`` in the address: the heatmap's neurons sorted by value.
ORDERED = "value"


def _page(ds: Dataset, index: int, layer, neuron, order=None) -> html.Div:
    stats = _stats(ds, index)
    _warm_weights(ds, index)
    key = stats_cache_key(ds, index)
    static = static_figures(key, ds.info.key, index)
    ordered = order == ORDERED
    bins, heatmap = heatmap_of(key, ds.info.key, index, ordered)
    layer, neuron, drill = _initial_drilldown(ds, index, layer, neuron)
    order_switch = dbc.Switch(id="mlp-heatmap-order", label="order neurons by value", value=ordered,
                              className="mb-0 small")
    heatmap_note = f"{stats.width} neurons per layer" + (
        f", averaged in bins of {bins.bin_size} for the browser; a click picks the bin's median neuron."
        if bins.bin_size > 1 else "; a click opens the neuron.")
    sections = [
        _header(ds, index),
        selector_row(Selection(ds.info.key, ds.info.round_tag), target_path="/explorer"),
        mlp_facts(ds, index, stats),
        dbc.Row([dbc.Col(graph_card("ribbon", static["ribbon"]), lg=6),
                 dbc.Col(graph_card("fractions", static["fractions"],
                                    note=[figs.GLOSSARY["dead"], " ", figs.GLOSSARY["always-on"]]), lg=6)],
                className="g-3 mb-1"),
        dbc.Row([
            dbc.Col(graph_card("heatmap", heatmap, clickable=True, controls=order_switch, note=heatmap_note), lg=8),
            dbc.Col(dbc.Card(dbc.CardBody([html.H5("Neuron drill-down"),
                                           _neuron_picker(stats.depth, stats.width, layer, neuron),
                                           dcc.Loading(html.Div(drill, id="mlp-drilldown"), delay_show=300)]),
                             className="mb-3 h-100"), lg=4),
        ], className="g-3 mb-1"),
        dbc.Row([dbc.Col(graph_card("histogram", static["histogram"]), lg=5),
                 dbc.Col(graph_card("weights", static["weights"],
                                    note=[figs.GLOSSARY["incoming norm"], " ", figs.GLOSSARY["spectral norm"]]),
                         lg=7)], className="g-3 mb-1"),
    ]
    if "network" in static:
        sections.append(graph_card("network", static["network"], clickable=True,
                                   note="Click a neuron to open it in the drill-down."))
    sections += [dcc.Store(id="mlp-ident", data=_ident(ds, index)), dcc.Download(id="mlp-download"),
                 address_store("mlp-address")]
    return html.Div(sections, id="mlp-page")


def layout(dataset: str | None = None, index: str | None = None, layer=None, neuron=None, order=None, **_query):
    try:
        ds, number = _resolve(dataset, index)
        return _page(ds, number, layer, neuron, order)
    except _NotServed as missing:
        return html.Div([html.H2("MLP explorer"), missing.panel])
    except MLPDamaged as exc:  # found damaged while reading it (its weights, say)
        return html.Div([html.H2("MLP explorer"), damaged_mlp_panel(exc.damage)])
    except DatasetError as exc:
        return dbc.Alert([html.H4("This MLP cannot be shown", className="alert-heading"), html.P(str(exc))],
                         color="danger", id="mlp-error")


# ---------------------------------------------------------------------------
# callbacks: wiring only
# ---------------------------------------------------------------------------


@callback(Output(HEATMAP_ID, "figure"), Input("mlp-heatmap-order", "value"), State("mlp-ident", "data"),
          prevent_initial_call=True)
def _reorder(ordered: bool, ident: dict):
    try:
        ds, index = _from_ident(ident)
        return heatmap_of(stats_cache_key(ds, index), ds.info.key, index, bool(ordered))[1]
    except (_NotServed, DatasetError):  # damaged or gone since the page loaded: a reload says which
        return no_update


@callback(Output("mlp-layer", "value"), Output("mlp-neuron", "value"),
          Input(CLICKABLE, "clickData"), State("mlp-heatmap-order", "value"), State("mlp-ident", "data"),
          prevent_initial_call=True)
def _select_clicked(_clicks, ordered: bool, ident: dict):
    """A heatmap cell stands for its bin's median neuron; a network dot for itself."""
    click = ctx.triggered[0]["value"] if ctx.triggered else None
    if not click or not click.get("points") or not isinstance(ctx.triggered_id, dict):
        return no_update, no_update
    point = click["points"][0]
    if ctx.triggered_id["plot"] == "network":
        layer, neuron = int(point["x"]), int(point["y"])
        return (layer, neuron) if layer >= 1 else (no_update, no_update)
    try:
        ds, index = _from_ident(ident)
        bins, _ = heatmap_of(stats_cache_key(ds, index), ds.info.key, index, bool(ordered))
    except (_NotServed, DatasetError):
        return no_update, no_update
    layer, column = int(point["y"]), int(point["x"])
    return layer, bins.neuron_at(layer - 1, column)


@callback(Output("mlp-drilldown", "children"), Input("mlp-layer", "value"), Input("mlp-neuron", "value"),
          State("mlp-ident", "data"), prevent_initial_call=True)
def _drilldown(layer, neuron, ident: dict):
    chosen = _parse_neuron(layer, neuron)
    if chosen is None:
        return drilldown_hint()
    try:
        ds, index = _from_ident(ident)
        return _drilldown_content(ds, index, *chosen)
    except _NotServed:
        return dbc.Alert("This MLP is no longer served.", color="danger")
    except DatasetError as exc:
        return dbc.Alert(str(exc), color="danger")


@callback(Output("mlp-address", "data"), Input("mlp-layer", "value"), Input("mlp-neuron", "value"),
          Input("mlp-heatmap-order", "value"), prevent_initial_call=True)
def _address(layer, neuron, ordered):
    """The chosen neuron and the heatmap's order in the address, in place (a neuron only once both are whole
    numbers: what the drill-down opens)."""
    chosen = _parse_neuron(layer, neuron)
    return query_string({"layer": chosen[0] if chosen else None, "neuron": chosen[1] if chosen else None,
                         "order": ORDERED if ordered is True else None})


keep_address_in_step("mlp-address")


@callback(Output("mlp-download", "data"), Input({"type": "mlp-csv", "plot": ALL}, "n_clicks"),
          State("mlp-heatmap-order", "value"), State("mlp-ident", "data"), prevent_initial_call=True)
def _download(_n_clicks, _ordered, ident: dict):
    if not isinstance(ctx.triggered_id, dict) or not ctx.triggered or not ctx.triggered[0]["value"]:
        return no_update
    plot = ctx.triggered_id["plot"]
    try:
        ds, index = _from_ident(ident)
        table = plot_table(plot, ds, index)
    except (_NotServed, DatasetError):
        return no_update
    return dcc.send_string(figs.csv_text(table), f"{ds.info.key}-mlp{index}-{plot}.csv", type="text/csv")


def plot_table(plot: str, ds: Dataset, index: int):
    stats = _stats(ds, index)
    if plot == "ribbon":
        return figs.ribbon_table(stats.ribbon)
    if plot == "heatmap":
        return figs.heatmap_table(stats.means, stats.dead, stats.always_on, stats.mean_field.post_mean)
    if plot == "fractions":
        return figs.fractions_table(stats.dead_fraction, stats.always_on_fraction)
    if plot == "histogram":
        return figs.histogram_table(*_histogram(stats))
    if plot == "weights":
        return figs.weights_table(stats.weights)
    if plot == "network":
        return figs.network_edges(ds.weights(index))
    raise ValueError(f"no table for plot {plot!r}")
