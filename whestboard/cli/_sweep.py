"""``sweep``: grade the baseline family on the embedded data and record it as submissions."""

from __future__ import annotations

import argparse
from pathlib import Path

from whestboard.leaderboard import default_output, run_sweep, sweep_family


def add_arguments(p: argparse.ArgumentParser) -> None:

    keys = ", ".join(m.key for m in sweep_family())
    p.add_argument("--round", action="append", dest="rounds", metavar="TAG",
                   help="only this round's embedded dataset (repeatable; default: every round)")
    p.add_argument("--only", action="append", metavar="KEY", help=f"only these estimators (repeatable): {keys}")
    p.add_argument("--max-seconds-per-mlp", type=float, default=None, metavar="S",
                   help="skip estimators expected to take longer than S seconds per MLP on this machine")
    p.add_argument("--out", type=Path, default=None,
                   help="submissions CSV to extend (default: data/submissions/baselines.csv, the shipped file)")
    p.add_argument("--no-store", action="store_true", help="write the CSV only, not the app's store")
    p.add_argument("--dry-run", action="store_true", help="show what would be graded and stop")
    p.add_argument("--again", action="store_true",
                   help="grade the chosen entries again even when finished (re-measure them on a quiet machine)")
    p.add_argument("--no-progress", action="store_true")


def run(args: argparse.Namespace) -> int:

    out = args.out or default_output()
    only = [k for part in (args.only or []) for k in part.split(",") if k]
    run_sweep(
        out=out,
        round_tags=args.rounds,
        only=only or None,
        max_seconds_per_mlp=args.max_seconds_per_mlp,
        to_store=not args.no_store,
        dry_run=args.dry_run,
        show_progress=not args.no_progress,
        again=args.again,
    )
    print(f"sweep output: {out}")
    return 0
