"""``paper``: measure the paper's figure (cumulant propagation's MSE / Var against FLOPs), resumably.

Every ``cumulant:K[:VARIANT]`` spec on the paper's shapes (widths 8..256 at depth 16, MLPs of seeds
0..m-1, Monte Carlo reference of ``--samples`` on each MLP's own stream) and, with ``--rounds``, on the
first MLPs of each round's embedded dataset under its budget. One JSON file per (shape, MLP) under
``--out`` (default ``data/paper``): re-running skips what is stored with the same settings, and where a
spec was added since a file was made, measures that spec alone.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from whestboard.band import (
    DEFAULT_N_REF,
    PAPER_DEPTH,
    PAPER_WIDTHS,
    measure_paper_shape,
    measure_round_shape,
)
from whestboard.config import paper_dir
from whestboard.data import MAX_DEPTH, MAX_WIDTH, MIN_DEPTH, MIN_WIDTH
from whestboard.rules import ALL_ROUNDS


def _ints(text: str) -> list[int]:
    try:
        return [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise ValueError(f"{text!r} is not a comma-separated list of whole numbers") from None


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--widths", default=",".join(map(str, PAPER_WIDTHS)),
                   help="widths of the paper's shapes (default %(default)s; empty for none)")
    p.add_argument("--depth", type=int, default=PAPER_DEPTH, help="their depth (default %(default)s)")
    p.add_argument("--mlps", type=int, default=4, help="MLPs per paper shape, seeds 0..N-1 (default %(default)s)")
    p.add_argument("--samples", type=int, default=DEFAULT_N_REF,
                   help="Monte Carlo reference samples per MLP, N_ref (default %(default)s: floor 1/N_ref in MSE/Var)")
    p.add_argument("--rounds", default="", help="round tags whose embedded MLPs to add, comma-separated")
    p.add_argument("--round-mlps", type=int, default=2, help="MLPs per round (default %(default)s)")
    p.add_argument("--out", type=Path, help="folder of the per-MLP files (default data/paper, or WHESTBOARD_PAPER_DIR)")


def run(args: argparse.Namespace) -> int:
    widths = _ints(args.widths)
    if any(not MIN_WIDTH <= w <= MAX_WIDTH for w in widths):
        raise ValueError(f"--widths must lie in {MIN_WIDTH}..{MAX_WIDTH}")
    if not MIN_DEPTH <= args.depth <= MAX_DEPTH:
        raise ValueError(f"--depth must lie in {MIN_DEPTH}..{MAX_DEPTH}")
    if args.mlps < 1 or args.round_mlps < 1 or args.samples < 2:
        raise ValueError("--mlps and --round-mlps must be at least 1, --samples at least 2")
    rounds = [r.strip() for r in args.rounds.split(",") if r.strip()]
    unknown = [r for r in rounds if r not in ALL_ROUNDS]
    if unknown:
        raise ValueError(f"unknown round {unknown[0]!r}; use one of {', '.join(ALL_ROUNDS)}")
    new = 0
    for width in widths:
        new += measure_paper_shape(width, args.depth, range(args.mlps), n_ref=args.samples, out=args.out)
    for tag in rounds:
        new += measure_round_shape(tag, range(args.round_mlps), out=args.out)
    print(f"paper figure: {new} MLP(s) measured, the rest already stored, in {args.out or paper_dir()}")
    return 0
