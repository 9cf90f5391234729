"""``curve``: one estimator scored at a ladder of budgets, each point exactly ``score --budget B``.

Every point is a run under the round's full rulebook with only B changed, kept in the run records under the
key ``score --budget B`` on the same MLPs would use: an interrupted curve, run again, scores only its missing
points, and any point can be checked against ``score``. ``--json`` prints ``{"points": [{"budget": B,
"report": R, "summary": S}, ...], ...}`` where R is what ``score --json --budget B`` prints for that point and
S the point's means with 95% intervals over MLPs (MSE, score, MSE/avg_variance, FLOPs, effective compute,
failures). An estimator that spends identical FLOPs at every budget is reported as fixed-cost.
"""

from __future__ import annotations

import argparse
import json
import sys

from whestboard.cli._score import (
    fail_before_scoring,
    note_missing_files,
    open_dataset_arg,
    participant_handle,
    sci,
)
from whestboard.rules import environment_for, whest_error
from whestboard.sandbox import SourceSyntaxError, whest_error_of
from whestboard.scoring import (
    BUDGETS_HELP,
    SPEC_HELP,
    RunError,
    curve_data,
    curve_requests,
    is_file_spec,
    parse_budget_ladder,
    rulebook_for,
    run_curve,
    stored_budgets,
    whest_shaped,
)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--dataset", required=True, help="dataset directory, or the key of a served dataset")
    p.add_argument("--estimator", required=True, help=SPEC_HELP)
    p.add_argument("--budgets", required=True, help=BUDGETS_HELP)
    p.add_argument("--mlps", default="", help="MLP indices: 0:8, 3, 0,2,5 or 0:32:4 (default: all)")
    p.add_argument("--round", default=None, help="rulebook to score under (default: the dataset's round)")
    p.add_argument("--team", default=None, help="team name recorded with each point's run")
    p.add_argument("--no-cache", action="store_true", help="score every point again even if stored")
    p.add_argument("--json", action="store_true", help="print every point's score --json report")


def _progress(stream):
    def show(index: int, total: int, done: int, n: int) -> None:
        if done == n:
            print(f"[point {index + 1}/{total}] {n} MLP(s) scored", file=stream, flush=True)
    return show


def _print_human(curve, round_tag: str, resumed: list[int]) -> None:
    print(f"{curve.label}: {len(curve.points)} budget(s) under round {round_tag}"
          + (f" ({len(resumed)} served from the run records)" if resumed else ""))
    print(f"{'budget':>11} {'FLOPs':>11} {'final MSE':>11} {'95% interval':>23} {'score':>11} {'MSE/var':>10}"
          f" {'failed':>6}  run")
    for p in curve.summaries():
        mse = p["final_layer_mse"]
        mark = " <floor" if p["below_noise_floor"] else ""
        print(f"{p['budget']:>11.4g} {p['flops_used']['mean']:>11.4g} {sci(mse['mean']):>11} "
              f"{sci(mse['low']):>11}..{sci(mse['high']):<10} {sci(p['score']['mean']):>11} "
              f"{sci(p['mse_over_variance']['mean']):>10} {p['n_failed_mlps']:>6}  {p['run_id']}{mark}")
    data = curve_data(curve.label, curve.summaries())  # what may be said of it, decided where the pages decide it
    for budget, failures in data["failures"].items():
        print(f"failed at B = {budget:.4g}: {failures or 'MLPs failed'}; its MSE is the grader's fallback, "
              "no claim rests on it")
    if data["fixed_cost"]:
        print("fixed cost: identical FLOPs at every budget; this estimator does not use more budget")
    crossing = data["crossing"]
    if crossing:
        side = "better" if crossing["better_after"] else "worse"
        print(f"crosses sampling (sigma^2/N at the same FLOPs) near {crossing['flops']:.3g} FLOPs, "
              f"MSE {crossing['mse']:.3g}; {side} than sampling past it")


def run(args: argparse.Namespace) -> int:
    dataset = open_dataset_arg(args.dataset)
    round_tag = args.round or dataset.info.round_tag
    base = rulebook_for(round_tag)
    budgets = parse_budget_ladder(args.budgets, base.round_budget)
    extras: dict = {"shipped": None, "grader_environment": None}
    if is_file_spec(args.estimator):
        extras["grader_environment"] = environment_for(base.round_tag).as_dict()
    try:
        handle, extras["shipped"], extras["grader_environment"] = participant_handle(args.estimator, base.round_tag)
    except SourceSyntaxError as exc:
        return fail_before_scoring(args, whest_error(exc.syntax_error, "run"), extras)
    note = (extras["shipped"] or {}).get("note")
    if note:
        print(f"note: {args.estimator}: {note}", file=sys.stderr)
    requests = curve_requests(dataset, args.mlps, handle, base.round_tag, budgets, source="cli", team=args.team)
    resumed = [] if args.no_cache else stored_budgets(requests)
    try:
        curve = run_curve(requests, use_cache=not args.no_cache,
                          on_progress=None if args.json else _progress(sys.stderr))
    except RunError as exc:
        error = whest_error_of(exc.__cause__) if extras["shipped"] is not None else None
        if error is None:
            raise
        note_missing_files(args, extras, getattr(exc.__cause__, "missing_files", None))
        return fail_before_scoring(args, error, extras)
    if args.json:
        print(json.dumps(_payload(args, curve, extras, round_tag, resumed), indent=2))
    else:
        _print_human(curve, base.round_tag, resumed)
    raised = sum(1 for p in curve.points for e in p.outcome.report["results"]["per_mlp"] if e.get("error"))
    if raised:
        print(f"{raised} MLP run(s) raised during predict; each was scored as the zero prediction", file=sys.stderr)
        return 1
    return 0


def _payload(args: argparse.Namespace, curve, extras: dict, round_tag: str, resumed: list[int]) -> dict:
    """Each point's report as ``score --json --budget B`` prints it (its own missing files noted), plus the curve's."""
    points = []
    for point in curve.points:
        own = dict(extras)
        note_missing_files(args, own, point.outcome.report.get("missing_files"))
        report = whest_shaped(point.outcome.report, cached=point.outcome.cached)
        report["whestboard"].update(own)
        points.append({"budget": point.budget, "report": report, "summary": point.summary})
    data = curve_data(curve.label, curve.summaries())
    return {
        "estimator": curve.label,
        "round_tag": round_tag,
        "points": points,
        "fixed_cost": data["fixed_cost"],
        "sampling_crossing": data["crossing"],
        "failed_points": data["failed_points"],
        "served_from_run_records": resumed,
    }
