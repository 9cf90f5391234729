"""FLOPs of an MLP stopped by the wall-time cap are billed as the grader's isolated runner bills them.

``whest run --runner server`` (the same ``SubprocessRunner`` as ``--runner subprocess``, the isolated
worker the grader's evaluation runs) reports, for a predict that crossed the wall cap, the FLOPs its own
``BudgetContext`` had counted when flopscope raised ``TimeExhaustedError``; ``--runner local`` reports 0
(it has no per-predict statistics). The sandbox matches the server runner. The estimator here does a
fixed amount of metered work, sleeps past the cap (unmetered) and calls one more metered operation, so
the count at the cap does not depend on the machine's speed and both tools must agree exactly.
"""

from __future__ import annotations

import json
import os
import textwrap
import warnings
from pathlib import Path

import pytest
from whestbench.scoring import ContestData, ContestSpec, evaluate_estimator
from whestbench.sdk import SetupContext

from tests.upstream import make_official, whestbench_mlps
from whestboard.sandbox import _host
from whestboard.sandbox._host import SandboxedEstimator, SandboxLimits, SubmissionFiles

WALL_S, BUDGET = 1.5, 10**9
pytestmark = pytest.mark.slow
PAST_THE_CAP = f"""
    import time

    import flopscope.numpy as fnp
    from whestbench import BaseEstimator


    class Estimator(BaseEstimator):
        def predict(self, mlp, budget):
            x = fnp.ones(mlp.width, dtype=fnp.float32)
            for weights in mlp.weights:
                x = fnp.maximum(weights @ x, 0.0)
            time.sleep({WALL_S + 1.0})
            return fnp.stack([x] * mlp.depth) * 1.0  # the first metered call after the cap raises
    """


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("past-the-cap")
    (root / "estimator.py").write_text(textwrap.dedent(PAST_THE_CAP).lstrip())
    return root


@pytest.fixture(scope="module")
def official(tmp_path_factory):
    return make_official(tmp_path_factory.mktemp("cap") / "ds", width=16, depth=2, n_samples=500, seeds=[3])


def start_whest_run(preloaded, official, folder, runner: str, hf: Path):
    """``whest run`` started (its own process, forked: tests/preloaded.py), not waited for: the runs each sleep
    past the cap, so they sleep side by side."""
    return preloaded.start("whest", "run", "--estimator", str(folder / "estimator.py"), "--dataset", str(official),
                           "--json", "--runner", runner, "--flop-budget", str(BUDGET), "--wall-time-limit",
                           str(WALL_S), "--no-residual-wall-time-limit",
                           "--setup-timeout", "60",  # its worker's spawn counts as setup: a busy machine is slow
                           env=dict(os.environ, HF_HOME=str(hf), HF_DATASETS_OFFLINE="1"))


def whest_result(proc) -> dict:
    out, err = proc.communicate(timeout=300)
    assert out.strip(), err[-2000:]
    report = json.loads(out)
    assert "results" in report, (report, err[-2000:])
    return report["results"]["per_mlp"][0]


def ours(official, folder, hf: Path) -> dict:
    reference = whestbench_mlps(official, hf)
    spec = ContestSpec(width=16, depth=2, n_mlps=1, flop_budget=BUDGET, ground_truth_samples=500,
                       wall_time_limit_s=WALL_S, residual_wall_time_limit_s=None, lambda_flops_per_second=0.0)
    data = ContestData(spec=spec, mlps=[reference[0]["mlp"]], all_layer_targets=[reference[0]["all_layer_means"]],
                       final_targets=[reference[0]["all_layer_means"][-1]], avg_variances=[reference[0]["avg_variance"]])
    limits = SandboxLimits(memory_mb=1024, wall_time_limit_s=WALL_S, residual_wall_time_limit_s=None, grace_s=5.0,
                           setup_timeout_s=60.0)
    estimator = SandboxedEstimator(SubmissionFiles(root=folder), SetupContext(width=16, depth=2, flop_budget=BUDGET,
                                                                              api_version="1.0"), limits)
    try:
        estimator.start()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return evaluate_estimator(estimator, data)["per_mlp"][0]
    finally:
        estimator.close()
        _host.prewarm()


def test_an_mlp_stopped_by_the_wall_cap_bills_what_the_server_runner_bills(official, folder, tmp_path, preloaded):
    running = {runner: start_whest_run(preloaded, official, folder, runner, tmp_path / f"hf-{runner}")
               for runner in ("server", "local")}
    try:
        mine = ours(official, folder, tmp_path / "hf-ours")
    except BaseException:
        for proc in running.values():
            proc.kill()
            proc.wait()
        raise
    server, local = whest_result(running["server"]), whest_result(running["local"])
    assert server["time_exhausted"] and local["time_exhausted"] and mine["time_exhausted"]
    assert local["flops_used"] == 0  # the in-process runner keeps no per-predict count
    assert server["flops_used"] > 0
    assert mine["flops_used"] == server["flops_used"]
    assert mine["final_layer_mse"] == server["final_layer_mse"]  # scored as the zero prediction either way
