"""The three rounds, every figure straight from whestbench.budget."""

from __future__ import annotations

import pytest
from whestbench import budget

from whestboard.rules._rounds import ALL_ROUNDS, get_round, round_for_shape


@pytest.mark.parametrize("tag", list(budget.ROUNDS))
def test_rounds_come_from_whestbench(tag):
    cfg, rnd = budget.ROUNDS[tag], get_round(tag)
    assert (rnd.width, rnd.depth, rnd.budget) == (cfg.width, cfg.depth, cfg.flop_budget)
    assert rnd.mc_samples_at_budget == budget.mc_samples_at_budget(cfg)
    assert rnd.mc_flops_per_sample == budget.mc_flops_per_sample_for_round(cfg)
    assert rnd.mc_at_bm(0.25) == budget.mc_at_bm(0.25, cfg)
    assert rnd.charging_floor == 0.1 * cfg.flop_budget
    assert round_for_shape(cfg.width, cfg.depth) is rnd


def test_unknown_round_and_shape():
    assert set(ALL_ROUNDS) == set(budget.ROUNDS)
    assert round_for_shape(7, 3) is None
    with pytest.raises(KeyError, match="known rounds"):
        get_round("v9")
