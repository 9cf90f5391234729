"""A final record round-trips through the store and is refused, with what is missing named, when incomplete."""

from __future__ import annotations

import math

import pytest

from whestboard.leaderboard import (
    BadFinalRecord,
    board_revision,
    final_views,
    load_final_record,
    save_final_record,
)


def _record(round_name: str = "v1-warmup", **changes) -> dict:
    record = {
        "round": round_name, "suite_seed": 7, "n_mlps": 2,
        "standings": [{"rank": 1, "team": "a", "score": 1e-6, "final_layer_mse": 1e-6, "all_layer_mse": 2e-6,
                       "effective_compute": 1e9, "n_mlps": 2}],
        "tie_breaks": [{"teams": ["a", "b"], "p_value": 0.4, "extra_mlps": 3, "decided_by": "shared"}],
        "per_mlp": {"mlp_ids": [0, 1], "scores": {"a": [1e-6, math.nan]}},
    }
    record.update(changes)
    return record


def test_a_saved_record_is_read_back_per_round_and_a_new_one_replaces_it(private_state):
    assert load_final_record("v1-warmup") is None
    save_final_record(_record())
    save_final_record(_record("v1-phase1", suite_seed=9))
    assert load_final_record("v1-warmup")["suite_seed"] == 7
    assert load_final_record("v1-warmup")["per_mlp"]["scores"]["a"] == [1e-6, None]  # JSON has no NaN
    save_final_record(_record(suite_seed=8))
    assert load_final_record("v1-warmup")["suite_seed"] == 8
    assert load_final_record("v1-phase1")["suite_seed"] == 9


def test_an_incomplete_record_names_what_it_lacks(private_state):
    record = _record()
    del record["per_mlp"]
    with pytest.raises(BadFinalRecord, match="needs per_mlp"):
        save_final_record(record)
    with pytest.raises(BadFinalRecord, match="decided_by"):
        save_final_record(_record(tie_breaks=[{"teams": ["a"], "p_value": 1.0, "extra_mlps": 0,
                                               "decided_by": "coin"}]))
    assert load_final_record("v1-warmup") is None


def test_saving_a_record_counts_a_change_of_the_board_so_its_cached_views_are_read_afresh(private_state):
    assert final_views("v1-warmup") is None  # read, and kept for this revision
    before = board_revision()
    save_final_record(_record())
    assert board_revision() != before
    found = final_views("v1-warmup")
    assert found is not None and found[0] == load_final_record("v1-warmup")
