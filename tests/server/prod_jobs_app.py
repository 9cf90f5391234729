"""A minimal Dash app wired to the server plumbing exactly as app.py is, for the production tests.

Its background callback is deterministic (sum of squares below ``n``) and can be
made slow, so tests can watch progress from another worker, kill the job
process or a web worker mid-job, and check the answer. Never served to users.
Run: ``gunicorn -c gunicorn.conf.py tests.server.prod_jobs_app:server``;
Celery: ``celery -A tests.server.prod_jobs_app:celery worker``.
"""

from __future__ import annotations

import os
import time

from dash import Input, Output, State, dcc, html

from app import WhestboardDash
from components.shell import job_notice
from server import background, health, hooks, http
from whestboard import config
from whestboard.cache import memoize

hooks.install()
app = WhestboardDash(__name__, background_callback_manager=background.background_callback_manager(), update_title=None)
http.install_request_logging(app.server)
http.install_fault_answers(app.server)
app.server.add_url_rule("/healthz", "healthz", health.respond)
server = app.server
celery = background.celery_app()

app.layout = html.Div(
    [
        dcc.Input(id="n", type="number", value=1000),
        dcc.Input(id="seconds", type="number", value=0),
        html.Button("Run", id="go"),
        html.Div(id="progress"),
        html.Div(id="result"),
        html.Div(id="cached"),
        job_notice(),
    ]
)


def sum_of_squares(n: int) -> int:
    return sum(k * k for k in range(int(n)))


@app.callback(
    Output("result", "children"),
    Input("go", "n_clicks"),
    State("n", "value"),
    State("seconds", "value"),
    background=True,
    progress=[Output("progress", "children")],
    interval=200,
    prevent_initial_call=True,
)
def run_job(set_progress, _clicks, n, seconds):
    steps = 10
    for step in range(steps):
        set_progress(f"{step}/{steps}")
        time.sleep(float(seconds or 0) / steps)
    return f"sum={sum_of_squares(n)} pid={os.getpid()}"


@memoize("prod-jobs-square-sum")
def counted_square_sum(n: int) -> int:
    """Appends a line per real computation, so tests can count cache misses across workers."""
    with open(config.state_dir() / "computations.log", "a") as log:
        log.write(f"{os.getpid()} {n}\n")
    return sum_of_squares(n)


@app.callback(Output("cached", "children"), Input("n", "value"))
def cached_sum(n):
    return f"cached={counted_square_sum(int(n or 0))}"


@server.after_request
def _tag_worker(response):
    response.headers["X-Worker-Pid"] = str(os.getpid())
    return response
