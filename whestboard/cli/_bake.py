"""``bake``: write a compact dataset, resumable after a crash or kill."""

from __future__ import annotations

import argparse
from pathlib import Path

from whestboard.data import ENGINES, bake, plan_from_args
from whestboard.rules import ALL_ROUNDS


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--round", choices=list(ALL_ROUNDS), help="round whose shape to use")
    p.add_argument("--width", type=int, help="override the round's width (custom MLPs)")
    p.add_argument("--depth", type=int, help="override the round's depth (custom MLPs)")
    p.add_argument("--n-mlps", type=int, help="number of MLPs (fresh seeds are drawn)")
    p.add_argument("--samples", type=int, required=True, help="Monte Carlo samples per MLP")
    p.add_argument("--seeds", type=str, help="comma-separated explicit mlp_seeds")
    p.add_argument("--out", type=Path, required=True, help="output directory")
    p.add_argument("--engine", choices=ENGINES, default="numpy",
                   help="numpy (fast, bit-identical) or whestbench (metered, slower)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")


def run(args: argparse.Namespace) -> int:
    seeds = [int(s) for s in args.seeds.split(",") if s.strip()] if args.seeds else None
    plan = plan_from_args(
        round_tag=args.round, width=args.width, depth=args.depth,
        n_mlps=args.n_mlps, n_samples=args.samples, seeds=seeds,
    )
    manifest = bake(args.out, plan, engine=args.engine, explicit_seeds=seeds is not None,
                    show_progress=not args.quiet)
    print(f"baked {manifest['n_mlps']} MLPs of {manifest['width']} x {manifest['depth']} "
          f"at {manifest['n_samples']} samples into {args.out}")
    return 0
