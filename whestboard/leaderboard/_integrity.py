"""What an organizer checks before trusting a board: splits, overfitting, residual arbitrage, history, ties.

* **Splits.** Each per-MLP result belongs to the public board's MLPs, the withheld
  (private) ones or the fresh private rerun of a nominated submission. A split's
  ranking is the public one's rule (each team's best, bootstrap intervals, paired
  tests) on that split's MLPs; the rerun ranks nominated submissions only.
* **Overfitting.** The public and private halves are random draws of the same MLPs,
  so an honest estimator's mean score differs between them only by MLP-to-MLP noise.
  The test: a one-sided permutation test of "private mean score minus public mean
  score" over random relabellings of the pooled per-MLP scores into halves of the
  same sizes (PERMUTATION_DRAWS, seeded); flagged at p < OVERFIT_ALPHA. FLOPs are
  compared on the halves too (ratio of means, coefficients of variation): an
  estimator tuned to the public MLPs spends differently there (the Phase 1 case:
  CV 1.43 on the public 50 against 0.061 on the private, public mean 1.53x the
  private mean).
* **Residual arbitrage.** Where residual wall time is priced (C = F + lambda R), the
  instrumented share F / C says how much of the charged cost flopscope metered. A share
  under RESIDUAL_SHARE_LIMIT alone is no sign (a cheap estimator's interpreter overhead
  gives it): the flag also needs an accuracy its metered FLOPs cannot buy, calibrated on
  the shipped baselines (``_flags``).
* **Meter tampering.** Runs scored here carry, per MLP, what the sandbox saw make flopscope count
  less (``meter_tampering``, whestboard.sandbox._meter); a submission with any such MLP is flagged
  with the count and the first sentence. The score stays the grader's.
* **Ties.** For the top of a ranking, a paired sign-flip test between neighbours,
  and the number of extra MLPs from the same distribution that would separate #1
  from #2 (the Rules' extra-MLP tie-break), sized from their paired differences.

Everything here is a plain function of DataFrames (store.frame / store.mlp_frame
columns) except the ``*_for_round`` readers at the end, which cache per store revision.
"""

from __future__ import annotations

import math
import warnings
from collections import Counter
from datetime import datetime

import numpy as np
import pandas as pd

from whestboard.cache import memoize
from whestboard.leaderboard import _flags, _ranking, _store
from whestboard.leaderboard._flags import RESIDUAL_ACCURACY_FACTOR, RESIDUAL_SHARE_LIMIT
from whestboard.leaderboard._store import ORGANIZER_SPLITS, PUBLIC, SPLITS
from whestboard.rules import (
    UNRECORDED,
    VERDICTS,
    CapMargins,
    Caps,
    cap_margins,
    failures_sentence,
    get_round,
    telemetry_of,
)

#: Private worse than public beyond noise: one-sided permutation p-value under this.
OVERFIT_ALPHA = 0.01
PERMUTATION_DRAWS = 4000
#: FLOPs behave differently on the halves: public/private mean outside [1/limit, limit] ...
FLOPS_MEAN_RATIO_LIMIT = 1.25
#: ... or coefficients of variation further apart than this (the Phase 1 case: 1.43 against 0.061).
FLOPS_CV_GAP_LIMIT = 0.5
#: Ties: neighbours tested at the top of a ranking, and the extra-MLP estimate's test level and power.
TOP_NEIGHBOURS = 5
TIE_ALPHA = _ranking.ALPHA
TIE_POWER = _ranking.POWER
SEED = _ranking.SEED
#: Columns of a board that come from private or rerun MLPs: only the organizer gets them.
ORGANIZER_COLUMNS = ("private_score", "private_ratio", "overfit_p", "overfit", "flops_ratio", "flops_cv_public",
                     "flops_cv_private", "flops_differ", "overfit_text")


# ---------------------------------------------------------------------------
# splits
# ---------------------------------------------------------------------------


def split_submissions(submissions: pd.DataFrame, summary: pd.DataFrame, split: str) -> pd.DataFrame:
    """The submissions as scored on ``split``: aggregates replaced by that split's per-MLP means.

    ``summary`` is ``store.split_summary`` (or the same columns). The public split is the
    submissions' own aggregates; a submission without MLPs of the split is left out, and the
    rerun keeps nominated submissions only.
    """
    if split == PUBLIC:
        return submissions
    part = summary[summary["split"] == split].drop(columns="split").set_index("submission_id")
    chosen = submissions[submissions["submission_id"].isin(part.index)]
    if split == "rerun":
        chosen = chosen[chosen["nominated"].astype(bool)]
    out = chosen.copy()
    for column in part.columns:
        out[column] = out["submission_id"].map(part[column]).astype(part[column].dtype)
    out["status"] = "graded"  # a split with per-MLP results was graded, whatever the public run did
    return out


def split_ranking(submissions: pd.DataFrame, summary: pd.DataFrame, mlp_results: pd.DataFrame,
                  split: str) -> pd.DataFrame:
    """``ranking.rank_round`` on one split's scores and MLPs, plus the neighbour ties at its top."""
    scored = split_submissions(submissions, summary, split)
    rows = mlp_results[mlp_results["split"] == split]
    table = _ranking.rank_round(scored, rows)  # rows in the order of best_per_team, as the matrix's
    best = _ranking.best_per_team(scored)
    return with_neighbour_ties(table, _ranking.score_matrix(best, rows) if len(best) else np.zeros((0, 0)))


# ---------------------------------------------------------------------------
# public against private
# ---------------------------------------------------------------------------


def _membership(n: int, n_private: int, draws: int, seed: int) -> np.ndarray:
    return _membership_table(n, n_private, draws, seed)


@memoize("membership-tables", shared=False, max_entries=16, share=1 / 4, size_of=lambda a: int(a.nbytes))
def _membership_table(n: int, n_private: int, draws: int, seed: int) -> np.ndarray:
    """(draws, n) 0/1 rows, each a random choice of ``n_private`` of the n pooled MLPs."""
    order = np.argsort(np.random.default_rng(seed).random((draws, n)), axis=1)
    table = np.zeros((draws, n))
    np.put_along_axis(table, order[:, :n_private], 1.0, axis=1)
    table.setflags(write=False)
    return table


def overfit_p_values(public: np.ndarray, private: np.ndarray, *, draws: int = PERMUTATION_DRAWS,
                     seed: int = SEED) -> np.ndarray:
    """One-sided p-values that private means exceed public ones by chance, for rows of (k, n_pub), (k, n_priv).

    Under the null the 2 x 50 MLPs are exchangeable: every relabelling of the pooled
    scores into halves of the same sizes is as likely as the real one. p counts the
    relabellings whose "private mean minus public mean" is at least the observed one
    (the observed labelling included, so p >= 1 / (draws + 1)). One table of
    relabellings serves every row: one matrix product for a whole board.
    """
    public, private = np.atleast_2d(public).astype(float), np.atleast_2d(private).astype(float)
    n_pub, n_priv = public.shape[1], private.shape[1]
    pooled = np.concatenate([public, private], axis=1)
    total = pooled.sum(axis=1, keepdims=True)
    members = _membership(n_pub + n_priv, n_priv, draws, seed)
    private_sums = pooled @ members.T
    stats = private_sums / n_priv - (total - private_sums) / n_pub
    observed = private.mean(axis=1) - public.mean(axis=1)
    tolerance = 1e-12 * np.abs(pooled).max(axis=1)
    at_least = (stats >= (observed - tolerance)[:, None]).sum(axis=1)
    return (at_least + 1) / (draws + 1)


def coefficient_of_variation(values: np.ndarray) -> float:
    """Population standard deviation over mean (0 for constant values; NaN without a positive mean)."""
    values = np.asarray(values, dtype=float)
    values = values[np.isfinite(values)]
    if values.size == 0 or values.mean() <= 0:
        return float("nan")
    return float(values.std() / values.mean())


def public_private(mlp_results: pd.DataFrame) -> pd.DataFrame:
    """Per submission with public and private MLPs: both scores, the overfitting test, FLOPs on the halves.

    Columns: submission_id, public_score, private_score, private_ratio (private / public),
    overfit_p, overfit (p < OVERFIT_ALPHA and private worse), flops_ratio (public mean /
    private mean), flops_cv_public, flops_cv_private, flops_differ, overfit_text.
    Submissions with the same numbers of public and private MLPs are tested together, as arrays.
    """
    columns = ["submission_id", "public_score", "private_score", "private_ratio", "overfit_p", "overfit",
               "flops_ratio", "flops_cv_public", "flops_cv_private", "flops_differ", "overfit_text"]
    halves = mlp_results[mlp_results["split"].isin([PUBLIC, "private"])]
    if halves.empty:
        return pd.DataFrame(columns=columns)
    halves = halves.sort_values(["submission_id", "split", "mlp_index"], kind="mergesort")
    counts = halves.groupby(["submission_id", "split"]).size().unstack(fill_value=0)
    counts = counts.reindex(columns=[PUBLIC, "private"], fill_value=0)
    both = counts[(counts[PUBLIC] > 0) & (counts["private"] > 0)]
    parts = []
    for (n_pub, n_priv), shaped in both.groupby([PUBLIC, "private"]):
        ids = shaped.index.to_numpy()
        rows = halves[halves["submission_id"].isin(ids)]  # sorted: each id's private rows, then its public ones
        public, private = rows[rows["split"] == PUBLIC], rows[rows["split"] == "private"]
        parts.append(_halves_table(ids, public["adjusted_score"].to_numpy(float).reshape(len(ids), n_pub),
                                   private["adjusted_score"].to_numpy(float).reshape(len(ids), n_priv),
                                   public["flops_used"].to_numpy(float).reshape(len(ids), n_pub),
                                   private["flops_used"].to_numpy(float).reshape(len(ids), n_priv)))
    if not parts:
        return pd.DataFrame(columns=columns)
    table = pd.concat(parts, ignore_index=True).sort_values("submission_id", ignore_index=True)
    table["overfit_text"] = [_overfit_text(r) for r in table.to_dict("records")]
    return table[columns]


def _halves_table(ids: np.ndarray, public: np.ndarray, private: np.ndarray, public_flops: np.ndarray,
                  private_flops: np.ndarray) -> pd.DataFrame:
    """The public/private columns of submissions whose halves are the rows of these arrays."""
    public_score, private_score = public.mean(axis=1), private.mean(axis=1)
    with np.errstate(divide="ignore", invalid="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a submission without FLOPs: NaN, and no flag
        ratio = np.where(public_score > 0, private_score / public_score, np.inf)
        flops_pub, flops_priv = np.nanmean(public_flops, axis=1), np.nanmean(private_flops, axis=1)
        cv_pub = np.where(flops_pub > 0, np.nanstd(public_flops, axis=1) / flops_pub, np.nan)
        cv_priv = np.where(flops_priv > 0, np.nanstd(private_flops, axis=1) / flops_priv, np.nan)
        flops_ratio = np.where(flops_priv > 0, flops_pub / flops_priv, np.nan)
    p = overfit_p_values(public, private)
    known = np.isfinite(flops_ratio)
    differ = known & ((flops_ratio < 1 / FLOPS_MEAN_RATIO_LIMIT) | (flops_ratio > FLOPS_MEAN_RATIO_LIMIT)
                      | (np.abs(cv_pub - cv_priv) > FLOPS_CV_GAP_LIMIT))
    return pd.DataFrame({
        "submission_id": ids, "public_score": public_score, "private_score": private_score, "private_ratio": ratio,
        "overfit_p": p, "overfit": (p < OVERFIT_ALPHA) & (private_score > public_score), "flops_ratio": flops_ratio,
        "flops_cv_public": cv_pub, "flops_cv_private": cv_priv, "flops_differ": differ,
    })


def _overfit_text(row: dict) -> str:
    parts = []
    if row["overfit"]:
        parts.append(f"private score {row['private_ratio']:.3g}x the public one (permutation p = "
                     f"{row['overfit_p']:.2g} < {OVERFIT_ALPHA:g})")
    if row["flops_differ"]:
        parts.append(f"FLOPs differ on the halves: public mean {row['flops_ratio']:.3g}x the private, CV "
                     f"{row['flops_cv_public']:.3g} public against {row['flops_cv_private']:.3g} private")
    return "; ".join(parts)


# ---------------------------------------------------------------------------
# residual arbitrage
# ---------------------------------------------------------------------------


def residual_share(submissions: pd.DataFrame, mlp_results: pd.DataFrame) -> pd.DataFrame:
    """Instrumented share F / C per submission in rounds that price residual time, with the flag's numbers.

    Columns: submission_id, fc_share (mean F / mean C), fc_share_min (lowest per-MLP F_m / C_m),
    residual_s (mean residual seconds, (C - F) / lambda), flops_cv (spread of F across MLPs),
    flops_identical (F the same on every MLP), frontier_mse and frontier_team (the best final-layer MSE a
    shipped baseline of the round reaches with at most its F, and which), residual (the one decision of
    the flag: share < RESIDUAL_SHARE_LIMIT and final-layer MSE more than RESIDUAL_ACCURACY_FACTOR times
    below that frontier), residual_text. Rounds where C = F (residual time gated, not priced) give NaN
    shares and no flag. ``mlp_results`` holds the MLPs the shares are about (one split).
    """
    columns = ["submission_id", "fc_share", "fc_share_min", "residual_s", "flops_cv", "flops_identical",
               "frontier_mse", "frontier_team", "residual", "residual_text"]
    if submissions.empty:
        return pd.DataFrame(columns=columns)
    keep = [c for c in ("submission_id", "round", "mean_flops_used", "mean_effective_compute", "final_layer_mse")
            if c in submissions.columns]
    out = submissions[keep].copy()
    if "final_layer_mse" not in out.columns:
        out["final_layer_mse"] = np.nan
    lam = out["round"].map(lambda tag: get_round(tag).lambda_flops_per_second).astype(float)
    priced = lam > 0
    flops, compute = out["mean_flops_used"].astype(float), out["mean_effective_compute"].astype(float)
    with np.errstate(divide="ignore", invalid="ignore"):
        out["fc_share"] = np.where(priced & (compute > 0), flops / compute, np.nan)
        out["residual_s"] = np.where(priced, (compute - flops) / lam.where(priced, np.nan), np.nan)
    rows = mlp_results[mlp_results["submission_id"].isin(out["submission_id"])]
    per_mlp = _per_mlp_spread(rows)
    out = out.merge(per_mlp, how="left", left_on="submission_id", right_index=True)
    out["fc_share_min"] = np.where(priced, out["fc_share_min"], np.nan)
    out["flops_identical"] = out["flops_identical"].fillna(False).astype(bool)
    low_share = (out["fc_share"] < RESIDUAL_SHARE_LIMIT).fillna(False).astype(bool)
    frontier = [_flags.honest_frontier(tag, f) if low else None
                for tag, f, low in zip(out["round"], flops, low_share, strict=True)]
    out["frontier_mse"] = [f[0] if f else np.nan for f in frontier]
    out["frontier_team"] = [f[1] if f else "" for f in frontier]
    mse = out["final_layer_mse"].astype(float)
    out["residual"] = (low_share & (mse * RESIDUAL_ACCURACY_FACTOR < out["frontier_mse"])).fillna(False).astype(bool)
    out["residual_text"] = [_residual_text(r) if r["residual"] else "" for r in out.to_dict("records")]
    return out[columns].reset_index(drop=True)


def _per_mlp_spread(rows: pd.DataFrame) -> pd.DataFrame:
    if rows.empty:
        return pd.DataFrame(columns=["fc_share_min", "flops_cv", "flops_identical"])
    flops = rows["flops_used"].astype(float)
    with np.errstate(divide="ignore", invalid="ignore"):
        share = (flops / rows["effective_compute"].astype(float)).where(rows["effective_compute"] > 0)
    grouped = pd.DataFrame({"submission_id": rows["submission_id"], "flops": flops, "share": share}) \
        .groupby("submission_id")
    mean, std = grouped["flops"].mean(), grouped["flops"].std(ddof=0)
    return pd.DataFrame({
        "fc_share_min": grouped["share"].min(),
        "flops_cv": (std / mean).where(mean > 0),
        "flops_identical": (grouped["flops"].max() == grouped["flops"].min()) & (grouped["flops"].count() > 1),
    })


def _residual_text(row: dict) -> str:
    """What the flag means, in its numbers: where the charged compute went, and the accuracy it bought."""
    ratio = row["frontier_mse"] / row["final_layer_mse"] if row["final_layer_mse"] > 0 else math.inf
    spread = ("F identical on every MLP" if row["flops_identical"] else
              f"F varies by CV {row['flops_cv']:.2g} across MLPs" if row["flops_cv"] == row["flops_cv"] else "")
    return (f"F / C = {row['fc_share']:.2g} (< {RESIDUAL_SHARE_LIMIT:g}): {row['residual_s']:.3g} s of residual "
            f"wall time per MLP against {row['mean_flops_used']:.3g} metered FLOPs"
            + (f", {spread}" if spread else "")
            + f"; its final-layer MSE {row['final_layer_mse']:.3g} is {ratio:.3g}x below the best a shipped baseline "
              f"reaches with that many FLOPs ({row['frontier_team']}: {row['frontier_mse']:.3g}), so its accuracy "
              "came from work outside flopscope's meter")


def per_mlp_share(mlp_results: pd.DataFrame) -> pd.Series:
    """F_m / C_m of every per-MLP row (NaN where C_m is unknown or 0): what a per-MLP view colours by."""
    compute = mlp_results["effective_compute"].astype(float)
    return (mlp_results["flops_used"].astype(float) / compute).where(compute > 0)


def stored_margins(mlp_results: pd.DataFrame, round_tag: str) -> CapMargins:
    """A submission's stored per-MLP rows held to its round's caps (``rules.cap_margins``): what a team's
    panel shows of its submission (the times a grader record or a run report brought; none from a table
    without them)."""
    return cap_margins([telemetry_of(row) for row in mlp_results.to_dict("records")], Caps.of(get_round(round_tag)))


# ---------------------------------------------------------------------------
# history and failures
# ---------------------------------------------------------------------------


def meter_tampering(mlp_results: pd.DataFrame) -> pd.DataFrame:
    """Per submission with a flagged MLP: ``meter`` (True) and ``meter_text`` (how many MLPs, the first sentence)."""
    if "meter_tampering" not in mlp_results.columns:
        return pd.DataFrame(columns=["submission_id", "meter", "meter_text"])
    flagged = mlp_results[mlp_results["meter_tampering"].notna() & (mlp_results["meter_tampering"] != "")]
    rows = []
    for sid, group in flagged.groupby("submission_id", sort=True):
        total = int((mlp_results["submission_id"] == sid).sum())
        rows.append({"submission_id": sid, "meter": True,
                     "meter_text": f"meter tampering on {len(group)} of {total} MLP(s): "
                                   f"{group['meter_tampering'].iloc[0]}"})
    return pd.DataFrame(rows, columns=["submission_id", "meter", "meter_text"])


def team_history(submissions: pd.DataFrame, team: str) -> pd.DataFrame:
    """A team's graded submissions by time with its best-so-far score (what a step line draws)."""
    rows = submissions[(submissions["team"] == team) & (submissions["status"] == "graded")
                       & np.isfinite(submissions["adjusted_score"].astype(float))]
    rows = rows.sort_values(["submitted_at", "submission_id"], kind="mergesort")
    out = rows[["submission_id", "round", "submitted_at", "adjusted_score"]].reset_index(drop=True)
    out["best_so_far"] = out.groupby("round")["adjusted_score"].cummin()
    out["improved"] = out["adjusted_score"] == out["best_so_far"]
    return out


def failure_breakdown(mlp_results: pd.DataFrame) -> dict[str, dict[str, int]]:
    """Failed MLPs per submission by kind (the failure vocabulary's verdicts, then UNRECORDED)."""
    failed = mlp_results[mlp_results["failed"].astype(bool)]
    order = {kind: i for i, kind in enumerate((*VERDICTS, UNRECORDED))}
    out: dict[str, dict[str, int]] = {}
    for sid, kinds in failed.groupby("submission_id")["failure"]:
        counts = Counter(kind if isinstance(kind, str) and kind else UNRECORDED for kind in kinds)
        out[str(sid)] = dict(sorted(counts.items(), key=lambda item: order.get(item[0], len(order))))
    return out


def breakdown_text(counts: dict[str, int]) -> str:
    return ", ".join(f"{n} {kind}" for kind, n in counts.items())


def failure_sentences(submission_ids: list[str], *, url: str | None = None) -> dict[str, str]:
    """What failed in each of these submissions, from its public per-MLP rows: ``"32 of 32 MLPs failed:
    combined budget"`` (``rules.failures_sentence``), for the figures that draw a failed submission as such.
    Submissions without per-MLP rows, or without a failed one, are left out."""
    if not submission_ids:
        return {}
    rows = _store.mlp_frame(list(submission_ids), splits=(PUBLIC,), url=url)
    totals = rows.groupby("submission_id").size()
    return {sid: failures_sentence([kind for kind, n in counts.items() for _ in range(n)], int(totals[sid]))
            for sid, counts in failure_breakdown(rows).items()}


# ---------------------------------------------------------------------------
# ties at the top
# ---------------------------------------------------------------------------


def extra_mlps_to_separate(differences: np.ndarray, *, alpha: float = TIE_ALPHA, power: float = TIE_POWER) -> float:
    """Extra paired MLPs (beyond those in ``differences``) that separate two submissions.

    With n MLPs, a paired test at level ``alpha`` (two-sided) rejects with probability
    ``power`` when sqrt(n) |mu| / sigma = z(1 - alpha/2) + z(power); mu and sigma are the
    mean and standard deviation of the per-MLP differences seen so far. So
    n = ((z(1 - alpha/2) + z(power)) sigma / |mu|)^2, and never fewer than the sign-flip test
    needs to reach ``alpha`` at all (its smallest p-value is 2 / 2^n: 6 MLPs at 5%). The extra
    MLPs are n minus those already compared (0 when they already suffice; inf when the
    differences average to 0).
    """
    d = np.asarray(differences, dtype=float)
    d = d[np.isfinite(d)]
    total = _ranking.mlps_needed(d, alpha=alpha, power=power)
    if not math.isfinite(total):
        return total
    needed = max(math.ceil(total), math.ceil(math.log2(2 / alpha)))
    return float(max(0, needed - d.size))


def with_neighbour_ties(table: pd.DataFrame, matrix: np.ndarray, *, top: int = TOP_NEIGHBOURS) -> pd.DataFrame:
    """Adds ``p_next`` (paired test against the next-ranked row), ``tied_next`` and, on #1, ``extra_mlps``.

    ``matrix`` is ``ranking.score_matrix`` of the table's rows in the table's order.
    """
    out = table.copy()
    out["p_next"] = np.nan
    out["tied_next"] = False
    out["extra_mlps"] = np.nan
    order = np.argsort(out["adjusted_score"].to_numpy(float), kind="mergesort") if len(out) else []
    for upper, lower in zip(order[: top - 1], order[1:top], strict=False):
        shared = ~np.isnan(matrix[upper]) & ~np.isnan(matrix[lower])
        if not shared.any():
            continue
        d = matrix[lower][shared] - matrix[upper][shared]
        p = _ranking.sign_flip_p_value(d)
        out.iloc[upper, out.columns.get_loc("p_next")] = p
        out.iloc[upper, out.columns.get_loc("tied_next")] = bool(p >= TIE_ALPHA)
        if upper == order[0]:
            out.iloc[upper, out.columns.get_loc("extra_mlps")] = extra_mlps_to_separate(d)
    return out


# ---------------------------------------------------------------------------
# a round's board, from the store (cached per revision)
# ---------------------------------------------------------------------------


def integrity_board(round_tag: str, split: str = PUBLIC, *, url: str | None = None) -> pd.DataFrame:
    """The ranking of one round and split with its flags, ties and failures: nothing from other splits.

    Only the split's own per-MLP rows are read. The private and rerun splits are the
    organizer's (``require_split_access``); ``organizer_board`` adds the public-against-private
    columns.
    """
    if split not in SPLITS:
        raise ValueError(f"split must be one of {', '.join(SPLITS)}, not {split!r}")

    def compute() -> pd.DataFrame:
        summary = (_store.split_summary([split], url=url) if split != PUBLIC
                   else pd.DataFrame(columns=["submission_id", "split"]))
        # Only the submissions a best can come from: each team's lowest public score (found by the
        # database), or those with results on the split; never the whole field of the round.
        subs = (_store.best_candidates(round_tag, url=url) if split == PUBLIC
                else _store.submissions_frame(round_tag=round_tag, ids=summary["submission_id"].unique().tolist(), url=url))
        best = _ranking.best_per_team(split_submissions(subs, summary, split))
        mlps = _store.mlp_frame(best["submission_id"].tolist(), splits=(split,), url=url)
        table = split_ranking(subs, summary, mlps, split)
        table = table.merge(residual_share(best, mlps), how="left", on="submission_id")
        table = table.merge(meter_tampering(mlps), how="left", on="submission_id")
        # the split's own MLPs: the score ranked is their mean, so MC@B is of their variance
        reference = _ranking.with_mc_reference(best, _ranking.mlp_variance_of(mlps), mlps_first=True)
        table["vs_mc"] = table["submission_id"].map(reference.set_index("submission_id")["vs_mc"]).astype(float)
        failures = failure_breakdown(mlps)
        table["failures"] = table["submission_id"].map(lambda sid: breakdown_text(failures.get(sid, {})))
        for flag in ("residual", "tied_next", "meter"):
            table[flag] = table[flag].fillna(False).astype(bool)
        for text in ("residual_text", "meter_text"):
            table[text] = table[text].fillna("")
        return table

    return _store.cached(f"integrity:{round_tag}:{split}:" + _ranking.reference_fingerprint(), compute, url=url)


def organizer_board(round_tag: str, split: str = PUBLIC, *, url: str | None = None) -> pd.DataFrame:
    """``board`` plus, for every ranked submission with private MLPs, the public-against-private columns.

    Only for a caller that has checked the organizer token: every added column
    (ORGANIZER_COLUMNS) is computed from withheld MLPs.
    """

    def compute() -> pd.DataFrame:
        table = integrity_board(round_tag, split, url=url)
        mlps = _store.mlp_frame(table["submission_id"].tolist(), splits=(PUBLIC, "private"), url=url)
        halves = public_private(mlps).drop(columns=["public_score"])
        out = table.merge(halves, how="left", on="submission_id")
        for flag in ("overfit", "flops_differ"):
            out[flag] = out[flag].fillna(False).astype(bool)
        out["overfit_text"] = out["overfit_text"].fillna("")
        return out

    return _store.cached(f"integrity-organizer:{round_tag}:{split}:" + _ranking.reference_fingerprint(), compute,
                        url=url)


def viewer_board(round_tag: str, split: str, *, organizer: bool, url: str | None = None) -> pd.DataFrame:
    """The board a viewer may see: the organizer's with every column, anyone else's public only.

    Raises PermissionError for the private or rerun split without the organizer token.
    """
    require_split_access(split, organizer)
    if organizer:
        return organizer_board(round_tag, split, url=url)
    return public_columns(integrity_board(round_tag, split, url=url))


def public_columns(table: pd.DataFrame) -> pd.DataFrame:
    """A board without anything computed from private or rerun MLPs."""
    return table.drop(columns=[c for c in ORGANIZER_COLUMNS if c in table.columns])


def require_split_access(split: str, organizer: bool) -> None:
    """The private and rerun splits are the organizer's: raise PermissionError otherwise."""
    if split in ORGANIZER_SPLITS and not organizer:
        raise PermissionError(f"the {split} split is shown only with the organizer token")


def json_records(table: pd.DataFrame) -> list[dict]:
    """A board's rows as JSON-safe dicts (NaN and infinities as None, times in ISO 8601 UTC)."""
    out = []
    for row in table.to_dict("records"):
        clean = {}
        for key, value in row.items():
            if isinstance(value, pd.Timestamp | datetime):
                value = pd.Timestamp(value).tz_convert("UTC").isoformat()
            elif isinstance(value, np.bool_ | bool):
                value = bool(value)
            elif isinstance(value, np.integer):
                value = int(value)
            elif isinstance(value, float | np.floating):
                value = float(value) if math.isfinite(value) else None
            elif value is pd.NA:
                value = None
            clean[key] = value
        out.append(clean)
    return out
