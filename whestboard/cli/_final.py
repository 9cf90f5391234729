"""``final``: rerun the nominated submissions on a fresh private suite and rank them by the official rules.

Resumable: run the same command again after an interruption and only the (submission, MLP) pairs with
no stored result are scored. With ``WHESTBOARD_REDIS_URL`` set the teams' batches go to the Celery
workers (``celery -A worker worker`` on any machine sharing the store) and this process scores only what
they leave (docs/leaderboard.md, "Spread over machines").
"""

from __future__ import annotations

import argparse
import json
import sys

from whestboard.final import (
    DEFAULT_MAX_EXTRA_MLPS,
    DEFAULT_TRUTH_SAMPLES,
    FinalRequest,
    nominee,
    run_final,
    standings_text,
)
from whestboard.store import json_safe


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--round", required=True, metavar="TAG", help="the round whose rulebook and shape apply")
    p.add_argument("--submission", action="append", required=True, metavar="TEAM=PATH",
                   help="a team's nominated submission (repeatable): a `whest package` .tar.gz, a folder, a .py, "
                        "upload:SHA256 (a stored upload) or submission:ID (a stored submission with its package)")
    p.add_argument("--suite-seed", type=int, required=True, metavar="S", help="the private seed the suite is made from")
    p.add_argument("--n-mlps", type=int, required=True, metavar="N", help="MLPs in the rerun suite")
    p.add_argument("--truth-samples", type=int, default=DEFAULT_TRUTH_SAMPLES, metavar="K",
                   help=f"Monte Carlo samples per reference (default {DEFAULT_TRUTH_SAMPLES:,}); floor = avg_variance / K")
    p.add_argument("--max-extra-mlps", type=int, default=DEFAULT_MAX_EXTRA_MLPS, metavar="M",
                   help=f"most extra MLPs baked to separate a close group (default {DEFAULT_MAX_EXTRA_MLPS})")
    p.add_argument("--json", action="store_true", help="print the standings and tie-breaks as JSON")


def run(args: argparse.Namespace) -> int:
    request = FinalRequest(args.round, tuple(nominee(text) for text in args.submission), args.suite_seed,
                           args.n_mlps, args.truth_samples, args.max_extra_mlps)

    def progress(done: int, total: int, label: str) -> None:
        print(f"\r[{done}/{total}] {label:<60}", end="", file=sys.stderr, flush=True)

    record = run_final(request, on_progress=progress)
    print(file=sys.stderr)
    if args.json:
        print(json.dumps(json_safe({key: record[key] for key in record if key != "per_mlp"}), indent=2))
        return 0
    print(standings_text(record))
    return 0
