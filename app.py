"""Whestboard: the WhestBench explorer and leaderboard.

``python app.py`` serves the embedded data on http://127.0.0.1:8050;
``gunicorn app:server`` serves the same app in production.
"""

from __future__ import annotations

import argparse
import os
import sys
import threading

import dash
from flask import jsonify

from components import runtime
from components.shell import layout

UNDER_GUNICORN = "gunicorn" in os.path.basename(sys.argv[0]) or "gunicorn" in sys.modules


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
        super().__init__(*args, **kwargs)

    def _setup_server(self) -> None:
        with self._setup_lock:
            super()._setup_server()

    def finish_setup(self) -> None:
        """Register every page's callbacks and every servable script now, as the first request would."""
        with self.server.test_request_context("/"):
            self._setup_server()


def create_app() -> dash.Dash:
    """Build the Dash app with every page under ``pages/`` registered, ready to serve any request."""
    app = WhestboardDash(
        __name__,
        use_pages=True,
        title="Whestboard",
        suppress_callback_exceptions=True,
        background_callback_manager=runtime.background_callback_manager(),
        update_title=None,
    )
    app.layout = layout
    runtime.cache.init_app(app.server, config=runtime.cache_config())
    app.server.config["WHESTBOARD_UNDER_GUNICORN"] = UNDER_GUNICORN
    runtime.install_request_logging(app.server)
    runtime.install_request_limits(app.server)
    runtime.install_compression(app.server)
    _register_health(app)
    from components import organizer_api  # submissions API + first-start import of the baselines

    organizer_api.register(app.server)
    app.finish_setup()
    return app


def _register_health(app: dash.Dash) -> None:
    @app.server.route("/healthz")
    def healthz():
        from whestboard.health import check

        report = check()
        return jsonify(report), (200 if report["ok"] else 503)


app = create_app()
server = app.server


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Serve Whestboard locally.")
    parser.add_argument("--host", default=os.environ.get("WHESTBOARD_HOST", "127.0.0.1"))
    parser.add_argument("--port", type=int, default=int(os.environ.get("WHESTBOARD_PORT", "8050")))
    parser.add_argument("--debug", action="store_true")
    args = parser.parse_args(argv)
    runtime.start_job_launcher()  # fork job processes from a single-threaded helper (components/runtime.py)
    app.run(host=args.host, port=args.port, debug=args.debug)


if __name__ == "__main__":
    main()
