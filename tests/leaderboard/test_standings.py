"""The standings views against plain loops: exact enumeration, independent resampling, brute force."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pandas as pd
import pytest

from whestboard.leaderboard import (
    _standings,
    bootstrap_standings,
    competition_ranks,
    fragility,
    left_out_counts,
    load_final_record,
    save_final_record,
    shake_up,
    suite_scores,
)

TEAMS = ["a", "b", "c", "d"]


def _scores(n: int, seed: int = 3) -> np.ndarray:
    """Four teams on n MLPs, lognormal per MLP like real scores; d is an exact copy of b."""
    rng = np.random.default_rng(seed)
    mlp = rng.lognormal(0.0, 1.0, n)
    a, b, c = (mlp * rng.lognormal(shift, 0.4, n) for shift in (0.0, 0.05, 0.3))
    return np.stack([a, b, c, b.copy()])


def _loop_rank(means: list[float], team: int) -> int:
    return 1 + sum(1 for other in means if other < means[team])


def _loop_tallies(scores: np.ndarray, resamples) -> tuple[np.ndarray, np.ndarray, int]:
    """P(rank <= k) and P(i strictly above j) over the given resamples (index tuples), one by one."""
    teams = scores.shape[0]
    at_most, wins, count = np.zeros((teams, teams)), np.zeros((teams, teams)), 0
    for picks in resamples:
        means = [sum(scores[t][p] for p in picks) / len(picks) for t in range(teams)]
        for t in range(teams):
            rank = _loop_rank(means, t)
            for k in range(rank, teams + 1):
                at_most[t, k - 1] += 1
            for other in range(teams):
                wins[t, other] += means[t] < means[other]
        count += 1
    return at_most / count, wins / count, count


def _tolerance(p: np.ndarray, draws: int) -> np.ndarray:
    """4.5 standard errors of a share estimated from ``draws`` independent draws (plus rounding)."""
    return 4.5 * np.sqrt(p * (1 - p) / draws) + 1e-9


def test_bootstrap_agrees_with_the_exact_distribution_over_every_resample():
    scores = _scores(5)
    exact_at_most, exact_wins, count = _loop_tallies(scores, itertools.product(range(5), repeat=5))
    assert count == 5**5
    draws = 20_000
    got = bootstrap_standings(scores, TEAMS, draws=draws, seed=11)
    assert got.draws == draws and got.n_mlps == 5
    assert np.all(np.abs(got.rank_at_most - exact_at_most) <= _tolerance(exact_at_most, draws))
    assert np.all(np.abs(got.wins - exact_wins) <= _tolerance(exact_wins, draws))


def test_bootstrap_agrees_with_an_independent_plain_loop_resampling():
    scores = _scores(30, seed=5)
    rng = np.random.default_rng(99)  # another seed and another generator use: independent draws
    loop_draws = 3000
    resamples = (tuple(int(rng.integers(0, 30)) for _ in range(30)) for _ in range(loop_draws))
    loop_at_most, loop_wins, _ = _loop_tallies(scores, resamples)
    draws = 6000
    got = bootstrap_standings(scores, TEAMS, draws=draws)
    # the difference of two independent estimates: its variance is the sum of theirs
    p = (loop_at_most + got.rank_at_most) / 2
    assert np.all(np.abs(got.rank_at_most - loop_at_most)
                  <= 4.5 * np.sqrt(p * (1 - p) * (1 / draws + 1 / loop_draws)) + 1e-9)
    p = (loop_wins + got.wins) / 2
    assert np.all(np.abs(got.wins - loop_wins) <= 4.5 * np.sqrt(p * (1 - p) * (1 / draws + 1 / loop_draws)) + 1e-9)


def test_copies_tie_in_every_draw_and_share_the_better_rank():
    scores = _scores(12)
    got = bootstrap_standings(scores, TEAMS, draws=500)
    assert got.wins[1, 3] == 0 and got.wins[3, 1] == 0 and got.ties[1, 3] == 1.0
    np.testing.assert_array_equal(got.rank_at_most[1], got.rank_at_most[3])
    np.testing.assert_allclose(got.wins + got.wins.T + got.ties + np.eye(4), 1.0)
    assert np.all(got.rank_at_most[:, -1] == 1.0)
    assert np.all(np.diff(got.rank_at_most, axis=1) >= 0)


def test_seeded_draws_repeat_and_chunking_does_not_change_them(monkeypatch):
    scores = _scores(20)
    once = bootstrap_standings(scores, TEAMS, draws=700, seed=4)
    again = bootstrap_standings(scores, TEAMS, draws=700, seed=4)
    np.testing.assert_array_equal(once.rank_at_most, again.rank_at_most)
    monkeypatch.setattr(_standings, "CHUNK_ELEMENTS", 20 * 7)  # chunks of 7 draws (20 MLPs a draw)
    chunked = bootstrap_standings(scores, TEAMS, draws=700, seed=4)
    np.testing.assert_array_equal(once.rank_at_most, chunked.rank_at_most)
    np.testing.assert_array_equal(once.wins, chunked.wins)


def _loop_fragility(scores: np.ndarray, k: int) -> np.ndarray:
    teams, n = scores.shape
    counts, total = np.zeros((teams, teams)), 0
    for out in itertools.combinations(range(n), k):
        kept = [m for m in range(n) if m not in out]
        means = [sum(scores[t][m] for m in kept) / len(kept) for t in range(teams)]
        for t in range(teams):
            counts[t, _loop_rank(means, t) - 1] += 1
        total += 1
    return counts / total


def test_fragility_enumerates_every_subset_when_few_and_matches_brute_force():
    scores = _scores(9)
    got = fragility(scores, TEAMS, [1, 2, 4], draws=200)
    assert got.exact == [True, True, True] and got.sets == [9, 36, 126]
    for e, k in enumerate([1, 2, 4]):
        np.testing.assert_allclose(got.rank_share[e], _loop_fragility(scores, k), atol=1e-12)


def test_fragility_samples_subsets_when_many_and_agrees_with_brute_force():
    scores = _scores(12, seed=8)
    draws = 600
    got = fragility(scores, TEAMS, [5], draws=draws)  # C(12, 5) = 792 subsets, sampled with replacement
    assert got.exact == [False] and got.sets == [draws]
    exact = _loop_fragility(scores, 5)
    assert np.all(np.abs(got.rank_share[0] - exact) <= _tolerance(exact, draws))
    with pytest.raises(ValueError, match="leave out between 1 and 11"):
        fragility(scores, TEAMS, [12])


def test_left_out_counts_are_distinct_shares_of_the_suite():
    assert left_out_counts(100) == [5, 10, 20]
    assert left_out_counts(8) == [1, 2]
    assert left_out_counts(1) == []


def test_competition_ranks_share_the_better_rank():
    means = np.array([[3.0, 1.0, 1.0, 2.0]])
    np.testing.assert_array_equal(competition_ranks(means), [[4, 1, 1, 3]])


def test_shake_up_matches_a_brute_force_reranking_of_the_finalists():
    public = pd.DataFrame({"team": ["p", "q", "r", "s", "t", "u"], "rank": [1, 2, 2, 4, 5, 6]})
    standings = [{"rank": 1, "team": "t"}, {"rank": 2, "team": "q"}, {"rank": 2, "team": "p"},
                 {"rank": 4, "team": "new"}, {"rank": 5, "team": "r"}]
    got = shake_up(public, standings).set_index("team")
    finalists_on_board = {"t": 5, "q": 2, "p": 1, "r": 2}
    for team, board_rank in finalists_on_board.items():
        among = 1 + sum(1 for other in finalists_on_board.values() if other < board_rank)
        final = next(r["rank"] for r in standings if r["team"] == team)
        assert got.loc[team, "public_rank"] == board_rank
        assert got.loc[team, "public_rank_among_finalists"] == among
        assert got.loc[team, "moved"] == among - final
    assert math.isnan(got.loc["new", "public_rank"]) and math.isnan(got.loc["new", "moved"])
    assert list(got.index) == ["t", "q", "p", "new", "r"]  # by final rank, a shared one in the final's order


def test_suite_scores_read_a_saved_record_in_final_rank_order_and_leave_out_incomplete_mlps(private_state):
    scores = _scores(6)
    means = scores.mean(axis=1)
    ranks = competition_ranks(means[None, :])[0]
    per_team = {t: list(row) for t, row in zip(TEAMS, scores, strict=True)}
    per_team["c"][2] = math.nan  # a score the final could not record
    save_final_record({
        "round": "v1-warmup", "suite_seed": 5, "n_mlps": 6,
        "standings": [{"rank": int(r), "team": t, "score": float(m), "final_layer_mse": float(m),
                       "all_layer_mse": float(m), "effective_compute": 1.0, "n_mlps": 6}
                      for t, r, m in zip(TEAMS, ranks, means, strict=True)],
        "tie_breaks": [], "per_mlp": {"mlp_ids": list(range(6)), "scores": per_team}})
    suite = suite_scores(load_final_record("v1-warmup"))
    order = sorted(range(4), key=lambda i: ranks[i])  # stable: a shared rank keeps the record's order
    assert suite.teams == [TEAMS[i] for i in order]
    assert suite.mlp_ids == [0, 1, 3, 4, 5] and suite.n_dropped == 1
    np.testing.assert_array_equal(suite.scores, scores[order][:, [0, 1, 3, 4, 5]])
