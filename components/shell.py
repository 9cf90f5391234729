"""The page shell: navigation bar, page container and shared URL state."""

from __future__ import annotations

import dash
import dash_bootstrap_components as dbc
from dash import dcc, html

BRAND = "Whestboard"
JOB_NOTICE_ID = "whestboard-job-notice"
#: The uploads this browser tab made (sha256 and filename): the upload page adds to it, other pages offer them.
SESSION_UPLOADS_ID = "session-uploads"


def job_notice() -> dbc.Alert:
    """Where a background job that died is reported (filled by the server's callback-error hook)."""
    return dbc.Alert(id=JOB_NOTICE_ID, is_open=False, dismissable=True, color="danger",
                     className="position-fixed bottom-0 end-0 m-3 shadow", style={"zIndex": 2000, "maxWidth": "32rem"})


def navbar() -> dbc.Navbar:
    links = [
        dbc.NavItem(dbc.NavLink(page["name"], href=page["relative_path"], active="exact",
                                id=f"nav-{page['module'].split('.')[-1]}"))
        for page in sorted(dash.page_registry.values(), key=lambda p: p.get("order") if p.get("order") is not None else 99)
        if page.get("nav", True) and page.get("path") not in (None, "/404")
    ]
    return dbc.Navbar(
        dbc.Container(
            [
                dbc.NavbarBrand(BRAND, href="/", className="fw-bold"),
                html.Span("WhestBench explorer & leaderboard", className="text-white-50 small me-auto"),
                dbc.Nav(links, navbar=True, className="ms-auto"),
            ],
            fluid=True,
        ),
        color="dark",
        dark=True,
        className="mb-3",
    )


def layout() -> html.Div:
    """The app layout: called per request so the navigation lists every registered page."""
    return html.Div(
        [
            dcc.Location(id="url", refresh="callback-nav"),
            dcc.Store(id=SESSION_UPLOADS_ID, storage_type="session"),
            navbar(),
            dbc.Container(dash.page_container, fluid=True, className="pb-5"),
            job_notice(),
        ]
    )
