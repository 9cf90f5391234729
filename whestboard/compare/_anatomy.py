"""Where an estimator's error comes from: by layer, by neuron type, by activation size, neuron by neuron.

Inputs are plain arrays: predictions and reference means ``(mlps, depth, width)`` (row 0 is ``h_1``)
and, for the final layer, which neurons are dead or always-on (the MLP page's definitions,
``whestboard.data._mlp_stats``; every other neuron is kinked: sometimes clipped by its ReLU). The same
functions take one run (``a``) or a pair (``a`` and ``b``: then each part is also given for A - B).

Shares of the final-layer squared error are sums over disjoint neuron sets (numpy's pairwise sum, within
a few ulps of the exactly rounded one), and the total is defined as the sum of the three parts, so they
add up to it exactly and each share is its part over that total.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from whestboard.data import DEAD_MEAN_THRESHOLD, always_on_mask, dead_mask, heatmap_bins, vector_matrix

CLASSES = ("dead", "kinked", "always_on")
CLASS_LABELS = {"dead": "dead", "kinked": "kinked (sometimes clipped)", "always_on": "always-on"}
#: Bins of |true mean| (log-spaced over the positive range) in the error-vs-activation plot.
TRUTH_BINS = 12
WORST_NEURONS = 20


def final_layer_classes(means: np.ndarray, last_weights: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(dead, always_on) masks of the final layer of one MLP, as the MLP page defines them.

    Only the last weight matrix is needed: the clipped part ``E[h_L] - W_L^T E[h_{L-1}]`` of the
    final layer (``E[h_0] = 0`` for a one-layer MLP).
    """
    means64 = np.asarray(means, dtype=np.float64)
    previous = means64[-2] if means64.shape[0] > 1 else np.zeros(means64.shape[1])
    clipped = means64[-1] - vector_matrix(previous, np.asarray(last_weights, dtype=np.float64))
    return dead_mask(means64[-1]), always_on_mask(means64[-1], clipped)


def squared_errors(predictions: np.ndarray, truth: np.ndarray) -> np.ndarray:
    """``(pred - truth)^2`` in float64 (the difference of two float32 values is exact there)."""
    return (np.asarray(predictions, dtype=np.float64) - np.asarray(truth, dtype=np.float64)) ** 2


def per_layer_mse(predictions: np.ndarray, truth: np.ndarray) -> np.ndarray:
    """``(depth,)``: each MLP's per-layer MSE, averaged over MLPs (the grader's ``per_layer_mse``)."""
    return sweep_layers(predictions, truth, [0] * len(predictions), k=0).per_layer_a


@dataclass(frozen=True)
class ClassShares:
    """Final-layer squared error summed over each neuron type (over every MLP given)."""

    parts: dict[str, float]  # class -> summed squared error
    counts: dict[str, int]  # class -> neurons
    total: float  # parts summed: exactly dead + kinked + always_on

    def share(self, name: str) -> float:
        return self.parts[name] / self.total if self.total else float("nan")

    def as_dict(self) -> dict:
        return {"parts": dict(self.parts), "counts": dict(self.counts), "total": self.total,
                "shares": {c: self.share(c) for c in CLASSES}}


def class_shares(values: np.ndarray, dead: np.ndarray, always_on: np.ndarray) -> ClassShares:
    """Sum ``values`` (a squared error, or a difference of two) over dead / kinked / always-on neurons.

    ``values``, ``dead`` and ``always_on`` are ``(mlps, width)``; a neuron is never both dead and
    always-on (always-on needs a mean above the dead threshold), so the three sets partition the layer.
    """
    values = np.asarray(values, dtype=np.float64)
    dead = np.asarray(dead, dtype=bool)
    always_on = np.asarray(always_on, dtype=bool) & ~dead
    kinked = ~dead & ~always_on
    masks = {"dead": dead, "kinked": kinked, "always_on": always_on}
    parts = {name: float(np.sum(values, where=mask)) for name, mask in masks.items()}
    total = parts["dead"] + parts["kinked"] + parts["always_on"]
    return ClassShares(parts, {name: int(mask.sum()) for name, mask in masks.items()}, total)


@dataclass(frozen=True)
class TruthBins:
    """Mean squared error of neurons grouped by |true mean| (final layer)."""

    edges: np.ndarray  # (bins + 1,) of |true mean|; the first bin holds the dead ones (<= threshold)
    counts: np.ndarray  # (bins,)
    mean_a: np.ndarray  # (bins,) NaN where empty
    mean_b: np.ndarray | None

    def as_dict(self) -> dict:
        def listed(x):
            return None if x is None else [None if not np.isfinite(v) else float(v) for v in x]
        return {"edges": [float(e) for e in self.edges], "counts": [int(c) for c in self.counts],
                "mean_a": listed(self.mean_a), "mean_b": listed(self.mean_b)}


def error_by_truth(truth: np.ndarray, sq_a: np.ndarray, sq_b: np.ndarray | None = None,
                   *, bins: int = TRUTH_BINS) -> TruthBins:
    """Final-layer squared error against |true mean|: one bin for dead neurons, then log-spaced bins."""
    size = np.abs(np.asarray(truth, dtype=np.float64)).ravel()
    alive = size > DEAD_MEAN_THRESHOLD
    if alive.any():
        lo, hi = float(size[alive].min()), float(size[alive].max())
        hi = hi if hi > lo else lo * 10
        log_edges = np.logspace(math.log10(lo), math.log10(hi), bins)
    else:
        log_edges = np.logspace(-6, 0, bins)
    edges = np.concatenate([[0.0], log_edges])
    which = np.where(alive, np.clip(np.searchsorted(log_edges, size, side="right"), 1, bins - 1), 0)
    counts = np.bincount(which, minlength=bins)

    def means(values):
        sums = np.bincount(which, weights=np.asarray(values, dtype=np.float64).ravel(), minlength=bins)
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(counts > 0, sums / np.maximum(counts, 1), np.nan)

    return TruthBins(edges, counts, means(sq_a), None if sq_b is None else means(sq_b))


def worst_neurons(pred_a: np.ndarray, truth: np.ndarray, indices: list[int], pred_b: np.ndarray | None = None,
                  *, k: int = WORST_NEURONS) -> list[dict]:
    """The ``k`` neurons (any MLP, any layer) with A's largest squared error, largest first.

    With ``pred_b``, ranked by A's excess over B instead (``err_A^2 - err_B^2``): where A loses most.
    """
    return sweep_layers(pred_a, truth, indices, pred_b, k=k).worst


@dataclass(frozen=True)
class LayerSweep:
    """What one pass over the layers gives: per-layer MSE of each side and the worst neurons."""

    per_layer_a: np.ndarray  # (depth,)
    per_layer_b: np.ndarray | None
    worst: list[dict]


def sweep_layers(pred_a: np.ndarray, truth: np.ndarray, indices: list[int], pred_b: np.ndarray | None = None,
                 *, k: int = WORST_NEURONS) -> LayerSweep:
    """Per-layer MSEs and the ``k`` worst neurons in one pass, a layer at a time.

    A layer of 1000 MLPs at width 1024 is 8 MB in float64, so memory stays bounded whatever the depth,
    and each squared error is computed once for both results.
    """
    mlps, depth, width = np.shape(pred_a)
    per_a, per_b = np.zeros(depth), np.zeros(depth)
    candidates: list[tuple[float, int, int, int]] = []  # (key, mlp position, layer, neuron)
    for layer in range(depth):
        sq = squared_errors(pred_a[:, layer], truth[:, layer])
        per_a[layer] = sq.mean(axis=1).mean() if sq.size else np.nan
        if pred_b is not None:
            sq_b = squared_errors(pred_b[:, layer], truth[:, layer])
            per_b[layer] = sq_b.mean(axis=1).mean() if sq_b.size else np.nan
            sq -= sq_b
        if sq.size == 0 or k <= 0:
            continue
        # The k largest values lie in the k rows (MLPs) with the largest maxima: partition only those.
        rows = np.argsort(-sq.max(axis=1), kind="stable")[:k]
        flat = sq[rows].ravel()
        take = min(k, flat.size)
        top = np.argpartition(-flat, take - 1)[:take]
        candidates += [(float(flat[p]), int(rows[int(p) // width]), layer, int(p) % width) for p in top]
    candidates.sort(key=lambda c: (-c[0], c[1], c[2], c[3]))
    worst = []
    for _, m, layer, neuron in candidates[:k]:
        sq_a = squared_errors(pred_a[m, layer], truth[m, layer])
        row = {"mlp_index": int(indices[m]), "layer": layer + 1, "neuron": neuron,
               "truth": float(truth[m, layer, neuron]), "predicted_a": float(pred_a[m, layer, neuron]),
               "sq_error_a": float(sq_a[neuron]), "layer_mse_a": float(sq_a.mean())}
        if pred_b is not None:
            sq_b = squared_errors(pred_b[m, layer], truth[m, layer])
            row.update(predicted_b=float(pred_b[m, layer, neuron]), sq_error_b=float(sq_b[neuron]),
                       layer_mse_b=float(sq_b.mean()))
        worst.append(row)
    return LayerSweep(per_a, per_b if pred_b is not None else None, worst)


@dataclass(frozen=True)
class ErrorHeatmap:
    """One MLP's error, layers x neurons, binned to at most ``MAX_HEATMAP_COLUMNS`` columns."""

    mlp_index: int
    values: np.ndarray  # (depth, columns): mean of the binned signed quantity
    starts: np.ndarray
    stops: np.ndarray
    quantity: str


def error_heatmap(mlp_index: int, pred_a: np.ndarray, truth: np.ndarray, pred_b: np.ndarray | None = None) -> ErrorHeatmap:
    """A's squared error per neuron of one MLP, or A's minus B's when B is given (negative: A better)."""
    sq = squared_errors(pred_a, truth)
    quantity = "squared error"
    if pred_b is not None:
        sq = sq - squared_errors(pred_b, truth)
        quantity = "squared error A - B"
    bins = heatmap_bins(sq)
    return ErrorHeatmap(int(mlp_index), bins.values, bins.starts, bins.stops, quantity)
