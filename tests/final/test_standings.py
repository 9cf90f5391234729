"""The final's standings rule on per-MLP results: ranks follow the score, "close" and "shared" mean what they say.

Per-MLP entries are drawn (``standings_helpers``) as real scores spread (lognormal across MLPs, one team a multiple of the
other on each MLP), with the grader's failure verdict (the all-zero prediction, multiplier 1) where a team
fails. Extra MLPs come from the same draws, as the suite continues. The test's arithmetic is checked
against Student t's tabulated quantiles and a plain simulation; the sizes are ``mlps_needed``'s.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from tests.final.standings_helpers import Suite, team
from whestboard.final import _standings
from whestboard.final._standings import PAIR_TEST, classify, standings, t_quantile, t_two_sided_p
from whestboard.leaderboard import mlps_needed


def _run(teams: dict[str, dict], n: int, limit: int, suite: Suite):
    """Standings of teams given as ``team`` keyword arguments, extra MLPs drawn as asked (and counted)."""
    base = {t: team(suite, range(n), **kw) for t, kw in teams.items()}
    asked: list[tuple[list[str], int]] = []

    def more(group, k):
        asked.append((list(group), k))
        return {t: team(suite, range(n, n + k), **teams[t]) for t in group}

    return standings(list(teams), base, limit, more), base, asked


def test_the_t_distribution_is_students():
    """Tabulated two-sided 95% quantiles, and a simulated tail for 3 degrees of freedom."""
    for df, quantile in ((1, 12.706), (2, 4.303), (3, 3.182), (10, 2.228), (30, 2.042)):
        assert t_quantile(df) == pytest.approx(quantile, abs=1e-3)
        assert t_two_sided_p(quantile, df) == pytest.approx(0.05, abs=1e-4)
    draws = np.random.default_rng(1).standard_t(3, 400_000)
    assert t_two_sided_p(2.0, 3) == pytest.approx(float(np.mean(np.abs(draws) >= 2.0)), abs=3e-3)
    assert t_two_sided_p(0.0, 4) == 1.0 and t_two_sided_p(math.inf, 4) == 0.0


def test_exact_copies_share_the_rank_after_the_extra_mlps():
    result, _, asked = _run({"a": {}, "b": {}}, 3, 2, Suite())
    assert result.ranks == {"a": 1, "b": 1}
    (pair,) = result.pairs
    assert pair.decided_by == "shared" and pair.n_mlps == 5 and pair.test.p_value == 1.0
    assert asked == [(["a", "b"], 2)]  # an exact tie asks for as many extra MLPs as allowed
    assert not result.provisional


def test_a_consistent_gap_on_three_mlps_is_decided_by_the_test():
    """21x worse on every MLP (with 10% jitter): the t-test on the log ratios rejects on 3 MLPs, no tie-break."""
    result, base, asked = _run({"cov": {}, "mean": {"factor": 21.0, "spread": 0.1}}, 3, 2, Suite())
    assert result.order == ["cov", "mean"] and result.ranks == {"cov": 1, "mean": 2}
    (pair,) = result.pairs
    logs = np.log([m["adjusted_final_layer_score"] / c["adjusted_final_layer_score"]
                   for c, m in zip(base["cov"], base["mean"], strict=True)])
    t = logs.mean() / (logs.std(ddof=1) / math.sqrt(3))
    assert pair.decided_by == "score" and pair.n_mlps == 3
    assert pair.test.p_value == pytest.approx(t_two_sided_p(t, 2)) and pair.test.p_value < 0.01
    assert asked == [] and not result.groups
    assert pair.as_dict()["test"] == PAIR_TEST


def test_a_team_that_failed_on_one_mlp_never_shares_with_its_copy():
    """The same estimator failing on one of 6 MLPs: ranked below by its score, unresolved and provisional,
    never a shared rank (its scores are not equal to the other's within the noise)."""
    result, _, _ = _run({"good": {}, "flaky": {"fails": frozenset({2})}}, 6, 0, Suite())
    assert result.order == ["good", "flaky"] and result.ranks == {"good": 1, "flaky": 2}
    (pair,) = result.pairs
    assert pair.decided_by == "unresolved" and result.provisional == {"good", "flaky"}
    assert pair.reason.startswith("unresolved at 6 MLPs; about ")


def test_one_failure_against_a_consistently_worse_team_keeps_the_score_order():
    """The issue's delta and gamma: covariance propagation failing once against mean propagation, 21x worse
    on every MLP. On the other MLPs the ratios say delta is better, the mean says it is worse: no verdict,
    so the score's order stands, provisional, saying how many MLPs would settle it."""
    teams = {"gamma": {"factor": 21.0, "spread": 0.1}, "delta": {"fails": frozenset({2, 4})}}
    result, base, asked = _run(teams, 3, 2, Suite())
    assert result.order == ["gamma", "delta"] and result.ranks == {"gamma": 1, "delta": 2}
    (pair,) = result.pairs
    assert pair.decided_by == "unresolved" and pair.n_mlps == 5 and asked == [(["gamma", "delta"], 2)]
    scored = {t: base[t] + result.extra[t] for t in teams}
    logs = np.log(_standings.column(scored["delta"], "adjusted_final_layer_score")
                  / _standings.column(scored["gamma"], "adjusted_final_layer_score"))
    assert pair.mlps_needed == max(3, math.ceil(mlps_needed(logs)))
    assert f"unresolved at 5 MLPs; about {pair.mlps_needed} needed" in pair.reason


def test_a_close_pair_is_resolved_by_the_extra_mlps():
    """1% apart, the log ratio wobbling by +-1%: on 3 MLPs the ratio's interval lies inside the 5% margin
    (close) and the test cannot reject; the extra MLPs the sizing asks for separate them."""
    teams = {"a": {}, "b": {"factor": 1.01, "wobble": 0.01}}
    suite = Suite()
    base = {t: team(suite, range(3), **kw) for t, kw in teams.items()}
    verdict = classify(base["a"], base["b"])
    assert verdict.kind == _standings.CLOSE and not verdict.equal and verdict.score.p_value >= 0.05
    result, _, asked = _run(teams, 3, 40, suite)
    ((group, k),) = asked
    logs = np.log(_standings.column(base["b"], "adjusted_final_layer_score")
                  / _standings.column(base["a"], "adjusted_final_layer_score"))
    assert k == math.ceil(mlps_needed(logs)) - 3 and 0 < k < 40
    (pair,) = result.pairs
    assert pair.decided_by == "extra_mlps" and pair.n_mlps == 3 + k and pair.test.p_value < 0.05
    assert result.order == ["a", "b"] and result.ranks == {"a": 1, "b": 2} and not result.provisional


def test_a_pair_the_extra_mlps_cannot_resolve_stays_unresolved_in_score_order():
    """No true difference, 50% jitter per MLP: neither different nor within the margin after 4 extra MLPs."""
    teams = {"a": {"spread": 0.5, "seed": 3}, "b": {"spread": 0.5, "seed": 4}}
    result, base, asked = _run(teams, 4, 4, Suite())
    (pair,) = result.pairs
    assert asked and asked[0][1] == 4 and pair.decided_by == "unresolved" and pair.n_mlps == 8
    scores = {t: _standings.summary(base[t] + result.extra[t])["score"] for t in teams}
    assert result.order == sorted(teams, key=scores.get)
    assert [result.ranks[t] for t in result.order] == [1, 2] and result.provisional == {"a", "b"}
    assert "unresolved at 8 MLPs; about" in pair.reason


def test_a_close_pair_equal_on_the_score_is_ordered_by_all_layer_mse():
    """Same final-layer scores, all-layer MSE 30% lower on every MLP: the Rules' second criterion decides."""
    result, _, _ = _run({"a": {}, "b": {"all_layer": 0.7}}, 4, 1, Suite())
    (pair,) = result.pairs
    assert pair.decided_by == "all_layer_mse" and result.order == ["b", "a"]
    assert result.ranks == {"b": 1, "a": 2}


def test_copies_whose_measured_wall_time_differs_still_share():
    """Where residual wall time is priced, two runs of one computation differ in effective compute by the
    timing alone (here consistently, one ran on a busier machine); the identical results decide: shared."""
    suite = Suite()
    fast = team(suite, range(5))
    slow = [{**e, "effective_compute": e["effective_compute"] * 1.3} for e in fast]
    result = standings(["fast", "slow"], {"fast": fast, "slow": slow}, 0, lambda group, k: {})
    (pair,) = result.pairs
    assert pair.decided_by == "shared" and result.ranks == {"fast": 1, "slow": 1}
    assert _standings.ratio_test(fast, slow, "effective_compute").p_value < 0.05  # the chain alone would split them
