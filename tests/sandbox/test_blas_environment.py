"""The BLAS a result was computed with is recorded, and the sandbox keeps the variables that pick its kernel.

OpenBLAS chooses its kernel from ``OPENBLAS_CORETYPE`` (and sizes blocks by ``OPENBLAS_L2_SIZE``); a float32
estimator's MSE moves in its 5th digit with the kernel, so a worker that dropped them would leave the bits
``whest run`` computes in the same shell.
"""

from __future__ import annotations

import json
import subprocess
import sys

from threadpoolctl import threadpool_info

from whestboard.rules import blas_environment, blas_setup, describe_blas
from whestboard.sandbox._host import sandbox_env


def test_thesandbox_environment_keeps_the_blas_kernel_variables(monkeypatch, tmp_path):
    monkeypatch.setenv("OPENBLAS_CORETYPE", "Prescott")
    monkeypatch.setenv("OPENBLAS_L2_SIZE", "262144")
    monkeypatch.setenv("WHESTBOARD_ORGANIZER_TOKEN", "secret")
    env = sandbox_env(tmp_path)
    assert env["OPENBLAS_CORETYPE"] == "Prescott" and env["OPENBLAS_L2_SIZE"] == "262144"
    assert "WHESTBOARD_ORGANIZER_TOKEN" not in env and env["OPENBLAS_NUM_THREADS"] == "1"
    monkeypatch.delenv("OPENBLAS_CORETYPE")
    assert "OPENBLAS_CORETYPE" not in sandbox_env(tmp_path)


def test_the_record_names_the_library_kernel_and_threads_threadpoolctl_sees():
    record = blas_environment({"OPENBLAS_CORETYPE": "Haswell"})
    blas = [i for i in threadpool_info() if i["user_api"] == "blas"]
    assert [(b["library"], b["version"], b["kernel"], b["threads"]) for b in record["blas"]] == \
        [(i["internal_api"], i["version"], i.get("architecture"), i["num_threads"]) for i in blas]
    assert record["kernel_env"] == {"OPENBLAS_CORETYPE": "Haswell"}
    assert "kernel" in describe_blas(record) and "OPENBLAS_CORETYPE=Haswell" in describe_blas(record)


def test_a_forced_kernel_is_what_the_record_says_in_a_fresh_process(tmp_path):
    """The kernel named is the one OpenBLAS runs: forcing another one changes the record, and the set-up key."""
    code = "import json, numpy; from whestboard.rules import blas_environment; " \
           "print(json.dumps(blas_environment()))"
    env = {**sandbox_env(tmp_path), "OPENBLAS_CORETYPE": "Prescott", "PYTHONPATH": "."}
    forced = json.loads(subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                                       check=True).stdout)
    assert forced["kernel_env"] == {"OPENBLAS_CORETYPE": "Prescott"}
    if forced["blas"] and forced["blas"][0]["library"] == "openblas":
        # OpenBLAS names the Prescott kernel its own way (Katmai); what matters is that it is not the default one
        assert forced["blas"][0]["kernel"] != blas_environment({})["blas"][0]["kernel"]
        assert forced["blas"][0]["threads"] == 1  # the sandbox's one thread
    assert blas_setup(forced) != blas_setup(blas_environment({}))


THREADPOOL_ESTIMATOR = '''
import os

import threadpoolctl
from whestbench.estimators import MeanPropagationEstimator


class Estimator(MeanPropagationEstimator):
    def setup(self, context):
        blas = [i for i in threadpoolctl.threadpool_info() if i["user_api"] == "blas"]
        print("blas", [(i["internal_api"], i["num_threads"]) for i in blas])
        for other in ("/proc/1/status", f"/proc/{os.getppid()}/environ", "/proc/self/root/etc/hostname"):
            try:
                open(other).read(1)
                print("READ", other)
            except OSError:
                pass

    def predict(self, mlp, budget):
        with threadpoolctl.threadpool_limits(limits=1, user_api="blas"):
            return super().predict(mlp, budget)
'''


def test_threadpool_info_works_inside_the_sandbox_and_other_processes_stay_hidden(tmp_path):
    """Real estimators pin their threads with threadpoolctl; it reads the worker's own /proc/self/maps."""
    from whestboard.rules import get_round
    from whestboard.sandbox import _host
    from whestboard.sandbox._contract import check_contract
    from whestboard.sandbox._host import SandboxLimits, SubmissionFiles

    (tmp_path / "estimator.py").write_text(THREADPOOL_ESTIMATOR)
    try:
        report = check_contract(SubmissionFiles(root=tmp_path), get_round("v1-warmup"),
                                SandboxLimits(memory_mb=2048, grace_s=2.0), width=16, depth=2)
    finally:
        _host.prewarm()
    assert report.ok, report.steps
    expected = [(i["internal_api"], 1) for i in threadpool_info() if i["user_api"] == "blas"]
    assert f"blas {expected}" in report.output  # the sandbox's one BLAS thread
    assert "READ" not in report.output
