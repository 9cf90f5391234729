"""A warm parent for sandbox workers: one process imports the libraries once, each worker is a fork of it.

A spawned worker pays for ``import whestbench`` (numpy, flopscope, and through whestbench's
package ``__init__`` Hugging Face ``datasets``, pandas and pyarrow) every time: about two seconds of
CPU per upload. The fork server pays it once. It is a process of its own, started fresh with
``python -E -s`` and the same bare environment a worker gets (never forked from the app, whose
threads may hold locks and whose memory holds the app's configuration, connections and sockets);
it imports what every worker imports (:func:`whestboard.sandbox._worker._preload`) and then only
waits on its socket. Each request brings the new worker's pipes (``SCM_RIGHTS``) and folders; the
server forks, and the child

1. starts its own session (process group), takes the pipes as stdin/stdout/stderr and protocol
   channel, closes every other descriptor it inherited (the server's socket, the other workers'
   status pipes), moves into its working folder with ``HOME``/``TMPDIR`` pointing there, and
   reseeds numpy's global generator (Python's ``random`` reseeds itself after a fork) so no two
   workers share a random stream;
2. runs :func:`whestboard.sandbox._worker.main` exactly as a spawned worker does: die with the
   parent, hello, and on ``start`` confine itself (private /tmp, privileges, rlimits, Landlock,
   seccomp, same order, same checks) before the participant's code is imported. The server never
   loads, sees or runs participant code.

The server reaps its children and writes each one's exit status (as ``Popen.returncode`` reads:
negative for a signal) and CPU time to the status pipe the host gave with the request, so the host
names a death (SIGSYS: a fork attempt; SIGXCPU; SIGKILL) as it does for a worker it spawned.

**Why Hugging Face ``datasets`` is still imported.** Any ``import whestbench.<module>`` runs the
package's ``__init__``, which imports it; installing the package without running that ``__init__``
(and running it on first use of a dataset name) works for every estimator, but the worker names a
load or setup failure with whest's own code (``whestbench.cli``, imported only then), which needs
``datasets``, and by then the worker is confined: pandas and pyarrow cannot be imported there. So
the server imports whestbench whole, as a spawned worker does, and pays for it once. It imports
whestbench's CLI too (which ``whest run``, the grader, has loaded when it runs an estimator), so a
worker that names a failure does not import it under confinement.

**Lifetime.** The host holds the only other end of the socket (close-on-exec, and closed in any
fork of the host): when the host process ends, for whatever reason, the server reads EOF, kills
every worker's process group and exits; each worker also dies with the server (``PR_SET_PDEATHSIG``).
A server that has died or stopped answering is dropped and the worker is spawned the old way
(:func:`whestboard.sandbox._host._spawn_worker`); the next worker starts a new server.

**What forked workers share.** Only what was in the server before the fork, copy-on-write: no
secret, no connection, no socket of the app. Workers of one server share its address-space layout
and its string-hash seed (a spawned worker draws its own); neither gives one worker a way to reach
another, which are separate processes confined alike.
"""

from __future__ import annotations

import atexit
import gc
import json
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

from whestboard import config

READY_TIMEOUT_S = 120.0
REQUEST_TIMEOUT_S = 10.0
RETRY_AFTER_S = 30.0  # a server that could not start is not retried on every upload


# --- the server ---------------------------------------------------------------------------------


def serve(sock_fd: int) -> int:
    """The fork server's loop: import once, then one request in, one forked worker out, until EOF."""
    started = time.perf_counter()
    from whestboard.sandbox import _worker

    _worker._preload()
    _preload_what_workers_import_later()
    sock = socket.socket(fileno=sock_fd)
    threads = len(os.listdir("/proc/self/task"))
    if threads != 1:  # a fork copies one thread: a lock another one holds would stay held in every worker
        sock.send(json.dumps({"status": "refused", "error_message": f"{threads} threads after the imports"}).encode())
        return 1
    gc.collect()
    gc.freeze()  # the imported objects are never collected: a worker's collections then leave their pages shared
    wake_r, wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    sock.send(json.dumps({"status": "ready", "pid": os.getpid(), "import_s": time.perf_counter() - started}).encode())
    children: dict[int, int] = {}  # worker pid -> its status pipe
    try:
        while True:
            ready, _, _ = select.select([sock, wake_r], [], [])
            if wake_r in ready:
                _drain_wakeups(wake_r)
            _reap(children)
            if sock in ready:
                message, fds, _flags, _address = socket.recv_fds(sock, 1 << 16, 4)
                if not message:
                    return 0  # the host is gone
                if len(fds) != 4:
                    for fd in fds:
                        os.close(fd)
                    sock.send(b'{"pid": null}')
                    continue
                pid = _fork_worker(json.loads(message), fds)
                children[pid] = fds[3]
                sock.send(json.dumps({"pid": pid}).encode())
    finally:
        for pid in children:
            _kill_group(pid)


def _preload_what_workers_import_later() -> None:
    """Import here what a worker would otherwise import itself, each time, after the fork.

    Every worker reads its BLAS in its hello (threadpoolctl, before any participant code, so its
    modules are in every worker's ``sys.modules`` either way); a worker whose estimator fails to load
    or set up names the failure with whestbench's CLI, 0.3 s of imports (rich, click, httpx) under
    confinement. The worker still computes both itself; only the imports are done once, here.
    """
    from whestboard.sandbox import _worker

    _worker._blas()
    import whestbench.cli  # noqa: F401


def _drain_wakeups(fd: int) -> None:
    try:
        while os.read(fd, 512):
            pass
    except BlockingIOError:
        pass


def _reap(children: dict[int, int]) -> None:
    """Collect every exited worker and tell its host how it ended."""
    while children:
        try:
            pid, status, usage = os.wait4(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        fd = children.pop(pid, None)
        if fd is None:
            continue
        code = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
        try:
            os.write(fd, json.dumps({"returncode": code, "cpu_s": usage.ru_utime + usage.ru_stime}).encode())
        except OSError:
            pass
        finally:
            os.close(fd)


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _fork_worker(request: dict, fds: list[int]) -> int:
    """Fork one worker; in the parent close its ends of the pipes (the status pipe is kept)."""
    cmd_r, resp_w, out_w, _status_w = fds
    pid = os.fork()
    if pid == 0:
        forked_at = time.perf_counter()
        code = 70
        try:
            _become_worker(request, cmd_r, resp_w, out_w)
            from whestboard.sandbox._worker import main

            code = main(cmd_r, resp_w, forked_at=forked_at)
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
        except BaseException:  # noqa: BLE001 - never return into the server's loop
            code = 70
        finally:
            try:
                sys.stdout.flush()
                sys.stderr.flush()
            finally:
                os._exit(code)
    for fd in (cmd_r, resp_w, out_w):
        os.close(fd)
    return pid


def _become_worker(request: dict, cmd_r: int, resp_w: int, out_w: int) -> None:
    """In the fresh child: its own session, its pipes, nothing else of the server's, its own folder."""
    signal.set_wakeup_fd(-1)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    os.setsid()
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.dup2(out_w, 1)
    os.dup2(out_w, 2)
    keep = {0, 1, 2, cmd_r, resp_w}
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        if fd not in keep:
            try:
                os.close(fd)
            except OSError:
                pass  # the listing's own descriptor, closed already
    workdir = request["workdir"]
    os.chdir(workdir)
    config.export_home(Path(workdir))
    numpy_random = sys.modules.get("numpy.random")
    if numpy_random is not None:
        numpy_random.seed()  # fresh entropy: the server's global stream is not every worker's


# --- the host's handle --------------------------------------------------------------------------


class ForkedProcess:
    """What the host needs of ``subprocess.Popen`` for a worker the fork server started.

    The worker is the server's child, not the host's: its exit status arrives on the status pipe
    (``returncode`` as Popen reports it, negative for a signal). A pipe that closes with no status
    means the server died, taking the worker with it (SIGKILL through its parent-death signal).
    """

    def __init__(self, pid: int, status_fd: int) -> None:
        self.pid = pid
        self.returncode: int | None = None
        self.cpu_s: float | None = None
        self._status_fd = status_fd
        self._lock = threading.Lock()

    def poll(self) -> int | None:
        return self._collect(0.0)

    def wait(self, timeout: float | None = None) -> int:
        code = self._collect(timeout)
        if code is None:
            raise subprocess.TimeoutExpired(f"sandbox worker {self.pid}", timeout or 0.0)
        return code

    def _collect(self, timeout: float | None) -> int | None:
        with self._lock:
            if self.returncode is not None:
                return self.returncode
            ready, _, _ = select.select([self._status_fd], [], [], timeout)
            if not ready:
                return None
            chunks = []
            while chunk := os.read(self._status_fd, 4096):
                chunks.append(chunk)
            os.close(self._status_fd)
            try:
                status = json.loads(b"".join(chunks))
                self.returncode, self.cpu_s = int(status["returncode"]), float(status["cpu_s"])
            except (ValueError, KeyError, TypeError):
                self.returncode = -signal.SIGKILL  # the server went away: its workers were killed with it
            return self.returncode


class ForkServerGone(RuntimeError):
    """The fork server could not start or stopped answering: spawn the worker instead."""


class ForkServer:
    """A handle on this process's fork server; ``start_worker`` is safe from any thread."""

    def __init__(self, command: Callable[[int], list[str]], env: dict[str, str], home_prefix: str,
                 owner_file: str) -> None:
        self.owner_pid = os.getpid()
        self.home = Path(tempfile.mkdtemp(prefix=home_prefix))
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            self.process = subprocess.Popen(
                command(theirs.fileno()), cwd=self.home, env={**env, "HOME": str(self.home),
                                                                       "TMPDIR": str(self.home)},
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                pass_fds=(theirs.fileno(),), start_new_session=True, close_fds=True,
            )
        except BaseException:
            ours.close()
            shutil.rmtree(self.home, ignore_errors=True)
            raise
        finally:
            theirs.close()
        (self.home / owner_file).write_text(f"{self.process.pid}\n")  # swept with the workers' folders once it is gone
        self._sock = ours
        self._lock = threading.Lock()
        self._ready: dict | None = None

    @property
    def pid(self) -> int:
        return self.process.pid

    def alive(self) -> bool:
        return self.owner_pid == os.getpid() and self._sock.fileno() >= 0 and self.process.poll() is None

    def wait_ready(self, timeout_s: float = READY_TIMEOUT_S) -> dict:
        """The server's greeting once its imports are done (raises :class:`ForkServerGone` otherwise)."""
        with self._lock:
            return self._wait_ready(timeout_s)

    def _wait_ready(self, timeout_s: float) -> dict:
        if self._ready is None:
            try:
                message = self._receive(timeout_s)
            except (OSError, ValueError) as exc:
                raise ForkServerGone(f"the fork server did not start ({exc})") from None
            if message.get("status") != "ready":
                raise ForkServerGone(f"the fork server refused to serve: {message.get('error_message')}")
            self._ready = message
        return self._ready

    def start_worker(self, workdir: Path, cmd_r: int, resp_w: int, out_w: int) -> ForkedProcess:
        """Fork a worker with these pipes and working folder; its handle (raises :class:`ForkServerGone`)."""
        status_r, status_w = os.pipe()
        try:
            with self._lock:
                if not self.alive():
                    raise ForkServerGone("the fork server is not running")
                self._wait_ready(READY_TIMEOUT_S)
                try:
                    socket.send_fds(self._sock, [json.dumps({"workdir": str(workdir)}).encode()],
                                    [cmd_r, resp_w, out_w, status_w])
                    pid = int(self._receive(REQUEST_TIMEOUT_S)["pid"])
                except (OSError, ValueError, KeyError, TypeError) as exc:
                    self._shut()
                    raise ForkServerGone(f"the fork server stopped answering ({exc})") from None
        except BaseException:
            os.close(status_r)
            raise
        finally:
            os.close(status_w)
        return ForkedProcess(pid, status_r)

    def _receive(self, timeout_s: float) -> dict:
        """One message from the server (a datagram of JSON) within ``timeout_s``."""
        if not select.select([self._sock], [], [], timeout_s)[0]:
            raise OSError(f"no answer from the fork server within {timeout_s:g} s")
        data = self._sock.recv(1 << 16)
        if not data:
            raise OSError("the fork server closed its socket")
        message = json.loads(data)
        if not isinstance(message, dict):
            raise ValueError("a malformed answer from the fork server")
        return message

    def _shut(self) -> None:
        """Close our end (the server then kills its workers and exits), reap it, remove its folder."""
        self._sock.close()
        try:
            self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=5)
        shutil.rmtree(self.home, ignore_errors=True)

    def close(self) -> None:
        if self.owner_pid != os.getpid():
            return
        with self._lock:
            if self._sock.fileno() >= 0:
                self._shut()

    def forget(self) -> None:
        """In a fork of the host: drop this handle without touching the server (it is the parent's)."""
        self._sock.close()


# --- this process's server ----------------------------------------------------------------------

_server_lock = threading.Lock()
_server: ForkServer | None = None
_failed_at: float | None = None
_hooks_installed = False


def fork_server(command: Callable[[int], list[str]], env: dict[str, str], home_prefix: str,
                owner_file: str) -> ForkServer | None:
    """This process's fork server, started if need be; None while one cannot be had (spawn instead)."""
    global _server, _failed_at, _hooks_installed
    with _server_lock:
        if _server is not None and _server.alive():
            return _server
        if _server is not None:
            _server.close()
            _server = None
        if _failed_at is not None and time.monotonic() - _failed_at < RETRY_AFTER_S:
            return None
        if not _hooks_installed:
            atexit.register(stop_fork_server)
            os.register_at_fork(after_in_child=_forget_in_child)
            _hooks_installed = True
        try:
            _server = ForkServer(command, env, home_prefix, owner_file)
        except OSError:
            _failed_at = time.monotonic()
            return None
        return _server


def server_failed(server: ForkServer) -> None:
    """A server that did not answer: drop it and spawn for a while."""
    global _server, _failed_at
    with _server_lock:
        if _server is server:
            _server = None
        _failed_at = time.monotonic()
    server.close()


def current_fork_server() -> ForkServer | None:
    """The running fork server of this process, if any."""
    return _server


def stop_fork_server() -> None:
    """Stop this process's fork server (its workers die with it)."""
    global _server, _failed_at
    with _server_lock:
        server, _server, _failed_at = _server, None, None
    if server is not None:
        server.close()


def _forget_in_child() -> None:
    global _server, _server_lock
    _server_lock = threading.Lock()  # it may have been held by another thread at the fork
    if _server is not None:
        _server.forget()
        _server = None
