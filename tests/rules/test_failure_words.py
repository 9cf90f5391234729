"""One failure vocabulary in words: what failed in a run, said the same way by every figure and sentence."""

from __future__ import annotations

from whestboard.rules import (
    UNRECORDED,
    VERDICT_NAMES,
    VERDICTS,
    failure_kind,
    failures_sentence,
    get_round,
    load_caused,
)


def test_every_verdict_has_a_name_and_a_sentence_counts_them_in_the_vocabulary_order():
    assert set(VERDICTS) - {"ok"} <= set(VERDICT_NAMES) and UNRECORDED in VERDICT_NAMES
    assert failures_sentence([None, "residual", None, None, None, None, None, None]) == "1 of 8 MLPs failed: residual time"
    assert failures_sentence(["residual", "budget", "budget"], 4) == "3 of 4 MLPs failed: FLOP budget (2), residual time (1)"
    assert failures_sentence([None, None]) is None and failures_sentence(["crash"], 1) == "1 of 1 MLP failed: crash"


def test_a_kind_is_read_from_the_grader_flags_then_a_recorded_word_else_unrecorded():
    assert failure_kind({"failed": False}) is None
    assert failure_kind({"failed": True, "residual_wall_time_exhausted": True, "residual_wall_time_s": 0.5}) == "residual"
    assert failure_kind({"failed": True, "failure": "shape"}) == "shape"  # a submission's per-MLP row
    assert failure_kind({"failed": True, "failure": "no such word"}) == UNRECORDED
    assert failure_kind({"failed": True, "failure_reason": "over the residual wall-time cap"}) == UNRECORDED


def test_a_load_accident_needs_a_failure_of_a_time_rule_that_the_wait_explains():
    rnd = get_round("v2-phase2")

    class Limits:
        flop_budget, wall_time_limit_s, residual_wall_time_limit_s = rnd.budget, 120.0, 0.4

    waited = {"residual_wall_time_exhausted": True, "residual_wall_time_s": 0.47, "cpu_wait_s": 26.0}
    assert load_caused(waited, Limits)
    assert not load_caused({**waited, "cpu_wait_s": 0.01}, Limits)  # 0.46 s outside flopscope without the wait
    assert not load_caused({"budget_exhausted": True, "cpu_wait_s": 26.0}, Limits)  # FLOPs never depend on load
    assert not load_caused({**waited, "residual_wall_time_exhausted": False}, Limits)  # not failed at all
