"""``python -m whestboard score --json`` can be diffed against ``whest run --json``, field by field."""

from __future__ import annotations

import json
import os
import textwrap
from pathlib import Path

import pytest

from tests.upstream import assert_same_per_mlp, make_official, untimed
from whestboard.cli import main

BUDGET = 5_000_000
pytestmark = pytest.mark.usefixtures("private_state")

# Covariance propagation that fails on its second MLP: both paths must report the same error fields.
ESTIMATOR = """
from whestbench.estimators import CovariancePropagationEstimator

class Estimator(CovariancePropagationEstimator):
    calls = 0

    def predict(self, mlp, budget):
        Estimator.calls += 1
        if Estimator.calls == 2:
            raise ValueError("second MLP refused on purpose")
        return super().predict(mlp, budget)
"""


@pytest.fixture(scope="module")
def official(tmp_path_factory):
    return make_official(tmp_path_factory.mktemp("cli") / "ds", width=16, depth=3, n_samples=2000,
                         seeds=[5, 6, 7])


@pytest.fixture(scope="module")
def estimator_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("est") / "estimator.py"
    path.write_text(textwrap.dedent(ESTIMATOR))
    return path


@pytest.fixture(scope="module")
def whest_report(official, estimator_file, preloaded, tmp_path_factory) -> dict:
    """What whestbench's own CLI reports for the same file and dataset (a process of its own, forked:
    tests/preloaded.py)."""
    env = dict(os.environ, HF_HOME=str(tmp_path_factory.mktemp("hf")), HF_DATASETS_OFFLINE="1")
    run = preloaded.start("whest", "run", "--estimator", str(estimator_file), "--dataset", str(official), "--json",
                          "--runner", "local", "--flop-budget", str(BUDGET), env=env)
    stdout, stderr = run.communicate(timeout=300)
    assert run.returncode == 1 and "1 of 3 MLP(s) raised during predict" in stderr, stderr[-2000:]
    return json.loads(stdout)


def score_json(capsys, *args: str, status: int = 0) -> dict:
    capsys.readouterr()
    assert main(["score", *args, "--json"]) == status
    return json.loads(capsys.readouterr().out)


def test_score_json_matches_whest_run_on_every_field_both_report(capsys, official, estimator_file, whest_report):
    ours = score_json(capsys, "--dataset", str(official), "--estimator", str(estimator_file), "--budget", str(BUDGET),
                      status=1)
    theirs = whest_report
    assert ours["schema_version"] == theirs["schema_version"] and ours["mode"] == theirs["mode"]
    assert ours["whestbench_version"] == theirs["whestbench_version"]
    for key in ("n_mlps", "width", "depth", "flop_budget", "wall_time_limit_s", "residual_wall_time_limit_s",
                "lambda_flops_per_second"):
        assert ours["run_config"][key] == theirs["run_config"][key], key

    mine, upstream = ours["results"], theirs["results"]
    assert len(mine["per_mlp"]) == len(upstream["per_mlp"]) == 3
    compared = assert_same_per_mlp(ours, theirs)
    assert compared > 40
    assert mine["per_mlp"][1]["error_code"] == "PREDICT_ERROR"

    for field, value in upstream.items():
        if field == "per_mlp":
            continue
        if field == "breakdowns":
            assert untimed(mine[field]["estimator"]) == untimed(value["estimator"])
        else:
            assert mine[field] == value, field

    extras = ours["whestboard"]
    assert extras["run_id"] and not extras["cached"]
    assert extras["noise"]["noise_floor"] > 0 and extras["mc_reference"]["mc_at_budget"] > 0
    assert "second MLP refused on purpose" in mine["per_mlp"][1]["failure_reason"]


def test_identical_score_is_served_from_the_store(capsys, official):
    args = ("--dataset", str(official), "--estimator", "mean", "--mlps", "0:2")
    first = score_json(capsys, *args)
    second = score_json(capsys, *args)
    assert second["whestboard"]["cached"] and second["whestboard"]["run_id"] == first["whestboard"]["run_id"]
    assert second["results"] == first["results"]
    third = score_json(capsys, *args, "--no-cache")
    assert not third["whestboard"]["cached"] and third["whestboard"]["run_id"] != first["whestboard"]["run_id"]


def test_round_and_budget_flags_restore_the_rulebook(capsys, official):
    report = score_json(capsys, "--dataset", str(official), "--estimator", "mc:0.5B", "--round", "v1-warmup",
                        "--budget", "1e6", "--mlps", "2")
    rb = report["whestboard"]["rulebook"]
    assert rb["round_tag"] == "v1-warmup" and rb["flop_budget"] == 10**6 and rb["custom_budget"]
    assert report["run_config"]["lambda_flops_per_second"] == 1e11
    assert report["run_config"]["residual_wall_time_limit_s"] is None
    assert rb["billing_note"] and "flopscope" in rb["billing_note"]
    assert [e["mlp_index"] for e in report["results"]["per_mlp"]] == [2]


def test_human_output_says_mc_at_b_as_the_lab_card_does(capsys, official):
    """``score``'s text and the lab's and upload's MC@B card read one sentence of the same report
    (``scoring.sampling_verdict``), so a reader moving between them sees one verdict."""
    from components.format import sci
    from whestboard.scoring import get_run, sampling_verdict

    report = score_json(capsys, "--dataset", str(official), "--estimator", "mean", "--round", "v1-warmup",
                        "--mlps", "0:2")
    mc = get_run(report["whestboard"]["run_id"])["mc_reference"]
    assert main(["score", "--dataset", str(official), "--estimator", "mean", "--round", "v1-warmup",
                 "--mlps", "0:2"]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("MC@B"))
    assert line == (f"MC@B {sci(mc['mc_at_budget'])} (score of spending B on Monte Carlo): "
                    f"{sampling_verdict(mc['score_vs_mc'])}")
    assert "than sampling" in line


def test_human_output_names_failures_and_the_noise_floor(capsys, official, tmp_path):
    path = tmp_path / "broken.py"
    path.write_text("from whestbench import BaseEstimator\nclass Estimator(BaseEstimator):\n"
                    "    def predict(self, mlp, budget):\n        raise KeyError('no weights')\n")
    capsys.readouterr()
    assert main(["score", "--dataset", str(official), "--estimator", str(path), "--mlps", "0"]) == 1
    out = capsys.readouterr()
    assert "predict raised PREDICT_ERROR" in out.out and "no weights" in out.out
    assert "noise floor" in out.out and "[1/1]" in out.err and "1 of 1 MLP(s) raised" in out.err


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--estimator", "magic"), "unknown estimator"),
        (("--estimator", "mean", "--mlps", "0:9"), "not in this dataset"),
        (("--estimator", "mean", "--budget", "much"), "cannot read budget"),
        (("--estimator", "mean", "--round", "v9"), "unknown round"),
        (("--estimator", "mc:0"), "at least 2"),
        (("--estimator", "/no/such/estimator.py"), "no such file: /no/such/estimator.py (looked for /no/such/estimator.py)"),
        (("--estimator", "/no/such/my_submission/"), "no such folder: /no/such/my_submission/ (looked for "),
        (("--estimator", "./my_submission"), "no such folder: ./my_submission (looked for "),
        (("--estimator", "mean", "--mlps", "0:100000000"),
         "MLPs 3..99999999 are not in this dataset (it has 3 MLPs: 0..2)"),
        (("--estimator", "mean", "--mlps", "-1"), "has a negative number"),
        (("--estimator", "mean", "--mlps", "0:3:0"), "a step must be 1 or more"),
        (("--estimator", "mean", "--budget", "2**99999999"), "budget per MLP '2**99999999' is more than 1e300 FLOPs"),
        (("--estimator", "mean", "--budget", "1e400"), "write at most 1000B"),
        (("--estimator", "mean", "--round", "v1-warmup", "--budget", "1001B"),
         "above the most a run accepts, 1000 x B = 6.8e+13 FLOPs"),
        (("--estimator", "mc:1e400"), "Monte Carlo samples '1e400' is more than 1e300 samples"),
        (("--estimator", "mc:1.5"), "not a whole number of samples"),
    ],
)
def test_user_mistakes_are_one_line_errors(capsys, official, args, message):
    capsys.readouterr()
    assert main(["score", "--dataset", str(official), *args]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
    assert err.count("\n") == 1  # one line


def test_the_readmes_missing_folder_is_no_such_folder_in_json_too(capsys, tmp_path, monkeypatch):
    """`score --estimator my_submission/` before the folder exists: "no such folder", never "unknown estimator"."""
    monkeypatch.chdir(tmp_path)
    assert main(["score", "--dataset", "v2-phase2", "--estimator", "my_submission/", "--json"]) == 2
    error = json.loads(capsys.readouterr().out)["error"]
    assert error["code"] == "INPUT_ERROR"
    assert error["message"].startswith(f"no such folder: my_submission/ (looked for {tmp_path / 'my_submission'}); "
                                       "give the folder that holds estimator.py")
    assert "unknown estimator" not in error["message"]


def test_unknown_dataset_key_lists_what_is_served(capsys):
    assert main(["score", "--dataset", "no-such-dataset", "--estimator", "mean"]) == 2
    assert "no dataset 'no-such-dataset'" in capsys.readouterr().err
