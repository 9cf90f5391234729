"""``datasets``: list what the app would serve."""

from __future__ import annotations

import argparse

from whestboard.data import dataset_overview


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true")


def run(args: argparse.Namespace) -> int:
    import json


    rows = dataset_overview()
    if args.json:
        print(json.dumps(rows, indent=1, default=str))
    else:
        for r in rows:
            print(f"{r['key']:24s} {r['round'] or '-':10s} {r['shape']:10s} {r['n_mlps']:5d} MLPs "
                  f"N_ref={r['n_samples']:.3g} floor={r['noise_floor']:.3g}")
    return 0
