"""The address as page state: one builder of query strings and one way of keeping the address in step.

Every page keeps its choices in its URL, so any view can be shared, reloaded or reached again with
back/forward. Two pieces serve every page:

- ``query_string(params)`` / ``href(path, params)`` build every query string and link in the app, dropping
  empty values (``None`` and ``""``), so a default left out of a link is left out of the address too.
- ``address_store(store_id)`` in a page's layout, plus ``keep_address_in_step(store_id)`` once at import:
  a server callback writes the page's ``query_string(...)`` into the store, and one clientside callback
  rewrites the address in place with ``history.replaceState``.

Why replaceState and not a ``dcc.Location`` written by a callback: a Location pushes a history entry on
every write and tells every other Location (the pages router's among them), which re-renders the page; and
a Location whose props went stale pushes the old address back. Rewriting the address in place adds no
history entry, re-renders nothing (the leaderboard's 10,000 dots are not resent) and leaves no Location
with an address of its own. The rewrite only happens once a callback has answered, after the page's
Locations have read the address they were opened with. Moving to another page (a new round or dataset from
the selectors, a link) is a navigation, not page state: it goes through the shell's ``url`` Location.
"""

from __future__ import annotations

from collections.abc import Mapping
from urllib.parse import urlencode

from dash import Input, Output, clientside_callback, dcc, html

#: The clientside half: replace the address's query with the one the page's callback wrote, in place.
_REPLACE_QUERY = """
function(search) {
    if (typeof search !== 'string') { return window.dash_clientside.no_update; }
    const target = window.location.pathname + search;
    if (window.location.pathname + window.location.search !== target) {
        window.history.replaceState(window.history.state, '', target);
    }
    return target;
}
"""


def query_string(params: Mapping[str, object]) -> str:
    """``?key=value&...`` of ``params`` in their order, leaving out ``None`` and ``""``; ``""`` when none is left.

    ``0`` and ``False`` are values (a seed of 0 is a seed), so only the two empties are dropped.
    """
    kept = {key: value for key, value in params.items() if value is not None and value != ""}
    return "?" + urlencode(kept) if kept else ""


def href(path: str, params: Mapping[str, object]) -> str:
    """A link: ``path`` plus ``query_string(params)``."""
    return path + query_string(params)


def address_store(store_id: str) -> html.Div:
    """The layout half: the store a page's callback writes its query string into (and the rewrite's echo)."""
    return html.Div([dcc.Store(id=store_id), dcc.Store(id=_applied_id(store_id))], hidden=True)


def keep_address_in_step(store_id: str) -> None:
    """Register, once per page at import, the clientside callback that puts the store's query in the address."""
    clientside_callback(_REPLACE_QUERY, Output(_applied_id(store_id), "data"), Input(store_id, "data"),
                        prevent_initial_call=True)


def _applied_id(store_id: str) -> str:
    return f"{store_id}-applied"
