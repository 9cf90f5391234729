"""``import`` and ``export``: graded submissions in and out of the store.

Both act on the local store directly (whoever can run this command can write
the database file), so no organizer token is asked for here; the web server
asks for it on every organizer action.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path

from whestboard.leaderboard import (
    PUBLIC,
    SPLITS,
    Batch,
    ImportRejected,
    commit_batch,
    export_submissions,
    load_batch,
    submission_count,
)


def add_import_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("files", nargs="+", type=Path,
                   help="submissions .csv/.parquet (a <stem>.per_mlp.<ext> sibling comes along), per-MLP files, "
                        "`whest run --json` reports or the grader's own AIcrowd records (.json), or folders of "
                        "them (all or nothing)")
    p.add_argument("--team", help="team of the run reports and grader records (neither names its team)")
    p.add_argument("--id", dest="submission_id", help="submission id for a single run report "
                   "(default: run- plus a hash of its results, so re-importing it updates it)")
    p.add_argument("--round", dest="round_tag", help="round of the run reports (default: from their MLP shape)")
    p.add_argument("--flopscope-version", help="flopscope version the run reports were metered under, for a "
                   "report that does not record it (whestbench 0.16's does, in run_meta.host; one that says "
                   "another is refused)")
    p.add_argument("--split", choices=SPLITS, default=None,
                   help="split of the run reports' MLPs (default public); a private or rerun report adds its "
                        "results to the submission --id names")
    p.add_argument("--dry-run", action="store_true", help="validate only; write nothing")


def run_import(args: argparse.Namespace) -> int:

    batch = load_batch(args.files, team=args.team, submission_id=args.submission_id, round_tag=args.round_tag,
                    flopscope_version=args.flopscope_version, split=args.split)
    for name in batch.files:
        print(f"read {name}", file=sys.stderr)
    if batch.problems:
        raise ImportRejected(batch.problems)
    if args.dry_run:
        print(f"valid: {len(batch.submissions)} submissions, {len(batch.mlp_results)} per-MLP results "
              f"{_by_split(batch)}(dry run)")
        for note in batch.notes:
            print(note)
        return 0
    from sqlalchemy.exc import SQLAlchemyError

    try:
        report = commit_batch(batch)
    except SQLAlchemyError as exc:  # unreachable store, or a write that lost its race every time
        print(f"error: the submissions store could not be written ({type(exc).__name__}: {str(exc)[:300]}); "
              "nothing was imported", file=sys.stderr)
        return 1
    print(f"imported {len(batch.submissions)} submissions ({report.summary()}), "
          f"{len(batch.mlp_results)} per-MLP results {_by_split(batch)}".rstrip())
    for note in report.notes:
        print(note)
    return 0


def _by_split(batch: Batch) -> str:
    """``(public 50, private 50) `` when the per-MLP results are of several splits or not public."""
    counts = Counter(r.split for r in batch.mlp_results)
    if not counts or set(counts) == {PUBLIC}:
        return ""
    return "(" + ", ".join(f"{split} {counts[split]}" for split in SPLITS if counts[split]) + ") "


def add_export_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", type=Path, required=True, help="CSV to write (per-MLP results go to <stem>.per_mlp.csv)")
    p.add_argument("--no-per-mlp", action="store_true", help="write the submissions file only")


def run_export(args: argparse.Namespace) -> int:

    out, sibling = export_submissions(args.out, per_mlp=not args.no_per_mlp)
    print(f"wrote {submission_count()} submissions to {out}" + (f" and per-MLP results to {sibling}" if sibling else ""))
    return 0


def add_arguments(p: argparse.ArgumentParser) -> None:
    """One module serves both commands; the parser's name says which one is being built."""
    (add_export_arguments if p.prog.split()[-1] == "export" else add_import_arguments)(p)


def run(args: argparse.Namespace) -> int:
    return run_export(args) if args.command == "export" else run_import(args)
