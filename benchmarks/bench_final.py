"""A final evaluation's cost against bare ``evaluate_estimator`` on the same MLPs, measured in one run.

The final: ``--packages`` participant files (mean propagation and covariance propagation alternating,
each file its own team and code hash) rerun by ``whestboard.final.run_final`` on a fresh suite of
``--mlps`` MLPs of the round's shape (default v1-warmup, 256 x 8), every pair in the sandbox, every
result kept in the store, then the standings with their tie-breaks (the copies of one estimator are
close, so the tie-break's extra MLPs are part of the cost, bounded by ``--max-extra``). The bare
baseline: ``whestbench.scoring.evaluate_estimator`` in this process on the same suite (whestbench's
``make_contest`` for the seed, its first 20 MLPs), one estimator instance and one call per estimator
over them, as the grader runs a submission; the same with one call per MLP is printed beside it, since
that adds ``evaluate_estimator``'s per-call set-up to every pair. The ratio is per (submission, MLP)
pair, references excluded (they are timed apart: ``--truth-samples`` per MLP).

The 1024 x 16 extrapolation measures bare ``evaluate_estimator`` on one 1024 x 16 MLP per estimator
and adds the final's per-pair overhead measured here (ledger, store, sandbox hand-over) two ways: as
measured (the part that does not grow with the MLP) and scaled by the weights' size (32x from
256 x 8, an upper bound); the references are scaled by the forward work (2 d w^2 per sample).

    .venv/bin/python benchmarks/bench_final.py [--packages 20] [--mlps 100] [--truth-samples 10000]
"""

from __future__ import annotations

import argparse
import copy
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

FILES = {
    "mean": "from whestbench.estimators import MeanPropagationEstimator\n\n\n"
            "class Estimator(MeanPropagationEstimator):\n    TEAM = {i}\n",
    "covariance": "from whestbench.estimators import CovariancePropagationEstimator\n\n\n"
                  "class Estimator(CovariancePropagationEstimator):\n    TEAM = {i}\n",
}


def _packages(root: Path, n: int) -> list[tuple[str, Path, str]]:
    out = []
    for i in range(n):
        kind = ("mean", "covariance")[i % 2]
        path = root / f"team{i:02d}.py"
        path.write_text(FILES[kind].format(i=i))
        out.append((f"team{i:02d}", path, kind))
    return out


def _bare(kind: str):
    from whestbench.estimators import CovariancePropagationEstimator, MeanPropagationEstimator

    return {"mean": MeanPropagationEstimator, "covariance": CovariancePropagationEstimator}[kind]()


def _contest_of(data, indices):
    from whestbench.scoring import ContestData

    spec = copy.copy(data.spec)
    spec.n_mlps = len(indices)
    return ContestData(spec=spec, mlps=[data.mlps[i] for i in indices],
                       all_layer_targets=[data.all_layer_targets[i] for i in indices],
                       final_targets=[data.final_targets[i] for i in indices],
                       avg_variances=[data.avg_variances[i] for i in indices])


def _bare_per_pair(data, kinds: list[str], *, one_at_a_time: bool = False, blas_threads: int | None = 1) -> float:
    """Seconds per (estimator, MLP) of bare evaluate_estimator over the packages' mix.

    As the grader runs it (the default): one estimator instance and one call per estimator over every MLP,
    so its set-up is shared as the final's batch shares it. ``one_at_a_time``: a call per MLP, which adds
    evaluate_estimator's per-call set-up to every pair. ``blas_threads``: 1 by default, as a sandbox worker
    runs (its BLAS is limited to one thread), so both sides do the same arithmetic the same way; None
    leaves BLAS on every core, which on a shared machine can be slower, not faster.
    """
    from threadpoolctl import threadpool_limits
    from whestbench.scoring import evaluate_estimator

    n = len(data.mlps)
    batches = [[i] for i in range(n)] if one_at_a_time else [list(range(n))]
    started = time.perf_counter()
    with threadpool_limits(limits=blas_threads):
        for kind in kinds:
            for batch in batches:
                evaluate_estimator(_bare(kind), _contest_of(data, batch))
    return (time.perf_counter() - started) / (len(kinds) * n)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--round", default="v1-warmup")
    parser.add_argument("--packages", type=int, default=20)
    parser.add_argument("--mlps", type=int, default=100)
    parser.add_argument("--truth-samples", type=int, default=10_000)
    parser.add_argument("--max-extra", type=int, default=10)
    parser.add_argument("--seed", type=int, default=20261202)
    parser.add_argument("--no-extrapolation", action="store_true")
    args = parser.parse_args()

    os.environ.setdefault("WHESTBOARD_STATE_DIR", tempfile.mkdtemp(prefix="bench-final-"))
    import warnings

    warnings.filterwarnings("ignore")
    from whestbench.scoring import make_contest

    from whestboard.final import FinalRequest, FinalSuite, Nominee, run_final
    from whestboard.rules import get_round
    from whestboard.scoring import rulebook_for

    rnd = get_round(args.round)
    root = Path(tempfile.mkdtemp(prefix="bench-final-packages-"))
    packages = _packages(root, args.packages)
    print(f"final of {args.packages} packages x {args.mlps} MLPs at {rnd.shape_label} ({args.round}), "
          f"references of {args.truth_samples:,} samples, at most {args.max_extra} extra MLPs per close group")

    started = time.perf_counter()
    FinalSuite(rnd, args.seed, args.mlps, args.truth_samples)
    references_s = time.perf_counter() - started
    request = FinalRequest(args.round, tuple(Nominee(team, str(path)) for team, path, _ in packages), args.seed,
                           args.mlps, args.truth_samples, args.max_extra)
    started = time.perf_counter()
    record = run_final(request)
    final_s = time.perf_counter() - started
    pairs = record["scorings"]["scored"]
    extra_refs = record["suite"]["n_extra_mlps"]
    per_pair = final_s / pairs

    spec = rulebook_for(args.round).contest_spec(width=rnd.width, depth=rnd.depth, n_mlps=min(args.mlps, 20),
                                                 n_samples=1000)
    spec.seed = args.seed
    data = make_contest(spec)
    kinds = [kind for _, _, kind in packages[:2]] * 2
    bare = _bare_per_pair(data, kinds)
    bare_single = _bare_per_pair(data, kinds, one_at_a_time=True)
    bare_all_cores = _bare_per_pair(data, kinds, blas_threads=None)
    print(f"references: {references_s:.1f} s for {args.mlps} MLPs ({references_s / args.mlps:.2f} s each)")
    print(f"final: {final_s:.1f} s for {pairs} scored pairs ({extra_refs} extra MLPs baked, "
          f"{len(record['tie_breaks'])} close groups); {per_pair:.3f} s per pair")
    print(f"bare evaluate_estimator: {bare:.3f} s per pair (same estimators, same shape, in this process, "
          f"one call per estimator over {len(data.mlps)} MLPs as the grader runs it, one BLAS thread as "
          "in the sandbox)")
    print(f"ratio final / bare per pair: {per_pair / bare:.2f}x")
    print(f"bare evaluate_estimator one MLP per call: {bare_single:.3f} s per pair "
          f"(its per-call set-up on every pair; final / this: {per_pair / bare_single:.2f}x)")
    print(f"bare evaluate_estimator with BLAS on every core: {bare_all_cores:.3f} s per pair "
          f"(final / this: {per_pair / bare_all_cores:.2f}x)")

    if not args.no_extrapolation:
        big = get_round("v2-phase2")
        spec = rulebook_for("v2-phase2").contest_spec(width=big.width, depth=big.depth, n_mlps=1, n_samples=100)
        spec.seed = args.seed
        data = make_contest(spec)
        bare_big = {kind: _bare_per_pair(data, [kind]) for kind in FILES}
        scale = (big.width ** 2 * big.depth) / (rnd.width ** 2 * rnd.depth)
        overhead = max(per_pair - bare, 0.0)
        mix = sum(bare_big.values()) / len(bare_big)
        refs_big = references_s / args.mlps * scale * 100
        low, high = 20 * 100 * (mix + overhead), 20 * 100 * (mix + overhead * scale)
        print(f"1024 x 16: bare evaluate_estimator mean {bare_big['mean']:.2f} s, covariance "
              f"{bare_big['covariance']:.2f} s per MLP; the final's overhead per pair here {overhead:.2f} s")
        print(f"1024 x 16 extrapolated, 20 x 100 pairs on one core: {low / 3600:.1f} h with the overhead as "
              f"measured here (size-independent), {high / 3600:.1f} h if all of it grew with the weights "
              f"({scale:.0f}x); references {refs_big / 3600:.2f} h at {args.truth_samples:,} samples")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
