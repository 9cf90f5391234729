"""The light ranking table's pure part: filter, sort and page a frame on the server, state in the address.

Every expectation is computed by brute force (Python's ``sorted`` over plain tuples), never by the
table's own code; the number formats are checked against what d3's ``.3~g`` / ``.3~e`` print.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from components.format import exponent, significant
from components.paged_table import (
    Column,
    TableState,
    body_rows,
    clicked,
    filtered,
    page_holding,
    pager_text,
    sort_labels,
    table_page,
)
from components.url_state import query_string

COLUMNS = [
    Column("rank", "#", sort_by=("rank",), numeric=True),
    Column("team", "Team", sort_by=("team",), clickable=True),
    Column("score_text", "Score", sort_by=("score",), value="score"),
    Column("flops", "FLOPs", sort_by=("flops",), numeric=True, fmt=exponent),
    Column("pair", "Pair", sort_by=("major", "minor")),
    Column("note", "Note", title=True),
]


def _frame(n: int, seed: int = 3) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    flops = 10 ** rng.uniform(6, 12, n)
    flops[rng.random(n) < 0.1] = np.nan  # missing values: last in either direction
    return pd.DataFrame({
        "rank": np.arange(1, n + 1), "team": [f"Team-{i % 97:02d}-{i}" for i in range(n)],
        "score": rng.normal(size=n).round(1),  # many ties: the frame's order must break them
        "flops": flops, "major": rng.integers(0, 3, n), "minor": rng.integers(0, 3, n),
        "note": [f"note {i}" for i in range(n)],
    })


def _brute_order(frame: pd.DataFrame, keys: list[str], descending: bool) -> list[int]:
    """Row positions in order: missing last, ties in the frame's order, the direction on the keys only."""
    records = frame[keys].to_numpy(dtype=float)
    present = [i for i in range(len(frame)) if not any(math.isnan(v) for v in records[i])]
    missing = [i for i in range(len(frame)) if i not in set(present)]
    sign = -1 if descending else 1
    return sorted(present, key=lambda i: (*(sign * v for v in records[i]), i)) + missing


@pytest.mark.parametrize("field,keys", [("score_text", ["score"]), ("flops", ["flops"]), ("pair", ["major", "minor"])])
@pytest.mark.parametrize("descending", [False, True])
def test_every_page_of_a_sorted_frame_is_the_brute_force_order_cut_in_pages(field, keys, descending):
    frame = _frame(530)
    order = _brute_order(frame, keys, descending)
    state = TableState(sort=field, descending=descending)
    seen = []
    for page in range(1, 24):
        shown = table_page(frame, COLUMNS, TableState(sort=field, descending=descending, page=page), page_size=25)
        assert shown.n_pages == 22 and shown.page == min(page, 22) and shown.n_matching == 530
        if page <= 22:
            assert shown.first == (page - 1) * 25 + 1
            seen += shown.rows["rank"].tolist()
    assert seen == [int(frame["rank"].iloc[i]) for i in order]
    assert state.query() == {"sort": ("-" if descending else "") + field, "page": None, "filter": None}


def test_the_filter_is_plain_text_in_any_case_over_the_named_fields_only():
    frame = _frame(300)
    frame.loc[5, "team"] = "a.b*(c"  # pattern characters match themselves
    assert filtered(frame, "A.B*(C", ["team"])["rank"].tolist() == [6]
    expected = [r for r, t in zip(frame["rank"], frame["team"], strict=True) if "team-07-" in t.lower()]
    shown = table_page(frame, COLUMNS, TableState(filter="TEAM-07-"), filter_fields=["team"], page_size=10)
    assert shown.rows["rank"].tolist() == expected[:10] and shown.n_matching == len(expected)
    assert shown.n_total == 300 and pager_text(shown, "teams").endswith(f"of {len(expected)} (filtered from 300)")
    assert filtered(frame, "note 7", ["team"]).empty  # a field not named is not searched
    nothing = table_page(frame, COLUMNS, TableState(filter="zzz"), filter_fields=["team"])
    assert nothing.rows.empty and nothing.n_pages == 1 and pager_text(nothing, "teams") == "no teams match the filter"


def test_a_page_past_the_end_shows_the_last_and_the_page_holding_a_row_is_found():
    frame = _frame(101)
    shown = table_page(frame, COLUMNS, TableState(page=99), page_size=25)
    assert (shown.page, shown.n_pages, shown.rows["rank"].tolist()) == (5, 5, [101])
    assert pager_text(shown, "teams") == "page 5 of 5 · teams 101–101 of 101"
    state = TableState(sort="flops", descending=True)
    order = _brute_order(frame, ["flops"], True)
    for position in (0, 24, 25, 60, 100):
        team = frame["team"].iloc[order[position]]
        page = page_holding(frame, COLUMNS, state, "team", team, page_size=25)
        assert page == position // 25 + 1
        assert team in table_page(frame, COLUMNS, TableState("flops", True, page), page_size=25).rows["team"].tolist()
    assert page_holding(frame, COLUMNS, state, "team", "nobody") is None


def test_half_a_million_rows_are_sorted_on_the_server_and_one_page_leaves_it():
    n = 500_000
    rng = np.random.default_rng(5)
    frame = pd.DataFrame({"rank": np.arange(1, n + 1), "team": [f"t{i}" for i in range(n)],
                          "score": rng.random(n), "flops": rng.random(n), "major": 0, "minor": 0, "note": ""})
    shown = table_page(frame, COLUMNS, TableState(sort="flops", descending=True, page=3), page_size=25)
    top = np.argsort(-frame["flops"].to_numpy(), kind="stable")[50:75]
    assert shown.rows["rank"].tolist() == (top + 1).tolist() and shown.n_pages == 20_000
    rows = body_rows("t", COLUMNS, [{**r, "score_text": f"{r['score']:.3g}"} for r in shown.rows.to_dict("records")])
    assert len(rows) == 25


def test_the_state_reads_an_address_refusing_what_is_not_a_sortable_column_or_a_page():
    assert TableState.from_query(COLUMNS, "-flops", "3", " alpha ") == TableState("flops", True, 3, "alpha")
    assert TableState.from_query(COLUMNS, "note", "x", None) == TableState()  # not sortable, not a number
    assert TableState.from_query(COLUMNS, "-nope", "-4") == TableState()
    assert TableState.from_query(COLUMNS, None, None, "x" * 500).filter == "x" * 200
    state = TableState("team", False, 4, "b&c=d")
    assert TableState.from_store(COLUMNS, state.to_store()) == state
    assert TableState.from_store(COLUMNS, {"sort": "note", "page": "many"}) == TableState()
    assert query_string({"round": "r", **state.query()}) == "?round=r&sort=team&page=4&filter=b%26c%3Dd"
    assert query_string(TableState().query()) == ""  # the defaults stay out of the address
    clicked_twice = state.sorted_by("team")
    assert clicked_twice == TableState("team", True, 1, "b&c=d") and clicked_twice.sorted_by("team").descending is False
    assert state.sorted_by("flops") == TableState("flops", False, 1, "b&c=d")
    assert sort_labels(COLUMNS, clicked_twice, ["flops", "team"]) == ["FLOPs", "Team ▼"]


def test_rows_carry_their_numbers_titles_highlight_and_a_click_names_its_cell():
    rows = [{"rank": 1, "team": "x", "score_text": "1e-3", "score": 1e-3, "flops": None, "pair": "p", "note": "n"},
            {"rank": 2, "team": "y", "score_text": "2e-3", "score": float("nan"), "flops": 2.5e9, "pair": "p",
             "note": ""}]
    first, second = body_rows("t", COLUMNS, rows, highlight=lambda r: r["team"] == "y",
                              highlight_style={"backgroundColor": "#fde2e2"})
    cells = {td.to_plotly_json()["props"]["data-col"]: td.to_plotly_json()["props"] for td in second.children}
    assert first.to_plotly_json()["props"].get("style") is None
    assert second.to_plotly_json()["props"]["style"] == {"backgroundColor": "#fde2e2"}
    assert cells["flops"]["children"] == "2.5e+9" and cells["flops"]["data-value"] == 2.5e9
    assert "data-value" not in cells["score_text"]  # NaN never reaches the page
    assert "title" not in cells["note"]
    first_cells = {td.to_plotly_json()["props"]["data-col"]: td.to_plotly_json()["props"] for td in first.children}
    assert first_cells["note"]["title"] == "n" and first_cells["flops"]["children"] == "—"
    button = first_cells["team"]["children"]
    assert button.id == {"type": "t-click", "col": "team", "value": "x"}
    prop = '{"col":"team","type":"t-click","value":"a.b"}.n_clicks'
    assert clicked([{"prop_id": prop, "value": 1}]) == ("team", "a.b")
    assert clicked([{"prop_id": prop, "value": None}]) is None  # a new page's buttons appearing
    assert clicked([{"prop_id": "lb-team.value", "value": "x"}]) is None


@pytest.mark.parametrize("value,g,e", [
    (1234.5, "1.23e+3", "1.235e+3"), (1.125, "1.13", "1.125e+0"), (12_345_000_000, "1.23e+10", "1.235e+10"), (0.0012345, "0.00123", "1.234e-3"), (123, "123", "1.23e+2"),
    (1e-7, "1e-7", "1e-7"), (0.5, "0.5", "5e-1"), (2.9454, "2.95", "2.945e+0"), (0, "0", "0e+0"),
    (9.996, "10", "9.996e+0"), (99.96, "100", "9.996e+1"), (999.6, "1e+3", "9.996e+2"),
    (1.5e-6, "0.0000015", "1.5e-6"), (-42.42, "-42.4", "-4.242e+1"), (None, "—", "—"), (float("nan"), "—", "—"),
])
def test_numbers_read_as_the_grid_printed_them(value, g, e):
    """The expected texts are what d3-format 3 prints for ``.3~g`` and ``.3~e`` (an exact tie rounds away from
    zero there, as JavaScript's toPrecision and toExponential do)."""
    assert significant(value) == g and exponent(value) == e
