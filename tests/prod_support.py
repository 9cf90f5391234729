"""Servers for the production tests: gunicorn, redis-server, PostgreSQL and Celery, on free loopback ports.

Each is started from its real command line in a private temporary folder and
torn down with its whole process group, so tests never share state with a
developer's server or with each other.
"""

from __future__ import annotations

import glob
import importlib.util
import itertools
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
import requests

REPO = Path(__file__).resolve().parent.parent
VENV_BIN = Path(sys.executable).parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def load_dashclient():
    """benchmarks/dashclient.py by path (flopscope ships a top-level ``benchmarks`` package), loaded once."""
    if "wb_dashclient" in sys.modules:
        return sys.modules["wb_dashclient"]
    spec = importlib.util.spec_from_file_location("wb_dashclient", REPO / "benchmarks" / "dashclient.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["wb_dashclient"] = module
    spec.loader.exec_module(module)
    return module


def alternating_client(bases: list[str], **kw):
    """A simulated browser whose consecutive requests go to the given servers in turn, never by chance.

    With one gunicorn the kernel decides which worker accepts a connection, and a busy or slow-booting
    worker can leave every request to its sibling; alternating between gunicorn servers that share one
    state folder (as workers share it) makes "started by one process, polled from another" certain.
    """
    dashclient = load_dashclient()

    class AlternatingClient(dashclient.DashClient):
        def __init__(self) -> None:
            self._bases = itertools.cycle([b.rstrip("/") for b in bases])
            super().__init__(bases[0], **kw)

        @property
        def base(self) -> str:
            return next(self._bases)

        @base.setter
        def base(self, _value: str) -> None:
            pass

    return AlternatingClient()


def stop_process(proc: subprocess.Popen, grace: float = 15.0) -> None:
    """SIGTERM the leader, then SIGKILL whatever is left of its process group (job children too)."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        pass


def base_env(state_dir: Path, **extra: str) -> dict:
    env = {k: v for k, v in os.environ.items()
           if k not in ("WHESTBOARD_REDIS_URL", "WHESTBOARD_DATABASE_URL", "WHESTBOARD_WORKERS", "WHESTBOARD_THREADS")}
    env.update(WHESTBOARD_STATE_DIR=str(state_dir), PYTHONUNBUFFERED="1", WHESTBOARD_HOST="127.0.0.1")
    env.update(extra)
    return env


@dataclass
class Server:
    base: str
    proc: subprocess.Popen
    log: Path
    state_dir: Path

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")

    def worker_pids(self) -> set[int]:
        import psutil

        return {c.pid for c in psutil.Process(self.proc.pid).children() if c.name() != "python"} or {
            c.pid for c in psutil.Process(self.proc.pid).children()}


def wait_http(url: str, proc: subprocess.Popen, log: Path, timeout: float = 90.0) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}:\n{log.read_text()[-3000:]}")
        try:
            if requests.get(url, timeout=3).status_code < 500:
                return
        except requests.RequestException:
            pass
        time.sleep(0.3)
    raise RuntimeError(f"{url} did not answer within {timeout}s:\n{log.read_text()[-3000:]}")


def wait_workers(proc: subprocess.Popen, workers: int, log: Path, timeout: float = 60.0) -> None:
    """One worker answering is not all of them booted: wait until gunicorn has ``workers`` children."""
    import psutil

    deadline = time.time() + timeout
    while True:
        alive = [c for c in psutil.Process(proc.pid).children() if c.status() != psutil.STATUS_ZOMBIE]
        if len(alive) >= workers:
            return
        if proc.poll() is not None or time.time() > deadline:
            raise RuntimeError(f"gunicorn has {len(alive)} of {workers} workers after {timeout:.0f}s:\n"
                               f"{log.read_text(errors='replace')[-3000:]}")
        time.sleep(0.2)


def gunicorn_argv(target: str = "app:server") -> list[str]:
    """The Dockerfile's CMD, with gunicorn taken from this virtual environment."""
    exe = VENV_BIN / "gunicorn"
    return [str(exe) if exe.exists() else "gunicorn", "-c", "gunicorn.conf.py", target]


def start_gunicorn(target: str, state_dir: Path, port: int, *, workers: int = 2, threads: int = 2,
                   ready_path: str = "/", log_dir: Path | None = None,
                   **env_extra: str) -> tuple[subprocess.Popen, Path]:
    """``gunicorn -c gunicorn.conf.py <target>`` on ``port``, left to the caller to stop (a restart must reuse
    the port); configured only through the environment. The log goes to ``log_dir`` (default: the state
    folder; a test that fills the state folder's disk keeps it elsewhere to read it)."""
    state_dir.mkdir(parents=True, exist_ok=True)
    env = base_env(state_dir, WHESTBOARD_PORT=str(port), WHESTBOARD_WORKERS=str(workers),
                   WHESTBOARD_THREADS=str(threads), **env_extra)
    log = (log_dir or state_dir) / f"gunicorn-{port}-{time.time_ns()}.log"
    with open(log, "w") as out:
        proc = subprocess.Popen(gunicorn_argv(target), cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
    try:
        wait_http(f"http://127.0.0.1:{port}{ready_path}", proc, log)
        wait_workers(proc, workers, log)
    except BaseException:
        stop_process(proc)
        raise
    return proc, log


@contextmanager
def gunicorn(target: str, state_dir: Path, *, workers: int = 2, threads: int = 2, ready_path: str = "/",
             log_dir: Path | None = None, **env_extra: str):
    """:func:`start_gunicorn` on a free port, stopped with its whole process group afterwards."""
    port = free_port()
    proc, log = start_gunicorn(target, state_dir, port, workers=workers, threads=threads, ready_path=ready_path,
                               log_dir=log_dir, **env_extra)
    try:
        yield Server(f"http://127.0.0.1:{port}", proc, log, state_dir)
    finally:
        stop_process(proc)


@contextmanager
def celery_worker(target: str, state_dir: Path, redis_url: str, *, concurrency: int = 1, supervised: bool = False,
                  **env_extra: str):
    """``celery -A <target> worker`` (prefork) until the test ends. ``supervised``: as ``./scripts/serve.sh
    worker`` runs it, under ``server.supervise`` and with Celery's default gossip, mingle and heartbeat."""
    state_dir.mkdir(parents=True, exist_ok=True)
    env = base_env(state_dir, WHESTBOARD_REDIS_URL=redis_url, **env_extra)
    log = state_dir / f"celery-{time.time_ns()}.log"
    argv = [str(VENV_BIN / "celery"), "-A", target, "worker", "--loglevel=INFO", "--pool=prefork",
            f"--concurrency={concurrency}", "-n", f"test-{os.getpid()}-{time.time_ns()}@%h"]
    if supervised:
        argv = [str(VENV_BIN / "python"), "-m", "server.supervise", "--", *argv]
    else:
        argv += ["--without-gossip", "--without-mingle", "--without-heartbeat"]
    with open(log, "w") as out:
        proc = subprocess.Popen(argv, cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
    try:
        deadline = time.time() + 90
        while "ready." not in log.read_text(errors="replace"):
            if proc.poll() is not None or time.time() > deadline:
                raise RuntimeError(f"celery worker did not start:\n{log.read_text()[-3000:]}")
            time.sleep(0.3)
        yield proc, log
    finally:
        stop_process(proc, grace=20)


# --------------------------------------------------------------------------- redis-server


@contextmanager
def redis_server(*, appendonly: bool = False):
    """A throwaway ``redis-server`` (Debian package) on a free loopback port; yields its URL. ``appendonly``:
    with its append-only file, written at every command (``CONFIG GET dir`` names the folder)."""
    exe = shutil.which("redis-server")
    if not exe:
        pytest.fail("redis-server not found: install Debian's redis-server (./scripts/test.sh does)")
    workdir = Path(tempfile.mkdtemp(prefix="wb-redis-"))
    port = free_port()
    log = workdir / "redis.log"
    with open(log, "w") as out:
        proc = subprocess.Popen([exe, "--port", str(port), "--bind", "127.0.0.1", "--dir", str(workdir),
                                 "--save", "", "--appendonly", "yes" if appendonly else "no",
                                 "--appendfsync", "always", "--protected-mode", "yes"],
                                stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    import redis

    url = f"redis://127.0.0.1:{port}/0"
    try:
        deadline = time.time() + 30
        while True:
            try:
                redis.Redis.from_url(url).ping()
                break
            except redis.ConnectionError:
                if proc.poll() is not None or time.time() > deadline:
                    raise RuntimeError(f"redis-server did not start:\n{log.read_text()}") from None
                time.sleep(0.1)
        yield url
    finally:
        stop_process(proc, grace=5)
        shutil.rmtree(workdir, ignore_errors=True)


# --------------------------------------------------------------------------- PostgreSQL


def _pg_bin(name: str) -> str | None:
    found = shutil.which(name)
    if found:
        return found
    candidates = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"))
    return candidates[-1] if candidates else None


def _as_postgres_user(argv: list[str]) -> list[str]:
    """PostgreSQL refuses to run as root: CI runs as root, so drop to the ``postgres`` user."""
    if os.geteuid() != 0:
        return argv
    return ["runuser", "-u", "postgres", "--", *argv]


@contextmanager
def postgres_server():
    """A throwaway PostgreSQL cluster (Debian package) on a free loopback port; yields its SQLAlchemy URL."""
    initdb, pg_ctl = _pg_bin("initdb"), _pg_bin("pg_ctl")
    if not (initdb and pg_ctl):
        pytest.fail("PostgreSQL server binaries not found: apt-get install -y postgresql (./scripts/test.sh does)")
    workdir = Path(tempfile.mkdtemp(prefix="wb-pg-"))
    data = workdir / "data"
    if os.geteuid() == 0:
        shutil.chown(workdir, "postgres", "postgres")
    port = free_port()
    run = dict(check=True, capture_output=True, text=True, timeout=120)
    subprocess.run(_as_postgres_user([initdb, "-D", str(data), "-A", "trust", "-U", "whestboard", "--no-sync",
                                      "-E", "UTF8"]), **run)
    opts = f"-p {port} -k {workdir} -c listen_addresses=127.0.0.1 -c fsync=off -c full_page_writes=off"
    subprocess.run(_as_postgres_user([pg_ctl, "-D", str(data), "-o", opts, "-l", str(workdir / "pg.log"),
                                      "-w", "-t", "60", "start"]), **run)
    try:
        yield f"postgresql+psycopg://whestboard@127.0.0.1:{port}/postgres"
    finally:
        subprocess.run(_as_postgres_user([pg_ctl, "-D", str(data), "-m", "immediate", "-w", "stop"]),
                       capture_output=True, timeout=60)
        shutil.rmtree(workdir, ignore_errors=True)


@contextmanager
def serve_stack(state_dir: Path, *, workers: int = 2, threads: int = 2, **env_extra: str):
    """``./scripts/serve.sh`` (nginx before gunicorn) on a free loopback port, configured by the environment."""
    if not (shutil.which("nginx") or Path("/usr/sbin/nginx").exists()):
        pytest.fail("nginx is not installed: ./scripts/test.sh installs it (apt-get install nginx)")
    port = free_port()
    state_dir.mkdir(parents=True, exist_ok=True)
    env = base_env(state_dir, WHESTBOARD_PORT=str(port), WHESTBOARD_WORKERS=str(workers),
                   WHESTBOARD_THREADS=str(threads), **env_extra)
    log = state_dir / f"serve-{port}.log"
    with open(log, "w") as out:
        proc = subprocess.Popen([str(REPO / "scripts" / "serve.sh")], cwd=REPO, env=env, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_http(base + "/healthz", proc, log)
        yield Server(base, proc, log, state_dir)
    finally:
        stop_process(proc)


# --------------------------------------------------------------------------- two machines


@dataclass
class TwoMachines:
    """Two simulated machines: each its own state folder, its own copy of ``data/`` and its own gunicorn;
    the only Celery worker runs on machine 2; all they share is PostgreSQL and Redis."""

    one: Server
    two: Server
    worker: subprocess.Popen
    worker_log: Path
    data_dirs: tuple[Path, Path]
    db_url: str
    redis_url: str


def machine_data(root: Path, prepare=None) -> Path:
    """A machine's own copy of the embedded datasets (``prepare(folder)`` may alter it: a missing file)."""
    folder = root / "data"
    shutil.copytree(REPO / "data", folder, ignore=shutil.ignore_patterns(".state", ".*"))
    if prepare is not None:
        prepare(folder)
    return folder


@contextmanager
def two_machines(root: Path, *, prepare_data=None, **env_extra: str):
    """Machine 1 and machine 2 (gunicorn each, the Celery worker on machine 2) over one PostgreSQL and
    one Redis; ``prepare_data`` alters each machine's data copy before it starts."""
    with postgres_server() as db_url, redis_server() as redis_url:
        data = tuple(machine_data(root / name, prepare_data) for name in ("one", "two"))
        shared = dict(WHESTBOARD_DATABASE_URL=db_url, WHESTBOARD_ALLOW_UPLOADS="1", **env_extra)
        with gunicorn("app:server", root / "one" / "state", workers=1, threads=4, ready_path="/healthz",
                      WHESTBOARD_REDIS_URL=redis_url, WHESTBOARD_DATA_DIR=str(data[0]), **shared) as one, \
                gunicorn("app:server", root / "two" / "state", workers=1, threads=4, ready_path="/healthz",
                         WHESTBOARD_REDIS_URL=redis_url, WHESTBOARD_DATA_DIR=str(data[1]), **shared) as two, \
                celery_worker("worker", root / "two" / "state", redis_url, concurrency=2,
                              WHESTBOARD_DATA_DIR=str(data[1]), **shared) as (worker, worker_log):
            yield TwoMachines(one, two, worker, worker_log, data, db_url, redis_url)


# --------------------------------------------------------------------------- faults: brokers that go away


class RestartableRedis:
    """A ``redis-server`` on a fixed loopback port that a test can stop and start again (a broker outage).

    Started with no persistence, as the outage tests want the harshest case: whatever the broker held
    (queued messages, stored results) is gone when it comes back.
    """

    def __init__(self) -> None:
        exe = shutil.which("redis-server")
        if not exe:
            pytest.fail("redis-server not found: install Debian's redis-server (./scripts/test.sh does)")
        self.exe, self.port = exe, free_port()
        self.workdir = Path(tempfile.mkdtemp(prefix="wb-redis-"))
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.proc: subprocess.Popen | None = None

    def start(self, timeout: float = 30.0) -> None:
        import redis

        with open(self.workdir / "redis.log", "a") as out:
            self.proc = subprocess.Popen([self.exe, "--port", str(self.port), "--bind", "127.0.0.1", "--dir",
                                          str(self.workdir), "--save", "", "--appendonly", "no"],
                                         stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.time() + timeout
        while True:
            try:
                redis.Redis.from_url(self.url).ping()
                return
            except redis.ConnectionError:
                if self.proc.poll() is not None or time.time() > deadline:
                    raise RuntimeError(f"redis-server did not start:\n{(self.workdir / 'redis.log').read_text()}"
                                       ) from None
                time.sleep(0.1)

    def stop(self) -> None:
        if self.proc is not None:
            stop_process(self.proc, grace=5)
            self.proc = None

    def close(self) -> None:
        self.stop()
        shutil.rmtree(self.workdir, ignore_errors=True)


@contextmanager
def restartable_redis():
    server = RestartableRedis()
    server.start()
    try:
        yield server
    finally:
        server.close()


def patient_client(base: str, *, patience: float = 90.0, **kw):
    """A simulated browser whose requests wait out a server that is restarting (connection refused or
    reset), as the page's poll does, for up to ``patience`` seconds per request; HTTP errors still fail."""
    dashclient = load_dashclient()

    class PatientClient(dashclient.DashClient):
        refused = 0

        def post(self, body, args, kind, label):
            deadline = time.time() + patience
            while True:
                try:
                    return super().post(body, args, kind, label)
                except dashclient.CallbackFailed as exc:
                    if not isinstance(exc.__cause__, requests.ConnectionError) or time.time() > deadline:
                        raise
                    self.refused += 1
                    time.sleep(0.2)

    return PatientClient(base, **kw)
