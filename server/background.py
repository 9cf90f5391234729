"""Dash's background callbacks, recorded in the job ledger: diskcache on one machine, Celery beyond it.

Zero configuration gives a single-machine deployment whose gunicorn workers share everything through the
state folder: a diskcache-backed DiskcacheManager (multi-process safe) with the job ledger in the SQLite
store. With ``WHESTBOARD_REDIS_URL`` set, Dash's CeleryManager runs the jobs on ``celery -A worker worker``
processes on any number of machines.

Both managers are wrapped by :class:`_Ledger` so every launch is recorded in :mod:`whestboard.ledger.ledger`:
a duplicate delivery never computes twice, and a job whose process died is reported to the user as failed
with the reason instead of the poll silently giving up (what plain Dash does).
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import json
import logging
import threading
import uuid
from typing import Any

from dash._callback_context import context_value
from dash.exceptions import PreventUpdate
from flask import request
from sqlalchemy.exc import SQLAlchemyError

from server.warm import warm_process
from whestboard import config, logs
from whestboard.jobs import budgets, launcher, ledger, liveness
from whestboard.store import blobs

JOB_FIELD = "whestboard_job"
JOB_DIED = "worker died"
JOB_FAILED = "The job failed ("
JOB_REFUSED = "Not started: "
REFUSED_HANDLE = "refused"  # the handle of a launch the budgets refused: no process, its answer already stored


def _describe_outputs(context: dict) -> str:
    """``"lab-result.children"``: which callback a job serves, for the ledger and logs."""
    outputs = context.get("outputs_list") or []
    if isinstance(outputs, dict):
        outputs = [outputs]
    parts = []
    for out in outputs:
        if isinstance(out, dict):
            oid = out.get("id")
            oid = oid if isinstance(oid, str) else json.dumps(oid, sort_keys=True)
            parts.append(f"{oid}.{out.get('property')}")
    return ",".join(parts)[:200]


CLIENT_ID_SECRET = "client-id"


def visitor_id(address: str | None, user_agent: str | None) -> str:
    """A visitor's hashed id under the store's shared secret: the same on every machine."""
    return logs.client_id(address, user_agent, blobs.shared_secret(CLIENT_ID_SECRET))


def request_client_id() -> str | None:
    """The hashed id of the visitor behind the current request, or None outside one (or, for a log line,
    while the store cannot be reached).

    ``remote_addr`` is the real client: ``server.identity`` believes X-Forwarded-For only from trusted proxies."""
    try:
        return visitor_id(request.remote_addr, request.headers.get("User-Agent"))
    except (RuntimeError, SQLAlchemyError):  # no request context (a Celery worker, a script), or no store
        return None


def job_failed_payload(reason: str) -> dict:
    """What a dead job returns to Dash: its error path, carrying a message for the user."""
    msg = f"{JOB_FAILED}{reason}). Nothing was recorded for it; please run it again."
    return {"background_callback_error": {"msg": msg, "tb": ""}}


_poll = threading.local()
#: What each background callback's job would cost, by its function: see :func:`priced`.
_PRICES: dict[int, tuple[str, Any]] = {}
PRICE_ATTR = "whestboard_price"


def priced(what: str, cost):
    """Declare a background callback's price: ``cost(*inputs)`` estimates its work in FLOPs before it
    is launched (None, or an error, when its inputs are not what the page sends: the job is not started).
    Every background callback is priced (a test checks it); :mod:`whestboard.jobs.budgets` refuses a job
    over its limits with a sentence."""
    def mark(fn):
        setattr(fn, PRICE_ATTR, (what, cost))
        return fn
    return mark


def _admit(job_fn, args) -> None:
    """The budgets' one question, asked before every launch: cost first, then the client's and all slots.

    A job whose cost cannot be estimated from its inputs is not started either: its inputs are not what
    the page sends (a hand-made request), and a job process would only fail on them."""
    what, cost = _PRICES.get(id(job_fn), ("This job", None))
    values = list(args.values()) if isinstance(args, dict) else list(args or [])
    try:
        flops = cost(*values) if cost is not None else None
    except (ValueError, KeyError, TypeError, AttributeError, FileNotFoundError) as exc:
        raise budgets.OverBudget(f"{what} cannot start: {exc.args[0] if isinstance(exc, KeyError) and exc.args else exc}"
                                 ) from None
    if cost is not None and flops is None:
        raise budgets.OverBudget(f"{what} cannot start: its inputs are not ones this page sends; reload the page")
    budgets.admit(what, flops, request_client_id())


def _within_wall_time(job_id: str, compute):
    with budgets.deadline(job_id):
        return compute()


class _Ledger:
    """Mixin recording every background launch in ``whestboard.jobs``."""

    backend_name = ""

    def build_cache_key(self, fn, args, cache_args_to_ignore, triggered):
        """One result key per launch, not per input: two users asking the same thing at once
        otherwise share a key, and the first to read the result deletes it for the other."""
        key = super().build_cache_key(fn, args, cache_args_to_ignore, triggered)
        if self.cache_by is None:
            key = hashlib.sha256(f"{key}:{uuid.uuid4().hex}".encode()).hexdigest()
        return key

    def call_job_fn(self, key, job_fn, args, context):
        try:
            _admit(job_fn, args)
        except budgets.OverBudget as refused:  # nothing launched; the first poll answers with the sentence
            logs.event("job.refused", what=_describe_outputs(context), client=request_client_id(),
                       verdict="refused", reason=str(refused))
            self._store_result(key, {"background_callback_error": {"msg": f"{JOB_REFUSED}{refused}", "tb": ""}})
            return REFUSED_HANDLE
        job_id = uuid.uuid4().hex
        kind, owner = _describe_outputs(context), request_client_id()
        ledger.enqueue(job_id, result_key=key, kind=kind, owner=owner, backend=self.backend_name)
        context = dict(context)
        context[JOB_FIELD] = {"job_id": job_id, "result_key": key, "kind": kind, "owner": owner}
        handle = super().call_job_fn(key, job_fn, args, context)
        ledger.set_handle(job_id, str(handle))
        return handle

    def make_job_fn(self, fn, progress, key=None):
        job_fn = super().make_job_fn(self._tracked(fn), progress, key)
        _PRICES[id(job_fn)] = getattr(fn, PRICE_ATTR, ("This job", None))
        return job_fn

    def _tracked(self, fn):
        if inspect.iscoroutinefunction(fn):
            return fn  # async callbacks run untracked: Dash dispatches them differently
        manager = self

        @functools.wraps(fn)
        def tracked(*args, **kwargs):
            info = (context_value.get() or {}).get(JOB_FIELD)
            if not info:
                return fn(*args, **kwargs)
            launch = ledger.Launch(**info)
            return ledger.run_tracked(
                launch,
                lambda: _within_wall_time(launch.job_id, lambda: fn(*args, **kwargs)),
                already_done=lambda: manager._stored_result(launch.result_key),
                benign=(PreventUpdate,),
            )

        return tracked

    def _store_result(self, key: str, value: dict) -> None:
        raise NotImplementedError

    def _stored_result(self, key: str) -> Any:
        """A duplicate delivery's answer: the first run's stored result, if still unread."""
        raise PreventUpdate

    def _process_gone(self, job) -> bool:
        """First-hand knowledge that the job's process has exited (diskcache only)."""
        return False

    def get_result(self, key, job):
        _poll.key = key  # job_running() below is asked about this same poll
        result = super().get_result(key, job)
        if result is not self.UNDEFINED or job is None:
            return result
        gone = self._process_gone(job)
        if gone:  # it may have stored its result just before exiting
            result = super().get_result(key, job)
            if result is not self.UNDEFINED:
                return result
        row = ledger.find(key, str(job))
        if row is None:
            return result
        if row.status == ledger.CANCELLED:
            return result  # the user cancelled: Dash closes the loop with no update, not an error
        row = ledger.fail_if_dead(row, process_gone=gone, pid_check=gone)
        if row.status == "failed" and (gone or ledger.is_lost(row.reason)):
            return job_failed_payload(row.reason or JOB_DIED)
        if row.status == "finished" and gone:
            return job_failed_payload(f"{JOB_DIED}: process {row.worker} ended without storing its result")
        return result

    def job_running(self, job):
        """Dash asks this right after get_result(): a job that stored its result and exited in
        between would read as "not running, no result", and the poll would silently give up."""
        running = super().job_running(job)
        key, _poll.key = getattr(_poll, "key", None), None
        if not running and key is not None and self.result_ready(key):
            return True  # the next poll collects the result
        return running

    def terminate_job(self, job):
        if job is not None:
            ledger.cancel(str(job))
        return super().terminate_job(job)


_diskcache_managers: list = []


def _diskcache_manager():
    import diskcache
    import psutil
    from dash import DiskcacheManager  # imported here: Celery deployments never load diskcache

    class LaunchingDiskcacheManager(DiskcacheManager):
        """DiskcacheManager whose job processes come from a single-threaded launcher (whestboard.jobs.launcher)."""

        _launcher: launcher.Launcher | None = None

        def ensure_launcher(self, *, quiet: bool) -> launcher.Launcher:
            if self._launcher is None or not self._launcher.alive():
                if not quiet:
                    logs.event("job.launcher_late", level=logging.WARNING,
                               msg="job launcher started from a threaded process; call "
                                   "server.background.start_job_launcher() while single-threaded")
                self._launcher = launcher.Launcher(self.func_registry)
            return self._launcher

        def job_running(self, job):
            return liveness.handle_running(str(job))

        def terminate_job(self, job):
            proc = liveness.process_of(str(job)) if job is not None else None
            if proc is None:
                return
            try:
                victims = [*proc.children(recursive=True), proc]
            except psutil.NoSuchProcess:  # it ended on its own meanwhile
                return
            for victim in victims:
                try:
                    victim.kill()
                except psutil.NoSuchProcess:
                    pass

        def call_job_fn(self, key, job_fn, args, context):
            fn_key = next(k for k, fn in self.func_registry.items() if fn is job_fn)
            job_args = (key, self._make_progress_key(key), args, dict(context))
            try:
                pid = self.ensure_launcher(quiet=False).launch(fn_key, job_args)
            except (RuntimeError, EOFError, OSError):  # a callback registered after the fork, or a dead launcher
                self._launcher = None
                pid = self.ensure_launcher(quiet=False).launch(fn_key, job_args)
            return liveness.process_handle(pid)  # names the process, not just a pid that may be reused

    class LedgerDiskcacheManager(_Ledger, LaunchingDiskcacheManager):
        backend_name = "diskcache"

        def _store_result(self, key, value):
            self.handle.set(key, value)

        def _stored_result(self, key):
            value = self.handle.get(key, self.UNDEFINED)
            if value is self.UNDEFINED:
                raise PreventUpdate
            return value

        def _process_gone(self, job) -> bool:
            return not LaunchingDiskcacheManager.job_running(self, job)

    store = diskcache.Cache(str(config.state_dir() / "dash-jobs"))
    store.close()  # reopened lazily per process: no SQLite handle crosses gunicorn's fork
    manager = LedgerDiskcacheManager(store)
    _diskcache_managers.append(manager)
    return manager


def start_job_launcher() -> None:
    """Fork this process's job launcher now, while it is single-threaded (after the app is imported).

    gunicorn.conf.py calls it from ``post_worker_init``, ``python app.py`` before
    serving. Without it the first background job starts one late, from a thread.
    """
    warm_process()  # jobs are forked from the launcher: what it has loaded, no job loads again
    for manager in _diskcache_managers:
        manager.ensure_launcher(quiet=True)


@functools.cache
def celery_app():
    """The Celery application background callbacks run on (None without WHESTBOARD_REDIS_URL)."""
    url = config.redis_url()
    if not url:
        return None
    from celery import Celery

    app = Celery("whestboard", broker=url, backend=url)
    app.conf.update(
        task_acks_late=True,  # a task is acknowledged when it ends, not when it starts...
        task_reject_on_worker_lost=True,  # ...so a killed worker's task is redelivered (a retry)
        worker_prefetch_multiplier=1,
        task_track_started=True,
        result_expires=24 * 3600,
        broker_connection_retry_on_startup=True,
        worker_hijack_root_logger=False,
        worker_redirect_stdouts=False,
    )
    return app


def _celery_manager():
    from dash import CeleryManager

    class LedgerCeleryManager(_Ledger, CeleryManager):
        backend_name = "celery"

        def _store_result(self, key, value):
            self.handle.backend.set(key, json.dumps(value))

        def _stored_result(self, key):
            raw = self.handle.backend.get(key)
            if raw is None:
                raise PreventUpdate
            return json.loads(raw)

    return LedgerCeleryManager(celery_app())


def background_callback_manager():
    """Dash background-callback manager: diskcache locally, Celery when Redis is set."""
    return _celery_manager() if config.redis_url() else _diskcache_manager()

