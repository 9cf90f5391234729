"""What every HTTP request goes through: a JSON log line, size and depth limits, compression, asset caching,
one read of the store's revision.

Each ``install_*`` function is called once by ``create_app`` on the Flask server.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

import dash
from flask import Flask, abort, g, got_request_exception, jsonify, request
from flask.json.provider import DefaultJSONProvider

from server import domains, faults
from server.background import request_client_id
from server.hooks import callback_what
from whestboard import config, logs
from whestboard.leaderboard import revision_pinned
from whestboard.store import DuplicateKey, strict_json

QUIET_PREFIXES = ("/_dash-component-suites/", "/assets/", "/_favicon", "/healthz", "/_reload-hash")


def install_request_logging(server: Flask) -> None:
    """One JSON line per request: who (hashed), what, status, how long; errors with context."""
    logs.configure()

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
            fields["what"] = callback_what()
            if request.args.get("cacheKey"):
                fields["background"] = "poll"
        quiet = path.startswith(QUIET_PREFIXES) and response.status_code < 400
        logs.event("request", level=logging.DEBUG if quiet else logging.INFO, **fields)
        return response

    def _log_exception(_sender, exception, **_extra) -> None:
        logs.error("request.error", exception, method=request.method, path=request.path,
                   what=callback_what(), client=request_client_id())

    got_request_exception.connect(_log_exception, server, weak=False)


# --------------------------------------------------------------------------- request limits


def max_callback_bytes() -> int:
    """The largest callback request: the largest file a page accepts, base64-encoded (4/3), plus framing."""
    return config.upload_max_bytes() * 4 // 3 + (1 << 20)


class StrictJSONProvider(DefaultJSONProvider):
    """Flask's JSON, except that an object naming a key twice is refused (400, naming the key)."""

    def loads(self, s, **kwargs):
        return strict_json(s, **kwargs)


def install_request_limits(server: Flask) -> None:
    """Refuse what no page can send before it is parsed: oversized bodies (413), JSON nested past
    Python's recursion limit or naming a key twice (400), and callback values outside their components'
    domains (400, ``server.domains``), each with a sentence instead of a 500 and a traceback."""
    limit = max_callback_bytes()
    server.config["MAX_CONTENT_LENGTH"] = limit  # also bounds a body sent without Content-Length
    server.json = StrictJSONProvider(server)

    @server.before_request
    def _refuse_oversized_callbacks():
        if request.path.endswith("_dash-update-component") and (request.content_length or 0) > limit:
            abort(413, description=f"request larger than {limit // 2**20} MiB")

    @server.before_request
    def _refuse_out_of_domain_callbacks():
        if not (request.method == "POST" and request.path.endswith("_dash-update-component")):
            return None
        try:
            body = strict_json(request.get_data(cache=True))
        except DuplicateKey as exc:
            return jsonify({"error": str(exc)}), 400
        except (ValueError, UnicodeDecodeError):
            return jsonify({"error": "the callback request is not valid JSON"}), 400
        try:
            domains.check_callback_body(body, callbacks=dash.get_app().callback_map)
        except domains.OutOfDomain as exc:
            logs.event("request.refused", level=logging.INFO, path=request.path, reason=str(exc),
                       client=request_client_id())
            return jsonify({"error": str(exc)}), 400
        return None

    @server.errorhandler(RecursionError)
    def _too_deep(_exc):
        return jsonify({"error": "the request is nested too deeply to read; send plain values"}), 400


# --------------------------------------------------------------------------- faults


def install_fault_answers(server: Flask) -> None:
    """A full disk, an unreachable broker or database answers 503 with a sentence saying what failed and
    that nothing was lost (``server/faults.py``), not a bare 500; any other error stays a 500."""

    @server.errorhandler(Exception)
    def _infrastructure_fault(exc: Exception):
        from werkzeug.exceptions import HTTPException

        if isinstance(exc, HTTPException):
            return exc
        described = faults.describe(exc)
        if described is None:
            raise exc
        logs.error("request.fault", exc, method=request.method, path=request.path, what=callback_what(),
                   client=request_client_id(), fault=faults.classify(exc))
        return jsonify({"error": described, "fault": faults.classify(exc)}), 503, {"Retry-After": "30"}


# --------------------------------------------------------------------------- compression

#: Responses flask-compress may encode: scripts, styles, pages and callback JSON.
COMPRESSED_TYPES = ["text/html", "text/css", "text/javascript", "application/javascript", "application/json",
                    "image/svg+xml"]
STATIC_PREFIXES = ("/_dash-component-suites/", "/assets/")
#: Smaller responses go out as they are: the encoding's framing would outweigh the saving.
COMPRESS_MIN_SIZE = 500
STATIC_KEYS_KEPT = 128


class StaticAssetCache:
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

    def __len__(self) -> int:
        return len(self._data)

    def set(self, key: str, value: bytes) -> None:
        if key.endswith(";dynamic"):
            return
        with self._lock:
            if key not in self._data and len(self._data) >= STATIC_KEYS_KEPT:
                self._data.pop(next(iter(self._data)))
            self._data[key] = value


def compression_key(req) -> str:
    from dash.fingerprint import check_fingerprint

    if not req.path.startswith(STATIC_PREFIXES):
        return "dynamic"
    return check_fingerprint(req.path)[0]


def install_revision_pinning(server: Flask) -> None:
    """Each request reads the store's revision once, however many cached views it draws (``revision_pinned``)."""

    @server.before_request
    def _pin_revision() -> None:
        g.whestboard_pin = revision_pinned()
        g.whestboard_pin.__enter__()

    @server.teardown_request
    def _unpin_revision(_exc) -> None:
        pin = g.pop("whestboard_pin", None)
        if pin is not None:
            pin.__exit__(None, None, None)


def install_compression(server: Flask) -> None:
    """brotli where the browser accepts it, else gzip, for scripts, CSS, pages and callback JSON.

    Fingerprinted scripts keep Dash's one-year cache lifetime (the compressed copy is what is cached).
    ``WHESTBOARD_COMPRESS=0`` turns it off, for a proxy in front that compresses already.
    """
    if not config.compression_enabled():
        return
    from flask_compress import Compress

    server.config.update(
        COMPRESS_ALGORITHM=["br", "gzip"],
        COMPRESS_BR_LEVEL=6,  # 1.27 MB for plotly.min.js in 0.12 s; quality 11 saves 0.16 MB for 70x the time
        COMPRESS_LEVEL=6,
        COMPRESS_MIMETYPES=COMPRESSED_TYPES,
        COMPRESS_MIN_SIZE=COMPRESS_MIN_SIZE,
        COMPRESS_CACHE_BACKEND=StaticAssetCache,
        COMPRESS_CACHE_KEY=compression_key,
    )
    Compress(server)

    @server.after_request  # registered after flask-compress's, so it runs before it
    def _read_static_files_whole(response):
        # Flask streams the files of assets/ from disk, and flask-compress encodes a stream afresh on every
        # request (zstd at level 3, never cached): the plotly.js bundle went out 11% larger than brotli.
        # Read whole, they take the cached path that Dash's scripts take.
        if (response.is_streamed and response.status_code == 200 and request.path.startswith(STATIC_PREFIXES)
                and response.mimetype in COMPRESSED_TYPES):
            response.direct_passthrough = False
            response.get_data()
        return response



# --------------------------------------------------------------------------- asset caching

#: One year, Dash's own lifetime for fingerprinted component scripts.
ASSET_MAX_AGE = 31_536_000
#: Query keys that version an asset's address: Dash adds ``?m=<mtime>`` to every file of ``assets/`` it
#: links; ``assets/plotly_loader.js`` asks for the plotly.js bundle with ``?v=<sha256>``.
ASSET_VERSION_KEYS = ("m", "v")


def install_asset_caching(server: Flask, assets_prefix: str = "/assets/") -> None:
    """Files of ``assets/`` asked for by a versioned address are kept by the browser for a year.

    Flask answers them ``Cache-Control: no-cache``, so every visit asked again, and behind compression the
    answer was the whole file again. A changed file has a new address (Dash's ``m`` is its modification
    time), so a kept copy is never stale. Unversioned addresses keep Flask's revalidation.
    """

    @server.after_request
    def _cache_versioned_assets(response):
        if (response.status_code == 200 and request.path.startswith(assets_prefix)
                and any(request.args.get(key) for key in ASSET_VERSION_KEYS)):
            response.headers["Cache-Control"] = f"public, max-age={ASSET_MAX_AGE}, immutable"
        return response
