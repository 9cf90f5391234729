"""Band forward-pass throughput vs this machine's bare float32 matmul, measured in the same run.

For each round's shape the script times, interleaved over several repetitions
(the machine is shared, so every configuration sees the same background load):

* ``bare, BLAS on all cores``: ``np.matmul`` chained through the layers on
  whestbench's chunk shape (chunk x w) @ (w x w), nothing else;
* ``bare, one BLAS thread per core``: the same work split over one thread per
  core, each single-threaded: the other way to fill the machine;
* ``band``: ``whestboard.band._measure.checkpoint_means`` (draws, matmuls, ReLU,
  float64 sums, the round's checkpoints and variance prefix scaled to the
  trial's length, so each costs its real share) on one MLP per core, one BLAS
  thread each: exactly how ``python -m whestboard band`` runs;
* ``band, 1 core`` and ``bare, 1 core``: per-core efficiency without contention
  between our own threads; ``band forward only`` is the same pass with the inputs
  drawn beforehand, which separates the forward pass from the cost of the draws;
* ``draws only, 1 core``: the band's input draws alone (numpy's float32 ziggurat on
  the band's stream, into the band's reused buffer). They must stay bit-identical,
  so ``bare / (bare + draws)`` is the most the band could reach on one core even if
  ReLU and the float64 sums cost nothing: the ceiling the ratios are judged against.

GFLOP/s count only the matmuls (2 d w^2 per sample) so every row is comparable;
the band's rate therefore includes the cost of drawing inputs, ReLU and sums.
The headline ratio is band / the faster of the two bare configurations.

    .venv/bin/python benchmarks/bench_band_throughput.py [--rounds v1-warmup v2-phase2] [--reps 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
from threadpoolctl import threadpool_limits

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from whestboard.band import band_rng, checkpoint_means, make_plan  # noqa: E402
from whestboard.data import chunk_size_for  # noqa: E402
from whestboard.rules import ALL_ROUNDS  # noqa: E402


def weights_for(width: int, depth: int, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [(rng.standard_normal((width, width)) * np.sqrt(2 / width)).astype(np.float32) for _ in range(depth)]


def bare_matmul(weights: list[np.ndarray], n_samples: int) -> None:
    """Only the matmuls of a pass, on the same (chunk, w) @ (w, w) shapes, into reused buffers."""
    width = weights[0].shape[0]
    chunk = chunk_size_for(width)
    x0 = np.ones((chunk, width), dtype=np.float32)
    buffers = [np.empty_like(x0), np.empty_like(x0)]
    for start in range(0, n_samples, chunk):
        rows = min(chunk, n_samples - start)
        x = x0[:rows]
        for layer, w in enumerate(weights):
            y = buffers[layer % 2][:rows]
            np.matmul(x, w, out=y)
            x = y


def checkpoints_like_the_band(tag: str, n_samples: int) -> tuple[list[int], int]:
    """The round's checkpoints and variance prefix, scaled to a trial of n_samples (same share of the work)."""
    rnd = ALL_ROUNDS[tag]
    plan = make_plan(rnd.width, rnd.depth, budget=rnd.budget, dtype_aware_billing=rnd.dtype_aware_billing)
    scale = n_samples / plan.n_max
    points = sorted({max(1, round(n * scale)) for n in plan.checkpoints} | {n_samples})
    return points, round(plan.variance_samples * scale)


def band_pass(weights: list[np.ndarray], n_samples: int, seed: int, tag: str) -> None:
    points, variance = checkpoints_like_the_band(tag, n_samples)
    checkpoint_means(weights, points, band_rng(seed), variance_samples=variance)


class PreDrawn:
    """Stands in for the generator with inputs drawn beforehand: isolates the forward pass's cost."""

    def __init__(self, width: int) -> None:
        self.normals = np.random.default_rng(0).standard_normal((chunk_size_for(width), width), dtype=np.float32)
        self.filled: set[int] = set()

    def standard_normal(self, size=None, dtype=np.float32, out=None) -> np.ndarray:
        """Fill the pass's input buffer once; later chunks reuse those values at no cost."""
        buffer = out.base if out.base is not None else out
        if id(buffer) not in self.filled:
            buffer[...] = self.normals
            self.filled.add(id(buffer))
        return out


def draws_only(width: int, n_samples: int, seed: int) -> None:
    """Only the band's input draws, chunk by chunk into one reused buffer, as ``checkpoint_means`` draws them."""
    chunk = chunk_size_for(width)
    rng, inputs = band_rng(seed), np.empty((chunk, width), dtype=np.float32)
    for start in range(0, n_samples, chunk):
        rng.standard_normal(dtype=np.float32, out=inputs[:min(chunk, n_samples - start)])


def forward_pass(weights: list[np.ndarray], n_samples: int, inputs: PreDrawn, tag: str) -> None:
    points, variance = checkpoints_like_the_band(tag, n_samples)
    checkpoint_means(weights, points, inputs, variance_samples=variance)


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def parallel(fn, jobs: int, per_job: int, weights_per_job: list[list[np.ndarray]]) -> float:
    with threadpool_limits(limits=1, user_api="blas"), ThreadPoolExecutor(jobs) as pool:
        def run() -> None:
            futures = [pool.submit(fn, weights_per_job[j], per_job, j) for j in range(jobs)]
            for f in futures:
                f.result()
        return timed(run)


BARE_ALL, BARE_PAR, BAND_PAR = "bare, BLAS on all cores", "bare, one BLAS thread per core", "band, one MLP per core"
BARE_1, BAND_1, FORWARD_1 = "bare, 1 core", "band, 1 core", "band forward only, 1 core"
DRAWS_1 = "draws only, 1 core"
CEILING = "ceiling: bare / (bare + draws), one core"
RATIOS = {
    "band / best bare matmul, whole machine": (BAND_PAR, (BARE_ALL, BARE_PAR)),
    "band / bare matmul, one core": (BAND_1, (BARE_1,)),
    "band forward only (inputs pre-drawn) / bare, one core": (FORWARD_1, (BARE_1,)),
}


def measure(tag: str, reps: int, target_s: float, jobs: int) -> tuple[dict[str, list[float]], dict[str, float]]:
    """GFLOP/s of every configuration in every repetition (configurations shuffled within each)."""
    rnd = ALL_ROUNDS[tag]
    width, depth = rnd.width, rnd.depth
    chunk = chunk_size_for(width)
    weights = [weights_for(width, depth, j) for j in range(jobs)]
    flops_per_sample = 2 * depth * width * width
    # samples per job so that one band trial takes about target_s at ~20 GFLOP/s per core
    per_job = max(chunk, int(target_s * 20e9 / flops_per_sample) // chunk * chunk)
    configs = {
        BARE_ALL: lambda: timed(lambda: bare_matmul(weights[0], per_job * jobs)),
        BARE_PAR: lambda: parallel(lambda w, n, _j: bare_matmul(w, n), jobs, per_job, weights),
        BAND_PAR: lambda: parallel(lambda w, n, j: band_pass(w, n, j, tag), jobs, per_job, weights),
        BARE_1: lambda: _single(lambda: bare_matmul(weights[0], per_job)),
        BAND_1: lambda: _single(lambda: band_pass(weights[0], per_job, 0, tag)),
        FORWARD_1: lambda: _single(lambda: forward_pass(weights[0], per_job, predrawn, tag)),
        DRAWS_1: lambda: _single(lambda: draws_only(width, per_job, 0)),
    }
    predrawn = PreDrawn(width)
    forward_pass(weights[0], chunk, predrawn, tag)  # fills its input buffer once, outside the timings
    samples = {name: per_job if "1 core" in name else per_job * jobs for name in configs}
    rates: dict[str, list[float]] = {name: [] for name in configs}
    band_pass(weights[0], chunk, 0, tag)  # warm up allocations and BLAS
    order = list(configs)
    shuffle = np.random.default_rng(0)
    for _ in range(reps):
        shuffle.shuffle(order)
        for name in order:
            rates[name].append(flops_per_sample * samples[name] / configs[name]() / 1e9)
    return rates, _ratios(rates)


def _ratios(rates: dict[str, list[float]]) -> dict[str, float]:
    """Median over repetitions of the ratio within each repetition (same background load)."""
    out = {}
    for label, (mine, bares) in RATIOS.items():
        per_rep = [rates[mine][i] / max(rates[b][i] for b in bares) for i in range(len(rates[mine]))]
        out[label] = statistics.median(per_rep)
        out[label + " (best / best)"] = max(rates[mine]) / max(max(rates[b]) for b in bares)
    # rates are matmul FLOPs per second, so time ratios invert them: t_bare / (t_bare + t_draws)
    per_rep = [1 / (1 + b / d) for b, d in zip(rates[BARE_1], rates[DRAWS_1], strict=True)]
    out[CEILING] = statistics.median(per_rep)
    out[CEILING + " (best / best)"] = 1 / (1 + max(rates[BARE_1]) / max(rates[DRAWS_1]))
    return out


def _single(fn) -> float:
    with threadpool_limits(limits=1, user_api="blas"):
        return timed(fn)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", nargs="+", default=list(ALL_ROUNDS), choices=list(ALL_ROUNDS))
    parser.add_argument("--reps", type=int, default=7)
    parser.add_argument("--seconds", type=float, default=1.0, help="approximate length of one band trial")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    args = parser.parse_args(argv)
    print(f"{os.cpu_count()} cores, {args.jobs} jobs, {args.reps} repetitions (configurations shuffled in each); "
          f"GFLOP/s of matmul (2 d w^2 per sample); load average {os.getloadavg()[0]:.1f}")
    worst = float("inf")
    for tag in args.rounds:
        rates, ratios = measure(tag, args.reps, args.seconds, args.jobs)
        rnd = ALL_ROUNDS[tag]
        print(f"\n{tag} ({rnd.width} x {rnd.depth}, chunk {chunk_size_for(rnd.width)})")
        for name, values in rates.items():
            print(f"  {name:34s} median {statistics.median(values):7.1f}  best {max(values):7.1f} GFLOP/s")
        for label in (*RATIOS, CEILING):
            print(f"  ratio {label:55s} {ratios[label]:.2f}  (best/best {ratios[label + ' (best / best)']:.2f})")
        worst = min(worst, ratios["band / best bare matmul, whole machine"])
    print(f"\nworst whole-machine ratio (median of paired repetitions): {worst:.2f} (target >= 0.80); "
          f"load average now {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
