"""An estimator that writes scratch files to /tmp scores in the sandbox as under ``whest run``; the host never sees them.

Each sandbox worker mounts a private, size-capped tmpfs on ``/tmp`` in a mount
namespace of its own (``whestboard.sandbox._confine``). The same estimator file is
scored by ``whest run --json`` and by ``python -m whestboard score --json`` on the
same MLPs: every non-timing per-MLP field must agree, and the file it writes must
never appear in the host's ``/tmp`` while the sandbox runs it (whest run, unconfined,
then shows that the very same file does land there). Without a private ``/tmp``
(turned off here, or refused by the platform) the verdict names the cause and the fix.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
import uuid
import warnings
from pathlib import Path

import pytest
from whestbench.scoring import ContestSpec, evaluate_estimator, make_contest
from whestbench.sdk import SetupContext

from tests.cli.test_score_cli import score_json
from tests.upstream import assert_same_per_mlp, make_official
from whestboard.rules import verdict_of
from whestboard.sandbox import _host
from whestboard.sandbox._confine import landlock_abi, python_paths
from whestboard.sandbox._host import SandboxedEstimator, SandboxLimits, SubmissionFiles

REPO = Path(__file__).resolve().parents[2]
BUDGET = 5_000_000
LIMITS = SandboxLimits(memory_mb=2048, wall_time_limit_s=20.0, residual_wall_time_limit_s=None, grace_s=2.0,
                       workdir_bytes=32 << 20)

# Covariance propagation whose answer makes a round trip through two scratch files in FOLDER.
SCRATCH_ESTIMATOR = """
import json
import tempfile

import flopscope.numpy as fnp
from whestbench.estimators import CovariancePropagationEstimator

FOLDER = {folder}
SCRATCH = f"{{FOLDER}}/whestboard-scratch-{token}.json"
NOTE = f"{{FOLDER}}/whestboard-scratch-{token}.txt"


class Estimator(CovariancePropagationEstimator):
    def predict(self, mlp, budget):
        predictions = super().predict(mlp, budget)
        with open(SCRATCH, "w") as saved:  # no numpy: the Phase 2 grader has none
            json.dump(predictions.tolist(), saved)
        with open(NOTE, "w") as note:
            note.write(f"{{mlp.depth}} {{mlp.width}}")
        with open(NOTE) as note:
            shape = tuple(int(n) for n in note.read().split())
        with open(SCRATCH) as saved:
            restored = fnp.asarray(json.load(saved), dtype=fnp.float32)
        assert restored.shape == shape, (restored.shape, shape)
        return restored
"""
IN_TMP, IN_TEMPFILE_DIR = '"/tmp"', "tempfile.gettempdir()"

# Reports what it sees as /tmp, then leaves 1 MiB there (counted against the sandbox's disk quota).
SURVEY_ESTIMATOR = """
import json
import os
import tempfile

from whestbench.estimators import MeanPropagationEstimator


class Estimator(MeanPropagationEstimator):
    def setup(self, context):
        usage = os.statvfs("/tmp")
        print("SURVEY", json.dumps({"listing": sorted(os.listdir("/tmp")), "tmpdir": os.environ.get("TMPDIR"),
                                    "gettempdir": tempfile.gettempdir(),
                                    "size": usage.f_blocks * usage.f_frsize}))

    def predict(self, mlp, budget):
        with open("/tmp/megabyte-{token}.bin", "wb") as out:
            out.write(b"x" * (1 << 20))
        return super().predict(mlp, budget)
"""


@pytest.fixture(autouse=True)
def warm_next():
    yield
    _host.prewarm()


@pytest.fixture()
def token() -> str:
    """A name no other run uses, so "the host's /tmp has no such file" means something."""
    return uuid.uuid4().hex


def scratch_paths(token: str, folder: str = "/tmp") -> list[Path]:
    return [Path(f"{folder}/whestboard-scratch-{token}{suffix}") for suffix in (".json", ".txt")]


def estimator_file(folder: Path, source: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "estimator.py"
    path.write_text(textwrap.dedent(source))
    return path


@pytest.fixture(scope="module")
def official(tmp_path_factory):
    return make_official(tmp_path_factory.mktemp("tmp-ds") / "ds", width=16, depth=3, n_samples=2000,
                         seeds=[5, 6, 7])


@pytest.fixture(scope="module")
def contest():
    spec = ContestSpec(width=16, depth=3, n_mlps=2, flop_budget=10**8, ground_truth_samples=2000, seed=9,
                       wall_time_limit_s=20.0, residual_wall_time_limit_s=None, lambda_flops_per_second=0.0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return make_contest(spec)


def score_in_sandbox(path: Path, data, limits: SandboxLimits = LIMITS) -> tuple[list[dict], SandboxedEstimator]:
    context = SetupContext(width=data.spec.width, depth=data.spec.depth, flop_budget=data.spec.flop_budget,
                           api_version="1.0")
    estimator = SandboxedEstimator(SubmissionFiles.single_file(path), context, limits,
                                   expected_predicts=len(data.mlps))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            estimator.start()
            return evaluate_estimator(estimator, data)["per_mlp"], estimator
        finally:
            estimator.close()


def tmp_mounts() -> list[str]:
    """The host's mount table entries at or under /tmp (a mount leaking out of a worker would show here)."""
    lines = Path("/proc/self/mountinfo").read_text().splitlines()
    return [line for line in lines if line.split()[4] == "/tmp" or line.split()[4].startswith("/tmp/")]


@pytest.mark.usefixtures("private_state")
def test_a_tmp_writing_estimator_scores_as_under_whest_run_and_the_host_tmp_stays_untouched(
        capsys, official, tmp_path, token, preloaded):
    path = estimator_file(tmp_path / "est", SCRATCH_ESTIMATOR.format(folder=IN_TMP, token=token))
    host_files = scratch_paths(token)
    mounts_before = tmp_mounts()
    try:
        ours = score_json(capsys, "--dataset", str(official), "--estimator", str(path), "--budget", str(BUDGET))
        assert not any(p.exists() for p in host_files), "the sandboxed estimator wrote into the host's /tmp"
        assert tmp_mounts() == mounts_before

        env = dict(os.environ, HF_HOME=str(tmp_path / "hf"), HF_DATASETS_OFFLINE="1")
        done = preloaded.start("whest", "run", "--estimator", str(path), "--dataset", str(official), "--json",
                               "--runner", "local", "--flop-budget", str(BUDGET), env=env)
        stdout, stderr = done.communicate(timeout=300)
        assert done.returncode == 0, stderr[-2000:]
        theirs = json.loads(stdout)
        assert all(p.is_file() for p in host_files), "unconfined, the same file must land in the host's /tmp"
    finally:
        for p in host_files:
            p.unlink(missing_ok=True)

    mine, upstream = ours["results"]["per_mlp"], theirs["results"]["per_mlp"]
    assert len(mine) == len(upstream) == 3
    for a, b in zip(mine, upstream, strict=True):
        assert verdict_of(a) == verdict_of(b) == ("ok", ""), (a.get("error"), b.get("error"))
        assert a["flops_used"] > 0
    assert assert_same_per_mlp(ours, theirs) > 36  # every field whest reports on 3 MLPs, tracebacks aside


@pytest.mark.parametrize("method", ["auto", "user"])
def test_the_private_tmp_is_empty_capped_counted_and_gone_afterwards(contest, tmp_path, token, method):
    path = estimator_file(tmp_path / "survey", SURVEY_ESTIMATOR.replace("{token}", token))
    limits = SandboxLimits(**{**LIMITS.__dict__, "private_tmp": method})
    context = SetupContext(width=16, depth=3, flop_budget=10**8, api_version="1.0")
    mounts_before = tmp_mounts()
    estimator = SandboxedEstimator(SubmissionFiles.single_file(path), context, limits)
    try:
        facts = estimator.start().confinement
        worker = estimator.worker
        estimator.predict(contest.mlps[0], 10**8)
        tmp_used = worker.private_tmp_bytes()
        quota_used = worker.scratch_bytes()
    finally:
        estimator.close()
    namespace = "mount namespace" if method == "auto" and os.geteuid() == 0 else "user namespace"
    assert facts["private_tmp"] == f"tmpfs {limits.workdir_bytes / 2**20:g} MiB ({namespace})"
    assert facts["missing"] == {} and facts["seccomp"] is True
    survey = json.loads(estimator.output.text().split("SURVEY ", 1)[1].splitlines()[0])
    # Nothing of the host's /tmp but what the worker was given, bound back at its paths: its own folders and,
    # when the interpreter lives under /tmp (a checkout's virtualenv there), the Python it imports from.
    given = [worker.root, worker.submission_dir, worker.handover, *python_paths()]
    bound = [Path(p) for p in facts["tmp_bound"]]
    assert all(any(b.is_relative_to(g) or g.is_relative_to(b) for g in given) for b in bound), (bound, given)
    assert any(b.is_relative_to(worker.root) or worker.root.is_relative_to(b) for b in bound)
    assert survey["listing"] == sorted({b.relative_to("/tmp").parts[0] for b in bound})
    assert survey["tmpdir"] == survey["gettempdir"] == "/tmp"
    assert survey["size"] == limits.workdir_bytes
    assert 1 << 20 <= tmp_used < 2 << 20 and quota_used >= tmp_used
    assert not Path(f"/tmp/megabyte-{token}.bin").exists()
    assert worker.process.poll() is not None and not worker.root.exists()
    assert tmp_mounts() == mounts_before


def test_without_a_private_tmp_the_verdict_names_the_cause_and_the_fix(contest, tmp_path, token):
    path = estimator_file(tmp_path / "est", SCRATCH_ESTIMATOR.format(folder=IN_TMP, token=token))
    off = SandboxLimits(**{**LIMITS.__dict__, "private_tmp": "off"})
    entries, estimator = score_in_sandbox(path, contest, off)
    facts = estimator.started.confinement
    assert facts["private_tmp"] == "" and "turned off" in facts["missing"]["private_tmp"]
    for entry in entries:
        verdict, message = verdict_of(entry)
        assert entry["error_code"] == "SANDBOX_WRITE_REFUSED"
        assert verdict == "disk", (verdict, message)
        assert f"Permission denied: '{scratch_paths(token)[0]}'" in message
        assert "writes outside the working folder are refused here" in message
        assert "no private /tmp: turned off" in message and message.endswith("use tempfile / TMPDIR")
    assert not any(p.exists() for p in scratch_paths(token))


def test_the_fix_the_verdict_names_works_without_a_private_tmp(contest, tmp_path, token):
    """The same round trip through ``tempfile.gettempdir()`` scores as the one through a private /tmp."""
    off = SandboxLimits(**{**LIMITS.__dict__, "private_tmp": "off"})
    fixed_source = SCRATCH_ESTIMATOR.format(folder=IN_TEMPFILE_DIR, token=token)
    fixed, estimator = score_in_sandbox(estimator_file(tmp_path / "fixed", fixed_source), contest, off)
    private, _ = score_in_sandbox(estimator_file(tmp_path / "tmp", SCRATCH_ESTIMATOR.format(folder=IN_TMP,
                                                                                           token=token)), contest)
    assert estimator.started.confinement["private_tmp"] == ""
    keys = ("flops_used", "final_layer_mse", "all_layers_mse", "per_layer_mse", "adjusted_final_layer_score")
    for a, b in zip(fixed, private, strict=True):
        assert verdict_of(a) == verdict_of(b) == ("ok", ""), (a.get("error"), b.get("error"))
        assert {k: a[k] for k in keys} == {k: b[k] for k in keys}
    assert not any(p.exists() for p in scratch_paths(token))


UNPRIVILEGED_CHECK = """
import json, os, sys
sys.path.insert(0, {repo!r})
from pathlib import Path
from whestboard.sandbox._confine import PrivateTmp, RLimits, confine

work, inside, secret = (Path(arg) for arg in sys.argv[1:4])
report = confine(limits=RLimits(address_space_bytes=1 << 31, cpu_seconds=60), read_only=[], read_write=[work],
                 sandbox_uid=None, private_tmp=PrivateTmp(size_bytes=4 << 20))
inside.write_text("written inside")
try:
    with open("/tmp/big", "wb") as out:
        out.write(b"x" * (5 << 20))
    full = "no"
except OSError as exc:
    full = exc.strerror
(work / "proof").write_text(inside.read_text())
print(json.dumps({{"report": report.as_dict(), "uid": os.getuid(), "listing": sorted(os.listdir("/tmp")),
                  "full": full, "sees_host_file": secret.exists()}}))
"""
NOBODY = {"user": 65534, "group": 65534, "extra_groups": []}


def unprivileged_python() -> str | None:
    """An interpreter that an unprivileged user can run and import this module's core with."""
    probe = f"import sys; sys.path.insert(0, {str(REPO)!r}); import whestboard.sandbox._confine"
    candidates = (sys.executable, shutil.which("python3"), f"/usr/bin/python{sys.version_info[0]}.{sys.version_info[1]}")
    for candidate in candidates:
        if candidate and Path(candidate).exists():
            real = str(Path(candidate).resolve())
            try:
                if subprocess.run([real, "-I", "-c", probe], capture_output=True, cwd="/", **NOBODY).returncode == 0:
                    return real
            except OSError:  # not even executable for that user
                continue
    return None


@pytest.mark.skipif(os.geteuid() != 0, reason="switches to an unprivileged user to run the check")
def test_an_unprivileged_worker_gets_its_private_tmp_from_a_user_namespace(token):
    """The path an app run by an ordinary user (as in the container) takes: no root, a user namespace."""
    python = unprivileged_python()
    if python is None:
        pytest.skip("no interpreter that an unprivileged user may run")
    work = Path(f"/tmp/whestboard-unprivileged-{token}")
    inside = Path(f"/tmp/whestboard-inside-{token}")
    host_file = Path(f"/tmp/whestboard-host-only-{token}")
    work.mkdir()
    work.chmod(0o777)
    host_file.write_text("host only")
    try:
        done = subprocess.run([python, "-I", "-c", UNPRIVILEGED_CHECK.format(repo=str(REPO)), str(work), str(inside),
                               str(host_file)], capture_output=True, text=True, timeout=60, cwd="/", **NOBODY)
        assert done.returncode == 0, done.stderr[-2000:]
        result = json.loads(done.stdout)
        proof = (work / "proof").read_text()
        assert not inside.exists()
    finally:
        host_file.unlink(missing_ok=True)
        shutil.rmtree(work, ignore_errors=True)
    report = result["report"]
    if "unshare" in report["missing"].get("private_tmp", ""):
        pytest.skip(f"this kernel refuses unprivileged user namespaces: {report['missing']['private_tmp']}")
    assert result["uid"] == 65534 and report["identity"] == "uid 65534 (unprivileged)"
    assert report["private_tmp"] == "tmpfs 4 MiB (user namespace)" and report["missing"] == {}, report
    assert report["seccomp"] is True and report["landlock_abi"] == landlock_abi()
    assert result["listing"] == sorted(["big", inside.name, work.name])  # its own files, its working folder bound back
    assert result["full"] == "No space left on device" and not result["sees_host_file"]
    assert proof == "written inside"
