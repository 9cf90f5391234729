"""Workers forked from the warm fork server: confined as spawned ones are, sharing nothing, gone with their owner.

The oracle for confinement is a worker spawned the old way (``WHESTBOARD_SANDBOX_FORK_SERVER=off``):
a forked worker must report the same layers. Isolation is checked from inside the worker (its
descriptors, its random stream, its modules), lifetime from outside (``/proc``).
"""

from __future__ import annotations

import json
import os
import signal
import tempfile
import textwrap
import time
from pathlib import Path

import pytest
from whestbench.generation import sample_mlp
from whestbench.sdk import SetupContext

from whestboard.sandbox import _forkserver, _host
from whestboard.sandbox._host import SandboxedEstimator, SandboxLimits, SubmissionFiles

HOSTILE = Path(__file__).parent / "hostile"
LIMITS = SandboxLimits(memory_mb=2048, wall_time_limit_s=20.0, residual_wall_time_limit_s=None, grace_s=2.0)
CONTEXT = SetupContext(width=8, depth=2, flop_budget=10**8, api_version="1.0")
#: An estimator that reports, from inside its worker, what it can see of the process it lives in.
SURVEYOR = """
    import json, os
    import numpy
    import flopscope.numpy as fnp
    from whestbench import BaseEstimator


    class Estimator(BaseEstimator):
        def setup(self, context):
            survey = {"fds": sorted(int(fd) for fd in os.listdir("/proc/self/fd")),
                      "random": float(numpy.random.random()),
                      "home": os.environ["HOME"],
                      "tmpdir": os.environ["TMPDIR"], "cwd": os.getcwd(), "ppid": os.getppid(),
                      "pgid": os.getpgid(0), "pid": os.getpid()}
            print("SURVEY " + json.dumps(survey), flush=True)

        def predict(self, mlp, budget):
            return fnp.zeros((mlp.depth, mlp.width))
    """


def surveyor(tmp_path: Path) -> SubmissionFiles:
    folder = tmp_path / "surveyor"
    folder.mkdir(exist_ok=True)
    (folder / "estimator.py").write_text(textwrap.dedent(SURVEYOR).lstrip())
    return SubmissionFiles(root=folder)


def survey_of(estimator: SandboxedEstimator) -> dict:
    return json.loads(estimator.output.text().split("SURVEY ", 1)[1].splitlines()[0])


def run_surveyor(tmp_path: Path) -> tuple[dict, dict, bool]:
    estimator = SandboxedEstimator(surveyor(tmp_path), CONTEXT, LIMITS)
    with estimator:
        facts = estimator.started.confinement
        forked = bool(estimator.worker.hello.get("forked"))
        estimator.predict(sample_mlp(8, 2), 10**8)
    return survey_of(estimator), facts, forked


def a_serving_fork_server() -> _forkserver.ForkServer | None:
    """This process's fork server once it has forked a worker: the spare the next sandbox takes."""
    _host.prewarm()
    spare = _host.spare_worker()
    assert spare is not None and spare.wait_hello().get("forked")
    return _forkserver.current_fork_server()


def test_a_forked_worker_is_confined_exactly_as_a_spawned_one(tmp_path, monkeypatch):
    forked_survey, forked_facts, forked = run_surveyor(tmp_path)
    monkeypatch.setenv("WHESTBOARD_SANDBOX_FORK_SERVER", "off")
    spawned_survey, spawned_facts, spawned_forked = run_surveyor(tmp_path)
    assert forked and not spawned_forked
    ignore = {"tmp_bound"}  # the paths of each worker's own folders
    assert {k: v for k, v in forked_facts.items() if k not in ignore} == \
           {k: v for k, v in spawned_facts.items() if k not in ignore}
    assert forked_facts["missing"] == {} and forked_facts["seccomp"] is True
    for survey in (forked_survey, spawned_survey):
        assert survey["home"] == survey["cwd"] and survey["tmpdir"] == "/tmp"
        assert survey["pgid"] == survey["pid"]  # its own process group, killed as a whole
    # Nothing of the server's is open in the worker: the same descriptors as a spawned worker has.
    assert len(forked_survey["fds"]) == len(spawned_survey["fds"])
    server = _forkserver.current_fork_server()
    assert server is not None and forked_survey["ppid"] == server.pid


def test_forked_workers_draw_their_own_random_streams(tmp_path):
    first, _, _ = run_surveyor(tmp_path)
    second, _, _ = run_surveyor(tmp_path)
    assert first["pid"] != second["pid"] and first["random"] != second["random"]


def test_the_fork_server_is_a_fresh_single_threaded_process_with_a_bare_environment():
    server = a_serving_fork_server()
    assert server is not None and server.alive()
    proc = Path("/proc") / str(server.pid)
    assert b"whestboard.sandbox._forkserver" in (proc / "cmdline").read_bytes()  # exec'd, not a fork of the app
    assert len(os.listdir(proc / "task")) == 1
    keys = {item.split(b"=", 1)[0].decode() for item in (proc / "environ").read_bytes().split(b"\0") if item}
    assert keys <= {"PATH", "HOME", "TMPDIR", "LANG", "LC_ALL", "ARROW_DEFAULT_MEMORY_POOL", "JE_ARROW_MALLOC_CONF",
                    *_host.THREAD_ENV}
    sockets = [fd for fd in os.listdir(proc / "fd") if os.readlink(proc / "fd" / fd).startswith("socket:")]
    assert len(sockets) == 1  # its line to this process, and nothing else to talk through


def test_a_killed_fork_server_takes_its_workers_and_the_next_worker_still_starts(tmp_path, contest_mlp):
    estimator = SandboxedEstimator(surveyor(tmp_path), CONTEXT, LIMITS)
    estimator.start()
    server = _forkserver.current_fork_server()
    assert server is not None and estimator.worker.hello.get("forked")
    worker_pid = estimator.worker.pid
    os.kill(server.pid, signal.SIGKILL)
    assert estimator.worker.process.wait(timeout=10) == -signal.SIGKILL
    assert not _alive(worker_pid, wait_s=5)
    estimator.predict(contest_mlp, 10**8)  # the dead worker is replaced, as after any crash
    assert estimator.restarts == 1 and estimator.worker.hello.get("forked")
    assert _forkserver.current_fork_server() is not server  # a new server, started fresh
    estimator.close()


def test_the_fork_server_and_its_workers_die_with_the_process_that_started_them(preloaded):
    command = sleeping_check(preloaded)
    server_pid, worker_pid = a_worker_in_predict(command.pid)
    command.kill()  # no atexit, no close: killed
    assert command.wait(timeout=30) == -signal.SIGKILL
    assert not _alive(server_pid, wait_s=5), "the fork server outlived its owner"
    assert not _alive(worker_pid, wait_s=5), "a forked worker outlived its owner"


def test_a_fork_of_the_owner_never_uses_the_owners_server():
    server = a_serving_fork_server()
    assert server is not None
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child must neither share the socket's requests nor close the parent's server
        os.close(read)
        os.write(write, json.dumps(_forkserver.current_fork_server() is None).encode())
        os._exit(0)
    os.close(write)
    os.waitpid(pid, 0)
    assert json.loads(os.read(read, 100)) is True
    os.close(read)
    assert server.alive() and _forkserver.current_fork_server() is server


@pytest.fixture
def contest_mlp():
    return sample_mlp(8, 2)


def sleeping_check(preloaded):
    """``python -m whestboard check`` on an estimator that sleeps in predict: an app process mid-job, of its
    own (forked with whestboard imported: tests/preloaded.py), whose sandbox is started as every app's is."""
    return preloaded.start("whestboard", "check", "--estimator", str(HOSTILE / "sleeper.py"))


def a_worker_in_predict(owner_pid: int, timeout_s: float = 120.0) -> tuple[int, int]:
    """(fork server pid, worker pid) once a worker forked for ``owner_pid`` is in predict.

    The worker's folder names its hand-over folder (``owner``); the MLP's weights lie there from just
    before predict is sent until its answer comes back.
    """
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for server in _children(owner_pid):
            if b"whestboard.sandbox._forkserver" not in _read(Path("/proc") / str(server) / "cmdline"):
                continue
            for worker in _children(server):
                handover = _handover_folder(worker)
                if handover is not None and (handover / "weights.f32").exists():
                    return server, worker
        time.sleep(0.1)
    raise AssertionError(f"no sandbox worker of process {owner_pid} reached predict within {timeout_s:g} s")


def _children(pid: int) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        stat = _read(Path("/proc") / entry / "stat") if entry.isdigit() else b""
        if stat and int(stat.rsplit(b")", 1)[1].split()[1]) == pid:
            found.append(int(entry))
    return found


def _handover_folder(worker_pid: int) -> Path | None:
    for root in Path(tempfile.gettempdir()).glob(f"{_host.ROOT_PREFIX}*"):
        pid, _, handover = _read(root / _host.OWNER_FILE).decode().partition("\n")
        if pid == str(worker_pid) and handover:
            return Path(handover)
    return None


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError:  # gone meanwhile
        return b""


def _alive(pid: int, wait_s: float) -> bool:
    """Whether ``pid`` is still a running process after waiting up to ``wait_s`` (a zombie counts as gone)."""
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        try:
            state = (Path("/proc") / str(pid) / "stat").read_text().split(")")[-1].split()[0]
        except FileNotFoundError:
            return False
        if state in ("Z", "X"):
            return False
        time.sleep(0.05)
    return True
