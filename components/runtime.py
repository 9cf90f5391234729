"""Process-wide web plumbing: the shared cache, the background-job manager, request logs.

Zero configuration gives a single-machine deployment whose gunicorn workers
share everything through the state folder: a flask-caching FileSystemCache and
a diskcache-backed DiskcacheManager (both multi-process safe), with the job
ledger in the SQLite store. With ``WHESTBOARD_REDIS_URL`` set the same code
scales out: RedisCache for the cache and Dash's CeleryManager for background
callbacks, whose jobs then run on ``celery -A worker worker`` processes on any
number of machines.

Both managers are wrapped by :class:`_Ledger` so every launch is recorded in
``whestboard.jobs``: a duplicate delivery never computes twice, and a job whose
process died is reported to the user as failed with the reason instead of the
poll silently giving up (what plain Dash does).
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import json
import logging
import threading
import time
import uuid
from typing import Any

import dash_bootstrap_components as dbc
from dash import hooks, html, set_props
from dash._callback_context import context_value
from dash.exceptions import BackgroundCallbackError, PreventUpdate
from flask import Flask, abort, g, got_request_exception, jsonify, request
from flask_caching import Cache
from werkzeug.exceptions import HTTPException

from whestboard import jobs, launcher, logs, settings

cache = Cache()
logs.configure()

JOB_FIELD = "whestboard_job"
JOB_DIED = "worker died"
JOB_FAILED = "The job failed ("
NOTICE_ID = "whestboard-job-notice"


def cache_config() -> dict:
    redis = settings.redis_url()
    if redis:
        return {
            "CACHE_TYPE": "RedisCache",
            "CACHE_REDIS_URL": redis,
            "CACHE_KEY_PREFIX": "whestboard-cache:",
            "CACHE_DEFAULT_TIMEOUT": 0,
        }
    return {
        "CACHE_TYPE": "FileSystemCache",
        "CACHE_DIR": str(settings.state_dir() / "flask-cache"),
        "CACHE_DEFAULT_TIMEOUT": 0,
        "CACHE_THRESHOLD": 5000,
    }


# --------------------------------------------------------------------------- job ledger


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


def request_client_id() -> str | None:
    """The hashed id of the visitor behind the current request, or None outside one."""
    try:
        address = request.access_route[0] if request.access_route else request.remote_addr
        return logs.client_id(address, request.headers.get("User-Agent"), settings.state_dir())
    except RuntimeError:  # no request context (a Celery worker, a script)
        return None


def job_failed_payload(reason: str) -> dict:
    """What a dead job returns to Dash: its error path, carrying a message for the user."""
    msg = f"{JOB_FAILED}{reason}). Nothing was recorded for it; please run it again."
    return {"background_callback_error": {"msg": msg, "tb": ""}}


_poll = threading.local()


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
        jobs.reap()
        job_id = uuid.uuid4().hex
        kind, owner = _describe_outputs(context), request_client_id()
        jobs.enqueue(job_id, result_key=key, kind=kind, owner=owner, backend=self.backend_name)
        context = dict(context)
        context[JOB_FIELD] = {"job_id": job_id, "result_key": key, "kind": kind, "owner": owner}
        handle = super().call_job_fn(key, job_fn, args, context)
        jobs.set_handle(job_id, str(handle))
        return handle

    def make_job_fn(self, fn, progress, key=None):
        return super().make_job_fn(self._tracked(fn), progress, key)

    def _tracked(self, fn):
        if inspect.iscoroutinefunction(fn):
            return fn  # async callbacks run untracked: Dash dispatches them differently
        manager = self

        @functools.wraps(fn)
        def tracked(*args, **kwargs):
            info = (context_value.get() or {}).get(JOB_FIELD)
            if not info:
                return fn(*args, **kwargs)
            launch = jobs.Launch(**info)
            return jobs.run_tracked(
                launch,
                lambda: fn(*args, **kwargs),
                already_done=lambda: manager._stored_result(launch.result_key),
                benign=(PreventUpdate,),
            )

        return tracked

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
        row = jobs.find(key, str(job))
        if row is None:
            return result
        if row.status == "failed" and row.reason == jobs.CANCELLED:
            return result  # the user cancelled: Dash closes the loop with no update, not an error
        row = jobs.fail_if_dead(row, process_gone=gone, pid_check=gone)
        if row.status == "failed" and (gone or jobs.is_lost(row.reason)):
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
            jobs.cancel(str(job))
        return super().terminate_job(job)


_diskcache_managers: list = []


def _diskcache_manager():
    import diskcache
    import psutil
    from dash import DiskcacheManager

    class LaunchingDiskcacheManager(DiskcacheManager):
        """DiskcacheManager whose job processes come from a single-threaded launcher (whestboard.launcher)."""

        _launcher: launcher.Launcher | None = None

        def ensure_launcher(self, *, quiet: bool) -> launcher.Launcher:
            if self._launcher is None or not self._launcher.alive():
                if not quiet:
                    logs.event("job.launcher_late", level=logging.WARNING,
                               msg="job launcher started from a threaded process; call "
                                   "runtime.start_job_launcher() while single-threaded")
                self._launcher = launcher.Launcher(self.func_registry)
            return self._launcher

        def _process(self, job) -> psutil.Process | None:
            """The job's process, unless its pid now belongs to someone else (pids wrap around)."""
            pid, _, started = str(job).partition("@")
            try:
                proc = psutil.Process(int(pid))
                if started and abs(proc.create_time() - float(started)) > 0.05:
                    return None
                return proc
            except (psutil.NoSuchProcess, ValueError):
                return None

        def job_running(self, job):
            proc = self._process(job)
            try:
                return proc is not None and proc.status() != psutil.STATUS_ZOMBIE
            except psutil.NoSuchProcess:
                return False

        def terminate_job(self, job):
            proc = self._process(job) if job is not None else None
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
            try:  # the handle names the process, not just a pid that may be reused later
                return f"{pid}@{psutil.Process(pid).create_time():.3f}"
            except psutil.NoSuchProcess:
                return str(pid)

    class LedgerDiskcacheManager(_Ledger, LaunchingDiskcacheManager):
        backend_name = "diskcache"

        def _stored_result(self, key):
            value = self.handle.get(key, self.UNDEFINED)
            if value is self.UNDEFINED:
                raise PreventUpdate
            return value

        def _process_gone(self, job) -> bool:
            return not LaunchingDiskcacheManager.job_running(self, job)

    store = diskcache.Cache(str(settings.state_dir() / "dash-jobs"))
    store.close()  # reopened lazily per process: no SQLite handle crosses gunicorn's fork
    manager = LedgerDiskcacheManager(store)
    _diskcache_managers.append(manager)
    return manager


def start_job_launcher() -> None:
    """Fork this process's job launcher now, while it is single-threaded (after the app is imported).

    gunicorn.conf.py calls it from ``post_worker_init``, ``python app.py`` before
    serving. Without it the first background job starts one late, from a thread.
    """
    from whestboard.warm import warm_process

    warm_process()  # jobs are forked from the launcher: what it has loaded, no job loads again
    for manager in _diskcache_managers:
        manager.ensure_launcher(quiet=True)


@functools.cache
def celery_app():
    """The Celery application background callbacks run on (None without WHESTBOARD_REDIS_URL)."""
    url = settings.redis_url()
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

        def _stored_result(self, key):
            raw = self.handle.backend.get(key)
            if raw is None:
                raise PreventUpdate
            return json.loads(raw)

    return LedgerCeleryManager(celery_app())


def background_callback_manager():
    """Dash background-callback manager: diskcache locally, Celery when Redis is set."""
    return _celery_manager() if settings.redis_url() else _diskcache_manager()


# --------------------------------------------------------------------------- user-facing job failures


def job_notice() -> dbc.Alert:
    return dbc.Alert(id=NOTICE_ID, is_open=False, dismissable=True, color="danger",
                     className="position-fixed bottom-0 end-0 m-3 shadow", style={"zIndex": 2000, "maxWidth": "32rem"})


@hooks.layout()
def _with_job_notice(layout):
    """Every page carries the notice a dead background job is reported in."""
    return html.Div([layout, job_notice()])


def _callback_what() -> str:
    """Which callback a request asked for, for the logs; never reads a body the server refused."""
    try:
        body = request.get_json(silent=True) or {}
        return str(body.get("output", ""))[:200] if isinstance(body, dict) else ""
    except (RuntimeError, HTTPException, RecursionError):  # outside a request; too large; too deep
        return ""


@hooks.error()
def _report_callback_error(err: Exception):
    """Log every callback error with context; show dead jobs to the user, re-raise the rest."""
    logs.error("callback.error", err, what=_callback_what(), client=request_client_id())
    if isinstance(err, BackgroundCallbackError) and JOB_FAILED in str(err):
        message = str(err).split("callback: ", 1)[-1].strip()
        set_props(NOTICE_ID, {"children": message, "is_open": True})
        return None
    raise err


# --------------------------------------------------------------------------- request logs

QUIET_PREFIXES = ("/_dash-component-suites/", "/assets/", "/_favicon", "/healthz", "/_reload-hash")


def install_request_logging(server: Flask) -> None:
    """One JSON line per request: who (hashed), what, status, how long; errors with context."""

    @server.before_request
    def _start_clock() -> None:
        g.whestboard_t0 = time.perf_counter()

    @server.after_request
    def _log_request(response):
        started = getattr(g, "whestboard_t0", None)
        path = request.path
        fields: dict[str, Any] = {
            "method": request.method,
            "path": path,
            "status": response.status_code,
            "duration_ms": round((time.perf_counter() - started) * 1000, 1) if started else None,
            "client": request_client_id(),
            "verdict": "ok" if response.status_code < 400 else ("refused" if response.status_code < 500 else "error"),
        }
        if path.endswith("/_dash-update-component"):
            fields["what"] = _callback_what()
            if request.args.get("cacheKey"):
                fields["background"] = "poll"
        quiet = path.startswith(QUIET_PREFIXES) and response.status_code < 400
        logs.event("request", level=logging.DEBUG if quiet else logging.INFO, **fields)
        return response

    def _log_exception(_sender, exception, **_extra) -> None:
        logs.error("request.error", exception, method=request.method, path=request.path,
                   what=_callback_what(), client=request_client_id())

    got_request_exception.connect(_log_exception, server, weak=False)


# --------------------------------------------------------------------------- request limits


def max_callback_bytes() -> int:
    """The largest callback request: the largest file a page accepts, base64-encoded (4/3), plus framing."""
    from whestbench.limits import MAX_SUBMISSION_BYTES

    from whestboard.submission_import import MAX_FILE_BYTES

    return max(MAX_SUBMISSION_BYTES, MAX_FILE_BYTES) * 4 // 3 + (1 << 20)


def install_request_limits(server: Flask) -> None:
    """Refuse what no page can send before it is parsed: oversized bodies (413) and JSON nested past
    Python's recursion limit (400), each with a sentence instead of a 500 and a traceback."""
    limit = max_callback_bytes()
    server.config["MAX_CONTENT_LENGTH"] = limit  # also bounds a body sent without Content-Length

    @server.before_request
    def _refuse_oversized_callbacks():
        if request.path.endswith("_dash-update-component") and (request.content_length or 0) > limit:
            abort(413, description=f"request larger than {limit // 2**20} MiB")

    @server.errorhandler(RecursionError)
    def _too_deep(_exc):
        return jsonify({"error": "the request is nested too deeply to read; send plain values"}), 400


# --------------------------------------------------------------------------- compression

#: Responses flask-compress may encode: scripts, styles, pages and callback JSON.
COMPRESSED_TYPES = ["text/html", "text/css", "text/javascript", "application/javascript", "application/json",
                    "image/svg+xml"]
STATIC_PREFIXES = ("/_dash-component-suites/", "/assets/")
_STATIC_KEYS_KEPT = 128


class _StaticAssetCache:
    """flask-compress cache holding compressed *static* assets only, keyed by the resource, not the URL.

    Scripts never change while a process lives, so each is compressed once per process and encoding;
    everything else (pages, callback JSON) is compressed afresh. The key drops Dash's fingerprint, so a
    client inventing fingerprints cannot grow the cache, and the cache is bounded anyway.
    """

    def __init__(self) -> None:
        self._data: dict[str, bytes] = {}
        self._lock = threading.Lock()

    def get(self, key: str) -> bytes | None:
        return self._data.get(key)

    def set(self, key: str, value: bytes) -> None:
        if key.endswith(";dynamic"):
            return
        with self._lock:
            if key not in self._data and len(self._data) >= _STATIC_KEYS_KEPT:
                self._data.pop(next(iter(self._data)))
            self._data[key] = value


def _compression_key(req) -> str:
    from dash.fingerprint import check_fingerprint

    if not req.path.startswith(STATIC_PREFIXES):
        return "dynamic"
    return check_fingerprint(req.path)[0]


def install_compression(server: Flask) -> None:
    """brotli where the browser accepts it, else gzip, for scripts, CSS, pages and callback JSON.

    Fingerprinted scripts keep Dash's one-year cache lifetime (the compressed copy is what is cached).
    ``WHESTBOARD_COMPRESS=0`` turns it off, for a proxy in front that compresses already.
    """
    if not settings.compression_enabled():
        return
    from flask_compress import Compress

    server.config.update(
        COMPRESS_ALGORITHM=["br", "gzip"],
        COMPRESS_BR_LEVEL=6,  # 1.27 MB for plotly.min.js in 0.12 s; quality 11 saves 0.16 MB for 70x the time
        COMPRESS_LEVEL=6,
        COMPRESS_MIMETYPES=COMPRESSED_TYPES,
        COMPRESS_MIN_SIZE=500,
        COMPRESS_CACHE_BACKEND=_StaticAssetCache,
        COMPRESS_CACHE_KEY=_compression_key,
    )
    Compress(server)
