"""The one reader of ``WHESTBOARD_*`` variables: every setting of a deployment, parsed and checked here.

Owns: the environment. Imports nothing of Whestboard, so every layer may ask it.
Each function reads the variable when called (tests and the CLI change the
environment between calls) and fails with a sentence naming the variable and
what to write when a value cannot be read. docs/production.md lists them all.
"""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Mapping
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
_OFF = ("0", "false", "no", "off")
_ON = ("1", "true", "yes", "on")
_made: set[Path] = set()


# --------------------------------------------------------------------------- reading values


def _raw(name: str) -> str | None:
    value = os.environ.get(name)
    return value.strip() if value is not None and value.strip() else None


def _number(name: str, default: float, *, minimum: float | None = None, unit: str = "number") -> float:
    raw = _raw(name)
    if raw is None:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(f"{name}={raw!r} is not a {unit}") from None
    if minimum is not None and value < minimum:
        raise ValueError(f"{name} must be at least {minimum:g}, got {raw!r}")
    return value


def _whole(name: str, default: int, *, minimum: int | None = None) -> int:
    raw = _raw(name)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ValueError(f"{name}={raw!r} is not a whole number") from None
    if minimum is not None and value < minimum:
        raise ValueError(f"{name} must be at least {minimum}, got {value}")
    return value


def _flag(name: str, default: bool) -> bool:
    raw = _raw(name)
    if raw is None:
        return default
    if raw.lower() in _ON:
        return True
    if raw.lower() in _OFF:
        return False
    raise ValueError(f"{name}={raw!r} is neither on (1, true, yes) nor off (0, false, no)")


# --------------------------------------------------------------------------- data and state


def data_dir() -> Path:
    """Folder of embedded datasets (``WHESTBOARD_DATA_DIR``, default ``data/``)."""
    return Path(_raw("WHESTBOARD_DATA_DIR") or REPO_ROOT / "data")


def paper_dir() -> Path:
    """Folder of the paper figure's measurements (``WHESTBOARD_PAPER_DIR``, default ``data/paper``)."""
    return Path(_raw("WHESTBOARD_PAPER_DIR") or data_dir() / "paper")


def extra_dataset_paths() -> list[Path]:
    """The user's own dataset directories (``WHESTBOARD_DATASETS``, separated by ``os.pathsep``)."""
    return [Path(p.strip()).expanduser() for p in (_raw("WHESTBOARD_DATASETS") or "").split(os.pathsep)
            if p.strip()]


def state_dir() -> Path:
    """Writable folder for the store, caches and job queues (``WHESTBOARD_STATE_DIR``).

    Asked for on every request: created once per process and path, not once per call.
    """
    path = Path(_raw("WHESTBOARD_STATE_DIR") or data_dir() / ".state")
    if path not in _made or not path.is_dir():
        path.mkdir(parents=True, exist_ok=True)
        _made.add(path)
    return path


def kept_datasets_dir() -> Path:
    """Where datasets made in the app are kept (``<state dir>/datasets``): served like the embedded ones."""
    return state_dir() / "datasets"


def kept_datasets_limits() -> dict[str, int]:
    """How many datasets the playground may keep (``WHESTBOARD_KEPT_*``, docs/production.md): in all
    (``WHESTBOARD_KEPT_MAX``, 64), per client (``WHESTBOARD_KEPT_PER_CLIENT``, 8) and their bytes in the
    shared store (``WHESTBOARD_KEPT_MAX_MB``, 256 MiB)."""
    return {"max_count": _whole("WHESTBOARD_KEPT_MAX", 64, minimum=0),
            "per_client": _whole("WHESTBOARD_KEPT_PER_CLIENT", 8, minimum=0),
            "max_bytes": int(_number("WHESTBOARD_KEPT_MAX_MB", 256, minimum=0, unit="number of MiB") * (1 << 20))}


def database_url() -> str:
    """SQLAlchemy URL of the store; an SQLite file under the state folder by default."""
    return _raw("WHESTBOARD_DATABASE_URL") or f"sqlite:///{state_dir() / 'whestboard.sqlite'}"


def redis_url() -> str | None:
    return _raw("WHESTBOARD_REDIS_URL")


DEFAULT_CACHE_BYTES = 1 << 30


def cache_bytes() -> int:
    """Bytes each process's caches may hold (``WHESTBOARD_CACHE_BYTES``, default 1 GiB).

    The MLP weights take all of it; every other region of :mod:`whestboard.cache` a stated share.
    """
    return max(0, int(_number("WHESTBOARD_CACHE_BYTES", DEFAULT_CACHE_BYTES, unit="number of bytes")))


DEFAULT_UPLOAD_MAX_MB = 64


def upload_max_bytes() -> int:
    """The largest file any upload may carry (``WHESTBOARD_UPLOAD_MAX_MB``, default 64 MiB).

    The one limit of the estimator upload page, the leaderboard's imports (page, HTTP API and command
    line) and the callback request that carries a file. The default lets every documented upload
    through: an import file of 64 MiB, and an estimator of whestbench's 50 MiB (whose own cap the
    sandbox still applies, as the grader does).
    """
    return int(_number("WHESTBOARD_UPLOAD_MAX_MB", DEFAULT_UPLOAD_MAX_MB, minimum=0, unit="number of MiB")
               * (1 << 20))


def uploads_store_bytes() -> int:
    """The most the uploaded-estimator store holds at any moment (``WHESTBOARD_UPLOADS_MAX_MB``, 2048): in
    the shared store, and in each machine's copy under its state folder (docs/uploads.md)."""
    return int(_number("WHESTBOARD_UPLOADS_MAX_MB", 2048, minimum=0, unit="number of MiB") * (1 << 20))


def uploads_per_client_bytes() -> int:
    """What one client's uploads may add to the store within an hour (``WHESTBOARD_UPLOADS_PER_CLIENT_MB``,
    256): five estimators at whestbench's 50 MiB cap, or thousands of ordinary ones."""
    return int(_number("WHESTBOARD_UPLOADS_PER_CLIENT_MB", 256, minimum=0, unit="number of MiB") * (1 << 20))


# --------------------------------------------------------------------------- who may do what


def organizer_token() -> str | None:
    return _raw("WHESTBOARD_ORGANIZER_TOKEN")


def served_process() -> bool:
    """Whether this process serves others: a gunicorn worker (or a job forked from one), or a Celery worker.

    The default of every switch that lets a visitor run code is off in such a process and on for a
    local ``python app.py`` (and the jobs it forks): the same answer in the web worker that admits a job
    and in the process that runs it.
    """
    import sys

    program = os.path.basename(sys.argv[0] if sys.argv else "")
    return "gunicorn" in program or "celery" in program or "gunicorn" in sys.modules


def uploads_allowed(*, under_gunicorn: bool | None = None) -> bool:
    """Uploads run arbitrary code: on for a local ``python app.py``, opt-in under gunicorn and Celery
    (``WHESTBOARD_ALLOW_UPLOADS``). ``under_gunicorn`` None: this process decides (:func:`served_process`)."""
    served = served_process() if under_gunicorn is None else under_gunicorn
    return _flag("WHESTBOARD_ALLOW_UPLOADS", not served)


def kept_estimators() -> dict[str, Path]:
    """Estimators the operator keeps on the server for the pages to name (``WHESTBOARD_KEPT_ESTIMATORS``).

    Paths separated by ``os.pathsep``: a folder with ``estimator.py``, an estimator ``.py`` or a ``whest
    package`` archive; each is named ``kept:NAME`` by its file or folder name without suffix. A browser
    names one only by that name: the server never looks up a path a visitor sent.
    """
    found: dict[str, Path] = {}
    for part in (_raw("WHESTBOARD_KEPT_ESTIMATORS") or "").split(os.pathsep):
        if not part.strip():
            continue
        path = Path(part.strip()).expanduser()
        name = path.name
        for suffix in (".tar.gz", ".tgz", ".py"):
            name = name.removesuffix(suffix)
        if not name or not all(c.isalnum() or c in "._-" for c in name):
            raise ValueError(f"WHESTBOARD_KEPT_ESTIMATORS: {part.strip()!r} does not end in a name of letters, "
                             "digits, '.', '_' or '-' (its NAME in kept:NAME)")
        if name in found:
            raise ValueError(f"WHESTBOARD_KEPT_ESTIMATORS names {name!r} twice ({found[name]} and {path}): "
                             "rename one of them")
        found[name] = path
    return found


# --------------------------------------------------------------------------- serving


def host() -> str:
    return _raw("WHESTBOARD_HOST") or "127.0.0.1"


def port() -> int:
    return _whole("WHESTBOARD_PORT", 8050, minimum=1)


def compression_enabled() -> bool:
    """Whether the app compresses its responses (``WHESTBOARD_COMPRESS``, default on)."""
    return _flag("WHESTBOARD_COMPRESS", True)


def log_level() -> str:
    return (_raw("WHESTBOARD_LOG_LEVEL") or "INFO").upper()


def gunicorn_workers() -> int:
    return _whole("WHESTBOARD_WORKERS", min(8, 2 * multiprocessing.cpu_count() + 1), minimum=1)


def gunicorn_threads() -> int:
    return _whole("WHESTBOARD_THREADS", 4, minimum=1)


def gunicorn_timeout() -> int:
    return _whole("WHESTBOARD_TIMEOUT", 120, minimum=1)


def gunicorn_preload() -> bool:
    return _flag("WHESTBOARD_PRELOAD", True)


def job_niceness() -> int:
    """How much lower than the web workers background jobs run (``WHESTBOARD_JOB_NICE``, 0-19, default 10)."""
    raw = _raw("WHESTBOARD_JOB_NICE")
    try:
        value = int(raw) if raw else 10
    except ValueError as exc:
        raise ValueError(f"WHESTBOARD_JOB_NICE={raw!r} is not a whole number from 0 to 19") from exc
    return min(max(value, 0), 19)


# --------------------------------------------------------------------------- the sandbox and its queue


def sandbox_settings(defaults: Mapping[str, float]) -> dict[str, float | int | None]:
    """``WHESTBOARD_SANDBOX_*`` limits of one sandbox, over ``defaults`` (memory_mb, grace_s, file_mb,
    disk_mb, output_kb); ``sandbox_uid`` is None for "none" (keep the uid, drop capabilities)."""
    out: dict[str, float | int | None] = {
        key: _number(f"WHESTBOARD_SANDBOX_{key.upper()}", float(default), minimum=0)
        for key, default in defaults.items()
    }
    uid = _raw("WHESTBOARD_SANDBOX_UID")
    if uid is not None:
        if uid.lower() == "none":
            out["sandbox_uid"] = None
        else:
            try:
                out["sandbox_uid"] = int(uid)
            except ValueError:
                raise ValueError(f"WHESTBOARD_SANDBOX_UID={uid!r} is neither a uid nor 'none'") from None
    return out


def sandbox_fork_server() -> bool:
    """Whether sandbox workers are forked from a warm fork server (the default) or each spawned afresh."""
    return _flag("WHESTBOARD_SANDBOX_FORK_SERVER", True)


def sandbox_queue_settings() -> dict[str, int]:
    """Uploads scored at once per machine, queued-or-running per client, waiting in all."""
    return {"concurrency": _whole("WHESTBOARD_SANDBOX_CONCURRENCY", 1, minimum=1),
            "per_client": _whole("WHESTBOARD_SANDBOX_PER_CLIENT", 2, minimum=1),
            "max_queued": _whole("WHESTBOARD_SANDBOX_QUEUE_MAX", 20, minimum=1)}


#: Variables that choose OpenBLAS's kernel: a float32 result moves in its last bits with them.
BLAS_KERNEL_ENV = ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")


def blas_kernel_env() -> dict[str, str]:
    """The BLAS kernel variables set in this process (the sandbox passes them on; reports record them)."""
    return {name: os.environ[name] for name in BLAS_KERNEL_ENV if name in os.environ}


def export_tmpdir(path: Path) -> None:
    """Point this process's ``TMPDIR`` (and :mod:`tempfile`) at ``path``: the sandbox worker's private /tmp."""
    import tempfile

    os.environ["TMPDIR"] = str(path)
    tempfile.tempdir = None  # re-read on next use


def export_home(path: Path) -> None:
    """Point this process's ``HOME`` and ``TMPDIR`` at ``path``: a worker forked from the sandbox's fork server
    takes its own working folder, as a spawned worker is given it in its environment."""
    os.environ["HOME"] = str(path)
    export_tmpdir(path)


# --------------------------------------------------------------------------- the front and who is behind it


def trusted_proxies() -> tuple[str, ...]:
    """Peers whose ``X-Forwarded-For`` is believed (``WHESTBOARD_TRUSTED_PROXIES``, comma-separated).

    Addresses or networks (``10.0.0.0/8``), and ``unix`` for a peer on a Unix socket: the front of
    ``scripts/serve.sh`` reaches gunicorn over one, so ``unix`` is the default. Anyone else's header is ignored.
    """
    raw = _raw("WHESTBOARD_TRUSTED_PROXIES")
    entries = tuple(part.strip() for part in (raw if raw is not None else "unix").split(",") if part.strip())
    import ipaddress

    for entry in entries:
        if entry.lower() in ("unix", "none"):
            continue
        try:
            ipaddress.ip_network(entry, strict=False)
        except ValueError:
            raise ValueError(f"WHESTBOARD_TRUSTED_PROXIES: {entry!r} is neither an address, a network "
                             "(10.0.0.0/8) nor 'unix'") from None
    return tuple(e for e in entries if e.lower() != "none")


def front_settings() -> dict[str, int]:
    """The buffering front's timeouts in seconds (``WHESTBOARD_FRONT_*``, docs/production.md)."""
    return {"header_timeout_s": _whole("WHESTBOARD_FRONT_HEADER_TIMEOUT_S", 5, minimum=1),
            "body_timeout_s": _whole("WHESTBOARD_FRONT_BODY_TIMEOUT_S", 4, minimum=1),
            "send_timeout_s": _whole("WHESTBOARD_FRONT_SEND_TIMEOUT_S", 30, minimum=1),
            "keepalive_s": _whole("WHESTBOARD_FRONT_KEEPALIVE_S", 15, minimum=0),
            "connections": _whole("WHESTBOARD_FRONT_CONNECTIONS", 4096, minimum=64)}


# --------------------------------------------------------------------------- budgets on work


def job_budgets() -> dict[str, float]:
    """What one background job may cost and how many may run (``WHESTBOARD_JOB_*``, docs/production.md)."""
    return {"max_flops": _number("WHESTBOARD_JOB_MAX_FLOPS", 5e13, minimum=1, unit="number of FLOPs"),
            "per_client": _whole("WHESTBOARD_JOB_PER_CLIENT", 2, minimum=1),
            "total": _whole("WHESTBOARD_JOB_TOTAL", max(2, 2 * multiprocessing.cpu_count()), minimum=1),
            "wall_s": _number("WHESTBOARD_JOB_WALL_S", 1800, minimum=1, unit="number of seconds")}
# --------------------------------------------------------------------------- faults and recovery


def job_max_seconds() -> float:
    """The longest a background job may run (``WHESTBOARD_JOB_WALL_S``, :func:`job_budgets`): the broker
    redelivers an unacknowledged task only after this (plus a margin), so a slow job is never started twice."""
    return job_budgets()["wall_s"]


def final_worker_idle_s() -> float:
    """How long a final's coordinator waits for Celery workers that show no sign of work (no pair scored,
    no batch's heartbeat) before it scores what is left itself (``WHESTBOARD_FINAL_WORKER_IDLE_S``, 30)."""
    return _number("WHESTBOARD_FINAL_WORKER_IDLE_S", 30.0, minimum=0, unit="number of seconds")


def min_free_disk_mb() -> float:
    """Free space the state folder needs for ``/healthz`` to call it ok (``WHESTBOARD_MIN_FREE_MB``, 256)."""
    return _number("WHESTBOARD_MIN_FREE_MB", 256.0, minimum=0, unit="number of MiB")
