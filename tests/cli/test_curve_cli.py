"""``python -m whestboard curve``: every point is ``score --budget B``, Monte Carlo falls as 1/N, resumable.

Oracles: the ``score`` command's own ``--json`` at each budget (served from the same run records, and
scored afresh), and ``whestbench.scoring.evaluate_estimator`` run directly on whestbench's own loading of
the dataset. The rulebook is v2-phase2's (gated: C = F), so FLOPs, MSEs and scores of a deterministic
estimator do not depend on how busy the machine is.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from tests.upstream import make_official, whestbench_mlps
from whestboard.cli import main

pytestmark = pytest.mark.usefixtures("private_state")
ROUND = "v2-phase2"
LADDER = "1e5:1e7:3"  # w=16, d=3: 2,000 FLOPs per sample, so 0.5B buys 25 to 2,500 samples


@pytest.fixture(scope="module")
def official(tmp_path_factory):
    return make_official(tmp_path_factory.mktemp("curve") / "ds", width=16, depth=3, n_samples=20000,
                         seeds=[11, 12, 13, 14])


@pytest.fixture(scope="module")
def wide(tmp_path_factory):
    """64 neurons a layer and 8 MLPs: enough neurons and MLPs that a mean MSE's interval means something.

    50,000 reference samples: the reference's own error (``noise_floor``, var/50,000) is a sixth of the MSE at
    the sweep's top point (10,000 samples) and the expected MSE counts it; the MSE still falls about 95-fold
    over the sweep (100,000 samples: about 100-fold, at twice the cost of building the dataset).
    """
    return make_official(tmp_path_factory.mktemp("curve-wide") / "ds", width=64, depth=3, n_samples=50000,
                         seeds=list(range(21, 29)))


def cli_json(capsys, *args: str, status: int = 0) -> dict:
    capsys.readouterr()
    assert main([*args, "--json"]) == status
    return json.loads(capsys.readouterr().out)


def curve(capsys, official, estimator: str, budgets: str = LADDER, mlps: str = "") -> dict:
    return cli_json(capsys, "curve", "--dataset", str(official), "--estimator", estimator, "--budgets", budgets,
                    "--round", ROUND, "--mlps", mlps)


def score(capsys, official, estimator: str, budget: int, *extra: str) -> dict:
    return cli_json(capsys, "score", "--dataset", str(official), "--estimator", estimator, "--budget", str(budget),
                    "--round", ROUND, *extra)


DETERMINISTIC = ("mlp_index", "flops_used", "final_layer_mse", "all_layers_mse", "per_layer_mse",
                 "adjusted_final_layer_score", "effective_compute", "score_multiplier", "failed")


FILE_ESTIMATOR = """
from whestbench.estimators import MeanPropagationEstimator


class Estimator(MeanPropagationEstimator):
    pass
"""


@pytest.mark.parametrize("estimator", ["mc:0.5B", "cov", "file"])
def test_each_point_is_what_score_prints_at_its_budget(capsys, official, estimator, tmp_path):
    if estimator == "file":  # a participant's file: every point runs in the sandbox, as score runs it
        path = tmp_path / "submission" / "estimator.py"  # alone in its folder (the state folder is in tmp_path)
        path.parent.mkdir()
        path.write_text(FILE_ESTIMATOR)
        estimator = str(path)
    swept = curve(capsys, official, estimator)
    assert [p["budget"] for p in swept["points"]] == [100_000, 1_000_000, 10_000_000]
    for point in swept["points"]:
        stored = score(capsys, official, estimator, point["budget"])
        assert stored["whestboard"]["cached"] and not point["report"]["whestboard"]["cached"]
        mine = json.loads(json.dumps(point["report"]))
        mine["whestboard"]["cached"] = True
        differing = sorted(k for k in set(mine["whestboard"]) | set(stored["whestboard"])
                           if mine["whestboard"].get(k) != stored["whestboard"].get(k))
        assert not differing, [(k, mine["whestboard"].get(k), stored["whestboard"].get(k)) for k in differing]
        assert mine == stored  # the same record, field for field
        fresh = score(capsys, official, estimator, point["budget"], "--no-cache")
        assert not fresh["whestboard"]["cached"]
        for ours, theirs in zip(point["report"]["results"]["per_mlp"], fresh["results"]["per_mlp"], strict=True):
            assert {k: ours[k] for k in DETERMINISTIC} == {k: theirs[k] for k in DETERMINISTIC}
        assert point["report"]["run_config"]["flop_budget"] == point["budget"]


def test_points_equal_evaluate_estimator_run_directly(capsys, official, tmp_path):
    """whestbench's own loader and evaluate_estimator, at each budget, with whestbench's estimator."""
    from whestbench.estimators import CovariancePropagationEstimator
    from whestbench.scoring import ContestData, evaluate_estimator

    from whestboard.scoring import rulebook_for

    swept = curve(capsys, official, "cov")
    rows = whestbench_mlps(official, tmp_path / "hf")
    import flopscope.numpy as fnp

    for point in swept["points"]:
        spec = rulebook_for(ROUND, point["budget"]).contest_spec(width=16, depth=3, n_mlps=len(rows), n_samples=20000)
        data = ContestData(spec=spec, mlps=[r["mlp"] for r in rows],
                           all_layer_targets=[fnp.asarray(r["all_layer_means"]) for r in rows],
                           final_targets=[fnp.asarray(r["all_layer_means"][-1]) for r in rows],
                           avg_variances=[r["avg_variance"] for r in rows])
        theirs = evaluate_estimator(CovariancePropagationEstimator(), data)
        ours = point["report"]["results"]
        for a, b in zip(ours["per_mlp"], theirs["per_mlp"], strict=True):
            assert a["flops_used"] == b["flops_used"]
            assert a["final_layer_mse"] == pytest.approx(b["final_layer_mse"], rel=1e-6)
            assert a["adjusted_final_layer_score"] == pytest.approx(b["adjusted_final_layer_score"], rel=1e-6)
        assert ours["adjusted_final_layer_score"] == pytest.approx(theirs["adjusted_final_layer_score"], rel=1e-6)


def test_monte_carlo_error_falls_as_one_over_n_within_its_interval(capsys, wide):
    from whestboard.scoring import resolve_estimator

    sampler = resolve_estimator("mc:1B").factory()
    swept = curve(capsys, wide, "mc:1B", budgets="2.6e6:2.6e8:3")  # about 100, 1,000 and 10,000 samples
    summaries = [p["summary"] for p in swept["points"]]
    assert not swept["fixed_cost"]
    mses = [s["final_layer_mse"]["mean"] for s in summaries]
    assert mses == sorted(mses, reverse=True) and mses[0] > 10 * mses[-1]  # 100x the budget: ~100x less error
    for point, s in zip(swept["points"], summaries, strict=True):
        per_mlp = point["report"]["results"]["per_mlp"]
        assert s["flops_used"]["mean"] <= point["budget"] and not s["n_failed_mlps"]
        # expectation of N-sample MC against an N_ref reference: var/N + var/N_ref, MLP by MLP, N as it sampled
        n = sampler.samples_for(64, 3, point["budget"])
        expected = np.mean([e["avg_variance"] / n + e["noise_floor"] for e in per_mlp])
        assert s["final_layer_mse"]["low"] <= expected <= s["final_layer_mse"]["high"], (s, expected)
        assert s["mse_over_variance"]["mean"] == pytest.approx(
            np.mean([e["final_layer_mse"] / e["avg_variance"] for e in per_mlp]))


def test_a_fixed_estimator_spends_identical_flops_at_every_budget(capsys, official):
    swept = curve(capsys, official, "mean", budgets="1e5,1e6,1e7,1e8")
    assert swept["fixed_cost"]
    flops = {tuple(e["flops_used"] for e in p["report"]["results"]["per_mlp"]) for p in swept["points"]}
    assert len(flops) == 1
    mses = {p["summary"]["final_layer_mse"]["mean"] for p in swept["points"]}
    assert len(mses) == 1  # the same predictions; only the multiplier moves with B
    scores = [p["summary"]["score"]["mean"] for p in swept["points"]]
    assert scores == sorted(scores, reverse=True)


def test_resume_scores_only_the_missing_points(capsys, official):
    first = curve(capsys, official, "mc:0.5B", budgets="3e5,3e6", mlps="0:2")
    assert first["served_from_run_records"] == []
    again = curve(capsys, official, "mc:0.5B", budgets="3e5,1e6,3e6", mlps="0:2")
    assert again["served_from_run_records"] == [300_000, 3_000_000]
    cached = {p["budget"]: p["report"]["whestboard"]["cached"] for p in again["points"]}
    assert cached == {300_000: True, 1_000_000: False, 3_000_000: True}
    assert [p["report"]["whestboard"]["run_id"] for p in again["points"] if p["budget"] != 1_000_000] == \
        [p["report"]["whestboard"]["run_id"] for p in first["points"]]


def test_an_interrupted_sweep_keeps_its_finished_points(official):
    from whestboard.data import open_dataset
    from whestboard.scoring import curve_requests, resolve_estimator, run_curve, stored_budgets

    ds = open_dataset(official)
    requests = curve_requests(ds, "0:2", resolve_estimator("mc:0.5B"), ROUND, [200_000, 2_000_000, 5_000_000])
    seen: list[int] = []
    stopped = run_curve(requests, on_point=lambda done, total, p: seen.append(p.budget),
                        should_cancel=lambda: len(seen) >= 1)
    assert stopped.cancelled and [p.budget for p in stopped.points] == [200_000]
    assert stored_budgets(requests) == [200_000]
    resumed = run_curve(requests)
    assert resumed.scored_now == [2_000_000, 5_000_000] and len(resumed.points) == 3


def test_budget_ladders_are_read_or_refused_with_a_sentence(capsys, official):
    from whestboard.scoring import RunError, parse_budget_ladder

    b = 2**41
    ladder = parse_budget_ladder("0.001B:1B:4", b)
    assert ladder[0] == round(0.001 * b) and ladder[-1] == b
    steps = [hi / lo for lo, hi in zip(ladder, ladder[1:], strict=False)]
    assert steps == pytest.approx([10.0] * 3, rel=1e-9)  # evenly spaced in log; whole FLOPs, so not exactly 10
    assert parse_budget_ladder("1B, 0.1B,1B", b) == [round(0.1 * b), b]
    for bad, says in [("", "no budgets"), ("1:2", "LO:HI:N"), ("1e9:1e10:x", "whole number"),
                      ("1e9:1e10:99", "1 to 32"), ("5000B", "above the most")]:
        with pytest.raises(RunError, match=says):
            parse_budget_ladder(bad, b)
    error = cli_json(capsys, "curve", "--dataset", str(official), "--estimator", "mean", "--budgets", "1:2",
                     status=2)
    assert error["ok"] is False and "LO:HI:N" in error["error"]["message"]
    assert math.isfinite(b)
