"""gunicorn settings for ``gunicorn -c gunicorn.conf.py app:server`` (the Docker image's command).

Every knob comes from the environment so one image serves a laptop and a
phase's worth of participants:

- ``WHESTBOARD_HOST`` / ``WHESTBOARD_PORT``: where to listen (127.0.0.1:8050;
  the image sets 0.0.0.0).
- ``WHESTBOARD_WORKERS``: processes (default ``2 * cores + 1`` capped at 8).
  Workers share caches, jobs and the store through the state folder (or Redis
  and PostgreSQL), so a user's requests may land on any of them.
- ``WHESTBOARD_THREADS``: threads per worker (default 4). Callbacks mostly wait
  on I/O or on numpy with the GIL released, so threads add concurrency cheaply.
- ``WHESTBOARD_TIMEOUT``: seconds before a silent worker is restarted (120).
- ``WHESTBOARD_PRELOAD``: import the app once in the master (default on) so
  workers fork with datasets already opened; safe because no database or
  diskcache connection crosses the fork (see whestboard/store/_forksafe.py).
"""

from __future__ import annotations

import gc
import os
from pathlib import Path

from whestboard.config import (  # not the module as `config`: gunicorn reads that name as a setting
    gunicorn_preload,
    gunicorn_threads,
    gunicorn_timeout,
    gunicorn_workers,
    host,
    log_level,
    port,
)

bind = f"{host()}:{port()}"
workers = gunicorn_workers()
threads = gunicorn_threads()
worker_class = "gthread"
timeout = gunicorn_timeout()
graceful_timeout = 30
keepalive = 5
preload_app = gunicorn_preload()
# Several servers may run on one machine (tests, a load test): no shared control socket path.
control_socket_disable = True
# Request lines are logged by the app as JSON (whestboard/logs.py), with hashed clients.
accesslog = None
errorlog = "-"
loglevel = log_level().lower()
# gunicorn's heartbeat files: /dev/shm avoids stalls when the state disk is slow (Docker overlayfs).
worker_tmp_dir = "/dev/shm" if Path("/dev/shm").is_dir() and os.access("/dev/shm", os.W_OK) else None


def when_ready(server) -> None:
    """Create the store's tables (and the key background-job handles are signed with) once, in the
    master, before workers race to do it, and end what the last server left running with no process.

    With the app preloaded, also load what every worker and job would load for
    itself (server/warm.py): done once here, shared by every fork.
    """
    from server.background import handle_signing_secret
    from server.warm import warm_process
    from whestboard import store
    from whestboard.jobs import recover_jobs

    if preload_app:
        server.log.info("warmed in %.2f s", warm_process())
    try:
        store.engine()  # every table the loaded code declares
        handle_signing_secret()  # stored now, so a later full disk or outage finds it there to read
        # Jobs whose process died with the last server: an upload queued again, any other failed with why.
        server.log.info("jobs recovered at start: %d", recover_jobs())
    except Exception as exc:  # noqa: BLE001 - /healthz reports an unreachable store; keep serving
        server.log.error("store not ready: %s", type(exc).__name__)
    finally:
        store.reset_engines()  # no connection of the master's is left for workers to inherit
    # Everything loaded so far lives as long as the workers do: move it out of the collector's sight.
    # A worker's exit then skips a full collection of the preloaded heap (10+ s on 2 busy cores, the
    # longest part of a SIGTERM restart), and collections never touch, so never copy, the shared pages.
    gc.freeze()


def post_fork(server, worker) -> None:
    server.log.info("worker %s ready (threads=%s)", worker.pid, threads)


def post_worker_init(worker) -> None:
    """The app is loaded (gunicorn loads it before this hook) and no request thread exists yet: the one
    safe moment to fork the job launcher."""
    from server import background

    background.start_job_launcher()
