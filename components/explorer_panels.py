"""HTML building blocks of the explorer pages: cards, the MLP grid, the neuron drill-down.

Plain functions from data to Dash components, so the pages stay a list of
sections plus the callbacks that wire them. Every named quantity carries its
plain-language explanation (``components.figures.explorer.GLOSSARY``) as a hover title.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field

import dash_ag_grid as dag
import dash_bootstrap_components as dbc
import pandas as pd
from dash import dcc, html

from components.figures.explorer import GLOSSARY
from components.format import integer, sci
from whestboard.data import DamagedMLP, Dataset, MLPStats, NeuronDetail, summary_for

GRAPH_CONFIG = {"displaylogo": False, "toImageButtonOptions": {"format": "png", "scale": 2}}


def explained(label: str, key: str) -> html.Span:
    """A label whose hover title explains the quantity."""
    return html.Span(label, title=GLOSSARY[key], className="explained",
                     style={"textDecoration": "underline dotted", "cursor": "help"})


def _fact(label, value, *, value_id: str | None = None) -> html.Div:
    return html.Div([html.Div(label, className="text-muted small"),
                     html.Div(value, className="fw-semibold", id=value_id or "")],
                    className="me-4 mb-2")


# ---------------------------------------------------------------------------
# list page
# ---------------------------------------------------------------------------


def mlp_count(ds: Dataset) -> str:
    """How many MLPs a dataset serves: readable ones, of how many held, of how many declared."""
    info, readable, damaged = ds.info, len(ds.indices), len(ds.damaged)
    text = integer(readable) if not damaged else f"{integer(readable)} readable of {integer(readable + damaged)}"
    if not info.complete:
        text += f" of {integer(info.declared_n_mlps)} (still baking)"
    return text + (f" ({damaged} damaged)" if damaged else "")


def dataset_facts(ds: Dataset) -> dbc.Card:
    """Shape, reference size and the noise floor every MSE must be read against."""
    info = ds.info
    mcb = ds.mc_at_bm()
    facts = [
        _fact("Round", info.round_tag or "custom"),
        _fact("Width x depth", info.shape_label),
        _fact("MLPs", mlp_count(ds), value_id="dataset-mlp-count"),
        _fact("Reference samples N_ref", integer(info.n_samples)),
        _fact(explained("mean avg_variance", "avg_variance"), sci(ds.mean_avg_variance)),
        _fact(explained("Noise floor", "noise floor"), sci(ds.noise_floor), value_id="dataset-noise-floor"),
        _fact(html.Span("MC@B", title="Expected final-layer MSE of spending the whole FLOP budget on "
                                      "Monte Carlo sampling (mean avg_variance / samples affordable at B).",
                        style={"textDecoration": "underline dotted", "cursor": "help"}), sci(mcb)),
    ]
    body = [html.Div(facts, className="d-flex flex-wrap")]
    if ds.damaged:
        body.append(html.Div(f"mean avg_variance, noise floor and MC@B are over {ds.aggregate_basis()}.",
                             className="text-muted small", id="dataset-aggregate-basis"))
    return dbc.Card(dbc.CardBody(body), className="mb-3", id="dataset-facts")


def damaged_panel(damaged: list[DamagedMLP], *, panel_id: str = "dataset-damaged", limit: int = 20) -> dbc.Alert:
    """Every damaged MLP with its file, the reason and the fix; the rest of the dataset is served."""
    items = [html.Li([html.Span(f"MLP {d.index}" + (f" ({d.name})" if d.name else ""), className="fw-semibold"),
                      ": ", html.Code(str(d.path)), f": {d.reason}"], className="damaged-mlp")
             for d in damaged[:limit]]
    if len(damaged) > limit:
        items.append(html.Li(f"… and {len(damaged) - limit} more (all of them: /healthz)"))
    return dbc.Alert([
        html.H5(f"{len(damaged)} damaged MLP{'s' if len(damaged) > 1 else ''}: shown as damaged, "
                "left out of every figure", className="alert-heading"),
        html.Ul(items, className="mb-2"),
        html.P(damaged[0].remedy, className="mb-0 small"),
    ], color="warning", id=panel_id)


def damaged_mlp_panel(damage: DamagedMLP) -> dbc.Alert:
    """The MLP page of a damaged MLP: which file, why, and how to repair it."""
    return dbc.Alert([
        html.H4(f"MLP {damage.index}" + (f" ({damage.name})" if damage.name else "") + " is damaged",
                className="alert-heading"),
        html.P(["Its stored reference cannot be read: ", html.Code(str(damage.path)), f": {damage.reason}."],
               id="mlp-damage-reason"),
        html.P(damage.remedy, className="small"),
        html.P("Every other MLP of the dataset is served.", className="mb-0 small"),
    ], color="danger", id="mlp-damaged")


SCI_FORMAT = ("params.value == null ? '' : (params.value != 0 && Math.abs(params.value) < 1e-3 "
              "? d3.format('.3~e')(params.value) : d3.format('.4~g')(params.value))")


def _number_column(field: str, header: str, tooltip: str, fmt: str | None = None, width: int = 118) -> dict:
    formatter = SCI_FORMAT if fmt is None else f"params.value == null ? '' : d3.format('{fmt}')(params.value)"
    return {
        "field": field, "headerName": header, "headerTooltip": tooltip, "type": "numericColumn",
        "filter": "agNumberColumnFilter", "minWidth": width, "valueFormatter": {"function": formatter},
    }


def mlp_grid_rows(summary: pd.DataFrame, dataset_key: str) -> list[dict]:
    """Grid rows; seeds go as strings because int63 does not survive a JS number.

    A damaged MLP's row keeps its link (its page says what is wrong), its
    statistics are empty and ``status`` names the file and the reason.
    """
    rows = summary.copy()
    names = [name if isinstance(name, str) and name else f"MLP {index}"
             for name, index in zip(rows["mlp_name"], rows["index"], strict=True)]
    rows["mlp"] = [f"[{name}](/mlp/{dataset_key}/{index})" for name, index in zip(names, rows["index"], strict=True)]
    rows["mlp_seed"] = ["" if pd.isna(seed) else str(int(seed)) for seed in rows["mlp_seed"]]
    rows["mlp_id"] = [None if pd.isna(v) else int(v) for v in rows["mlp_id"]]
    rows["row_id"] = rows["index"].astype(str)  # AG Grid wants string row ids
    rows["status"] = ["damaged: " + damage if damaged else "ok"
                      for damaged, damage in zip(rows["damaged"], rows["damage"], strict=True)]
    records = rows.drop(columns=["damage"]).to_dict("records")
    for record in records:  # NaN is not JSON: a damaged MLP's statistics are empty cells
        for key, value in record.items():
            if isinstance(value, float) and value != value:
                record[key] = None
    return records


STATUS_COLUMN = {
    "field": "status", "headerName": "status", "filter": "agTextColumnFilter", "minWidth": 90, "maxWidth": 260,
    "tooltipField": "status",
    "headerTooltip": "ok, or damaged with the file and the reason: a damaged MLP's reference cannot be read, "
                     "so it has no statistics and is left out of every figure.",
}


#: The grid's state in the address: ``sort=FIELD`` (``-FIELD`` descending; several comma-separated, in order),
#: ``filters=`` the column filters as compact JSON (AG Grid's filter model), ``q=`` the quick filter.
FILTER_TYPES = {"number": {"equals", "notEqual", "lessThan", "lessThanOrEqual", "greaterThan", "greaterThanOrEqual",
                           "inRange", "blank", "notBlank"},
                "text": {"equals", "notEqual", "contains", "notContains", "startsWith", "endsWith", "blank",
                         "notBlank"}}
TEXT_MAX = 200


@dataclass(frozen=True)
class GridState:
    """What the viewer chose in the grid: the sort (field, descending) in order, the column filters, the quick
    filter. ``from_query`` reads it from the address, checking every part (the address is typed by anyone):
    what is not a column of the grid or a filter AG Grid knows reads as no choice."""

    sort: tuple[tuple[str, bool], ...] = ()
    filters: dict = field(default_factory=dict)
    quick: str = ""

    @classmethod
    def from_query(cls, fields: set[str], sort: str | None, filters: str | None, quick: str | None) -> GridState:
        order = []
        for part in (sort or "").split(",")[:len(fields)]:
            name = part.strip().removeprefix("-")
            if name in fields and name not in {f for f, _ in order}:
                order.append((name, part.strip().startswith("-")))
        return cls(tuple(order), _checked_filters(filters, fields),
                   quick.strip()[:TEXT_MAX] if isinstance(quick, str) else "")

    @classmethod
    def from_grid(cls, fields: set[str], column_state, filter_model, quick) -> GridState:
        """The grid's own ``columnState`` (sort and sortIndex) and ``filterModel``, checked the same way."""
        sorted_columns = [c for c in (column_state if isinstance(column_state, list) else [])
                          if isinstance(c, dict) and c.get("colId") in fields and c.get("sort") in ("asc", "desc")]
        sorted_columns.sort(key=lambda c: c.get("sortIndex") if isinstance(c.get("sortIndex"), int) else 0)
        filters = json.dumps(filter_model) if isinstance(filter_model, dict) else None
        return cls(tuple((c["colId"], c["sort"] == "desc") for c in sorted_columns), _checked_filters(filters, fields),
                   quick.strip()[:TEXT_MAX] if isinstance(quick, str) else "")

    def query(self) -> dict[str, str | None]:
        """The address's parameters (None where nothing is chosen), for ``url_state.query_string``."""
        return {"sort": ",".join(("-" if desc else "") + name for name, desc in self.sort) or None,
                "filters": json.dumps(self.filters, separators=(",", ":"), sort_keys=True) if self.filters else None,
                "q": self.quick or None}


def _checked_condition(spec) -> dict | None:
    """One AG Grid filter condition with only the keys and values it may hold; None if it holds none."""
    if not isinstance(spec, dict) or spec.get("filterType") not in FILTER_TYPES:
        return None
    if isinstance(spec.get("conditions"), list) and spec.get("operator") in ("AND", "OR"):
        conditions = [c for c in map(_checked_condition, spec["conditions"][:2]) if c]
        return {"filterType": spec["filterType"], "operator": spec["operator"], "conditions": conditions} \
            if conditions else None
    if spec.get("type") not in FILTER_TYPES[spec["filterType"]]:
        return None
    out = {"filterType": spec["filterType"], "type": spec["type"]}
    for key in ("filter", "filterTo"):
        value = spec.get(key)
        if spec["filterType"] == "number" and isinstance(value, int | float) and not isinstance(value, bool) \
                and math.isfinite(value):
            out[key] = value
        elif spec["filterType"] == "text" and isinstance(value, str):
            out[key] = value[:TEXT_MAX]
    return out


def _checked_filters(text: str | None, fields: set[str]) -> dict:
    if not isinstance(text, str) or not text or len(text) > 4 * TEXT_MAX * max(len(fields), 1):
        return {}
    try:
        model = json.loads(text)
    except (ValueError, RecursionError):  # RecursionError: brackets nested past what the parser goes (a link of "[[[[")
        return {}
    if not isinstance(model, dict):
        return {}
    checked = {name: _checked_condition(spec) for name, spec in model.items() if name in fields}
    return {name: spec for name, spec in checked.items() if spec}


def grid_fields(summary: pd.DataFrame) -> set[str]:
    """The fields of the grid's columns (what a sort or a filter in the address may name)."""
    return {c["field"] for c in _columns(summary)}


def mlp_grid(summary: pd.DataFrame, dataset_key: str, state: GridState | None = None) -> dag.AgGrid:
    """One row per MLP, sortable and filterable; the name opens the MLP page. ``state``: the sort, filters and
    quick filter the address asks for."""
    state = state or GridState()
    columns = _columns(summary)
    for index, (name, descending) in enumerate(state.sort):
        column = next(c for c in columns if c["field"] == name)
        column.update(sort="desc" if descending else "asc", sortIndex=index)
    return dag.AgGrid(
        id="mlp-grid",
        rowData=mlp_grid_rows(summary, dataset_key),
        columnDefs=columns,
        defaultColDef={"sortable": True, "resizable": True, "floatingFilter": True},
        columnSize="responsiveSizeToFit",
        filterModel=state.filters,
        dashGridOptions={"tooltipShowDelay": 200, "animateRows": False, "rowHeight": 34,
                         "enableCellTextSelection": True, "quickFilterText": state.quick},
        csvExportParams={"fileName": f"{dataset_key}-mlps.csv"},
        getRowId="params.data.row_id",
        getRowStyle={"styleConditions": [{"condition": "params.data.damaged",
                                          "style": {"backgroundColor": "#fdecea"}}]},
        # Rows are virtualised; the grid only grows as tall as a few rows need.
        style={"height": f"min(70vh, {130 + 35 * len(summary)}px)", "width": "100%"},
    )


def _columns(summary: pd.DataFrame) -> list[dict]:
    """The grid's column definitions (fresh dicts: a caller may add a sort to them)."""
    columns = [
        {"field": "index", "headerName": "#", "type": "numericColumn", "filter": "agNumberColumnFilter",
         "minWidth": 80, "maxWidth": 100, "pinned": "left",
         "headerTooltip": "Position of the MLP in the dataset (mlp_index)."},
        {"field": "mlp", "headerName": "MLP", "cellRenderer": "markdown", "filter": "agTextColumnFilter",
         "minWidth": 170, "pinned": "left", "headerTooltip": "The MLP's name; click to open its page."},
        {"field": "mlp_id", "headerName": "id", "type": "numericColumn", "filter": "agNumberColumnFilter",
         "minWidth": 70, "maxWidth": 100, "headerTooltip": "mlp_id as stored in the dataset."},
        {"field": "mlp_seed", "headerName": "seed", "filter": "agTextColumnFilter", "minWidth": 195,
         "headerTooltip": "mlp_seed: weights and reference samples are derived from it (seed protocol 3.0)."},
        _number_column("avg_variance", "avg_variance", GLOSSARY["avg_variance"]),
        _number_column("noise_floor", "noise floor", GLOSSARY["noise floor"] + " (this MLP)"),
        _number_column("final_mean_avg", "final mean", GLOSSARY["final_mean"] + " Mean over neurons."),
        _number_column("final_mean_median", "final median", GLOSSARY["final_mean"] + " Median."),
        _number_column("final_mean_max", "final max", GLOSSARY["final_mean"] + " Largest."),
        _number_column("final_dead_fraction", "final dead", GLOSSARY["final_dead_fraction"] + " "
                       + GLOSSARY["dead"], fmt=".1%", width=100),
        _number_column("dead_fraction", "dead (all)", GLOSSARY["dead_fraction"] + " "
                       + GLOSSARY["dead"], fmt=".1%", width=110),
    ]
    if summary["damaged"].any():  # next to the name, so a damaged row says why without scrolling
        columns.insert(2, dict(STATUS_COLUMN))
    return columns


# ---------------------------------------------------------------------------
# MLP page
# ---------------------------------------------------------------------------


def graph_card(plot: str, figure, *, clickable: bool = False, note=None, controls=None) -> dbc.Card:
    """A figure with its CSV button; PNG comes from the plotly toolbar."""
    graph_id = {"type": "mlp-clickable", "plot": plot} if clickable else f"mlp-{plot}"
    header = html.Div(
        # ``controls or []`` would drop a childless component: Dash components define __len__.
        [html.Div(controls if controls is not None else [], className="me-auto"),
         dbc.Button("CSV", id={"type": "mlp-csv", "plot": plot}, size="sm", color="secondary", outline=True,
                    title="Download the numbers behind this plot as CSV (PNG: camera icon in the plot toolbar)")],
        className="d-flex align-items-center mb-1",
    )
    body = [header, dcc.Graph(id=graph_id, figure=figure, config=GRAPH_CONFIG)]
    if note is not None:
        body.append(html.Div(note, className="text-muted small"))
    return dbc.Card(dbc.CardBody(body), className="mb-3 h-100")


def mlp_facts(ds: Dataset, index: int, stats: MLPStats) -> dbc.Card:
    final = stats.means[-1]
    row = summary_for(ds).set_index("index").loc[index]
    facts = [
        _fact("Index / id", f"{index} / {row['mlp_id']}"),
        _fact("Seed", str(row["mlp_seed"])),
        _fact(explained("avg_variance", "avg_variance"), sci(stats.avg_variance)),
        _fact(explained("Noise floor (this MLP)", "noise floor"), sci(stats.noise_floor), value_id="mlp-noise-floor"),
        _fact(explained("Noise floor (dataset)", "noise floor"), sci(ds.noise_floor)),
        _fact(explained("final-layer mean E[h]", "E[h]"), sci(float(final.mean()))),
        _fact(explained("dead neurons", "dead"), f"{stats.dead.mean():.1%}"),
        _fact(explained("always-on neurons", "always-on"), f"{stats.always_on.mean():.1%}"),
    ]
    return dbc.Card(dbc.CardBody(html.Div(facts, className="d-flex flex-wrap")), className="mb-3",
                    id="mlp-facts")


def _neuron_class(detail: NeuronDetail) -> dbc.Badge:
    if detail.dead:
        return dbc.Badge("dead", color="secondary", title=GLOSSARY["dead"], className="ms-2")
    if detail.always_on:
        return dbc.Badge("always-on", color="warning", title=GLOSSARY["always-on"], className="ms-2")
    return dbc.Badge("kinked", color="info", className="ms-2",
                     title="Neither dead nor always-on: the ReLU clips it on part of the inputs, "
                           "which is where mean-field estimates struggle most.")


def _connection_table(title: str, connections, *, other_layer: str, contribution: bool) -> html.Div:
    header = [html.Th("neuron"), html.Th("weight"), html.Th(f"E[h] ({other_layer})")]
    if contribution:
        header.append(html.Th("w · E[h]", title="This input's contribution to the pre-activation mean E[z]."))
    rows = []
    for c in connections:
        cells = [html.Td(c.neuron), html.Td(f"{c.weight:+.4f}"), html.Td(sci(c.mean, 4))]
        if contribution:
            cells.append(html.Td(f"{c.weight * c.mean:+.4g}"))
        rows.append(html.Tr(cells))
    return html.Div([html.Div(title, className="fw-semibold small mt-2"),
                     dbc.Table([html.Thead(html.Tr(header)), html.Tbody(rows)], size="sm", className="mb-1")])


def neuron_panel(detail: NeuronDetail, depth: int) -> html.Div:
    """What the reference, the exact ReLU identity and the mean field say about one neuron."""
    layer = detail.layer + 1
    error = detail.mf_post_mean - detail.truth_mean
    rows = [
        (explained("E[h] (reference)", "E[h]"), sci(detail.truth_mean, 5)),
        (html.Span("E[z] = Σ W·E[h_prev] (reference)", title="Pre-activation mean, exact from the reference "
                   "means and the weights (the pre-activation is linear in the previous layer)."),
         sci(detail.reference_pre_mean, 5)),
        (explained("clipped E[max(−z, 0)]", "clipped"), sci(detail.clipped, 4)),
        (explained("mean-field E[h]", "mean field"), sci(detail.mf_post_mean, 5)),
        (html.Span("mean-field error", title="Mean-field prediction minus reference: what the "
                   "mean-propagation baseline gets wrong on this neuron."), f"{error:+.4g}"),
        (explained("mean-field pre-activation mean", "mean field"), sci(detail.mf_pre_mean, 5)),
        (explained("mean-field pre-activation variance", "mean field"), sci(detail.mf_pre_var, 5)),
        (html.Span("mean-field P(z > 0)", title="Chance the neuron fires if its pre-activation were "
                   "Gaussian with the mean-field mean and variance: Phi(mean / std)."),
         f"{detail.mf_active_probability:.4f}"),
    ]
    facts = dbc.Table(html.Tbody([html.Tr([html.Th(k, className="fw-normal"), html.Td(v)]) for k, v in rows]),
                      size="sm", className="mb-1", id="drilldown-facts")
    source = "input x" if detail.layer == 0 else f"layer {layer - 1}"
    parts = [
        html.H5(["Layer ", html.Span(layer, id="drilldown-layer"), ", neuron ",
                 html.Span(detail.neuron, id="drilldown-neuron"), _neuron_class(detail)]),
        facts,
        _connection_table(f"Largest incoming weights (from {source})", detail.incoming,
                          other_layer=source, contribution=True),
    ]
    if detail.outgoing:
        parts.append(_connection_table(f"Largest outgoing weights (to layer {layer + 1})", detail.outgoing,
                                       other_layer=f"layer {layer + 1}", contribution=False))
    else:
        parts.append(html.Div(f"Final layer ({depth}): no outgoing weights.", className="text-muted small"))
    return html.Div(parts, id="drilldown-detail")


def drilldown_hint() -> html.Div:
    return html.Div("Click a heatmap cell (or a neuron in the network view), or type a layer and neuron "
                    "above, to see that neuron in detail.", className="text-muted", id="drilldown-hint")
