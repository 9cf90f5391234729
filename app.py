"""Whestboard: the WhestBench explorer and leaderboard.

``python app.py`` serves the embedded data on http://127.0.0.1:8050;
``gunicorn app:server`` (or ``gunicorn -c gunicorn.conf.py app:server``) serves the same app in production.

Importing this module defines things and nothing more: every side effect of starting the app (logging,
hooks, the store's first import of the shipped baselines, plotly's template, registering the pages)
happens in :func:`create_app`. ``app.app`` and ``app.server`` build the app on first use, once per process.
"""

from __future__ import annotations

import argparse
import functools
import os
import re
import secrets
import sys
import threading
from pathlib import Path

import dash
import flask

from components.figures.style import use_app_template
from components.shell import layout
from server import api, background, health, hooks, http, identity
from whestboard import config

#: ``assets/`` files Dash must serve but not link from every page: the plotly.js bundle.
PLOTLY_BUNDLE_PATTERN = r"^plotly-whestboard\.min\.js$"


#: Attributes that make a library's script tag inert: the browser does not fetch a script of an unknown
#: type, and ``assets/ag_grid_loader.js`` loads it from the tag's (fingerprinted) address when a grid renders.
DEFERRED_SCRIPT = {"type": "whestboard/deferred", "data-deferred-library": "dash_ag_grid"}


def defer_ag_grid_script() -> None:
    """dash-ag-grid's main script (0.32 MB brotli) only on pages with a grid, not in every page's head."""
    import dash_ag_grid

    for resource in dash_ag_grid.AgGrid._js_dist:
        if resource.get("relative_package_path") == "dash_ag_grid.min.js":
            resource["attributes"] = dict(DEFERRED_SCRIPT)


#: Where dcc's lazily loaded component chunks are served from (their webpack public path).
DCC_CHUNKS = "_dash-component-suites/dash/dcc/"


@functools.cache
def _plotly_bundle_address() -> str:
    """The plotly.js bundle's address exactly as ``assets/plotly_loader.js`` builds it (its version too)."""
    loader = (Path(__file__).parent / "assets" / "plotly_loader.js").read_text()
    return "assets/plotly-whestboard.min.js?v=" + re.search(r"var version = '(\w+)'", loader).group(1)


def preload_tags(path: str, prefix: str = "/") -> str:
    """``<link rel=preload>`` for the scripts a page's first view loads only once it has drawn.

    A page names them in its registry entry (``register_page(..., preload=("graph", "plotly"))``: a dcc
    chunk by name, or the plotly.js bundle). Without the hint the browser asks for each after the layout
    arrives and renders, one more round trip at the end of every visit; with it they come with the
    page's own scripts (from the browser's cache after the first visit)."""
    path = path.rstrip("/") or "/"
    wanted = next((page.get("preload", ()) for page in dash.page_registry.values() if page.get("path") == path), ())
    hrefs = [prefix + (_plotly_bundle_address() if name == "plotly" else f"{DCC_CHUNKS}async-{name}.js")
             for name in wanted]
    return "".join(f'<link rel="preload" as="script" href="{href}">' for href in hrefs)


def _under_gunicorn() -> bool:
    return "gunicorn" in os.path.basename(sys.argv[0]) or "gunicorn" in sys.modules


class WhestboardDash(dash.Dash):
    """Dash whose one-time server setup cannot be seen half done.

    Dash registers the component libraries a worker may serve in ``_setup_server``, run by the first
    request. It marks itself done *before* it starts, so a request arriving on another thread meanwhile
    found no registered library and answered 500 (``"dash_bootstrap_components" is not a registered
    library``): a blank page for the first visitors of every fresh worker. Here the setup holds a lock,
    and ``create_app`` runs it before any request exists.
    """

    def __init__(self, *args, **kwargs) -> None:
        self._setup_lock = threading.Lock()
        self._outage_secret: bytes | None = None
        super().__init__(*args, **kwargs)

    def _setup_server(self) -> None:
        with self._setup_lock:
            super()._setup_server()

    def _get_signing_secret(self) -> bytes:
        """The shared store's handle-signing key, asked for until it answers (``background.handle_signing_secret``).

        Dash would keep, for the life of the process, a random key of its own when the store could not
        answer once; here a page rendered while the store is away is signed with a key of this process
        only for as long as the outage lasts."""
        try:
            return background.handle_signing_secret()
        except Exception:  # noqa: BLE001 - the store is away: pages still render, jobs cannot start anyway
            if self._outage_secret is None:
                self._outage_secret = secrets.token_bytes(64)
            return self._outage_secret

    def interpolate_index(self, **kwargs) -> str:
        """Dash's page, with the requested page's late scripts asked for at once (``preload_tags``)."""
        page = super().interpolate_index(**kwargs)
        tags = preload_tags(flask.request.path, self.config.requests_pathname_prefix)
        return page.replace("</head>", tags + "</head>", 1) if tags else page

    def finish_setup(self) -> None:
        """Register every page's callbacks and every servable script now, as the first request would.

        Dash registers the pages' router callback in a ``before_request`` hook of the first request, after
        marking it done: a request on another thread meanwhile named a callback that did not exist yet
        (the edge refused the page's own first post, 400). It is run here, before any request exists."""
        with self.server.test_request_context("/"):
            self._setup_server()
            for hook in self.server.before_request_funcs.get(None, []):
                if getattr(hook, "__name__", "") == "router_sync":  # the app is not async
                    hook()


def create_app() -> dash.Dash:
    """Build the Dash app with every page under ``pages/`` registered, ready to serve any request."""
    use_app_template()
    defer_ag_grid_script()
    hooks.install()  # before the app: Dash reads its hooks when an app is made
    dash_app = WhestboardDash(
        __name__,
        use_pages=True,
        title="Whestboard",
        suppress_callback_exceptions=True,
        background_callback_manager=background.background_callback_manager(),
        update_title=None,
        # the plotly.js bundle is loaded by the first graph (assets/plotly_loader.js), not by every page
        assets_ignore=PLOTLY_BUNDLE_PATTERN,
    )
    dash_app.layout = layout
    flask_app = dash_app.server
    flask_app.config["WHESTBOARD_UNDER_GUNICORN"] = _under_gunicorn()
    identity.install(flask_app)  # X-Forwarded-For believed only from trusted proxies
    http.install_request_logging(flask_app)
    http.install_request_limits(flask_app)
    http.install_fault_answers(flask_app)
    http.install_revision_pinning(flask_app)
    http.install_compression(flask_app)
    http.install_asset_caching(flask_app, dash_app.config.routes_pathname_prefix + "assets/")
    flask_app.add_url_rule("/healthz", "healthz", health.respond)
    api.register(flask_app)  # the submissions API, and the first start's import of the shipped baselines
    dash_app.finish_setup()
    return dash_app


_built: dash.Dash | None = None
_build_lock = threading.Lock()


def the_app() -> dash.Dash:
    """This process's app, built on first use."""
    global _built
    with _build_lock:
        if _built is None:
            _built = create_app()
        return _built


def __getattr__(name: str):
    """``app.app`` and ``app.server`` (what ``gunicorn app:server`` asks for) build the app on first use."""
    if name == "app":
        return the_app()
    if name == "server":
        return the_app().server
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Serve Whestboard locally.")
    parser.add_argument("--host", default=config.host())
    parser.add_argument("--port", type=int, default=config.port())
    parser.add_argument("--debug", action="store_true")
    args = parser.parse_args(argv)
    dash_app = the_app()
    background.start_job_launcher()  # fork job processes from a single-threaded helper
    dash_app.run(host=args.host, port=args.port, debug=args.debug)


if __name__ == "__main__":
    main()
