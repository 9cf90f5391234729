"""Rankings organizers can trust: best per team, bootstrap intervals, paired tests.

* Each team is ranked by its best graded submission (lowest adjusted score,
  the earliest one on a tie).
* The 95% interval of a mean score comes from resampling the submission's
  MLPs with replacement (percentile bootstrap): how much the score would move
  on another draw of MLPs like these.
* "Indistinguishable from the leader" is a paired test on the MLPs both
  submissions were scored on (matched by dataset and MLP index): a sign-flip
  permutation test of the mean per-MLP score difference, exact up to 16 shared
  MLPs. Pairing matters: MLPs differ far more from each other than two good
  estimators differ on one MLP, so unpaired intervals overlap long after a
  paired test can tell the two apart.

Every random draw uses a fixed seed, so a page shows the same numbers on
every load.
"""

from __future__ import annotations

from dataclasses import dataclass
from statistics import NormalDist

import numpy as np
import pandas as pd

from whestboard.cache import memoize
from whestboard.data import datasets_for_round
from whestboard.leaderboard import _store
from whestboard.rules import ALL_ROUNDS, get_round

CONFIDENCE = 0.95
ALPHA = 1.0 - CONFIDENCE
#: The power a sample size is computed for: a test at ALPHA that rejects a real difference 4 times in 5.
POWER = 0.8
BOOTSTRAP_DRAWS = 4000
PERMUTATION_DRAWS = 10000
EXACT_PERMUTATION_MAX_N = 16
SEED = 20260501
#: The resampling tables, drawn once per (n, draws, seed) and kept in this process by the cache service:
#: 10,000 draws of 1,000 MLPs are 80 MB, so they are bounded in bytes as well as in number.
_DRAW_TABLES = {"shared": False, "max_entries": 16, "share": 1 / 4, "size_of": lambda table: int(table.nbytes)}

VERDICT_LEADER = "leader"
VERDICT_TIED = "indistinguishable"
VERDICT_BEHIND = "behind"
VERDICT_NO_MLPS = "no per-MLP results"
VERDICT_NO_SHARED = "no shared MLPs"


def bootstrap_interval(scores: np.ndarray, *, draws: int = BOOTSTRAP_DRAWS, seed: int = SEED) -> tuple[float, float]:
    """95% percentile-bootstrap interval of the mean of ``scores`` (MLPs resampled)."""
    scores = np.asarray(scores, dtype=np.float64)
    if scores.size == 0:
        return float("nan"), float("nan")
    if scores.size == 1:
        return float(scores[0]), float(scores[0])
    picks = _bootstrap_picks(scores.size, draws, seed)
    means = scores[picks].mean(axis=1)
    low, high = np.quantile(means, [ALPHA / 2, 1 - ALPHA / 2])
    return float(low), float(high)


def bootstrap_intervals(matrix: np.ndarray, *, draws: int = BOOTSTRAP_DRAWS, seed: int = SEED) -> np.ndarray:
    """``bootstrap_interval`` of every row's known (non-NaN) values, as a (rows, 2) array.

    Rows with the same number of known MLPs share one table of draws, as counts per MLP,
    so their resampled means are one matrix product: a board of 300 teams costs a few
    BLAS calls instead of 300 gathers of draws x n values.
    """
    out = np.full((len(matrix), 2), np.nan)
    known = ~np.isnan(matrix) if matrix.size else np.zeros(matrix.shape, bool)
    sizes = known.sum(axis=1) if len(matrix) else np.zeros(0, int)
    for n in np.unique(sizes):
        rows = np.flatnonzero(sizes == n)
        if n == 0:
            continue
        values = np.stack([matrix[i][known[i]] for i in rows])
        if n == 1:
            out[rows] = values[:, [0, 0]]
            continue
        means = values @ _bootstrap_counts(int(n), draws, seed).T / n
        out[rows] = np.quantile(means, [ALPHA / 2, 1 - ALPHA / 2], axis=1).T
    return out


@memoize("bootstrap-counts", **_DRAW_TABLES)
def _bootstrap_counts(n: int, draws: int, seed: int) -> np.ndarray:
    """How often each of n MLPs is drawn in each bootstrap resample (the same draws as ``_bootstrap_picks``)."""
    picks = _bootstrap_picks(n, draws, seed)
    counts = np.zeros((draws, n))
    np.add.at(counts, (np.arange(draws)[:, None], picks), 1.0)
    counts.setflags(write=False)
    return counts


@dataclass(frozen=True)
class PairedComparison:
    """A submission against the leader on their shared MLPs."""

    n_shared: int
    mean_difference: float  # this submission's mean score minus the leader's, on shared MLPs
    p_value: float

    @property
    def indistinguishable(self) -> bool:
        return self.n_shared > 0 and self.p_value >= ALPHA


def mlps_needed(differences: np.ndarray, *, alpha: float = ALPHA, power: float = POWER) -> float:
    """MLPs a paired two-sided ``1 - alpha`` test needs to resolve the observed mean difference with ``power``.

    With n MLPs the test rejects with probability ``power`` when sqrt(n) |mu| / sigma = z(1 - alpha/2) +
    z(power), mu and sigma being the mean and standard deviation of the per-MLP differences seen so far:
    n = ((z(1 - alpha/2) + z(power)) sigma / |mu|)^2. Fractional (a caller rounds up where it shows a
    count); ``inf`` when the differences average to zero, ``nan`` with fewer than 2 finite ones.
    """
    d = np.asarray(differences, dtype=np.float64)
    d = d[np.isfinite(d)]
    if d.size < 2:
        return float("nan")
    mean, sd = float(d.mean()), float(d.std(ddof=1))
    if mean == 0.0:
        return float("inf")
    z = NormalDist().inv_cdf(1 - alpha / 2) + NormalDist().inv_cdf(power)
    return (z * sd / abs(mean)) ** 2


def sign_flip_p_value(differences: np.ndarray, *, draws: int = PERMUTATION_DRAWS, seed: int = SEED) -> float:
    """Two-sided p-value that the mean paired difference is zero (differences symmetric about 0).

    Exact over all 2^n sign patterns for n <= 16, else ``draws`` random patterns
    (plus the observed one, so p is never 0).
    """
    d = np.asarray(differences, dtype=np.float64)
    if d.size == 0:
        return float("nan")
    return float(sign_flip_p_values(d[None, :], draws=draws, seed=seed)[0])


def sign_flip_p_values(differences: np.ndarray, *, draws: int = PERMUTATION_DRAWS, seed: int = SEED) -> np.ndarray:
    """``sign_flip_p_value`` for every row of a (comparisons x n) array, in one matrix product.

    Rows share the sign patterns, so ranking hundreds of teams against the
    leader on the same MLPs is one BLAS call rather than hundreds of small ones.
    """
    d = np.asarray(differences, dtype=np.float64)
    n = d.shape[1]
    scale = np.abs(d).max(axis=1, keepdims=True)
    scale[scale == 0] = 1.0
    d = d / scale
    observed = np.abs(d.mean(axis=1))
    tolerance = 1e-12 * np.maximum(observed, 1e-300)
    exact = n <= EXACT_PERMUTATION_MAX_N
    signs = _all_sign_patterns(n) if exact else _random_sign_patterns(n, draws, seed)
    stats = np.abs(signs @ d.T) / n  # (patterns, comparisons)
    at_least = (stats >= observed - tolerance).sum(axis=0)
    p = at_least / signs.shape[0] if exact else (at_least + 1) / (draws + 1)
    return np.where(observed == 0.0, 1.0, p)


# The random draws depend only on (n, draws, seed), so one table serves every team of a
# ranking: 300 teams cost 300 small matrix products, not 300 fresh tables of random numbers.


@memoize("bootstrap-picks", **_DRAW_TABLES)
def _bootstrap_picks(n: int, draws: int, seed: int) -> np.ndarray:
    picks = np.random.default_rng(seed).integers(0, n, size=(draws, n))
    picks.setflags(write=False)
    return picks


@memoize("random-sign-patterns", **_DRAW_TABLES)
def _random_sign_patterns(n: int, draws: int, seed: int) -> np.ndarray:
    signs = np.random.default_rng(seed).choice((1.0, -1.0), size=(draws, n))
    signs.setflags(write=False)
    return signs


@memoize("all-sign-patterns", **(_DRAW_TABLES | {"max_entries": EXACT_PERMUTATION_MAX_N + 1}))
def _all_sign_patterns(n: int) -> np.ndarray:
    bits = (np.arange(2**n)[:, None] >> np.arange(n)) & 1
    return (1.0 - 2.0 * bits).astype(np.float64)


def paired_comparison(mine: pd.Series, leader: pd.Series) -> PairedComparison:
    """Compare two per-MLP score series indexed by the MLP's pairing key."""
    shared = mine.index.intersection(leader.index)
    if len(shared) == 0:
        return PairedComparison(0, float("nan"), float("nan"))
    diff = mine.loc[shared].to_numpy(np.float64) - leader.loc[shared].to_numpy(np.float64)
    return PairedComparison(len(shared), float(diff.mean()), sign_flip_p_value(diff))


def best_per_team(submissions: pd.DataFrame) -> pd.DataFrame:
    """Each team's best graded submission: lowest adjusted score, earliest on a tie."""
    graded = submissions[(submissions["status"] == "graded") & np.isfinite(submissions["adjusted_score"])]
    ordered = graded.sort_values(["adjusted_score", "submitted_at", "submission_id"], kind="mergesort")
    return ordered.drop_duplicates("team", keep="first").reset_index(drop=True)


def rank_round(submissions: pd.DataFrame, mlp_results: pd.DataFrame) -> pd.DataFrame:
    """The ranking table of one round: best per team, interval, verdict against the leader.

    ``submissions`` holds the round's submissions (store.frame columns),
    ``mlp_results`` the per-MLP rows of at least the best ones (may be empty).
    """
    best = best_per_team(submissions)
    columns = [
        "rank", "team", "submission_id", "submitted_at", "adjusted_score", "ci_low", "ci_high",
        "final_layer_mse", "mean_flops_used", "mean_multiplier", "n_failed_mlps", "n_mlps",
        "n_shared", "p_value", "verdict",
    ]
    if best.empty:
        return pd.DataFrame(columns=columns)
    matrix = score_matrix(best, mlp_results)  # one row per best submission, one column per MLP key
    verdicts = verdicts_against_leader(matrix)
    intervals = bootstrap_intervals(matrix)
    rows = []
    for i, sub in enumerate(best.to_dict("records")):
        low, high = intervals[i]
        n_shared, p_value, verdict = verdicts[i]
        rows.append({**sub, "ci_low": low, "ci_high": high, "n_shared": n_shared, "p_value": p_value,
                     "verdict": verdict})
    table = pd.DataFrame(rows)
    table["rank"] = table["adjusted_score"].rank(method="min").astype(int)
    return table[columns]


def score_matrix(best: pd.DataFrame, mlp_results: pd.DataFrame) -> np.ndarray:
    """Per-MLP scores as a (submissions x MLP keys) array, NaN where a submission lacks that MLP.

    Columns are the pairing keys (dataset, MLP index), so two rows are paired by
    position: comparing hundreds of teams is array arithmetic, not joins.
    """
    rows = mlp_results[mlp_results["submission_id"].isin(best["submission_id"])]
    row_of = pd.Series(np.arange(len(best)), index=best["submission_id"].to_numpy())
    dataset = best.set_index("submission_id")["dataset"].fillna("")
    # (dataset, MLP index) as one integer, so the keys are factorized as numbers, not as tuples of text
    dataset_codes, _ = pd.factorize(rows["submission_id"].map(dataset).fillna(""))
    index = rows["mlp_index"].to_numpy(np.int64)
    combined = dataset_codes.astype(np.int64) * (int(index.max()) + 1 if index.size else 1) + index
    key_codes, keys = pd.factorize(combined) if len(rows) else (np.zeros(0, int), [])
    matrix = np.full((len(best), len(keys)), np.nan)
    matrix[row_of.reindex(rows["submission_id"].to_numpy()).to_numpy(int), key_codes] = \
        rows["adjusted_score"].to_numpy(float)
    return matrix


def verdicts_against_leader(matrix: np.ndarray) -> list[tuple[int, float, str]]:
    """(shared MLPs, p-value, verdict) of every row against row 0, the leader.

    Rows sharing the same set of MLPs with the leader (usually all of them) are
    tested together in one ``sign_flip_p_values`` call.
    """
    leader_known = ~np.isnan(matrix[0]) if len(matrix) else np.zeros(0, bool)
    out: list[tuple[int, float, str]] = [(int(leader_known.sum()), float("nan"), VERDICT_LEADER)]
    groups: dict[bytes, list[int]] = {}
    for i in range(1, len(matrix)):
        known = ~np.isnan(matrix[i])
        shared = known & leader_known
        if not known.any() or not leader_known.any():
            out.append((0, float("nan"), VERDICT_NO_MLPS))
        elif not shared.any():
            out.append((0, float("nan"), VERDICT_NO_SHARED))
        else:
            out.append((int(shared.sum()), float("nan"), ""))
            groups.setdefault(shared.tobytes(), []).append(i)
    for mask_bytes, rows in groups.items():
        shared = np.frombuffer(mask_bytes, dtype=bool)
        p_values = sign_flip_p_values(matrix[rows][:, shared] - matrix[0][shared])
        for i, p in zip(rows, p_values, strict=True):
            verdict = VERDICT_TIED if p >= ALPHA else VERDICT_BEHIND
            out[i] = (out[i][0], float(p), verdict)
    return out


# ---------------------------------------------------------------------------
# "x better than sampling"
# ---------------------------------------------------------------------------


def mc_reference(submissions: pd.DataFrame, mlp_variance: pd.Series, fallback: dict[str, float], *,
                 mlps_first: bool = False) -> pd.DataFrame:
    """MC@B for each submission, from the variance of the MLPs it was scored on.

    Preference: the submission's own ``mean_avg_variance``; else
    ``mlp_variance[submission_id]``, the mean of its per-MLP ``avg_variance``
    (given only when every one is known); else ``fallback[round]``, the mean
    avg_variance of the round's embedded dataset. ``mlps_first``: the per-MLP mean
    comes before the submission's own, for a ranking of one split, whose scores are
    the means over exactly those MLPs (whestbench's ``mc_at_bm`` must be given the
    variance of the MLPs the score is compared on; the submission's own figure may
    cover all its MLPs). Returns columns ``mc_at_b`` and ``mc_basis`` ("own MLPs",
    "round dataset" or "unknown").
    """

    ids = submissions["submission_id"]
    own = pd.to_numeric(submissions["mean_avg_variance"], errors="coerce").to_numpy(np.float64).copy()
    listed = (ids.isin(mlp_variance.index) & (True if mlps_first else np.isnan(own))).to_numpy()
    own[listed] = ids[listed].map(mlp_variance).to_numpy(np.float64)
    round_codes, tags = pd.factorize(submissions["round"])
    fallback_of = np.array([fallback.get(tag, np.nan) for tag in tags] + [np.nan], np.float64)
    variance = np.where(np.isnan(own), fallback_of[round_codes], own)  # code -1 (no round): the trailing NaN
    basis = np.where(~np.isnan(own), "own MLPs", np.where(~np.isnan(variance), "round dataset", "unknown"))
    # whestbench's MC@B once per distinct (round, variance): most submissions share their round's dataset
    pairs = pd.DataFrame({"round": round_codes, "variance": variance})
    distinct = pairs.drop_duplicates()
    distinct["mc_at_b"] = [get_round(tags[r]).mc_at_bm(v) if r >= 0 and np.isfinite(v) and v > 0 else np.nan
                           for r, v in zip(distinct["round"], distinct["variance"], strict=True)]
    values = pairs.merge(distinct, how="left", on=["round", "variance"])["mc_at_b"].to_numpy(float)
    return pd.DataFrame({"mc_at_b": values, "mc_basis": basis}, index=pd.Index(ids))


def mlp_variance_of(mlp_results: pd.DataFrame) -> pd.Series:
    """Mean per-MLP avg_variance of each submission whose per-MLP variances are all known."""
    if mlp_results.empty:
        return pd.Series(dtype=float)
    grouped = mlp_results.groupby("submission_id")["avg_variance"]
    complete = grouped.count() == grouped.size()
    return grouped.mean()[complete]


# ---------------------------------------------------------------------------
# the leaderboard of one round, as the page shows it
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Reference:
    """The served dataset a round's Monte Carlo figures are drawn from (its readable MLPs)."""

    dataset_key: str
    mean_avg_variance: float
    noise_floor: float
    n_samples: int
    n_mlps: int
    n_damaged: int = 0
    basis: str = ""

    @property
    def note(self) -> str | None:
        """What a page says when the figures leave damaged MLPs out; None when nothing was left out."""
        if not self.n_damaged:
            return None
        return f"MC@B and the noise floor are over {self.basis} of {self.dataset_key}."


def round_reference(round_tag: str) -> Reference | None:
    """The round's embedded dataset (or the first served one of that round) with a readable MLP, if any."""

    for ds in datasets_for_round(round_tag):
        if ds.indices and np.isfinite(ds.mean_avg_variance):
            return Reference(ds.info.key, float(ds.mean_avg_variance), float(ds.noise_floor),
                             int(ds.info.n_samples), len(ds.indices), len(ds.damaged), ds.aggregate_basis())
    return None


def _fallback_variances() -> dict[str, float]:

    out = {}
    for tag in ALL_ROUNDS:
        ref = round_reference(tag)
        if ref is not None:
            out[tag] = ref.mean_avg_variance
    return out


def with_mc_reference(submissions: pd.DataFrame, mlp_variance: pd.Series, *, mlps_first: bool = False) -> pd.DataFrame:
    """Submissions plus ``mc_at_b``, ``mc_basis`` and ``vs_mc`` (MC@B / score: "x better than sampling").

    ``mlps_first``: see ``mc_reference`` (a split's ranking, with that split's per-MLP variances).
    """
    out = submissions.copy()
    if out.empty:
        return out.assign(mc_at_b=pd.Series(dtype=float), mc_basis=pd.Series(dtype=str), vs_mc=pd.Series(dtype=float))
    ref = mc_reference(out, mlp_variance, _fallback_variances(), mlps_first=mlps_first)
    out["mc_at_b"] = ref["mc_at_b"].to_numpy(np.float64)  # mc_reference keeps the submissions' order
    out["mc_basis"] = ref["mc_basis"].to_numpy()
    with np.errstate(divide="ignore", invalid="ignore"):
        out["vs_mc"] = out["mc_at_b"] / out["adjusted_score"]
    return out


def all_points(*, url: str | None = None) -> pd.DataFrame:
    """Every submission with its MC@B reference, cached per store revision."""

    def compute() -> pd.DataFrame:
        return with_mc_reference(_store.submissions_frame(url=url), _store.mlp_variance_summary(url=url))

    return _store.cached("all_points:" + reference_fingerprint(), compute, url=url)


def mlp_variance(*, url: str | None = None) -> pd.Series:
    """``store.mlp_variance_summary``, cached per store revision."""
    return _store.cached("mlp_variance", lambda: _store.mlp_variance_summary(url=url), url=url)


def round_ranking(round_tag: str, *, url: str | None = None) -> pd.DataFrame:
    """The ranking table of one round, cached per store revision."""

    def compute() -> pd.DataFrame:
        subs = _store.submissions_frame(round_tag=round_tag, url=url)
        best = best_per_team(subs)
        mlps = _store.mlp_frame(best["submission_id"].tolist(), splits=(_store.PUBLIC,), url=url)
        table = rank_round(subs, mlps)
        ref = with_mc_reference(best, mlp_variance_of(mlps), mlps_first=True)
        table["vs_mc"] = table["submission_id"].map(ref.set_index("submission_id")["vs_mc"]).astype(float)
        return table

    return _store.cached(f"ranking:{round_tag}:" + reference_fingerprint(), compute, url=url)


def reference_fingerprint() -> str:
    """Changes when a round's reference MLPs change: a bake adds some, a record is damaged or repaired."""
    return ",".join(f"{k}={v:.6e}" for k, v in sorted(_fallback_variances().items()))
