"""Explorer: every MLP of the chosen dataset in a sortable, filterable grid.

``/explorer?dataset=KEY`` plus the grid's state: ``sort=FIELD`` (``-FIELD`` descending, several
comma-separated), ``filters=`` (the column filters, AG Grid's filter model as JSON) and ``q=`` (the quick
filter). Sorting, filtering or typing rewrites the address in place (``components.url_state``), so a view
of the grid can be shared; what the address asks for is checked (``GridState``) before the grid applies it.
"""

from __future__ import annotations

import dash
import dash_bootstrap_components as dbc
from dash import Input, Output, State, callback, clientside_callback, dcc, html, no_update

from components.explorer_panels import (
    TEXT_MAX,
    GridState,
    damaged_panel,
    dataset_facts,
    explained,
    grid_fields,
    mlp_grid,
)
from components.figures.explorer import GLOSSARY
from components.selectors import not_found_panel, resolve_selection, selector_row
from components.url_state import address_store, keep_address_in_step, query_string
from whestboard.data import get_dataset, summary_for

dash.register_page(__name__, path="/explorer", name="Explorer", order=1, title="Explorer · Whestboard")

#: The quick filter applies this long after the last key typed: it filters as you type, without a request
#: per key.
QUICK_FILTER_MS = 250


def layout(dataset: str | None = None, round: str | None = None, sort: str | None = None,  # noqa: A002
           filters: str | None = None, q: str | None = None, **_query) -> html.Div:
    selection = resolve_selection(dataset=dataset, round=round)
    if not selection.ok:
        return html.Div([html.H2("MLP explorer"), not_found_panel("Dataset not found", selection.problem)])
    ds = get_dataset(selection.dataset_key)
    summary = summary_for(ds)
    state = GridState.from_query(grid_fields(summary), sort, filters, q)
    return html.Div(
        [
            html.H2("MLP explorer"),
            html.P(
                [
                    "Every MLP of the dataset with its reference statistics. Sort or filter any column, "
                    "click a name to see its layers. Hover a header for what it means; ",
                    explained("E[h]", "E[h]"), ", ", explained("dead", "dead"), " and ",
                    explained("always-on", "always-on"), " are explained the same way.",
                ],
                className="text-muted",
            ),
            selector_row(selection, target_path="/explorer"),
            *([damaged_panel(list(ds.damaged.values()))] if ds.damaged else []),
            dataset_facts(ds),
            dbc.Row(
                [
                    dbc.Col(dbc.Input(id="mlp-grid-search", type="search", size="sm", debounce=QUICK_FILTER_MS,
                                      value=state.quick, maxLength=TEXT_MAX,
                                      placeholder="Filter as you type (any column)…"), width=4),
                    dbc.Col(dbc.Button("Download CSV", id="mlp-grid-csv", size="sm", color="secondary",
                                       outline=True, title="The grid as shown (sorted and filtered) as CSV"),
                            width="auto"),
                    dbc.Col(html.Span(id="mlp-grid-count", className="text-muted small"), width="auto"),
                ],
                className="g-2 align-items-center mb-2",
            ),
            mlp_grid(summary, selection.dataset_key, state),
            html.P(GLOSSARY["noise floor"], className="text-muted small mt-2"),
            dcc.Store(id="explorer-dataset", data=selection.dataset_key),
            address_store("explorer-address"),
        ]
    )


@callback(Output("mlp-grid", "dashGridOptions"), Input("mlp-grid-search", "value"), prevent_initial_call=True)
def _quick_filter(text: str | None):
    patch = dash.Patch()
    patch["quickFilterText"] = text or ""
    return patch


@callback(Output("explorer-address", "data"), Input("mlp-grid", "columnState"), Input("mlp-grid", "filterModel"),
          Input("mlp-grid-search", "value"), State("explorer-dataset", "data"), prevent_initial_call=True)
def _address(column_state, filter_model, quick: str | None, dataset_key: str):
    """The grid's sort, filters and quick filter in the address, in place."""
    try:
        fields = grid_fields(summary_for(get_dataset(dataset_key)))
    except (KeyError, LookupError):  # the dataset is gone since the page opened: leave the address alone
        return no_update
    state = GridState.from_grid(fields, column_state, filter_model, quick)
    return query_string({"dataset": dataset_key, **state.query()})


keep_address_in_step("explorer-address")


@callback(Output("mlp-grid", "exportDataAsCsv"), Input("mlp-grid-csv", "n_clicks"), prevent_initial_call=True)
def _export_csv(n_clicks: int | None) -> bool:
    return bool(n_clicks)


# In the browser: the filtered rows never need a round trip to be counted.
clientside_callback(
    "function(rows) { return rows ? rows.length + ' MLPs shown' : ''; }",
    Output("mlp-grid-count", "children"),
    Input("mlp-grid", "virtualRowData"),
)
