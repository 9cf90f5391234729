"""How solid the final standings are: a bootstrap over the suite's MLPs, leave-k-out fragility, shake-up.

The final ranks teams by their mean score over one private suite. Another suite of MLPs like it
would give other means, so every view here asks how the ranks move when the suite does:

* ``bootstrap_standings``: resample the suite's MLPs with replacement (the same MLPs for every
  team in a draw, so the comparison stays paired) and rank the teams' resampled means. Answers
  P(rank <= k) per team and k, and P(team i ranks above team j).
* ``fragility``: leave k MLPs out at random (without replacement) and rank on the rest, for a few
  k: the distribution of each team's rank. When there are at most ``draws`` subsets of k MLPs,
  every subset is enumerated, so the answer is exact.
* ``shake_up``: a team's rank on the public board against its final rank.

Ties, counted honestly: within one draw teams are ranked by "competition" ranking (the rank of a
team is 1 + the number of teams with a strictly lower mean), so teams with equal means share the
better rank, as teams the final cannot separate share a rank. P(rank <= k) therefore counts a tied
team in; the win matrix counts only strict wins (P(i above j) + P(j above i) + P(tie) = 1, and
``ties`` holds the last term). Two exact copies of one estimator thus tie in every draw.

Only the MLPs every team has a score on are resampled (a pairing needs the same MLPs); how many were
left out is reported. Every draw is seeded, and draws are processed in chunks so that teams x MLPs x
draws never lives in memory at once (``CHUNK_ELEMENTS`` bounds each chunk's arrays).
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from whestboard.cache import memoize
from whestboard.leaderboard import _store
from whestboard.leaderboard._final_record import load_final_record

#: Resamples of the suite behind P(rank <= k) and the win matrix; their Monte Carlo error is at most
#: 0.5 / sqrt(STANDINGS_DRAWS), about 0.011.
STANDINGS_DRAWS = 2000
STANDINGS_SEED = 20261202
#: How many MLPs are left out in the fragility view, as shares of the suite (at least one MLP each).
FRAGILITY_SHARES = (0.05, 0.1, 0.2)
#: Elements of the largest array a chunk of draws holds (draws x MLPs, or draws x teams^2 for the win tally).
CHUNK_ELEMENTS = 10_000_000


@dataclass(frozen=True)
class SuiteScores:
    """The per-MLP scores a record's views resample: teams in final-rank order, the MLPs all of them have."""

    teams: list[str]
    mlp_ids: list[Any]
    scores: np.ndarray  # (teams, MLPs)
    n_dropped: int  # MLPs left out because some team has no score on them


@dataclass(frozen=True)
class BootstrapStandings:
    """P(rank <= k) (teams x k, k = 1..teams), P(row team ranks strictly above column team), P(tie)."""

    teams: list[str]
    rank_at_most: np.ndarray
    wins: np.ndarray
    ties: np.ndarray
    draws: int
    n_mlps: int


@dataclass(frozen=True)
class Fragility:
    """For each number of MLPs left out, the share of leave-out sets that give each team each rank."""

    teams: list[str]
    left_out: list[int]  # k per entry
    rank_share: np.ndarray  # (len(left_out), teams, ranks 1..teams)
    sets: list[int]  # leave-out sets behind each entry
    exact: list[bool]  # every subset of k MLPs enumerated (else ``sets`` random ones)
    n_mlps: int


def suite_scores(record: Mapping[str, Any]) -> SuiteScores:
    """The record's base-suite per-MLP scores as a matrix, teams ordered as its standings rank them (teams that
    share a rank in the order the final listed them)."""
    per_mlp = record["per_mlp"]
    by_team = per_mlp["scores"]
    ordered = [row["team"] for row in sorted(record["standings"], key=lambda r: r["rank"])]  # stable: the final's order
    teams = [t for t in ordered if t in by_team] + sorted(t for t in by_team if t not in set(ordered))
    matrix = np.array([[np.nan if v is None else float(v) for v in by_team[t]] for t in teams], dtype=np.float64)
    matrix = matrix.reshape(len(teams), len(per_mlp["mlp_ids"]))
    complete = np.isfinite(matrix).all(axis=0)
    return SuiteScores(teams, [m for m, keep in zip(per_mlp["mlp_ids"], complete, strict=True) if keep],
                       matrix[:, complete], int((~complete).sum()))


def competition_ranks(means: np.ndarray) -> np.ndarray:
    """Rank of each column in each row: 1 + how many columns have a strictly lower value (ties share).

    By sorting each row (teams log teams per row, not teams squared): in sorted order a value's rank is
    one past the position where its run of equal values starts.
    """
    means = np.asarray(means, dtype=np.float64)
    rows, n = means.shape
    order = np.argsort(means, axis=1, kind="stable")
    ordered = np.take_along_axis(means, order, axis=1)
    starts = np.ones((rows, n), bool)
    starts[:, 1:] = ordered[:, 1:] != ordered[:, :-1]
    first = np.maximum.accumulate(np.where(starts, np.arange(n), 0), axis=1)
    ranks = np.empty((rows, n), np.int64)
    np.put_along_axis(ranks, order, first + 1, axis=1)
    return ranks


def _rank_tally(ranks: np.ndarray, n_teams: int) -> np.ndarray:
    """(teams, ranks) counts of how often each team got each rank over the rows of ``ranks``."""
    flat = np.arange(n_teams)[None, :] * n_teams + (ranks - 1)
    return np.bincount(flat.ravel(), minlength=n_teams * n_teams).reshape(n_teams, n_teams).astype(np.float64)


def _chunk(draws: int, per_draw: int) -> int:
    """Draws per chunk so that a chunk's largest array (``per_draw`` elements a draw) stays in CHUNK_ELEMENTS."""
    return max(1, min(draws, CHUNK_ELEMENTS // max(1, per_draw)))


def bootstrap_standings(scores: np.ndarray, teams: Sequence[str], *, draws: int = STANDINGS_DRAWS,
                        seed: int = STANDINGS_SEED) -> BootstrapStandings:
    """P(rank <= k) and the pairwise win matrix from ``draws`` resamples of the MLPs (columns of ``scores``).

    Draw d picks n MLPs with replacement (``default_rng(seed).integers(0, n, (chunk, n))``, chunk after
    chunk) and ranks the teams' means over them; see the module docstring for how ties count.
    """
    scores = np.asarray(scores, dtype=np.float64)
    n_teams, n = scores.shape
    rank_counts = np.zeros((n_teams, n_teams))
    wins = np.zeros((n_teams, n_teams))
    rng = np.random.default_rng(seed)
    by_mlp = np.ascontiguousarray(scores.T)
    done = 0
    while done < draws and n:
        size = min(_chunk(draws, max(n, n_teams * n_teams)), draws - done)  # the win tally: teams^2 a draw
        picks = rng.integers(0, n, size=(size, n))
        counts = np.bincount((np.arange(size)[:, None] * n + picks).ravel(),
                             minlength=size * n).reshape(size, n).astype(np.float64)
        means = counts @ by_mlp / n  # (size, teams): every team on the same resampled MLPs
        ranks = competition_ranks(means)
        rank_counts += _rank_tally(ranks, n_teams)
        # i strictly above j exactly when its competition rank is lower (equal means share a rank)
        wins += (ranks[:, :, None] < ranks[:, None, :]).sum(axis=0)
        done += size
    total = max(done, 1)
    rank_at_most = np.cumsum(rank_counts, axis=1) / total
    wins /= total
    return BootstrapStandings(list(teams), rank_at_most, wins, 1.0 - wins - wins.T - np.eye(n_teams), done, n)


def left_out_counts(n_mlps: int, shares: Sequence[float] = FRAGILITY_SHARES) -> list[int]:
    """How many MLPs the fragility view leaves out: each share of the suite, at least 1, fewer than n, distinct."""
    ks = sorted({max(1, round(share * n_mlps)) for share in shares})
    return [k for k in ks if k < n_mlps]


def fragility(scores: np.ndarray, teams: Sequence[str], left_out: Sequence[int] | None = None, *,
              draws: int = STANDINGS_DRAWS, seed: int = STANDINGS_SEED) -> Fragility:
    """The distribution of each team's rank when k MLPs are left out, for each k in ``left_out``.

    Every k-subset is enumerated when there are at most ``draws`` of them; else ``draws`` random
    subsets (each a ``default_rng(seed).permutation``'s first k). Ties rank as in the module docstring.
    """
    scores = np.asarray(scores, dtype=np.float64)
    n_teams, n = scores.shape
    ks = list(left_out_counts(n) if left_out is None else left_out)
    shares = np.zeros((len(ks), n_teams, n_teams))
    sets, exact = [], []
    rng = np.random.default_rng(seed)
    total = scores.sum(axis=1)
    by_mlp = np.ascontiguousarray(scores.T)
    for e, k in enumerate(ks):
        if not 0 < k < n:
            raise ValueError(f"leave out between 1 and {n - 1} of the suite's {n} MLPs, not {k}")
        enumerate_all = math.comb(n, k) <= draws
        masks = _all_subsets(n, k) if enumerate_all else _random_subsets(rng, n, k, draws)
        counts = np.zeros((n_teams, n_teams))
        step = _chunk(len(masks), max(n, n_teams))
        for start in range(0, len(masks), step):
            means = (total[None, :] - masks[start:start + step] @ by_mlp) / (n - k)  # the rest's mean per team
            counts += _rank_tally(competition_ranks(means), n_teams)
        shares[e] = counts / len(masks)
        sets.append(len(masks))
        exact.append(enumerate_all)
    return Fragility(list(teams), ks, shares, sets, exact, n)


def _all_subsets(n: int, k: int) -> np.ndarray:
    masks = np.zeros((math.comb(n, k), n))
    for row, subset in enumerate(itertools.combinations(range(n), k)):
        masks[row, list(subset)] = 1.0
    return masks


def _random_subsets(rng: np.random.Generator, n: int, k: int, draws: int) -> np.ndarray:
    chosen = np.argsort(rng.random((draws, n)), axis=1)[:, :k]  # a uniform random k-subset per row
    masks = np.zeros((draws, n))
    np.put_along_axis(masks, chosen, 1.0, axis=1)
    return masks


SHAKE_UP_COLUMNS = ["team", "final_rank", "public_rank", "public_rank_among_finalists", "moved"]


def shake_up(public: pd.DataFrame, standings: Sequence[Mapping[str, Any]]) -> pd.DataFrame:
    """Each finalist's public-board rank against its final rank.

    ``public``: the public board (columns ``team`` and ``rank``, as ``board(...).table``);
    ``standings``: the final record's rows. ``public_rank_among_finalists`` re-ranks the finalists by
    their public rank (competition ranking, ties share), so a team that neither rose nor fell lies on
    the diagonal; ``moved`` = that rank minus the final rank (positive: it rose). A finalist absent
    from the public board has no public rank (NaN) and no movement. Rows follow the final rank (a shared
    rank in the final's order).
    """
    final = pd.DataFrame([{"team": str(r["team"]), "final_rank": int(r["rank"])} for r in standings],
                         columns=["team", "final_rank"])
    board_rank = (public.astype({"team": str}).groupby("team")["rank"].min() if len(public)
                  else pd.Series(dtype=float))
    final["public_rank"] = final["team"].map(board_rank).astype(float)
    final["public_rank_among_finalists"] = final["public_rank"].rank(method="min")
    final["moved"] = final["public_rank_among_finalists"] - final["final_rank"]
    return final.sort_values("final_rank", kind="mergesort", ignore_index=True)[SHAKE_UP_COLUMNS]


@dataclass(frozen=True)
class StandingsViews:
    """What the standings view draws from a round's final record beside the standings themselves."""

    suite: SuiteScores
    bootstrap: BootstrapStandings
    fragility: Fragility


def final_views(round_name: str) -> tuple[dict[str, Any], StandingsViews] | None:
    """The round's final record and its bootstrap and fragility views; None when no final was run.

    The record is read once per store revision (saving one counts a change of the board); the views are
    computed once per record (keyed by a digest of its JSON) in this process. Both are shared: unchanged.
    """
    record = _store.cached(f"final-record:{round_name}", lambda: load_final_record(round_name))
    if record is None:
        return None
    digest = hashlib.sha256(json.dumps(record, sort_keys=True).encode()).hexdigest()
    return record, _views(round_name, digest)


@memoize("final-standings-views", shared=False, max_entries=16)
def _views(round_name: str, _digest: str) -> StandingsViews:
    suite = suite_scores(load_final_record(round_name))
    n = len(suite.mlp_ids)
    boot = bootstrap_standings(suite.scores, suite.teams)
    frag = fragility(suite.scores, suite.teams) if n > 1 else Fragility(suite.teams, [], np.zeros((0, 0, 0)),
                                                                       [], [], n)
    return StandingsViews(suite, boot, frag)
