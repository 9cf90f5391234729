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

from whestboard.rules.versions import blas_environment, blas_setup, describe_blas
from whestboard.sandbox.host import _sandbox_env


def test_the_sandbox_environment_keeps_the_blas_kernel_variables(monkeypatch, tmp_path):
    monkeypatch.setenv("OPENBLAS_CORETYPE", "Prescott")
    monkeypatch.setenv("OPENBLAS_L2_SIZE", "262144")
    monkeypatch.setenv("WHESTBOARD_ORGANIZER_TOKEN", "secret")
    env = _sandbox_env(tmp_path)
    assert env["OPENBLAS_CORETYPE"] == "Prescott" and env["OPENBLAS_L2_SIZE"] == "262144"
    assert "WHESTBOARD_ORGANIZER_TOKEN" not in env and env["OPENBLAS_NUM_THREADS"] == "1"
    monkeypatch.delenv("OPENBLAS_CORETYPE")
    assert "OPENBLAS_CORETYPE" not in _sandbox_env(tmp_path)


def test_the_record_names_the_library_kernel_and_threads_threadpoolctl_sees():
    record = blas_environment({"OPENBLAS_CORETYPE": "Haswell"})
    blas = [i for i in threadpool_info() if i["user_api"] == "blas"]
    assert [(b["library"], b["version"], b["kernel"], b["threads"]) for b in record["blas"]] == \
        [(i["internal_api"], i["version"], i.get("architecture"), i["num_threads"]) for i in blas]
    assert record["kernel_env"] == {"OPENBLAS_CORETYPE": "Haswell"}
    assert "kernel" in describe_blas(record) and "OPENBLAS_CORETYPE=Haswell" in describe_blas(record)


def test_a_forced_kernel_is_what_the_record_says_in_a_fresh_process(tmp_path):
    """The kernel named is the one OpenBLAS runs: forcing another one changes the record, and the set-up key."""
    code = "import json, numpy; from whestboard.rules.versions import blas_environment; " \
           "print(json.dumps(blas_environment()))"
    env = {**_sandbox_env(tmp_path), "OPENBLAS_CORETYPE": "Prescott", "PYTHONPATH": "."}
    forced = json.loads(subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                                       check=True).stdout)
    assert forced["kernel_env"] == {"OPENBLAS_CORETYPE": "Prescott"}
    if forced["blas"] and forced["blas"][0]["library"] == "openblas":
        # OpenBLAS names the Prescott kernel its own way (Katmai); what matters is that it is not the default one
        assert forced["blas"][0]["kernel"] != blas_environment({})["blas"][0]["kernel"]
        assert forced["blas"][0]["threads"] == 1  # the sandbox's one thread
    assert blas_setup(forced) != blas_setup(blas_environment({}))
