"""Budget curves: one estimator scored at a ladder of budgets, each point exactly a ``score --budget B`` run.

A point is an ordinary run (``RunRequest`` under ``rulebook_for(round, B)``: the round's whole rulebook with
only B changed) through ``run_and_record``, so it is kept in the run records under the same cache key a
``score --budget B`` of the same MLPs would use. That is what makes a curve resumable (an interrupted
sweep finds its finished points stored and scores only the missing ones) and checkable (any point can be
asked of ``score`` and must come back identical).

Each point is summarised over its MLPs with 95% intervals (Student t on the per-MLP values): raw
final-layer MSE, the board's score (MSE x max(0.1, C/B)), MSE / avg_variance (ARC's research view, where
N-sample Monte Carlo sits on 1/N), FLOPs, effective compute and failures. An estimator that ignores the
budget spends identical FLOPs at every point: ``fixed_cost`` says so, so a figure can draw it as the
vertical line it is.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from whestboard.rules import failure_kind, failures_sentence
from whestboard.scoring import _run_records
from whestboard.scoring._estimators import builtin_choices
from whestboard.scoring._handle import EstimatorHandle
from whestboard.scoring._inputs import RunError, parse_budget, quoted
from whestboard.scoring._rulebook import rulebook_for
from whestboard.scoring._runs import RunOutcome, RunRequest, cache_key, run_and_record

#: A sweep longer than this is refused: each point is a full run on every selected MLP.
MAX_CURVE_POINTS = 32
BUDGETS_HELP = ("LO:HI:N (N budgets evenly spaced in log from LO to HI, e.g. 0.001B:1B:10) or B1,B2,... "
                "(a list, e.g. 0.01B,0.1B,1B); each budget as --budget reads it: 2.2e12, 2**41 or 0.5B")

# two-sided 95% Student t quantiles by degrees of freedom; 1.96 beyond the table
_T95 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145,
        2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048,
        2.045, 2.042)


#: Monte Carlo as a budget fraction adapts to each budget of a ladder (``mc:N`` would be a fixed cost).
CURVE_MC_SPECS = ("mc:1B", "mc:0.5B", "mc:0.1B")


def curve_spec_choices() -> list[dict]:
    """What a page offers to sweep: the lab's menu, with Monte Carlo as budget fractions."""
    out = [{"label": c["label"], "value": c["value"]} for c in builtin_choices() if c["value"] != "mc"]
    return out + [{"label": f"Monte Carlo, {s[3:]} of each budget", "value": s} for s in CURVE_MC_SPECS]


def parse_budget_ladder(text: str, round_budget: int) -> list[int]:
    """``LO:HI:N`` or ``B1,B2,...`` -> sorted distinct budgets in FLOPs; a RunError names what to fix."""
    if not isinstance(text, str) or not text.strip():
        raise RunError(f"no budgets given: write {BUDGETS_HELP}")
    if len(text) > 2000:
        raise RunError(f"budgets {quoted(text)} are too long to be a ladder: write {BUDGETS_HELP}")
    raw = text.strip()
    if ":" in raw and "," not in raw:
        parts = raw.split(":")
        if len(parts) != 3:
            raise RunError(f"cannot read budgets {quoted(text)}: a range is LO:HI:N; {BUDGETS_HELP}")
        low, high = (parse_budget(p, round_budget) for p in parts[:2])
        if low is None or high is None:
            raise RunError(f"budgets {quoted(text)}: LO and HI must both be given; {BUDGETS_HELP}")
        if not re.fullmatch(r"\s*\d+\s*", parts[2]):
            raise RunError(f"budgets {quoted(text)}: N must be a whole number of points; {BUDGETS_HELP}")
        n = int(parts[2])
        if n < 1 or n > MAX_CURVE_POINTS:
            raise RunError(f"budgets {quoted(text)}: N = {n}; a curve has 1 to {MAX_CURVE_POINTS} points")
        if low > high:
            low, high = high, low
        budgets = [low] if n == 1 else [  # the ends exactly as typed, the rest evenly spaced in log between
            low, *(int(round(low * (high / low) ** (k / (n - 1)))) for k in range(1, n - 1)), high]
    else:
        budgets = []
        for part in raw.split(","):
            if not part.strip():
                continue
            value = parse_budget(part, round_budget)
            if value is not None:
                budgets.append(value)
    budgets = sorted(set(budgets))
    if not budgets:
        raise RunError(f"no budgets in {quoted(text)}: write {BUDGETS_HELP}")
    if len(budgets) > MAX_CURVE_POINTS:
        raise RunError(f"{len(budgets)} budgets: a curve has at most {MAX_CURVE_POINTS} points")
    return budgets


def mean_interval(values: list[float] | np.ndarray) -> dict:
    """Mean of per-MLP values and its 95% Student t interval (``low == high == mean`` for one MLP)."""
    x = np.asarray(values, dtype=np.float64)
    x = x[np.isfinite(x)]
    if x.size == 0:
        return {"mean": None, "low": None, "high": None, "n": 0}
    mean = float(x.mean())
    if x.size == 1:
        return {"mean": mean, "low": mean, "high": mean, "n": 1}
    t = _T95[x.size - 2] if x.size - 2 < len(_T95) else 1.96
    half = t * float(x.std(ddof=1)) / math.sqrt(x.size)
    return {"mean": mean, "low": mean - half, "high": mean + half, "n": int(x.size)}


def point_summary(report: dict) -> dict:
    """What a curve draws of one point: means with 95% intervals over the run's MLPs, floor and MC@B.

    A point with a failed MLP is a failed point (``failed``, ``failures`` names them: "1 of 4 MLPs failed:
    FLOP budget"): its means hold the grader's fallback, so it is drawn as failed and no claim rests on it.
    """
    per_mlp = report["results"]["per_mlp"]
    kinds = [failure_kind(e) for e in per_mlp]
    mse = [float(e["final_layer_mse"]) for e in per_mlp]
    var = [float(e["avg_variance"]) for e in per_mlp]
    noise = report["noise"]
    return {
        "budget": int(report["rulebook"]["flop_budget"]),
        "run_id": report.get("run_id"),
        "n_mlps": len(per_mlp),
        "final_layer_mse": mean_interval(mse),
        "score": mean_interval([float(e["adjusted_final_layer_score"]) for e in per_mlp]),
        "mse_over_variance": mean_interval([m / v if v > 0 else math.nan for m, v in zip(mse, var, strict=True)]),
        "flops_used": mean_interval([float(e["flops_used"]) for e in per_mlp]),
        "effective_compute": mean_interval([float(e.get("effective_compute", 0.0)) for e in per_mlp]),
        "flops_per_mlp": [int(e["flops_used"]) for e in per_mlp],
        "n_failed_mlps": int(report["results"]["n_failed_mlps"]),
        "failed": any(kinds),
        "failures": failures_sentence(kinds),
        "noise_floor": float(noise["noise_floor"]),
        "below_noise_floor": bool(noise["below_noise_floor"]),
        "mean_avg_variance": float(np.mean(var)) if var else math.nan,
        "mc_at_budget": report["mc_reference"].get("mc_at_budget"),
        "mc_flops_per_sample": report["mc_reference"].get("mc_flops_per_sample"),
    }


@dataclass
class CurvePoint:
    """One budget of a curve: its run and the summary a figure draws."""

    budget: int
    outcome: RunOutcome

    @property
    def summary(self) -> dict:
        return point_summary(self.outcome.report)


@dataclass
class Curve:
    """An estimator at a ladder of budgets, points in budget order."""

    label: str
    points: list[CurvePoint] = field(default_factory=list)
    cancelled: bool = False

    def summaries(self) -> list[dict]:
        return [p.summary for p in self.points]

    @property
    def fixed_cost(self) -> bool:
        return fixed_cost(self.summaries())

    @property
    def scored_now(self) -> list[int]:
        """Budgets computed by this call (the rest were served from the run records)."""
        return [p.budget for p in self.points if not p.outcome.cached]


def carries_claims(summary: dict) -> bool:
    """Whether a claim (a crossing, a fixed cost, a verdict) may rest on this point: none of its MLPs failed.
    A failed MLP is scored as the all-zero prediction, so its mean is the grader's fallback, not the
    estimator's error at that budget."""
    return not summary.get("failed") and not summary.get("n_failed_mlps")


def fixed_cost(summaries: list[dict]) -> bool:
    """True when two or more points spent identical FLOPs on every MLP: the estimator ignores its budget.
    Only points that carry claims count (a failed point was stopped where its budget ran out)."""
    summaries = [s for s in summaries if carries_claims(s)]
    if len(summaries) < 2:
        return False
    first = summaries[0]["flops_per_mlp"]
    return all(s["flops_per_mlp"] == first for s in summaries[1:])


def curve_requests(dataset, mlps, handle: EstimatorHandle, round_tag: str, budgets: list[int], *,
                   source: str = "cli", team: str | None = None) -> list[RunRequest]:
    """One ``RunRequest`` per budget, each under the round's full rulebook with only B changed."""
    return [RunRequest(dataset, mlps, handle, rulebook_for(round_tag, int(b)), source=source, team=team)
            for b in budgets]


def stored_budgets(requests: list[RunRequest]) -> list[int]:
    """Budgets of these requests already kept in the run records (what a resumed sweep will not redo)."""
    return [int(r.rulebook.flop_budget) for r in requests if _run_records.find_cached(cache_key(r)) is not None]


def stored_points(requests: list[RunRequest]) -> list[dict]:
    """Summaries of the points already in the run records, in budget order (what a page draws before a sweep)."""
    found = []
    for request in requests:
        run_id = _run_records.find_cached(cache_key(request))
        report = _run_records.get_run(run_id) if run_id else None
        if report is not None:
            found.append(point_summary(report))
    return found


def stored_reports(requests: list[RunRequest]) -> dict[int, dict]:
    """Budget -> the stored run report, for the points already in the run records."""
    found = {}
    for request in requests:
        run_id = _run_records.find_cached(cache_key(request))
        report = _run_records.get_run(run_id) if run_id else None
        if report is not None:
            found[int(request.rulebook.flop_budget)] = report
    return found


def curve_cost(requests: list[RunRequest]) -> float:
    """The most work the sweep's missing points may do: their MLPs times each budget."""
    stored = set(stored_budgets(requests))
    return float(sum(r.cost_flops for r in requests if int(r.rulebook.flop_budget) not in stored))


PointFn = Callable[[int, int, CurvePoint], None]
PointProgressFn = Callable[[int, int, int, int], None]


def run_curve(requests: list[RunRequest], *, label: str = "", use_cache: bool = True,
              on_point: PointFn | None = None, on_progress: PointProgressFn | None = None,
              should_cancel: Callable[[], bool] | None = None) -> Curve:
    """Score each point as ``score`` would (served from the run records when stored); stop between MLPs on cancel.

    ``on_point(done, total, point)`` after each point; ``on_progress(point_index, n_points, mlps_done, n_mlps)``
    after each MLP, for a progress bar.
    """
    curve = Curve(label=label or (requests[0].estimator.label if requests else ""))
    total = len(requests)
    for index, request in enumerate(requests):
        if should_cancel is not None and should_cancel():
            curve.cancelled = True
            break

        def progress(done: int, n: int, _entry: dict, _index: int = index) -> None:
            if on_progress is not None:
                on_progress(_index, total, done, n)

        outcome = run_and_record(request, use_cache=use_cache, on_progress=progress, should_cancel=should_cancel)
        if outcome.cancelled:
            curve.cancelled = True
            break
        point = CurvePoint(int(request.rulebook.flop_budget), outcome)
        curve.points.append(point)
        if on_point is not None:
            on_point(len(curve.points), total, point)
    return curve


def sampling_crossing(summaries: list[dict]) -> dict | None:
    """Where the curve's raw MSE crosses Monte Carlo's sigma^2/N at the same FLOPs (log-log interpolation).

    Sampling at F FLOPs per MLP reaches mean(avg_variance) / (F / mc_flops_per_sample). Only a resolved
    crossing counts: between two neighbouring points whose 95% intervals over MLPs both exclude sampling's
    value, one above it and one below. A curve that stays within its interval of sampling (Monte Carlo
    itself) does not cross it, whatever its noise does. Points with a failed MLP are left out
    (:func:`carries_claims`): a crossing is never interpolated from a fallback. Returns the FLOPs, budget and
    MSE of the first such crossing and which side wins past it; None if there is none.
    """
    rows = []
    for s in filter(carries_claims, summaries):
        mse = s["final_layer_mse"]
        flops, per_sample, var = s["flops_used"]["mean"], s.get("mc_flops_per_sample"), s.get("mean_avg_variance")
        if not flops or not mse["mean"] or not per_sample or not var or flops <= 0 or mse["mean"] <= 0:
            continue
        sampling = var * per_sample / flops
        side = 1 if mse["low"] > sampling else (-1 if mse["high"] < sampling else 0)  # 0: not resolved
        rows.append((float(flops), float(mse["mean"]), math.log(mse["mean"] / sampling), side, float(s["budget"]),
                     float(var)))
    rows.sort()
    for (f0, m0, g0, s0, b0, v0), (f1, m1, g1, s1, b1, v1) in zip(rows, rows[1:], strict=False):
        if s0 * s1 < 0 and f1 > f0:
            t = g0 / (g0 - g1)
            at = {name: math.exp(math.log(a) + t * (math.log(b) - math.log(a)))
                  for name, a, b in (("flops", f0, f1), ("mse", m0, m1), ("budget", b0, b1), ("variance", v0, v1))}
            return {**at, "mse_over_variance": at["mse"] / at["variance"], "better_after": s1 < 0}
    return None


def curve_data(label: str, summaries: list[dict]) -> dict:
    """One budget curve as every page draws it, and every claim it may make, decided here once.

    ``{"label", "points" (summaries in budget order), "crossing", "fixed_cost", "failed_points" (budgets of the
    points with a failed MLP), "failures" (what failed, per such budget), "claims_from" (how many points carry
    claims)}``: the lab, the convergence page and compare all draw this dict with one component.
    """
    points = sorted(summaries, key=lambda s: s["budget"])
    failed = [s for s in points if not carries_claims(s)]
    return {
        "label": label,
        "points": points,
        "crossing": sampling_crossing(points),
        "fixed_cost": fixed_cost(points),
        "failed_points": [s["budget"] for s in failed],
        "failures": {s["budget"]: s.get("failures") for s in failed},
        "claims_from": len(points) - len(failed),
    }


def stored_curve(label: str, requests: list[RunRequest]) -> tuple[dict, int]:
    """``curve_data`` of the points already in the run records, and how many of the ladder's are missing."""
    points = stored_points(requests)
    return curve_data(label, points), len(requests) - len(points)
