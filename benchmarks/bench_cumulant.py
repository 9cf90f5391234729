"""Cumulant propagation per order K beside mean and covariance propagation and MC@B, per round.

Every estimator is scored through the runs core (``whestboard.scoring.execute``: one
``whestbench.scoring.evaluate_estimator`` call per MLP under the round's whole rulebook) on
the first ``--mlps`` MLPs of each round's embedded dataset, so the FLOPs are the grader's
and the MSE is against the dataset's reference. Each MSE is printed beside the reference's
noise floor (mean avg_variance / N_ref) and MC@B (``whestbench.budget.mc_at_bm`` of the same
MLPs' mean avg_variance). Nothing is recorded in the run store.

    .venv/bin/python benchmarks/bench_cumulant.py --mlps 4 [--rounds v1-warmup,v1-phase1,v2-phase2]
"""

from __future__ import annotations

import argparse
import subprocess
import time
from datetime import UTC, datetime

import numpy as np
from whestbench.budget import ROUNDS, mc_at_bm

from whestboard.data import served_datasets
from whestboard.scoring import RunRequest, execute, resolve_estimator, rulebook_for, third_order_window

SPECS = ("mean", "cov", "cumulant:1", "cumulant:1:simple", "cumulant:2", "cumulant:3", "cumulant:3:simple")


def _interval(values: np.ndarray) -> str:
    """Mean with a 95% interval over MLPs (t-free 1.96 sigma/sqrt(m): a rough guide at a few MLPs)."""
    if len(values) < 2:
        return f"{values.mean():.3g}"
    half = 1.96 * values.std(ddof=1) / np.sqrt(len(values))
    return f"{values.mean():.3g} ± {half:.2g}"


def run_round(tag: str, n_mlps: int) -> list[str]:
    dataset = next(ds for ds in served_datasets().values() if ds.info.round_tag == tag)
    indices = list(dataset.indices[:n_mlps])
    rulebook = rulebook_for(tag)
    info = dataset.info
    rows = []
    variances = None
    for spec in SPECS:
        started = time.perf_counter()
        report = execute(RunRequest(dataset, indices, resolve_estimator(spec), rulebook, source="benchmark")).report
        seconds = (time.perf_counter() - started) / len(indices)
        per_mlp = report["results"]["per_mlp"]
        mse = np.array([float(e["final_layer_mse"]) for e in per_mlp])
        flops = np.array([float(e["flops_used"]) for e in per_mlp])
        score = np.array([float(e["adjusted_final_layer_score"]) for e in per_mlp])
        failed = sum(bool(e.get("failed")) for e in per_mlp)
        variances = np.array([float(e["avg_variance"]) for e in per_mlp])
        note = ""
        if spec.startswith("cumulant:3"):
            variant = spec.split(":")[2] if spec.count(":") == 2 else "base"
            note = (f"window {third_order_window(info.width, info.depth, rulebook.flop_budget, variant)} "
                    f"of {info.depth - 1}")
        reasons = sorted({str(e.get("failure_reason"))[:60] for e in per_mlp if e.get("failed")})
        note = "; ".join([note, *reasons]).strip("; ")
        rows.append(f"| {tag} | {spec} | {_interval(mse)} | {_interval(score)} | {flops.mean():.3g} "
                    f"| {flops.mean() / rulebook.flop_budget:.3g} | {failed} | {seconds:.1f} | {note} |")
    floor = float(variances.mean()) / info.n_samples
    mcb = mc_at_bm(float(variances.mean()), ROUNDS[tag])
    rows.append(f"| {tag} | MC@B | {mcb:.3g} (expected) | {mcb:.3g} | {rulebook.flop_budget:.3g} | 1 | | | noise floor {floor:.2g} "
                f"(N_ref {info.n_samples:.3g}), {len(indices)} MLPs ({indices[0]}..{indices[-1]}) |")
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mlps", type=int, default=4, help="MLPs per round, the first of each dataset")
    parser.add_argument("--rounds", default="v1-warmup,v1-phase1,v2-phase2")
    parser.add_argument("--no-header", action="store_true", help="rows only (to append another round)")
    args = parser.parse_args()
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    print(f"measured {datetime.now(UTC):%Y-%m-%d %H:%M} UTC at commit {commit}, first {args.mlps} MLPs per round")
    if not args.no_header:
        print("| round | estimator | final-layer MSE (mean ± 95%) | score MSE x max(0.1, C/B) | FLOPs F per MLP | F/B "
              "| failed | s per MLP | note |")
        print("|---|---|---|---|---|---|---|---|---|")
    for tag in args.rounds.split(","):
        for row in run_round(tag.strip(), args.mlps):
            print(row, flush=True)


if __name__ == "__main__":
    main()
