"""``compare``: two estimators paired on the MLPs both were scored on, with a noise-aware verdict.

A and B are run ids, submission ids (``run:<id>``, ``sub:<id>``, ``base:<dataset>:<mean|cov>`` or bare) or two
``score --json`` report files. ``--json`` prints exactly the numbers the compare page shows (one
``whestboard.compare.verdict`` dict); ``--anatomy`` adds where A's error comes from (and A - B's),
which needs stored predictions and the served dataset.
"""

from __future__ import annotations

import argparse
import json

from whestboard.compare import (
    ID_HELP,
    anatomy_inputs,
    anatomy_of,
    dataset_of,
    mlps_needed_text,
    resolve_side,
    too_few_sentence,
    verdict,
)
from whestboard.store import sci


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("a", help=f"the first side: {ID_HELP}, or a score --json report file")
    p.add_argument("b", help="the second side, the same kinds")
    p.add_argument("--json", action="store_true", help="print the comparison as JSON on stdout")
    p.add_argument("--anatomy", action="store_true", help="add the error anatomy (needs stored predictions)")


def _print_stat(name: str, stat: dict) -> None:
    if not stat["verdict_possible"]:  # no interval and no winner: what the MLPs show, and how many to score
        print(f"{name}: A {sci(stat['mean_a'])}, B {sci(stat['mean_b'])}; {too_few_sentence(stat, name)}")
        print(f"  A / B (geometric mean) {sci(stat['ratio'])}; A wins {stat['wins']}, loses {stat['losses']}, "
              f"ties {stat['ties']}; sign-flip p = {sci(stat['p_value'])}")
        return
    verdict_word = {"A lower": "A lower (better)", "B lower": "B lower (better)"}.get(stat["verdict"], "not resolved")
    print(f"{name}: A {sci(stat['mean_a'])}, B {sci(stat['mean_b'])}; mean A - B {sci(stat['mean_difference'])} "
          f"[95% {sci(stat['ci_low'])}, {sci(stat['ci_high'])}] -> {verdict_word}")
    print(f"  A / B (geometric mean) {sci(stat['ratio'])} [{sci(stat['ratio_low'])}, {sci(stat['ratio_high'])}]; "
          f"A wins {stat['wins']}, loses {stat['losses']}, ties {stat['ties']}; sign-flip p = {sci(stat['p_value'])}; "
          f"MLPs needed {mlps_needed_text(stat)}")


def _print_human(out: dict) -> None:
    print(f"A: {out['a']['label']} ({out['a']['id']})")
    print(f"B: {out['b']['label']} ({out['b']['id']})")
    print(f"{out['n_shared']} shared MLPs (a public suite has {out['public_suite_mlps']})")
    _print_stat("score", out["score"])
    _print_stat("final-layer MSE", out["final_layer_mse"])
    noise = out["noise"]
    print(noise["sentence"] if noise["available"] else noise["reason"])
    if out.get("blas", {}).get("same") is False:
        print(out["blas"]["sentence"])
    anatomy = out.get("anatomy")
    if anatomy:
        shares = anatomy["shares_a"]["shares"]
        print("A's final-layer squared error: " + ", ".join(f"{k} {sci(v)}" for k, v in shares.items()))
        print("A's per-layer MSE: " + " ".join(sci(x) for x in anatomy["per_layer_mse_a"]))


def run(args: argparse.Namespace) -> int:
    a, b = resolve_side(args.a), resolve_side(args.b)
    out = verdict(a, b)
    if args.anatomy:
        out["anatomy"] = anatomy_of(anatomy_inputs(a, b, dataset_of(a)))
    if args.json:
        print(json.dumps(out, indent=2, allow_nan=False))
    else:
        _print_human(out)
    return 0
