"""Hostile estimators end with the right verdict, within their caps, while the app keeps answering.

Each file in ``tests/hostile/`` attacks the sandbox one way. It is scored through
``whestbench.scoring.evaluate_estimator`` exactly as a run scores it, with short
caps (2 s wall, 1 s grace, 1 GiB of memory) so the suite stays fast. A thread
polls the live app the whole time; every request must succeed promptly.
"""

from __future__ import annotations

import shutil
import tempfile
import threading
import time
import uuid
import warnings
from pathlib import Path

import flopscope.numpy as fnp
import pytest
import requests
from whestbench.runner import RunnerError
from whestbench.scoring import ContestSpec, evaluate_estimator, make_contest
from whestbench.sdk import SetupContext

from whestboard.rules import verdict_of
from whestboard.sandbox import _host
from whestboard.sandbox._host import SandboxedEstimator, SandboxLimits, SubmissionFiles

HOSTILE = Path(__file__).parent / "hostile"
WALL_S, GRACE_S = 2.0, 1.0
LIMITS = SandboxLimits(memory_mb=1024, wall_time_limit_s=WALL_S, residual_wall_time_limit_s=None, grace_s=GRACE_S,
                       setup_timeout_s=2.0, file_size_bytes=16 << 20, workdir_bytes=48 << 20, output_bytes=16 << 10)
SECRET_VALUE = "sekrit-organizer-token-4711"
SECRET_CONTENT = "TOP-SECRET-DATABASE-CONTENT"
OUTSIDE_TMP = "/var/tmp"  # a folder for files the sandbox must refuse, not merely hide


@pytest.fixture(scope="module")
def contest():
    """Two small MLPs with Monte Carlo targets, made by whestbench itself."""
    spec = ContestSpec(width=16, depth=2, n_mlps=2, flop_budget=10**8, ground_truth_samples=2000, seed=11,
                       wall_time_limit_s=WALL_S, residual_wall_time_limit_s=None, lambda_flops_per_second=0.0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return make_contest(spec)


@pytest.fixture(scope="module")
def app_watch(live_server):
    """Polls the live app every 0.2 s for the whole module; yields the list of (status, seconds)."""
    seen: list[tuple[int | str, float]] = []
    stop = threading.Event()

    def poll() -> None:
        while not stop.is_set():
            for path in ("/healthz", "/upload"):
                started = time.monotonic()
                try:
                    status: int | str = requests.get(live_server + path, timeout=10).status_code
                except requests.RequestException as exc:
                    status = type(exc).__name__
                seen.append((status, time.monotonic() - started))
            stop.wait(0.2)

    thread = threading.Thread(target=poll, daemon=True)
    thread.start()
    yield seen
    stop.set()
    thread.join(15)
    assert len(seen) > 20, "the poller barely ran"
    assert all(status == 200 for status, _ in seen), [s for s in seen if s[0] != 200][:5]
    assert max(seconds for _, seconds in seen) < 5.0


@pytest.fixture()
def secrets_around(tmp_path, monkeypatch):
    """A secret in the environment and a secret file where the app keeps its data (outside /tmp, as a real
    app's data is: what keeps it out of reach there is Landlock, not the worker's private /tmp)."""
    monkeypatch.setenv("WHESTBOARD_ORGANIZER_TOKEN", SECRET_VALUE)
    monkeypatch.setenv("WHESTBOARD_DATABASE_URL", f"sqlite:///{tmp_path}/{SECRET_VALUE}.sqlite")
    data_dir = Path(tempfile.mkdtemp(prefix="whestboard-app-data-", dir=OUTSIDE_TMP))
    secret = data_dir / "whestboard.sqlite"
    secret.write_text(SECRET_CONTENT)
    yield secret
    shutil.rmtree(data_dir)


def submission(tmp_path: Path, name: str, **fill: str) -> SubmissionFiles:
    source = (HOSTILE / name).read_text()
    for key, value in fill.items():
        source = source.replace("{" + key + "}", value)
    folder = tmp_path / name.removesuffix(".py")
    folder.mkdir(exist_ok=True)
    (folder / "estimator.py").write_text(source)
    return SubmissionFiles(root=folder)


def score(contest, files: SubmissionFiles, n_mlps: int = 1, limits: SandboxLimits = LIMITS):
    """(per-MLP entries, seconds, the sandboxed estimator) through the grader's scoring loop."""
    data = contest
    if n_mlps < len(contest.mlps):
        data = type(contest)(spec=ContestSpec(**{**contest.spec.__dict__, "n_mlps": n_mlps}),
                             mlps=contest.mlps[:n_mlps], all_layer_targets=contest.all_layer_targets[:n_mlps],
                             final_targets=contest.final_targets[:n_mlps], avg_variances=contest.avg_variances[:n_mlps])
    context = SetupContext(width=16, depth=2, flop_budget=data.spec.flop_budget, api_version="1.0")
    estimator = SandboxedEstimator(files, context, limits, expected_predicts=n_mlps)
    started = time.monotonic()
    try:
        estimator.start()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            results = evaluate_estimator(estimator, data)
    finally:
        estimator.close()
        _host.prewarm()  # the next case starts warm
    return results["per_mlp"], time.monotonic() - started, estimator


def assert_grader_fallback(entry: dict, contest) -> None:
    """A failed MLP is scored as the all-zero prediction with multiplier 1.0, exactly."""
    target = contest.final_targets[entry["mlp_index"]]
    assert entry["final_layer_mse"] == float(fnp.mean(fnp.asarray(target) ** 2))
    assert entry["adjusted_final_layer_score"] == entry["final_layer_mse"]


PER_MLP_BOUND_S = WALL_S + GRACE_S + 2.5  # the cap, the grace, and killing + reporting


@pytest.mark.parametrize(
    ("name", "verdict", "message"),
    [
        ("infinite_loop.py", "time", "wall cap"),
        ("sleeper.py", "time", "wall cap"),
        ("slow_return.py", "time", "wall-clock cap"),
        ("memory_bomb.py", "memory", "MemoryError"),
        ("threads.py", "fork", "can't start new thread"),
        ("huge_file.py", "disk", "File too large"),
        ("many_files.py", "disk", "quota"),
        ("tmp_filler.py", "disk", "quota"),
        ("raises.py", "exception", "exploded at depth 2"),
        ("nan.py", "non-finite", "finite"),
        ("wrong_shape.py", "shape", "transposed"),
        ("over_budget.py", "budget", "FLOP budget"),
        ("protocol_forger.py", "crash", "protocol"),
        ("hard_exit.py", "crash", "status 3"),
    ],
)
def test_hostile_estimator_gets_its_verdict_within_the_caps(app_watch, contest, tmp_path, name, verdict, message):
    entries, seconds, _ = score(contest, submission(tmp_path, name))
    got, text = verdict_of(entries[0])
    assert (got, message in text) == (verdict, True), (got, text)
    assert_grader_fallback(entries[0], contest)
    assert seconds < PER_MLP_BOUND_S + 15, f"{name} took {seconds:.1f} s"  # + one cold worker start


def test_fork_attempts_stop_the_worker_and_only_cost_their_own_mlp(app_watch, contest, tmp_path):
    entries, _, estimator = score(contest, submission(tmp_path, "fork_bomb.py"), n_mlps=2)
    assert [verdict_of(e)[0] for e in entries] == ["fork", "fork"]
    assert "start a new process" in verdict_of(entries[0])[1]
    assert estimator.restarts == 1  # a fresh worker (setup again) for the second MLP, as whestbench does
    for entry in entries:
        assert_grader_fallback(entry, contest)


def test_subprocess_cannot_run_a_shell(app_watch, contest, tmp_path):
    marker = Path("/tmp/whestboard-pwned")
    marker.unlink(missing_ok=True)
    entries, _, _ = score(contest, submission(tmp_path, "subprocess_shell.py"))
    assert verdict_of(entries[0])[0] == "fork"
    assert not marker.exists()


def test_snooping_finds_no_secret(app_watch, contest, tmp_path, secrets_around):
    files = submission(tmp_path, "snoop.py", SECRET_FILE=str(secrets_around), DATA_DIR=str(secrets_around.parent))
    entries, _, estimator = score(contest, files)
    verdict, message = verdict_of(entries[0])
    assert verdict == "exception" and "Permission denied" in message
    output = estimator.output.text()
    for label in ("data dir", "parent environ", "pid 1 environ", "/etc/passwd", "home", "network", "kill parent"):
        assert f"{label}: blocked" in output, output
    everything = output + repr(entries)
    assert SECRET_VALUE not in everything and SECRET_CONTENT not in everything
    assert "WHESTBOARD" not in output.split("environment:")[1].splitlines()[0]


def test_another_users_file_in_the_host_tmp_is_invisible(app_watch, contest, tmp_path):
    host_file = Path(f"/tmp/whestboard-other-user-{uuid.uuid4().hex}")
    host_file.write_text(SECRET_CONTENT)
    try:
        entries, _, estimator = score(contest, submission(tmp_path, "host_tmp_reader.py", HOST_FILE=str(host_file)))
    finally:
        host_file.unlink()
    assert estimator.started.confinement["private_tmp"], estimator.started.confinement
    verdict, message = verdict_of(entries[0])
    assert verdict == "exception" and f"No such file or directory: '{host_file}'" in message, message
    output = estimator.output.text()
    assert "stat: absent" in output and host_file.name not in output.split("listing:")[1].splitlines()[0]
    assert SECRET_CONTENT not in output + repr(entries)
    assert_grader_fallback(entries[0], contest)


def test_megabytes_of_prints_neither_break_the_protocol_nor_fill_memory(app_watch, contest, tmp_path):
    entries, _, estimator = score(contest, submission(tmp_path, "chatty.py"))
    assert verdict_of(entries[0])[0] == "ok"
    output = estimator.output
    assert output.total > 5_000_000 and output.truncated
    text = output.text()
    assert len(text) < 20_000 and "bytes of output omitted" in text and "LAST LINE" in text


def test_setup_that_never_returns_is_stopped_at_the_setup_timeout(app_watch, tmp_path):
    _host.prewarm()
    context = SetupContext(width=16, depth=2, flop_budget=10**8, api_version="1.0")
    estimator = SandboxedEstimator(submission(tmp_path, "slow_setup.py"), context, LIMITS)
    _host.spare_worker().wait_hello()  # measure setup alone, not the library imports
    started = time.monotonic()
    with pytest.raises(RunnerError) as failure:
        estimator.start()
    elapsed = time.monotonic() - started
    estimator.close()
    assert failure.value.detail.code == "SETUP_TIMEOUT"
    assert "setup timeout" in str(failure.value)
    assert LIMITS.setup_timeout_s <= elapsed < LIMITS.setup_timeout_s + 3


def test_a_killed_worker_leaves_no_process_and_no_files(app_watch, contest, tmp_path):
    context = SetupContext(width=16, depth=2, flop_budget=10**8, api_version="1.0")
    estimator = SandboxedEstimator(submission(tmp_path, "infinite_loop.py"), context, LIMITS)
    estimator.start()
    worker = estimator.worker
    with pytest.raises(RunnerError):
        estimator.predict(contest.mlps[0], 10**8)
    estimator.close()
    assert worker.process.poll() is not None
    assert not worker.root.exists() and not worker.handover.exists()
