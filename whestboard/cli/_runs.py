"""``runs``: the recorded runs, newest first, with the ids ``compare run:ID`` takes.

Every run the lab, the CLI, an upload or the sweep scored is in the run store. The pages show the first
8 characters of a run's id; ``compare`` takes those (or any start of at least 6) when they name one run,
and this command lists both. ``--json`` prints the runs' summaries (full ids) as a JSON list.
"""

from __future__ import annotations

import argparse
import json

from whestboard.rules import get_round
from whestboard.scoring import list_runs
from whestboard.store import sci

#: Characters of a run id the pages and this listing show.
SHORT_ID = 8


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--dataset", default=None, help="only the runs on this dataset (its key)")
    p.add_argument("--round", default=None, help="only the runs under this round's rules")
    p.add_argument("--limit", type=int, default=50, help="the newest N runs (default 50; 0 for all)")
    p.add_argument("--json", action="store_true", help="print the runs' summaries as a JSON list")


def run(args: argparse.Namespace) -> int:
    if args.round is not None:
        get_round(args.round)  # an unknown round is a one-line error naming the known ones
    if args.limit < 0:
        raise ValueError(f"--limit must be 0 (all) or more, not {args.limit}")
    runs = list_runs(round_tag=args.round, dataset_key=args.dataset, limit=args.limit or None)
    if args.json:
        print(json.dumps(runs, indent=2, allow_nan=False, default=str))
        return 0
    if not runs:
        print("no recorded runs" + (" matching the filters" if args.dataset or args.round else "")
              + ": score one with `python -m whestboard score`, the lab or the upload page")
        return 0
    print(f"{'run':8}  {'created (UTC)':16}  {'source':6}  {'dataset':14}  {'budget B':>9}  {'MLPs':>4}  "
          f"{'failed':>6}  {'score':>9}  {'final MSE':>9}  estimator")
    for r in runs:  # B tells apart the runs of one budget curve: one estimator on the same MLPs at each budget
        team = f" · {r['team']}" if r.get("team") else ""
        print(f"{r['run_id'][:SHORT_ID]:8}  {r['created_at'][:16].replace('T', ' '):16}  {r['source']:6}  "
              f"{r['dataset_key'][:14]:14}  {sci(r.get('budget')):>9}  {r['n_mlps']:>4}  {r['n_failed']:>6}  "
              f"{sci(r['adjusted_score']):>9}  {sci(r['final_layer_mse']):>9}  {r['estimator_label']}{team}")
    print(f"{len(runs)} run(s); compare two with `python -m whestboard compare run:{runs[0]['run_id'][:SHORT_ID]} "
          "run:ID` (the first 8 characters of an id are enough)")
    return 0
