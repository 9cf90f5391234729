"""What a budget curve may claim is decided once (``scoring.curve_data``), from points whose MLPs all ran.

Real runs on a tiny baked dataset: covariance propagation below its own cost fails on every MLP (flopscope
stops it at B, the grader scores the zero prediction), far above sampling, and above its cost it is far below.
Before, a crossing was interpolated between the two; a failed point now carries no claim.
"""

from __future__ import annotations

import shutil

import pytest
from whestbench.budget import mc_flops_per_sample

from tests.conftest import state_built_once
from whestboard.data import bake, open_dataset, plan_from_args
from whestboard.rules import failures_sentence
from whestboard.scoring import (
    carries_claims,
    curve_data,
    curve_requests,
    fixed_cost,
    parse_mlp_selection,
    point_summary,
    resolve_estimator,
    run_curve,
    sampling_crossing,
    selection_text,
    stored_curve,
)

WIDTH, DEPTH = 32, 2
PER_SAMPLE = mc_flops_per_sample(WIDTH, DEPTH, dtype_aware_billing=True)
pytestmark = pytest.mark.usefixtures("private_state")


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    path = tmp_path_factory.mktemp("claims") / "ds"
    bake(path, plan_from_args(round_tag=None, width=WIDTH, depth=DEPTH, n_mlps=None, n_samples=8192,
                              seeds=[41, 42, 43, 44, 45, 46]), explicit_seeds=True, show_progress=False)
    return path


@pytest.fixture(scope="module")
def cov_curve(folder, tmp_path_factory):
    """Covariance propagation at two budgets below its cost and two above, scored once: (budgets, reports)."""
    def build():
        ds = open_dataset(folder)
        cost = run_curve(curve_requests(ds, "", resolve_estimator("cov"), "v2-phase2", [PER_SAMPLE * 10_000]))
        flops = cost.summaries()[0]["flops_used"]["mean"]
        budgets = [int(flops / 3), int(flops / 2), int(flops) + 1, int(flops * 3)]
        curve = run_curve(curve_requests(ds, "", resolve_estimator("cov"), "v2-phase2", budgets))
        return budgets, [p.outcome.report for p in curve.points]
    state, (budgets, reports) = state_built_once(tmp_path_factory, "claims-state", build)
    return budgets, reports, state


def test_a_point_with_a_failed_mlp_says_what_failed_and_carries_no_claim(cov_curve):
    budgets, reports, _ = cov_curve
    summaries = [point_summary(r) for r in reports]
    assert [s["failed"] for s in summaries] == [True, True, False, False]
    assert [carries_claims(s) for s in summaries] == [False, False, True, True]
    for report, summary in zip(reports, summaries, strict=True):
        per_mlp = report["results"]["per_mlp"]
        assert summary["n_failed_mlps"] == sum(e["failed"] for e in per_mlp)
        if summary["failed"]:  # every MLP ran out of FLOPs: the grader's flag, named in words
            assert all(e["budget_exhausted"] for e in per_mlp)
            assert summary["failures"] == failures_sentence(["budget"] * len(per_mlp)) == "6 of 6 MLPs failed: FLOP budget"
        else:
            assert summary["failures"] is None


def test_no_crossing_is_interpolated_from_a_failed_point(cov_curve):
    """The failed points sit far above sampling and the others far below: only a failed point makes the
    sign change, so no crossing; with the failed points marked as if they had run, the old answer comes back."""
    _, reports, _ = cov_curve
    summaries = [point_summary(r) for r in reports]
    assert sampling_crossing(summaries) is None
    as_if_ran = [{**s, "failed": False, "n_failed_mlps": 0} for s in summaries]
    crossing = sampling_crossing(as_if_ran)
    assert crossing is not None and crossing["better_after"]  # what the page used to claim
    data = curve_data("cov", list(reversed(summaries)))
    assert [p["budget"] for p in data["points"]] == sorted(s["budget"] for s in summaries)
    assert data["crossing"] is None and data["claims_from"] == 2
    assert data["failed_points"] == [s["budget"] for s in summaries[:2]]
    assert data["failures"] == {s["budget"]: "6 of 6 MLPs failed: FLOP budget" for s in summaries[:2]}
    assert data["fixed_cost"] and fixed_cost(summaries)  # the two that ran spent the same; failed ones were cut short
    assert not fixed_cost(as_if_ran)


def test_stored_curve_reads_the_run_records_and_counts_what_is_missing(folder, cov_curve, private_state):
    budgets, _, state = cov_curve
    shutil.copytree(state, private_state, dirs_exist_ok=True)
    ds = open_dataset(folder)
    requests = curve_requests(ds, "", resolve_estimator("cov"), "v2-phase2", [*budgets, budgets[-1] * 2])
    curve, missing = stored_curve("cov", requests)
    assert missing == 1 and [p["budget"] for p in curve["points"]] == budgets
    assert curve["failed_points"] == budgets[:2] and curve["crossing"] is None


@pytest.mark.parametrize("indices", [[0, 1, 2, 3, 7], [5], [1, 3, 4, 5, 9, 10], list(range(12))])
def test_a_selection_written_for_an_address_reads_back_as_the_same_mlps(indices):
    text = selection_text(indices)
    assert parse_mlp_selection(text, list(range(12))) == indices
    assert selection_text([0, 1, 2, 3, 7]) == "0:4,7"
