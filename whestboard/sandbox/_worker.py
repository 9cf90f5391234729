"""The sandbox worker: a child process that loads one participant estimator and runs it.

Started by :mod:`whestboard.sandbox` with a bare environment and two pipe file
descriptors for the protocol (:mod:`whestboard.sandbox._protocol`); its stdout
and stderr are the participant's and are captured by the parent. Life cycle:

1. import the libraries an estimator needs (numpy, flopscope, whestbench) and
   say ``hello`` — a spare worker can wait here, warm, until a job needs it;
2. on ``start``: confine itself (:mod:`whestboard.sandbox._confine`), load the
   estimator class exactly as ``whestbench.loader`` resolves it, run ``setup``;
3. on each ``predict``: read the MLP's weights through a memory map of the
   hand-over file into its own writable arrays, run ``predict`` inside its own
   ``flopscope.BudgetContext`` with the round's wall cap, materialise the
   result inside the metered window and validate it outside, as
   ``whestbench.subprocess_worker`` does, and send back the array and the
   timing split (the residual rule is judged by the caller from these);
4. on ``close`` (or when the parent goes away): ``teardown`` and exit.

Failures are reported with a code the parent turns into a verdict: memory,
file size, a full scratch space, a write refused outside the folders it may
write, fork/thread attempt, or the estimator's own exception.
"""

from __future__ import annotations

import errno
import os
import sys
import tempfile
import time
import traceback
from pathlib import Path, PurePath

from whestboard import config
from whestboard.rules import GraderEnvironment, budget_payload, whest_error
from whestboard.sandbox import _imports, _meter
from whestboard.sandbox._confine import TMP, PrivateTmp, RLimits, confine, die_with_parent
from whestboard.sandbox._protocol import FrameReader, ProtocolError, read_blocking, send

MAX_TRACEBACK_CHARS = 16_000
PARENT_PID: int | None = None  # whoever started us; we die with it
NUMPY = None  # the worker's numpy, taken before participant code runs (which may alias the name)


def _preload() -> float:
    """Import what every estimator imports, while the worker is still trusted and unconfined."""
    started = time.perf_counter()
    import flopscope  # noqa: F401
    import flopscope.numpy  # noqa: F401
    import numpy
    import whestbench  # noqa: F401  (participants write ``from whestbench import BaseEstimator``)
    import whestbench.estimators  # noqa: F401  (the reference baselines many submissions build on)
    import whestbench.loader  # noqa: F401
    import whestbench.scoring  # noqa: F401
    import whestbench.subprocess_worker  # noqa: F401

    global NUMPY
    NUMPY = numpy
    return time.perf_counter() - started


def _blas() -> dict | None:
    """The worker's own BLAS (library, kernel, threads), read while it is still unconfined."""
    from whestboard.rules import blas_environment

    try:
        return blas_environment()
    except Exception:  # noqa: BLE001 - a record, never a reason not to start
        return None


def _tail(text: str | None, limit: int = MAX_TRACEBACK_CHARS) -> str | None:
    if text is None or len(text) <= limit:
        return text
    return "[... truncated ...]\n" + text[-limit:]


def failure_code(exc: BaseException, writable: tuple[str, ...] = ()) -> str:
    """The sandbox's reading of an exception: which limit (if any) the estimator ran into."""
    if isinstance(exc, MemoryError):
        return "SANDBOX_MEMORY"
    if isinstance(exc, OSError) and exc.errno == errno.EFBIG:
        return "SANDBOX_FILE_SIZE"
    if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return "SANDBOX_DISK_QUOTA"
    if _refused_write(exc, writable):
        return "SANDBOX_WRITE_REFUSED"
    if isinstance(exc, RuntimeError) and "can't start new thread" in str(exc):
        return "SANDBOX_FORK"
    if isinstance(exc, OSError) and exc.errno in (errno.EAGAIN, errno.EPERM, errno.ENOSYS):
        stack = "".join(traceback.format_tb(exc.__traceback__))
        if any(word in stack for word in ("fork", "spawn", "subprocess", "Popen", "exec")):
            return "SANDBOX_FORK"
    return "PREDICT_ERROR"


def _refused_write(exc: BaseException, writable: tuple[str, ...]) -> bool:
    """Whether ``exc`` is the sandbox refusing to create or change a file outside the folders it may write.

    A refused path that does not exist was being created (reading it would have said
    ENOENT); a refusal on an existing file stays the estimator's own error, so reading
    a file out of reach reads as it always did.
    """
    if not isinstance(exc, OSError) or exc.filename is None:
        return False
    if exc.errno == errno.EROFS:
        return True
    if exc.errno not in (errno.EACCES, errno.EPERM):
        return False
    path = os.path.abspath(os.fsdecode(exc.filename))
    if any(path == root or path.startswith(root.rstrip("/") + "/") for root in writable):
        return False
    return not os.path.lexists(path)


def _error_message(exc: BaseException) -> str:
    """``str(exc)`` as whestbench's worker reports it; the type name when that is empty (MemoryError)."""
    return str(exc) or type(exc).__name__


def participant_traceback(exc: BaseException, submission_dir: str | None) -> str:
    """The traceback of an estimator's failure, cut to the participant's own frames.

    The frames above them are the worker's and whestbench's loader: noise to a participant, who needs
    the line of their file that raised (a syntax error carries its own file and line).
    """
    frames = traceback.extract_tb(exc.__traceback__)
    if submission_dir:
        root = submission_dir.rstrip("/") + "/"
        frames = traceback.StackSummary.from_list([f for f in frames if f.filename.startswith(root)])
    lines = (["Traceback (most recent call last):\n", *frames.format()] if frames else [])
    return "".join(lines + traceback.format_exception_only(type(exc), exc))


def _error(stage: str, exc: BaseException, *, writable: tuple[str, ...] = (), with_traceback: bool = True,
           submission_dir: str | None = None) -> dict:
    details = getattr(exc, "details", None)
    keep_details = isinstance(details, dict) and isinstance(exc, ValueError)
    code = failure_code(exc, writable)
    return {
        "status": "error",
        "stage": stage,
        "code": code,
        "error_type": type(exc).__name__,
        # How `whest run --json` names a failure to load or set up (its stage "run" is the import).
        "whest_error": _whest_error(exc, "run" if stage == "load" else stage)
        if stage in ("load", "setup") and code == "PREDICT_ERROR" else None,
        # ValueError-with-details is the grader's own shape/finiteness error: keep its text verbatim.
        "error_message": str(exc) if keep_details else _error_message(exc),
        "details": details if keep_details else None,
        "traceback": None if keep_details or not with_traceback else _tail(
            participant_traceback(exc, submission_dir) if submission_dir else traceback.format_exc()),
    }


def _whest_error(exc: BaseException, stage: str) -> dict | None:
    """whest's own name for a load or setup failure; whestbench's CLI is imported only then (0.3 s saved per spawn)."""
    try:
        return whest_error(exc, stage)
    except Exception:  # noqa: BLE001 - a participant may have broken whestbench itself; the code still goes back
        return None


MAX_MISSING_FILES = 20


class MissingFiles:
    """Files of the submission folder the estimator tried to open and did not find (Python's ``open`` audit event).

    What a lone ``.py`` left behind matters only if the estimator reaches for it: this is that list, named
    relative to the submission folder. An audit hook cannot be removed, so it is installed once per worker.
    """

    def __init__(self, root: str) -> None:
        self.root = root.rstrip("/") + "/"
        self.names: list[str] = []

    def __call__(self, event: str, args: tuple) -> None:
        if event != "open" or not args or len(self.names) >= MAX_MISSING_FILES:
            return
        target = args[0]
        if isinstance(target, PurePath):
            target = str(target)
        if not isinstance(target, (str, bytes)):
            return  # a file descriptor (or a participant's own path-like object: its code is not run here)
        path = os.path.abspath(os.fsdecode(target))
        if path.startswith(self.root) and "/__pycache__/" not in path and not os.path.lexists(path):
            name = path[len(self.root):]  # (the import system's own look for cached bytecode is not the estimator's)
            if name not in self.names:
                self.names.append(name)


class Worker:
    """State of one worker: the loaded estimator and the round's wall cap."""

    def __init__(self, out_fd: int) -> None:
        self.out_fd = out_fd
        self.estimator = None
        self.wall_time_limit_s: float | None = None
        self.writable: tuple[str, ...] = ()  # folders the estimator may write: its working folder, /tmp
        self.submission_dir: str | None = None  # where the participant's files are (tracebacks are cut to them)
        self.missing: MissingFiles | None = None
        self.meter: _meter.MeterWatch | None = None  # what makes flopscope count less, seen from here

    def reply(self, message: dict, payload: bytes = b"") -> None:
        send(self.out_fd, message, payload)

    # -- start -------------------------------------------------------------------------------

    def start(self, request: dict) -> None:
        workdir = Path(request["workdir"])
        tmp_spec = request.get("private_tmp")
        confinement = confine(
            limits=RLimits(**request["rlimits"]),
            read_only=[Path(p) for p in request["read_only"]],
            read_write=[workdir],
            sandbox_uid=request.get("sandbox_uid"),
            parent_pid=PARENT_PID,
            private_tmp=PrivateTmp(**tmp_spec) if tmp_spec else None,
        )
        os.chdir(workdir)
        self.writable = (str(workdir),)
        if confinement.private_tmp:  # scratch files go where the grader's go: the private /tmp
            config.export_tmpdir(TMP)
            tempfile.tempdir = None
            self.writable += (str(TMP),)
        _forget_app_paths(request.get("app_paths", []))
        self.wall_time_limit_s = request.get("wall_time_limit_s")
        environment = request.get("environment")
        submission_dir = self.submission_dir = os.path.realpath(request["context"]["submission_dir"])
        grader = GraderEnvironment.from_dict(environment) if environment else None
        rule = _imports.install(grader, submission_dir) if grader else None
        self.missing = MissingFiles(submission_dir)
        sys.addaudithook(self.missing)
        self.meter = _meter.MeterWatch((submission_dir, *self.writable),
                                      numpy_offered=grader is None or grader.may_import("numpy"))
        self.meter.install()
        try:
            started = time.perf_counter()
            self.estimator = self._load(request)
            load_s = time.perf_counter() - started
            if rule is not None:
                rule.reclaim()  # the worker's numpy back in sys.modules, whatever the module's code put there
            self.meter.enter("setup")
        except BaseException as exc:  # noqa: BLE001 - every failure is reported, never raised
            self.reply({**_error("load", exc, writable=self.writable, submission_dir=submission_dir),
                        "confinement": confinement.as_dict(), "missing_files": self.missing.names})
            return
        try:
            started = time.perf_counter()
            self.estimator.setup(self._context(request["context"]))
            setup_s = time.perf_counter() - started
            self.meter.pause()
        except BaseException as exc:  # noqa: BLE001
            self.reply({**_error("setup", exc, writable=self.writable, submission_dir=submission_dir),
                        "confinement": confinement.as_dict(), "missing_files": self.missing.names})
            return
        self.reply({"status": "ready", "class_name": type(self.estimator).__name__, "load_s": load_s,
                    "setup_s": setup_s, "confinement": confinement.as_dict(), "missing_files": self.missing.names})

    @staticmethod
    def _load(request: dict):
        from whestbench.loader import load_estimator_from_path

        estimator, _ = load_estimator_from_path(request["entry"], class_name=request.get("class_name"))
        return estimator

    @staticmethod
    def _context(payload: dict):
        from whestbench.sdk import SetupContext

        return SetupContext(
            width=int(payload["width"]),
            depth=int(payload["depth"]),
            flop_budget=int(payload["flop_budget"]),
            api_version=str(payload["api_version"]),
            scratch_dir=payload.get("scratch_dir"),
            submission_dir=payload.get("submission_dir"),
            seed=int(payload.get("seed", 0)),
        )

    # -- predict -------------------------------------------------------------------------------

    def predict(self, request: dict) -> None:
        import flopscope as flops
        from whestbench.scoring import materialise_predictions, validate_predictions

        if self.estimator is None:
            self.reply({"status": "error", "code": "RUNNER_NOT_STARTED", "error_message": "Estimator not initialized."})
            return
        received = time.perf_counter()
        try:
            mlp = _map_mlp(request)
            budget = int(request["budget"])
        except BaseException as exc:  # noqa: BLE001
            self.reply(_error("predict", exc))
            return
        budget_ctx = flops.BudgetContext(flop_budget=budget, wall_time_limit_s=self.wall_time_limit_s, quiet=True)

        mapped_s = time.perf_counter() - received
        cpu_started = time.process_time()  # the worker's CPU in predict: wall minus it is time spent waiting
        watch = self.meter
        verdict: list[str | None] = []

        def tampering() -> str | None:
            """What the meter watch saw in this predict (computed once, after the metered window)."""
            if watch is not None and not verdict:
                verdict.append(watch.finish_predict(budget_ctx, self.estimator))
            return verdict[0] if verdict else None

        def stats() -> dict:
            return {
                "map_s": mapped_s,
                "cpu_s": time.process_time() - cpu_started,
                "flops_used": budget_ctx.flops_used,
                "wall_time_s": budget_ctx.wall_time_s or 0.0,
                "flopscope_backend_time_s": budget_ctx.flopscope_backend_time_s,
                "flopscope_overhead_time_s": budget_ctx.flopscope_overhead_time_s,
                "residual_wall_time_s": budget_ctx.residual_wall_time_s or 0.0,
                "budget_breakdown": budget_payload(budget_ctx),
                "meter_tampering": tampering(),
            }

        if watch is not None:
            watch.begin_predict(budget_ctx)
        try:
            with budget_ctx:
                predictions = self.estimator.predict(mlp, budget)
                # Inside the window, as the grader does: .shape/__array__ are participant code.
                arr = materialise_predictions(predictions, depth=mlp.depth, width=mlp.width)
                del predictions
                if watch is not None:
                    watch.check_active(budget_ctx)
            arr = validate_predictions(arr, depth=mlp.depth, width=mlp.width)
            out = NUMPY.ascontiguousarray(arr, dtype="float32")
            self.reply({"status": "ok", "shape": list(out.shape), **stats()}, out.tobytes())
        except flops.BudgetExhaustedError:
            self.reply({"status": "budget_exhausted", "error_message": "FLOP budget exceeded.", **stats()})
        except flops.TimeExhaustedError:
            self.reply({"status": "time_exhausted", "error_message": "Wall-clock time limit exceeded.", **stats()})
        except BaseException as exc:  # noqa: BLE001 - SystemExit in predict is the estimator's error
            self.reply({**_error("predict", exc, writable=self.writable, submission_dir=self.submission_dir),
                        "wall_time_s": budget_ctx.wall_time_s or 0.0, "meter_tampering": tampering()})
        finally:
            del mlp

    def close(self) -> None:
        if self.estimator is not None:
            try:
                self.estimator.teardown()
            except BaseException:  # noqa: BLE001 - teardown failures change no score
                traceback.print_exc()
        self.reply({"status": "closed", "missing_files": self.missing.names if self.missing else []})


def _private_map(path: str, length: int):
    """A writable, copy-on-write, pre-populated map of ``path`` as a ctypes buffer.

    Through libc rather than :mod:`mmap`, which keeps a duplicate file descriptor
    per map (under a 64-file limit an estimator caching MLPs would run out); the
    map is released when the last array viewing it is garbage-collected.
    """
    import ctypes
    import mmap
    import weakref

    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
    libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        flags = mmap.MAP_PRIVATE | getattr(mmap, "MAP_POPULATE", 0)
        address = libc.mmap(None, length, mmap.PROT_READ | mmap.PROT_WRITE, flags, fd, 0)
    finally:
        os.close(fd)
    if address in (None, ctypes.c_void_p(-1).value):
        raise OSError(ctypes.get_errno(), f"cannot map the weights: {os.strerror(ctypes.get_errno())}")
    buffer = (ctypes.c_char * length).from_address(address)
    weakref.finalize(buffer, libc.munmap, address, length)
    return buffer


def _map_mlp(request: dict):
    """The MLP for one predict, its weights a private memory map of the hand-over file.

    ``MAP_POPULATE`` maps every page up front (one system call instead of 16,000
    page faults at 1024 x 16), outside the metered window; ``MAP_PRIVATE`` makes
    the arrays writable copy-on-write, as whestbench's worker hands over
    writable arrays, while the file itself stays read-only.
    """
    import flopscope.numpy as fnp
    import numpy as np
    from whestbench.domain import MLP

    width, depth = int(request["width"]), int(request["depth"])
    buffer = _private_map(request["weights_path"], depth * width * width * 4)
    layers = np.frombuffer(buffer, dtype=np.float32).reshape(depth, width, width)
    weights = [fnp.asarray(layers[layer]) for layer in range(depth)]
    mlp = MLP(width=width, depth=depth, weights=weights, seed=int(request.get("seed", 0)),
              name=str(request.get("name", "")))
    mlp.validate()
    return mlp


def _forget_app_paths(app_paths: list[str]) -> None:
    """Drop the app's own folders (and the working folder '') from the import path."""
    blocked = {os.path.realpath(p) for p in app_paths}
    sys.path[:] = [p for p in sys.path if p and os.path.realpath(p) not in blocked]


def main(in_fd: int, out_fd: int, *, forked_at: float | None = None) -> int:
    """The worker's life: die with the parent, import the libraries, say hello, serve commands.

    A worker the fork server started (``forked_at``: the ``perf_counter`` of its fork) runs the same
    steps; its libraries are in ``sys.modules`` already (the server imported them once, before any
    participant code existed), so its ``import_s`` is the time from the fork to the hello.
    """
    global PARENT_PID
    PARENT_PID = os.getppid()
    die_with_parent(PARENT_PID)
    import_s = _preload()
    if forked_at is not None:
        import_s = time.perf_counter() - forked_at
    worker = Worker(out_fd)
    worker.reply({"status": "hello", "pid": os.getpid(), "import_s": import_s, "forked": forked_at is not None,
                  "environment": _blas()})
    reader = FrameReader(in_fd)
    while True:
        try:
            request, _ = read_blocking(in_fd, reader)
        except ProtocolError:
            return 0  # the parent went away
        command = request.get("cmd")
        if command == "start":
            worker.start(request)
        elif command == "predict":
            worker.predict(request)
        elif command == "close":
            worker.close()
            return 0
        else:
            worker.reply({"status": "error", "code": "PROTOCOL", "error_message": f"unknown command {command!r}"})
