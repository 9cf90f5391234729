"""Plain-numpy Monte Carlo sampling that reproduces whestbench bit for bit.

``whestbench.sample_layer_statistics`` meters every operation through flopscope,
which costs about a third of the machine's matrix throughput on the sizes the
challenge uses. Baking references and convergence bands needs hours of forward
passes, so this module performs the *same* operations in the *same* order with
plain numpy: the same chunk size, the same float32 draws from the same stream,
the same float64 accumulation. The result is bit-identical (the test suite
compares it with whestbench at several shapes) and the FLOP count is analytic
(``whestbench.budget.mc_flops_per_sample``), so nothing is lost by skipping the
meter.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np

from whestboard.rules import sampling_chunk_size

ProgressFn = Callable[[int, int], None]


def chunk_size_for(width: int) -> int:
    """The chunk size whestbench uses; chunk boundaries change float sums."""
    return sampling_chunk_size(width)


def _as_numpy_weights(weights: Sequence[np.ndarray]) -> list[np.ndarray]:
    return [np.ascontiguousarray(np.asarray(w), dtype=np.float32) for w in weights]


@dataclass
class RunningSums:
    """Float64 per-layer sums over the samples drawn so far."""

    layer_sums: np.ndarray  # (depth, width) float64
    final_sum_sq: np.ndarray  # (width,) float64
    n: int
    layer_sum_sq: np.ndarray | None = None  # (depth, width) float64, when asked for

    def layer_variances(self) -> np.ndarray:
        """Mean per-neuron variance of every layer, float64 ``(depth,)``: each layer's own noise floor
        times N. The last entry equals ``avg_variance()`` up to rounding; ``avg_variance()`` stays the
        one whestbench forms."""
        if self.layer_sum_sq is None:
            raise ValueError("the sampler was not asked for per-layer squares")
        means = self.layer_sums / self.n
        return np.mean(self.layer_sum_sq / self.n - means**2, axis=1)

    def layer_means(self) -> np.ndarray:
        """Per-layer means as whestbench rounds them: float64 divide, then float32."""
        return np.asarray(self.layer_sums / self.n, dtype=np.float32)

    def avg_variance(self) -> float:
        """Mean final-layer variance exactly as ``sample_layer_statistics`` forms it."""
        final_mean = self.layer_means()[-1].astype(np.float64)
        return float(np.mean(self.final_sum_sq / self.n - final_mean**2))


def iter_chunk_sums(
    weights: Sequence[np.ndarray],
    n_samples: int,
    rng: np.random.Generator,
    *,
    with_squares: bool = True,
    layer_squares: bool = False,
) -> Iterator[RunningSums]:
    """Yield the running sums after every chunk of whestbench's chunked sampler.

    One pass produces every prefix that ends on a chunk boundary, which is what
    lets the convergence band record many checkpoints for the price of one run.
    """
    ws = _as_numpy_weights(weights)
    depth, width = len(ws), ws[0].shape[0]
    chunk = chunk_size_for(width)
    sums = np.zeros((depth, width), dtype=np.float64)
    final_sq = np.zeros(width, dtype=np.float64)
    layer_sq = np.zeros((depth, width), dtype=np.float64) if layer_squares else None
    done = 0
    for start in range(0, n_samples, chunk):
        n = min(chunk, n_samples - start)
        x = rng.standard_normal((n, width), dtype=np.float32)
        for layer, w in enumerate(ws):
            x = np.matmul(x, w)
            np.maximum(x, 0.0, out=x)
            # whestbench sums x.astype(float64) over axis 0; a float64 reduce of the float32 rows adds
            # them in the same order (row by row), so the same bits, without the float64 copy
            sums[layer] = sums[layer] + np.add.reduce(x, axis=0, dtype=np.float64)
            if layer_sq is not None:
                layer_sq[layer] += np.sum(np.square(x, dtype=np.float64), axis=0)
        if with_squares:
            final_sq = final_sq + np.sum(np.square(x, dtype=np.float64), axis=0)
        done += n
        yield RunningSums(layer_sums=sums, final_sum_sq=final_sq, n=done, layer_sum_sq=layer_sq)


def layer_statistics(
    weights: Sequence[np.ndarray],
    n_samples: int,
    rng: np.random.Generator,
    *,
    progress: ProgressFn | None = None,
) -> tuple[np.ndarray, float]:
    """``(all_layer_means float32 (depth, width), avg_variance)`` as whestbench computes them."""
    sums = final_sums(weights, n_samples, rng, progress=progress)
    return sums.layer_means(), sums.avg_variance()


def final_sums(
    weights: Sequence[np.ndarray],
    n_samples: int,
    rng: np.random.Generator,
    *,
    progress: ProgressFn | None = None,
    layer_squares: bool = False,
) -> RunningSums:
    """The sums after all ``n_samples``; with ``layer_squares`` also every layer's sum of squares
    (one more reduction per layer, the means and ``avg_variance`` unchanged bit for bit)."""
    if n_samples <= 0:
        raise ValueError("n_samples must be positive")
    width = np.asarray(weights[0]).shape[0]
    total = -(-n_samples // chunk_size_for(width))
    sums: RunningSums | None = None
    chunks = iter_chunk_sums(weights, n_samples, rng, layer_squares=layer_squares)
    for i, chunk_sums in enumerate(chunks, start=1):
        sums = chunk_sums
        if progress is not None:
            progress(i, total)
    assert sums is not None
    return sums
