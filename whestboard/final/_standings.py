"""Standings by the official rules, from per-MLP results: rank by score, then decide each neighbour pair.

Teams are ranked by the round's score (mean ``adjusted_final_layer_score``) on the rerun suite. Each
neighbour pair (upper, lower) is then put in one of three classes, on the MLPs both were scored on:

* **different**: the paired t-test on the per-MLP log score ratios ``log(s_lower / s_upper)``
  (:data:`PAIR_TEST`) rejects equal geometric means at ``ALPHA``, in the direction the scores order them.
  The ranks follow the score; no tie-break.
* **close**: the scores are equal within the reference noise (:func:`equal_within_noise`), or the
  95% t-interval of the geometric-mean ratio lies inside ``[1/CLOSE_RATIO, CLOSE_RATIO]``. Only these
  pairs are "statistically close" in the Rules' sense and go through the tie-break chain.
* **undecided**: neither; a test on few MLPs that lacks power lands here, never in "close".

Chains of neighbours that are not different form a group, which gets extra MLPs continuing the suite
(as many as the test would need, at most ``--max-extra-mlps``). On every MLP the group's teams were
scored on, each neighbour pair is decided by the first of: the score (the test rejects now), all-layer
MSE, effective compute (the same test, for close pairs only), else ``shared`` when the scores are equal
within the noise (at once for identical per-MLP results, which only a timing could split), else ``unresolved`` ("unresolved at N MLPs; about M needed"): the score order stays
and both ranks are provisional. A team that failed on an MLP therefore shares a rank only with a team
whose scores equal its own within the noise.

Assumptions of the test: the MLPs are independent draws (the suite protocol's), and the per-MLP log
ratios are roughly normal; Student t with n - 1 degrees of freedom, exact for integer degrees.
A heavy tail (a failed MLP scores ~1e5x worse) widens the interval, so it costs power, not false calls.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass

import numpy as np

from whestboard.leaderboard import ALPHA, TIE_POWER, mlps_needed

PAIR_TEST = "paired t-test on per-MLP log score ratios"
#: A pair is close when the 95% interval of its geometric-mean score ratio lies inside [1/CLOSE_RATIO, CLOSE_RATIO].
CLOSE_RATIO = 1.05
#: The fewest MLPs a group is sized to (a t-test on 2 MLPs has one degree of freedom and hardly any power).
MIN_TEST_MLPS = 3
SCORE = "adjusted_final_layer_score"
CRITERIA = (("all_layer_mse", "all_layers_mse"), ("effective_compute", "effective_compute"))
DIFFERENT, CLOSE, UNDECIDED = "different", "close", "undecided"
#: What a group's record says decided it, weakest outcome first.
GROUP_OUTCOMES = ("unresolved", "shared", "effective_compute", "all_layer_mse", "extra_mlps", "score")


def column(entries: Sequence[dict], name: str) -> np.ndarray:
    return np.array([float(e.get(name) or 0.0) for e in entries], dtype=np.float64)


def summary(entries: Sequence[dict]) -> dict:
    """A team's numbers on these MLPs, means as the grader forms them."""
    return {"score": float(np.mean(column(entries, SCORE))),
            "final_layer_mse": float(np.mean(column(entries, "final_layer_mse"))),
            "all_layer_mse": float(np.mean(column(entries, "all_layers_mse"))),
            "effective_compute": float(np.mean(column(entries, "effective_compute"))),
            "n_mlps": len(entries), "n_failed_mlps": sum(1 for e in entries if e.get("failed"))}


# ---------------------------------------------------------------------------
# the test
# ---------------------------------------------------------------------------


def t_two_sided_p(t: float, df: int) -> float:
    """P(|T| >= |t|) for Student t with integer ``df`` (Abramowitz & Stegun 26.7.3 and 26.7.4, exact sums)."""
    if math.isinf(t):
        return 0.0
    theta = math.atan(abs(t) / math.sqrt(df))
    c2, s = math.cos(theta) ** 2, math.sin(theta)
    if df % 2 == 0:
        term = total = 1.0
        for k in range(2, df, 2):
            term *= c2 * (k - 1) / k
            total += term
        inside = s * total
    else:
        term, total = 1.0, 1.0 if df > 1 else 0.0
        for k in range(3, df, 2):
            term *= c2 * (k - 1) / k
            total += term
        inside = 2 / math.pi * (theta + s * math.cos(theta) * total)
    return min(1.0, max(0.0, 1.0 - inside))


@functools.cache
def t_quantile(df: int, alpha: float = ALPHA) -> float:
    """The two-sided ``1 - alpha`` quantile of Student t with ``df`` degrees of freedom (bisection on the p-value)."""
    low, high = 0.0, 1e4
    for _ in range(100):
        mid = (low + high) / 2
        low, high = (mid, high) if t_two_sided_p(mid, df) > alpha else (low, mid)
    return high


@dataclass(frozen=True)
class RatioTest:
    """The paired t-test of one metric, ``lower`` against ``upper``, on their shared MLPs."""

    metric: str
    n_mlps: int
    mean_log_ratio: float  # mean of log(lower / upper): > 0 when the lower team is worse
    p_value: float | None  # None: fewer than 2 MLPs, or a zero on one side only (no log ratio)
    ratio: float  # geometric mean of lower / upper
    ratio_low: float
    ratio_high: float
    mlps_needed: float  # MLPs in all for 80% power at the observed ratio and spread (inf: none would do)

    def as_dict(self) -> dict:
        return {"test": PAIR_TEST, **asdict(self)}


def log_ratios(upper: np.ndarray, lower: np.ndarray) -> np.ndarray | None:
    """``log(lower / upper)`` per MLP (0 where both are equal, zeros included); None when some MLP has a
    zero on one side only, where no ratio exists."""
    same = upper == lower
    if np.any(~same & ((upper <= 0) | (lower <= 0))):
        return None
    out = np.zeros(upper.shape)
    out[~same] = np.log(lower[~same]) - np.log(upper[~same])
    return out


def ratio_test(upper: Sequence[dict], lower: Sequence[dict], metric: str) -> RatioTest:
    """The test of ``metric`` between two teams on the same MLPs (aligned entries)."""
    n = len(upper)
    logs = log_ratios(column(upper, metric), column(lower, metric))
    nan = float("nan")
    if logs is None or n < 2:
        mean = float(logs.mean()) if logs is not None and n else nan
        return RatioTest(metric, n, mean, None, math.exp(mean) if math.isfinite(mean) else nan, nan, nan, nan)
    mean, sd = float(logs.mean()), float(logs.std(ddof=1))
    se = sd / math.sqrt(n)
    if se == 0.0:
        p = 1.0 if mean == 0.0 else 0.0
    else:
        p = t_two_sided_p(mean / se, n - 1)
    half = t_quantile(n - 1) * se
    return RatioTest(metric, n, mean, p, math.exp(mean), math.exp(mean - half), math.exp(mean + half),
                     mlps_needed(logs, alpha=ALPHA, power=TIE_POWER))


# ---------------------------------------------------------------------------
# the reference noise
# ---------------------------------------------------------------------------


def noise_band(upper: Sequence[dict], lower: Sequence[dict]) -> float:
    """The reference noise on the score scale: per MLP its floor avg_variance / K (``noise_floor``) times the
    larger of the two score multipliers, averaged over the MLPs."""
    floors = column(upper, "noise_floor")
    multipliers = np.maximum(column(upper, "score_multiplier"), column(lower, "score_multiplier"))
    return float(np.mean(floors * np.where(multipliers > 0, multipliers, 1.0))) if len(upper) else 0.0


def equal_within_noise(upper: Sequence[dict], lower: Sequence[dict]) -> bool:
    """Identical per-MLP scores, or the 95% t-interval of the mean score difference inside +- the noise band.

    Below the references' noise floor two estimators cannot be told apart by the suite (docs/leaderboard.md,
    "The noise floor"); exact copies are the plain case."""
    d = column(lower, SCORE) - column(upper, SCORE)
    if d.size and not d.any():
        return True
    if d.size < 2:
        return False
    half = t_quantile(d.size - 1) * float(d.std(ddof=1)) / math.sqrt(d.size)
    band = noise_band(upper, lower)
    return -band <= d.mean() - half and d.mean() + half <= band


# ---------------------------------------------------------------------------
# neighbours
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Verdict:
    """A neighbour pair's class on some MLPs (:data:`DIFFERENT`, :data:`CLOSE`, :data:`UNDECIDED`)."""

    kind: str
    score: RatioTest
    equal: bool  # equal within the reference noise


def inside_margin(test: RatioTest) -> bool:
    """The 95% interval of the geometric-mean ratio lies inside [1/CLOSE_RATIO, CLOSE_RATIO]."""
    return test.p_value is not None and 1 / CLOSE_RATIO <= test.ratio_low and test.ratio_high <= CLOSE_RATIO


def classify(upper: Sequence[dict], lower: Sequence[dict]) -> Verdict:
    """Different, close or undecided (the module's docstring), ``upper`` being the lower mean score."""
    test = ratio_test(upper, lower, SCORE)
    if equal_within_noise(upper, lower):
        return Verdict(CLOSE, test, True)
    gap = float(np.mean(column(lower, SCORE) - column(upper, SCORE)))
    agrees = test.mean_log_ratio * gap > 0  # the per-MLP ratios point the way the means do
    if test.p_value is not None and test.p_value < ALPHA and agrees:
        return Verdict(DIFFERENT, test, False)
    return Verdict(CLOSE if inside_margin(test) else UNDECIDED, test, False)


def groups(order: Sequence[str], base: dict[str, list[dict]]) -> tuple[list[list[str]], dict[tuple[str, str], Verdict]]:
    """Runs of ranked neighbours that are not different, and every neighbour pair's verdict on ``base``."""
    verdicts = {(u, lo): classify(base[u], base[lo]) for u, lo in zip(order, order[1:], strict=False)}
    out: list[list[str]] = []
    current = [order[0]]
    for upper, lower in zip(order, order[1:], strict=False):
        if verdicts[upper, lower].kind == DIFFERENT:
            if len(current) > 1:
                out.append(current)
            current = [lower]
        else:
            current.append(lower)
    if len(current) > 1:
        out.append(current)
    return out, verdicts


def extra_needed(group: Sequence[str], base: dict[str, list[dict]], limit: int) -> int:
    """Extra MLPs the test would need to separate the group's hardest pair, at most ``limit`` (an exact tie
    asks for infinitely many, so it gets the bound)."""
    most = 0
    for upper, lower in zip(group, group[1:], strict=False):
        test = ratio_test(base[upper], base[lower], SCORE)
        total = test.mlps_needed
        needed = limit if not math.isfinite(total) else max(math.ceil(total), MIN_TEST_MLPS) - test.n_mlps
        most = max(most, needed)
    return int(min(max(most, 0), limit))


@dataclass
class PairDecision:
    """How two neighbours were ordered, on which MLPs, by what, with every p-value looked at."""

    upper: str
    lower: str
    decided_by: str  # score, extra_mlps, all_layer_mse, effective_compute, shared or unresolved
    n_mlps: int
    test: RatioTest
    p_values: dict[str, float | None]
    reason: str
    mlps_needed: int | None = None  # unresolved only: about how many MLPs in all would decide it

    @property
    def provisional(self) -> bool:
        return self.decided_by == "unresolved"

    def as_dict(self) -> dict:
        return {"upper": self.upper, "lower": self.lower, "decided_by": self.decided_by, "test": PAIR_TEST,
                "p_value": self.test.p_value, "n_mlps": self.n_mlps, "ratio": self.test.ratio,
                "ratio_low": self.test.ratio_low, "ratio_high": self.test.ratio_high, "p_values": self.p_values,
                "reason": self.reason, "mlps_needed": self.mlps_needed, "provisional": self.provisional}


#: What two runs of one computation share exactly; effective compute is not among them where wall time is priced.
SAME_COMPUTATION = ("final_layer_mse", "all_layers_mse", "flops_used")


def same_computation(upper: Sequence[dict], lower: Sequence[dict]) -> bool:
    """Identical per-MLP results, as exact copies give: in a round that prices residual wall time their
    effective compute still differs by the timing, which must not split them."""
    return all(np.array_equal(column(upper, name), column(lower, name)) for name in SAME_COMPUTATION)


def _p_text(p: float | None) -> str:
    return "n/a" if p is None else f"{p:.3g}"


def decide(upper: Sequence[dict], lower: Sequence[dict], names: tuple[str, str], *, extra: int) -> tuple[int, PairDecision]:
    """(-1 upper first, 1 lower first, 0 shared) and the decision, on every MLP both were scored on."""
    verdict = classify(upper, lower)
    test, n = verdict.score, len(upper)
    p_values: dict[str, float | None] = {"score": test.p_value}
    order = -1 if summary(upper)["score"] <= summary(lower)["score"] else 1
    if verdict.kind == DIFFERENT:
        by = "extra_mlps" if extra else "score"
        return order, PairDecision(*names, by, n, test, p_values,
                                   f"{PAIR_TEST}: p = {_p_text(test.p_value)} on {n} MLPs, ratio {test.ratio:.3g}")
    if verdict.kind == CLOSE and same_computation(upper, lower):
        return 0, PairDecision(*names, "shared", n, test, p_values,
                               f"identical results on all {n} MLPs (final-layer and all-layer MSE, FLOPs): "
                               "the same computation, whatever wall time was measured")
    if verdict.kind == CLOSE:
        for criterion, metric in CRITERIA:
            other = ratio_test(upper, lower, metric)
            p_values[criterion] = other.p_value
            if other.p_value is not None and other.p_value < ALPHA:
                first = -1 if other.mean_log_ratio > 0 else 1
                return first, PairDecision(*names, criterion, n, test, p_values,
                                           f"close on the score; {criterion} differs (p = {other.p_value:.3g})")
        if verdict.equal:
            return 0, PairDecision(*names, "shared", n, test, p_values,
                                   f"scores equal within the reference noise on {n} MLPs; no criterion separates them")
    needed = test.mlps_needed
    about = max(MIN_TEST_MLPS, math.ceil(needed)) if math.isfinite(needed) else None
    why = ("the ratio interval lies inside the margin but the scores are not equal within the noise"
           if verdict.kind == CLOSE else
           f"ratio {test.ratio:.3g}, 95% interval {test.ratio_low:.3g}..{test.ratio_high:.3g}, p = {_p_text(test.p_value)}")
    return order, PairDecision(*names, "unresolved", n, test, p_values,
                               f"unresolved at {n} MLPs; about {about if about else 'unboundedly many'} needed ({why})",
                               about)


def order_group(group: Sequence[str], scored: dict[str, list[dict]], extra: int) -> tuple[list[str], list[PairDecision]]:
    """The group's teams in their decided order (the score's, unless a tie-break criterion swaps a close pair)
    and each neighbour pair's decision."""
    by_score = sorted(group, key=lambda t: (summary(scored[t])["score"], t))
    ordered = sorted(by_score, key=functools.cmp_to_key(
        lambda x, y: decide(scored[x], scored[y], (x, y), extra=extra)[0]))
    decisions = [decide(scored[u], scored[lo], (u, lo), extra=extra)[1]
                 for u, lo in zip(ordered, ordered[1:], strict=False)]
    return ordered, decisions


def base_decision(upper: str, lower: str, verdict: Verdict) -> PairDecision:
    """A neighbour pair the test separated on the base suite: no tie-break was needed."""
    test = verdict.score
    return PairDecision(upper, lower, "score", test.n_mlps, test, {"score": test.p_value},
                        f"{PAIR_TEST}: p = {_p_text(test.p_value)} on {test.n_mlps} MLPs, ratio {test.ratio:.3g}")


def group_outcome(decisions: Sequence[PairDecision]) -> str:
    """What the record says decided a group: its weakest pair's outcome."""
    return next(o for o in GROUP_OUTCOMES if o in {d.decided_by for d in decisions})


@dataclass
class Standings:
    order: list[str]
    ranks: dict[str, int]
    provisional: set[str]
    pairs: list[PairDecision]  # every neighbour pair of the final order
    groups: list[dict]  # per group: teams, base verdicts, extra MLPs, order, decisions
    extra: dict[str, list[dict]]


def standings(teams: Sequence[str], base: dict[str, list[dict]], limit: int,
              more: Callable[[list[str], int], dict[str, list[dict]]]) -> Standings:
    """Rank, group, score the groups on ``more(group, k)`` extra MLPs, decide every neighbour pair."""
    summaries = {t: summary(base[t]) for t in teams}
    order = sorted(teams, key=lambda t: (summaries[t]["score"], t))
    found, verdicts = groups(order, base)
    extra: dict[str, list[dict]] = {}
    decided: dict[tuple[str, str], PairDecision] = {}
    records = []
    for group in found:
        k = extra_needed(group, base, limit)
        if k:
            extra.update(more(group, k))
        scored = {t: base[t] + extra.get(t, []) for t in group}
        ordered, decisions = order_group(group, scored, k)
        start = order.index(group[0])
        order[start:start + len(group)] = ordered
        decided.update({(d.upper, d.lower): d for d in decisions})
        records.append({"teams": list(group), "verdicts": [(u, lo, verdicts[u, lo]) for u, lo in zip(group, group[1:], strict=False)],
                        "extra_mlps": k, "order": ordered, "decisions": decisions,
                        "scores_with_extra": {t: summary(scored[t])["score"] for t in group}})
    pairs = [decided.get((u, lo)) or base_decision(u, lo, verdicts.get((u, lo)) or classify(base[u], base[lo]))
             for u, lo in zip(order, order[1:], strict=False)]
    shared = {d.lower for d in pairs if d.decided_by == "shared"}
    provisional = {t for d in pairs if d.provisional for t in (d.upper, d.lower)}
    return Standings(order, ranks(order, shared), provisional, pairs, records, extra)


def ranks(order: Sequence[str], shared_with_previous: set[str]) -> dict[str, int]:
    """Competition ranks (1, 1, 3): a team sharing with the one above it takes that one's rank."""
    out: dict[str, int] = {}
    for position, team in enumerate(order, start=1):
        out[team] = out[order[position - 2]] if team in shared_with_previous and position > 1 else position
    return out
