"""How close each MLP came to each cap: one function, fed by every vocabulary of telemetry alike."""

from __future__ import annotations

import json
import math

import pytest
from whestbench.budget import ROUNDS, effective_compute
from whestbench.estimators import MeanPropagationEstimator
from whestbench.scoring import ContestSpec, evaluate_estimator, make_contest

from tests.leaderboard import aicrowd_records as records
from whestboard.rules import (
    CLOSE_SHARE,
    EDGE_SHARE,
    SETUP_LIMIT_S,
    Caps,
    MLPTelemetry,
    cap_margins,
    get_round,
    margins_from_dict,
    telemetry_of,
)

PHASE2, PHASE1 = get_round("v2-phase2"), get_round("v1-phase1")


def test_the_setup_limit_is_whestbenchs_own():
    assert SETUP_LIMIT_S == ContestSpec.__dataclass_fields__["setup_timeout_s"].default == 5.0


def test_caps_come_from_a_round_a_rulebook_or_a_stored_rulebook():
    assert Caps.of(PHASE2) == Caps(PHASE2.budget, 120.0, 0.4, 0.0)
    assert Caps.of(PHASE1) == Caps(PHASE1.budget, 60.0, None, 1e11) and Caps.of(PHASE1).residual_priced
    stored = {"flop_budget": 1e9, "wall_time_limit_s": 120.0, "residual_wall_time_limit_s": 0.4,
              "lambda_flops_per_second": 0.0}
    assert Caps.of(stored) == Caps(1e9, 120.0, 0.4, 0.0)


def test_a_whestbench_entry_is_read_under_its_own_names():
    """The entry ``evaluate_estimator`` itself writes, for a real (small) MLP."""
    spec = ContestSpec(width=8, depth=2, n_mlps=1, flop_budget=10**7, ground_truth_samples=200, seed=3)
    entry = evaluate_estimator(MeanPropagationEstimator(), make_contest(spec))["per_mlp"][0]
    telemetry = telemetry_of(entry)
    assert (telemetry.predict_wall_s, telemetry.residual_wall_s, telemetry.kernel_wall_s,
            telemetry.overhead_wall_s) == (entry["wall_time_s"], entry["residual_wall_time_s"],
                                           entry["flopscope_backend_time_s"], entry["flopscope_overhead_time_s"])
    assert (telemetry.flops_used, telemetry.effective_compute) == (entry["flops_used"], entry["effective_compute"])
    assert telemetry.failure is None and telemetry.setup_wall_s is None and telemetry.label == "MLP 0"


def test_the_graders_record_is_read_under_its_new_and_its_older_names():
    new = records.phase2_record()["results"]["per_mlp"][0]
    old = records.phase1_wrapped_record()["data"]["submission"]["evaluation"]["results"]["per_mlp"][0]
    t_new, t_old = telemetry_of(new), telemetry_of(old)
    tel = new["telemetry"]
    assert (t_new.predict_wall_s, t_new.residual_wall_s, t_new.setup_wall_s, t_new.kernel_wall_s,
            t_new.overhead_wall_s, t_new.comms_wall_s) == (
        tel["participant_predict_wall_s"], tel["residual_wall_time_s"], tel["participant_setup_wall_s"],
        tel["flopscope_server_kernel_wall_s"], tel["flopscope_server_overhead_wall_s"],
        tel["flopscope_server_comms_wall_s"])
    tel = old["telemetry"]
    assert (t_old.predict_wall_s, t_old.setup_wall_s, t_old.kernel_wall_s, t_old.comms_wall_s) == (
        tel["wall_time_s"], tel["setup_wall_s"], tel["flopscope_backend_time_s"], None)


def test_a_failed_entry_is_judged_by_the_graders_flags():
    record = records.failures_record()
    failed = [telemetry_of(e) for e in record["results"]["per_mlp"] if e["state"] == "failed"]
    assert sorted(t.failure for t in failed) == ["residual", "time"]
    assert telemetry_of({"mlp_index": 4, "failed": True, "failure": None}).failure == "unrecorded"
    assert telemetry_of({"mlp_index": 4, "failed": True, "failure": "budget"}).failure == "budget"


def _mlp(i: int, **values) -> MLPTelemetry:
    return MLPTelemetry(label=f"MLP {i}", mlp_index=i, **values)


def test_a_pass_at_75_of_120_s_is_close_and_at_033_of_04_s_at_the_edge():
    mlps = [_mlp(0, predict_wall_s=40.0, residual_wall_s=0.10, flops_used=2e11),
            _mlp(1, predict_wall_s=75.0, residual_wall_s=0.33, flops_used=5.5e11)]
    margins = {m.key: m for m in cap_margins(mlps, Caps.of(PHASE2)).margins}
    assert set(margins) == {"wall", "residual", "flops"}  # no setup time recorded: that cap is left out, not 0
    wall, residual = margins["wall"], margins["residual"]
    assert (wall.worst, wall.limit, wall.margin, wall.worst_label) == (75.0, 120.0, 45.0, "MLP 1")
    assert wall.worst_share == 0.625 and CLOSE_SHARE <= 0.625 < EDGE_SHARE and wall.state == "close"
    assert residual.worst == 0.33 and residual.margin == pytest.approx(0.07) and residual.state == "edge"
    assert margins["flops"].state == "clear" and margins["flops"].margin == PHASE2.budget - 5.5e11
    assert wall.n_at_least(EDGE_SHARE) == 0 and residual.n_at_least(EDGE_SHARE) == 1


def test_an_mlp_past_a_cap_is_over_and_the_closest_survivor_is_named():
    mlps = [_mlp(0, predict_wall_s=121.84, failure="time"), _mlp(1, predict_wall_s=118.2), _mlp(2, predict_wall_s=60.0)]
    [wall] = cap_margins(mlps, Caps.of(PHASE2)).margins
    assert wall.state == "over" and wall.n_over == 1 and wall.worst_label == "MLP 0"
    assert wall.margin == pytest.approx(-1.84) and wall.closest_passing == ("MLP 1", 118.2)
    # a budget failure stops at B exactly: failed on the FLOPs cap though not past it
    [flops] = cap_margins([_mlp(0, flops_used=float(PHASE2.budget), failure="budget")], Caps.of(PHASE2)).margins
    assert flops.state == "over" and flops.margin == 0 and flops.closest_passing is None


def test_priced_residual_time_is_held_against_b_through_c():
    """Phase 1: C = F + 1e11 R against B; the margin also reads as residual seconds left."""
    f, r = 1.2e11, 0.5
    c = effective_compute(f, r, 1e11)
    margins = {m.key: m for m in cap_margins([_mlp(0, flops_used=f, residual_wall_s=r)], Caps.of(PHASE1)).margins}
    charged = margins["residual"]
    assert charged.title == "charged compute C = F + 1e11 R" and charged.worst == c == 1.7e11
    assert charged.margin_seconds == pytest.approx((PHASE1.budget - c) / 1e11) == pytest.approx(1.02)
    assert margins["flops"].worst == f and margins["flops"].margin_seconds is None


def test_setup_runs_timed_apart_from_the_mlps_and_the_round_trip():
    mlps = [_mlp(0, predict_wall_s=5.0, kernel_wall_s=4.0, overhead_wall_s=0.5, residual_wall_s=0.2)]
    margins = cap_margins(mlps, Caps.of(PHASE2), setups=[("setup()", 4.2), ("unmeasured", None)])
    setup = next(m for m in margins.margins if m.key == "setup")
    assert (setup.labels, setup.used, setup.limit, setup.state) == (("setup()",), (4.2,), 5.0, "edge")
    again = margins_from_dict(json.loads(json.dumps(margins.as_dict())))
    assert again == margins


def test_the_time_split_adds_up_to_the_wall_time():
    record = records.phase2_record()
    mlps = [telemetry_of(e) for e in record["results"]["per_mlp"]]
    split = cap_margins(mlps, Caps.of(PHASE2)).split
    assert split is not None and len(split.labels) == 100
    for m, parts in zip(mlps, zip(*(getattr(split, p) for p in split.PARTS), strict=True), strict=True):
        assert math.fsum(parts) == pytest.approx(m.predict_wall_s, rel=1e-12)
        assert parts[0] == pytest.approx(m.residual_wall_s, rel=1e-12)  # the participant's part: its residual time
        assert parts[-1] == 0.0  # schema 4 attributes all of it
    assert sum(split.share(p) for p in split.PARTS) == pytest.approx(1.0)
    assert 0.8 < split.share("kernel") < 0.95 and split.mean("comms") == pytest.approx(0.65, abs=0.05)


def test_older_names_leave_flopscopes_overhead_unattributed_not_called_participant_code():
    record = records.phase1_wrapped_record()["data"]["submission"]["evaluation"]
    mlps = [telemetry_of(e) for e in record["results"]["per_mlp"]]
    split = cap_margins(mlps, Caps.of(PHASE1)).split
    for m, participant, other in zip(mlps, split.participant, split.other, strict=True):
        assert participant == m.residual_wall_s and other == pytest.approx(
            m.predict_wall_s - m.kernel_wall_s - m.residual_wall_s, rel=1e-12) and other > 1.0
    assert split.overhead == split.comms == (0.0,) * 100


def test_an_empty_telemetry_gives_no_margin():
    assert cap_margins([_mlp(0)], Caps.of(ROUNDS["v2-phase2"])).empty
