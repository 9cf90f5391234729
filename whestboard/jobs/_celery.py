"""The one Celery application, and job bodies spread over its workers by name.

With ``WHESTBOARD_REDIS_URL`` set, one Celery application (Redis as broker and result store) carries
every job that leaves the process that asked for it: Dash's background callbacks
(``server.background`` hands this application to Dash's CeleryManager) and the bodies a core package
registers here. ``celery -A worker worker`` runs both on any number of machines.

A body is a function of one JSON payload, registered under a kind by the package that owns the work
(``register_body("final-team", fn)``); :func:`spread` sends one task per payload. The task names the
module that registered its body, so a worker that has not imported it yet imports it (only modules of
``whestboard``). What a body computes is its own business: the ledger's compare-and-set claim
(:func:`whestboard.jobs.run_tracked`) is what keeps a redelivered task, or a caller that gives up on the
workers and does the work itself, from computing anything twice.
"""

from __future__ import annotations

import functools
import importlib
import logging
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from whestboard import config, logs

#: The one task every registered body runs through.
BODY_TASK = "whestboard.jobs.body"
#: Modules a task may ask a worker to import to find its body.
BODY_MODULES = "whestboard."

_bodies: dict[str, tuple[Callable[[dict], Any], str]] = {}


def register_body(kind: str, fn: Callable[[dict], Any]) -> None:
    """Make ``fn(payload)`` the body of jobs of ``kind`` (any process: the caller's and every worker's)."""
    _bodies[kind] = (fn, fn.__module__)


def run_body(kind: str, payload: dict, module: str = "") -> Any:
    """What a worker does with a task: import the module that registers ``kind`` if needed, run the body."""
    if kind not in _bodies and module.startswith(BODY_MODULES):
        importlib.import_module(module)
    if kind not in _bodies:
        raise LookupError(f"no job body {kind!r} is registered in this worker (is it running the same code?)")
    return _bodies[kind][0](payload)


def celery_app():
    """The Celery application for ``WHESTBOARD_REDIS_URL`` (None without it): one per URL and process."""
    url = config.redis_url()
    return _app_for(url) if url else None


@functools.cache
def _app_for(url: str):
    from celery import Celery

    app = Celery("whestboard", broker=url, backend=url)
    app.conf.update(celery_settings(in_worker=_in_celery_worker()))
    app.task(name=BODY_TASK)(run_body)
    return app


def _in_celery_worker() -> bool:
    """This process is ``celery ... worker``: its writes to the result store may wait out an outage."""
    return Path(sys.argv[0]).name == "celery" and "worker" in sys.argv[1:]


#: How long a job process keeps trying to store its result while Redis is away (then it gives up and the
#: ledger says why): a broker outage shorter than this costs nobody their run.
RESULT_RETRY_S = 600.0
#: A finished job whose result is still missing this long after it ended will never have it.
RESULT_LOST_AFTER_S = RESULT_RETRY_S + 60.0
#: Longest pause between a job process's attempts to store its result while Redis is away.
BROKER_RETRY_MAX_INTERVAL_S = 2.0


#: The broker transport every Celery connection of the project uses (see :class:`_surviving_transport`).
BROKER_TRANSPORT = "whestboard.jobs._celery:SurvivingRedisTransport"


@functools.cache
def _surviving_transport():
    """kombu's Redis transport, with the error a dead channel raises counted as a lost connection.

    When Redis goes away the worker collects the broken connection (``Connection.collect`` sets the
    transport's ``client`` to None) and connects anew; a task that was delivered on the old connection
    and ends afterwards is acknowledged on its old channel (``task_acks_late``). kombu 5.7.0 then
    rebuilds that channel's pool from ``self.connection.client.hostname`` and raises
    ``AttributeError: 'NoneType' object has no attribute 'hostname'`` (or ``... 'client'``, by the other
    path). Celery catches only the transport's connection errors there (``Message.ack_log_error``), so
    the AttributeError ends the main process: "Unrecoverable error". Counted as a connection error, the
    failed acknowledgement is logged, the worker lives on, and Redis redelivers the task after the
    visibility timeout (the ledger's compare-and-set keeps the retry from computing it twice).
    """
    from kombu.transport import redis as kombu_redis

    class SurvivingRedisTransport(kombu_redis.Transport):
        connection_errors = (*kombu_redis.Transport.connection_errors, AttributeError)

    return SurvivingRedisTransport


def __getattr__(name: str):
    if name == "SurvivingRedisTransport":  # built on first use: kombu loads only where Celery runs
        return _surviving_transport()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def celery_settings(*, in_worker: bool) -> dict:
    """Every Celery setting the fault tests rely on (tests/server/test_faults.py), in one place.

    - ``task_acks_late`` + ``task_reject_on_worker_lost``: a task is acknowledged when it ends, so one
      whose worker process was killed is redelivered (a retry the ledger counts in ``attempts``);
    - ``broker_connection_max_retries=None``: a worker that loses Redis reconnects for as long as it
      takes instead of exiting after 100 tries, and keeps the task it is running
      (``worker_cancel_long_running_tasks_on_connection_loss=False``, said out loud: Celery 6 flips it);
    - ``visibility_timeout``: Redis hands an unacknowledged task to another worker only after the longest
      job may run (``WHESTBOARD_JOB_WALL_S``) plus a margin, never while its first run goes on;
    - in a Celery worker the result store retries a write for :data:`RESULT_RETRY_S`, so a job that ends
      while Redis is down stores its result once Redis is back; a web worker tries twice and answers
      (a request must not hang); connection attempts time out instead of hanging.
    """
    redelivery_s = int(config.job_max_seconds()) + 300
    result_retry = ({"max_retries": None, "timeout": RESULT_RETRY_S, "interval_start": 0, "interval_step": 1,
                     "interval_max": BROKER_RETRY_MAX_INTERVAL_S} if in_worker else
                    {"max_retries": 2, "interval_start": 0, "interval_step": 0.5, "interval_max": 1})
    return {
        "broker_transport": BROKER_TRANSPORT,
        "task_acks_late": True,
        "task_reject_on_worker_lost": True,
        "worker_prefetch_multiplier": 1,
        "task_track_started": True,
        "result_expires": 24 * 3600,
        "broker_connection_retry_on_startup": True,
        "broker_connection_retry": True,
        "broker_connection_max_retries": None,
        "broker_connection_timeout": 4,
        "worker_cancel_long_running_tasks_on_connection_loss": False,
        "broker_transport_options": {"visibility_timeout": redelivery_s, "socket_connect_timeout": 5},
        "result_backend_transport_options": {"retry_policy": result_retry},
        "redis_socket_connect_timeout": 5,
        "broker_pool_limit": 10,
        "task_publish_retry_policy": {"max_retries": 2, "interval_start": 0, "interval_step": 0.5,
                                      "interval_max": 1},
        "worker_hijack_root_logger": False,
        "worker_redirect_stdouts": False,
    }


@dataclass
class Spread:
    """Tasks sent to the workers, or why the work stays with the caller (``local`` is then the reason)."""

    kind: str
    handles: list = field(default_factory=list)
    local: str | None = None

    def unfinished(self) -> int:
        """How many of the tasks no worker has ended yet (raises when the result store cannot be read)."""
        return sum(1 for handle in self.handles if not handle.ready())


def spread(kind: str, payloads: list[dict]) -> Spread:
    """One Celery task per payload, each running ``kind``'s body on some worker.

    Without ``WHESTBOARD_REDIS_URL``, or when the broker refuses the tasks, nothing more is sent and
    ``local`` says why: the caller then does the work itself (the ledger keeps a task that was sent
    anyway from doing it twice).
    """
    app = celery_app()
    if app is None:
        return Spread(kind, local="WHESTBOARD_REDIS_URL is not set")
    module = _bodies[kind][1] if kind in _bodies else ""
    sent = Spread(kind)
    try:
        for payload in payloads:
            sent.handles.append(app.send_task(BODY_TASK, args=(kind, payload, module)))
    except Exception as exc:  # noqa: BLE001 - a broker fails in many ways; the caller does the work instead
        why = " ".join(f"{type(exc).__name__}: {exc}".split())
        logs.event("jobs.spread_refused", level=logging.WARNING, what=kind, sent=len(sent.handles),
                   of=len(payloads), error=why)
        sent.local = f"the broker refused the tasks ({why})"
    return sent
