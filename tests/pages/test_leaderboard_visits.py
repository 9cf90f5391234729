"""Opening the leaderboard as the browser opens it: what each request reads from the store, cold and warm.

A visit is the page, the app's layout and the page's layout (the router's callback). The page's own
callbacks wait for the viewer's first change, so those three are the whole visit; a warm one (the same
address again, nothing written since) asks the store only its revision, once per request.
"""

from __future__ import annotations

import json
from contextlib import contextmanager

import pytest
from sqlalchemy import event
from sqlalchemy.engine import Engine

from tests.leaderboard import submissions_helpers as helpers
from tests.pages.served_app import app_on_fresh_store

ADDRESS = ("/leaderboard", "?round=v1-warmup&team=beta")
REVISION_TABLE = "whestboard_store_meta"


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    folder = tmp_path_factory.mktemp("lb-visits")
    with app_on_fresh_store(folder) as (http, _):
        helpers.split_board(folder / "files")
        yield http


@contextmanager
def statements():
    """Every SQL statement any engine of this process sends meanwhile, whitespace folded."""
    seen: list[str] = []

    def note(_conn, _cursor, statement, _parameters, _context, _many):
        seen.append(" ".join(statement.split()))

    event.listen(Engine, "before_cursor_execute", note)
    try:
        yield seen
    finally:
        event.remove(Engine, "before_cursor_execute", note)


def _router_payload(path: str, search: str) -> dict:
    return {"output": ".._pages_content.children..._pages_store.data..",
            "outputs": [{"id": "_pages_content", "property": "children"}, {"id": "_pages_store", "property": "data"}],
            "inputs": [{"id": "_pages_location", "property": "pathname", "value": path},
                       {"id": "_pages_location", "property": "search", "value": search}],
            "state": [], "changedPropIds": ["_pages_location.pathname"]}


def _visit(http) -> tuple[list[list[str]], dict]:
    """The visit's requests; the statements each sent, and the page's layout."""
    sent, layout = [], None
    for ask in (lambda: http.get("".join(ADDRESS)), lambda: http.get("/_dash-layout"),
                lambda: http.post("/_dash-update-component", json=_router_payload(*ADDRESS))):
        with statements() as seen:
            answer = ask()
        assert answer.status_code == 200, answer.data[:300]
        sent.append(seen)
        layout = answer.get_json(silent=True) if answer.is_json else layout
    return sent, layout["response"]["_pages_content"]["children"]


def _is_revision_read(statement: str) -> bool:
    return statement.startswith("SELECT") and f"FROM {REVISION_TABLE}" in statement


def test_a_warm_visit_reads_only_the_revision_once_per_request_and_shows_the_same_page(served):
    cold, first = _visit(served)
    warm, again = _visit(served)
    data_reads = [s for request in cold for s in request if not _is_revision_read(s)]
    assert data_reads, "the cold visit read no submissions: it measured nothing"
    repeated = [s[:160] for request in warm for s in request if not _is_revision_read(s)]
    assert repeated == [], "\n".join(repeated)
    assert all(len(request) <= 1 for request in warm), warm
    assert json.dumps(again, sort_keys=True) == json.dumps(first, sort_keys=True)
    shown = json.dumps(first)
    assert "Team beta" in shown and "alpha" in shown  # the team's panel and the ranking's rows, in the layout


def _ids(node, found: set) -> set:
    """Every component id under a layout (JSON as the renderer receives it)."""
    if isinstance(node, dict):
        props = node.get("props", {})
        if "id" in props:
            found.add(json.dumps(props["id"], sort_keys=True) if isinstance(props["id"], dict) else props["id"])
        for value in props.values():
            _ids(value, found)
    elif isinstance(node, list):
        for child in node:
            _ids(child, found)
    return found


def _present(input_id: str, ids: set) -> bool:
    if not input_id.startswith("{"):
        return input_id in ids
    wanted = json.loads(input_id)["type"]  # a pattern: any component of its type
    return any(i.startswith("{") and json.loads(i).get("type") == wanted for i in ids)


def test_no_callback_of_the_page_fires_when_it_opens(served):
    """What the renderer would send after the layout, for every callback whose inputs the layout holds."""
    _, layout = _visit(served)
    ids = _ids(layout, set())
    assert "lb-scatter" in ids and "lb-ranking-body" in ids
    fired = [d["output"] for d in served.get("/_dash-dependencies").get_json()
             if not d.get("prevent_initial_call") and d.get("inputs")
             and all(_present(i["id"], ids) for i in d["inputs"])]
    assert fired == []
