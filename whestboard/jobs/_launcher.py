"""Start job processes from a single-threaded helper, never from a threaded web worker.

Dash's DiskcacheManager forks each background job straight from the request
thread. Under gunicorn's threaded workers (or Flask's threaded dev server)
another thread may hold a C-level lock at that instant: SQLite's allocator
mutex, seen here under 6 concurrent users. The child inherits it locked and
hangs forever, alive but silent, so the job is lost and its poll never ends.

The fix is the classic fork-server: while the process is still single-threaded
(app import, or gunicorn's ``post_fork``), fork one small *launcher* that only
ever waits on a pipe. To run a job, a worker thread sends the job's registry
key and arguments; the launcher forks a fresh child from its own quiet,
lock-free state, answers with the child's pid, and reaps it when it exits.
The job process is therefore a grandchild of the web worker: it survives the
worker being killed, and Dash's pid-based ``job_running``/``terminate_job``
keep working unchanged.

**No job holds the web server's sockets.** gunicorn's workers inherit its listening
socket, and a fork inherits every descriptor: a job process that outlived its worker
(a SIGTERM to the master, a restart) kept the port bound, so the restarted gunicorn
could not bind ("Address already in use") until the job ended. The launcher closes
every listening socket it inherited before it forks anything (:func:`close_listening_sockets`).
"""

from __future__ import annotations

import errno
import multiprocessing
import os
import signal
import socket
import stat
import threading
from collections.abc import Callable, Mapping
from multiprocessing.connection import Connection
from typing import Any

from whestboard import config, logs
from whestboard.jobs._liveness import pid_alive

JobFn = Callable[..., Any]


def _reap_children() -> None:
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def _run_job(job_fn: JobFn, args: tuple) -> None:
    """In the job process: run, then leave without running the parent's atexit handlers.

    Jobs run at a lower CPU priority than the web workers (``WHESTBOARD_JOB_NICE``):
    on a saturated machine a page view waits for nobody's sampling run, and the
    runs share what the pages leave. FLOP counts do not depend on it; wall-time
    fields of a run do, as they do on any loaded machine.
    """
    code = 1
    try:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        _lower_priority()
        job_fn(*args)
        code = 0
    except BaseException as exc:  # noqa: BLE001 - Dash's job_fn already stores callback errors
        logs.error("job.process_error", exc)
    finally:
        os._exit(code)


def _lower_priority() -> None:
    try:
        increment = config.job_niceness()
    except ValueError as exc:  # a bad setting must not cost anyone their run
        logs.error("job.niceness_ignored", exc)
        return
    if increment:
        try:
            os.nice(increment)
        except OSError:  # a platform without nice: run at the worker's priority
            pass


def _inherited_fds() -> list[int]:
    try:
        return sorted(int(name) for name in os.listdir("/proc/self/fd"))
    except OSError:  # no /proc: look at what a process usually has open
        return list(range(3, 1024))


def _is_listening_socket(fd: int) -> bool:
    try:
        if not stat.S_ISSOCK(os.fstat(fd).st_mode):
            return False
        with socket.socket(fileno=os.dup(fd)) as sock:
            return bool(sock.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN))
    except OSError as exc:
        if exc.errno in (errno.EBADF, errno.ENOTSOCK, errno.ENOPROTOOPT):
            return False
        raise


def close_listening_sockets() -> list[int]:
    """Close every listening socket this process inherited (the web server's); the descriptors closed.

    Only listening sockets: the launcher's own pipe is a connected socket pair, and open
    dataset files must stay open in the jobs forked from here.
    """
    closed = []
    for fd in _inherited_fds():
        if fd > 2 and _is_listening_socket(fd):
            os.close(fd)
            closed.append(fd)
    return closed


def _serve(conn: Connection, registry: Mapping[str, JobFn]) -> None:
    """The launcher's loop: one request in, one forked job out, until the worker goes away."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    close_listening_sockets()  # no job may keep the web server's port once its server has gone
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    while True:
        _reap_children()
        try:
            if not conn.poll(1.0):
                if os.getppid() == 1:  # the worker died without closing the pipe
                    os._exit(0)
                continue
            key, args = conn.recv()
        except (EOFError, OSError):
            os._exit(0)
        job_fn = registry.get(key)
        if job_fn is None:
            conn.send(("error", f"no background callback registered under {key[:12]}"))
            continue
        pid = os.fork()
        if pid == 0:
            conn.close()
            _run_job(job_fn, args)
        conn.send(("ok", pid))


class Launcher:
    """A handle on this process's launcher; ``launch`` is safe from any thread."""

    def __init__(self, registry: Mapping[str, JobFn]) -> None:
        self.owner_pid = os.getpid()
        ours, theirs = multiprocessing.Pipe(duplex=True)
        pid = os.fork()
        if pid == 0:
            ours.close()
            try:
                _serve(theirs, registry)
            finally:
                os._exit(0)
        theirs.close()
        self.pid = pid
        self._conn = ours
        self._lock = threading.Lock()

    def alive(self) -> bool:
        return self.owner_pid == os.getpid() and not self._conn.closed and _child_alive(self.pid)

    def launch(self, key: str, args: tuple) -> int:
        with self._lock:
            self._conn.send((key, args))
            status, value = self._conn.recv()
        if status != "ok":
            raise RuntimeError(value)
        return int(value)

    def close(self) -> None:
        if self.owner_pid == os.getpid():
            self._conn.close()


def _child_alive(pid: int) -> bool:
    """The launcher is this process's child: reap it if it exited, then ask the one liveness rule."""
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return False
    return pid_alive(pid)
