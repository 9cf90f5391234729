"""``datasets``: list what the app would serve; ``--forget NAME`` deletes a dataset kept from the playground."""

from __future__ import annotations

import argparse

from whestboard.data import dataset_overview, forget_kept


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true")
    p.add_argument("--forget", metavar="NAME",
                   help="delete the dataset NAME kept from the playground, on every machine sharing the store")


def run(args: argparse.Namespace) -> int:
    import json

    if args.forget:
        if not forget_kept(args.forget):
            print(f"no dataset called {args.forget!r} was kept from the playground (the embedded and listed "
                  "datasets are read-only: remove their folders instead); see `python -m whestboard datasets`")
            return 2
        print(f"forgot {args.forget}: every machine drops it within a few seconds")
        return 0
    rows = dataset_overview()
    if args.json:
        print(json.dumps(rows, indent=1, default=str))
    else:
        for r in rows:
            print(f"{r['key']:24s} {r['round'] or '-':10s} {r['shape']:10s} {r['n_mlps']:5d} MLPs "
                  f"N_ref={r['n_samples']:.3g} floor={r['noise_floor']:.3g}")
    return 0
