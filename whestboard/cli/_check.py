"""``check``: the upload page's contract check from the command line, in the same sandbox.

Stricter than ``whest validate``: besides loading the class and calling
``predict`` once, it meters the call under a round's budget, wall cap and
residual rule, with the round's grader import rule (no numpy in Phase 2). Exit 0 when the estimator
passes, 1 when a step fails (each failure says what to fix; a load or setup failure carries the code
``whest run --json`` gives it). ``--estimator`` takes a file, a folder or a ``whest package`` archive.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from whestbench.budget import CURRENT_ROUND

from whestboard.rules import get_round
from whestboard.sandbox import (
    SubmissionFiles,
    check_contract,
    check_python_source,
    check_size,
    ingest_folder,
    ingest_path,
    kind_of,
    left_behind,
    missing_files_note,
    shipped_alone_note,
)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--estimator", required=True,
                   help="PATH.py, a folder (shipped as `whest package --estimator DIR` ships it) or the PATH.tar.gz "
                        "that `whest package` writes")
    p.add_argument("--round", default=CURRENT_ROUND.tag, help=f"rulebook to check under (default {CURRENT_ROUND.tag})")
    p.add_argument("--json", action="store_true", help="print the report as JSON")


def submission_for(path: Path):
    """The files that would ship, checked exactly as an upload is (sizes first, manifest, hashes)."""

    if path.is_dir():
        return ingest_folder(path).submission
    kind = kind_of(path.name)
    if not path.is_file():
        raise FileNotFoundError(f"estimator file {path} does not exist")
    check_size(path.stat().st_size)
    if kind == "py":
        check_python_source(path.read_bytes(), path.name)
        return SubmissionFiles.single_file(path)
    return ingest_path(path).submission


def run(args: argparse.Namespace) -> int:

    rnd = get_round(args.round)
    path = Path(args.estimator).expanduser()
    note = shipped_alone_note(left_behind(path)) if path.suffix == ".py" and path.is_file() else None
    if note:
        print(f"note: {args.estimator}: {note}", file=sys.stderr)
    report = check_contract(submission_for(path), rnd)
    missing_note = missing_files_note(report.missing_files)
    if missing_note:
        print(f"note: {args.estimator}: {missing_note}", file=sys.stderr)
    if args.json:
        print(json.dumps({**report.as_dict(), "shipped_note": note, "missing_files_note": missing_note}, indent=2,
                         default=str))
        return 0 if report.ok else 1
    print(f"contract check of {args.estimator} under {rnd.tag} rules "
          f"(a {report.shape[0]} x {report.shape[1]} MLP, budget {rnd.budget:.3g}, wall cap {rnd.wall_time_limit_s:g} s, "
          f"residual {rnd.residual_rule})")
    for step in report.steps:
        print(f"  {'ok  ' if step.ok else 'FAIL'} {step.name}: {step.message}")
        if not step.ok and step.code:
            print(f"       code: {step.code}")
        if not step.ok and step.fix:
            print(f"       fix: {step.fix}")
        if not step.ok and step.traceback:
            print("       " + step.traceback.rstrip().replace("\n", "\n       "))
    if report.environment:
        print(f"imports: {report.environment['rule']}")
    if report.output.strip():
        print("estimator output:\n" + report.output.rstrip())
    print(report.verdict())  # the failure's sentence and fix are said once, above
    return 0 if report.ok else 1
