"""Command-line runs as forks of one process that imported whestbench once: ``whest`` and ``python -m whestboard``.

A fresh ``whest run`` or ``python -m whestboard`` spends about two seconds of CPU importing whestbench
(through its package ``__init__``, Hugging Face ``datasets``, pandas and pyarrow) before it reads its
first argument; a test that starts seven of them pays fourteen. A ``python -c`` script that imports
``whestboard`` pays most of that too (SQLAlchemy, numpy, pandas), so it can be forked here as well (entry
``python``: a command that needs set-up first, a test round registered, or a second process on the same
state folder, as another gunicorn worker would be). Here one server process, started fresh
(``python -c``, never forked from pytest, whose threads may hold locks), imports both command lines and
every ``whestboard`` command's module (its parser imports them all: half a second of CPU that each fork
would otherwise repeat), then forks a child per command. The child takes the command's environment,
working folder and argv, has its stdout and stderr in files, calls the command's ``main`` as its
console script does (``sys.exit(main())``), runs the exit handlers and exits with its status. The
server reaps it and reports that status as ``Popen.returncode`` reads it (negative for a signal), so a
test can kill a command mid-run by its pid and see it gone, as with a process it spawned.

What a fork cannot take from the command's environment: what a library read when it was imported, in
the server. The server is started with ``HF_DATASETS_OFFLINE=1`` and a Hugging Face home of its own, so
the commands of one server share one ``datasets`` cache (``datasets`` locks it; only how long a first
load takes depends on it). Tests that exercise a fresh interpreter itself (its import side effects, its
entry point, its error output on bad arguments) still spawn one.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

_SERVER = r"""
import atexit, ctypes, json, os, select, signal, sys, traceback
import whestbench.cli, whestboard.cli
whestboard.cli.build_parser()  # imports every command's module, as each whestboard command does first


def python_c():  # python -c CODE ARG...: the code runs as __main__, with the sys.argv that -c gives it
    code, sys.argv[:] = sys.argv[1], ["-c", *sys.argv[2:]]
    exec(compile(code, "<string>", "exec"), {"__name__": "__main__", "__builtins__": __builtins__})


ENTRIES = {"whest": whestbench.cli.main, "whestboard": whestboard.cli.main, "python": python_c}
report = os.fdopen(os.dup(1), "w", buffering=1)
devnull = os.open(os.devnull, os.O_RDWR)
os.dup2(devnull, 1)
children, pending = set(), b""
report.write("ready\n")


def child(request):
    os.close(report.fileno())
    ctypes.CDLL(None).prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG: die with the server
    signal.signal(signal.SIGINT, signal.default_int_handler)
    os.environ.clear()
    os.environ.update(request["env"])
    os.chdir(request["cwd"])
    os.dup2(devnull, 0)
    for fd, path in ((1, request["stdout"]), (2, request["stderr"])):
        os.dup2(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644), fd)
    sys.argv = [request["entry"], *request["args"]]
    code = 1
    try:
        code = ENTRIES[request["entry"]]()
    except SystemExit as exit_:
        code = exit_.code
    except BaseException:
        traceback.print_exc()
    finally:
        if code is not None and not isinstance(code, int):
            print(code, file=sys.stderr)
            code = 1
        try:
            atexit._run_exitfuncs()
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code or 0)


while True:
    readable, _, _ = select.select([0], [], [], 0.02)
    if readable:
        chunk = os.read(0, 65536)
        if not chunk:
            for pid in children:  # the test process is gone: so are its commands
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            break
        pending += chunk
        while b"\n" in pending:
            line, pending = pending.split(b"\n", 1)
            pid = os.fork()
            if pid == 0:
                child(json.loads(line))
            children.add(pid)
            report.write(json.dumps({"started": pid}) + "\n")
    while children:
        pid, status = os.waitpid(-1, os.WNOHANG)
        if pid == 0:
            break
        children.discard(pid)
        report.write(json.dumps({"exit": pid, "code": os.waitstatus_to_exitcode(status)}) + "\n")
os._exit(0)  # no interpreter teardown of what was preloaded (0.7 s of CPU); each command ran its own exit handlers
"""


class Preloaded:
    """One server (see the module's docstring); :meth:`start` forks a command from it."""

    def __init__(self, folder: Path, env: dict[str, str] | None = None) -> None:
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        base = dict(os.environ if env is None else env)
        base.update(HF_HOME=str(self.folder / "hf"), HF_DATASETS_OFFLINE="1")
        self._proc = subprocess.Popen([sys.executable, "-c", _SERVER], cwd=REPO, env=base,
                                      stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        self._pending, self._exits, self._runs = b"", {}, 0
        assert self._next(timeout=300) == "ready", "the preloaded server did not start"

    def _next(self, timeout: float) -> str | dict:
        deadline = time.monotonic() + timeout
        while b"\n" not in self._pending:
            if not select.select([self._proc.stdout], [], [], max(0.0, deadline - time.monotonic()))[0]:
                raise TimeoutError("the preloaded server did not answer")
            chunk = os.read(self._proc.stdout.fileno(), 65536)
            if not chunk:
                raise RuntimeError(f"the preloaded server ended (status {self._proc.wait()})")
            self._pending += chunk
        line, self._pending = self._pending.split(b"\n", 1)
        return line.decode() if not line.startswith(b"{") else json.loads(line)

    def _message(self, timeout: float) -> dict:
        message = self._next(timeout)
        if "exit" in message:
            self._exits[message["exit"]] = message["code"]
        return message

    def start(self, entry: str, *args: str, env: dict[str, str] | None = None, cwd: Path = REPO) -> ForkedRun:
        """``entry`` (``whest``, ``whestboard`` as ``python -m whestboard``, or ``python`` as ``python -c``, its
        code the first of ``args``) with ``args``, not waited for."""
        self._runs += 1
        out, err = self.folder / f"run-{self._runs}.out", self.folder / f"run-{self._runs}.err"
        request = {"entry": entry, "args": [str(a) for a in args], "env": dict(os.environ if env is None else env),
                   "cwd": str(cwd), "stdout": str(out), "stderr": str(err)}
        self._proc.stdin.write(json.dumps(request).encode() + b"\n")
        self._proc.stdin.flush()
        while "started" not in (message := self._message(timeout=60)):
            pass
        return ForkedRun(self, message["started"], out, err)

    def close(self) -> None:
        self._proc.stdin.close()
        try:
            self._proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()


class ForkedRun:
    """A command forked by :class:`Preloaded`, read like a ``subprocess.Popen`` with text pipes."""

    def __init__(self, server: Preloaded, pid: int, out: Path, err: Path) -> None:
        self.server, self.pid, self._out, self._err = server, pid, out, err

    @property
    def returncode(self) -> int | None:
        return self.server._exits.get(self.pid)

    def poll(self) -> int | None:
        try:
            while self.returncode is None:
                self.server._message(timeout=0)
        except TimeoutError:
            pass
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = time.monotonic() + (timeout if timeout is not None else 3600)
        while self.returncode is None:
            left = deadline - time.monotonic()
            if left <= 0:
                raise subprocess.TimeoutExpired(f"forked {self.pid}", timeout)
            try:
                self.server._message(timeout=left)
            except TimeoutError:
                pass
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.returncode is None:
            os.kill(self.pid, sig)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def communicate(self, timeout: float | None = None) -> tuple[str, str]:
        self.wait(timeout)
        return self._out.read_text(), self._err.read_text()
