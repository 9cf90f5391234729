"""Dash's background callbacks, recorded in the job ledger: diskcache on one machine, Celery beyond it.

Zero configuration gives a single-machine deployment whose gunicorn workers share everything through the
state folder: a diskcache-backed DiskcacheManager (multi-process safe) with the job ledger in the SQLite
store. With ``WHESTBOARD_REDIS_URL`` set, Dash's CeleryManager runs the jobs on ``celery -A worker worker``
processes on any number of machines: the one Celery application of the job system
(``whestboard.jobs.celery_app``), which carries the job bodies core packages spread over the same workers.

Both managers are wrapped by :class:`_Ledger` so every launch is recorded in :mod:`whestboard.jobs._ledger`:
a duplicate delivery never computes twice, and a job whose process died is reported to the user as failed
with the reason instead of the poll silently giving up (what plain Dash does).
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import json
import logging
import sqlite3
import threading
import time
import uuid
from typing import Any

from dash._callback_context import context_value
from dash.exceptions import PreventUpdate
from flask import request
from sqlalchemy.exc import SQLAlchemyError

from server import faults
from server.identity import client_key
from server.warm import warm_process
from whestboard import config, logs
from whestboard.jobs import (
    ACTIVE,
    CANCELLED,
    NOT_KEPT,
    NOT_STARTED,
    RESULT_LOST_AFTER_S,
    Launch,
    Launcher,
    OverBudget,
    admit,
    cancel_job,
    celery_app,
    deadline,
    fail_if_dead,
    fail_unkept,
    fail_unstarted,
    find_job,
    handle_running,
    is_lost,
    process_handle,
    process_of,
    run_tracked,
    set_handle,
)
from whestboard.store import shared_secret

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
#: The key Dash signs background-callback handles with (``cacheKey``, ``job``, the page's ``end_id``).
HANDLE_SIGNING_SECRET = "dash-handles"


def visitor_id(address: str | None) -> str:
    """A visitor's hashed id under the store's shared secret: the same on every machine.

    The address alone, as :func:`server.identity.client_key` reads it (an IPv6 address's /64): a client
    chooses every header it sends, so a User-Agent in the id let one address hold as many job slots as
    it cared to invent names."""
    return logs.client_id(client_key(address), shared_secret(CLIENT_ID_SECRET))


def request_client_id() -> str | None:
    """The hashed id of the visitor behind the current request, or None outside one (or, for a log line,
    while the store cannot be reached).

    ``remote_addr`` is the real client: ``server.identity`` believes X-Forwarded-For only from trusted proxies."""
    try:
        return visitor_id(request.remote_addr)
    except (RuntimeError, SQLAlchemyError):  # no request context (a Celery worker, a script), or no store
        return None


def launching_client() -> str | None:
    """Who asked for the work: inside a background job, the client that launched it (as the ledger
    recorded it at launch); in a request, the request's client."""
    try:
        info = (context_value.get() or {}).get(JOB_FIELD)
    except LookupError:  # outside any callback
        info = None
    return info.get("owner") if info else request_client_id()


def job_failed_payload(reason: str) -> dict:
    """What a dead job returns to Dash: its error path, carrying a message for the user."""
    msg = f"{JOB_FAILED}{reason}). Nothing was recorded for it; please run it again."
    return {"background_callback_error": {"msg": msg, "tb": ""}}


#: The handle of a launch the backend refused ("unsent:disk"): its first poll tells the user why.
UNSENT = "unsent:"


def fault_payload(fault: str, *, started: bool = True) -> dict:
    """A job's error path carrying the fault's sentence: the poll is how a background callback's user hears
    of it (what the error hook says during a poll never reaches the page)."""
    sentence = faults.sentence(fault) if fault in (faults.DISK, faults.BROKER, faults.STORE) else ""
    what = f"{fault} failure" if started else f"{NOT_STARTED}: {fault} failure"
    return {"background_callback_error": {"msg": f"{JOB_FAILED}{what}). {sentence}", "tb": ""}}


def unsent_payload(handle: str) -> dict:
    return fault_payload(handle[len(UNSENT):], started=False)


def _is_error(value) -> bool:
    """A job's stored error (its own, or a refusal): passed on as it is, whatever the ledger says."""
    return isinstance(value, dict) and "background_callback_error" in value


LOST_IN_QUEUE = ("lost by the job queue: Redis went away, and came back without it, before any worker took "
                 "it")
#: How long a queued job's message must be missing from the broker before it counts as lost: kombu moves
#: a message from the queue to its unacknowledged set in two steps, and a look in between sees neither.
LOST_AFTER_S = 5.0

RESULT_LOST_PAYLOAD = {"background_callback_error": {"tb": "", "msg": (
    f"{JOB_FAILED}result lost). It finished, but its result was gone from the job queue (Redis restarted "
    "without its data) before this page read it; what the job recorded (a lab run's run) is in the store. "
    "Please run it again to see it here.")}}


def broker_trouble(exc: BaseException) -> bool:
    """An error from the broker or result store (Redis): the job itself may be fine."""
    return faults.classify(exc) == faults.BROKER


_poll = threading.local()
PRICE_ATTR = "whestboard_price"


def priced(what: str, cost):
    """Declare a background callback's price: ``cost(*inputs)`` estimates its work in FLOPs before it
    is launched (None, or an error, when its inputs are not what the page sends: the job is not started).
    Every background callback is priced (a test checks it); :mod:`whestboard.jobs._budgets` refuses a job
    over its limits with a sentence."""
    def mark(fn):
        setattr(fn, PRICE_ATTR, (what, cost))
        return fn
    return mark


def _admit(job_fn, args, launch: dict) -> None:
    """The budgets' one question, asked before every launch: cost first, then the client's and all slots,
    counted and the job recorded in the ledger (``launch``: its row) in one locked transaction, so launches
    at once cannot share the last slot.

    A job whose cost cannot be estimated from its inputs is not started either: its inputs are not what
    the page sends (a hand-made request), and a job process would only fail on them."""
    what, cost = getattr(job_fn, PRICE_ATTR, ("This job", None))  # carried over by make_job_fn
    values = list(args.values()) if isinstance(args, dict) else list(args or [])
    try:
        flops = cost(*values) if cost is not None else None
    except (ValueError, KeyError, TypeError, AttributeError, FileNotFoundError) as exc:
        raise OverBudget(f"{what} cannot start: {exc.args[0] if isinstance(exc, KeyError) and exc.args else exc}"
                                 ) from None
    if cost is not None and flops is None:
        raise OverBudget(f"{what} cannot start: its inputs are not ones this page sends; reload the page")
    owner = launch.get("owner")
    admit(what, flops, owner, enqueue={k: v for k, v in launch.items() if k != "owner"})


def _within_wall_time(job_id: str, compute):
    with deadline(job_id):
        return compute()


def handle_signing_secret() -> bytes:
    """The one key every web worker of every machine signs background-callback handles with.

    Dash keeps it in the job result store (the state folder's diskcache, or Redis) and, when that store
    cannot answer at a process's first need (a full disk, Redis away), falls back for good to a random
    key of that process alone: every poll that later lands on another worker fails to verify and ends
    in silence. The shared store answers on every machine, Redis or no Redis, and a full disk still
    reads. Raises when the store cannot be reached (the caller decides what a page does meanwhile).
    """
    return shared_secret(HANDLE_SIGNING_SECRET, 64)


#: What Dash copies from the web request into a job's context and no job reads, blanked before launch: with
#: Celery the context is the task's message in Redis (and its append-only file), and a request's headers
#: and cookies carry whatever credentials a visitor's browser or a front in between added.
REQUEST_ONLY = {"headers": {}, "cookies": {}, "remote": None}


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

    def get_or_create_signing_secret(self, generate):
        return handle_signing_secret()

    def call_job_fn(self, key, job_fn, args, context):
        job_id = uuid.uuid4().hex
        kind, owner = _describe_outputs(context), request_client_id()
        try:
            _admit(job_fn, args, {"job_id": job_id, "result_key": key, "kind": kind, "owner": owner,
                                  "backend": self.backend_name})
        except OverBudget as refused:  # nothing launched; the first poll answers with the sentence
            logs.event("job.refused", what=kind, client=owner, verdict="refused", reason=str(refused))
            self._store_result(key, {"background_callback_error": {"msg": f"{JOB_REFUSED}{refused}", "tb": ""}})
            return REFUSED_HANDLE
        except Exception as exc:  # noqa: BLE001 - the store or disk refused the ledger row: said by the first poll
            return self._launch_failed(job_id, kind, owner, exc, enqueued=False)
        try:
            context = dict(context, **REQUEST_ONLY)  # Dash hands a job the request's headers and cookies
            context[JOB_FIELD] = {"job_id": job_id, "result_key": key, "kind": kind, "owner": owner}
            handle = super().call_job_fn(key, job_fn, args, context)
            set_handle(job_id, str(handle))
        except Exception as exc:  # noqa: BLE001 - the row must not stay queued for a job nobody has
            return self._launch_failed(job_id, kind, owner, exc, enqueued=True)
        return handle

    @staticmethod
    def _launch_failed(job_id: str, kind: str, owner: str | None, exc: Exception, *, enqueued: bool) -> str:
        """The broker, the store or the disk refused the launch: mark the row failed with the reason and
        hand Dash a handle whose first poll tells the user in a sentence (Dash drops what an error hook
        says while a background job is being set up, so the poll has to). Anything else is a bug: raised."""
        fault = faults.classify(exc)
        logs.error("job.not_started", exc, job=job_id, what=kind, client=owner, fault=fault)
        if fault is None:
            raise exc
        if enqueued:
            try:
                fail_unstarted(job_id, reason=f"{NOT_STARTED}: {fault} failure ({type(exc).__name__}: {exc})")
            except Exception as store_exc:  # noqa: BLE001 - the store may be what failed
                logs.error("job.unrecorded", store_exc, job=job_id)
        return f"{UNSENT}{fault}"

    def make_job_fn(self, fn, progress, key=None):
        job_fn = super().make_job_fn(self._tracked(fn, bool(progress)), progress, key)
        setattr(job_fn, PRICE_ATTR, getattr(fn, PRICE_ATTR, ("This job", None)))  # read back by _admit
        return job_fn

    def _progress_setter(self, set_progress, result_key: str):
        """What a job reports progress through (Celery wraps it so a broker outage never fails the job)."""
        return set_progress

    def _tracked(self, fn, has_progress: bool = False):
        if inspect.iscoroutinefunction(fn):
            return fn  # async callbacks run untracked: Dash dispatches them differently
        manager = self

        @functools.wraps(fn)
        def tracked(*args, **kwargs):
            info = (context_value.get() or {}).get(JOB_FIELD)
            if not info:
                return fn(*args, **kwargs)
            launch = Launch(**info)
            if has_progress and args:
                args = (manager._progress_setter(args[0], launch.result_key), *args[1:])
            try:
                return run_tracked(
                    launch,
                    lambda: _within_wall_time(launch.job_id, lambda: fn(*args, **kwargs)),
                    already_done=lambda: manager._stored_result(launch.result_key),
                    benign=(PreventUpdate,),
                )
            except Exception as exc:
                described = faults.describe(exc)
                if described is None:
                    raise
                raise RuntimeError(f"{JOB_FAILED}{faults.classify(exc)} failure). {described}") from exc

        return tracked

    def _store_result(self, key: str, value: dict) -> None:
        raise NotImplementedError

    def _stored_result(self, key: str) -> Any:
        """A duplicate delivery's answer: the first run's stored result, if still unread."""
        raise PreventUpdate

    def _process_gone(self, job) -> bool:
        """First-hand knowledge that the job's process has exited (diskcache only)."""
        return False

    def get_progress(self, key):
        try:
            return super().get_progress(key)
        except Exception as exc:
            if faults.classify(exc) is not None:
                return None  # progress is only a view; get_result() next says what became of the job
            raise

    def get_updated_props(self, key):
        try:
            return super().get_updated_props(key)
        except Exception as exc:
            if faults.classify(exc) is not None:
                return {}
            raise

    def get_result(self, key, job):
        """What a poll answers: the job's value once the ledger says it finished, a sentence once it cannot
        finish, else nothing yet. Never an exception: what a poll raises never reaches the page, which
        then stops polling in silence."""
        value = self._poll_answer(key, job)
        _poll.pending = value is self.UNDEFINED  # job_running() below decides whether the page polls on
        return value

    def _poll_answer(self, key, job):
        if str(job).startswith(UNSENT):
            return unsent_payload(str(job))
        _poll.key = key  # job_running() below is asked about this same poll
        _poll.collecting = True
        try:
            result = super().get_result(key, job)
        except Exception as exc:
            fault = faults.classify(exc)
            if fault == faults.BROKER:
                return self._result_while_broker_down(key, job)
            if fault is not None:  # a full disk or a lost store: the job cannot leave its result either
                return fault_payload(fault)
            raise
        finally:
            _poll.collecting = False
        try:
            if result is not self.UNDEFINED:
                return self._kept(result, key, job)
            return self._no_result_yet(key, job)
        except Exception as exc:
            fault = faults.classify(exc)
            if fault is None:
                raise
            logs.error("job.poll_fault", exc, job=str(job), fault=fault)
            return fault_payload(fault)  # the ledger could not be read or written: the job cannot be vouched for

    def _kept(self, result, key, job):
        """The job's value, passed on only once the ledger, read here, says the job finished.

        A job process ends its ledger row (``finished``) after everything its body stores (a run record,
        baselines, playground scores) and before it leaves its value, so a value whose row says so names
        what this server can open. A value beside a row that does not (its ending never reached the
        store this server reads) is lost work presented as success: the poll says so instead."""
        if job is None or _is_error(result):
            return result
        row = find_job(key, str(job))
        if row is None or row.status in ("finished", CANCELLED):
            return result
        if row.status in ACTIVE:
            row = fail_unkept(row)
        return job_failed_payload(row.reason or NOT_KEPT)

    def _no_result_yet(self, key, job):
        if job is None:
            return self.UNDEFINED
        result = self.UNDEFINED
        gone = self._process_gone(job)
        if gone:  # it may have stored its result just before exiting
            _poll.collecting = True
            try:
                result = super().get_result(key, job)
            finally:
                _poll.collecting = False
            if result is not self.UNDEFINED:
                return self._kept(result, key, job)
        row = find_job(key, str(job))
        if row is None:
            return result
        if row.status == CANCELLED:
            return result  # the user cancelled: Dash closes the loop with no update, not an error
        row = fail_if_dead(row, process_gone=gone, pid_check=gone)
        if row.status == "queued" and self._lost_before_start(row):
            fail_unstarted(row.id, reason=LOST_IN_QUEUE)
            return job_failed_payload(LOST_IN_QUEUE)
        if row.status == "failed" and (gone or is_lost(row.reason)):
            return job_failed_payload(row.reason or JOB_DIED)
        if row.status == "finished" and gone:
            if self.backend_name == "diskcache" and faults.state_disk_low():
                return fault_payload(faults.DISK)  # its value could not be written beside the ledger
            return job_failed_payload(f"{JOB_DIED}: process {row.worker} ended without storing its result")
        if row.status == "finished" and time.time() - (row.finished_at or time.time()) > RESULT_LOST_AFTER_S:
            return RESULT_LOST_PAYLOAD  # the job process has given up storing it: never poll forever
        return result

    def _lost_before_start(self, row) -> bool:
        """The backend no longer holds a job that no worker has claimed (Celery only)."""
        return False

    def _result_while_broker_down(self, key, job):
        """The broker holds the result and cannot be read: keep polling while the ledger says the job is
        alive or finished (its result is read once the broker is back); report it if it died."""
        _poll.broker_down = True
        row = find_job(key, str(job)) if job is not None else None
        if row is not None and row.status in ACTIVE:
            row = fail_if_dead(row, pid_check=False)
        if row is not None and row.status == "failed":
            return job_failed_payload(row.reason or JOB_DIED)
        return self.UNDEFINED

    def job_running(self, job):
        """Dash asks this right after get_result(): a job that stored its result and exited in
        between would read as "not running, no result", and the poll would silently give up."""
        key, _poll.key = getattr(_poll, "key", None), None
        pending, _poll.pending = getattr(_poll, "pending", False), False
        if str(job).startswith(UNSENT):
            return False
        if getattr(_poll, "broker_down", False):
            _poll.broker_down = False
            return True  # the poll goes on; the ledger ends it if the job dies
        try:
            running = super().job_running(job)
            if not running and key is not None and self.result_ready(key):
                return True  # the next poll collects the result
            if not running and pending and key is not None and self._ended_unsaid(key, job):
                return True  # the next poll, finding the process gone, says how it ended
        except Exception as exc:
            if not broker_trouble(exc):
                raise
            return True
        return running

    def _ended_unsaid(self, key, job) -> bool:
        """A job whose process exited between this poll's read and Dash's question, leaving no value (its
        disk full, or killed): Dash would close the loop with no update and the page wait in silence. Unless
        the user cancelled it, one more poll finds the process gone and answers with its value or sentence."""
        try:
            row = find_job(key, str(job))
        except Exception as exc:  # noqa: BLE001 - the store cannot be read: the next poll says so
            logs.error("job.poll_fault", exc, job=str(job), fault=faults.classify(exc))
            return True
        return row is not None and row.status != CANCELLED

    def clear_cache_entry(self, key):
        """Drop a value (or progress) once read: a full disk or an absent broker refusing the removal must
        not cost the user the value just read (the entry stays until the store takes writes again)."""
        try:
            super().clear_cache_entry(key)
        except Exception as exc:
            if faults.classify(exc) is None:
                raise
            logs.error("job.result_unremoved", exc, fault=faults.classify(exc))

    def terminate_job(self, job):
        if str(job).startswith(UNSENT):
            return None
        if job is not None and not getattr(_poll, "collecting", False):  # collecting: Dash reaps a job that ended
            cancel_job(str(job))
        try:
            return super().terminate_job(job)
        except Exception as exc:
            if not broker_trouble(exc):
                raise
            logs.error("job.terminate_unsent", exc, job=str(job))  # the row says cancelled; the job ends unread
            return None


_diskcache_managers: list = []


def _diskcache_manager():
    import diskcache
    import psutil
    from dash import DiskcacheManager  # imported here: Celery deployments never load diskcache

    class LaunchingDiskcacheManager(DiskcacheManager):
        """DiskcacheManager whose job processes come from a single-threaded launcher (whestboard.jobs._launcher)."""

        _launcher: Launcher | None = None

        def ensure_launcher(self, *, quiet: bool) -> Launcher:
            if self._launcher is None or not self._launcher.alive():
                if not quiet:
                    logs.event("job.launcher_late", level=logging.WARNING,
                               msg="job launcher started from a threaded process; call "
                                   "server.background.start_job_launcher() while single-threaded")
                self._launcher = Launcher(self.func_registry)
            return self._launcher

        def job_running(self, job):
            return handle_running(str(job))

        def terminate_job(self, job):
            proc = process_of(str(job)) if job is not None else None
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
            return process_handle(pid)  # names the process, not just a pid that may be reused

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

    store = _job_store_class(diskcache)(str(config.state_dir() / "dash-jobs"), disk=_json_only_disk(diskcache))
    store.close()  # reopened lazily per process: no SQLite handle crosses gunicorn's fork
    manager = LedgerDiskcacheManager(store)
    _diskcache_managers.append(manager)
    return manager


@functools.cache
def _job_store_class(diskcache):
    """diskcache's Cache, whose opening may wait for room on the disk.

    Opening a cache writes its settings table, so on a full state folder ``diskcache.Cache(...)`` raises
    and the app could not even start (a restart during the fault). This one starts unopened, and every
    use first tries to open it again: until there is room, each use raises the disk fault, which the
    pages answer with their sentence, and the first use after that finds it open.
    """

    class JobStore(diskcache.Cache):
        def __init__(self, directory: str, **settings) -> None:
            self._where, self._settings, self._opened, self._opening = directory, settings, False, False
            self._open()

        def _open(self) -> None:
            self._opening = True
            try:
                diskcache.Cache.__init__(self, self._where, **self._settings)
                self._opened = True
            except sqlite3.OperationalError as exc:
                if faults.classify(exc) != faults.DISK or getattr(self, "_con_wanted", False):
                    raise
            finally:
                self._opening = False

        def _ensure_open(self) -> None:
            if not (self._opened or self._opening):
                self._con_wanted = True  # this time a failure to open is the caller's to hear
                try:
                    self._open()
                finally:
                    self._con_wanted = False

        @property
        def _con(self):
            self._ensure_open()
            return diskcache.Cache._con.fget(self)

        def __getattr__(self, name: str):  # what a half-done opening never set (``_disk``, the settings)
            if name.startswith("__") or name in ("_where", "_settings", "_opened", "_opening", "_con_wanted"):
                raise AttributeError(name)
            self._ensure_open()
            return object.__getattribute__(self, name)

    return JobStore


@functools.cache
def _json_only_disk(diskcache):
    """How the state folder's job store keeps values: as JSON, what Dash's Celery manager keeps in Redis.

    Dash's DiskcacheManager pickles a job's result, progress and set_props into ``<state>/dash-jobs`` and
    every web worker unpickles what a poll reads there, so anything that could write one entry into the
    folder (an uploaded estimator's sandbox without Landlock runs as the app's user; a PostgreSQL deployment
    keeps no secret in the folder to protect) ran code in the web workers, outside the sandbox, with the
    organizer token in their environment. Here every value is written as JSON (plotly's encoder: components,
    figures and arrays, as the Celery manager writes them) and read back as JSON; an entry stored any other
    way is refused, never unpickled."""
    from _plotly_utils.utils import PlotlyJSONEncoder

    class JsonOnlyDisk(diskcache.Disk):
        def store(self, value, read, key=diskcache.core.UNKNOWN):
            if not read:
                value = json.dumps(value, cls=PlotlyJSONEncoder).encode()
            return super().store(value, read, key=key)

        def fetch(self, mode, filename, value, read):
            if mode not in (diskcache.core.MODE_RAW, diskcache.core.MODE_BINARY):
                raise ValueError(f"a job store entry kept in diskcache mode {mode}, not as JSON: refused")
            data = super().fetch(mode, filename, value, read)
            return data if read else json.loads(data)

    return JsonOnlyDisk


def start_job_launcher() -> None:
    """Fork this process's job launcher now, while it is single-threaded (after the app is imported).

    gunicorn.conf.py calls it from ``post_worker_init``, ``python app.py`` before
    serving. Without it the first background job starts one late, from a thread.
    """
    warm_process()  # jobs are forked from the launcher: what it has loaded, no job loads again
    for manager in _diskcache_managers:
        manager.ensure_launcher(quiet=True)


def _celery_manager():
    from _plotly_utils.utils import PlotlyJSONEncoder
    from dash import CeleryManager

    class LedgerCeleryManager(_Ledger, CeleryManager):
        backend_name = "celery"

        def _store_result(self, key, value):
            self.handle.backend.set(key, json.dumps(value))

        def _progress_setter(self, set_progress, result_key: str):
            """Progress is best effort: one try, no retries (a write waits out an outage, and a job must
            not wait on its progress bar), so the job computes on while Redis is away."""
            progress_key = self._make_progress_key(result_key)
            backend = self.handle.backend

            def set_progress_once(value):
                values = value if isinstance(value, (list, tuple)) else [value]
                try:
                    backend.set(progress_key, json.dumps(values, cls=PlotlyJSONEncoder), max_retries=0)
                except Exception as exc:  # noqa: BLE001 - a lost progress update costs nothing
                    if not broker_trouble(exc):
                        raise

            return set_progress_once

        def _stored_result(self, key):
            raw = self.handle.backend.get(key)
            if raw is None:
                raise PreventUpdate
            return json.loads(raw)

        def _lost_before_start(self, row) -> bool:
            return row.handle is not None and broker_lost_message(self.handle, row.handle, row.id)

    return LedgerCeleryManager(celery_app())


_missing_since: dict[str, float] = {}


def broker_lost_message(celery, task_id: str, job_id: str) -> bool:
    """Whether the broker has lost a queued task: in neither its queue nor its unacknowledged set for
    :data:`LOST_AFTER_S` in a row (a Redis restarted without its data, after the launch was accepted).

    Without this the launch stays ``queued`` and its page polls for the 15 minutes of the never-started
    rule. A broker that cannot be asked answers False (the outage has its own handling)."""
    import redis

    queue = celery.conf.task_default_queue or "celery"
    try:
        client = redis.Redis.from_url(config.redis_url(), socket_timeout=2, socket_connect_timeout=2)
        try:
            held = [*client.lrange(queue, 0, -1), *client.hvals("unacked")]
        finally:
            client.close()
    except redis.RedisError:
        return False
    needle = task_id.encode()
    if any(needle in message for message in held):
        _missing_since.pop(job_id, None)
        return False
    first = _missing_since.setdefault(job_id, time.time())
    if time.time() - first < LOST_AFTER_S:
        return False
    _missing_since.pop(job_id, None)
    return True


def background_callback_manager():
    """Dash background-callback manager: diskcache locally, Celery when Redis is set."""
    return _celery_manager() if config.redis_url() else _diskcache_manager()

