"""Per-MLP statistics behind the explorer: what the ground truth and the weights say.

Everything here is plain numpy on one MLP's ground-truth means ``(depth, width)``
and weights ``(depth, width, width)``. Conventions follow whestbench exactly:
``h_0 = x``, ``h_l = ReLU(h_{l-1} @ W_l)``, so ``W_l[i, j]`` connects neuron ``i``
of layer ``l-1`` to neuron ``j`` of layer ``l``. Arrays index layers from 0
(row 0 is ``h_1``); pages show them 1-based, as the challenge does.

Two neuron classes are read off the reference itself, never off a model:

* **dead**: ground-truth mean at most ``DEAD_MEAN_THRESHOLD`` (the same rule as
  ``Dataset.summary``), i.e. the neuron never fired on the reference samples;
* **always-on**: the ReLU barely clips it. Because the reference means are
  sample means over one set of inputs, ``E[h] - W^T E[h_prev]`` equals the
  sample mean of ``max(-z, 0)`` (z the pre-activation) exactly, up to float32
  rounding. A neuron is always-on when that clipped part is under
  ``ALWAYS_ON_RELATIVE_CLIP`` of its mean (for a Gaussian z: negative on less
  than about 1% of inputs), so it behaves linearly for estimation purposes.
  Layer 1 uses the exact input mean E[x] = 0 rather than the reference's
  (unstored) sample mean, so its clipped part carries that sampling noise; it
  is never near 0 there anyway, a Gaussian pre-activation being negative half
  the time.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from whestboard.data._datasets import DEAD_MEAN_THRESHOLD
from whestboard.rules import erf
from whestboard.cache import Region

#: Always-on when the mean clipped part E[max(-z, 0)] is below this fraction of E[h].
ALWAYS_ON_RELATIVE_CLIP = 1e-3
#: Percentiles of the neuron means drawn in the ribbon, outermost first.
RIBBON_PERCENTILES = (0.0, 5.0, 25.0, 50.0, 75.0, 95.0, 100.0)
#: The heatmap never sends more columns than this, whatever the width.
MAX_HEATMAP_COLUMNS = 256
#: Lanczos steps for the spectral-norm estimate (a lower bound that tightens with more).
LANCZOS_STEPS = 20
#: Largest incoming / outgoing weights listed in the neuron drill-down.
TOP_WEIGHTS = 8
FINAL_HISTOGRAM_BINS = 40


# ---------------------------------------------------------------------------
# matrix-vector products without BLAS threads
# ---------------------------------------------------------------------------


def vector_matrix(vector: np.ndarray, matrix: np.ndarray) -> np.ndarray:
    """``vector @ matrix`` by numpy's own einsum loop instead of a threaded BLAS gemv.

    On a busy 2-core server OpenBLAS spreads each 1024 x 1024 gemv over threads
    that wait on each other: ~20 ms per product instead of ~0.5 ms. einsum's
    row-wise loop is as fast as single-threaded BLAS and never oversubscribes.
    """
    return np.einsum("ji,j->i", matrix, vector)


# ---------------------------------------------------------------------------
# ground-truth means
# ---------------------------------------------------------------------------


def ribbon_quantiles(means: np.ndarray) -> np.ndarray:
    """``(depth, len(RIBBON_PERCENTILES))``: the spread of neuron means at each layer."""
    return np.percentile(np.asarray(means, dtype=np.float64), RIBBON_PERCENTILES, axis=1).T


def reference_pre_activation_means(means: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """``E[z_l] = W_l^T E[h_{l-1}]`` from the reference means (E[h_0] = E[x] = 0)."""
    means64 = np.asarray(means, dtype=np.float64)
    previous = np.zeros(means64.shape[1])
    out = np.empty_like(means64)
    for layer, w in enumerate(weights):
        out[layer] = vector_matrix(previous, np.asarray(w, dtype=np.float64))
        previous = means64[layer]
    return out


def clipped_means(means: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """``E[max(-z, 0)] = E[h] - E[z]`` per neuron: how much the ReLU cut off on average."""
    return np.asarray(means, dtype=np.float64) - reference_pre_activation_means(means, weights)


def dead_mask(means: np.ndarray) -> np.ndarray:
    return np.asarray(means) <= DEAD_MEAN_THRESHOLD


def always_on_mask(means: np.ndarray, clipped: np.ndarray) -> np.ndarray:
    means64 = np.asarray(means, dtype=np.float64)
    return (means64 > DEAD_MEAN_THRESHOLD) & (clipped <= ALWAYS_ON_RELATIVE_CLIP * means64)


def final_histogram(final_means: np.ndarray, bins: int = FINAL_HISTOGRAM_BINS) -> tuple[np.ndarray, np.ndarray]:
    """Counts and edges of the final-layer means, binned here so the browser gets 2*bins numbers."""
    values = np.asarray(final_means, dtype=np.float64)
    lo, hi = (float(values.min()), float(values.max())) if values.size else (0.0, 1.0)
    if hi <= lo:
        hi = lo + 1.0
    return np.histogram(values, bins=bins, range=(lo, hi))


# ---------------------------------------------------------------------------
# heatmap aggregation
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class HeatmapBins:
    """Layers x columns view of the means; each column averages ``bin_size`` neurons.

    With ``ordered`` the neurons of every layer are sorted by mean first, so a
    column is a rank range (neuron j of one layer has nothing to do with neuron
    j of the next, so sorting each layer separately loses nothing).
    """

    values: np.ndarray  # (depth, columns) mean of the bin
    low: np.ndarray  # (depth, columns) smallest mean in the bin
    high: np.ndarray  # (depth, columns) largest mean in the bin
    representative: np.ndarray  # (depth, columns) neuron holding the bin's (lower) median mean
    starts: np.ndarray  # (columns,) first position of each bin
    stops: np.ndarray  # (columns,) one past the last position
    order: np.ndarray  # (depth, width) neuron at each position
    ordered: bool

    @property
    def bin_size(self) -> int:
        return int(self.stops[0] - self.starts[0]) if len(self.starts) else 1

    @property
    def columns(self) -> int:
        return len(self.starts)

    def neuron_at(self, layer: int, column: int) -> int:
        """The neuron a click on cell (layer, column) stands for."""
        return int(self.representative[layer, column])


def heatmap_bins(means: np.ndarray, *, max_columns: int = MAX_HEATMAP_COLUMNS, ordered: bool = False) -> HeatmapBins:
    """Aggregate ``(depth, width)`` means to at most ``max_columns`` equal bins per layer."""
    means = np.asarray(means, dtype=np.float64)
    depth, width = means.shape
    size = -(-width // max(1, max_columns))
    if ordered:
        order = np.argsort(means, axis=1, kind="stable")
    else:
        order = np.broadcast_to(np.arange(width), (depth, width))
    arranged = np.take_along_axis(means, order, axis=1)
    starts = np.arange(0, width, size)
    stops = np.minimum(starts + size, width)
    counts = stops - starts
    values = np.add.reduceat(arranged, starts, axis=1) / counts
    low = np.minimum.reduceat(arranged, starts, axis=1)
    high = np.maximum.reduceat(arranged, starts, axis=1)
    representative = np.empty((depth, len(starts)), dtype=np.int64)
    rows = np.arange(depth)
    for column, (start, stop) in enumerate(zip(starts, stops, strict=True)):
        within = np.argsort(arranged[:, start:stop], axis=1, kind="stable")
        median_position = start + within[:, (stop - start - 1) // 2]
        representative[:, column] = order[rows, median_position]
    return HeatmapBins(values, low, high, representative, starts, stops, np.array(order), ordered)


# ---------------------------------------------------------------------------
# weights
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class WeightStats:
    """Per-layer summaries of ``W_l``; He init predicts std sqrt(2/width)."""

    entry_mean: np.ndarray  # (depth,)
    entry_std: np.ndarray  # (depth,)
    incoming_norm_quantiles: np.ndarray  # (depth, 5): min, q1, median, q3, max of ||W_l[:, j]||
    spectral_norm: np.ndarray  # (depth,) lower-bound estimate of the largest singular value
    he_std: float  # sqrt(2 / width): the std every entry was drawn with


NORM_PERCENTILES = (0.0, 25.0, 50.0, 75.0, 100.0)


def squared_incoming_norms(weights: np.ndarray) -> np.ndarray:
    """``(depth, width)``: ``||W_l[:, j]||^2``, summed in float64."""
    return np.stack([np.einsum("ij,ij->j", w, w, dtype=np.float64) for w in weights])




def _span_component(basis: np.ndarray, x: np.ndarray) -> np.ndarray:
    """The part of ``x`` inside the span of the orthonormal rows of ``basis``."""
    return np.einsum("kn,k->n", basis, np.einsum("kn,n->k", basis, x))


def spectral_norm_estimate(matrix: np.ndarray, *, steps: int = LANCZOS_STEPS, seed: int = 0) -> float:
    """Largest singular value by Golub-Kahan-Lanczos bidiagonalisation.

    The singular values of random matrices crowd at the top edge, which makes
    plain power iteration crawl (1-2% low after a dozen steps at width 1024);
    Lanczos with full re-orthogonalisation is within ~0.5% after 20 steps.
    A Ritz value, so never above the true norm.
    """
    w = np.asarray(matrix, dtype=np.float32)
    n = w.shape[1]
    steps = max(1, min(steps, n, w.shape[0]))
    right = np.zeros((steps + 1, n))
    left = np.zeros((steps, w.shape[0]))
    start = np.random.default_rng(seed).standard_normal(n)
    right[0] = start / np.linalg.norm(start)
    alphas, betas = [], []
    beta, previous_left = 0.0, np.zeros(w.shape[0])
    for k in range(steps):
        u = np.einsum("ij,j->i", w, right[k].astype(np.float32)).astype(np.float64) - beta * previous_left
        u -= _span_component(left[:k], u)
        alpha = float(np.linalg.norm(u))
        alphas.append(alpha)
        if alpha <= 1e-12:
            break
        left[k] = previous_left = u / alpha
        v = vector_matrix(left[k].astype(np.float32), w).astype(np.float64) - alpha * right[k]
        v -= _span_component(right[: k + 1], v)
        beta = float(np.linalg.norm(v))
        if beta <= 1e-12 * alpha:
            break
        betas.append(beta)
        right[k + 1] = v / beta
    m = len(alphas)
    bidiagonal = np.diag(alphas) + np.diag(betas[: m - 1], 1)
    return float(np.linalg.svd(bidiagonal, compute_uv=False)[0])


def weight_stats(weights: np.ndarray) -> WeightStats:
    squared_norms = squared_incoming_norms(weights)
    entries = weights.shape[1] * weights.shape[2]
    entry_mean = np.array([w.sum(dtype=np.float64) for w in weights]) / entries
    # E[w^2] - E[w]^2 from sums already at hand; the mean is ~1e-4 of the std, so no cancellation.
    entry_var = squared_norms.sum(axis=1) / entries - entry_mean**2
    return WeightStats(
        entry_mean=entry_mean,
        entry_std=np.sqrt(np.maximum(entry_var, 0.0)),
        incoming_norm_quantiles=np.percentile(np.sqrt(squared_norms), NORM_PERCENTILES, axis=1).T,
        spectral_norm=np.array([spectral_norm_estimate(w) for w in weights]),
        he_std=float(np.sqrt(2.0 / weights.shape[-1])),
    )


# ---------------------------------------------------------------------------
# mean field (whestbench's MeanPropagationEstimator, in numpy)
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class MeanField:
    """Diagonal (independent-neuron) Gaussian propagation, layer by layer."""

    pre_mean: np.ndarray  # (depth, width)
    pre_var: np.ndarray  # (depth, width), floored at 1e-12 as whestbench does
    post_mean: np.ndarray  # (depth, width): MeanPropagationEstimator's prediction
    post_var: np.ndarray  # (depth, width)
    active_probability: np.ndarray  # (depth, width): Phi(mu/sigma)


def _normal_pdf(x: np.ndarray) -> np.ndarray:
    return np.exp(-0.5 * x * x) / np.sqrt(2.0 * np.pi)


def _normal_cdf(x: np.ndarray) -> np.ndarray:
    # flopscope's own erf, so the numbers match flops.stats.norm.cdf bit for bit.
    return 0.5 * (1.0 + erf(x / np.sqrt(2.0)))


def mean_field(weights: np.ndarray) -> MeanField:
    """The recursion of ``whestbench.estimators.MeanPropagationEstimator.predict``."""
    depth, width = len(weights), weights[0].shape[0]
    mu, var = np.zeros(width), np.ones(width)
    out = {name: np.empty((depth, width)) for name in ("pre_mean", "pre_var", "post_mean", "post_var", "active")}
    for layer, w in enumerate(weights):
        # whestbench computes w.T @ mu with float32 w and float64 mu (so in float64), and
        # squares w in float32 first; the same products, summed in another order.
        mu_pre = vector_matrix(mu, np.asarray(w, dtype=np.float64))
        var_pre = np.maximum(vector_matrix(var, np.asarray(w * w, dtype=np.float64)), 1e-12)
        sigma_pre = np.sqrt(var_pre)
        alpha = mu_pre / sigma_pre
        phi, big_phi = _normal_pdf(alpha), _normal_cdf(alpha)
        mu = mu_pre * big_phi + sigma_pre * phi
        ez2 = (mu_pre * mu_pre + var_pre) * big_phi + mu_pre * sigma_pre * phi
        var = np.maximum(ez2 - mu * mu, 0.0)
        for name, value in (("pre_mean", mu_pre), ("pre_var", var_pre), ("post_mean", mu),
                            ("post_var", var), ("active", big_phi)):
            out[name][layer] = value
    return MeanField(out["pre_mean"], out["pre_var"], out["post_mean"], out["post_var"], out["active"])


# ---------------------------------------------------------------------------
# one MLP, everything the page shows
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class MLPStats:
    means: np.ndarray  # (depth, width) float32 ground truth
    avg_variance: float
    n_samples: int
    ribbon: np.ndarray  # (depth, 7)
    pre_mean_reference: np.ndarray  # (depth, width) W^T E[h_prev]
    clipped: np.ndarray  # (depth, width) E[max(-z, 0)]
    dead: np.ndarray  # (depth, width) bool
    always_on: np.ndarray  # (depth, width) bool
    weights: WeightStats
    mean_field: MeanField

    @property
    def depth(self) -> int:
        return self.means.shape[0]

    @property
    def width(self) -> int:
        return self.means.shape[1]

    @property
    def dead_fraction(self) -> np.ndarray:
        return self.dead.mean(axis=1)

    @property
    def always_on_fraction(self) -> np.ndarray:
        return self.always_on.mean(axis=1)

    @property
    def noise_floor(self) -> float:
        """This MLP's reference noise: avg_variance / N_ref."""
        return self.avg_variance / self.n_samples


def compute_mlp_stats(means: np.ndarray, weights: np.ndarray, avg_variance: float, n_samples: int) -> MLPStats:
    means = np.asarray(means, dtype=np.float32)
    if weights.shape != (means.shape[0], means.shape[1], means.shape[1]):
        raise ValueError(f"weights {weights.shape} do not fit means {means.shape}")
    pre_ref = reference_pre_activation_means(means, weights)
    clipped = means.astype(np.float64) - pre_ref
    return MLPStats(
        means=means,
        avg_variance=float(avg_variance),
        n_samples=int(n_samples),
        ribbon=ribbon_quantiles(means),
        pre_mean_reference=pre_ref,
        clipped=clipped,
        dead=dead_mask(means),
        always_on=always_on_mask(means, clipped),
        weights=weight_stats(weights),
        mean_field=mean_field(weights),
    )


# ---------------------------------------------------------------------------
# neuron drill-down
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Connection:
    neuron: int
    weight: float
    mean: float  # ground-truth mean of the neuron at the other end (0 for inputs)


@dataclass(frozen=True)
class NeuronDetail:
    layer: int  # 0-based row of the means (h_{layer+1})
    neuron: int
    truth_mean: float
    reference_pre_mean: float
    clipped: float
    dead: bool
    always_on: bool
    mf_pre_mean: float
    mf_pre_var: float
    mf_post_mean: float
    mf_active_probability: float
    incoming: tuple[Connection, ...]
    outgoing: tuple[Connection, ...]  # empty at the final layer


def largest_weights(vector: np.ndarray, k: int = TOP_WEIGHTS) -> np.ndarray:
    """Indices of the ``k`` entries largest in magnitude, largest first (ties: lower index)."""
    order = np.argsort(-np.abs(np.asarray(vector, dtype=np.float64)), kind="stable")
    return order[:k]


def neuron_detail(stats: MLPStats, weights: np.ndarray, layer: int, neuron: int, k: int = TOP_WEIGHTS) -> NeuronDetail:
    """Everything the drill-down shows for neuron ``neuron`` of row ``layer``."""
    if not 0 <= layer < stats.depth:
        raise IndexError(f"layer must be 1..{stats.depth}")
    if not 0 <= neuron < stats.width:
        raise IndexError(f"neuron must be 0..{stats.width - 1}")
    source_means = stats.means[layer - 1] if layer > 0 else np.zeros(stats.width, dtype=np.float32)
    column = weights[layer][:, neuron]
    incoming = tuple(Connection(int(i), float(column[i]), float(source_means[i])) for i in largest_weights(column, k))
    outgoing: tuple[Connection, ...] = ()
    if layer + 1 < stats.depth:
        row = weights[layer + 1][neuron, :]
        outgoing = tuple(Connection(int(j), float(row[j]), float(stats.means[layer + 1, j]))
                         for j in largest_weights(row, k))
    mf = stats.mean_field
    return NeuronDetail(
        layer=layer,
        neuron=neuron,
        truth_mean=float(stats.means[layer, neuron]),
        reference_pre_mean=float(stats.pre_mean_reference[layer, neuron]),
        clipped=float(stats.clipped[layer, neuron]),
        dead=bool(stats.dead[layer, neuron]),
        always_on=bool(stats.always_on[layer, neuron]),
        mf_pre_mean=float(mf.pre_mean[layer, neuron]),
        mf_pre_var=float(mf.pre_var[layer, neuron]),
        mf_post_mean=float(mf.post_mean[layer, neuron]),
        mf_active_probability=float(mf.active_probability[layer, neuron]),
        incoming=incoming,
        outgoing=outgoing,
    )


# ---------------------------------------------------------------------------
# per-process cache keyed by (dataset, MLP)
# ---------------------------------------------------------------------------


STATS_CACHE: Region[MLPStats] = Region("mlp-stats", max_entries=32)
#: The second level, through the configured backend (Redis when scaled out), never kept in this process.
SHARED_STATS: Region[MLPStats] = Region("mlp-stats-shared", max_entries=0, shared=True)


_SUMMARIES: Region[object] = Region("dataset-summaries", max_entries=16)


def summary_for(dataset):
    """``dataset.summary()``, computed once per opened dataset.

    A summary stacks every MLP's means (64 MB for 1000 MLPs at 1024 x 16), too
    much to redo on each page view. The registry re-opens a dataset whose files
    changed (a bake adding MLPs, a record damaged or repaired), and the new
    object's ``generation`` changes the key.
    """
    info = dataset.info
    key = (str(info.path), info.format, info.n_samples, dataset.generation)
    return _SUMMARIES.get_or_load(key, dataset.summary)


#: Part of every cache key: bump when a computation here changes, so a shared cache
#: (which outlives the process) never serves statistics computed the old way.
STATS_FORMAT = 1


def stats_cache_key(dataset, index: int) -> tuple:
    info = dataset.info
    return (STATS_FORMAT, str(info.path), info.format, info.n_samples, int(index))


def stats_for(dataset, index: int) -> MLPStats:
    """``MLPStats`` of one MLP of a ``whestboard.data._datasets.Dataset``, computed once per process.

    The cache service's shared backend (Redis when ``WHESTBOARD_REDIS_URL`` is set) is the second
    level, so gunicorn workers and restarts reuse the statistics instead of rebuilding 64 MiB of
    weights each.
    """
    key = stats_cache_key(dataset, index)

    def compute() -> MLPStats:
        means, avg_variance = dataset.truth(index)  # first: a damaged MLP raises, whatever is cached
        return SHARED_STATS.get_or_load(key, lambda: compute_mlp_stats(
            means, dataset.weights(index), avg_variance, dataset.info.n_samples))

    return STATS_CACHE.get_or_load(key, compute)
