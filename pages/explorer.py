"""Explorer: every MLP of the chosen dataset in a sortable, filterable grid."""

from __future__ import annotations

import dash
import dash_bootstrap_components as dbc
from dash import Input, Output, callback, clientside_callback, html

from components.explorer_panels import damaged_panel, dataset_facts, explained, mlp_grid
from components.figures.explorer import GLOSSARY
from components.selectors import not_found_panel, resolve_selection, selector_row
from whestboard.data import get_dataset, summary_for

dash.register_page(__name__, path="/explorer", name="Explorer", order=1, title="Explorer · Whestboard")


def layout(dataset: str | None = None, round: str | None = None, **_query) -> html.Div:  # noqa: A002
    selection = resolve_selection(dataset=dataset, round=round)
    if not selection.ok:
        return html.Div([html.H2("MLP explorer"), not_found_panel("Dataset not found", selection.problem)])
    ds = get_dataset(selection.dataset_key)
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
                    dbc.Col(dbc.Input(id="mlp-grid-search", type="search", size="sm", debounce=True,
                                      placeholder="Quick filter (any column)…"), width=4),
                    dbc.Col(dbc.Button("Download CSV", id="mlp-grid-csv", size="sm", color="secondary",
                                       outline=True, title="The grid as shown (sorted and filtered) as CSV"),
                            width="auto"),
                    dbc.Col(html.Span(id="mlp-grid-count", className="text-muted small"), width="auto"),
                ],
                className="g-2 align-items-center mb-2",
            ),
            mlp_grid(summary_for(ds), selection.dataset_key),
            html.P(GLOSSARY["noise floor"], className="text-muted small mt-2"),
        ]
    )


@callback(Output("mlp-grid", "dashGridOptions"), Input("mlp-grid-search", "value"), prevent_initial_call=True)
def _quick_filter(text: str | None):
    patch = dash.Patch()
    patch["quickFilterText"] = text or ""
    return patch


@callback(Output("mlp-grid", "exportDataAsCsv"), Input("mlp-grid-csv", "n_clicks"), prevent_initial_call=True)
def _export_csv(n_clicks: int | None) -> bool:
    return bool(n_clicks)


# In the browser: the filtered rows never need a round trip to be counted.
clientside_callback(
    "function(rows) { return rows ? rows.length + ' MLPs shown' : ''; }",
    Output("mlp-grid-count", "children"),
    Input("mlp-grid", "virtualRowData"),
)
