"""The sandboxed runner scores exactly as in-process scoring does, and reports what it enforced.

Parity: the same estimator file through the sandbox and through whestbench's
``LocalRunner`` gives identical FLOPs, MSEs and scores (evaluate_estimator
computes both). Also: file specs run through the sandbox in ``runs`` and the
CLI, the contract check's verdicts, the wire protocol's caps, captured output.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import textwrap
import time
import warnings
from pathlib import Path

import pytest
from whestbench.packaging import package_submission
from whestbench.runner import EstimatorEntrypoint, LocalRunner, ResourceLimits
from whestbench.scoring import ContestSpec, evaluate_estimator, make_contest
from whestbench.sdk import SetupContext

from whestboard.data import bake, plan_from_args
from whestboard.rules import get_round, verdict_of
from whestboard.sandbox import _host
from whestboard.sandbox._confine import landlock_abi
from whestboard.sandbox._contract import check_contract
from whestboard.sandbox._host import OutputCapture, SandboxedEstimator, SandboxLimits, SubmissionFiles
from whestboard.sandbox._protocol import FrameReader, FrameTimeout, ProtocolError, encode, send
from whestboard.scoring import RunRequest, execute, resolve_estimator, rulebook_for
from whestboard.store import reset_engines

REPO = Path(__file__).resolve().parents[2]
HOSTILE = Path(__file__).parent / "hostile"
MEAN_FILE = "from whestbench.estimators import MeanPropagationEstimator\n\n\nclass Estimator(MeanPropagationEstimator):\n    pass\n"
COV_FILE = MEAN_FILE.replace("MeanPropagation", "CovariancePropagation")
LIMITS = SandboxLimits(memory_mb=2048, wall_time_limit_s=20.0, residual_wall_time_limit_s=None, grace_s=2.0)


@pytest.fixture(autouse=True)
def warm_next():
    yield
    _host.prewarm()  # the next test's worker imports its libraries meanwhile


@pytest.fixture(scope="module")
def contest():
    spec = ContestSpec(width=24, depth=3, n_mlps=2, flop_budget=10**9, ground_truth_samples=4000, seed=5,
                       wall_time_limit_s=20.0, residual_wall_time_limit_s=None, lambda_flops_per_second=0.0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return make_contest(spec)


def folder_with(tmp_path: Path, source: str, name: str = "est") -> Path:
    folder = tmp_path / name
    folder.mkdir()
    (folder / "estimator.py").write_text(source)
    return folder


def context_for(data) -> SetupContext:
    return SetupContext(width=data.spec.width, depth=data.spec.depth, flop_budget=data.spec.flop_budget,
                        api_version="1.0")


def in_process(folder: Path, data) -> list[dict]:
    runner = LocalRunner()
    limits = ResourceLimits(setup_timeout_s=5, predict_timeout_s=30, memory_limit_mb=8192,
                            flop_budget=data.spec.flop_budget, wall_time_limit_s=data.spec.wall_time_limit_s)
    runner.start(EstimatorEntrypoint(file_path=folder / "estimator.py"), context_for(data), limits)
    try:
        return evaluate_estimator(runner, data)["per_mlp"]
    finally:
        runner.close()


GRADER_FIELDS = ("flops_used", "final_layer_mse", "all_layers_mse", "per_layer_mse", "adjusted_final_layer_score",
                 "effective_compute", "budget_exhausted", "time_exhausted")


@pytest.mark.parametrize("source", [MEAN_FILE, COV_FILE], ids=["mean", "cov"])
def test_sandbox_scores_exactly_as_in_process(tmp_path, contest, source):
    folder = folder_with(tmp_path, source)
    with SandboxedEstimator(SubmissionFiles(root=folder), context_for(contest), LIMITS) as estimator:
        sandboxed = evaluate_estimator(estimator, contest)["per_mlp"]
        stats = estimator.last_predict_stats()
        handover = estimator.last_handover
    local = in_process(folder, contest)
    for ours, theirs in zip(sandboxed, local, strict=True):
        assert {k: ours[k] for k in GRADER_FIELDS} == {k: theirs[k] for k in GRADER_FIELDS}
        assert ours["flops_used"] > 0 and not ours.get("error_code")
    assert set(stats) >= {"flops_used", "wall_time_s", "flopscope_backend_time_s", "flopscope_overhead_time_s",
                          "residual_wall_time_s", "budget_breakdown"}
    assert abs(stats["wall_time_s"] - (stats["flopscope_backend_time_s"] + stats["flopscope_overhead_time_s"]
                                       + stats["residual_wall_time_s"])) < 1e-6
    assert handover["map_s"] is not None and handover["write_s"] >= 0


def test_the_worker_is_confined_and_reports_it(tmp_path, contest):
    folder = folder_with(tmp_path, MEAN_FILE)
    with SandboxedEstimator(SubmissionFiles(root=folder), context_for(contest), LIMITS) as estimator:
        facts = estimator.started.confinement
        worker_pid = estimator.worker.pid
        assert os.getpgid(worker_pid) == worker_pid  # its own process group, killed as a whole
        environ = (Path("/proc") / str(worker_pid) / "environ").read_bytes().split(b"\0")
    keys = {item.split(b"=", 1)[0].decode() for item in environ if item}
    assert keys <= {"PATH", "HOME", "TMPDIR", "LANG", "LC_ALL", "ARROW_DEFAULT_MEMORY_POOL", "JE_ARROW_MALLOC_CONF",
                    *_host.THREAD_ENV}
    assert facts["rlimits"]["RLIMIT_AS"] == LIMITS.memory_mb << 20
    assert facts["rlimits"]["RLIMIT_NPROC"] == 0 and facts["rlimits"]["RLIMIT_NOFILE"] == LIMITS.open_files
    if landlock_abi() > 0:
        assert facts["landlock_abi"] == landlock_abi()
    assert facts["seccomp"] is True
    namespace = "mount namespace" if os.geteuid() == 0 else "user namespace"  # root needs no user namespace
    assert facts["private_tmp"] == f"tmpfs {LIMITS.workdir_bytes / 2**20:g} MiB ({namespace})"
    assert facts["missing"] == {}


def test_a_warm_spare_skips_the_imports(tmp_path, contest):
    _host.prewarm()
    _host.spare_worker().wait_hello()
    folder = folder_with(tmp_path, MEAN_FILE)
    with SandboxedEstimator(SubmissionFiles(root=folder), context_for(contest), LIMITS) as estimator:
        assert estimator.started.warm and estimator.started.import_s > 0
        assert _host.spare_worker() is None  # taken, not shared


def test_a_dead_worker_is_replaced_for_the_next_mlp(tmp_path, contest):
    source = textwrap.dedent(f"""
        import os
        from whestbench.estimators import MeanPropagationEstimator

        class Estimator(MeanPropagationEstimator):
            def predict(self, mlp, budget):
                if mlp.seed == {contest.mlps[0].seed}:
                    os._exit(9)
                return super().predict(mlp, budget)
    """)
    folder = folder_with(tmp_path, source)
    with SandboxedEstimator(SubmissionFiles(root=folder), context_for(contest), LIMITS) as estimator:
        first, second = evaluate_estimator(estimator, contest)["per_mlp"]
        assert estimator.restarts == 1
    assert verdict_of(first) == ("crash", "the worker exited with status 9 during predict "
                                          "(sys.exit/os._exit in the estimator?)")
    assert verdict_of(second)[0] == "ok" and second["flops_used"] > 0


# -- runs and the CLI -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny_dataset(tmp_path_factory):
    root = tmp_path_factory.mktemp("sandbox-data")
    path = root / "toy-warmup"
    bake(path, plan_from_args(round_tag="v1-warmup", width=16, depth=3, n_mlps=2, n_samples=512, seeds=[3, 4]),
         show_progress=False, explicit_seeds=True)
    return path


@pytest.fixture()
def store(tmp_path, monkeypatch):
    monkeypatch.setenv("WHESTBOARD_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.delenv("WHESTBOARD_DATABASE_URL", raising=False)
    reset_engines()
    yield tmp_path / "state"
    reset_engines()


def test_file_specs_run_in_the_sandbox_and_equal_the_builtin(tmp_path, tiny_dataset, store):
    from whestboard.data import open_dataset

    dataset = open_dataset(tiny_dataset)
    path = folder_with(tmp_path, MEAN_FILE) / "estimator.py"
    handle = resolve_estimator(str(path))
    assert handle.kind == "file" and "sandboxed" in handle.description
    assert handle.code_sha256 == hashlib.sha256(path.read_bytes()).hexdigest()
    assert isinstance(handle.factory(), SandboxedEstimator)
    rulebook = rulebook_for("v1-warmup")  # priced residual: C = F + 1e11 R stays well under B
    filed = execute(RunRequest(dataset, None, handle, rulebook)).report["results"]["per_mlp"]
    builtin = execute(RunRequest(dataset, None, resolve_estimator("mean"), rulebook)).report
    for ours, theirs in zip(filed, builtin["results"]["per_mlp"], strict=True):
        assert not ours["failed"] and not theirs["failed"]
        assert ours["flops_used"] == theirs["flops_used"] and ours["final_layer_mse"] == theirs["final_layer_mse"]


def test_cli_scores_a_whest_package_archive_in_the_sandbox(tmp_path, tiny_dataset, store, preloaded):
    """``python -m whestboard score`` in a process of its own (forked: tests/preloaded.py)."""
    folder = folder_with(tmp_path, MEAN_FILE, "submission")
    (folder / "notes.md").write_text("how it works\n")
    archive = package_submission(folder, output_path=tmp_path / "submission.tar.gz")
    env = {**os.environ, "WHESTBOARD_STATE_DIR": str(store)}
    done = preloaded.start("whestboard", "score", "--dataset", str(tiny_dataset), "--estimator", str(archive),
                           "--mlps", "0", "--budget", "1e9", "--json", env=env)
    stdout, stderr = done.communicate(timeout=300)
    assert done.returncode == 0, stderr
    report = json.loads(stdout)
    estimator = report["whestboard"]["estimator"]
    assert estimator["code_sha256"] == hashlib.sha256(archive.read_bytes()).hexdigest()
    assert "sandboxed" in estimator["description"] and estimator["class_name"] == "Estimator"
    entry = report["results"]["per_mlp"][0]
    assert entry["flops_used"] > 0 and not entry.get("error_code")


def test_cli_refuses_a_tampered_archive_with_one_line(tmp_path, tiny_dataset, store, preloaded):
    """``python -m whestboard score`` in a process of its own (forked: tests/preloaded.py); a traceback
    escaping the command would be printed to its stderr there as by a fresh interpreter."""
    archive = tmp_path / "broken.tar.gz"
    archive.write_bytes(b"not an archive at all")
    done = preloaded.start("whestboard", "score", "--dataset", str(tiny_dataset), "--estimator", str(archive),
                           env={**os.environ, "WHESTBOARD_STATE_DIR": str(store)})
    _, stderr = done.communicate(timeout=120)
    assert done.returncode == 2
    assert stderr.strip().startswith("error: not a readable .tar.gz archive") and "Traceback" not in stderr


# -- the contract check ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("source", "step", "verdict", "fix"),
    [
        ("x = 1\n", "load", "No BaseEstimator subclasses", "Define one BaseEstimator subclass"),
        (MEAN_FILE + "    def setup(self, ctx):\n        raise OSError('weights.npz missing')\n", "setup",
         "weights.npz missing", "setup() raised"),
        (MEAN_FILE + "    def predict(self, mlp, budget):\n        import time\n        time.sleep(0.6)\n"
                     "        return super().predict(mlp, budget)\n", "predict", "residual", "Python loops"),
        ((HOSTILE / "over_budget.py").read_text(), "predict", "budget", "`budget` argument"),
        ((HOSTILE / "wrong_shape.py").read_text(), "predict", "shape", "fnp.stack"),
    ],
    ids=["no-class", "setup-raises", "residual", "over-budget", "shape"],
)
def test_contract_failures_say_what_to_fix(tmp_path, source, step, verdict, fix):
    rnd = get_round("v2-phase2")  # gated residual: 0.4 s outside flopscope fails, whest validate would not notice
    report = check_contract(SubmissionFiles(root=folder_with(tmp_path, source)), rnd,
                            SandboxLimits(memory_mb=2048, grace_s=2.0), width=16, depth=2)
    failed = [s for s in report.steps if not s.ok]
    assert not report.ok and failed[0].name == step, report.steps
    assert verdict in failed[0].message and fix in failed[0].fix
    assert report.summary().startswith(f"contract failed at {step}")


def test_contract_passes_a_good_estimator_under_every_rule(tmp_path):
    report = check_contract(SubmissionFiles(root=folder_with(tmp_path, COV_FILE)), get_round("v2-phase2"),
                            SandboxLimits(memory_mb=2048))
    assert report.ok and [s.name for s in report.steps] == ["load", "setup", "predict"]
    assert report.class_name == "Estimator" and report.shape == (4, 64)
    assert 0 < report.stats["flops_used"] < get_round("v2-phase2").budget
    assert report.confinement["seccomp"] is True


# -- protocol and output ---------------------------------------------------------------------------------


def test_frames_round_trip_and_hostile_frames_are_refused():
    read_fd, write_fd = os.pipe()
    try:
        send(write_fd, {"status": "ok", "shape": [2, 2]}, b"\x00" * 16)
        message, payload = FrameReader(read_fd).read(1.0)
        assert message == {"status": "ok", "shape": [2, 2]} and payload == b"\x00" * 16
        os.write(write_fd, b"\xff\xff\xff\xff\x00\x00\x00\x00")
        with pytest.raises(ProtocolError, match="oversized"):
            FrameReader(read_fd).read(1.0)
        reader = FrameReader(read_fd)
        with pytest.raises(FrameTimeout):
            reader.read(0.2)
        os.write(write_fd, encode({"a": 1})[:8] + b"not json")
        with pytest.raises(ProtocolError, match="malformed"):
            reader.read(1.0)
    finally:
        os.close(read_fd)
        os.close(write_fd)


def test_output_keeps_head_and_tail_of_megabytes():
    capture = OutputCapture(limit=1000)
    capture.feed(b"HEAD" + b"x" * 3_000_000)
    capture.feed(b"y" * 10 + b"TAIL")
    text = capture.text()
    assert text.startswith("HEAD") and text.endswith("TAIL") and capture.truncated
    assert "[... 2,999,018 bytes of output omitted ...]" in text and len(text) < 1100


@pytest.mark.parametrize(
    ("entry", "verdict"),
    [
        ({"budget_exhausted": True}, "budget"),
        ({"time_exhausted": True, "wall_time_s": 3.0}, "time"),
        ({"residual_wall_time_exhausted": True, "residual_wall_time_s": 0.5}, "residual"),
        ({"combined_budget_exhausted": True}, "combined"),
        ({"error_code": "PREDICT_ERROR", "error": "boom"}, "exception"),
        ({"error_code": "PREDICT_ERROR", "error": {"message": "Predictions must contain only finite values.",
                                                   "details": {"expected_shape": [2, 3], "got_shape": [2, 3]}}},
         "non-finite"),
        ({"error_code": "PREDICT_ERROR", "error": {"message": "bad", "details": {"expected_shape": [2, 3],
                                                                                 "got_shape": [3, 2]}}}, "shape"),
        ({"error_code": "SANDBOX_MEMORY", "error": "MemoryError"}, "memory"),
        ({"error_code": "SANDBOX_FORK", "error": "fork"}, "fork"),
        ({"error_code": "SANDBOX_DISK_QUOTA", "error": "quota"}, "disk"),
        ({"error_code": "PREDICT_TIMEOUT", "error": "cap"}, "time"),
        ({"error_code": "SANDBOX_CRASH", "error": "SIGSEGV"}, "crash"),
        ({}, "ok"),
    ],
)
def test_verdicts_name_the_cause(entry, verdict):
    assert verdict_of(entry)[0] == verdict


def test_a_worker_dies_with_the_app_process_that_started_it(preloaded):
    """An app worker killed mid-job must not leave a sandbox sleeping forever (PR_SET_PDEATHSIG)."""
    from tests.sandbox.test_forkserver import a_worker_in_predict, sleeping_check

    command = sleeping_check(preloaded)
    _, pid = a_worker_in_predict(command.pid)
    command.kill()  # the app process dies while predict sleeps
    command.wait(timeout=30)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        try:
            state = (Path("/proc") / str(pid) / "stat").read_text().split(")")[-1].split()[0]
        except FileNotFoundError:
            return
        if state in ("Z", "X"):
            return
        time.sleep(0.1)
    raise AssertionError(f"sandbox worker {pid} outlived the process that started it")


def test_folders_of_workers_whose_app_died_are_swept(tmp_path, monkeypatch):
    """In temporary folders of the test's own: a sweep told it is twenty minutes later takes every young
    ownerless folder, and in the shared /tmp those include the workers other test processes are starting."""
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    monkeypatch.setattr(_host, "handover_base", lambda: str(tmp_path / "shm"))
    for folder in ("tmp", "shm"):
        (tmp_path / folder).mkdir()
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    handover = Path(tempfile.mkdtemp(prefix=_host.HANDOVER_PREFIX, dir=_host.handover_base()))
    orphan = Path(tempfile.mkdtemp(prefix=_host.ROOT_PREFIX))
    (orphan / _host.OWNER_FILE).write_text(f"{dead.stdout.strip()}\n{handover}")
    alive = Path(tempfile.mkdtemp(prefix=_host.ROOT_PREFIX))
    (alive / _host.OWNER_FILE).write_text(f"{os.getpid()}\n/nowhere")
    try:
        assert _host.sweep_orphan_folders() >= 1
        assert not orphan.exists() and alive.exists()
        assert handover.exists()  # young: it may belong to a worker being set up
        _host.sweep_orphan_folders(now=time.time() + 2 * _host.ORPHAN_AGE_S)
        assert not handover.exists()
    finally:
        for folder in (alive, orphan, handover):
            __import__("shutil").rmtree(folder, ignore_errors=True)
