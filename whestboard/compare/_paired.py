"""Paired statistics of two estimators scored on the same MLPs: is A better than B, and how sure is that?

Everything works on the per-MLP differences ``d_m = A_m - B_m`` over the shared MLPs. MLPs differ
from each other by orders of magnitude, two estimators on one MLP far less, so the spread of ``d``
is what limits a verdict, not the spread of either side.

* The 95% interval of the mean difference (and of the geometric-mean ratio, from the mean log
  ratio) is a percentile bootstrap over MLPs: ``whestboard.leaderboard._ranking.bootstrap_interval``,
  the leaderboard's own, with its fixed seed.
* The p-value is the leaderboard's sign-flip test (exact up to 16 MLPs).
* "MLPs needed": the smallest M for which a two-sided 95% test of the mean difference has 80% power
  when the true difference is the observed one and the per-MLP differences spread as observed,
  ``M = ((z_0.975 + z_0.8) sd / |mean|)^2`` (normal approximation).
* Below the reference floor: each MSE is measured against one Monte Carlo reference ``y + e`` with
  ``Var(e_i) = sigma_i^2 / N_ref``. In ``MSE_A - MSE_B`` the ``e^2`` terms cancel exactly and what
  is left of the noise is ``-(2/n) sum_i e_i (a_i - b_i)``, mean zero, with variance
  ``(4/n^2) sum_i (a_i - b_i)^2 sigma_i^2 / N_ref``. The reference stores only the mean variance
  ``avg_variance``, so ``sigma_i^2`` is approximated by it (the approximation the page states).
  That part of the standard error is set beside the part from MLP-to-MLP spread; whichever is
  larger limits the interval.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np

from whestboard.leaderboard import (
    ALPHA,
    BOOTSTRAP_DRAWS,
    SEED,
    bootstrap_interval,
    mlps_needed,
    sign_flip_p_value,
)

#: The size of a public suite, shown beside "MLPs needed".
PUBLIC_SUITE_MLPS = 50


def fewest_mlps_for_a_verdict(alpha: float = ALPHA) -> int:
    """The fewest MLPs on which the paired test can say anything at level ``alpha``.

    The exact sign-flip test's smallest p-value on n MLPs is 2 / 2^n (the observed signs and their
    mirror): with fewer MLPs than this it cannot reject whatever the data, and a bootstrap interval
    over a handful of differences is their min-max, no 95% interval at all.
    """
    n = 1
    while 2.0 / 2.0**n >= alpha:
        n += 1
    return n


#: Below this many shared MLPs a comparison says so instead of giving a verdict (6 at the 95% level).
FEWEST_MLPS_FOR_A_VERDICT = fewest_mlps_for_a_verdict()

LIMIT_NOISE = "reference noise"
LIMIT_SPREAD = "MLP-to-MLP spread"


@dataclass(frozen=True)
class PairedStat:
    """One metric (scores or final-layer MSEs) of A against B on their shared MLPs."""

    metric: str
    n: int
    mean_a: float
    mean_b: float
    mean_difference: float  # mean of A_m - B_m (negative: A is lower, better)
    ci_low: float
    ci_high: float
    standard_error: float  # sd(A_m - B_m) / sqrt(n)
    ratio: float  # geometric mean of A_m / B_m
    ratio_low: float
    ratio_high: float
    wins: int  # MLPs where A is strictly lower
    losses: int
    ties: int
    p_value: float
    mlps_needed: float

    @property
    def verdict_possible(self) -> bool:
        """Enough shared MLPs for the test to decide anything (:data:`FEWEST_MLPS_FOR_A_VERDICT`)."""
        return self.n >= FEWEST_MLPS_FOR_A_VERDICT

    @property
    def resolved(self) -> bool:
        """Enough MLPs for a verdict, and the 95% interval excludes zero."""
        return self.verdict_possible and (self.ci_high < 0 or self.ci_low > 0)

    @property
    def mlps_to_ask_for(self) -> int | None:
        """Shared MLPs to score before a verdict can rest on them: the fewest a verdict needs, or the power
        estimate when that is larger; None when no count would resolve it (no difference, or no data)."""
        if not math.isfinite(self.mlps_needed):
            return FEWEST_MLPS_FOR_A_VERDICT if self.n < FEWEST_MLPS_FOR_A_VERDICT else None
        return max(FEWEST_MLPS_FOR_A_VERDICT, math.ceil(self.mlps_needed))

    @property
    def verdict(self) -> str:
        """``too few MLPs``, ``A lower``, ``B lower`` or ``not resolved``."""
        if not self.verdict_possible:
            return "too few MLPs"
        if self.ci_high < 0:
            return "A lower"
        return "B lower" if self.ci_low > 0 else "not resolved"

    def as_dict(self) -> dict:
        return {**asdict(self), "resolved": self.resolved, "verdict": self.verdict,
                "verdict_possible": self.verdict_possible, "fewest_mlps_for_a_verdict": FEWEST_MLPS_FOR_A_VERDICT,
                "mlps_to_ask_for": self.mlps_to_ask_for}


def too_few_sentence(stat: dict, name: str) -> str:
    """What a comparison on too few MLPs says instead of a verdict (the CLI and the page)."""
    ask = stat.get("mlps_to_ask_for") or stat["fewest_mlps_for_a_verdict"]
    return (f"No verdict on {name}: {stat['n']} shared MLP(s), and a paired test cannot reach 95% on fewer than "
            f"{stat['fewest_mlps_for_a_verdict']} (its smallest p-value is 2 / 2^n); score both on at least "
            f"{ask} shared MLPs.")


def verdict_sentence(stat: dict, name: str) -> str:
    """The one sentence a comparison says of one metric (the page's card, the CLI's line): no verdict on too
    few MLPs, else who is lower when the 95% interval excludes 0, else "not resolved" with the MLPs to ask for."""
    if not stat.get("verdict_possible", True):
        return too_few_sentence(stat, name)
    low, high = stat["ci_low"], stat["ci_high"]
    if high < 0:
        return f"A's {name} is lower (better): the 95% interval of A - B lies below 0."
    if low > 0:
        return f"B's {name} is lower (better): the 95% interval of A - B lies above 0."
    ask = stat.get("mlps_to_ask_for")
    more = (f"; about {ask:,} shared MLPs would resolve a difference this size (95% test, 80% power)"
            if ask is not None and ask > stat["n"] else "")
    return f"Not resolved: the 95% interval of A - B on {name} includes 0{more}."


def mlps_needed_text(stat: dict) -> str:
    """"MLPs needed" as every view shows it: ``mlps_to_ask_for``, the power estimate but never fewer than a
    verdict needs (so it never says 1 beside "cannot reach 95% on fewer than 6"); "never" without a difference."""
    ask = stat.get("mlps_to_ask_for")
    if ask is not None:
        return f"{ask:,}"
    return "never (no difference observed)" if stat.get("n") else "—"


def paired_stat(a: np.ndarray, b: np.ndarray, *, metric: str, draws: int = BOOTSTRAP_DRAWS,
                seed: int = SEED) -> PairedStat:
    """The paired verdict of two aligned per-MLP arrays (position m is the same MLP on both sides)."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if a.shape != b.shape or a.ndim != 1:
        raise ValueError(f"paired values must be two aligned 1-d arrays, got shapes {a.shape} and {b.shape}")
    d = a - b
    n = int(d.size)
    nan = float("nan")
    if n == 0:
        return PairedStat(metric, 0, nan, nan, nan, nan, nan, nan, nan, nan, nan, 0, 0, 0, nan, nan)
    low, high = bootstrap_interval(d, draws=draws, seed=seed)
    ratio, ratio_low, ratio_high = geometric_ratio(a, b, draws=draws, seed=seed)
    return PairedStat(
        metric=metric, n=n, mean_a=float(a.mean()), mean_b=float(b.mean()), mean_difference=float(d.mean()),
        ci_low=low, ci_high=high, standard_error=float(d.std(ddof=1) / math.sqrt(n)) if n > 1 else nan,
        ratio=ratio, ratio_low=ratio_low, ratio_high=ratio_high,
        wins=int((d < 0).sum()), losses=int((d > 0).sum()), ties=int((d == 0).sum()),
        p_value=sign_flip_p_value(d), mlps_needed=mlps_needed(d),
    )


def geometric_ratio(a: np.ndarray, b: np.ndarray, *, draws: int = BOOTSTRAP_DRAWS,
                    seed: int = SEED) -> tuple[float, float, float]:
    """Geometric mean of ``a_m / b_m`` and its bootstrap interval, over MLPs where both are positive.

    A ratio of means is dominated by the few hardest MLPs; the geometric mean weighs every MLP alike,
    which is how a participant reads "A is 20% better".
    """
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    both = (a > 0) & (b > 0) & np.isfinite(a) & np.isfinite(b)
    if not both.any():
        return float("nan"), float("nan"), float("nan")
    logs = np.log(a[both]) - np.log(b[both])
    low, high = bootstrap_interval(logs, draws=draws, seed=seed)
    return float(np.exp(logs.mean())), float(np.exp(low)), float(np.exp(high))


# ---------------------------------------------------------------------------
# the reference's own noise in a paired MSE difference
# ---------------------------------------------------------------------------


def reference_noise_variance(final_a: np.ndarray, final_b: np.ndarray, avg_variance: float, n_ref: int) -> float:
    """Variance the reference's noise adds to one MLP's ``MSE_A - MSE_B``.

    ``(4/n^2) sum_i (a_i - b_i)^2 sigma_i^2 / N_ref`` with ``sigma_i^2 ~ avg_variance`` (the only
    variance the reference stores): two estimators that predict alike share the reference's error
    and it cancels; it is their disagreement that the noise can tip one way or the other.
    """
    gap = np.asarray(final_a, dtype=np.float64) - np.asarray(final_b, dtype=np.float64)
    n = gap.size
    return 4.0 * float(np.dot(gap, gap)) * float(avg_variance) / (n * n * float(n_ref))


@dataclass(frozen=True)
class NoiseSplit:
    """The standard error of the mean paired MSE difference, taken apart."""

    n: int
    total: float  # sd of the observed differences / sqrt(n): everything
    reference: float  # from the reference's noise (approximation above)
    spread: float  # sqrt(total^2 - reference^2): MLP-to-MLP spread of the true differences
    floor: float  # mean avg_variance / N_ref over the shared MLPs: what no single MSE resolves

    @property
    def limited_by(self) -> str:
        return LIMIT_NOISE if self.reference >= self.spread else LIMIT_SPREAD

    @property
    def reference_share(self) -> float:
        """Share of the interval's variance the reference's noise accounts for (0..1)."""
        return min(1.0, self.reference**2 / self.total**2) if self.total > 0 else float("nan")

    def sentence(self, mean_difference: float) -> str:
        """The verdict on what limits the interval, in words."""
        if not math.isfinite(self.total):
            return "Too few shared MLPs to take the interval apart."
        below = abs(mean_difference) < self.floor
        where = (f"The difference ({mean_difference:.3g}) is below the reference's noise floor ({self.floor:.3g}), "
                 "which no single MSE can cross; the paired difference still can, because the reference's "
                 "noise cancels in it. " if below else "")
        return (f"{where}The reference's noise accounts for {self.reference_share:.0%} of the interval's variance "
                f"(standard error {self.reference:.3g} of {self.total:.3g}); the interval is limited by "
                f"{self.limited_by}" + (": more MLPs narrow it." if self.limited_by == LIMIT_SPREAD
                                        else ": a reference with more samples narrows it."))

    def as_dict(self, mean_difference: float) -> dict:
        return {**asdict(self), "limited_by": self.limited_by, "reference_share": self.reference_share,
                "sentence": self.sentence(mean_difference)}


def noise_split(differences: np.ndarray, noise_variances: np.ndarray, floors: np.ndarray) -> NoiseSplit:
    """Split the standard error of ``mean(differences)`` into reference noise and MLP-to-MLP spread.

    ``noise_variances[m]`` is ``reference_noise_variance`` of MLP m, ``floors[m]`` its
    avg_variance / N_ref. The noise of different MLPs' references is independent, so the mean's noise
    variance is ``sum / n^2``; it is part of the observed spread, and the rest is the spread of the
    true differences across MLPs.
    """
    d = np.asarray(differences, dtype=np.float64)
    n = int(d.size)
    floor = float(np.mean(floors)) if n else float("nan")
    if n < 2:
        return NoiseSplit(n, float("nan"), float("nan"), float("nan"), floor)
    total = float(d.std(ddof=1) / math.sqrt(n))
    reference = math.sqrt(float(np.sum(noise_variances))) / n
    spread = math.sqrt(max(0.0, total * total - reference * reference))
    return NoiseSplit(n, total, reference, spread, floor)
