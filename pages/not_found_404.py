"""Anything unknown in the URL lands here instead of a traceback."""

from __future__ import annotations

import dash
from dash import html

dash.register_page(__name__, path="/404", name="Not found", nav=False)


def layout(**_query) -> html.Div:
    return html.Div(
        [
            html.H2("Page not found"),
            html.P("That address does not match any Whestboard page."),
            html.A("Back to the datasets", href="/"),
        ],
        id="not-found",
    )
