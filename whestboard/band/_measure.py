"""Monte Carlo convergence band: how sampling error falls as FLOPs grow, measured.

For every MLP of a dataset, one Monte Carlo run on a fresh sampling stream
records the running per-layer means at checkpoints N = 2^k, at 10% of the
budget, at the budget and at the largest N. One pass serves every checkpoint,
so an MLP costs one run at the largest N, not the sum over checkpoints.

**Stream.** whestbench's seed protocol spawns three children of
``SeedSequence(mlp_seed)``: 0 = weights, 1 = the reference's sampling stream,
2 = the estimator seed handed to participants. The band draws from a fourth,
``SeedSequence(mlp_seed).spawn(4)[3]``. A child is derived from the root's
entropy and its own spawn key alone, so ``spawn(4)[:3]`` are byte-identical to
the protocol's three, and SeedSequence hashes the spawn key into the state, so
child 3 is statistically independent of child 1 (the reference) and of child 2
(whatever a participant draws from ``mlp.seed``). Independence is what makes
the band's error and the reference's error add instead of cancelling, which
the noise correction below relies on.

**Forward pass.** The operations of ``whestboard.data._sampling`` (and so of
``whestbench.sample_layer_statistics``): whestbench's chunk size, float32
draws and matmuls, ReLU, float64 per-layer sums added chunk by chunk in the
same order, means rounded to float32. No sum of squares: the band is the
Monte Carlo *estimator*, not the reference. A checkpoint inside a chunk takes
the sum of the chunk's first rows (numpy reduces axis 0 row by row, so that
prefix is exactly the partial sum) without splitting the matmul. Chunk-end
checkpoints and the last one therefore equal a separate whestbench run at that
N bit for bit (same BLAS threads); a checkpoint inside a chunk equals one to
float32 rounding, because OpenBLAS rounds a row of a product differently
depending on how many rows the call has.

**FLOPs.** ``mc_flops_per_sample`` of the round times N: what flopscope bills
per sample for ``sample_layer_statistics`` minus its sum of squares (36 w per
sample), as ``whestbench.budget`` defines it. The few d*w FLOPs that turn sums
into means once per run are not counted, as in ``mc_samples_at_budget``.

**Noise correction.** The reference carries its own sampling error, so an
MSE measured against it is, in expectation, the true MSE plus
avg_variance / N_ref (the band's stream is independent of it). Each
checkpoint stores the raw MSE and the corrected one (raw minus that floor).
For all layers the analogous floor is the mean over layers of each layer's
average variance / N_ref; the dataset stores only the final layer's, so the
others are estimated from the band's own first ``VARIANCE_SAMPLES`` samples
(about 1% relative error, on a term that is at most a fraction of the MSE).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from whestboard.data import chunk_size_for
from whestboard.rules import metered_dtype_aware_billing, sampling_mse

#: The band's stream is ``SeedSequence(mlp_seed).spawn(BAND_SPAWN_COUNT)[BAND_SPAWN_CHILD]``.
BAND_SPAWN_COUNT = 4
BAND_SPAWN_CHILD = 3
STREAM_DESCRIPTION = (
    "numpy default_rng(SeedSequence(mlp_seed).spawn(4)[3]).standard_normal(float32): "
    "children 0-2 are whestbench's weight, reference and estimator streams"
)
#: The smallest power-of-two checkpoint (16 samples).
MIN_CHECKPOINT_LOG2 = 4
#: Samples whose per-layer variance feeds the all-layer noise correction.
VARIANCE_SAMPLES = 2**14
DEFAULT_MAX_BUDGET_MULTIPLE = 4.0
MAX_BUDGET_MULTIPLE_LIMIT = 64.0
QUANTILES = (10, 25, 50, 75, 90)
METRICS = ("final", "all")

ChunkFn = Callable[[int], None]


class BandError(ValueError):
    """A band that cannot be computed or loaded as asked; the message says what to change."""


def band_seed_sequence(mlp_seed: int) -> np.random.SeedSequence:
    """The band's sampling stream for one MLP (see the module docstring for why it is independent)."""
    return np.random.SeedSequence(int(mlp_seed)).spawn(BAND_SPAWN_COUNT)[BAND_SPAWN_CHILD]


def band_rng(mlp_seed: int) -> np.random.Generator:
    return np.random.default_rng(band_seed_sequence(mlp_seed))


# ---------------------------------------------------------------------------
# plan: which N to record and what each costs
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class BandPlan:
    """Checkpoints and prices for one shape and rulebook."""

    width: int
    depth: int
    round_tag: str | None
    budget: int
    dtype_aware_billing: bool
    flops_per_sample: int
    samples_at_budget: float
    max_budget_multiple: float
    checkpoints: tuple[int, ...]
    chunk_size: int
    variance_samples: int

    @property
    def n_at_budget(self) -> int:
        """Whole samples the budget pays for: floor of the fractional N (65,374.4 -> 65,374)."""
        return math.floor(self.samples_at_budget)

    @property
    def n_at_charging_floor(self) -> int:
        return math.floor(0.1 * self.samples_at_budget)

    @property
    def n_max(self) -> int:
        return self.checkpoints[-1]

    def flops(self, n: int) -> int:
        return self.flops_per_sample * int(n)

    def as_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["checkpoints"] = list(self.checkpoints)
        out.update(n_at_budget=self.n_at_budget, n_at_charging_floor=self.n_at_charging_floor, n_max=self.n_max)
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> BandPlan:
        fields = {f.name for f in dataclasses.fields(cls)}
        values = {k: v for k, v in data.items() if k in fields}
        values["checkpoints"] = tuple(int(n) for n in values["checkpoints"])
        return cls(**values)


def checkpoints_for(samples_at_budget: float, max_budget_multiple: float) -> tuple[int, ...]:
    """Powers of two from 2^MIN_CHECKPOINT_LOG2, plus 10% of the budget, the budget and the end."""
    n_max = math.floor(max_budget_multiple * samples_at_budget)
    smallest = 2**MIN_CHECKPOINT_LOG2
    points = {2**k for k in range(MIN_CHECKPOINT_LOG2, n_max.bit_length()) if 2**k <= n_max}
    points |= {math.floor(samples_at_budget), n_max}
    charging_floor = math.floor(0.1 * samples_at_budget)
    if charging_floor >= smallest:
        points.add(charging_floor)
    return tuple(sorted(points))


def make_plan(
    width: int,
    depth: int,
    *,
    budget: int,
    dtype_aware_billing: bool,
    max_budget_multiple: float = DEFAULT_MAX_BUDGET_MULTIPLE,
    round_tag: str | None = None,
) -> BandPlan:
    """A plan priced with whestbench's ``mc_flops_per_sample`` under the given billing rule."""
    from whestbench.budget import mc_flops_per_sample

    if not 1.0 <= float(max_budget_multiple) <= MAX_BUDGET_MULTIPLE_LIMIT:
        raise BandError(
            f"--max-budget-multiple must be between 1 (stop at the budget) and {MAX_BUDGET_MULTIPLE_LIMIT:g}, "
            f"got {max_budget_multiple:g}"
        )
    if int(budget) <= 0:
        raise BandError(f"budget must be a positive number of FLOPs, got {budget}")
    per_sample = int(mc_flops_per_sample(int(width), int(depth), dtype_aware_billing=bool(dtype_aware_billing)))
    samples = int(budget) / per_sample
    if math.floor(samples) < 2**MIN_CHECKPOINT_LOG2:
        raise BandError(
            f"a budget of {int(budget):.3g} FLOPs buys only {samples:.1f} Monte Carlo samples of a "
            f"{width} x {depth} MLP ({per_sample:,} FLOPs each); the band needs at least {2**MIN_CHECKPOINT_LOG2}"
        )
    return BandPlan(
        width=int(width),
        depth=int(depth),
        round_tag=round_tag,
        budget=int(budget),
        dtype_aware_billing=bool(dtype_aware_billing),
        flops_per_sample=per_sample,
        samples_at_budget=samples,
        max_budget_multiple=float(max_budget_multiple),
        checkpoints=checkpoints_for(samples, float(max_budget_multiple)),
        chunk_size=chunk_size_for(int(width)),
        variance_samples=VARIANCE_SAMPLES,
    )


def plan_for_dataset(dataset, max_budget_multiple: float = DEFAULT_MAX_BUDGET_MULTIPLE,
                     budget: int | None = None) -> BandPlan:
    """The round's budget and billing rule; a custom-shaped dataset needs an explicit budget."""
    info = dataset.info
    rnd = info.round
    if rnd is None and budget is None:
        raise BandError(
            f"dataset {info.key!r} is {info.width} x {info.depth}, not a round's shape; "
            "give --budget FLOPS to say where the budget marker sits"
        )
    if rnd is not None:
        billing = rnd.dtype_aware_billing
    else:

        billing = metered_dtype_aware_billing()
    return make_plan(
        info.width,
        info.depth,
        budget=int(budget) if budget is not None else rnd.budget,
        dtype_aware_billing=billing,
        max_budget_multiple=max_budget_multiple,
        round_tag=rnd.tag if rnd else None,
    )


# ---------------------------------------------------------------------------
# the one-pass kernel
# ---------------------------------------------------------------------------


@dataclass
class CheckpointMeans:
    """Per-layer means at every checkpoint of one pass, plus early per-layer variances."""

    n: np.ndarray  # (K,) int64
    layer_means: np.ndarray  # (K, depth, width) float32, as whestbench rounds them
    layer_avg_variance: np.ndarray  # (depth,) float64: mean per-neuron variance per layer
    variance_samples: int


class _Prefix:
    """Float64 sums and sums of squares over the first ``limit`` samples (all-layer noise floor).

    A chunk wholly inside the prefix reuses the chunk's float64 sum the pass computes anyway (the
    same sequential row order, so the same bits), and squares into one float64 buffer kept for the
    pass instead of a fresh array per layer and chunk.
    """

    def __init__(self, depth: int, width: int, limit: int) -> None:
        self.limit = int(limit)
        self.lin = np.zeros((depth, width))
        self.sq = np.zeros((depth, width))
        self._squares: np.ndarray | None = None

    def rows_in(self, start: int, n: int) -> int:
        return max(0, min(n, self.limit - start))

    def add(self, layer: int, y: np.ndarray, chunk_sum: np.ndarray | None = None) -> None:
        """Add the rows ``y``; ``chunk_sum``: their float64 column sums when already formed."""
        if self._squares is None or self._squares.shape[0] < y.shape[0]:
            self._squares = np.empty(y.shape, dtype=np.float64)
        squares = self._squares[: y.shape[0]]
        np.copyto(squares, y)
        self.lin[layer] += np.add.reduce(squares, axis=0) if chunk_sum is None else chunk_sum
        np.multiply(squares, squares, out=squares)
        self.sq[layer] += np.add.reduce(squares, axis=0)

    def avg_variance(self) -> np.ndarray:
        if self.limit == 0:
            return np.full(self.lin.shape[0], np.nan)
        mean = self.lin / self.limit
        return np.mean(self.sq / self.limit - mean**2, axis=1)


def checkpoint_means(
    weights: Sequence[np.ndarray],
    checkpoints: Sequence[int],
    rng: np.random.Generator,
    *,
    variance_samples: int = VARIANCE_SAMPLES,
    on_chunk: ChunkFn | None = None,
) -> CheckpointMeans:
    """One Monte Carlo pass to the largest checkpoint, recording the running means at each.

    ``on_chunk(rows)`` is called after every chunk (progress bars; raising from
    it stops the pass). Inputs and activations live in buffers reused across
    chunks and layers, so a pass allocates nothing per chunk.
    """
    ws = [np.ascontiguousarray(np.asarray(w), dtype=np.float32) for w in weights]
    depth, width = len(ws), ws[0].shape[0]
    stops = sorted({int(n) for n in checkpoints})
    if not stops or stops[0] < 1:
        raise BandError("checkpoints must be positive sample counts")
    chunk = chunk_size_for(width)
    sums = np.zeros((depth, width), dtype=np.float64)
    means = np.empty((len(stops), depth, width), dtype=np.float32)
    prefix = _Prefix(depth, width, min(int(variance_samples), stops[-1]))
    inputs = np.empty((chunk, width), dtype=np.float32)
    buffers = [np.empty((chunk, width), dtype=np.float32) for _ in range(2)]
    recorded = 0
    for start in range(0, stops[-1], chunk):
        n = min(chunk, stops[-1] - start)
        inner = [s - start for s in stops[recorded:] if s - start < n]
        before = sums.copy() if inner else None
        partial = np.zeros((len(inner), depth, width))
        x = rng.standard_normal(dtype=np.float32, out=inputs[:n])  # the same draws as size=(n, width)
        for layer, w in enumerate(ws):
            y = buffers[layer % 2][:n]
            np.matmul(x, w, out=y)
            np.maximum(y, 0.0, out=y)
            chunk_sum = np.add.reduce(y, axis=0, dtype=np.float64)
            sums[layer] = sums[layer] + chunk_sum
            for j, rows in enumerate(inner):
                partial[j, layer] = np.add.reduce(y[:rows], axis=0, dtype=np.float64)
            in_prefix = prefix.rows_in(start, n)
            if in_prefix:
                prefix.add(layer, y[:in_prefix], chunk_sum if in_prefix == n else None)
            x = y
        for j, rows in enumerate(inner):
            means[recorded] = np.asarray((before + partial[j]) / (start + rows), dtype=np.float32)
            recorded += 1
        if recorded < len(stops) and stops[recorded] == start + n:
            means[recorded] = np.asarray(sums / (start + n), dtype=np.float32)
            recorded += 1
        if on_chunk is not None:
            on_chunk(n)
    return CheckpointMeans(
        n=np.asarray(stops, dtype=np.int64),
        layer_means=means,
        layer_avg_variance=prefix.avg_variance(),
        variance_samples=prefix.limit,
    )


# ---------------------------------------------------------------------------
# one MLP's band
# ---------------------------------------------------------------------------


@dataclass
class MLPBand:
    """Raw per-layer MSE at every checkpoint for one MLP, with what its correction needs."""

    index: int
    mlp_seed: int
    mlp_name: str
    n: np.ndarray  # (K,) int64
    flops: np.ndarray  # (K,) int64
    per_layer_mse_raw: np.ndarray  # (K, depth) float64, measured against the reference
    avg_variance: float  # the dataset's (final layer, from the reference run)
    layer_avg_variance: np.ndarray  # (depth,) from the band's first samples
    variance_samples: int
    reference_samples: int
    reference_sha256: str = ""
    wall_time_s: float = float("nan")

    @property
    def final_mse_raw(self) -> np.ndarray:
        return self.per_layer_mse_raw[:, -1]

    @property
    def all_mse_raw(self) -> np.ndarray:
        return self.per_layer_mse_raw.mean(axis=1)

    def sigma2(self, metric: str = "final") -> float:
        """sigma^2 such that the expected MSE of N samples is sigma^2 / N."""
        if metric == "final":
            return float(self.avg_variance)
        layers = np.append(self.layer_avg_variance[:-1], self.avg_variance)
        return float(np.mean(layers))

    def noise_floor(self, metric: str = "final") -> float:
        """What the reference's own sampling error adds to an MSE measured against it."""
        return self.sigma2(metric) / self.reference_samples

    def mse_raw(self, metric: str = "final") -> np.ndarray:
        return self.final_mse_raw if metric == "final" else self.all_mse_raw

    def mse(self, metric: str = "final") -> np.ndarray:
        """Noise-corrected MSE: an unbiased estimate of the error against the exact means."""
        return self.mse_raw(metric) - self.noise_floor(metric)


def reference_sha256(all_layer_means: np.ndarray, avg_variance: float) -> str:
    """Pins the reference a band was measured against, so a re-baked dataset invalidates it."""
    import hashlib

    digest = hashlib.sha256(np.ascontiguousarray(all_layer_means, dtype=np.float32).tobytes())
    digest.update(repr(float(avg_variance)).encode())
    return digest.hexdigest()


def per_layer_mse(layer_means: np.ndarray, truth: np.ndarray) -> np.ndarray:
    """(K, depth) MSE of float32 means against the float32 reference, computed in float64."""
    diff = layer_means.astype(np.float64) - np.asarray(truth, dtype=np.float64)[None]
    return np.mean(diff**2, axis=2)


def measure_mlp(
    weights: np.ndarray,
    truth: np.ndarray,
    avg_variance: float,
    plan: BandPlan,
    *,
    index: int,
    mlp_seed: int,
    mlp_name: str = "",
    reference_samples: int,
    on_chunk: ChunkFn | None = None,
) -> MLPBand:
    """The band of one MLP: one pass on its band stream, MSE against its reference at each checkpoint."""
    import time

    started = time.perf_counter()
    result = checkpoint_means(
        list(weights), plan.checkpoints, band_rng(mlp_seed),
        variance_samples=plan.variance_samples, on_chunk=on_chunk,
    )
    return MLPBand(
        index=int(index),
        mlp_seed=int(mlp_seed),
        mlp_name=str(mlp_name),
        n=result.n,
        flops=np.asarray([plan.flops(n) for n in result.n], dtype=np.int64),
        per_layer_mse_raw=per_layer_mse(result.layer_means, truth),
        avg_variance=float(avg_variance),
        layer_avg_variance=result.layer_avg_variance,
        variance_samples=result.variance_samples,
        reference_samples=int(reference_samples),
        reference_sha256=reference_sha256(truth, avg_variance),
        wall_time_s=time.perf_counter() - started,
    )


def mlp_band_to_dict(band: MLPBand) -> dict[str, Any]:
    """Plain JSON-able dict; floats keep their exact repr."""
    return {
        "index": band.index,
        "mlp_seed": band.mlp_seed,
        "mlp_name": band.mlp_name,
        "n": [int(v) for v in band.n],
        "flops": [int(v) for v in band.flops],
        "per_layer_mse_raw": [[float(v) for v in row] for row in band.per_layer_mse_raw],
        "final_mse_raw": [float(v) for v in band.final_mse_raw],
        "final_mse": [float(v) for v in band.mse("final")],
        "all_layers_mse_raw": [float(v) for v in band.all_mse_raw],
        "all_layers_mse": [float(v) for v in band.mse("all")],
        "avg_variance": band.avg_variance,
        "layer_avg_variance": [float(v) for v in band.layer_avg_variance],
        "variance_samples": band.variance_samples,
        "reference_samples": band.reference_samples,
        "final_noise_floor": band.noise_floor("final"),
        "all_layers_noise_floor": band.noise_floor("all"),
        "reference_sha256": band.reference_sha256,
        "wall_time_s": band.wall_time_s,
    }


def mlp_band_from_dict(data: dict[str, Any]) -> MLPBand:
    """The inverse of ``mlp_band_to_dict``; ``BandError`` when the arrays do not fit together."""
    band = _mlp_band_fields(data)
    k = band.n.shape
    if band.n.ndim != 1 or band.flops.shape != k or band.per_layer_mse_raw.ndim != 2 or \
            band.per_layer_mse_raw.shape[0] != k[0] or band.layer_avg_variance.shape != band.per_layer_mse_raw.shape[1:]:
        raise BandError(f"arrays of mismatched shapes: n {band.n.shape}, flops {band.flops.shape}, per_layer_mse_raw "
                        f"{band.per_layer_mse_raw.shape}, layer_avg_variance {band.layer_avg_variance.shape}")
    if not (np.isfinite(band.per_layer_mse_raw).all() and np.isfinite(band.avg_variance)):
        raise BandError("non-finite MSE or variance")
    return band


def _mlp_band_fields(data: dict[str, Any]) -> MLPBand:
    return MLPBand(
        index=int(data["index"]),
        mlp_seed=int(data["mlp_seed"]),
        mlp_name=str(data.get("mlp_name", "")),
        n=np.asarray(data["n"], dtype=np.int64),
        flops=np.asarray(data["flops"], dtype=np.int64),
        per_layer_mse_raw=np.asarray(data["per_layer_mse_raw"], dtype=np.float64),
        avg_variance=float(data["avg_variance"]),
        layer_avg_variance=np.asarray(data["layer_avg_variance"], dtype=np.float64),
        variance_samples=int(data["variance_samples"]),
        reference_samples=int(data["reference_samples"]),
        reference_sha256=str(data.get("reference_sha256", "")),
        wall_time_s=float(data.get("wall_time_s", float("nan"))),
    )


# ---------------------------------------------------------------------------
# across MLPs
# ---------------------------------------------------------------------------


def band_table(mlps: Sequence[MLPBand], metric: str = "final") -> pd.DataFrame:
    """One row per checkpoint: percentiles across MLPs of the corrected MSE, means, and sigma^2 / N.

    ``expected`` is the analytic mean sigma^2 / N over the same MLPs, the line
    the measured percentiles should straddle.
    """
    if metric not in METRICS:
        raise BandError(f"metric must be one of {', '.join(METRICS)}, got {metric!r}")
    if not mlps:
        return pd.DataFrame(columns=["n", "flops", *[f"p{q}" for q in QUANTILES], "mean", "mean_raw",
                                     "expected", "n_mlps"])
    n = mlps[0].n
    for band in mlps:
        if not np.array_equal(band.n, n):
            raise BandError(f"MLP {band.index} was measured at other checkpoints; recompute the band")
    corrected = np.stack([b.mse(metric) for b in mlps])
    raw = np.stack([b.mse_raw(metric) for b in mlps])
    sigma2 = float(np.mean([b.sigma2(metric) for b in mlps]))
    table = pd.DataFrame({"n": n, "flops": mlps[0].flops})
    for q, values in zip(QUANTILES, np.percentile(corrected, QUANTILES, axis=0), strict=True):
        table[f"p{q}"] = values
    table["mean"] = corrected.mean(axis=0)
    table["mean_raw"] = raw.mean(axis=0)
    table["expected"] = sigma2 / n
    table["n_mlps"] = len(mlps)
    return table




@dataclass(frozen=True)
class EqualFlopsComparison:
    """How a measured MSE compares with sampling that spends the same FLOPs."""

    flops: float
    samples: float
    sampling_mse: float
    measured_mse: float
    noise_floor: float
    times_better: float  # sampling_mse / measured_mse (measured includes the reference noise)
    times_better_corrected: float | None  # against measured - floor, when that is clearly positive
    at_noise_floor: bool


def compare_with_sampling(
    flops: float, measured_mse: float, *, mean_sigma2: float, flops_per_sample: float, noise_floor: float
) -> EqualFlopsComparison:
    """"k x better than sampling at equal FLOPs", honest about the reference's noise.

    The measured MSE includes the reference's own noise, so the plain ratio is
    a lower bound on the true one. When the measured MSE is more than twice the
    floor, the corrected ratio (floor subtracted) is given too; closer to the
    floor the difference cannot be resolved and only the bound is meaningful.
    """
    expected = sampling_mse(flops, mean_sigma2, flops_per_sample)
    ratio = expected / measured_mse if measured_mse > 0 else float("inf")
    corrected = None
    if measured_mse > 2 * noise_floor:
        corrected = expected / (measured_mse - noise_floor)
    return EqualFlopsComparison(
        flops=float(flops),
        samples=float(flops) / float(flops_per_sample),
        sampling_mse=expected,
        measured_mse=float(measured_mse),
        noise_floor=float(noise_floor),
        times_better=ratio,
        times_better_corrected=corrected,
        at_noise_floor=measured_mse <= 2 * noise_floor,
    )
