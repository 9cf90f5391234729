"""A light table for long rankings: sorted, filtered and paged on the server, drawn as a plain HTML table.

It costs no JavaScript bundle of its own (a ``dbc.Table`` of ``html`` rows), and no response grows with
the field: the page's callback keeps the whole frame on the server and sends one page of rows. The
pieces:

- ``Column``: a field of the rows, its header, what a click on the header sorts by (columns of the
  frame, so a formatted text column sorts by its number), its tooltip, its format.
- ``TableState``: sort, direction, page and filter, read from and written to the address
  (``from_query`` / ``query``) through ``components.url_state``, so every view can be shared.
- ``table_page(frame, columns, state, ...)``: the pure part, data in and rows out: filter, stable sort
  (missing values last either way), one page, and ``page_holding`` the page of a chosen row.
- ``paged_table(table_id, columns, drawn=...)``: the layout (the header with its sort buttons is static),
  drawn with its first page (``DrawnPage``) so that opening a page costs no callback; ``body_rows`` /
  ``sort_labels`` / ``pager_text``: what a callback sends afterwards.

Element ids, for a table ``T``: the body ``T-body``, the filter ``T-filter``, the pager ``T-prev``,
``T-next`` and ``T-pager``; a header's sort button ``{"type": "T-sort", "col": field}``, a clickable
cell ``{"type": "T-click", "col": field, "value": value}`` (``clicked`` reads which). Every row carries
``data-row`` (its place on the page; ``data-key``, what names it, when ``body_rows`` is given a key) and every
cell ``data-col``; a numeric cell (or one naming a
``value`` field) also carries ``data-value``, the number it shows before formatting.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import dash_bootstrap_components as dbc
import pandas as pd
from dash import html

from whestboard.store import finite

#: Rows on one page of a table.
PAGE_SIZE = 25
#: Longest filter text kept (a longer one is cut: it is matched as plain text, never as a pattern).
FILTER_MAX = 200


@dataclass(frozen=True)
class Column:
    """One column: ``field`` of a row shown under ``header``; ``sort_by`` the frame's columns its header sorts
    by (empty: not sortable); ``fmt`` turns the value into text; ``cell`` draws the whole cell from the row
    instead; ``title`` puts the value in the cell's tooltip; ``clickable`` makes the value a button."""

    field: str
    header: str
    sort_by: tuple[str, ...] = ()
    tooltip: str | None = None
    numeric: bool = False
    fmt: Callable[[Any], str] | None = None
    cell: Callable[[Mapping[str, Any]], Any] | None = None
    title: bool = False
    clickable: bool = False
    width: str | None = None  # the column's least width; its width in a table that fits its page (``fit``)
    value: str | None = None  # the row's field whose number the cell carries as data-value (numeric: its own)


@dataclass(frozen=True)
class TableState:
    """What the viewer chose: sort field (None: the frame's own order), direction, page (from 1), filter."""

    sort: str | None = None
    descending: bool = False
    page: int = 1
    filter: str = ""

    @classmethod
    def from_query(cls, columns: Sequence[Column], sort: str | None = None, page: str | int | None = None,
                   filter: str | None = None) -> TableState:  # noqa: A002 - the address's word
        """The state an address asks for (``sort=FIELD`` or ``sort=-FIELD``, ``page=N``, ``filter=TEXT``);
        anything that is not a sortable column or a page number reads as the default."""
        sortable = {c.field for c in columns if c.sort_by}
        descending = isinstance(sort, str) and sort.startswith("-")
        field = sort[1:] if descending else sort
        try:
            number = max(int(page), 1) if page is not None else 1
        except (TypeError, ValueError):
            number = 1
        text = filter.strip()[:FILTER_MAX] if isinstance(filter, str) else ""
        if field not in sortable:
            field, descending = None, False
        return cls(sort=field, descending=descending, page=number, filter=text)

    def query(self) -> dict[str, object]:
        """The address's parameters of this state, defaults left out (None), for ``url_state.query_string``."""
        sort = None if self.sort is None else ("-" if self.descending else "") + self.sort
        return {"sort": sort, "page": self.page if self.page > 1 else None, "filter": self.filter or None}

    def to_store(self) -> dict:
        return {"sort": self.sort, "descending": self.descending, "page": self.page, "filter": self.filter}

    @classmethod
    def from_store(cls, columns: Sequence[Column], data: Mapping | None) -> TableState:
        """A state kept in a ``dcc.Store`` (``to_store``), checked again: the browser could have changed it."""
        data = data if isinstance(data, Mapping) else {}
        sort = data.get("sort")
        sort = ("-" if data.get("descending") is True else "") + sort if isinstance(sort, str) else None
        return cls.from_query(columns, sort, data.get("page"), data.get("filter"))

    def sorted_by(self, field: str) -> TableState:
        """A click on ``field``'s header: sort by it ascending, a second click descending; back to page 1."""
        descending = self.sort == field and not self.descending
        return replace(self, sort=field, descending=descending, page=1)


@dataclass(frozen=True)
class TablePage:
    """One page of a table: its rows (of the frame), which page of how many, how many rows match."""

    rows: pd.DataFrame
    page: int
    n_pages: int
    n_matching: int
    n_total: int
    first: int  # the place of its first row among the matching ones, from 1 (0 when none)


@dataclass(frozen=True)
class DrawnPage:
    """A page of the table as its layout or a callback draws it: the body's rows, the state it was drawn at
    (the sorted header's arrow), the pager's text, and whether it is the first or the last page."""

    rows: list
    state: TableState
    pager: str
    first: bool
    last: bool

    @classmethod
    def of(cls, shown: TablePage, rows: list, state: TableState, noun: str) -> DrawnPage:
        return cls(rows, replace(state, page=shown.page), pager_text(shown, noun), shown.page <= 1,
                   shown.page >= shown.n_pages)


def filtered(frame: pd.DataFrame, text: str, fields: Iterable[str]) -> pd.DataFrame:
    """The rows where any of ``fields`` contains ``text`` (case-insensitive, plain text); all when empty."""
    if not text:
        return frame
    needle = text.casefold()
    keep = pd.Series(False, index=frame.index)
    for field in fields:
        keep |= frame[field].astype(str).str.casefold().str.contains(needle, regex=False, na=False)
    return frame[keep]


def sorted_rows(frame: pd.DataFrame, columns: Sequence[Column], state: TableState) -> pd.DataFrame:
    """The frame in ``state``'s order: a stable sort on the column's keys (ties keep the frame's order),
    missing values last in either direction; the frame's own order when nothing is chosen."""
    column = next((c for c in columns if c.field == state.sort and c.sort_by), None)
    if column is None or frame.empty:
        return frame
    keys = list(column.sort_by)
    return frame.sort_values(keys, ascending=not state.descending, kind="mergesort", na_position="last")


def table_page(frame: pd.DataFrame, columns: Sequence[Column], state: TableState, *,
               filter_fields: Iterable[str] = (), page_size: int = PAGE_SIZE) -> TablePage:
    """The rows ``state`` shows: filtered, sorted, one page of ``page_size`` (a page past the end shows the last)."""
    matching = sorted_rows(filtered(frame, state.filter, filter_fields), columns, state)
    n = len(matching)
    n_pages = max(-(-n // page_size), 1)
    page = min(max(state.page, 1), n_pages)
    start = (page - 1) * page_size
    return TablePage(rows=matching.iloc[start:start + page_size], page=page, n_pages=n_pages, n_matching=n,
                     n_total=len(frame), first=start + 1 if n else 0)


def page_holding(frame: pd.DataFrame, columns: Sequence[Column], state: TableState, field: str, value: Any, *,
                 filter_fields: Iterable[str] = (), page_size: int = PAGE_SIZE) -> int | None:
    """The page of ``state``'s order holding the first row whose ``field`` is ``value``; None when no
    matching row has it."""
    matching = sorted_rows(filtered(frame, state.filter, filter_fields), columns, state)
    hits = (matching[field] == value).to_numpy().nonzero()[0]
    return int(hits[0]) // page_size + 1 if len(hits) else None


def pager_text(page: TablePage, noun: str = "rows") -> str:
    """``page 2 of 7 · rows 26–50 of 160`` (and ``of 3,000`` when a filter left fewer)."""
    if not page.n_matching:
        return f"no {noun} match the filter" if page.n_total else f"no {noun}"
    last = page.first + len(page.rows) - 1
    text = f"page {page.page:,} of {page.n_pages:,} · {noun} {page.first:,}–{last:,} of {page.n_matching:,}"
    if page.n_matching < page.n_total:
        text += f" (filtered from {page.n_total:,})"
    return text


# ---------------------------------------------------------------------------
# drawing
# ---------------------------------------------------------------------------


def paged_table(table_id: str, columns: Sequence[Column], *, filter_placeholder: str = "filter…",
                filter_value: str = "", drawn: DrawnPage | None = None, fit: bool = False) -> html.Div:
    """The table's layout: a filter box, the table with its static header, and the pager below, holding
    ``drawn`` (else empty until a callback fills it).

    ``fit``: the table takes its container's width and no more (a fixed layout: columns get their ``width``,
    those without one share the rest, headers and cells wrap, long words break), so every column shows
    without a scroll on a wide page; a page too narrow for the given widths still scrolls."""
    drawn = drawn or DrawnPage([], TableState(), "", True, True)
    labels = dict(zip([c.field for c in columns], sort_labels(columns, drawn.state, [c.field for c in columns]),
                      strict=True))
    controls = dbc.Row([
        dbc.Col(dbc.Input(id=f"{table_id}-filter", value=filter_value, placeholder=filter_placeholder, size="sm",
                          debounce=True, maxLength=FILTER_MAX, type="search"), width=4),
    ], className="g-2 mb-1")
    table = dbc.Table([html.Thead(html.Tr([_header_cell(table_id, c, labels[c.field], fit) for c in columns])),
                       html.Tbody(drawn.rows, id=f"{table_id}-body")],
                      size="sm", hover=True, bordered=False,
                      className="small mb-1 align-middle" + (" table-fit" if fit else ""))
    pager = html.Div([
        dbc.Button("‹ previous", id=f"{table_id}-prev", size="sm", color="secondary", outline=True,
                   disabled=drawn.first),
        html.Span(drawn.pager, id=f"{table_id}-pager", className="mx-2 small text-muted"),
        dbc.Button("next ›", id=f"{table_id}-next", size="sm", color="secondary", outline=True,
                   disabled=drawn.last),
    ], className="d-flex align-items-center mb-2")
    return html.Div([controls, html.Div(table, className="table-responsive"), pager], id=table_id)


def _header_cell(table_id: str, column: Column, label: str, fit: bool = False) -> html.Th:
    if fit:
        style = {"width": column.width} if column.width else {}
    else:
        style = {"whiteSpace": "nowrap"} | ({"minWidth": column.width} if column.width else {})
    attrs = _given({"data-col": column.field, "title": column.tooltip, "style": style,
                    "className": "text-end" if column.numeric else None})
    if not column.sort_by:
        return html.Th(column.header, **attrs)
    button = html.Button(label, id={"type": f"{table_id}-sort", "col": column.field},
                         className="btn btn-link btn-sm p-0 fw-semibold text-reset text-decoration-none")
    return html.Th(button, **attrs)


def sort_labels(columns: Sequence[Column], state: TableState, fields: Sequence[str]) -> list[str]:
    """The header buttons' texts for ``fields`` (in the order a callback's outputs list them), the sorted one
    with its arrow."""
    headers = {c.field: c.header for c in columns}
    arrow = " ▼" if state.descending else " ▲"
    return [headers[f] + (arrow if f == state.sort else "") for f in fields]


def body_rows(table_id: str, columns: Sequence[Column], rows: Sequence[Mapping[str, Any]], *,
              highlight: Callable[[Mapping[str, Any]], bool] = lambda _row: False,
              highlight_style: Mapping[str, str] | None = None, key: str | None = None) -> list[html.Tr]:
    """The body's rows, one ``html.Tr`` per row (``highlight``ed rows with ``highlight_style``); ``key``: the
    row's field each ``tr`` carries as ``data-key`` (what names the row, whichever cell shows it)."""
    out = []
    for i, row in enumerate(rows):
        style = dict(highlight_style or {}) if highlight(row) else None
        attrs = {"style": style, "data-row": i, "data-key": None if key is None else str(row.get(key))}
        out.append(html.Tr([_cell(table_id, c, row) for c in columns], **_given(attrs)))
    return out


def _cell(table_id: str, column: Column, row: Mapping[str, Any]) -> html.Td:
    value = row.get(column.field)
    attrs: dict[str, Any] = {"data-col": column.field}
    if column.numeric:
        attrs["className"] = "text-end"
    if column.numeric or column.value:
        attrs["data-value"] = finite(row.get(column.value or column.field))
    if column.title and value:
        attrs["title"] = str(value)
    attrs = _given(attrs)
    if column.cell is not None:
        return html.Td(column.cell(row), **attrs)
    text = column.fmt(value) if column.fmt else ("—" if value is None else str(value))
    if column.clickable and value is not None:
        return html.Td(html.Button(text, id={"type": f"{table_id}-click", "col": column.field, "value": value},
                                   className="btn btn-link btn-sm p-0 text-start"), **attrs)
    return html.Td(text, **attrs)


def _given(attrs: dict[str, Any]) -> dict[str, Any]:
    """The attributes that have a value (a None would reach the browser as a prop)."""
    return {key: value for key, value in attrs.items() if value is not None}


def clicked(triggered: Sequence[Mapping[str, Any]]) -> tuple[str, Any] | None:
    """``(field, value)`` of the cell button a click came from (``dash.ctx.triggered``); None when the
    callback fired for anything else (a new page's buttons appearing carry no click)."""
    import json

    for item in triggered or ():
        prop, value = item.get("prop_id", ""), item.get("value")
        if not value or not prop.endswith(".n_clicks") or not prop.startswith("{"):
            continue
        ident = json.loads(prop.rsplit(".", 1)[0])
        if isinstance(ident, dict) and str(ident.get("type", "")).endswith("-click"):
            return ident.get("col"), ident.get("value")
    return None
