"""Run an uploaded estimator in its own confined worker process, metered like the grader.

:class:`SandboxedEstimator` is what scoring sees: it plugs into
``whestbench.scoring.evaluate_estimator`` exactly where whestbench puts its
``SubprocessRunner`` (``predict(mlp, budget)``, ``last_predict_stats()``,
``enforces_wall_time_limit = True``), so every per-MLP verdict, zero-prediction
fallback and multiplier is computed by whestbench's own code. What differs from
``SubprocessRunner`` is how the worker is treated:

* **hand-over without JSON** – the MLP's weights are written once to a float32
  file (in ``/dev/shm`` when available) that the worker memory-maps
  copy-on-write: a 1024 x 16 MLP (64 MiB) costs tens of milliseconds, not the
  ~30 s of JSON lists;
* **a dedicated protocol channel** – two pipes on their own file descriptors;
  the estimator's stdout and stderr go to a third pipe whose head and tail are
  kept (:class:`OutputCapture`), so ``print()`` never breaks a response;
* **a bare environment** – ``PATH``, ``HOME``/``TMPDIR`` (the fresh working
  folder; ``TMPDIR`` becomes ``/tmp`` once the worker has its private one),
  ``LANG`` and single-thread BLAS settings; no tokens, no database URL, nothing
  of the app's configuration; ``python -E -s`` ignores every ``PYTHON*`` variable;
* **kernel confinement** applied by the worker before it loads the code
  (:mod:`whestboard.sandbox._confine`: a private size-capped ``/tmp``, privilege
  drop, rlimits, Landlock, seccomp); what was applied is reported in
  :attr:`StartInfo.confinement`;
* **hard stops from outside** – the worker leads its own process group, killed
  as a whole when predict runs past the round's wall cap plus a grace, when
  setup outlives the setup timeout, when its scratch space (working folder plus
  private ``/tmp``) outgrows its quota, or when the job is cancelled; its
  temporary folders are removed afterwards (the private ``/tmp`` ends with it).

Workers are forked from this process's fork server (:mod:`whestboard.sandbox._forkserver`), which
imported their libraries once, so a worker is ready in tens of milliseconds instead of seconds; a
server that cannot start or stops answering gives way to spawning each worker as before.

A worker that dies is replaced on the next ``predict`` (setup runs again), as
whestbench does, so one crash costs one MLP. Failures surface as
``flopscope.BudgetExhaustedError`` / ``TimeExhaustedError`` or a
``whestbench.runner.RunnerError`` whose ``code`` names the cause; see
:func:`whestboard.rules._failures.verdict_of` for the per-MLP verdicts built from them.
"""

from __future__ import annotations

import atexit
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
from whestbench.runner import RunnerError, RunnerErrorDetail
from whestbench.scoring import ContestSpec
from whestbench.sdk import BaseEstimator, SetupContext

from whestboard import config
from whestboard.jobs import pid_alive
from whestboard.rules import GraderEnvironment, environment_for
from whestboard.sandbox._forkserver import ForkedProcess, ForkServerGone, fork_server, server_failed
from whestboard.sandbox._protocol import FrameReader, FrameTimeout, ProtocolError, send

REPO_ROOT = config.REPO_ROOT
_SPEC_DEFAULTS = ContestSpec.__dataclass_fields__

#: whestbench's own defaults: the grader's 8 GiB, 5 s setup, 5 s response grace.
DEFAULT_MEMORY_MB = int(_SPEC_DEFAULTS["memory_limit_mb"].default)
DEFAULT_SETUP_TIMEOUT_S = float(_SPEC_DEFAULTS["setup_timeout_s"].default)
DEFAULT_PREDICT_TIMEOUT_S = float(_SPEC_DEFAULTS["predict_timeout_s"].default)
DEFAULT_GRACE_S = 5.0
SPAWN_TIMEOUT_S = 120.0
PRIVATE_TMP_METHODS = ("auto", "user", "off")
THREAD_ENV = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "NUMEXPR_NUM_THREADS",
              "VECLIB_MAXIMUM_THREADS")


@dataclass(frozen=True)
class SandboxLimits:
    """Everything a worker is held to. Round rules come from the round; the rest from the environment."""

    memory_mb: int = DEFAULT_MEMORY_MB
    setup_timeout_s: float = DEFAULT_SETUP_TIMEOUT_S
    wall_time_limit_s: float | None = 120.0
    residual_wall_time_limit_s: float | None = 0.4
    predict_timeout_s: float = DEFAULT_PREDICT_TIMEOUT_S
    grace_s: float = DEFAULT_GRACE_S
    cpu_seconds: int | None = None
    open_files: int = 64
    file_size_bytes: int = 64 << 20
    workdir_bytes: int = 256 << 20
    output_bytes: int = 64 << 10
    sandbox_uid: int | None = 65534
    #: The worker's own /tmp (a tmpfs of ``workdir_bytes``): "auto", "user" (user namespace only) or "off".
    private_tmp: str = "auto"
    #: Which modules participant code may import, as the round's grader (None: whatever is installed).
    environment: GraderEnvironment | None = None

    def __post_init__(self) -> None:
        if self.private_tmp not in PRIVATE_TMP_METHODS:
            raise ValueError(f"private_tmp must be one of {', '.join(PRIVATE_TMP_METHODS)}, got {self.private_tmp!r}")

    @classmethod
    def from_env(cls, **overrides: Any) -> SandboxLimits:
        """Defaults, then ``WHESTBOARD_SANDBOX_*`` variables, then ``overrides``."""
        env = config.sandbox_settings({"memory_mb": DEFAULT_MEMORY_MB, "grace_s": DEFAULT_GRACE_S, "file_mb": 64,
                                       "disk_mb": 256, "output_kb": 64})
        values: dict[str, Any] = {
            "memory_mb": int(env["memory_mb"]),
            "grace_s": env["grace_s"],
            "file_size_bytes": int(env["file_mb"] * (1 << 20)),
            "workdir_bytes": int(env["disk_mb"] * (1 << 20)),
            "output_bytes": int(env["output_kb"] * (1 << 10)),
        }
        if "sandbox_uid" in env:
            values["sandbox_uid"] = env["sandbox_uid"]
        values.update(overrides)
        return cls(**values)

    def for_round(self, rnd) -> SandboxLimits:
        """These limits with the round's wall cap, residual cap and import rule (``rnd``: a whestboard Round)."""
        return replace(self, wall_time_limit_s=rnd.wall_time_limit_s,
                       residual_wall_time_limit_s=rnd.residual_wall_time_limit_s,
                       environment=environment_for(rnd.tag))

    def predict_deadline_s(self) -> float:
        """How long the parent waits for one predict, as whestbench's runner computes it."""
        if self.wall_time_limit_s is None:
            return self.predict_timeout_s
        return self.wall_time_limit_s + self.grace_s

    def cpu_limit_s(self, expected_predicts: int) -> int:
        """A backstop for a worker whose parent vanished: setup plus every predict at its cap."""
        if self.cpu_seconds is not None:
            return int(self.cpu_seconds)
        per_predict = self.predict_deadline_s()
        return int(self.setup_timeout_s + (expected_predicts + 1) * per_predict + 30)


@dataclass(frozen=True)
class SubmissionFiles:
    """An estimator on disk: the folder shipped with it, its entry module, and which files ship."""

    root: Path
    entry: str = "estimator.py"
    class_name: str | None = None
    only: tuple[str, ...] | None = None

    @classmethod
    def single_file(cls, path: Path, class_name: str | None = None) -> SubmissionFiles:
        """A lone ``.py``: only that file ships (as ``whest package`` does in file mode)."""
        path = Path(path).resolve()
        return cls(root=path.parent, entry=path.name, class_name=class_name, only=(path.name,))

    def files(self) -> list[Path]:
        if self.only is not None:
            return [self.root / name for name in self.only]
        return [p for p in sorted(self.root.rglob("*")) if p.is_file() and not p.is_symlink()]


# --- captured output ----------------------------------------------------------------------


class OutputCapture:
    """Keeps the first and last ``limit/2`` bytes of a stream, counts the rest."""

    def __init__(self, limit: int) -> None:
        self.half = max(1, limit // 2)
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0
        self._lock = threading.Lock()

    def feed(self, chunk: bytes) -> None:
        with self._lock:
            self.total += len(chunk)
            room = self.half - len(self.head)
            if room > 0:
                self.head += chunk[:room]
                chunk = chunk[room:]
            if chunk:
                self.tail += chunk
                if len(self.tail) > self.half:
                    del self.tail[: len(self.tail) - self.half]

    def text(self) -> str:
        with self._lock:
            omitted = self.total - len(self.head) - len(self.tail)
            middle = f"\n[... {omitted:,} bytes of output omitted ...]\n" if omitted > 0 else ""
            return (bytes(self.head).decode("utf-8", "replace") + middle
                    + bytes(self.tail).decode("utf-8", "replace"))

    @property
    def truncated(self) -> bool:
        return self.total > len(self.head) + len(self.tail)


def _drain(fd: int, owner: WorkerProcess) -> None:
    """Copy the worker's stdout/stderr into whichever capture its owner holds now."""
    try:
        while True:
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                return
            owner.output.feed(chunk)
    except OSError:
        return
    finally:
        os.close(fd)


# --- one worker process ---------------------------------------------------------------------


def sandbox_env(workdir: Path) -> dict[str, str]:
    """The whole environment a worker gets: nothing secret, nothing about the app."""
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": str(workdir), "TMPDIR": str(workdir),
           "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8",
           "ARROW_DEFAULT_MEMORY_POOL": "system", "JE_ARROW_MALLOC_CONF": "background_thread:false"}
    env.update({name: "1" for name in THREAD_ENV})
    # The kernel OpenBLAS runs is chosen by these: without them float32 results leave `whest run`'s bits.
    env.update(config.blas_kernel_env())
    return env


def _bootstrap_command(in_fd: int, out_fd: int) -> list[str]:
    code = (f"import sys; sys.path.insert(0, {str(REPO_ROOT)!r}); "
            f"from whestboard.sandbox._worker import main; raise SystemExit(main({in_fd}, {out_fd}))")
    return [sys.executable, "-E", "-s", "-B", "-u", "-c", code]


def _fork_server_command(sock_fd: int) -> list[str]:
    code = (f"import sys; sys.path.insert(0, {str(REPO_ROOT)!r}); "
            f"from whestboard.sandbox._forkserver import serve; raise SystemExit(serve({sock_fd}))")
    return [sys.executable, "-E", "-s", "-B", "-u", "-c", code]


def handover_base() -> str | None:
    shm = Path("/dev/shm")
    return str(shm) if shm.is_dir() and os.access(shm, os.W_OK) else None


ROOT_PREFIX, HANDOVER_PREFIX, OWNER_FILE = "whestboard-sandbox-", "whestboard-mlp-", "owner"
ORPHAN_AGE_S = 600.0


def sweep_orphan_folders(now: float | None = None) -> int:
    """Remove the folders of workers whose app process died without cleaning up (SIGKILL, SIGTERM).

    Each worker's folder names its pid and hand-over folder in ``owner``; a folder whose worker is
    gone goes, and so does an ownerless one older than ``ORPHAN_AGE_S`` (a crash between creating
    it and spawning). Returns how many were removed.
    """
    now = time.time() if now is None else now
    removed = 0
    in_use: set[str] = set()
    for root in Path(tempfile.gettempdir()).glob(f"{ROOT_PREFIX}*"):
        try:
            pid_text, _, handover = (root / OWNER_FILE).read_text().partition("\n")
            orphaned = not pid_alive(int(pid_text))
        except (OSError, ValueError):
            handover = ""
            orphaned = _older_than(root, now)
        if orphaned:
            shutil.rmtree(root, ignore_errors=True)
            removed += 1
        elif handover:
            in_use.add(handover)
    base = Path(handover_base() or tempfile.gettempdir())
    for handover in base.glob(f"{HANDOVER_PREFIX}*"):
        if str(handover) not in in_use and _older_than(handover, now):
            shutil.rmtree(handover, ignore_errors=True)
    return removed


def _older_than(path: Path, now: float, age_s: float = ORPHAN_AGE_S) -> bool:
    try:
        return now - path.stat().st_mtime > age_s
    except OSError:
        return False


class WorkerProcess:
    """A spawned worker: its pipes, process group, folders and captured output."""

    def __init__(self, output_limit: int = 64 << 10) -> None:
        self.root = Path(tempfile.mkdtemp(prefix=ROOT_PREFIX))
        self.workdir = self.root / "work"
        self.submission_dir = self.root / "submission"
        self.handover = Path(tempfile.mkdtemp(prefix=HANDOVER_PREFIX, dir=handover_base()))
        for folder in (self.workdir, self.submission_dir):
            folder.mkdir()
        for folder in (self.root, self.handover):
            folder.chmod(0o755)
        self.output = OutputCapture(output_limit)
        self.killed_by: str | None = None
        self.hello: dict | None = None
        self._spawn()

    def _spawn(self) -> None:
        cmd_r, cmd_w = os.pipe()
        resp_r, resp_w = os.pipe()
        out_r, out_w = os.pipe()
        try:
            self.process = self._forked(cmd_r, resp_w, out_w) or subprocess.Popen(
                _bootstrap_command(cmd_r, resp_w), cwd=self.workdir, env=sandbox_env(self.workdir),
                stdin=subprocess.DEVNULL, stdout=out_w, stderr=out_w, pass_fds=(cmd_r, resp_w),
                start_new_session=True, close_fds=True,
            )
        finally:
            for fd in (cmd_r, resp_w, out_w):
                os.close(fd)
        (self.root / OWNER_FILE).write_text(f"{self.process.pid}\n{self.handover}")
        self.cmd_fd = cmd_w
        self.reader = FrameReader(resp_r)
        self._drain = threading.Thread(target=_drain, args=(out_r, self), daemon=True,
                                       name=f"sandbox-output-{self.process.pid}")
        self._drain.start()

    def _forked(self, cmd_r: int, resp_w: int, out_w: int) -> ForkedProcess | None:
        """A fork of this process's fork server with these pipes; None to spawn instead (turned off, or
        the server could not start or stopped answering: it is dropped and the next worker starts a new one)."""
        if not config.sandbox_fork_server():
            return None
        server = fork_server(_fork_server_command, sandbox_env(self.workdir), f"{ROOT_PREFIX}forkserver-", OWNER_FILE)
        if server is None:
            return None
        try:
            return server.start_worker(self.workdir, cmd_r, resp_w, out_w)
        except ForkServerGone:
            server_failed(server)
            return None

    @property
    def pid(self) -> int:
        return self.process.pid

    def alive(self) -> bool:
        return self.process.poll() is None

    def wait_hello(self, timeout_s: float = SPAWN_TIMEOUT_S) -> dict:
        if self.hello is None:
            message, _ = self.reader.read(timeout_s)
            if message.get("status") != "hello":
                raise ProtocolError(f"unexpected greeting {message!r}")
            self.hello = message
        return self.hello

    def send(self, message: dict) -> None:
        try:
            send(self.cmd_fd, message)
        except (BrokenPipeError, OSError) as exc:
            raise ProtocolError(f"the worker is gone ({exc})") from None

    def receive(self, timeout_s: float, on_wait: Callable[[], None] | None = None) -> tuple[dict, bytes]:
        return self.reader.read(timeout_s, on_wait=on_wait)

    def workdir_bytes(self, cap_entries: int = 20_000) -> int:
        """Bytes under the working folder (stops counting after ``cap_entries`` files)."""
        total, seen = 0, 0
        for dirpath, _dirs, files in os.walk(self.workdir):
            for name in files:
                seen += 1
                try:
                    total += os.lstat(os.path.join(dirpath, name)).st_blocks * 512
                except OSError:
                    pass
                if seen >= cap_entries:
                    return total
        return total

    def private_tmp_bytes(self) -> int:
        """Bytes in the worker's private /tmp, seen through its mount namespace; 0 while it has none."""
        tmp = f"/proc/{self.pid}/root/tmp"
        try:
            if os.stat(tmp).st_dev == os.stat("/tmp").st_dev:
                return 0  # still the host's /tmp: not set up yet, or not available
            usage = os.statvfs(tmp)
        except OSError:
            return 0  # the worker is gone
        return (usage.f_blocks - usage.f_bfree) * usage.f_frsize

    def scratch_bytes(self) -> int:
        """What counts against the disk quota: the working folder and the private /tmp."""
        return self.workdir_bytes() + self.private_tmp_bytes()

    def kill(self, reason: str) -> None:
        """SIGKILL the whole process group (the worker and anything it managed to start)."""
        if self.killed_by is None and self.alive():
            self.killed_by = reason
        for target in (self.pid,):
            try:
                os.killpg(target, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        try:
            self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass

    def exit_status(self, wait_s: float = 2.0) -> int | None:
        try:
            return self.process.wait(timeout=wait_s)
        except subprocess.TimeoutExpired:
            return None

    def dispose(self) -> None:
        """Kill what is left, close the pipes, remove every temporary folder."""
        self.kill("closed")
        for fd in (self.cmd_fd, self.reader.fd):
            try:
                os.close(fd)
            except OSError:
                pass
        self._drain.join(timeout=2)
        shutil.rmtree(self.root, ignore_errors=True)
        shutil.rmtree(self.handover, ignore_errors=True)


# --- warm spares -------------------------------------------------------------------------------

_spare_lock = threading.Lock()
_spare: WorkerProcess | None = None
_spare_reaped_at_exit = False


def prewarm(output_limit: int = 64 << 10) -> None:
    """Start a spare worker now so the next job skips the ~2 s of library imports."""
    global _spare, _spare_reaped_at_exit
    with _spare_lock:
        if _spare is not None and _spare.alive():
            return
        _spare = WorkerProcess(output_limit)
        if not _spare_reaped_at_exit:  # the first spare a process makes: none may outlive it
            atexit.register(_dispose_spare)
            _spare_reaped_at_exit = True


def spare_worker() -> WorkerProcess | None:
    """The spare worker waiting for the next job (None when there is none)."""
    return _spare


def _dispose_spare() -> None:
    global _spare
    with _spare_lock:
        spare, _spare = _spare, None
    if spare is not None:
        spare.dispose()


def _take_worker(output_limit: int) -> tuple[WorkerProcess, bool]:
    """A spare if one is alive (warm), else a freshly spawned worker (cold)."""
    global _spare
    sweep_orphan_folders()
    with _spare_lock:
        spare, _spare = _spare, None
    if spare is not None and spare.alive():
        return spare, True
    if spare is not None:
        spare.dispose()
    return WorkerProcess(output_limit), False




# --- the estimator scoring sees -------------------------------------------------------------


class SandboxCancelled(BaseException):
    """The job was cancelled: raised through ``evaluate_estimator`` (it is not an MLP failure)."""


def whest_error_of(exc: BaseException | None) -> dict | None:
    """The ``whest run --json`` error a sandbox start failure carries, looked for along the cause chain.

    Load and setup failures raised in the worker are named there by whestbench's own CLI code; a failure
    of the sandbox itself (a timeout, a crash) is named with the sandbox's code and message, as
    whestbench names its runner's failures.
    """
    while exc is not None:
        if isinstance(exc, RunnerError):
            found = getattr(exc, "whest_error", None)
            if isinstance(found, dict):
                return found
            return {"stage": exc.stage, "code": exc.detail.code, "message": exc.detail.message}
        exc = exc.__cause__
    return None


def _runner_error(stage: str, code: str, message: str, *, traceback: str | None = None,
                  details: dict | None = None) -> RunnerError:
    return RunnerError(stage, RunnerErrorDetail(code=code, message=message, details=details, traceback=traceback))


_SIGNAL_CODES = {
    signal.SIGSYS: ("SANDBOX_FORK", "the estimator tried to start a new process (fork/exec); the sandbox "
                                    "forbids it and stopped the worker"),
    signal.SIGXCPU: ("SANDBOX_CPU", "the worker used up its CPU-time limit"),
    signal.SIGXFSZ: ("SANDBOX_FILE_SIZE", "the estimator wrote a file larger than the sandbox's file-size limit"),
    signal.SIGKILL: ("SANDBOX_MEMORY", "the worker was killed by the system (most likely out of memory)"),
}


@dataclass
class StartInfo:
    """What the worker said when the estimator was loaded and set up."""

    class_name: str = ""
    load_s: float = 0.0
    setup_s: float = 0.0
    import_s: float = 0.0
    warm: bool = False
    confinement: dict = field(default_factory=dict)
    environment: dict | None = None  # the worker's BLAS: library, kernel, threads (rules.versions)


class SandboxedEstimator(BaseEstimator):
    """A participant estimator living in a confined worker; drop-in for ``evaluate_estimator``."""

    #: The worker times predict() in its own BudgetContext (see whestbench#129).
    enforces_wall_time_limit = True

    def __init__(
        self,
        submission: SubmissionFiles,
        context: SetupContext | None = None,
        limits: SandboxLimits | None = None,
        *,
        expected_predicts: int = 1,
        should_cancel: Callable[[], bool] | None = None,
    ) -> None:
        self.submission = submission
        self.context = context
        self.limits = limits or SandboxLimits.from_env()
        self.expected_predicts = expected_predicts
        self.should_cancel = should_cancel or (lambda: False)
        self.worker: WorkerProcess | None = None
        self.started: StartInfo | None = None
        self.output = OutputCapture(self.limits.output_bytes)
        #: Files of the submission folder the estimator tried to open and did not find (the worker's audit).
        self.missing_files: list[str] = []
        self.restarts = 0
        #: Seconds the last MLP took to hand over: writing the file here, mapping it there, the round trip.
        self.last_handover: dict[str, float | None] = {}
        self._last_stats: dict | None = None
        self._next_watchdog = 0.0

    def apply_contest_spec(self, spec) -> None:
        """Take the wall and residual caps of the ``ContestSpec`` being scored (call before ``setup``)."""
        self.limits = replace(self.limits, wall_time_limit_s=spec.wall_time_limit_s,
                              residual_wall_time_limit_s=spec.residual_wall_time_limit_s,
                              setup_timeout_s=spec.setup_timeout_s, memory_mb=min(self.limits.memory_mb,
                                                                                  spec.memory_limit_mb))
        self.expected_predicts = max(self.expected_predicts, spec.n_mlps)

    def setup(self, context: SetupContext) -> None:
        """The ``BaseEstimator`` hook: start the worker with this context (load + ``setup`` inside)."""
        self.context = context
        self.start()

    # -- life cycle --------------------------------------------------------------------------

    def __enter__(self) -> SandboxedEstimator:
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def start(self) -> StartInfo:
        """Spawn (or take a warm spare), confine, load the class and run ``setup`` within its timeout."""
        if self.context is None:
            raise ValueError("SandboxedEstimator needs a SetupContext: pass one or call setup(context)")
        self._retire_worker()
        worker, warm = _take_worker(self.limits.output_bytes)
        self.worker = worker
        worker.output = self.output
        try:
            hello = worker.wait_hello()
            self._copy_submission(worker)
            worker.send(self._start_request(worker))
            reply, _ = worker.receive(self.limits.setup_timeout_s, on_wait=self._watch)
        except FrameTimeout:
            worker.kill("setup timeout")
            raise _runner_error("setup", "SETUP_TIMEOUT",
                                f"load + setup() did not finish within the {self.limits.setup_timeout_s:g} s "
                                "setup timeout; move heavy work out of setup() or make it faster") from None
        except ProtocolError as exc:
            raise self._death("setup", exc) from None
        self._note_missing(reply)
        if reply.get("status") != "ready":
            raise self._reply_error("setup", reply)
        self.started = StartInfo(class_name=reply.get("class_name", ""), load_s=reply.get("load_s", 0.0),
                                 setup_s=reply.get("setup_s", 0.0), import_s=hello.get("import_s", 0.0),
                                 warm=warm, confinement=reply.get("confinement", {}),
                                 environment=hello.get("environment"))
        return self.started

    def _copy_submission(self, worker: WorkerProcess) -> None:
        for path in self.submission.files():
            target = worker.submission_dir / path.relative_to(self.submission.root)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, target)
            target.chmod(0o444)
        for folder in [worker.submission_dir, *[p for p in worker.submission_dir.rglob("*") if p.is_dir()]]:
            folder.chmod(0o555)

    def _start_request(self, worker: WorkerProcess) -> dict:

        ctx = self.context
        limits = self.limits
        return {
            "cmd": "start",
            "workdir": str(worker.workdir),
            "read_only": [str(worker.submission_dir), str(worker.handover)],
            "app_paths": [str(REPO_ROOT), str(config.data_dir()), str(config.state_dir())],
            "entry": str(worker.submission_dir / self.submission.entry),
            "class_name": self.submission.class_name,
            "wall_time_limit_s": limits.wall_time_limit_s,
            "environment": limits.environment.as_dict() if limits.environment else None,
            "sandbox_uid": limits.sandbox_uid,
            # One quota for all scratch space: the tmpfs is capped at it, and counted with the working folder.
            "private_tmp": None if limits.private_tmp == "off" else {"size_bytes": limits.workdir_bytes,
                                                                     "method": limits.private_tmp},
            "rlimits": {
                "address_space_bytes": int(limits.memory_mb) << 20,
                "cpu_seconds": limits.cpu_limit_s(self.expected_predicts),
                "open_files": limits.open_files,
                "file_size_bytes": limits.file_size_bytes,
                "processes": 0,
            },
            "context": {
                "width": ctx.width, "depth": ctx.depth, "flop_budget": ctx.flop_budget,
                "api_version": ctx.api_version, "scratch_dir": str(worker.workdir),
                "submission_dir": str(worker.submission_dir), "seed": int(ctx.seed),
            },
        }

    def close(self) -> None:
        """Ask for ``teardown`` briefly, then kill the group and remove the folders."""
        worker, self.worker = self.worker, None
        if worker is None:
            return
        if worker.alive() and self.started is not None:
            try:
                worker.send({"cmd": "close"})
                closed, _ = worker.receive(2.0)
                self._note_missing(closed)
            except (FrameTimeout, ProtocolError):
                pass
        worker.dispose()

    def _retire_worker(self) -> None:
        if self.worker is not None:
            self.worker.dispose()
            self.worker = None

    # -- predict -----------------------------------------------------------------------------

    def predict(self, mlp, budget: int):
        """Hand the MLP over, wait at most the wall cap plus grace, return the worker's array."""
        if self.should_cancel():
            raise SandboxCancelled("cancelled")
        if self.worker is None or not self.worker.alive():
            self.restarts += 1 if self.started is not None else 0
            self.start()
        worker = self.worker
        assert worker is not None
        self._last_stats = None
        writing = time.perf_counter()
        weights_path = self._hand_over(worker, mlp)
        sent = time.perf_counter()
        try:
            worker.send({"cmd": "predict", "budget": int(budget), "width": int(mlp.width), "depth": int(mlp.depth),
                         "seed": int(getattr(mlp, "seed", 0)), "name": str(getattr(mlp, "name", "")),
                         "weights_path": str(weights_path)})
            reply, payload = worker.receive(self.limits.predict_deadline_s(), on_wait=self._watch)
            self.last_handover = {"write_s": sent - writing, "map_s": reply.get("map_s"),
                                  "round_trip_s": time.perf_counter() - sent}
        except FrameTimeout:
            worker.kill("predict timeout")
            raise _runner_error("predict", "PREDICT_TIMEOUT",
                                f"predict ran past the {self.limits.wall_time_limit_s:g} s wall cap "
                                f"(+{self.limits.grace_s:g} s grace) and was stopped") from None
        except ProtocolError as exc:
            raise self._death("predict", exc) from None
        finally:
            weights_path.unlink(missing_ok=True)
        self._enforce_disk_quota(worker)  # a burst written between two watchdog looks still counts
        return self._predictions(reply, payload)

    def _hand_over(self, worker: WorkerProcess, mlp) -> Path:
        """Write the weights once as raw float32; the worker maps the file copy-on-write."""
        path = worker.handover / "weights.f32"
        with open(path, "wb") as out:
            for layer in mlp.weights:
                plain = np.asarray(layer).view(np.ndarray)
                out.write(np.ascontiguousarray(plain, dtype=np.float32).data)
        path.chmod(0o444)
        return path

    def _predictions(self, reply: dict, payload: bytes):
        import flopscope as flops
        import flopscope.numpy as fnp

        status = reply.get("status")
        if status in ("ok", "budget_exhausted", "time_exhausted"):
            self._last_stats = {key: reply.get(key) for key in (
                "flops_used", "wall_time_s", "flopscope_backend_time_s", "flopscope_overhead_time_s",
                "residual_wall_time_s", "budget_breakdown", "cpu_s", "meter_tampering")}
        if status == "budget_exhausted":
            raise flops.BudgetExhaustedError("sandbox_predict", flop_cost=0, flops_remaining=0)
        if status == "time_exhausted":
            raise flops.TimeExhaustedError("sandbox_predict", elapsed_s=float(reply.get("wall_time_s") or 0.0),
                                           limit_s=float(self.limits.wall_time_limit_s or 0.0))
        if status != "ok":
            raise self._reply_error("predict", reply)
        shape = tuple(int(n) for n in reply.get("shape", ()))
        if len(shape) != 2 or len(payload) != 4 * shape[0] * shape[1]:
            raise _runner_error("predict", "SANDBOX_PROTOCOL", "the worker sent a malformed prediction array")
        return fnp.asarray(np.frombuffer(payload, dtype=np.float32).reshape(shape).copy())

    def last_predict_stats(self) -> dict | None:
        """The worker's own timing of the last predict (flops, wall, backend, overhead, residual, breakdown),
        and ``meter_tampering``: None, or the sentence naming what made flopscope count less
        (:mod:`whestboard.sandbox._meter`)."""
        return self._last_stats

    # -- failures ----------------------------------------------------------------------------

    def _watch(self) -> None:
        """Between waits: cancel requests and the working folder's disk quota."""
        worker = self.worker
        if worker is None:
            return
        if self.should_cancel():
            worker.kill("cancelled")
            raise SandboxCancelled("cancelled")
        now = time.monotonic()
        if now >= self._next_watchdog:
            self._next_watchdog = now + 0.5
            self._enforce_disk_quota(worker)

    def _enforce_disk_quota(self, worker: WorkerProcess) -> None:
        used = worker.scratch_bytes()
        if used > self.limits.workdir_bytes:
            worker.kill("disk quota")
            raise _runner_error("predict", "SANDBOX_DISK_QUOTA",
                                f"the estimator wrote {used / 2**20:.0f} MiB to its working folder and /tmp, over "
                                f"the {self.limits.workdir_bytes / 2**20:.0f} MiB quota; the worker was stopped")

    def _note_missing(self, reply: dict) -> None:
        """Keep the submission files the estimator tried to open and did not find (the worker's audit)."""
        for name in reply.get("missing_files") or []:
            if isinstance(name, str) and name not in self.missing_files:
                self.missing_files.append(name)

    def _reply_error(self, stage: str, reply: dict) -> RunnerError:
        code = str(reply.get("code") or "PREDICT_ERROR")
        if stage == "setup" and code == "PREDICT_ERROR":
            code = "LOAD_ERROR" if reply.get("stage") == "load" else "SETUP_ERROR"
        message = str(reply.get("error_message") or "the estimator failed")
        whest = reply.get("whest_error") if isinstance(reply.get("whest_error"), dict) else None
        traceback = reply.get("traceback") if isinstance(reply.get("traceback"), str) else None
        if self.worker is not None:  # name files as the participant knows them, not by the worker's folder
            inside = f"{self.worker.submission_dir}/"
            message = message.replace(inside, "")
            traceback = traceback.replace(inside, "") if traceback else None
            whest = {**whest, "message": str(whest.get("message", "")).replace(inside, "")} if whest else None
        if reply.get("stage") == "load":
            message = f"could not load the estimator: {message}"
        elif reply.get("stage") == "setup" and stage == "setup":
            message = f"setup() failed: {message}"
        message += self._limit_note(code, reply.get("confinement") or (self.started.confinement
                                                                        if self.started else {}))
        details = reply.get("details") if isinstance(reply.get("details"), dict) else None
        error = _runner_error(stage, code, message, traceback=traceback, details=details)
        if stage == "setup" and whest:
            error.whest_error = whest  # how `whest run --json` names it: see whest_error_of
        error.missing_files = list(self.missing_files)  # what the estimator reached for and did not get
        return error

    def _limit_note(self, code: str, confinement: dict) -> str:
        """Which sandbox limit an error came from, in words, and what to do about it."""
        limits = self.limits
        return {
            "SANDBOX_MEMORY": f": out of memory under the sandbox's {limits.memory_mb:,} MiB address-space limit",
            "SANDBOX_FILE_SIZE": f": a file reached the sandbox's {limits.file_size_bytes / 2**20:g} MiB size limit",
            "SANDBOX_DISK_QUOTA": f": the sandbox's {limits.workdir_bytes / 2**20:g} MiB scratch quota (working "
                                  "folder and /tmp together) is full",
            "SANDBOX_WRITE_REFUSED": _write_refused_note(confinement),
            "SANDBOX_FORK": ": the sandbox refuses new threads and processes (flopscope meters per thread; "
                            "the grader prohibits subprocesses)",
        }.get(code, "")

    def _death(self, stage: str, exc: ProtocolError) -> RunnerError:
        """The worker stopped answering: name the cause from how it ended."""
        worker = self.worker
        assert worker is not None
        status = worker.exit_status()
        if status is None:  # still alive but talking nonsense on the protocol channel
            worker.kill("protocol")
            return _runner_error(stage, "SANDBOX_PROTOCOL",
                                 f"the worker broke the sandbox protocol ({exc}); it was stopped")
        worker.kill("dead")
        if status < 0:
            sig = signal.Signals(-status)
            code, message = _SIGNAL_CODES.get(sig, ("SANDBOX_CRASH", f"the worker crashed ({sig.name})"))
            return _runner_error(stage, code, f"{message} [{sig.name}]")
        return _runner_error(stage, "SANDBOX_CRASH", f"the worker exited with status {status} during {stage} "
                                                     "(sys.exit/os._exit in the estimator?)")


def _write_refused_note(confinement: dict) -> str:
    """Why a write was refused and the fix; without a private /tmp, why there is none."""
    if confinement.get("private_tmp"):
        return ": writes outside the working folder and /tmp are refused here; use tempfile / TMPDIR"
    reason = (confinement.get("missing") or {}).get("private_tmp") or "not available"
    return (": writes outside the working folder are refused here (this sandbox has no private /tmp: "
            f"{reason}); use tempfile / TMPDIR")
