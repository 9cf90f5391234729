"""Structured JSON logs: one line per request and per job, secrets never written.

Organizers debugging a busy phase need to answer "who ran what, how long did
it take, how did it end" from the logs alone, across several workers and
machines. So every record is one JSON object on stderr with fixed keys
(``event``, ``client``, ``what``, ``duration_ms``, ``verdict``...), and every
string that reaches a record passes :func:`redact` first: bearer tokens,
``Authorization``/cookie headers, ``token=``/``password=`` query parameters and
the password inside a database or Redis URL are replaced by ``***``.

Clients are identified by a keyed hash of their address (and user agent), the
key living in the shared state folder: the same visitor gets the same id on
every worker of a machine, and the id cannot be turned back into an address.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import re
import sys
import traceback
from typing import Any

from whestboard import config

LOGGER_NAME = "whestboard"
SECRET_KEYS = ("token", "password", "passwd", "secret", "authorization", "api_key", "apikey", "cookie", "key")

_URL_PASSWORD = re.compile(r"(?P<scheme>[a-zA-Z][a-zA-Z0-9+.\-]*://)(?P<user>[^:/@\s]*):(?P<pw>[^@/\s]+)@")
_BEARER = re.compile(r"(?i)\b(bearer|basic|token)\s+[A-Za-z0-9._~+/=\-]{6,}")
_KEY_VALUE = re.compile(
    r"(?i)(?P<k>[\w\-]*(?:token|password|passwd|secret|authorization|api[_-]?key)[\w\-]*)"
    r"(?P<sep>\"?\s*[=:]\s*\"?)(?P<v>[^\s&\"',;}]+)"
)


def redact(text: str) -> str:
    """``text`` with passwords in URLs, bearer tokens and ``secret=value`` pairs masked."""
    if not text:
        return text
    text = _URL_PASSWORD.sub(lambda m: f"{m['scheme']}{m['user']}:***@", text)
    text = _BEARER.sub(lambda m: f"{m.group(1)} ***", text)
    return _KEY_VALUE.sub(lambda m: f"{m['k']}{m['sep']}***", text)


def _is_secret_key(key: str) -> bool:
    lowered = key.lower()
    return any(s in lowered for s in SECRET_KEYS if s != "key") or lowered in ("key", "x-api-key")


def scrub(value: Any, key: str = "") -> Any:
    """A copy of ``value`` safe to log: secret-named fields masked, strings redacted."""
    if key and _is_secret_key(key):
        return "***"
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, dict):
        return {str(k): scrub(v, str(k)) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [scrub(v) for v in value]
    if isinstance(value, (int, float, bool)) or value is None:
        return value
    return redact(repr(value))


class JsonFormatter(logging.Formatter):
    """One JSON object per line; extra fields come from ``logger.info(..., extra={"fields": {...}})``."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "ts": round(record.created, 3),
            "level": record.levelname.lower(),
            "logger": record.name,
            "pid": record.process,
            "msg": redact(record.getMessage()),
        }
        fields = getattr(record, "fields", None)
        if fields:
            entry.update(scrub(fields))
        if record.exc_info:
            entry["error"] = redact("".join(traceback.format_exception(*record.exc_info)).strip())
        return json.dumps(entry, default=str, sort_keys=False)


def configure(level: str | None = None) -> logging.Logger:
    """Send the ``whestboard`` logger to stderr as JSON (idempotent; level from WHESTBOARD_LOG_LEVEL)."""
    logger = logging.getLogger(LOGGER_NAME)
    level_name = (level or config.log_level()).upper()
    logger.setLevel(getattr(logging, level_name, logging.INFO))
    if not any(isinstance(h.formatter, JsonFormatter) for h in logger.handlers):
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(JsonFormatter())
        logger.addHandler(handler)
    logger.propagate = False
    return logger


_configured = False


def get_logger(name: str = "") -> logging.Logger:
    """The ``whestboard`` logger (configured on first use, so CLI and workers log JSON too)."""
    global _configured
    if not _configured:
        configure()
        _configured = True
    return logging.getLogger(f"{LOGGER_NAME}.{name}" if name else LOGGER_NAME)


def event(name: str, *, level: int = logging.INFO, logger: logging.Logger | None = None, **fields: Any) -> None:
    """Log one structured event, e.g. ``event("job.finish", job=..., verdict="ok", duration_ms=12)``."""
    (logger or get_logger()).log(level, name, extra={"fields": {"event": name, **fields}})


def error(name: str, exc: BaseException, **fields: Any) -> None:
    """Log an error with its traceback and whatever context the caller has (all redacted)."""
    get_logger().error(
        name,
        exc_info=(type(exc), exc, exc.__traceback__),
        extra={"fields": {"event": name, "error_type": type(exc).__name__, "error_msg": str(exc), **fields}},
    )


def client_id(client: str | None, key: bytes) -> str:
    """A stable, irreversible 12-hex-digit id for one client (its address, or its IPv6 /64) under ``key``
    (the store's shared secret ``client-id``, so every machine gives a visitor the same id and per-user
    limits and cancel hold across machines)."""
    raw = (client or "-").encode()
    return hmac.new(key, raw, hashlib.sha256).hexdigest()[:12]
