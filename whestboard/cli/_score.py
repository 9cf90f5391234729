"""``score``: run an estimator on a dataset's MLPs exactly as the grader would.

``--json`` prints a report shaped like ``whest run --json`` (``results`` with
the same ``per_mlp`` fields, means and ``failure_breakdown``) so the two can be
diffed; Whestboard's additions (noise floor, MC@B, rulebook, run id) sit under
a separate ``whestboard`` key. Like ``whest run``, the exit status is 1 when an
MLP raised during predict (it is still scored, as the grader's fallback). Every run is recorded in the run store, and an
identical earlier run is served from it unless ``--no-cache`` is given.

An estimator that fails before any MLP is scored (a missing module, a syntax error, no estimator class,
``setup()`` raising) prints ``{"ok": false, "error": {"code": ..., "message": ...}}`` with the code and
message ``whest run --json`` gives, and exits 1 as it does. A folder ships as ``whest package`` ships it;
a lone ``.py`` that leaves files behind in its folder says so, in the report and on stderr.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from whestboard.data import get_dataset, open_dataset
from whestboard.rules import describe_blas, environment_for, explained_error, whest_error
from whestboard.sandbox import SourceSyntaxError, missing_files_note, whest_error_of
from whestboard.scoring import (
    SPEC_HELP,
    RunError,
    RunRequest,
    failure_report,
    is_file_spec,
    parse_budget,
    resolve_estimator,
    rulebook_for,
    run_and_record,
    sampling_verdict,
    sandboxed_handle,
    shipped_spec,
    whest_shaped,
)
from whestboard.store import sci


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--dataset", required=True, help="dataset directory, or the key of a served dataset")
    p.add_argument("--estimator", required=True, help=SPEC_HELP)
    p.add_argument("--mlps", default="", help="MLP indices: 0:8, 3, 0,2,5 or 0:32:4 (default: all)")
    p.add_argument("--round", default=None, help="rulebook to score under (default: the dataset's round)")
    p.add_argument("--budget", default=None,
                   help="FLOP budget per MLP: 2.2e12, 2**41 or 0.5B, at most 1000B (default: the round's B)")
    p.add_argument("--team", default=None, help="team name recorded with the run")
    p.add_argument("--no-cache", action="store_true", help="score again even if an identical run is stored")
    p.add_argument("--json", action="store_true", help="print a whest-run-shaped JSON report on stdout")


def open_dataset_arg(arg: str):

    path = Path(arg).expanduser()
    if path.is_dir():
        return open_dataset(path)
    return get_dataset(arg)


def _progress_printer(stream):
    def show(done: int, total: int, entry: dict) -> None:
        status = entry["failure_reason"] or f"final MSE {entry['final_layer_mse']:.3e}"
        print(f"[{done}/{total}] MLP {entry['mlp_index']} {entry['mlp_name']}: "
              f"{entry['flops_used']:,} FLOPs, {status}", file=stream, flush=True)
    return show


def _print_human(outcome) -> None:
    report = outcome.report
    results = report["results"]
    noise = report["noise"]
    mc = report["mc_reference"]
    rb = report["rulebook"]
    print(f"{report['estimator']['label']} on {report['dataset']['key']} "
          f"({len(report['mlp_indices'])} MLPs, round {rb['round_tag']}, B = {rb['flop_budget']:.4g})"
          + (" [cached]" if outcome.cached else ""))
    if rb.get("billing_note"):
        print(f"note: {rb['billing_note']}")
    print(f"{'MLP':>5} {'name':24} {'FLOPs':>16} {'final MSE':>11} {'floor':>10} {'mult':>6} {'score':>11}  status")
    for e in results["per_mlp"]:
        mark = " <floor" if e["below_noise_floor"] else ""
        status = e["failure_reason"] or ("ok, METER TAMPERING" if e.get("meter_tampering") else "ok")
        print(f"{e['mlp_index']:>5} {e['mlp_name'][:24]:24} {e['flops_used']:>16,} {sci(e['final_layer_mse']):>11}"
              f" {sci(e['noise_floor']):>10} {e['score_multiplier']:>6.3g} {sci(e['adjusted_final_layer_score']):>11}"
              f"  {status}{mark}")
    print(f"mean final-layer MSE {sci(results['final_layer_mse'])} (noise floor {sci(noise['noise_floor'])}, "
          f"corrected {sci(noise['final_layer_mse_corrected'])}"
          + (", BELOW what the reference resolves" if noise["below_noise_floor"] else "") + ")")
    print(f"score {sci(results['adjusted_final_layer_score'])}, mean multiplier {results['mean_score_multiplier']:.3g}, "
          f"failed {results['n_failed_mlps']}")
    if mc.get("mc_at_budget"):
        print(f"MC@B {sci(mc['mc_at_budget'])} (score of spending B on Monte Carlo): "
              f"{sampling_verdict(mc.get('score_vs_mc'))}")
    mattered = (report.get("machine") or {}).get("waiting_mattered")
    if mattered:
        print(f"note: MLP(s) {', '.join(map(str, mattered))} failed on a time rule they would have met without the "
              "time not spent computing (waiting for a CPU core, or sleeping); score again on a quieter machine")
    print(f"BLAS: {describe_blas(report.get('environment'))}")
    output = report.get("estimator_output") or {}
    if output.get("text", "").strip():
        print("estimator output" + (f" (first and last part of {output['bytes']:,} bytes)" if output["truncated"]
                                    else "") + ":\n" + output["text"].rstrip())
    flagged = [e for e in results["per_mlp"] if e.get("meter_tampering")]
    for e in flagged:
        print(f"meter tampering, MLP {e['mlp_index']}: {e['meter_tampering']}")
    if flagged:
        print(f"{len(flagged)} of {len(results['per_mlp'])} MLP(s) flagged: the score above is the grader's; "
              "the flag is Whestboard's (see meter_tampering in --json)")
    print(f"run {report['run_id'] or '(not recorded)'}")


#: What makes a command line's estimator a path: the CLI is a trusted local user, so it names files and
#: folders (built-ins, Monte Carlo and cumulant specs never contain these).
PATH_MARKS = ("/", os.sep, "~", ".")
FILE_SUFFIXES = (".py", ".tar.gz", ".tgz")


def missing_path(spec: str) -> str | None:
    """The sentence for an estimator that names a path which is not there ("no such folder" / "no such file"),
    with where it was looked for; None when the spec is not a path or the path exists."""
    text = (spec or "").strip()
    if not text or text.startswith("upload:"):
        return None
    looks_like_path = text.startswith(PATH_MARKS) or any(mark in text for mark in ("/", os.sep)) or \
        text.lower().endswith(FILE_SUFFIXES)
    if not looks_like_path or Path(text).expanduser().exists():
        return None
    where = Path(text).expanduser().resolve()
    if text.endswith(("/", os.sep)) or not where.suffix:
        return (f"no such folder: {text} (looked for {where}); give the folder that holds estimator.py, as "
                "`whest package --estimator DIR` ships it, a PATH.py, or a `whest package` archive")
    return f"no such file: {text} (looked for {where})"


def participant_handle(spec: str, round_tag: str):
    """``(handle, what ships, the grader rule that applies)``; built-ins and Monte Carlo have no files."""
    problem = missing_path(spec)
    if problem:
        raise FileNotFoundError(problem)
    if not is_file_spec(spec):
        return resolve_estimator(spec), None, None
    handle = sandboxed_handle(spec, round_tag=round_tag)
    return handle, shipped_spec(spec), environment_for(round_tag).as_dict()


def note_missing_files(args: argparse.Namespace, extras: dict, missing: list[str] | None) -> None:
    """After running: name the submission files the estimator tried to open and did not get."""
    if extras.get("shipped") is None or missing is None:
        return
    extras["shipped"] = {**extras["shipped"], "tried_to_open": list(missing),
                         "missing_note": missing_files_note(list(missing))}
    if extras["shipped"]["missing_note"]:
        print(f"note: {args.estimator}: {extras['shipped']['missing_note']}", file=sys.stderr)


def fail_before_scoring(args: argparse.Namespace, error: dict, extras: dict) -> int:
    """A failure before any MLP was scored: whest run's JSON shape (its code and message, as whest prints
    them) and exit status, or one line, said once with the advice that applies, and a hint."""
    if args.json:
        print(json.dumps(failure_report(error, extras), indent=2))
    else:
        round_tag = (extras.get("grader_environment") or {}).get("round_tag")
        explained = explained_error(error, round_tag)
        print(f"error: [{error['code']}] {explained['sentence']}", file=sys.stderr)
        print(f"hint: {explained['hint']}", file=sys.stderr)
    return 1


def run(args: argparse.Namespace) -> int:

    dataset = open_dataset_arg(args.dataset)
    round_tag = args.round or dataset.info.round_tag
    rulebook = rulebook_for(round_tag)
    rulebook = rulebook_for(round_tag, parse_budget(args.budget, rulebook.round_budget))
    extras: dict = {"shipped": None, "grader_environment": None}
    if is_file_spec(args.estimator):
        extras["grader_environment"] = environment_for(rulebook.round_tag).as_dict()
    try:
        handle, extras["shipped"], extras["grader_environment"] = participant_handle(args.estimator, rulebook.round_tag)
    except SourceSyntaxError as exc:
        return fail_before_scoring(args, whest_error(exc.syntax_error, "run"), extras)
    note = (extras["shipped"] or {}).get("note")
    if note:
        print(f"note: {args.estimator}: {note}", file=sys.stderr)
    request = RunRequest(dataset, args.mlps, handle, rulebook, source="cli", team=args.team)
    progress = None if args.json else _progress_printer(sys.stderr)
    try:
        outcome = run_and_record(request, use_cache=not args.no_cache, on_progress=progress)
    except RunError as exc:
        error = whest_error_of(exc.__cause__) if extras["shipped"] is not None else None
        if error is None:
            raise
        note_missing_files(args, extras, getattr(exc.__cause__, "missing_files", None))
        return fail_before_scoring(args, error, extras)
    note_missing_files(args, extras, outcome.report.get("missing_files"))
    if args.json:
        payload = whest_shaped(outcome.report, cached=outcome.cached)
        payload["whestboard"].update(extras)
        print(json.dumps(payload, indent=2))
    else:
        _print_human(outcome)
        if extras["grader_environment"]:
            print(f"imports: {extras['grader_environment']['rule']}")
    per_mlp = outcome.report["results"]["per_mlp"]
    raised = [e for e in per_mlp if e.get("error")]
    if raised:  # whest run's convention, so scripts treat both alike
        print(f"{len(raised)} of {len(per_mlp)} MLP(s) raised during predict; each was scored as the "
              "zero prediction (see failure_reason and traceback in --json)", file=sys.stderr)
        return 1
    return 0
